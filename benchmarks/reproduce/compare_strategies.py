"""Every registered strategy on one setting: test metric (mean and std over seeds) and
seconds per round, as a markdown table.

    python benchmarks/reproduce/compare_strategies.py  # digits, pathological, 3 seeds
    python benchmarks/reproduce/compare_strategies.py --partition group --clients 40 \
        --set data.fractions=[0.5,0.2,0.3] --tag digits_default_job   # the default job's data
    python benchmarks/reproduce/compare_strategies.py --dataset fl60 --rounds 30
    python benchmarks/reproduce/compare_strategies.py --quick  # few rounds, under 5 minutes
    python benchmarks/reproduce/compare_strategies.py --cached-only  # rebuild, train nothing

Every run is a record in ``benchmarks/results/claims_runs/`` (the cache of
``claims.py``, :class:`~pyg_fedgraph.experiment.RecordCache`): a run is trained only
when its record is missing, and with ``--cached-only`` never; the file then lists
the missing runs with the command that makes them. The table is written to
``benchmarks/results/compare_<dataset>_<partition>.md`` (``--tag``: ``compare_<tag>.md``),
keeping the file's hand-written ``### Reading`` blocks.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.cli.syntax import key_value
from pyg_fedgraph.experiment import (
    ExperimentConfig,
    build_dataset,
    check_config,
    parse_value,
    route_overrides,
)
from pyg_fedgraph.experiment.reporting import (
    benchmark_records,
    counted,
    keep_readings,
    machine_lines,
    made_with,
    save_report,
)
from pyg_fedgraph.simulation.report import format_table
from pyg_fedgraph.strategies import STRATEGIES
from pyg_fedgraph.utils import keep_freed_memory_at_start

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent
RESULTS = HERE / "results"
#: The records of finished runs and checkpoints of runs in progress: ``claims.py``'s.
RUNS = benchmark_records(ROOT)
COMMAND = "python benchmarks/reproduce/compare_strategies.py"


def parser() -> argparse.ArgumentParser:
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
    p.add_argument("--out", type=Path, default=None,
                   help="results file (default: benchmarks/results/compare_<tag>.md)")
    p.add_argument("--cached-only", action="store_true",
                   help="only read the run records: train nothing, list what is missing")
    p.add_argument("--no-write", action="store_true",
                   help="run (and record) without writing the results file")
    return p


def setting_args(args: argparse.Namespace, strategies: bool = True) -> list[str]:
    r"""The options that define the setting (and so the runs and the file),
    in a fixed order: what the file names as its command, whatever else was
    given (``--cached-only``, ``--no-write``, ``--out``); ``--strategies``
    only with ``strategies``."""
    defaults = parser().parse_args([])
    out: list[str] = []
    names = ("dataset", "partition", "clients", "rounds", "seeds") + (
        ("strategies",) if strategies else ())
    for name in names:
        if getattr(args, name) != getattr(defaults, name):
            out += [f"--{name}", str(getattr(args, name))]
    out += ["--quick"] if args.quick else []
    for key, value in args.overrides:
        out += ["--set", f"{key}={value}"]
    out += ["--tag", args.tag] if args.tag else []
    return out


def configs(args: argparse.Namespace, name: str) -> list[ExperimentConfig]:
    r"""The runs of strategy ``name``: one per seed."""
    rounds, seeds = (5, 1) if args.quick else (args.rounds, args.seeds)
    overrides: dict[str, Any] = {"epochs": 1} if args.quick else {}
    overrides.update({key: parse_value(value) for key, value in args.overrides})
    return [ExperimentConfig(dataset=args.dataset, strategy=name, rounds=rounds,
                             clients=args.clients, seed=seed, overrides=overrides,
                             partition=None if args.dataset == "fl60" else args.partition)
            for seed in range(seeds)]


def unfit(cfg: ExperimentConfig) -> str | None:
    r"""Why the strategy of ``cfg`` cannot run on its data (e.g. it needs a
    prior client graph), from the data and the settings alone (nothing is
    trained); ``None`` when it can."""
    try:
        # The data.* settings go to the dataset's builder (as the CLI does).
        check_config(cfg, build_dataset(cfg, route_overrides(cfg)["data"]))
    except ValueError as err:
        return str(err).split(";")[0]
    return None


def row(name: str, entries: list[dict[str, Any]], note: str | None) -> dict[str, Any]:
    r"""The table's row of strategy ``name`` from its runs' records."""
    out: dict[str, Any] = {"strategy": name}
    if note is not None:
        return {**out, "test mean": "n/a", "note": note}
    if not entries:
        return {**out, "test mean": "pending"}
    scores = [e["summary"]["test"] for e in entries]
    return {**out, "test mean": statistics.mean(scores),
            "test std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
            "s/round": statistics.mean(e["seconds"] / e["config"]["rounds"] for e in entries),
            "CPU s/round": statistics.mean((e.get("cpu_seconds") or math.nan)
                                           / e["config"]["rounds"] for e in entries),
            "seeds": len(scores)}


def report(args: argparse.Namespace, run_missing: bool) -> str:
    r"""The results file's text (without its readings), the missing runs
    run first when ``run_missing``."""
    names = args.strategies.split(",") if args.strategies else sorted(STRATEGIES)
    unknown = sorted(set(names) - set(STRATEGIES))
    if unknown:
        raise SystemExit(f"compare_strategies.py: unknown strategies {unknown}")
    given, bare = setting_args(args), setting_args(args, strategies=False)
    rows, pending, entries = [], [], []
    for name in names:
        found, note = [], None
        for cfg in configs(args, name):
            entry = RUNS.load(cfg)
            if entry is None:
                note = unfit(cfg)
                if note is not None:
                    break
                if run_missing:
                    RUNS.run(cfg)
                    # As read back from its record: the file reads the same with or
                    # without the run.
                    entry = RUNS.load(cfg)
                else:
                    pending.append((name, cfg.seed))
            if entry is not None:
                found.append(entry)
        rows.append(row(name, found, note))
        entries += found
        print(f"{name:12s} {rows[-1].get('test mean')}", file=sys.stderr, flush=True)
    rounds, seeds = (5, 1) if args.quick else (args.rounds, args.seeds)
    setting = (f"{args.dataset}" + ("" if args.dataset == "fl60" else f", {args.partition}")
               + (f", {args.clients} clients" if args.clients else "")
               + f", {rounds} rounds, seeds 0..{seeds - 1}"
               + "".join(f", {key}={value}" for key, value in args.overrides)
               + (", 1 local epoch (quick)" if args.quick else ""))
    cpu = sum(e.get("cpu_seconds") or 0.0 for e in entries)
    dates = sorted(e["date"] for e in entries)
    lines = [f"# Strategies compared: {setting}", "",
             "Test metric = mean over clients at the round of best mean validation metric; "
             "std = sample standard deviation over seeds; s/round and CPU s/round = a run's wall "
             "and CPU seconds (its record's: the machine is shared, so the CPU seconds are the "
             "steadier) over its rounds, mean over seeds.",
             f"Command: `{' '.join([COMMAND, *given])}` (runs what its records lack; with "
             "`--cached-only` it rebuilds this file from them without training).",
             (f"Records: {len(entries)} runs in `benchmarks/results/claims_runs/`, made with "
              f"{made_with(entries)}, finished {dates[0]} to {dates[-1]}, {cpu:.0f} CPU "
              "seconds in all." if entries else "Records: none yet."), "",
             format_table(rows, ["strategy", "test mean", "test std", "s/round", "CPU s/round",
                                 "seeds", "note"]), ""]
    if pending:
        lines += [f"## Not yet run ({counted(len(pending), 'run')})", "",
                  "Each command runs one strategy's missing seeds into the records; then "
                  f"`{' '.join([COMMAND, *given, '--cached-only'])}` rewrites this file.", "",
                  "| strategy | seed | command |", "|---|---:|---|",
                  *(f"| {name} | {seed} | `{' '.join([COMMAND, '--no-write', *bare])} "
                    f"--strategies {name}` |" for name, seed in pending), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    args = parser().parse_args(argv)
    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    text = report(args, run_missing=not args.cached_only)
    text += "\n" + "\n".join(["## Machine", "", *machine_lines(load_start), ""])
    tag = f"compare_{args.tag}" if args.tag else (
        f"compare_{args.dataset}" + ("" if args.dataset == "fl60" else f"_{args.partition}")
        + ("_quick" if args.quick else ""))
    out = args.out or RESULTS / f"{tag}.md"
    text = keep_readings(out.read_text() if out.is_file() else "", text)
    print(text)
    if not args.no_write:
        save_report(text, out)
    return text


if __name__ == "__main__":
    keep_freed_memory_at_start()
    main()
