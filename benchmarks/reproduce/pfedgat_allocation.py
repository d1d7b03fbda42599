r"""pFedGAT's allocation and accuracy on digits, with and without the
similarity term, over several seeds (issue 4's acceptance checks).

For each seed and each split (IID, pathological: 2 classes per client), 10
clients, the CLI's digits defaults (MLP, 30 rounds, 2 local epochs):

* ``local``: Local training (the accuracy bar);
* ``pfedgat``: the strategy's defaults (GATConv with the similarity and self
  terms, held-out gradient feedback, SGD at the paper's 0.01);
* ``pfedgat-tau40``: ``similarity_scale=40`` instead of 80 (the similarity
  and self terms learned four times slower);
* ``pfedgat-paper``: ``similarity=False``, the paper's GAT exactly;
* ``pfedgat-logits``: ``use_gat=False, optimizer="adam", gat_lr=0.1``, the
  "without GAT" ablation (paper Table 4).

Reported per variant: mean and std over seeds of the test accuracy at the
best-validation round (``test`` in summary.json), how many seeds reach
Local's accuracy on the same seed, and from the final allocation matrix
:math:`A`: the share of each row on clients that share a class with it (self
included; uniform weights give the "chance" value), the mean off-diagonal
weight to clients sharing a class and to the others, the self weight, and for
IID the mean :math:`|A_{ij} - 1/N|` (acceptance: below 0.02).

Each pFedGAT run is a study record (``allocation``, the same study as
section E of ``claims.py``, which shares the record of seed 0's defaults),
each Local run a run record, in ``benchmarks/results/claims_runs/``: a run is
trained only when its record is missing, and with ``--cached-only`` never, so
that the file rebuilds from the records (listing what is missing with the
command that makes it); the file's hand-written ``### Reading`` blocks are kept.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/reproduce/pfedgat_allocation.py  # 5 seeds, writes results
    OMP_NUM_THREADS=1 python benchmarks/reproduce/pfedgat_allocation.py --cached-only
    # 2 seeds, 10 rounds, no file
    OMP_NUM_THREADS=1 python benchmarks/reproduce/pfedgat_allocation.py --quick
"""
from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.experiment import (
    ExperimentConfig,
    build_dataset,
    build_simulator,
    check_config,
    route_overrides,
)
from pyg_fedgraph.experiment.reporting import (
    benchmark_records,
    counted,
    keep_readings,
    machine_lines,
    made_with,
    runs_table,
    save_report,
)
from pyg_fedgraph.train.rules import class_counts
from pyg_fedgraph.utils import allocation_stats, keep_freed_memory_at_start

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent
RESULTS = HERE / "results" / "pfedgat_allocation.md"
#: The records of finished runs and checkpoints of runs in progress: ``claims.py``'s.
RUNS = benchmark_records(ROOT)
#: The name of the pFedGAT runs' study records (section E of ``claims.py`` too).
STUDY = "allocation"
COMMAND = "python benchmarks/reproduce/pfedgat_allocation.py"

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "local": ("local", {}),
    "pfedgat": ("pfedgat", {}),
    "pfedgat-tau40": ("pfedgat", {"similarity_scale": 40.0}),
    "pfedgat-paper": ("pfedgat", {"similarity": False}),
    "pfedgat-logits": ("pfedgat", {"use_gat": False, "optimizer": "adam", "gat_lr": 0.1}),
}
PARTITIONS = ("pathological", "iid")


def config(variant: str, partition: Any, seed: int, rounds: int) -> ExperimentConfig:
    r"""The run of ``variant`` on ``partition`` (one of :data:`PARTITIONS`)."""
    strategy, options = VARIANTS[variant]
    return ExperimentConfig(dataset="digits", strategy=strategy, partition=partition,
                            clients=10, rounds=rounds, seed=seed, overrides=dict(options))


def measure(cfg: ExperimentConfig) -> tuple[Any, dict[str, Any]]:
    r"""Trains the run of ``cfg`` and measures its final allocation matrix
    (:func:`~pyg_fedgraph.utils.allocation_stats`, with its least and largest
    weight and largest deviation from 1/N), as section E of ``claims.py``."""
    sim = build_simulator(cfg)
    sim.run()
    graph = sim.strategy.collaboration_graph()
    if graph is None:  # the variants are chosen so
        raise RuntimeError(f"{cfg.strategy} has no collaboration graph")
    w = graph.float()
    stats = allocation_stats(w, class_counts(sim.dataset, torch.arange(sim.dataset.num_clients)))
    return sim, {"allocation": {**stats, "min": float(w.min()), "max": float(w.max()),
                                "max_dev": float((w - 1.0 / w.size(0)).abs().max())},
                 "graph": w.tolist()}


def unfit(cfg: ExperimentConfig) -> str | None:
    r"""Why ``cfg`` cannot run (the library's error), from the data and the
    settings alone (nothing is trained); ``None`` when it can."""
    try:
        check_config(cfg, build_dataset(cfg, route_overrides(cfg)["data"]))
    except ValueError as err:
        return str(err)
    return None


def fetch(cfg: ExperimentConfig, run_missing: bool) -> dict[str, Any] | None:
    r"""The figures of the run of ``cfg`` (``test``, and for pFedGAT the
    allocation statistics), from its record, trained first when missing and
    ``run_missing``; ``None`` without a record, ``{"error": ...}`` for a run
    the library refuses."""
    missing = (RUNS.load(cfg) if cfg.strategy == "local"
               else RUNS.load_study(cfg, STUDY)) is None
    error = unfit(cfg) if missing else None
    if error is not None:
        return {"error": error}
    if cfg.strategy == "local":
        entry = RUNS.load(cfg)
        if entry is None and run_missing:
            RUNS.run(cfg)
            entry = RUNS.load(cfg)  # as read back: the same with or without the run
        return None if entry is None else {"test": float(entry["summary"]["test"])}
    entry = (RUNS.run_study(cfg, STUDY, lambda: measure(cfg)) if run_missing
             else RUNS.load_study(cfg, STUDY))
    if entry is None:
        return None
    return {"test": float(entry["summary"]["test"]), **entry["allocation"]}


def fmt(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    values = [v * scale for v in values if v == v]  # NaN: no such pair in this split
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def report(seeds: int, rounds: int, run_missing: bool, flags: str = "") -> str:
    r"""The results file's text (without its readings); the runs whose
    records are missing are trained first when ``run_missing`` (``flags``:
    the options the command of the missing runs repeats)."""
    pending: list[str] = []
    lines = ["# pFedGAT allocation on digits (10 clients)", "",
             "`benchmarks/reproduce/pfedgat_allocation.py`: "
             f"{seeds} seeds, {rounds} rounds, the CLI's "
             "digits defaults otherwise. Test accuracy is the mean client accuracy at the "
             "best-validation round; \"≥ Local\" counts the seeds where the variant's "
             "accuracy is at least Local's on the same seed. Allocation columns come from "
             "the final matrix A (row i = weights client i gives): \"same-class share\" is "
             "the mean row mass on clients sharing a class (self included); \"within\" / "
             "\"between\" are mean off-diagonal weights to clients that share a class / "
             "share none; uniform weights give 0.1 for both. \"mean |A - 1/N|\" is the "
             "IID acceptance figure (below 0.02). Each run is a record in "
             "`benchmarks/results/claims_runs/`; "
             f"`{COMMAND}{flags} --cached-only` rebuilds this file from them without training.",
             ""]
    for partition in PARTITIONS:
        results: dict[str, list[dict[str, float] | None]] = {
            v: [fetch(config(v, partition, seed, rounds), run_missing) for seed in range(seeds)]
            for v in VARIANTS}
        pending += [f"{partition} {v} seed {seed}" for v, rows in results.items()
                    for seed, r in enumerate(rows) if r is None]
        refused = {v: next(r["error"] for r in rows if r is not None and "error" in r)
                   for v, rows in results.items()
                   if any(r is not None and "error" in r for r in rows)}
        results = {v: [None if r is not None and "error" in r else r for r in rows]
                   for v, rows in results.items()}
        first = next((r for r in results["pfedgat"] if r is not None), None)
        lines += [f"## {partition} (uniform weights give a same-class share of "
                  f"{first['chance']:.2f})" if partition == "pathological" and first
                  else f"## {partition}", "",
                  "| variant | test accuracy % | ≥ Local | same-class share | within | "
                  "between | self | mean \\|A - 1/N\\| |",
                  "|---|---|---|---|---|---|---|---|"]
        local = results["local"]
        for variant, found in results.items():
            rows = [r for r in found if r is not None]
            if variant in refused:
                lines.append(f"| {variant} | n/a: the library refuses the run ({refused[variant]})"
                             " |" + " |" * 6)
                continue
            if not rows:
                lines.append(f"| {variant} | pending |" + " |" * 6)
                continue
            tests = [r["test"] for r in rows]
            pairs = [(r["test"], loc["test"]) for r, loc in zip(found, local, strict=True)
                     if r is not None and loc is not None]
            wins = sum(t >= loc - 1e-9 for t, loc in pairs)
            if "self" in rows[0]:
                cols = [fmt([r[k] for r in rows]) for k in ("same", "within", "between", "self")]
                cols.append(fmt([r["dev"] for r in rows], digits=4))
            else:
                cols = ["-"] * 5
            n = f" (n={len(rows)})" if len(rows) < seeds else ""
            lines.append(f"| {variant} | {fmt(tests, 100, 2)}{n} | "
                         f"{'-' if variant == 'local' else f'{wins}/{len(pairs)}'} | "
                         + " | ".join(cols) + " |")
        lines.append("")
    if pending:
        lines += [f"## Not yet run ({counted(len(pending), 'run')})", "",
                  f"`{COMMAND}{flags}` runs them; `{COMMAND}{flags} --cached-only` then "
                  "rewrites this file.", "", *(f"- {what}" for what in pending), ""]
    lines += ["## Runs", "", f"Records made with {made_with(RUNS.used.values())}.", "",
              *runs_table(RUNS.used), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, 10 rounds, no file")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--cached-only", action="store_true",
                        help="only read the records: train nothing, list what is missing")
    parser.add_argument("--no-write", action="store_true",
                        help="run (and record) without writing the results file")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 5)
    rounds = args.rounds or (10 if args.quick else 30)
    flags = "".join(f" --{k} {v}" for k, v in (("seeds", args.seeds), ("rounds", args.rounds))
                    if v) + (" --quick" if args.quick else "")
    load_start = os.getloadavg()[0]
    text = report(seeds, rounds, not args.cached_only, flags)
    text += "\n" + "\n".join(["## Machine", "", *machine_lines(load_start), ""])
    text = keep_readings(args.out.read_text() if args.out.is_file() else "", text)
    print(text)
    save_report(text, None if args.quick or args.no_write else args.out)
    return text


if __name__ == "__main__":
    keep_freed_memory_at_start()
    torch.set_num_threads(1)
    main()
