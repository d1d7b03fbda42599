r"""Performance suite: each fast path against its reference, side by side in one run.

Rows (see issue 10):

1. pFedGraph graph inference at N = 50, 207, 1000: the batched simplex
   projection (:class:`~pyg_fedgraph.nn.collaboration_qp.CollaborationQP`) vs the
   authors' per-client cvxpy loop (capped; extrapolated), max |difference|.
   Reuses ``benchmarks/perf/pfedgraph_qp.py``.
2. FedAGHN server step (hypernetwork forward + gradient of p, q) at N = 20, 100
   on the 4-layer :class:`~pyg_fedgraph.models.cnn.CNNBN` (28x28 inputs):
   batched :class:`~pyg_fedgraph.nn.aghn_conv.AGHNConv` vs a per-client loop
   (written here, one client's hypernetwork at a time as in the authors' code).
3. Client-parallel local training vs the per-client loop: FL-60 MLP clients and
   GRU forecasters (reuses ``benchmarks/perf/client_parallel.py``), with the achieved
   FLOP/s of the parallel path vs a measured matmul FLOP/s.
4. :class:`~pyg_fedgraph.nn.aggregation.GraphAggregation` at N = 207, D = 60k and
   N = 1000, D = 100k: time and peak memory (subprocess, ``ru_maxrss``) against the
   naive (E, D) message form where it fits, with the achieved memory bandwidth
   vs a measured copy bandwidth.
5. End-to-end seconds per round of every registered strategy on FL-60 (and on
   the 207 METR-LA clients when the road graph is available).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/perf/perf.py --quick   # < 5 min on 2 cores
    OMP_NUM_THREADS=1 python benchmarks/perf/perf.py           # full, writes results/perf.md
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent

import client_parallel  # noqa: E402 - imported after sys.path gets benchmarks/
import pfedgraph_qp  # noqa: E402 - imported after sys.path gets benchmarks/

from pyg_fedgraph.data.layout import ParamLayout  # noqa: E402 - imported after sys.path gets benchmarks/
from pyg_fedgraph.experiment.reporting import machine_lines, save_report  # noqa: E402
from pyg_fedgraph.models.cnn import CNNBN  # noqa: E402 - imported after sys.path gets benchmarks/
from pyg_fedgraph.nn.aghn_conv import AGHNConv  # noqa: E402 - imported after sys.path gets benchmarks/
from pyg_fedgraph.nn.collaboration_qp import CollaborationQP  # noqa: E402 - imported after sys.path gets benchmarks/

RESULTS = HERE.parent / "results"
METR_LA_GRAPH = Path("/work/shared/data/metr-la")


def _median_time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    out = fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _fastest(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


# ----------------------------------------------------------------- limits
def measured_copy_bandwidth(mib: int = 256, repeats: int = 5) -> float:
    r"""Bytes read + written per second by a copy of a large float32 tensor
    into an already allocated one (``torch.Tensor.copy_``, i.e. a clone
    without the page faults of fresh memory)."""
    x = torch.ones(mib * 2**18)
    y = torch.empty_like(x)
    y.fill_(0.0)
    sec = _fastest(lambda: y.copy_(x), repeats)
    return 2 * x.numel() * 4 / sec


def measured_matmul_flops(n: int = 1024, repeats: int = 5) -> float:
    r"""float32 FLOP/s of an (n, n) @ (n, n) product."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    sec = _fastest(lambda: a @ b, repeats)
    return 2 * n ** 3 / sec


# ----------------------------------------------------------- 1. pFedGraph QP
def qp_rows(sizes: list[int], cap: float, repeats: int) -> list[dict]:
    rows = []
    for n in sizes:
        s, p = pfedgraph_qp.make_instance(n, dim=2000, groups=5, seed=0)
        qp = CollaborationQP()
        alpha = qp.effective_alpha(n)
        t_proj, _, w = pfedgraph_qp.time_repeated(lambda qp=qp, s=s, p=p: qp(s, p), repeats)
        t_loop, w_loop, done = pfedgraph_qp.time_per_row(s, p, alpha, cap, None, None)
        diff = float((w_loop.double() - w[:w_loop.size(0)]).abs().max())
        note = "" if done == n else f"cvxpy capped at {cap:g} s after {done}/{n} rows, extrapolated"
        rows.append({"N": n, "fast s": t_proj, "ref s": t_loop, "speed-up": t_loop / t_proj,
                     "max diff": diff, "note": note})
        print(f"[qp] N={n}: projection {t_proj:.3g} s, cvxpy loop {t_loop:.3g} s, "
              f"diff {diff:.1e}", flush=True)
    return rows


# ------------------------------------------------------- 2. FedAGHN server step
def aghn_loop_step(conv: AGHNConv, x: torch.Tensor, delta: torch.Tensor, ptr: torch.Tensor,
                   delta_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Reference: the authors' per-client rule, one client's hypernetwork at a
    time (complete graph): layer cosines of client i with all others, softmax
    with p_i over the others, self weight q_i, normalize, aggregate, and the
    gradient of <theta_tilde_i, -delta_new_i> w.r.t. (p_i, q_i)."""
    n = x.size(0)
    bounds = ptr.tolist()
    out = torch.empty_like(x)
    gp = torch.zeros_like(conv.sharpness)
    gq = torch.zeros_like(conv.self_weight)
    for i in range(n):
        p_i = conv.sharpness[i].detach().clone().requires_grad_(True)
        q_i = conv.self_weight[i].detach().clone().requires_grad_(True)
        others = torch.cat([torch.arange(i), torch.arange(i + 1, n)])
        pieces = []
        for layer in range(len(bounds) - 1):
            sl = slice(bounds[layer], bounds[layer + 1])
            d = delta[:, sl]
            norms = d.norm(dim=1)
            cos = (d[others] @ d[i]) / (norms[others] * norms[i]).clamp_min(1e-12)
            w = torch.softmax(p_i[layer] * cos, dim=0)
            q = q_i[layer].clamp(min=conv.self_weight_min)
            total = w.sum() + q
            pieces.append((q * x[i, sl] + w @ x[others, sl]) / total)
        theta_i = torch.cat(pieces)
        g = torch.autograd.grad(theta_i, [p_i, q_i], grad_outputs=-delta_new[i])
        gp[i], gq[i] = g[0], g[1]
        out[i] = theta_i.detach()
    return out, gp, gq


def aghn_rows(sizes: list[int], image: int, repeats: int) -> list[dict]:
    rows = []
    torch.manual_seed(0)
    model = CNNBN(1, 10, image)
    layout = ParamLayout.from_module(model)
    ptr, dim = layout.ptr, layout.num_params
    for n in sizes:
        gen = torch.Generator().manual_seed(n)
        x = torch.randn(n, dim, generator=gen)
        delta = torch.randn(n, dim, generator=gen)
        delta_new = torch.randn(n, dim, generator=gen)
        conv = AGHNConv(n, layout.num_layers)

        def batched(conv=conv, x=x, delta=delta, delta_new=delta_new):
            out = conv(x, delta=delta, layer_ptr=ptr)
            gp, gq = torch.autograd.grad(out, [conv.sharpness, conv.self_weight],
                                         grad_outputs=-delta_new)
            return out.detach(), gp, gq

        t_b, (o_b, gp_b, gq_b) = _median_time(batched, repeats)
        t_l, (o_l, gp_l, gq_l) = _median_time(
            lambda conv=conv, x=x, delta=delta, delta_new=delta_new: aghn_loop_step(
                conv, x, delta, ptr, delta_new), max(1, repeats // 3))
        diff = max(float((o_b - o_l).abs().max()),
                   float((gp_b - gp_l).abs().max() / gp_l.abs().max().clamp_min(1e-30)),
                   float((gq_b - gq_l).abs().max() / gq_l.abs().max().clamp_min(1e-30)))
        rows.append({"N": n, "D": dim, "L": layout.num_layers, "fast s": t_b, "ref s": t_l,
                     "speed-up": t_l / t_b, "max diff": diff})
        print(f"[aghn] N={n}: batched {t_b:.3g} s, loop {t_l:.3g} s, diff {diff:.1e}",
              flush=True)
    return rows


# ------------------------------------------------------- 3. client-parallel
def _train_flops(case: client_parallel.Case, timesteps: int = 1) -> float:
    r"""Approximate training FLOPs of one parallel run: 6 x params x samples
    (forward 2, backward 4 per weight and sample), times ``timesteps`` for
    recurrent models (weights reused at every step)."""
    cfg = case.trainer.config
    d = case.trainer.layout.num_params
    if cfg.steps is not None:
        samples = cfg.steps * cfg.batch_size * case.clients.numel()
    else:
        counts = case.trainer.dataset.num_samples("train")[case.clients]
        samples = int(counts.sum()) * (cfg.epochs or 1)
    return 6.0 * d * samples * timesteps


def parallel_rows(quick: bool, repeats: int, peak_flops: float) -> list[dict]:
    if quick:
        cases = [(client_parallel.fl60_case(60), 1),
                 (client_parallel.gru_case(20, 64, 2, 64), 12)]
    else:
        cases = [(client_parallel.fl60_case(60), 1),
                 (client_parallel.gru_case(207, 256, 5, 64), 12)]
    rows = []
    for case, steps in cases:
        t = client_parallel.run_case(case, repeats, seed=0)
        par = statistics.median(t.parallel)
        flops = _train_flops(case, steps) / par
        rows.append({"case": t.name, "clients": t.clients, "D": t.dim,
                     "fast s": par, "ref s": statistics.median(t.loop), "speed-up": t.speedup,
                     "max diff": t.max_diff, "GFLOP/s": flops / 1e9,
                     "of peak": flops / peak_flops})
        print(f"[parallel] {t.name}: {t.speedup:.3g}x, {flops / 1e9:.3g} GFLOP/s", flush=True)
    return rows


# --------------------------------------------------------- 4. aggregation
_AGG_SCRIPT = textwrap.dedent(r"""
    import json, resource, sys, time
    import torch
    from pyg_fedgraph.nn.aggregation import GraphAggregation
    torch.set_num_threads(int(sys.argv[5]))
    n, d, form, graph = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=gen)
    if graph == "complete":
        tgt, src = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        src, tgt = src.reshape(-1), tgt.reshape(-1)
    else:  # self + 8 random neighbours per client
        k = 8
        tgt = torch.arange(n).repeat_interleave(k + 1)
        nb = torch.randint(n - 1, (n, k), generator=gen)
        nb = nb + (nb >= torch.arange(n).unsqueeze(1)).long()
        src = torch.cat([torch.arange(n).unsqueeze(1), nb], 1).reshape(-1)
    w = torch.rand(src.numel(), generator=gen)
    edge_index = torch.stack([src, tgt])
    agg = GraphAggregation()
    def run():
        if form == "naive":
            msg = x[src] * w.unsqueeze(1)  # the (E, D) message tensor
            return torch.zeros_like(x).index_add_(0, tgt, msg)
        if graph == "complete":
            dense = torch.zeros(n, n).index_put_((tgt, src), w, accumulate=True)
            return agg(x, weight=dense)
        return agg(x, edge_index, w)
    def current():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    # ru_maxrss is a high-water mark that set-up temporaries may have raised:
    # lift the current usage up to it so the run's own extra memory shows.
    gap = peak() - current()
    ballast = torch.ones(max(gap, 0) // 4 + 1)
    before = peak()
    t0 = time.perf_counter(); out = run(); first = time.perf_counter() - t0
    extra = peak() - before
    times = []
    for _ in range(2):
        del out
        t0 = time.perf_counter(); out = run(); times.append(time.perf_counter() - t0)
    print(json.dumps({"seconds": min(times + [first]), "extra_bytes": extra,
                      "checksum": float(out.double().sum())}))
""")


def _agg_subprocess(n: int, d: int, form: str, graph: str, threads: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _AGG_SCRIPT, str(n), str(d), form, graph,
                           str(threads)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def aggregation_rows(sizes: list[tuple[int, int]], threads: int, copy_bw: float,
                     peak_flops: float, budget: float) -> list[dict]:
    rows = []
    for n, d in sizes:
        for graph in ("complete", "knn8"):
            e = n * n if graph == "complete" else n * 9
            fast = _agg_subprocess(n, d, "graph", graph, threads)
            naive_bytes = e * d * 4
            if naive_bytes > _available_memory():
                naive = {"note": f"naive (E, D) form does not fit in memory: "
                                 f"{naive_bytes / 1e9:.1f} GB"}
            elif naive_bytes > budget:
                naive = {"note": f"naive (E, D) form skipped: {naive_bytes / 1e9:.1f} GB is "
                                 f"over the {budget / 1e9:g} GB budget on this shared machine"}
            else:
                naive = _agg_subprocess(n, d, "naive", graph, threads)
            moved = 2 * n * d * 4  # read x, write the output (weights are negligible)
            row = {"N": n, "D": d, "graph": graph, "E": e,
                   "fast s": fast.get("seconds"), "fast peak MiB": _mib(fast.get("extra_bytes")),
                   "ref s": naive.get("seconds"), "ref peak MiB": _mib(naive.get("extra_bytes")),
                   "note": naive.get("note", naive.get("error", fast.get("error", "")))}
            if fast.get("seconds"):
                bw = moved / fast["seconds"]
                row["GB/s"] = bw / 1e9
                row["of copy bw"] = bw / copy_bw
                row["GFLOP/s"] = 2 * e * d / fast["seconds"] / 1e9
                row["of peak"] = row["GFLOP/s"] * 1e9 / peak_flops
                if naive.get("seconds"):
                    row["speed-up"] = naive["seconds"] / fast["seconds"]
                    rel = abs(naive["checksum"] - fast["checksum"]) / max(abs(fast["checksum"]), 1)
                    row["note"] = (row["note"] + f" checksum rel diff {rel:.1e}").strip()
            rows.append(row)
            print(f"[agg] N={n} D={d} {graph}: {row}", flush=True)
    return rows


def _available_memory() -> float:
    r"""MemAvailable of /proc/meminfo in bytes (infinite when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")


def _mib(b: float | None) -> float | None:
    return None if b is None else b / 2**20


# ------------------------------------------------------------ 5. end to end
def e2e_rows(dataset: str, rounds: int, quick: bool, strategies: list[str] | None
             ) -> list[dict]:
    from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
    from pyg_fedgraph.strategies import STRATEGIES

    rows = []
    names = strategies or sorted(STRATEGIES)
    over: dict = {"eval_every": rounds}
    if quick:
        over["epochs"] = 1
    if dataset == "metr-la":
        over["data.graph_path"] = str(METR_LA_GRAPH)
        over["steps"] = 5 if quick else 20
        over["epochs"] = None
    data = None
    for name in names:
        cfg = ExperimentConfig(dataset=dataset, strategy=name, rounds=rounds, seed=0,
                               overrides={k: v for k, v in over.items() if v is not None})
        try:
            sim = build_simulator(cfg, dataset=data)
            data = sim.dataset
            t0 = time.perf_counter()
            sim.run()
            sec = (time.perf_counter() - t0) / rounds
            rows.append({"dataset": dataset, "strategy": name, "s/round": sec,
                         "clients": sim.dataset.num_clients,
                         "note": f"{rounds} rounds incl. 1 evaluation"})
        except Exception as err:  # report, keep going (one strategy must not stop the suite)
            rows.append({"dataset": dataset, "strategy": name, "s/round": None,
                         "note": f"{type(err).__name__}: {str(err)[:80]}"})
        print(f"[e2e] {dataset} {name}: {rows[-1]['s/round']}", flush=True)
    return rows


# ---------------------------------------------------------------- output
def fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def table(rows: list[dict], cols: list[str]) -> list[str]:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if c == "speed-up" and isinstance(v, float):
                cells.append(f"{v:.3g}x")
            elif c in ("max diff",) and isinstance(v, float):
                cells.append(f"{v:.1e}")
            elif c == "of peak" or c == "of copy bw":
                cells.append("-" if v is None else f"{100 * v:.2g}%")
            else:
                cells.append(fmt(v))
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, few repeats (< 5 min on 2 cores)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default: 1; a shared machine makes "
                             "more threads much slower)")
    parser.add_argument("--only", default=None,
                        help="comma list of sections: qp,aghn,parallel,agg,e2e")
    parser.add_argument("--cap", type=float, default=None,
                        help="seconds after which the cvxpy loop stops and extrapolates")
    parser.add_argument("--strategies", default=None, help="comma list for the e2e rows")
    parser.add_argument("--traffic", default=None,
                        help="strategies (comma list or 'all') to also time on METR-LA "
                             "(207 clients, synthetic speeds on the real road graph)")
    parser.add_argument("--out", type=Path, default=None)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    q = args.quick
    sections = set((args.only or "qp,aghn,parallel,agg,e2e").split(","))
    load_start = os.getloadavg()[0]
    t_start = time.perf_counter()

    copy_bw = measured_copy_bandwidth(128 if q else 512, 5 if q else 10)
    peak_flops = measured_matmul_flops(1024, 5 if q else 10)
    print(f"copy bandwidth {copy_bw / 1e9:.3g} GB/s, matmul {peak_flops / 1e9:.3g} GFLOP/s",
          flush=True)
    cap = args.cap if args.cap is not None else (4.0 if q else 60.0)
    strategies = args.strategies.split(",") if args.strategies else None
    lines = [f"# Performance suite{' (--quick)' if q else ''}", "",
             "Every ratio is measured side by side in one run of this script. "
             f"torch runs on {args.threads} thread(s): the machine is shared with other "
             "jobs, and more threads on a loaded machine are much slower, not faster. "
             "Absolute seconds are inflated by the load (see Machine); ratios are the "
             "more reliable numbers.", ""]
    lines += [f"Measured limits on this machine: copy bandwidth (torch `copy_` of a "
              f"{128 if q else 512} MiB tensor, bytes read + written, fastest of "
              f"{5 if q else 10}) "
              f"**{copy_bw / 1e9:.3g} GB/s**; float32 matmul (1024^3) "
              f"**{peak_flops / 1e9:.3g} GFLOP/s** (fastest of {5 if q else 10}) on "
              f"{args.threads} thread(s). Both are measured under the same load as the "
              "rows, so a row can exceed 100% of them when the load dropped meanwhile; "
              "larger GEMMs (section 4) also run closer to the core's peak than 1024^3.", ""]

    if "qp" in sections:
        sizes = [50, 207] if q else [50, 207, 1000]
        rows = qp_rows(sizes, cap, 5 if q else 50)
        lines += ["## 1. pFedGraph graph inference: batched projection vs per-client cvxpy",
                  "", "Instance from `benchmarks/perf/pfedgraph_qp.py` (`make_instance`, D = 2000, "
                  "5 clusters); reference = one cvxpy problem per client (CLARABEL, tight "
                  "tolerances), the authors' approach. Seconds per full graph.", ""]
        lines += table(rows, ["N", "fast s", "ref s", "speed-up", "max diff", "note"]) + [""]
    if "aghn" in sections:
        rows = aghn_rows([20, 100], 28, 3 if q else 10)
        lines += ["## 2. FedAGHN server step: batched AGHNConv vs per-client loop", "",
                  "One hypernetwork step = personalized models for all N clients + gradient "
                  "of p and q (eq. (10)), complete graph, CNNBN(1, 10, 28x28) parameters. "
                  "Max diff = max of |theta difference| and relative gradient differences.",
                  ""]
        lines += table(rows, ["N", "D", "L", "fast s", "ref s", "speed-up", "max diff"]) + [""]
    if "parallel" in sections:
        rows = parallel_rows(q, 1 if q else 3, peak_flops)
        lines += ["## 3. Client-parallel local training vs per-client loop", "",
                  "Cases and timing from `benchmarks/perf/client_parallel.py` ("
                  + ("quick: 20 GRU clients x 64 windows, 2 steps" if q
                     else "207 GRU clients x 256 windows, 5 steps") + "). "
                  "GFLOP/s of the parallel path = 6 x D x samples (x 12 steps for the GRU) / "
                  "seconds, an estimate; 'of peak' compares it with the measured matmul "
                  "FLOP/s (small per-client layers cannot reach matmul speed).", ""]
        lines += table(rows, ["case", "clients", "D", "fast s", "ref s", "speed-up",
                              "max diff", "GFLOP/s", "of peak"]) + [""]
    if "agg" in sections:
        sizes = [(207, 60_000)] if q else [(207, 60_000), (1000, 100_000)]
        budget = 1.5e9 if q else 2e9
        rows = aggregation_rows(sizes, args.threads, copy_bw, peak_flops, budget)
        lines += ["## 4. GraphAggregation vs the naive (E, D) message form", "",
                  "Each form runs in its own subprocess; peak MiB = growth of `ru_maxrss` "
                  "during the first call (x itself excluded, the output included). "
                  "Complete graph uses the dense form (`weight=`), knn8 (self + 8 random "
                  "neighbours) the sparse form. "
                  f"The naive form runs only when its (E, D) tensor is under "
                  f"{budget / 1e9:g} GB. GB/s = (read x + write output) / seconds; "
                  "'of copy bw' against the measured copy bandwidth (the complete graph "
                  "is a GEMM with 2 N^2 D flops, so it is compute- rather than memory-bound: "
                  "GFLOP/s = 2 E D / seconds and 'of peak' against the measured matmul).",
                  ""]
        lines += table(rows, ["N", "D", "graph", "E", "fast s", "fast peak MiB", "ref s",
                              "ref peak MiB", "speed-up", "GB/s", "of copy bw", "GFLOP/s",
                              "of peak", "note"]) + [""]
    if "e2e" in sections:
        rounds = 2 if q else 5
        rows = e2e_rows("fl60", rounds, q, strategies)
        traffic_note = ""
        if args.traffic and METR_LA_GRAPH.joinpath("adj_mx.pkl").exists():
            names = None if args.traffic == "all" else args.traffic.split(",")
            rows += e2e_rows("metr-la", 1, q, names)
        elif args.traffic:
            traffic_note = f" METR-LA skipped: no road graph at {METR_LA_GRAPH}."
        else:
            traffic_note = (" METR-LA (207 GRU clients) is not run by default: one FedAvg "
                            "round with evaluation took about 150 s on this loaded machine "
                            "(1 thread), so all strategies would take over half an hour; "
                            "pass `--traffic all` (or a comma list) to include it.")
        lines += ["## 5. End-to-end seconds per round", "",
                  f"`build_simulator(ExperimentConfig(dataset, strategy, rounds))`, the "
                  f"strategy's defaults, one evaluation at the last round"
                  f"{', 1 local epoch' if q else ''}; METR-LA uses synthetic speeds on the "
                  f"real road graph (offline) and a fixed number of local steps."
                  + traffic_note, ""]
        lines += table(rows, ["dataset", "strategy", "clients", "s/round", "note"]) + [""]

    lines += ["## Machine", "", *machine_lines(load_start), "",
              f"Total wall time {time.perf_counter() - t_start:.0f} s. Command: `"
              + " ".join(["python benchmarks/perf/perf.py", *argv]) + "`"]
    text = "\n".join(lines) + "\n"
    print(text)
    save_report(text, args.out or RESULTS / ("perf_quick.md" if q else "perf.md"))
    return text


if __name__ == "__main__":
    main()
