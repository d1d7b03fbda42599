"""Steady-state seconds per round: 2 warm-up rounds, then the best of 3 blocks of 10 rounds,
one ``Simulator.step()`` loop per strategy (used by ``perf_alternate.sh --steady``). FL-60 by
default; ``--dataset`` and ``--set KEY=VALUE`` (the CLI's settings) time another run, e.g.
section O's traffic round (``claims.md``):

    python benchmarks/perf/steady_rounds.py fedavg --dataset metr-la --model gru-seq2seq \\
        --set data.root=PATH/METR-LA --set steps=50 --set compile=true --blocks 3 --rounds 5

Prints ``name seconds`` lines (wall-clock seconds, or CPU seconds of this process with
``--cpu``).
"""
from __future__ import annotations

import argparse
import time

import torch

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator


def parse_value(text: str) -> object:
    r"""A ``--set`` value: int, float, true/false, or the text itself."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", help="comma-separated strategies")
    parser.add_argument("--dataset", default="fl60")
    parser.add_argument("--model", default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a run setting (repeatable)")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10, help="rounds per block")
    parser.add_argument("--cpu", action="store_true", help="CPU time instead of wall time")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set takes KEY=VALUE, got {item!r}")
        overrides[key] = parse_value(value)
    clock = time.process_time if args.cpu else time.perf_counter
    torch.set_num_threads(1)
    for name in args.names.split(","):
        extra = {} if args.model is None else {"model": args.model}
        sim = build_simulator(ExperimentConfig(dataset=args.dataset, strategy=name, rounds=100,
                                               seed=0, overrides=overrides, **extra))
        sim.step()
        sim.step()
        best = float("inf")
        for _ in range(args.blocks):
            t0 = clock()
            for _ in range(args.rounds):
                sim.step()
            best = min(best, (clock() - t0) / args.rounds)
        print(name, f"{best:.4f}", flush=True)


if __name__ == "__main__":
    main()
