r"""Runs K fresh 2-round FL-60 runs of one strategy in one process, for counting the work per
run with valgrind (issue 16, ``benchmarks/results/perf_before_after.md``, section 3).

Builds 13 simulators (not counted apart: the same in every process), runs one untimed, then K;
the difference of two processes with different K, divided by the difference of K, is one run::

    OMP_NUM_THREADS=1 PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no \
        python benchmarks/perf/fresh_runs.py fedavg 2     # and again with 12

Usage: ``python benchmarks/perf/fresh_runs.py STRATEGY K`` (K at most 12). Prints nothing.
"""
from __future__ import annotations

import sys

import torch

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    name, k = args[0], int(args[1])
    if not 0 <= k <= 12:
        raise SystemExit("K must be between 0 and 12")
    torch.set_num_threads(1)
    data = None
    sims = []
    for _ in range(13):
        cfg = ExperimentConfig(dataset="fl60", strategy=name, rounds=2, seed=0,
                               overrides={"eval_every": 2, "epochs": 1})
        sim = build_simulator(cfg, dataset=data)
        data = sim.dataset
        sims.append(sim)
    sims[0].run()
    for sim in sims[1:1 + k]:
        sim.run()


if __name__ == "__main__":
    main()
