"""Steady-state seconds per round on FL-60: 2 warm-up rounds, then the best of 3 blocks of 10
rounds, one ``Simulator.step()`` loop per strategy (used by ``perf_alternate.sh --steady``).

Usage: ``python benchmarks/perf/steady_rounds.py fedavg,local,...`` prints ``name seconds`` lines.
"""
from __future__ import annotations

import sys
import time

import torch

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator


def main(names: list[str]) -> None:
    torch.set_num_threads(1)
    for name in names:
        sim = build_simulator(ExperimentConfig(dataset="fl60", strategy=name, rounds=100, seed=0))
        sim.step()
        sim.step()
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(10):
                sim.step()
            best = min(best, (time.perf_counter() - t0) / 10)
        print(name, f"{best:.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(","))
