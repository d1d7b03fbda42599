"""CPU seconds of one round and of one evaluation of every strategy of claims.py's
section O (Panacea's protocol on the recorded METR-LA and PEMS-BAY fragments), one torch
thread, and the CPU hours that section's plan needs.

A round is a training round without evaluation (5 clients, K_c = 50 local steps of batch
64, the server step); an evaluation is the validation and test metrics of every client
(FedAvg-FT's fine-tuning and Per-FedAvg's personalization step included). Each is timed
with the process's CPU time (``time.process_time``), which a busy machine inflates far
less than wall time: after one warm-up round, the mean of ``--rounds`` rounds, then one
evaluation. The client learning rate is 0.01 (the middle of the paper's grid; the cost
does not depend on it).

The measured costs are merged into ``results/traffic_rounds.json`` (dataset -> strategy ->
[CPU s per round, CPU s per evaluation, rounds timed]; a strategy measured again replaces
its entry), which section O of claims.md reads ("Hours measured"), and the
whole record is also written as ``results/traffic_rounds.md``.

Usage::

    OMP_NUM_THREADS=1 python \
        benchmarks/reproduce/traffic_rounds.py    # every dataset and strategy
    OMP_NUM_THREADS=1 python \
        benchmarks/reproduce/traffic_rounds.py --datasets pems-bay --strategies fedavg
    python benchmarks/reproduce/traffic_rounds.py --report-only  # the markdown from the JSON record
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import time

import torch
from claims import (
    ROOT,
    TRAFFIC_COST,
    TRAFFIC_DATA,
    TRAFFIC_STRATEGIES,
    traffic_config,
    traffic_hours_lines,
)

from pyg_fedgraph.datasets import load_dataset
from pyg_fedgraph.experiment import build_simulator
from pyg_fedgraph.experiment.reporting import save_report


def time_strategy(data, dataset: str, strategy: str, rounds: int) -> tuple[float, float]:
    r"""CPU seconds of one training round (mean of ``rounds`` after a warm-up
    round) and of one evaluation of ``strategy`` on ``data``."""
    cfg = traffic_config(dataset, strategy, 0.01)
    cfg = dataclasses.replace(cfg, rounds=10_000,
                              overrides={**cfg.overrides, "eval_every": 10_000})
    sim = build_simulator(cfg, dataset=data)
    sim.step()
    t0 = time.process_time()
    for _ in range(rounds):
        sim.step()
    train = (time.process_time() - t0) / rounds
    t0 = time.process_time()
    sim.evaluate()
    return train, time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(TRAFFIC_DATA))
    parser.add_argument("--strategies", default=",".join(TRAFFIC_STRATEGIES))
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds (default: 2)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--report-only", action="store_true",
                        help="measure nothing: rebuild the markdown from the JSON record")
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("pyg_fedgraph").setLevel(logging.ERROR)
    os.chdir(ROOT)  # the data root of traffic_config is relative to the repository
    load_start = os.getloadavg()[0]
    record = (json.loads(TRAFFIC_COST.read_text()) if TRAFFIC_COST.exists()
              else {"cost": {}})
    for d in [] if args.report_only else args.datasets.split(","):
        data = load_dataset(d, root=traffic_config(d, "fedavg", 0.01).overrides["data.root"])
        for s in args.strategies.split(","):
            train, evaluate = time_strategy(data, d, s, args.rounds)
            record["cost"].setdefault(d, {})[s] = [round(train, 3), round(evaluate, 2),
                                                   args.rounds]
            print(f"| {d} | {s} | {train:.2f} | {evaluate:.1f} |", flush=True)
    if not args.report_only:
        record.update(date=dt.date.today().isoformat(),
                      machine=f"{platform.machine()}, {os.cpu_count()} CPUs shared, torch "
                              f"{torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, "
                              f"load {load_start:.1f} at the start")
        if not args.no_write:
            TRAFFIC_COST.write_text(json.dumps(record, indent=1) + "\n")
    text = "\n".join(["# Section O's cost: CPU seconds per round and per evaluation", "",
                      *traffic_hours_lines(TRAFFIC_COST)[2:],
                      "Command: `python benchmarks/reproduce/traffic_rounds.py`", ""])
    print(text)
    save_report(text, None if args.no_write else TRAFFIC_COST.with_suffix(".md"))


if __name__ == "__main__":
    main()
