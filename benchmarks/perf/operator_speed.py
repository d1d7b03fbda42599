"""Seconds per call of the server operators of ``pyg_fedgraph.nn`` on every path they take:
dense ``weight=`` products, edge lists (sparse and nearly complete, shared and per layer),
FedAGHN's hypernetwork step, pFedGAT's allocation step, FedCEDAR's propagation and SFL's hops.
Each row is the best of 5 blocks after a warm-up call, one torch thread, in thread CPU seconds
(``time.thread_time``: what the call computes, not the waits of a shared machine).

Two ways to compare two source trees (it runs unchanged in trees before issue 38, whose
``AGHNConv`` took ``(x, delta, layer_ptr, edge_index)``; rows a tree cannot run are left out):

- ``perf_alternate.sh OTHER OUT N --operators`` runs it in each tree in turn, in separate
  processes (``python benchmarks/perf/perf_compare.py --steady OUT`` prints the table);
- ``--against OTHER`` imports the other tree's package too, under another name (a copy in a
  temporary folder with its imports renamed), and alternates the two trees' calls of every row
  in one process, ``--rounds`` times: on a shared machine whose load moves one row's time by
  half between two processes, the paired ratios of neighbouring blocks are the steadier reading.

``--against`` compares two versions of the library, not two scripts: what it imports is the
other tree's ``pyg_fedgraph`` package (renamed ``pyg_fedgraph_before``), never a benchmark
script. For that, and only for that, it puts one folder on ``sys.path``: the temporary folder
holding the renamed copy, taken off again when the comparison ends. The script imports nothing
else from the repository beyond the package (it must run unchanged in older trees), and it
writes no results file: ``benchmarks/results/operator_speed.md`` holds its tables, written by
hand around them.

Usage::

    python benchmarks/perf/operator_speed.py                       # name seconds lines
    python benchmarks/perf/operator_speed.py --against ../before   # markdown table, before vs now
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import math
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

BLOCKS = 5


def best_time(fn: Callable[[], object], min_block: float = 0.2, blocks: int = BLOCKS) -> float:
    r"""Best of ``blocks`` blocks of CPU seconds per call, each block long enough to
    time."""
    fn()
    t0 = time.thread_time()
    fn()
    once = max(time.thread_time() - t0, 1e-6)
    calls = max(1, int(min_block / once))
    best = float("inf")
    for _ in range(blocks):
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - t0) / calls)
    return best


def layer_ptr(dim: int, layers: int) -> torch.Tensor:
    return torch.linspace(0, dim, layers + 1).round().long()


def sparse_graph(n: int, degree: int, gen: torch.Generator) -> torch.Tensor:
    r"""``degree`` random in-edges per node, no self loops (METR-LA has about 8)."""
    src = torch.stack([torch.randperm(n - 1, generator=gen)[:degree] for _ in range(n)])
    tgt = torch.arange(n).repeat_interleave(degree)
    src = src.reshape(-1)
    return torch.stack([src + (src >= tgt).long(), tgt])


def aghn_call(conv: torch.nn.Module, x: torch.Tensor, delta: torch.Tensor, ptr: torch.Tensor,
              edge_index: torch.Tensor | None) -> torch.Tensor:
    # Trees before issue 38: forward(x, delta, layer_ptr, edge_index=None).
    if list(inspect.signature(conv.forward).parameters)[1] == "delta":
        return conv(x, delta, ptr, edge_index)
    return conv(x, edge_index, delta=delta, layer_ptr=ptr)


def rows(package: str = "pyg_fedgraph") -> dict[str, Callable[[], object]]:
    r"""Every row's call, with the operators of ``package`` (the same inputs for every
    package: they come from one seeded generator)."""
    nn = importlib.import_module(f"{package}.nn")
    AGHNConv, AllocationLogits, ClientGAT = nn.AGHNConv, nn.AllocationLogits, nn.ClientGAT
    ClusterGraphPropagation, KHopPropagation = nn.ClusterGraphPropagation, nn.KHopPropagation
    allocation_backward = nn.allocation_backward
    complete_graph = importlib.import_module(f"{package}.utils.graph").complete_graph
    gen = torch.Generator().manual_seed(0)
    cases: dict[str, Callable[[], object]] = {}
    agg = nn.GraphAggregation()
    for n, d in ((60, 1_000), (207, 60_000)):
        x = torch.randn(n, d, generator=gen)
        w = torch.rand(n, n, generator=gen)
        ptr = layer_ptr(d, 4)
        w4 = torch.rand(4, n, n, generator=gen)
        full = complete_graph(n)
        ew, ew4 = w[full[1], full[0]], w4[:, full[1], full[0]].t().contiguous()
        sparse = sparse_graph(n, 8, gen)
        sw, sw4 = torch.rand(sparse.size(1), generator=gen), torch.rand(sparse.size(1), 4,
                                                                        generator=gen)
        tag = f"N{n}_D{d}"
        cases[f"agg_dense_weight_{tag}"] = lambda x=x, w=w: agg(x, weight=w)
        cases[f"agg_dense_weight_4layers_{tag}"] = lambda x=x, w=w4, p=ptr: agg(
            x, weight=w, layer_ptr=p)
        cases[f"agg_complete_edges_{tag}"] = lambda x=x, e=full, w=ew: agg(x, e, w)
        cases[f"agg_complete_edges_4layers_{tag}"] = lambda x=x, e=full, w=ew4, p=ptr: agg(
            x, e, w, layer_ptr=p)
        cases[f"agg_sparse_edges_{tag}"] = lambda x=x, e=sparse, w=sw: agg(x, e, w)
        cases[f"agg_sparse_edges_4layers_{tag}"] = lambda x=x, e=sparse, w=sw4, p=ptr: agg(
            x, e, w, layer_ptr=p)
        khop = KHopPropagation(2)
        cases[f"khop2_sparse_{tag}"] = lambda x=x, e=sparse, w=sw, k=khop: k(x, e, w)

    # FedAGHN's server step: forward and the gradient of p and q (complete graph, and the
    # graph of a round where half the clients trained: sources only).
    for n, d, layers in ((60, 1_000, 4), (100, 100_000, 8)):
        x, delta, delta_new = (torch.randn(n, d, generator=gen) for _ in range(3))
        ptr = layer_ptr(d, layers)
        conv = AGHNConv(n, layers)
        half = complete_graph(n, self_loops=False)
        half = half[:, half[0] < n // 2]
        for graph, ei in (("complete", None), ("half_sources", half)):
            def step(conv=conv, x=x, delta=delta, dn=delta_new, ptr=ptr, ei=ei):
                out = aghn_call(conv, x, delta, ptr, ei)
                return torch.autograd.grad(out, [conv.sharpness, conv.self_weight],
                                           grad_outputs=-dn)
            cases[f"aghn_step_{graph}_N{n}_D{d}_L{layers}"] = step

    # pFedGAT's allocation step (forward and backward of the feedback), and its ablation.
    for n, d in ((60, 1_000),):
        x, feedback = torch.randn(n, d, generator=gen), torch.randn(n, d, generator=gen)
        gat, logits = ClientGAT(d, 16, heads=8), AllocationLogits(n)
        for name, module in (("client_gat", gat), ("allocation_logits", logits)):
            def alloc_step(module=module, x=x, feedback=feedback):
                module.zero_grad()
                theta_tilde, _ = module(x)
                allocation_backward(theta_tilde, feedback)
            cases[f"{name}_step_N{n}_D{d}"] = alloc_step

    # FedCEDAR: P = 2 steps over the K cluster centres (cosine graph, or a given one).
    centres = torch.randn(5, 60_000, generator=gen)
    prop = ClusterGraphPropagation(num_steps=2)
    ring = torch.tensor([[0, 1, 2, 3, 4, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 0, 1, 2, 3, 4]])
    cases["cluster_propagation_cosine_K5_D60000"] = lambda: prop(centres)
    cases["cluster_propagation_edges_K5_D60000"] = lambda: prop(centres, ring,
                                                                torch.full((10,), 0.5))
    return cases


def keep_freed_memory() -> None:
    r"""Keeps freed memory in the process, as ``pyg-fedgraph run`` does
    (:func:`~pyg_fedgraph.utils.allocator.retain_freed_memory`): otherwise a row's
    (N, D) results of 12-50 MB come from the heap or from fresh pages depending on
    what the rows before freed (glibc's adaptive mmap threshold), which moved one
    row between 34 and 98 ms. Trees without the function run as they are."""
    try:
        from pyg_fedgraph.utils.allocator import retain_freed_memory
    except ImportError:
        return
    retain_freed_memory()


def import_renamed(tree: Path, name: str, workdir: Path) -> str:
    r"""Copies ``tree``'s ``pyg_fedgraph`` to ``workdir/name`` with every
    ``pyg_fedgraph`` module reference renamed, puts ``workdir`` on ``sys.path``
    (the caller takes it off) and imports the copy."""
    target = workdir / name
    shutil.copytree(tree / "pyg_fedgraph", target,
                    ignore=shutil.ignore_patterns("__pycache__"))
    word = re.compile(r"\bpyg_fedgraph\b")
    for path in target.rglob("*.py"):
        path.write_text(word.sub(name, path.read_text()))
    sys.path.insert(0, str(workdir))
    importlib.import_module(name)
    return name


def interleaved(before: dict[str, Callable[[], object]], now: dict[str, Callable[[], object]],
                rounds: int) -> list[str]:
    r"""Markdown table: each row's blocks alternate between the trees (the first
    tree of a round alternates too); minima, and the median of the paired ratios."""
    lines = ["| case | before min s | now min s | now / before (min) "
             "| now / before (median of paired blocks) |", "|---|---:|---:|---:|---:|"]
    ratios_min, ratios_med = [], []
    for name in now:
        if name not in before:
            continue
        times: dict[str, list[float]] = {"before": [], "now": []}
        try:
            for r in range(rounds):
                order = ("before", "now") if r % 2 == 0 else ("now", "before")
                for tree in order:
                    fn = before[name] if tree == "before" else now[name]
                    times[tree].append(best_time(fn, blocks=1))
        except TypeError:  # a call the other tree does not take
            continue
        b, n = min(times["before"]), min(times["now"])
        med = statistics.median(t / s for s, t in zip(times["before"], times["now"],
                                                        strict=True))
        ratios_min.append(n / b)
        ratios_med.append(med)
        lines.append(f"| {name} | {b:.6f} | {n:.6f} | {n / b:.2f} | {med:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)

    def geomean(values: list[float]) -> float:
        return math.exp(sum(map(math.log, values)) / len(values))

    lines += ["", f"Geometric mean of now / before over {len(ratios_min)} rows: "
              f"**{geomean(ratios_min):.3f}** for the minima, **{geomean(ratios_med):.3f}** "
              f"for the paired medians ({rounds} rounds of one block per tree)."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="another source tree (its root)")
    parser.add_argument("--rounds", type=int, default=9,
                        help="alternations per row with --against (default: 9)")
    parser.add_argument("--only", help="comma-separated rows to run (default: all)")
    parser.add_argument("--fresh-memory", action="store_true",
                        help="leave glibc's adaptive mmap threshold as it is (default: keep "
                             "freed memory, as the command line does)")
    args = parser.parse_args()
    if not args.fresh_memory:
        keep_freed_memory()
    only = set(args.only.split(",")) if args.only else None

    def selected(package: str = "pyg_fedgraph") -> dict[str, Callable[[], object]]:
        return {k: v for k, v in rows(package).items() if only is None or k in only}

    torch.set_num_threads(1)
    if args.against is None:
        for name, fn in selected().items():
            try:
                seconds = best_time(fn)
            except TypeError:  # a call this tree does not take
                continue
            print(name, f"{seconds:.6f}", flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        try:
            other = import_renamed(args.against.resolve(), "pyg_fedgraph_before", Path(tmp))
            print("\n".join(interleaved(selected(other), selected(), args.rounds)))
        finally:
            if tmp in sys.path:
                sys.path.remove(tmp)


if __name__ == "__main__":
    main()
