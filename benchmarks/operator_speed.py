"""Seconds per call of the server operators of ``pyg_fedgraph.nn`` on every path they take:
dense ``weight=`` products, edge lists (sparse and nearly complete, shared and per layer),
FedAGHN's hypernetwork step, pFedGAT's allocation step, FedCEDAR's propagation and SFL's hops.
Each row is the best of 5 blocks after a warm-up call, one torch thread, in thread CPU seconds
(``time.thread_time``: what the call computes, not the waits of a shared machine).

Used by ``perf_alternate.sh OTHER OUT N --operators``, which runs it in two source trees in turn
(``python benchmarks/perf_compare.py OUT`` prints the side-by-side table). It runs unchanged in
trees before issue 38, whose ``AGHNConv`` took ``(x, delta, layer_ptr, edge_index)``; rows a
tree cannot run are left out.

Usage: ``python benchmarks/operator_speed.py`` prints ``name seconds`` lines.
"""
from __future__ import annotations

import inspect
import time
from collections.abc import Callable

import torch

from pyg_fedgraph.nn import (
    AGHNConv,
    AllocationLogits,
    ClientGAT,
    ClusterGraphPropagation,
    GraphAggregation,
    KHopPropagation,
)
from pyg_fedgraph.nn.client_gat import allocation_backward
from pyg_fedgraph.utils.graph import complete_graph

BLOCKS = 5


def best_time(fn: Callable[[], object], min_block: float = 0.2) -> float:
    r"""Best of :data:`BLOCKS` blocks of CPU seconds per call, each block long enough to
    time."""
    fn()
    t0 = time.thread_time()
    fn()
    once = max(time.thread_time() - t0, 1e-6)
    calls = max(1, int(min_block / once))
    best = float("inf")
    for _ in range(BLOCKS):
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


def aghn_call(conv: AGHNConv, x: torch.Tensor, delta: torch.Tensor, ptr: torch.Tensor,
              edge_index: torch.Tensor | None) -> torch.Tensor:
    # Trees before issue 38: forward(x, delta, layer_ptr, edge_index=None).
    if list(inspect.signature(conv.forward).parameters)[1] == "delta":
        return conv(x, delta, ptr, edge_index)
    return conv(x, edge_index, delta=delta, layer_ptr=ptr)


def rows() -> dict[str, Callable[[], object]]:
    gen = torch.Generator().manual_seed(0)
    cases: dict[str, Callable[[], object]] = {}
    agg = GraphAggregation()
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


def main() -> None:
    torch.set_num_threads(1)
    for name, fn in rows().items():
        try:
            seconds = best_time(fn)
        except TypeError:  # a call this tree does not take
            continue
        print(name, f"{seconds:.6f}", flush=True)


if __name__ == "__main__":
    main()
