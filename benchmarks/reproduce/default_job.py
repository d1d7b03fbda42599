"""The default job (`pyg-fedgraph run` with no options) over three seeds.

Runs the command line itself, once per seed in a fresh process (as a new user
runs it, import and start-up included), and reports each seed's test metric
(at the round of best mean validation metric) per strategy, whether pFedGraph
is above Local and FedAvg on that seed, and the wall-clock seconds of each
command.

What each command measured (its strategies' test values, its wall and CPU
seconds, the resolved settings it wrote) is kept as a study record
(``cli-default-job``) in ``benchmarks/results/claims_runs/``, under the settings
of the job's pFedGraph run: a seed's command runs only when its record is
missing, and with ``--cached-only`` never, so that the file, wall-clock
seconds included, rebuilds from the records.

    python benchmarks/reproduce/default_job.py                 # runs what is missing, writes
    python benchmarks/reproduce/default_job.py --cached-only   # rebuilds from the records
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from pyg_fedgraph.experiment import ExperimentConfig
from pyg_fedgraph.experiment.reporting import (
    benchmark_records,
    keep_readings,
    machine_lines,
    made_with,
    save_report,
)
from pyg_fedgraph.utils import keep_freed_memory_at_start

if TYPE_CHECKING:
    from pyg_fedgraph.simulation.simulator import Simulator

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent
RESULTS = HERE / "results"
#: The records of finished runs and checkpoints of runs in progress: ``claims.py``'s.
RUNS = benchmark_records(ROOT)
SEEDS = (0, 1, 2)
#: The name of the study records of the commands.
STUDY = "cli-default-job"
COMMAND = "python benchmarks/reproduce/default_job.py"


def job_config(seed: int) -> ExperimentConfig:
    r"""The settings of the pFedGraph run of ``pyg-fedgraph run --seed
    seed``, as the command line resolves them (the key of the seed's record:
    when the default job changes, the record no longer matches)."""
    from pyg_fedgraph.cli.parser import build_parser
    from pyg_fedgraph.cli.run import apply_config, default_job

    argv = ["--seed", str(seed)]
    args = default_job(apply_config(build_parser().parse_args(["run", *argv]), argv))
    return ExperimentConfig.from_args(args, strategy="pfedgraph", seed=seed)


class _Command:
    r"""What :meth:`RecordCache.run_study` keeps of a run's simulator, for a
    run made by a command in another process: the summary of its pFedGraph
    run (its ``summary.json``) and its device."""

    def __init__(self, summary: dict[str, Any]) -> None:
        from pyg_fedgraph.utils.device import resolve_device

        self._summary = summary
        self.device = resolve_device("auto")  # the command's --device, on this machine

    def summary(self) -> dict[str, Any]:
        return self._summary


def measure(seed: int) -> tuple[Simulator, dict[str, Any]]:
    r"""Runs ``pyg-fedgraph run --seed seed`` in a fresh process and returns
    what it measured: every strategy's test value (``comparison.json``),
    the command's wall and CPU seconds (user + system of the child) and the
    resolved settings of its pFedGraph run (``config.yaml``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"seed-{seed}"
        command = [sys.executable, "-m", "pyg_fedgraph.cli", "run", "--seed", str(seed),
                   "--quiet", "--out", str(out)]
        wall, cpu = time.perf_counter(), os.times()
        subprocess.run(command, check=True, env=env, capture_output=True)
        after = os.times()
        rows = json.loads((out / "comparison.json").read_text())
        summary = json.loads((out / "pfedgraph" / "summary.json").read_text())
        figures = {
            "strategies": [r["strategy"] for r in rows],
            "tests": {r["strategy"]: float(r["test"]) for r in rows},
            "command_wall_seconds": time.perf_counter() - wall,
            "command_cpu_seconds": (after.children_user + after.children_system
                                    - cpu.children_user - cpu.children_system),
            "config_yaml": (out / "pfedgraph" / "config.yaml").read_text(),
        }
    return cast("Simulator", _Command(summary)), figures


def report(seeds: list[int], run_missing: bool) -> str:
    r"""The results file's text (without its readings); the commands of
    ``seeds`` whose records are missing run first when ``run_missing``."""
    records: dict[int, dict[str, Any]] = {}
    for seed in SEEDS:
        cfg = job_config(seed)
        entry = (RUNS.run_study(cfg, STUDY, functools.partial(measure, seed))
                 if run_missing and seed in seeds else RUNS.load_study(cfg, STUDY))
        if entry is not None:
            records[seed] = entry
    strategies: list[str] = next((e["strategies"] for e in records.values()), [])
    lines = ["# The default job: `pyg-fedgraph run` with no options", "",
             "Digits (scikit-learn's UCI 8x8 images, 1,797) over 40 clients in 5 groups of 8 "
             "(`--partition group`: 80% of the images are split by class group, classes "
             "{0,1}, {2,3}, ... to client groups 0..4, 20% dealt IID to all), a 50/20/30 "
             "train/val/test split per client (about 22 training images each), 20 rounds; "
             "metric: mean test accuracy over clients at the round of best mean validation "
             "accuracy. One fresh process per seed (`pyg-fedgraph run --seed S`), as a user "
             "runs it.", "",
             f"What each command measured is a record in `benchmarks/results/claims_runs/` "
             f"(study `{STUDY}`), made with {made_with(records.values())}: `{COMMAND}` runs "
             "the missing commands, `--cached-only` rebuilds this file from the records "
             "without running any.", "",
             "| seed | " + " | ".join(strategies) + " | pFedGraph > Local and FedAvg | "
             "wall s | CPU s |",
             "|---:|" + "---:|" * len(strategies) + "---|---:|---:|"]
    for seed in SEEDS:
        if seed not in records:
            lines.append(f"| {seed} | " + "pending | " * len(strategies) + " | | |")
            continue
        e = records[seed]
        row = e["tests"]
        above = row["pfedgraph"] > max(row["local"], row["fedavg"])
        lines.append(f"| {seed} | " + " | ".join(f"{row[s]:.4f}" for s in strategies)
                     + f" | {'yes' if above else 'NO'} | {e['command_wall_seconds']:.1f} | "
                       f"{e['command_cpu_seconds']:.1f} |")
    if records:
        means = {s: sum(e["tests"][s] for e in records.values()) / len(records)
                 for s in strategies}
        lines.append("| mean | " + " | ".join(f"{means[s]:.4f}" for s in strategies)
                     + " | | | |")
    lines += ["", "Wall seconds include Python's start-up and imports; CPU seconds are the "
              "child process's user + system time (what an idle machine's wall time would be "
              "close to)."]
    if records:
        last = max(records)
        lines += ["", f"The resolved settings of the pFedGraph run (seed {last}), as the run "
                  "wrote them in `config.yaml` (provenance omitted):", "", "```yaml",
                  records[last]["config_yaml"].split("provenance:")[0].rstrip(), "```"]
    missing = [seed for seed in SEEDS if seed not in records]
    if missing:
        lines += ["", f"Not yet run: seeds {', '.join(map(str, missing))} "
                  f"(`{COMMAND} --seeds {','.join(map(str, missing))}`)."]
    lines += ["", "## Runs", "",
              "The commands' records (their CPU seconds are the child process's, as above):", "",
              "| seed | wall (s) | CPU (s) | load start / end | finished |",
              "|---:|---:|---:|---|---|",
              *(f"| {seed} | {e['command_wall_seconds']:.0f} | {e['command_cpu_seconds']:.0f} | "
                f"{e['load'][0]:.1f} / {e['load'][1]:.1f} | {e['date']} |"
                for seed, e in sorted(records.items())), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=None,
                        help="comma list of the seeds to run where missing (default: 0,1,2)")
    parser.add_argument("--cached-only", action="store_true",
                        help="only read the records: run no command, list what is missing")
    parser.add_argument("--no-write", action="store_true",
                        help="run (and record) without writing the results file")
    parser.add_argument("--out", type=Path, default=RESULTS / "default_job.md")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(SEEDS)
    unknown = sorted(set(seeds) - set(SEEDS))
    if unknown:
        parser.error(f"unknown seeds {unknown}; the job's seeds are {list(SEEDS)}")
    load_start = os.getloadavg()[0]
    text = report(seeds, run_missing=not args.cached_only)
    text += "\n" + "\n".join(["## Machine", "", *machine_lines(load_start), ""])
    text = keep_readings(args.out.read_text() if args.out.is_file() else "", text)
    print(text)
    if not args.no_write:
        save_report(text, args.out)
    return text


if __name__ == "__main__":
    keep_freed_memory_at_start()
    torch.set_num_threads(1)
    main()
