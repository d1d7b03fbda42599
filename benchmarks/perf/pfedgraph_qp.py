r"""Time pFedGraph's collaboration-graph QP: batched simplex projection vs cvxpy.

The authors' code solves the QP of eq. (4) with one cvxpy problem per client in
a Python loop, every round. :class:`pyg_fedgraph.nn.collaboration_qp.CollaborationQP`
solves all rows at once as a Euclidean projection onto the simplex. This script
times, on the same random instance:

1. the batched projection (``solver="projection"``), median of many repeats;
2. one joint cvxpy problem with an (N, N) variable (``solver="cvxpy"``, CLARABEL
   at tight tolerances, the reference);
3. the authors' approach: one cvxpy problem per client (``per_row=True``), with
   the same tight CLARABEL settings;
4. the same loop with the solver and settings the authors' bare ``prob.solve()``
   gets (cvxpy picks OSQP for this QP, default tolerances, polishing on).

The per-client loops stop after ``--cap`` seconds; the total is then
extrapolated linearly from the rows solved, and the table says so.

Usage::

    python benchmarks/perf/pfedgraph_qp.py            # N = 207 (METR-LA sensors), writes results
    python benchmarks/perf/pfedgraph_qp.py --quick    # N = 30, a few repeats, prints only
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.experiment.reporting import save_report
from pyg_fedgraph.nn.collaboration_qp import (
    CollaborationQP,
    collaboration_qp_cvxpy,
    update_similarity,
)

RESULTS = Path(__file__).resolve().parents[1] / "results" / "pfedgraph_qp.md"


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


def time_repeated(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    r"""(median seconds, fastest seconds, output) over ``repeats`` runs after a warm-up."""
    out = fn()  # warm-up (and the value to compare)
    times = []
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), out


def time_per_row(s: torch.Tensor, p: torch.Tensor, alpha: float, cap: float,
                 cvxpy_solver: str | None, solver_options: dict | None
                 ) -> tuple[float, torch.Tensor, int]:
    r"""The per-client loop, row by row so it can stop after ``cap`` seconds.
    Returns (seconds for all N rows, possibly extrapolated; rows solved; count)."""
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


def machine() -> list[str]:
    import cvxpy

    lines = [
        f"- date: {dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- platform: {platform.platform()} "
        f"({platform.machine()}, {platform.processor() or 'n/a'})",
        f"- CPUs: {os.cpu_count()} (torch threads: {torch.get_num_threads()})",
        f"- python {platform.python_version()}, torch {torch.__version__}, "
        f"cvxpy {cvxpy.__version__}",
    ]
    for mod in ("clarabel", "osqp"):
        try:
            lines[-1] += f", {mod} {__import__(mod).__version__}"
        except (ImportError, AttributeError):
            pass
    if torch.cuda.is_available():
        lines.append(f"- GPU: {torch.cuda.get_device_name()} (CUDA {torch.version.cuda})")
    return lines


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=207, help="number of clients (default: 207)")
    parser.add_argument("--dim", type=int, default=2000, help="length of the updates")
    parser.add_argument("--groups", type=int, default=5, help="client clusters")
    parser.add_argument("--alpha", type=float, default=None, help="default: 0.08 * N")
    parser.add_argument("--repeats", type=int, default=200, help="repeats of the projection")
    parser.add_argument("--cvxpy-repeats", type=int, default=3, help="repeats of joint cvxpy")
    parser.add_argument("--cap", type=float, default=60.0,
                        help="seconds after which a per-client loop stops and extrapolates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-gpu", action="store_true",
                        help="skip the GPU rows even if CUDA is available")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--quick", action="store_true", help="N = 30, few repeats, no file")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"markdown output (default: {RESULTS} unless --quick)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.quick:
        args.n = min(args.n, 30)
        args.repeats, args.cvxpy_repeats, args.cap = 20, 1, min(args.cap, 5.0)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    out_path = args.out if args.out is not None else (None if args.quick else RESULTS)

    s, p = make_instance(args.n, args.dim, args.groups, args.seed)
    n = s.size(0)
    qp = CollaborationQP(args.alpha)
    alpha = qp.effective_alpha(n)

    t_proj, min_proj, w = time_repeated(lambda: qp(s, p), args.repeats)
    s32, p32 = s.float(), p.float()
    t_proj32, min_proj32, w32 = time_repeated(lambda: qp(s32, p32), args.repeats)
    gpu_rows = []
    if torch.cuda.is_available() and not args.no_gpu:
        for dtype in (torch.float64, torch.float32):
            sg, pg = s.to("cuda", dtype), p.to("cuda", dtype)

            def on_gpu(sg=sg, pg=pg) -> torch.Tensor:
                out = qp(sg, pg)
                torch.cuda.synchronize()
                return out

            t_gpu, min_gpu, w_gpu = time_repeated(on_gpu, args.repeats)
            gpu_rows.append((f"batched projection on {torch.cuda.get_device_name()} "
                             f"({str(dtype).split('.')[-1]})", t_gpu, w_gpu.cpu(),
                             f"median of {args.repeats} runs (fastest {min_gpu:.2g} s), "
                             f"includes synchronize; data already on the GPU"))
    joint = CollaborationQP(alpha, solver="cvxpy")
    t_joint, _, w_joint = time_repeated(lambda: joint(s, p), args.cvxpy_repeats)
    t_rows, w_rows, done = time_per_row(s, p, alpha, args.cap, None, None)
    t_auth, w_auth, done_auth = time_per_row(s, p, alpha, args.cap, "OSQP", {})

    def diff(other: torch.Tensor) -> float:
        return float((other.double() - w[: other.size(0)]).abs().max())

    def capped(k: int) -> str:
        return "" if k == n else f"capped at {args.cap:g} s after {k}/{n} rows; extrapolated"

    rows = [
        ("batched projection (float64)", t_proj, 0.0,
         f"median of {args.repeats} runs (fastest {min_proj:.2g} s)"),
        ("batched projection (float32)", t_proj32, diff(w32),
         f"median of {args.repeats} runs (fastest {min_proj32:.2g} s)"),
        *[(name, sec, diff(wg), note) for name, sec, wg, note in gpu_rows],
        ("joint cvxpy, one (N, N) problem, CLARABEL tight", t_joint, diff(w_joint),
         f"median of {args.cvxpy_repeats} runs, includes building the problem"),
        ("per-client cvxpy loop (authors' approach), CLARABEL tight", t_rows, diff(w_rows),
         capped(done) or "one run"),
        ("per-client cvxpy loop, OSQP default settings (authors' `prob.solve()`)", t_auth,
         diff(w_auth), capped(done_auth) or "one run"),
    ]
    header = [
        f"# pFedGraph collaboration QP: batched projection vs cvxpy (N = {n})",
        "",
        f"Instance: similarity = `update_similarity` (threshold 0.9) of {n} random updates "
        f"(length {args.dim}, {args.groups} clusters, seed {args.seed}); p from random sample "
        f"counts; alpha = {alpha:g}" + (" (0.08 N)" if args.alpha is None else "") + ".",
        "Seconds are per full graph (all N rows). Ratio = seconds / seconds of the float64 "
        "projection (how many times faster the projection is). Max |diff| is against the "
        "float64 projection.",
        "",
        "| method | seconds | ratio to projection | max abs diff vs projection | note |",
        "|---|---:|---:|---:|---|",
    ]
    table = [f"| {name} | {sec:.3g} | {sec / t_proj:.3g}x | {d:.1e} | {note} |"
             for name, sec, d, note in rows]
    footer = ["", "Machine:", *machine(), "",
              "Wall-clock seconds of one run of this script; jobs sharing the machine "
              "inflate them (compare the median and fastest projection times).",
              "The authors' loop is reproduced with `CollaborationQP(per_row=True)`: one cvxpy "
              "problem per client, objective written as in eq. (4) (`sum_squares(x) + q @ x`) "
              "rather than their `quad_form(x, lam * I)`, same minimizer.",
              "Command: `" + " ".join(["python benchmarks/perf/pfedgraph_qp.py", *argv]) + "`"]
    text = "\n".join(header + table + footer) + "\n"
    print(text)
    save_report(text, out_path)
    return text


if __name__ == "__main__":
    main()
