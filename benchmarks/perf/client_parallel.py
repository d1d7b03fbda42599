r"""Time client-parallel local training against the per-client reference loop.

:class:`pyg_fedgraph.train.trainer.ClientTrainer` trains all sampled clients in
one batched computation (``vmap(grad(...))`` over stacked flat parameters,
``ClientTrainer.parallel``); ``parallel=False`` runs the reference loop, one model and
one :class:`torch.optim.SGD` per client. Both consume the same mini-batch
schedule, so on the same start parameters and seed they must end at the same
parameters up to float rounding. This script measures both side by side in one
run (same clients, same start parameters, same schedule seed), repeated with
the two paths alternating, and reports the median seconds, the speed-up and the
largest parameter difference, for:

(a) FL-60: 60 clients, the FL-60 MLP (hidden 16, 3 layers), 1 local epoch;
(b) 207 GRU forecasters (hidden 100) on a synthetic regression federation of
    207 clients x 256 windows of (12, 2) inputs and 12 targets, a fixed number
    of local steps.

Usage::

    python benchmarks/perf/client_parallel.py  # full run, writes results/client_parallel.md
    python benchmarks/perf/client_parallel.py --quick   # small, 1 repeat, prints only
"""
from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.datasets import load_dataset
from pyg_fedgraph.experiment.reporting import save_report
from pyg_fedgraph.models import MLP, GRUForecaster
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.trainer import ClientTrainer

RESULTS = Path(__file__).resolve().parents[1] / "results" / "client_parallel.md"


@dataclass
class Case:
    name: str
    trainer: ClientTrainer
    clients: torch.Tensor
    params: torch.Tensor
    note: str


@dataclass
class Timing:
    name: str
    clients: int
    dim: int
    loop: list[float]
    parallel: list[float]
    max_diff: float
    note: str

    @property
    def speedup(self) -> float:
        return statistics.median(self.loop) / statistics.median(self.parallel)


def synthetic_traffic(num_clients: int, windows: int, steps_in: int = 12, steps_out: int = 12,
                      seed: int = 0) -> FederatedDataset:
    r"""Regression windows shaped like METR-LA's: inputs (speed, time of day) over
    ``steps_in`` steps, targets the next ``steps_out`` speeds. Every client is a
    noisy sinusoid with its own phase and level."""
    gen = torch.Generator().manual_seed(seed)
    total = steps_in + steps_out
    splits = {}
    for split, count in (("train", windows), ("val", 32), ("test", 32)):
        start = torch.rand(num_clients, count, 1, generator=gen) * 288
        t = start + torch.arange(total).view(1, 1, total)  # 5-minute steps, 288 a day
        phase = torch.rand(num_clients, 1, 1, generator=gen) * 2 * math.pi
        level = torch.rand(num_clients, 1, 1, generator=gen)
        speed = level + 0.5 * torch.sin(2 * math.pi * t / 288 + phase)
        speed = speed + 0.05 * torch.randn(speed.shape, generator=gen)
        tod = (t % 288) / 288
        x = torch.stack([speed[..., :steps_in], tod[..., :steps_in]], dim=-1)
        y = speed[..., steps_in:]
        splits[split] = ClientSplit(x, y, torch.full((num_clients,), count, dtype=torch.long))
    return FederatedDataset("synthetic-traffic", "regression", splits,
                            info={"synthetic": True})


def fl60_case(num_clients: int) -> Case:
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
    data = synthetic_traffic(num_clients, windows)
    torch.manual_seed(0)
    model = GRUForecaster(in_channels=2, hidden_channels=100, out_steps=12)
    cfg = LocalConfig(lr=0.01, momentum=0.9, batch_size=batch_size, epochs=None, steps=steps)
    trainer = ClientTrainer(model, data, config=cfg)
    params = trainer.layout.flatten(model).repeat(num_clients, 1)
    note = (f"GRUForecaster(2, 100, out_steps=12); synthetic, {windows} windows of (12, 2) "
            f"per client, {steps} steps of batch {batch_size}, SGD momentum 0.9")
    return Case("(b) GRU forecaster", trainer, torch.arange(num_clients), params, note)


def run_case(case: Case, repeats: int, seed: int) -> Timing:
    r"""Warm-up once per path, then ``repeats`` alternating timed runs of each."""
    def train(parallel: bool) -> tuple[float, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)  # same schedule for both paths
        t0 = time.perf_counter()
        case.trainer.parallel = parallel
        out = case.trainer.train(case.clients, case.params, generator=gen)
        return time.perf_counter() - t0, out.params

    _, ref_loop = train(False)
    _, ref_par = train(True)
    loop, par = [], []
    for _ in range(repeats):
        for parallel, times in ((False, loop), (True, par)):
            sec, _ = train(parallel)
            times.append(sec)
    return Timing(case.name, case.clients.numel(), case.trainer.layout.num_params, loop, par,
                  float((ref_loop - ref_par).abs().max()), case.note)


def machine() -> list[str]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    lines = [
        f"- date: {dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- platform: {platform.platform()} ({platform.machine()}, "
        f"{platform.processor() or 'n/a'})",
        f"- CPUs: {os.cpu_count()} (torch threads: {torch.get_num_threads()})",
        f"- python {platform.python_version()}, torch {torch.__version__}",
    ]
    if load is not None:
        lines.append(f"- load average at the end (1, 5, 15 min): "
                     f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}")
    return lines


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="20 GRU clients x 64 windows, 2 steps, 1 repeat; prints only")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per path")
    parser.add_argument("--gru-clients", type=int, default=207)
    parser.add_argument("--gru-windows", type=int, default=256)
    parser.add_argument("--gru-steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="GRU local batch size")
    parser.add_argument("--seed", type=int, default=0, help="seed of the batch schedule")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"markdown output (default: {RESULTS} unless --quick)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
        args.gru_clients, args.gru_windows, args.gru_steps = 20, 64, 2
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    out_path = args.out if args.out is not None else (None if args.quick else RESULTS)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    timings = []
    for case in (fl60_case(60),
                 gru_case(args.gru_clients, args.gru_windows, args.gru_steps, args.batch_size)):
        t = run_case(case, args.repeats, args.seed)
        print(f"{t.name}: loop {statistics.median(t.loop):.3g} s, parallel "
              f"{statistics.median(t.parallel):.3g} s, speed-up {t.speedup:.3g}x, "
              f"max diff {t.max_diff:.1e}", flush=True)
        timings.append(t)

    def spread(xs: list[float]) -> str:
        return f"{min(xs):.3g}-{max(xs):.3g}"

    header = [
        "# Client-parallel local training vs the per-client loop",
        "",
        "`ClientTrainer.train(parallel=True)` (all clients in one `vmap(grad(...))` "
        "computation) against `parallel=False` (the reference loop: one model and one "
        "`torch.optim.SGD` per client), same clients, same start parameters, same batch "
        f"schedule (generator seed {args.seed}). Seconds are the median of {args.repeats} "
        "timed runs per path (the paths alternate; one untimed warm-up run each). "
        "Speed-up = loop / parallel. Max diff = max |parameter difference| between the two "
        "paths after training.",
        "",
        "| case | clients | D | loop s | parallel s | speed-up | max diff |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    table = [f"| {t.name} | {t.clients} | {t.dim:,} | {statistics.median(t.loop):.3g} | "
             f"{statistics.median(t.parallel):.3g} | {t.speedup:.3g}x | {t.max_diff:.1e} |"
             for t in timings]
    details = ["", "Per case:"] + [
        f"- {t.name}: {t.note}. Range over repeats: loop {spread(t.loop)} s, "
        f"parallel {spread(t.parallel)} s." for t in timings]
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cpus = os.cpu_count() or 1
    noisy = max(load_before, load_after) > 0.75 * cpus or any(
        max(xs) > 1.3 * min(xs) for t in timings for xs in (t.loop, t.parallel))
    footer = ["", "Machine:", *machine(), ""]
    if noisy:
        footer.append(f"The CPU was shared with other jobs while this ran (1-minute load "
                      f"average {load_before:.1f} at the start, {load_after:.1f} at the end, "
                      f"on {cpus} CPUs): absolute seconds are inflated and noisy; the two "
                      "paths alternate, so the ratio is the more reliable number.")
    footer.append("Command: `" + " ".join(["python benchmarks/perf/client_parallel.py", *argv])
                  + "`")
    text = "\n".join(header + table + details + footer) + "\n"
    print()
    print(text)
    save_report(text, out_path)
    return text


if __name__ == "__main__":
    main()
