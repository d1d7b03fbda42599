r"""Performance suite: each fast path against its reference, side by side in one run.

Rows (see issue 10):

1. pFedGraph graph inference at N = 50, 207, 1000: the batched simplex
   projection (:class:`~pyg_fedgraph.nn.collaboration_qp.CollaborationQP`) vs the
   authors' per-client cvxpy loop (capped; extrapolated), max |difference|.
2. FedAGHN server step (hypernetwork forward + gradient of p, q) at N = 20, 100
   on the 4-layer :class:`~pyg_fedgraph.models.cnn.CNNBN` (28x28 inputs):
   batched :class:`~pyg_fedgraph.nn.aghn_conv.AGHNConv` vs a per-client loop
   (written here, one client's hypernetwork at a time as in the authors' code).
3. Client-parallel local training vs the per-client loop: FL-60 MLP clients and
   GRU forecasters, with the achieved FLOP/s of the parallel path vs a measured
   matmul FLOP/s.
4. :class:`~pyg_fedgraph.nn.aggregation.GraphAggregation` at N = 207, D = 60k and
   N = 1000, D = 100k: time and peak memory (subprocess, ``ru_maxrss``) against the
   naive (E, D) message form where it fits, with the achieved memory bandwidth
   vs a measured copy bandwidth.
5. End-to-end seconds per round of every registered strategy on FL-60 (and on
   the 207 METR-LA clients when the road graph is available).

Two rows have a detailed study of their own, ``--study`` (each its own results file):

* ``qp`` (``results/pfedgraph_qp.md``): pFedGraph's collaboration QP of eq. (4) on one
  random instance: the batched projection in float64 and float32 (and on CUDA when
  there), one joint cvxpy problem with an (N, N) variable (CLARABEL at tight
  tolerances, the reference), the authors' one cvxpy problem per client with the same
  settings, and that loop with what the authors' bare ``prob.solve()`` gets (OSQP,
  default tolerances). The per-client loops stop after ``--cap`` seconds and are
  extrapolated linearly from the rows solved (the table says so).
* ``parallel`` (``results/client_parallel.md``): ``ClientTrainer.train`` with all
  clients in one batched computation against ``parallel=False`` (one model and one
  :class:`torch.optim.SGD` per client) on the same clients, start parameters and batch
  schedule, alternating, for 60 FL-60 MLP clients and 207 GRU forecasters on
  :func:`~pyg_fedgraph.datasets.synthetic_windows`.

Each results file is rebuilt from its measurements, kept as one line of
``results/perf_records.jsonl`` (``--report-only``: nothing is measured); the
"### Reading" blocks of a results file are written by hand and kept.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/perf/perf.py --quick   # < 5 min on 2 cores, prints only
    OMP_NUM_THREADS=1 python benchmarks/perf/perf.py           # full, writes results/perf.md
    python benchmarks/perf/perf.py --study qp                  # N = 207, results/pfedgraph_qp.md
    python benchmarks/perf/perf.py --study parallel --threads 1   # results/client_parallel.md
    python benchmarks/perf/perf.py [--study S] --report-only   # the markdown again from the record
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.experiment.reporting import (
    RECORDS_NAME,
    machine_lines,
    measured_report,
)
from pyg_fedgraph.models import MLP, GRUForecaster
from pyg_fedgraph.models.cnn import CNNBN
from pyg_fedgraph.nn.aghn_conv import AGHNConv
from pyg_fedgraph.nn.collaboration_qp import (
    CollaborationQP,
    collaboration_qp_cvxpy,
    update_similarity,
)
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.utils.timing import time_calls, timed

SCRIPT = "benchmarks/perf/perf.py"
RESULTS = Path(__file__).resolve().parents[1] / "results"
#: The results file of the suite and of each study.
FILES = {"suite": "perf.md", "qp": "pfedgraph_qp.md", "parallel": "client_parallel.md"}
METR_LA_GRAPH = Path("/work/shared/data/metr-la")
SUITE_SECTIONS = ("qp", "aghn", "parallel", "agg", "e2e")


def _median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, out = time_calls(fn, max(1, repeats))
    return statistics.median(times), out


def _fastest(fn: Callable[[], object], repeats: int) -> float:
    return min(time_calls(fn, max(1, repeats))[0])


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
def make_instance(n: int, dim: int, groups: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Similarity of random client updates drawn around ``groups`` directions,
    so the matrix has cluster structure (and some entries above the 0.9
    threshold), plus relative dataset sizes from random sample counts."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(groups, dim, generator=gen, dtype=torch.float64)
    member = torch.randint(groups, (n,), generator=gen)
    noise = torch.rand(n, 1, generator=gen, dtype=torch.float64) * 1.5
    delta = centres[member] + noise * torch.randn(n, dim, generator=gen, dtype=torch.float64)
    counts = torch.randint(50, 500, (n,), generator=gen).to(torch.float64)
    return update_similarity(delta), counts / counts.sum()


def time_per_row(s: torch.Tensor, p: torch.Tensor, alpha: float, cap: float,
                 cvxpy_solver: str | None, solver_options: dict | None
                 ) -> tuple[float, torch.Tensor, int]:
    r"""The authors' per-client loop, row by row so it can stop after ``cap``
    seconds. Returns (seconds for all N rows, possibly extrapolated; rows
    solved; their count)."""
    n = s.size(0)
    rows = []
    t0 = time.perf_counter()
    for i in range(n):
        rows.append(collaboration_qp_cvxpy(s, p, alpha, per_row=True, rows=[i],
                                           cvxpy_solver=cvxpy_solver,
                                           solver_options=solver_options))
        if time.perf_counter() - t0 > cap and i + 1 < n:
            break
    elapsed = time.perf_counter() - t0
    done = len(rows)
    return elapsed * n / done, torch.cat(rows), done


def qp_rows(sizes: list[int], cap: float, repeats: int) -> list[dict]:
    rows = []
    for n in sizes:
        s, p = make_instance(n, dim=2000, groups=5, seed=0)
        qp = CollaborationQP()
        alpha = qp.effective_alpha(n)
        t_proj, w = _median_time(lambda: qp(s, p), repeats)  # noqa: B023 - called at once
        t_loop, w_loop, done = time_per_row(s, p, alpha, cap, None, None)
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

        def loop(conv: AGHNConv = conv, x: torch.Tensor = x, delta: torch.Tensor = delta,
                 delta_new: torch.Tensor = delta_new) -> tuple[torch.Tensor, ...]:
            return aghn_loop_step(conv, x, delta, ptr, delta_new)

        t_l, (o_l, gp_l, gq_l) = _median_time(loop, max(1, repeats // 3))
        diff = max(float((o_b - o_l).abs().max()),
                   float((gp_b - gp_l).abs().max() / gp_l.abs().max().clamp_min(1e-30)),
                   float((gq_b - gq_l).abs().max() / gq_l.abs().max().clamp_min(1e-30)))
        rows.append({"N": n, "D": dim, "L": layout.num_layers, "fast s": t_b, "ref s": t_l,
                     "speed-up": t_l / t_b, "max diff": diff})
        print(f"[aghn] N={n}: batched {t_b:.3g} s, loop {t_l:.3g} s, diff {diff:.1e}",
              flush=True)
    return rows


# ------------------------------------------------------- 3. client-parallel
@dataclass
class Case:
    r"""One client-parallel case: a trainer, its clients and their start
    parameters, and a line describing it."""
    name: str
    trainer: ClientTrainer
    clients: torch.Tensor
    params: torch.Tensor
    note: str


def fl60_case(num_clients: int) -> Case:
    from pyg_fedgraph.datasets import load_dataset
    data = load_dataset("fl60", num_clients=num_clients)
    torch.manual_seed(0)
    model = MLP(2, 16, 2, num_layers=3)
    cfg = LocalConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=1)
    trainer = ClientTrainer(model, data, config=cfg)
    params = trainer.layout.flatten(model).repeat(num_clients, 1)
    counts = data.num_samples("train")
    lo, hi = int(counts.min()), int(counts.max())
    note = (f"MLP(2, 16, 2, 3 layers); {lo if lo == hi else f'{lo}-{hi}'} train samples "
            f"per client, batch 16, 1 epoch, SGD momentum 0.9")
    return Case("(a) FL-60 MLP", trainer, torch.arange(num_clients), params, note)


def gru_case(num_clients: int, windows: int, steps: int, batch_size: int) -> Case:
    from pyg_fedgraph.datasets import synthetic_windows
    data = synthetic_windows(num_clients, windows)
    torch.manual_seed(0)
    model = GRUForecaster(in_channels=2, hidden_channels=100, out_steps=12)
    cfg = LocalConfig(lr=0.01, momentum=0.9, batch_size=batch_size, epochs=None, steps=steps)
    trainer = ClientTrainer(model, data, config=cfg)
    params = trainer.layout.flatten(model).repeat(num_clients, 1)
    note = (f"GRUForecaster(2, 100, out_steps=12); synthetic, {windows} windows of (12, 2) "
            f"per client, {steps} steps of batch {batch_size}, SGD momentum 0.9")
    return Case("(b) GRU forecaster", trainer, torch.arange(num_clients), params, note)


def run_case(case: Case, repeats: int, seed: int) -> dict[str, Any]:
    r"""Warm-up once per path, then ``repeats`` alternating timed runs of
    each: the seconds of every run of the parallel path and of the loop, and
    the largest parameter difference of the two paths' warm-ups."""
    def train(parallel: bool) -> tuple[float, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)  # same schedule for both paths
        case.trainer.parallel = parallel
        sec, out = timed(lambda: case.trainer.train(case.clients, case.params, generator=gen))
        return sec, out.params

    _, ref_loop = train(False)
    _, ref_par = train(True)
    loop: list[float] = []
    par: list[float] = []
    for _ in range(repeats):
        for parallel, times in ((False, loop), (True, par)):
            times.append(train(parallel)[0])
    return {"case": case.name, "clients": case.clients.numel(),
            "D": case.trainer.layout.num_params, "loop": loop, "parallel": par,
            "max diff": float((ref_loop - ref_par).abs().max()), "note": case.note}


def _train_flops(case: Case, timesteps: int = 1) -> float:
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
    gru = (20, 64, 2) if quick else (207, 256, 5)
    rows = []
    for case, steps in ((fl60_case(60), 1), (gru_case(*gru, 64), 12)):
        t = run_case(case, repeats, seed=0)
        par, loop = statistics.median(t["parallel"]), statistics.median(t["loop"])
        flops = _train_flops(case, steps) / par
        rows.append({"case": t["case"], "clients": t["clients"], "D": t["D"],
                     "fast s": par, "ref s": loop, "speed-up": loop / par,
                     "max diff": t["max diff"], "GFLOP/s": flops / 1e9,
                     "of peak": flops / peak_flops})
        print(f"[parallel] {t['case']}: {loop / par:.3g}x, {flops / 1e9:.3g} GFLOP/s",
              flush=True)
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


def _agg_subprocess(n: int, d: int, form: str, graph: str, threads: int
                    ) -> dict[str, Any]:
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
            naive: dict[str, Any]
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

    rows: list[dict[str, Any]] = []
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
            sec, _ = timed(sim.run)
            rows.append({"dataset": dataset, "strategy": name, "s/round": sec / rounds,
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


TRAFFIC_NOTES = {
    "not asked": (" METR-LA (207 GRU clients) is not run by default: one FedAvg round with "
                  "evaluation took about 150 s on this loaded machine (1 thread), so all "
                  "strategies would take over half an hour; pass `--traffic all` (or a comma "
                  "list) to include it."),
    "no graph": " METR-LA skipped: no road graph at {graph}.",
    "run": "",
}


def suite_report(record: dict[str, Any]) -> str:
    r"""The markdown of a suite record (``results/perf.md``)."""
    q, threads = record["quick"], record["threads"]
    copy_bw, peak_flops, sections = record["copy_bw"], record["peak_flops"], record["sections"]
    lines = [f"# Performance suite{' (--quick)' if q else ''}", "",
             "Every ratio is measured side by side in one run of this script. "
             f"torch runs on {threads} thread(s): the machine is shared with other "
             "jobs, and more threads on a loaded machine are much slower, not faster. "
             "Absolute seconds are inflated by the load (see Machine); ratios are the "
             "more reliable numbers.", ""]
    lines += [f"Measured limits on this machine: copy bandwidth (torch `copy_` of a "
              f"{128 if q else 512} MiB tensor, bytes read + written, fastest of "
              f"{5 if q else 10}) "
              f"**{copy_bw / 1e9:.3g} GB/s**; float32 matmul (1024^3) "
              f"**{peak_flops / 1e9:.3g} GFLOP/s** (fastest of {5 if q else 10}) on "
              f"{threads} thread(s). Both are measured under the same load as the "
              "rows, so a row can exceed 100% of them when the load dropped meanwhile; "
              "larger GEMMs (section 4) also run closer to the core's peak than 1024^3.", ""]
    if "qp" in sections:
        lines += ["## 1. pFedGraph graph inference: batched projection vs per-client cvxpy",
                  "", "Instance of `perf.py --study qp` (`make_instance`, D = 2000, "
                  "5 clusters); reference = one cvxpy problem per client (CLARABEL, tight "
                  "tolerances), the authors' approach. Seconds per full graph.", ""]
        lines += table(sections["qp"], ["N", "fast s", "ref s", "speed-up", "max diff",
                                        "note"]) + [""]
    if "aghn" in sections:
        lines += ["## 2. FedAGHN server step: batched AGHNConv vs per-client loop", "",
                  "One hypernetwork step = personalized models for all N clients + gradient "
                  "of p and q (eq. (10)), complete graph, CNNBN(1, 10, 28x28) parameters. "
                  "Max diff = max of |theta difference| and relative gradient differences.",
                  ""]
        lines += table(sections["aghn"], ["N", "D", "L", "fast s", "ref s", "speed-up",
                                          "max diff"]) + [""]
    if "parallel" in sections:
        lines += ["## 3. Client-parallel local training vs per-client loop", "",
                  "Cases and timing of `perf.py --study parallel` ("
                  + ("quick: 20 GRU clients x 64 windows, 2 steps" if q
                     else "207 GRU clients x 256 windows, 5 steps") + "). "
                  "GFLOP/s of the parallel path = 6 x D x samples (x 12 steps for the GRU) / "
                  "seconds, an estimate; 'of peak' compares it with the measured matmul "
                  "FLOP/s (small per-client layers cannot reach matmul speed).", ""]
        lines += table(sections["parallel"], ["case", "clients", "D", "fast s", "ref s",
                                              "speed-up", "max diff", "GFLOP/s",
                                              "of peak"]) + [""]
    if "agg" in sections:
        budget = record["agg_budget"]
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
        lines += table(sections["agg"], ["N", "D", "graph", "E", "fast s", "fast peak MiB",
                                         "ref s", "ref peak MiB", "speed-up", "GB/s",
                                         "of copy bw", "GFLOP/s", "of peak", "note"]) + [""]
    if "e2e" in sections:
        note = TRAFFIC_NOTES[record["traffic"]].format(graph=METR_LA_GRAPH)
        lines += ["## 5. End-to-end seconds per round", "",
                  f"`build_simulator(ExperimentConfig(dataset, strategy, rounds))`, the "
                  f"strategy's defaults, one evaluation at the last round"
                  f"{', 1 local epoch' if q else ''}; METR-LA uses synthetic speeds on the "
                  f"real road graph (offline) and a fixed number of local steps." + note, ""]
        lines += table(sections["e2e"], ["dataset", "strategy", "clients", "s/round",
                                         "note"]) + [""]
    lines += ["## Machine", "", *record["machine"], "",
              f"Total wall time {record['seconds']:.0f} s. Command: `{record['command']}`"]
    return "\n".join(lines) + "\n"


def measure_suite(args: argparse.Namespace, command: str) -> dict[str, Any]:
    q = args.quick
    sections = (args.only or ",".join(SUITE_SECTIONS)).split(",")
    unknown = set(sections) - set(SUITE_SECTIONS)
    if unknown:
        raise SystemExit(f"--only: unknown sections {sorted(unknown)}; choose from "
                         + ",".join(SUITE_SECTIONS))
    load_start = os.getloadavg()[0]
    t_start = time.perf_counter()
    copy_bw = measured_copy_bandwidth(128 if q else 512, 5 if q else 10)
    peak_flops = measured_matmul_flops(1024, 5 if q else 10)
    print(f"copy bandwidth {copy_bw / 1e9:.3g} GB/s, matmul {peak_flops / 1e9:.3g} GFLOP/s",
          flush=True)
    cap = args.cap if args.cap is not None else (4.0 if q else 60.0)
    strategies = args.strategies.split(",") if args.strategies else None
    record: dict[str, Any] = {"quick": q, "threads": args.threads, "copy_bw": copy_bw,
                              "peak_flops": peak_flops, "sections": {}}
    out = record["sections"]
    if "qp" in sections:
        out["qp"] = qp_rows([50, 207] if q else [50, 207, 1000], cap, 5 if q else 50)
    if "aghn" in sections:
        out["aghn"] = aghn_rows([20, 100], 28, 3 if q else 10)
    if "parallel" in sections:
        out["parallel"] = parallel_rows(q, 1 if q else 3, peak_flops)
    if "agg" in sections:
        record["agg_budget"] = 1.5e9 if q else 2e9
        out["agg"] = aggregation_rows([(207, 60_000)] if q else [(207, 60_000), (1000, 100_000)],
                                      args.threads, copy_bw, peak_flops, record["agg_budget"])
    if "e2e" in sections:
        rows = e2e_rows("fl60", 2 if q else 5, q, strategies)
        if args.traffic and METR_LA_GRAPH.joinpath("adj_mx.pkl").exists():
            names = None if args.traffic == "all" else args.traffic.split(",")
            rows += e2e_rows("metr-la", 1, q, names)
            record["traffic"] = "run"
        else:
            record["traffic"] = "no graph" if args.traffic else "not asked"
        out["e2e"] = rows
    record.update({"machine": machine_lines(load_start), "command": command,
                   "seconds": time.perf_counter() - t_start})
    return record


# ------------------------------------------------- --study qp: pFedGraph's QP
def qp_run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    r"""One run of the QP study: every method's seconds on one instance, and
    its largest difference to the float64 projection."""
    load_start = os.getloadavg()[0]
    s, p = make_instance(args.n, args.dim, args.groups, args.seed)
    n = s.size(0)
    qp = CollaborationQP(args.alpha)
    alpha = qp.effective_alpha(n)
    repeats = args.repeats

    def median_fastest(fn: Callable[[], torch.Tensor], k: int) -> tuple[float, float, Any]:
        times, out = time_calls(fn, max(k, 1))
        return statistics.median(times), min(times), out

    t_proj, min_proj, w = median_fastest(lambda: qp(s, p), repeats)
    s32, p32 = s.float(), p.float()
    t_proj32, min_proj32, w32 = median_fastest(lambda: qp(s32, p32), repeats)

    def diff(other: torch.Tensor) -> float:
        return float((other.double() - w[: other.size(0)]).abs().max())

    def capped(k: int) -> str:
        return "" if k == n else f"capped at {args.cap:g} s after {k}/{n} rows; extrapolated"

    rows: list[dict[str, Any]] = [
            {"method": "batched projection (float64)", "seconds": t_proj, "diff": 0.0,
             "note": f"median of {repeats} runs (fastest {min_proj:.2g} s)"},
            {"method": "batched projection (float32)", "seconds": t_proj32, "diff": diff(w32),
             "note": f"median of {repeats} runs (fastest {min_proj32:.2g} s)"}]
    if torch.cuda.is_available() and not args.no_gpu:
        for dtype in (torch.float64, torch.float32):
            sg, pg = s.to("cuda", dtype), p.to("cuda", dtype)
            def on_gpu(sg: torch.Tensor = sg, pg: torch.Tensor = pg) -> torch.Tensor:
                return qp(sg, pg)

            times, w_gpu = time_calls(on_gpu, repeats, "cuda")
            rows.append({"method": f"batched projection on {torch.cuda.get_device_name()} "
                                   f"({str(dtype).split('.')[-1]})",
                         "seconds": statistics.median(times), "diff": diff(w_gpu.cpu()),
                         "note": f"median of {repeats} runs (fastest {min(times):.2g} s), "
                                 f"includes synchronize; data already on the GPU"})
    joint = CollaborationQP(alpha, solver="cvxpy")
    t_joint, _, w_joint = median_fastest(lambda: joint(s, p), args.cvxpy_repeats)
    t_rows, w_rows, done = time_per_row(s, p, alpha, args.cap, None, None)
    t_auth, w_auth, done_auth = time_per_row(s, p, alpha, args.cap, "OSQP", {})
    rows += [{"method": "joint cvxpy, one (N, N) problem, CLARABEL tight", "seconds": t_joint,
              "diff": diff(w_joint),
              "note": f"median of {args.cvxpy_repeats} runs, includes building the problem"},
             {"method": "per-client cvxpy loop (authors' approach), CLARABEL tight",
              "seconds": t_rows, "diff": diff(w_rows), "note": capped(done) or "one run"},
             {"method": "per-client cvxpy loop, OSQP default settings (authors' "
                        "`prob.solve()`)", "seconds": t_auth, "diff": diff(w_auth),
              "note": capped(done_auth) or "one run"}]
    for row in rows:
        row["ratio"] = row["seconds"] / t_proj
    return {"n": n, "dim": args.dim, "groups": args.groups, "seed": args.seed, "alpha": alpha,
            "alpha_rule": args.alpha is None, "rows": rows, "machine": qp_machine(load_start),
            "command": command}


def qp_machine(load_start: float) -> list[str]:
    r"""The machine lines of a QP run, with the solvers' versions."""
    import cvxpy

    lines = machine_lines(load_start)
    versions = f"cvxpy {cvxpy.__version__}"
    for mod in ("clarabel", "osqp"):
        try:
            versions += f", {mod} {__import__(mod).__version__}"
        except (ImportError, AttributeError):
            pass
    lines.append(f"- solvers: {versions}")
    if torch.cuda.is_available():
        lines.append(f"- GPU: {torch.cuda.get_device_name()} (CUDA {torch.version.cuda})")
    return lines


def qp_report(record: dict[str, Any]) -> str:
    r"""The markdown of a QP study record (``results/pfedgraph_qp.md``): its
    first run, then each further run under its title."""
    lines = [f"# pFedGraph collaboration QP: batched projection vs cvxpy "
             f"(N = {record['runs'][0]['n']})", "",
             "Seconds are per full graph (all N rows), wall-clock seconds of one run: jobs "
             "sharing the machine inflate them (compare the median and fastest projection "
             "times). Ratio = seconds / seconds of the float64 projection (how many times "
             "faster the projection is). Max |diff| is against the float64 projection. The "
             "authors' loop is reproduced with `CollaborationQP(per_row=True)`: one cvxpy "
             "problem per client, objective written as in eq. (4) (`sum_squares(x) + q @ x`) "
             "rather than their `quad_form(x, lam * I)`, same minimizer.", ""]
    for k, run in enumerate(record["runs"]):
        if k:
            lines += [f"## {run['title']}", ""]
        lines += [f"Instance: similarity = `update_similarity` (threshold 0.9) of {run['n']} "
                  f"random updates (length {run['dim']}, {run['groups']} clusters, seed "
                  f"{run['seed']}); p from random sample counts; alpha = {run['alpha']:g}"
                  + (" (0.08 N)" if run["alpha_rule"] else "") + ".", "",
                  "| method | seconds | ratio to projection | max abs diff vs projection | "
                  "note |", "|---|---:|---:|---:|---|"]
        lines += [f"| {r['method']} | {r['seconds']:.3g} | {r['ratio']:.3g}x | {r['diff']:.1e} "
                  f"| {r['note']} |" for r in run["rows"]]
        lines += ["", "Machine:", *run["machine"], "", f"Command: `{run['command']}`", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# ---------------------------------------- --study parallel: client-parallel training
def measure_parallel(args: argparse.Namespace, command: str) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    rows = []
    for case in (fl60_case(60), gru_case(args.gru_clients, args.gru_windows, args.gru_steps,
                                         args.batch_size)):
        t = run_case(case, args.repeats, args.seed)
        loop, par = t.pop("loop"), t.pop("parallel")
        t.update({"loop s": statistics.median(loop), "parallel s": statistics.median(par),
                  "loop range": [min(loop), max(loop)], "parallel range": [min(par), max(par)]})
        t["speed-up"] = t["loop s"] / t["parallel s"]
        print(f"{t['case']}: loop {t['loop s']:.3g} s, parallel {t['parallel s']:.3g} s, "
              f"speed-up {t['speed-up']:.3g}x, max diff {t['max diff']:.1e}", flush=True)
        rows.append(t)
    return {"seed": args.seed, "repeats": args.repeats, "rows": rows,
            "machine": machine_lines(load_start), "command": command}


def parallel_report(record: dict[str, Any]) -> str:
    r"""The markdown of a client-parallel study record (``results/client_parallel.md``)."""
    def spread(xs: list[float]) -> str:
        return f"{xs[0]:.3g}-{xs[1]:.3g}"

    lines = [
        "# Client-parallel local training vs the per-client loop", "",
        "`ClientTrainer.train(parallel=True)` (all clients in one `vmap(grad(...))` "
        "computation) against `parallel=False` (the reference loop: one model and one "
        "`torch.optim.SGD` per client), same clients, same start parameters, same batch "
        f"schedule (generator seed {record['seed']}). Seconds are the median of "
        f"{record['repeats']} timed runs per path (the paths alternate; one untimed warm-up "
        "run each). Speed-up = loop / parallel. Max diff = max |parameter difference| between "
        "the two paths after training.", "",
        "| case | clients | D | loop s | parallel s | speed-up | max diff |",
        "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {t['case']} | {t['clients']} | {t['D']:,} | {t['loop s']:.3g} | "
              f"{t['parallel s']:.3g} | {t['speed-up']:.3g}x | {t['max diff']:.1e} |"
              for t in record["rows"]]
    lines += ["", "Per case:"] + [
        f"- {t['case']}: {t['note']}. Range over repeats: loop {spread(t['loop range'])} s, "
        f"parallel {spread(t['parallel range'])} s." for t in record["rows"]]
    lines += ["", "## Machine", "", *record["machine"], "", f"Command: `{record['command']}`"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ main
REPORTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "suite": suite_report, "qp": qp_report, "parallel": parallel_report}


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", choices=("qp", "parallel"), default=None,
                        help="one row in detail, its own results file (default: the suite)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, few repeats (the suite: < 5 min on 2 cores); "
                             "prints only unless --out")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: 1 for the suite, torch's "
                             "choice for a study; a shared machine makes more threads much "
                             "slower)")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the results file from its record in "
                             f"{RECORDS_NAME} beside it, measuring nothing")
    parser.add_argument("--out", type=Path, default=None,
                        help="markdown output (default: results/perf.md, pfedgraph_qp.md or "
                             "client_parallel.md, unless --quick); the record goes to "
                             f"{RECORDS_NAME} in the same folder")
    suite = parser.add_argument_group("the suite")
    suite.add_argument("--only", default=None,
                       help="comma list of sections: " + ",".join(SUITE_SECTIONS))
    suite.add_argument("--cap", type=float, default=None,
                       help="seconds after which a per-client cvxpy loop stops and "
                            "extrapolates (suite: 4 with --quick, else 60; qp study: 60)")
    suite.add_argument("--strategies", default=None, help="comma list for the e2e rows")
    suite.add_argument("--traffic", default=None,
                       help="strategies (comma list or 'all') to also time on METR-LA "
                            "(207 clients, synthetic speeds on the real road graph)")
    qp = parser.add_argument_group("--study qp")
    qp.add_argument("--n", type=int, default=207, help="number of clients (default: 207)")
    qp.add_argument("--dim", type=int, default=2000, help="length of the updates")
    qp.add_argument("--groups", type=int, default=5, help="client clusters")
    qp.add_argument("--alpha", type=float, default=None, help="default: 0.08 * N")
    qp.add_argument("--cvxpy-repeats", type=int, default=3, help="repeats of joint cvxpy")
    qp.add_argument("--no-gpu", action="store_true",
                    help="skip the GPU rows even if CUDA is available")
    par = parser.add_argument_group("--study parallel")
    par.add_argument("--gru-clients", type=int, default=207)
    par.add_argument("--gru-windows", type=int, default=256)
    par.add_argument("--gru-steps", type=int, default=5)
    par.add_argument("--batch-size", type=int, default=64, help="GRU local batch size")
    both = parser.add_argument_group("both studies")
    both.add_argument("--repeats", type=int, default=None,
                      help="timed runs per path (qp: 200 projections; parallel: 5)")
    both.add_argument("--seed", type=int, default=0,
                      help="seed of the QP instance or of the batch schedule")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    study = args.study or "suite"
    out = args.out if args.out is not None else (None if args.quick
                                                  else RESULTS / FILES[study])
    if args.report_only and out is None:
        parser.error("--report-only rebuilds a file: drop --quick or give --out")
    text = measured_report(
        out, REPORTS[study],
        None if args.report_only
        else lambda: measure(study, args, " ".join([f"python {SCRIPT}", *argv])),
        script=SCRIPT, study=study)
    print(text)
    return text


def measure(study: str, args: argparse.Namespace, command: str) -> dict[str, Any]:
    r"""The record of one run of ``study`` with the options ``args``."""
    if study == "suite":
        torch.set_num_threads(args.threads or 1)
        args.threads = torch.get_num_threads()
        return measure_suite(args, command)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if study == "qp":
        args.repeats = args.repeats or 200
        args.cap = 60.0 if args.cap is None else args.cap
        if args.quick:
            args.n = min(args.n, 30)
            args.repeats, args.cvxpy_repeats, args.cap = 20, 1, min(args.cap, 5.0)
        return {"runs": [qp_run(args, command)]}
    args.repeats = args.repeats or 5
    if args.quick:
        args.repeats = 1
        args.gru_clients, args.gru_windows, args.gru_steps = 20, 64, 2
    return measure_parallel(args, command)


if __name__ == "__main__":
    main()
