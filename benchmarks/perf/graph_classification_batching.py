r"""Batched graph classification training over clients against the per-client
loop (issue 35): one round of local training of GIN clients across datasets.

The federation is the cross-dataset group of issue 35 (MUTAG, PROTEINS,
ENZYMES and AIDS, ``--clients-per-dataset`` clients each: 12 by default),
read from ``--root``; every client trains GCFL's protocol for one round:
GIN (3 layers of 64, dropout off so that every way computes the same),
Adam (lr 0.001, weight decay 5e-4), batches of 128 graphs, one local epoch.
The round is timed three ways, alternated, ``--repeats`` times (min and
median):

* ``vmap``: :class:`~pyg_fedgraph.train.ClientTrainer` with
  ``execution="vmap"``: per step, the clients that take it (clients with
  fewer graphs wait for the others) build one padded disjoint union each and
  their gradients come from one :func:`torch.vmap` call;
* ``loop``: ``execution="loop"``: the same steps, one functional gradient
  per client;
* ``per-client``: the reference loop (``parallel=False``): one client after
  the other, PyG's layers with :class:`torch.optim.Adam`.

Also the evaluation of every client's test graphs both batched ways, the
steps each client takes, the padding of the batched steps (nodes computed
over real nodes), and the three operations a GIN layer spends its time in,
at one step's sizes, batched over the clients and client after client: the
gather of neighbour features (what :func:`torch.vmap` makes of PyG's
``index_select``, and the same flattened into one ``index_select``), the
scatter-add of messages, and the matrix products. Every way's trained
parameters are compared with the per-client loop's. Asserts nothing.

The results file is rebuilt from the measurements, kept as one line of
``perf_records.jsonl`` beside it (``--report-only``: nothing is measured); its
"### Reading" blocks are written by hand and kept.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/perf/graph_classification_batching.py
[--root ../shared/data/tu] [--repeats 5] [--model gin] [--device cpu]
[--out benchmarks/results/graph_classification_batching.md]``; with ``--report-only``
it rebuilds ``benchmarks/results/graph_classification_batching.md`` from its record.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.data import collate_graph_sets
from pyg_fedgraph.datasets import tu
from pyg_fedgraph.experiment.reporting import (
    RECORDS_NAME,
    machine_lines,
    measured_report,
)
from pyg_fedgraph.models import build_model
from pyg_fedgraph.train import LocalConfig
from pyg_fedgraph.train.trainer import ClientTrainer, batch_schedule

SCRIPT = "benchmarks/perf/graph_classification_batching.py"
HERE = Path(__file__).resolve().parents[1]
RESULTS = HERE / "results" / "graph_classification_batching.md"
DEFAULT_ROOT = HERE.parents[1] / "shared" / "data" / "tu"
NAMES = "MUTAG,PROTEINS,ENZYMES,AIDS"


def padding(data, cfg: LocalConfig, seeds: list[int]) -> tuple[list[int], float, float]:
    r"""Steps per client, and over the batched steps the nodes computed
    (clients that take a step, padded to the step's largest union) per real
    node, with and without leaving the waiting clients out."""
    counts = data.num_samples("train")
    index, active = batch_schedule(counts, cfg.batch_size, epochs=cfg.epochs, generator=seeds)
    steps = active.sum(0).tolist()
    store = data.store
    real = computed = everyone = 0
    for t in range(index.size(0)):
        ids = data.splits["train"].x[torch.arange(counts.numel()).unsqueeze(1), index[t]]
        nodes = store.num_nodes[ids].sum(1)
        act = active[t]
        real += int(nodes[act].sum())
        computed += int(act.sum()) * (int(nodes[act].max()) + 1)
        everyone += counts.numel() * (int(nodes.max()) + 1)
    return steps, computed / real, everyone / real


def operations(device: torch.device, repeats: int, clients: int = 12, nodes: int = 5000,
               edges: int = 20000, width: int = 64) -> dict[str, Any]:
    r"""The time of a GIN layer's operations at one step's sizes, batched
    over ``clients`` and client after client (fastest of ``repeats``): the
    sizes and one row per operation (gather, flattened gather, scatter,
    matrix products)."""
    from torch.func import vmap
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(clients, nodes, width, generator=gen).to(device)
    idx = torch.randint(nodes, (clients, edges), generator=gen).to(device)
    msg = torch.randn(clients, edges, width, generator=gen).to(device)
    w = torch.randn(clients, width, width, generator=gen).to(device)
    offset = (torch.arange(clients, device=device) * nodes).unsqueeze(1)

    def flat_gather() -> torch.Tensor:
        return x.reshape(-1, width).index_select(0, (idx + offset).reshape(-1))

    ops: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "gather of neighbour features (vmap of index_select)": (
            lambda: vmap(lambda a, i: a.index_select(0, i))(x, idx),
            lambda: [x[k].index_select(0, idx[k]) for k in range(clients)]),
        "the same, flattened into one index_select": (
            flat_gather, lambda: [x[k].index_select(0, idx[k]) for k in range(clients)]),
        "scatter-add of messages (vmap of index_add)": (
            lambda: vmap(lambda m, i: m.new_zeros(nodes, width).index_add(0, i, m))(msg, idx),
            lambda: [msg[k].new_zeros(nodes, width).index_add(0, idx[k], msg[k])
                     for k in range(clients)]),
        "matrix products (bmm against one mm per client)": (
            lambda: torch.bmm(x, w), lambda: [x[k] @ w[k] for k in range(clients)]),
    }
    rows = []
    for name, (batched, looped) in ops.items():
        best = []
        for f in (batched, looped):
            f()
            ts = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                f()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                ts.append(time.perf_counter() - t0)
            best.append(min(ts))
        rows.append({"operation": name, "batched ms": 1000 * best[0],
                     "looped ms": 1000 * best[1], "loop / batched": best[1] / best[0]})
    return {"clients": clients, "nodes": nodes, "edges": edges, "width": width, "rows": rows}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    r"""The record of one run with the options ``args``."""
    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    device = torch.device(args.device)
    data = tu(NAMES, root=str(args.root), clients_per_dataset=args.clients_per_dataset)
    n = data.num_clients
    torch.manual_seed(0)
    model = build_model(args.model, data.input_shape, data.num_classes or 0, dropout=0.0)
    cfg = LocalConfig(optimizer="adam", lr=0.001, weight_decay=5e-4, batch_size=128, epochs=1)
    clients = torch.arange(n)
    seeds = list(range(n))
    ways: dict[str, dict[str, Any]] = {"vmap": {"execution": "vmap"},
                                       "loop": {"execution": "loop"},
                                       "per-client": {"parallel": False}}
    trainers = {k: ClientTrainer(model, data, config=cfg, device=device, **kw)
                for k, kw in ways.items()}
    start = trainers["vmap"].layout.flatten(model).repeat(n, 1).to(device)
    buffers = trainers["vmap"].initial_buffers(n).to(device)

    def train(way: str) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            out = trainers[way].train(clients, start, buffers, generator=seeds).params
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return out
        return run

    def evaluate(way: str) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            out = trainers[way].evaluate(clients, start, buffers)["loss"]
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return out
        return run

    tasks = {f"train: {w}": train(w) for w in ways}
    tasks.update({f"evaluate: {w}": evaluate(w) for w in ("vmap", "loop")})
    results = {name: f() for name, f in tasks.items()}  # warm-up, and the values compared
    reference = results["train: per-client"]
    times: dict[str, list[float]] = {name: [] for name in tasks}
    for _ in range(args.repeats):
        for name, f in tasks.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
        print(".", end="", flush=True)
    print()
    steps, pad, pad_all = padding(data, cfg, seeds)
    collate_ids = data.splits["train"].x[:, :128]
    store = data.store
    if store is None:
        raise SystemExit(f"{NAMES}: the federation holds no graph store")
    t0 = time.perf_counter()
    for _ in range(10):
        collate_graph_sets(store, collate_ids)
    collate_s = (time.perf_counter() - t0) / 10
    base = min(times["train: per-client"])
    rows = [{"way": name, "min s": min(ts), "median s": statistics.median(ts),
             "per-client / way": base / min(ts) if name.startswith("train") else None,
             "max diff": (float((results[name] - reference).abs().max())
                          if name.startswith("train") else None)}
            for name, ts in times.items()]
    per_dataset = ", ".join(f"{d} {s}" for d, s in zip(
        data.info["datasets"], steps[::args.clients_per_dataset], strict=True))
    return {"device": "cpu" if device.type == "cpu" else torch.cuda.get_device_name(device),
            "clients": n, "model": args.model, "clients_per_dataset": args.clients_per_dataset,
            "repeats": args.repeats, "rows": rows, "steps_per_dataset": per_dataset,
            "client_steps": sum(steps), "batched_steps": len(steps) and max(steps),
            "padding": pad, "padding_everyone": pad_all, "collate_ms": 1000 * collate_s,
            "operations": operations(device, max(args.repeats, 5)),
            "machine": machine_lines(load_start)}


def report(record: dict[str, Any]) -> str:
    r"""The markdown of a run's record (``results/graph_classification_batching.md``)."""
    def cell(v: float | None, form: str) -> str:
        return "" if v is None else format(v, form)

    rows = ["| way | min s | median s | per-client / way (min) | max param diff to per-client |",
            "|---|---:|---:|---:|---:|"]
    rows += [f"| {r['way']} | {r['min s']:.3f} | {r['median s']:.3f} | "
             f"{cell(r['per-client / way'], '.2f')} | {cell(r['max diff'], '.1e')} |"
             for r in record["rows"]]
    ops = record["operations"]
    op_rows = [f"| operation ({ops['clients']} clients, {ops['nodes']} nodes, {ops['edges']} "
               f"edges, width {ops['width']}) | batched ms | client after client ms | "
               "loop / batched |", "|---|---:|---:|---:|"]
    op_rows += [f"| {r['operation']} | {r['batched ms']:.1f} | {r['looped ms']:.1f} | "
                f"{r['loop / batched']:.2f} |" for r in ops["rows"]]
    where = ("one CPU thread" if record["device"] == "cpu" else record["device"])
    return "\n".join([
        f"# Batched graph classification training on {where} (issue 35)", "",
        f"One round of local training of {record['clients']} {record['model'].upper()} clients "
        f"({NAMES}, {record['clients_per_dataset']} clients each; GCFL's protocol: Adam, "
        "batches of 128 graphs, one epoch; dropout off), three ways, alternated, "
        f"{record['repeats']} repeats (`{SCRIPT}`; the docstring describes each way); and one "
        "evaluation of every client's test graphs. \"per-client / way\" > 1: the way is "
        "faster than the per-client loop.", "",
        *rows, "",
        f"- local steps per client (one epoch of batches of 128): "
        f"{record['steps_per_dataset']} ({record['client_steps']} client-steps; the batched "
        f"ways take {record['batched_steps']} steps)",
        f"- padding of the batched steps: {record['padding']:.2f} nodes computed per real node "
        f"(the clients that take a step, padded to that step's largest union; "
        f"{record['padding_everyone']:.2f} if waiting clients were computed too)",
        f"- building one step's {record['clients']} padded unions of 128 graphs: "
        f"{record['collate_ms']:.1f} ms",
        "", *op_rows, "",
        "## Machine", "", *record["machine"], "",
        f"Command: `{record['command']}`", ""])


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--clients-per-dataset", type=int, default=3)
    parser.add_argument("--model", default="gin", choices=("gin", "gcn-pool"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--report-only", action="store_true",
                        help=f"rebuild the results file from its record in {RECORDS_NAME} "
                             f"beside it, measuring nothing (default file: {RESULTS})")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"markdown output (default: print only); the record goes to "
                             f"{RECORDS_NAME} in the same folder")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)

    def measured() -> dict[str, Any]:
        if not (args.root / "MUTAG").exists() and not (args.root / "MUTAG_A.txt").exists():
            raise SystemExit(f"no TU datasets under {args.root}: give --root DIR holding "
                             f"{NAMES.replace(',', ', ')}")
        return {**measure(args), "command": " ".join([f"python {SCRIPT}", *argv])}

    text = measured_report((args.out or RESULTS) if args.report_only else args.out, report,
                           None if args.report_only else measured, script=SCRIPT)
    print(text)
    return text


if __name__ == "__main__":
    main()
