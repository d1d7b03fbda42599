r"""Time writing a run's files (:func:`pyg_fedgraph.simulation.report.write_run`)
as the federation grows.

A run of :math:`N` clients with a collaboration graph writes the matrix
(``collaboration.npz``, ``collaboration_topk.csv``, and the full
``collaboration.csv`` only up to 200 clients) and draws it twice
(``collaboration_matrix.png``, ``collaboration_graph.png``). Before, the full
matrix went to a CSV as text and the drawings placed every client, which took
minutes at a few thousand clients. This script times ``write_run`` on a random
row-stochastic matrix with sparse structure: clients fall into hidden clusters
of 50 (in shuffled order, so nothing is sorted for free); each client keeps a
weight for itself and gives weight to 8 random clients of its cluster and 2
random others, about 11 non-zeros per row. The history has 5 rounds of
per-client accuracies. Two cases per size:

* ``groups``: the clusters are passed as ``groups`` (like ``client_labels``);
* ``no groups``: the pictures order and aggregate clients by clustering the
  matrix themselves (the costlier path).

Each case reports the total seconds of ``write_run`` (median of ``--repeats``
runs) and, from one separate run of each piece, where the time goes: writing
the matrix files, ordering the clients, and each picture (drawn and saved).

The results file is rebuilt from the measurements, kept as one line of
``perf_records.jsonl`` beside it (``--report-only``: nothing is measured); its
"### Reading" blocks are written by hand and kept.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/perf/report_scaling.py           # N = 1,000 and 10,000
    OMP_NUM_THREADS=1 python benchmarks/perf/report_scaling.py --quick   # N = 300, prints only
    python benchmarks/perf/report_scaling.py --report-only    # the markdown from the record
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.engine.history import History, RoundRecord
from pyg_fedgraph.experiment.reporting import (
    RECORDS_NAME,
    machine_lines,
    measured_report,
)
from pyg_fedgraph.simulation.report import write_collaboration, write_run

SCRIPT = "benchmarks/perf/report_scaling.py"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "report_scaling.md"
#: The pieces of ``write_run``'s collaboration output, in the table's order.
PARTS = ["matrix files", "client order", "matrix png", "graph png"]


def make_matrix(n: int, cluster_size: int = 50, inside: int = 8, outside: int = 2,
                seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""A random row-stochastic :math:`(N, N)` float32 matrix with about
    ``1 + inside + outside`` non-zeros per row, and the hidden cluster of each
    client :math:`(N)`. Set-up only, vectorized."""
    gen = torch.Generator().manual_seed(seed)
    cluster = torch.randperm(n, generator=gen) // cluster_size
    members = torch.argsort(cluster, stable=True)  # clients grouped by cluster
    start = torch.searchsorted(cluster[members], cluster)
    size = torch.bincount(cluster)[cluster]
    pick = (torch.rand(n, inside, generator=gen) * size.unsqueeze(1)).long()
    same = members[start.unsqueeze(1) + pick]
    other = torch.randint(n, (n, outside), generator=gen)
    cols = torch.cat([torch.arange(n).unsqueeze(1), same, other], dim=1)
    vals = torch.rand(cols.shape, generator=gen)
    vals[:, 0] += 1.0  # a larger self weight, as most strategies keep
    w = torch.zeros(n, n).scatter_add_(1, cols, vals)
    return w / w.sum(dim=1, keepdim=True), cluster


def make_history(n: int, rounds: int = 5, seed: int = 0) -> History:
    gen = torch.Generator().manual_seed(seed)
    h = History("accuracy", True)
    for r in range(1, rounds + 1):
        val = {"accuracy": torch.rand(n, generator=gen)}
        test = {"accuracy": torch.rand(n, generator=gen)}
        h.append(RoundRecord(r, 1.0 / r, val, test, 0.1, n))
    return h


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def pieces(out: Path, w: torch.Tensor, groups: torch.Tensor | None) -> dict[str, float]:
    r"""Seconds of each part of ``write_run``'s collaboration output, called
    the way ``write_run`` calls them."""
    import matplotlib.pyplot as plt

    from pyg_fedgraph.viz import (
        client_order,
        plot_collaboration_matrix,
        plot_collaboration_network,
    )
    times = {"matrix files": timed(lambda: write_collaboration(out, w))}
    t0 = time.perf_counter()
    order = client_order(w, groups)
    times["client order"] = time.perf_counter() - t0

    def draw(plot, name):
        fig = plot()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
    times["matrix png"] = timed(lambda: draw(
        lambda: plot_collaboration_matrix(w, groups, after_round=5, order=order), "m.png"))
    times["graph png"] = timed(lambda: draw(
        lambda: plot_collaboration_network(w, None, groups, after_round=5, order=order),
        "g.png"))
    return times


def run_case(n: int, with_groups: bool, repeats: int) -> dict[str, Any]:
    w, cluster = make_matrix(n)
    groups = cluster if with_groups else None
    history = make_history(n)
    summary = {"strategy": "bench", "dataset": "synthetic", "rounds": 5}
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for _ in range(repeats):
            totals.append(timed(lambda: write_run(out, history, {"n": n}, summary,
                                                  collaboration=w, groups=groups)))
        sizes = {p.name: p.stat().st_size for p in out.iterdir()}
        (out / "pieces").mkdir()
        parts = pieces(out / "pieces", w, groups)
    return {"n": n, "case": "groups" if with_groups else "no groups",
            "total": statistics.median(totals), "range": (min(totals), max(totals)),
            "parts": parts, "sizes": sizes}


def mb(size: int) -> str:
    return f"{size / 1e6:.2f}" if size >= 1e4 else f"{size / 1e6:.4f}"


def report(record: dict[str, Any]) -> str:
    r"""The markdown of a run's record (``results/report_scaling.md``)."""
    lines = ["# Writing a run's files as N grows", "",
             "`benchmarks/perf/report_scaling.py`: `write_run` with a collaboration matrix of N "
             "clients (random row-stochastic, about 11 non-zeros per row in hidden clusters of "
             "50, float32) and 5 rounds of history. \"total s\" is the median of "
             f"{record['repeats']} runs of `write_run` (range in brackets): config, history, "
             "clients, summary, learning curve, matrix files and both pictures. The next "
             "columns come from one separate run of each piece: `write_collaboration` (npz, "
             "top-10 CSV, full CSV up to N = 200), `client_order` (sort by group, or clustering "
             "of the matrix when no groups are given), and each picture drawn and saved at 120 "
             "dpi. Sizes are the files `write_run` wrote, in MB.", "",
             "| N | case | total s | " + " | ".join(f"{p} s" for p in PARTS)
             + " | npz MB | top-k csv MB | clients.csv MB |",
             "|---:|---|---:|" + "---:|" * len(PARTS) + "---:|---:|---:|"]
    for r in record["results"]:
        lo, hi = r["range"]
        lines.append(
            f"| {r['n']:,} | {r['case']} | {r['total']:.2f} ({lo:.2f}-{hi:.2f}) | "
            + " | ".join(f"{r['parts'][p]:.2f}" for p in PARTS)
            + f" | {mb(r['sizes']['collaboration.npz'])} "
            f"| {mb(r['sizes']['collaboration_topk.csv'])} "
            f"| {mb(r['sizes']['clients.csv'])} |")
    lines += ["", "## Machine", "", *record["machine"],
              f"- command: `{record['command']}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="N = 300 only, prints only unless --out")
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--report-only", action="store_true",
                        help=f"rebuild the results file from its record in {RECORDS_NAME} "
                             "beside it, measuring nothing")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"markdown output (default: {RESULTS} unless --quick); the "
                             f"record goes to {RECORDS_NAME} in the same folder")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    out = args.out if args.out is not None else (None if args.quick else RESULTS)
    if args.report_only and out is None:
        parser.error("--report-only rebuilds a file: drop --quick or give --out")

    def measured() -> dict[str, Any]:
        sizes = args.sizes or ([300] if args.quick else [1000, 10000])
        repeats = args.repeats or (1 if args.quick else 3)
        load_start = os.getloadavg()[0]
        start = time.perf_counter()
        results = [run_case(n, g, repeats) for n in sizes for g in (True, False)]
        return {"repeats": repeats, "results": results,
                "machine": [*machine_lines(load_start),
                            f"- total time: {time.perf_counter() - start:.0f} s"],
                "command": " ".join([f"python {SCRIPT}", *argv])}

    text = measured_report(out, report, None if args.report_only else measured, script=SCRIPT)
    print(text)
    return text


if __name__ == "__main__":
    main()
