"""Every registered strategy on one setting: test metric (mean and std over seeds) and
seconds per round, as a markdown table.

    python benchmarks/reproduce/compare_strategies.py  # digits, pathological, 3 seeds
    python benchmarks/reproduce/compare_strategies.py --dataset fl60 --rounds 30
    python benchmarks/reproduce/compare_strategies.py --quick  # few rounds, under 5 minutes

The table is printed and written to benchmarks/results/compare_<dataset>_<partition>.md with the
machine description, the date and the command.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import torch

from pyg_fedgraph.cli.syntax import key_value
from pyg_fedgraph.experiment import (
    ExperimentConfig,
    build_dataset,
    build_simulator,
    parse_value,
    route_overrides,
)
from pyg_fedgraph.simulation.report import format_table
from pyg_fedgraph.strategies import STRATEGIES


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--partition", default="pathological")
    p.add_argument("--clients", type=int, default=None)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--strategies", default=None, help="comma list (default: all registered)")
    p.add_argument("--quick", action="store_true", help="5 rounds, 1 seed, epochs=1")
    p.add_argument("--set", dest="overrides", type=key_value, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="a setting as on the command line (data.fractions=[0.5,0.2,0.3], lr=0.1)")
    p.add_argument("--tag", default=None, help="results file name: compare_<tag>.md")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = p.parse_args()
    rounds, seeds = (5, 1) if args.quick else (args.rounds, args.seeds)
    overrides: dict = {"epochs": 1} if args.quick else {}
    overrides.update({key: parse_value(value) for key, value in args.overrides})
    names = args.strategies.split(",") if args.strategies else sorted(STRATEGIES)
    rows = []
    for name in names:
        cls = STRATEGIES[name]
        scores, per_round = [], []
        error = ""
        for seed in range(seeds):
            cfg = ExperimentConfig(dataset=args.dataset, strategy=name, rounds=rounds,
                                   clients=args.clients, seed=seed, overrides=overrides,
                                   partition=None if args.dataset == "fl60" else args.partition)
            try:
                # The data.* settings go to the dataset's builder (as the CLI does).
                data = build_dataset(cfg, route_overrides(cfg)["data"])
                sim = build_simulator(cfg, dataset=data)
            except ValueError as err:  # e.g. a strategy that needs a prior graph
                error = str(err).split(";")[0]
                break
            t0 = time.perf_counter()
            sim.run()
            per_round.append((time.perf_counter() - t0) / rounds)
            scores.append(sim.summary()["test"])
        row = {"strategy": name, "class": cls.__name__}
        if error:
            row.update({"test mean": "n/a", "note": error})
        else:
            row.update({"test mean": statistics.mean(scores),
                        "test std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                        "s/round": statistics.mean(per_round), "seeds": len(scores)})
        rows.append(row)
        print(f"{name:12s} {row.get('test mean')}", file=sys.stderr, flush=True)
    table = format_table(rows, ["strategy", "test mean", "test std", "s/round", "seeds", "note"])
    setting = (f"{args.dataset}" + ("" if args.dataset == "fl60" else f", {args.partition}")
               + (f", {args.clients} clients" if args.clients else "")
               + f", {rounds} rounds, seeds 0..{seeds - 1}"
               + "".join(f", {key}={value}" for key, value in args.overrides)
               + (", 1 local epoch (quick)" if args.quick else ""))
    header = (f"# Strategies compared: {setting}\n\n"
              f"Test metric = mean over clients at the round of best mean validation metric; "
              f"std = sample standard deviation over seeds.\n"
              f"Machine: {platform.platform()}, {torch.get_num_threads()} torch threads, "
              f"torch {torch.__version__}; date {date.today()}.\n"
              "Command: `python benchmarks/reproduce/compare_strategies.py "
              f"{' '.join(sys.argv[1:])}`\n\n")
    print(header + table)
    args.out.mkdir(parents=True, exist_ok=True)
    tag = f"compare_{args.tag}" if args.tag else (
        f"compare_{args.dataset}" + ("" if args.dataset == "fl60" else f"_{args.partition}")
        + ("_quick" if args.quick else ""))
    (args.out / f"{tag}.md").write_text(header + table + "\n")


if __name__ == "__main__":
    main()
