r"""``pyg-fedgraph run``: the options parsed into a
:class:`~pyg_fedgraph.experiment.Comparison`, carried out, and reported.

Order of work, so that bad input costs nothing:

1. *Preflight*: every strategy name, every setting and ``--set`` value
   (against the declared settings), the output folder (created, writable,
   not holding another run unless ``--overwrite``), the data set, and each
   strategy's requirements on it (a prior graph, enough clients per round),
   before the first round of the first strategy.
2. *Runs*, one strategy after the other (the comparison, through the
   :class:`~pyg_fedgraph.experiment.Runner`): a Ctrl-C (or a closed output
   pipe) stops within seconds with a checkpoint and exit code 130; a second
   Ctrl-C aborts at once, keeping the checkpoints already written.
3. ``--resume DIR`` reads the manifest and finishes the whole comparison
   (:meth:`Comparison.resume <pyg_fedgraph.experiment.Comparison.resume>`).
"""
from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pyg_fedgraph.cli.parser import (
    DEFAULT_COMPARISON,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_LEARNED,
    build_parser,
)
from pyg_fedgraph.experiment.settings import ExperimentConfig, RunOptions, options
from pyg_fedgraph.typing import TrackerName

if TYPE_CHECKING:
    from pyg_fedgraph.data import FederatedDataset
    from pyg_fedgraph.experiment.comparison import Comparison, Outcome

__all__ = ["run_main", "apply_config", "default_job", "RESUME_OPTIONS"]

log = logging.getLogger(__name__)

#: The options ``--resume`` accepts (the others come from the manifest).
RESUME_OPTIONS = ("--resume", *(o.flag for o in options("run") if o.resume))


def _given(argv: Sequence[str], command: str = "run") -> set[str]:
    r"""The options of ``command`` (``run`` or ``tune``) that ``argv`` gives
    explicitly, each by its long name."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    given = set()
    for action in sub.choices[command]._actions:
        for opt in action.option_strings:
            if any(tok == opt or tok.startswith(opt + "=") for tok in argv):
                given.add(action.option_strings[-1])
    return given


def apply_config(args: argparse.Namespace, argv: Sequence[str]) -> argparse.Namespace:
    r"""``args`` with the settings of ``--config`` for every option not given
    on the command line, and the file's ``set`` keys under the command
    line's ``--set`` keys."""
    from pyg_fedgraph.experiment.files import load_config

    if getattr(args, "config", None) is None:
        return args
    values = load_config(args.config)
    given = _given(argv, args.command)
    out = argparse.Namespace(**vars(args))
    flags = {o.name: o.flag for o in options(args.command)}
    for key, value in values.items():
        if key in flags and flags[key] not in given:
            setattr(out, key, value)
    ignored = sorted(k for k in values if k != "set" and k not in flags)
    if ignored:
        log.warning("--config %s: %s ignore(s) %s", args.config, args.command,
                    ", ".join(ignored))
    out.overrides = [*values["set"].items(), *args.overrides]
    return out


def default_job(args: argparse.Namespace) -> argparse.Namespace:
    r"""``args`` of a run without ``--dataset``, completed with
    :data:`~pyg_fedgraph.cli.DEFAULT_JOB` where an option was not given."""
    from pyg_fedgraph.cli.parser import DEFAULT_JOB

    out = argparse.Namespace(**vars(args))
    for key, value in DEFAULT_JOB.items():
        if key != "set" and getattr(out, key, None) is None:
            setattr(out, key, value)
    given = {k for k, _ in args.overrides}
    out.overrides = [(k, v) for k, v in DEFAULT_JOB["set"].items() if k not in given]
    out.overrides += list(args.overrides)
    return out


def _strategy_list(text: str | None) -> list[str]:
    from pyg_fedgraph.experiment.comparison import check_strategies

    if text is not None and not text.strip(" ,"):
        raise ValueError(f"--strategy {text!r} names no strategy; give one or more names "
                         f"separated by commas (without --strategy: "
                         f"{','.join(DEFAULT_COMPARISON)})")
    return check_strategies([n.strip() for n in text.split(",")] if text
                            else list(DEFAULT_COMPARISON))


def _build_data(base: ExperimentConfig, names: Sequence[str]) -> FederatedDataset:
    r"""The data set of ``base``'s seed, after checking every ``--set`` value
    of every strategy; then each strategy's requirements on that data."""
    from pyg_fedgraph.experiment import build_dataset, check_config, route_overrides

    parts = [route_overrides(replace(base, strategy=n)) for n in names]
    try:
        dataset = build_dataset(base, parts[0]["data"])
    except ValueError as err:
        if base.partition == "group" and "num_groups" in str(err):
            # The default job splits clients into groups the user never asked for:
            # say which option sets their number.
            raise ValueError(f"{err} (--set data.num_groups=K)") from err
        raise
    for name in names:
        check_config(replace(base, strategy=name), dataset)
    return dataset


def _check_trackers(names: Sequence[str]) -> list[TrackerName]:
    r"""The ``--tracker`` names, each once, after checking that each is known
    and installed (before any work)."""
    from pyg_fedgraph.tracking import check_tracker

    for name in names:
        check_tracker(name)
    return [cast("TrackerName", n) for n in dict.fromkeys(names)]


def _execute(plan: Comparison, quiet: bool, before_run) -> int:
    r"""Builds (and checks) the first seed's data, calls ``before_run``
    (which prepares the output folder and writes the manifest), then carries
    the comparison out and reports."""
    from pyg_fedgraph.experiment.comparison import placement
    from pyg_fedgraph.experiment.runner import RoundProgress, StopSignal

    with placement(plan.base, plan.run.deterministic):
        dataset = _build_data(plan.config(plan.keys[0]), plan.strategies)
        before_run()
        _print(f"{dataset}" + ("  [synthetic data]" if dataset.info.get("synthetic") else ""))
        stop = StopSignal(hard_abort=True)
        with stop.installed():
            outcome = plan.execute(dataset, stop=stop, progress=RoundProgress(quiet=quiet),
                                   announce=lambda line: _print(line, err=True))
        return _finish(plan, dataset, outcome)


def _print(text: str = "", err: bool = False) -> None:
    r"""A line of results on standard output (``err``: a note on standard
    error); a closed pipe (``| head``, ``2>&1 | head``) silences the rest of
    that stream instead of failing the run."""
    stream = sys.stderr if err else sys.stdout
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:
        # Python would fail again flushing at exit: point the stream at nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def _finish(plan: Comparison, dataset: FederatedDataset, outcome: Outcome) -> int:
    from pyg_fedgraph.simulation.report import format_table

    root, base = plan.root, plan.base
    if outcome.aborted:
        return _aborted(plan, outcome)
    if outcome.stopped is not None:
        label, rnd, rounds, path = outcome.stopped
        why = "the output pipe closed: " if outcome.broken_pipe else ""
        _print(f"pyg-fedgraph: {why}{label} stopped after round {rnd} of {rounds}, "
               f"checkpoint in {path.parent}; continue with: pyg-fedgraph run --resume "
               f"{shlex.quote(str(root))}", err=True)
        return EXIT_INTERRUPTED
    rows = plan.write_comparison(outcome, dataset)
    if len(plan.seeds) > 1:
        columns = (["strategy", "metric", "test", "test_std", "test_final", "test_final_std"]
                   + (["test_novel", "test_novel_std"] if base.novel_clients else [])
                   + (["test_benign", "test_benign_std"] if base.attack else [])
                   + ["rounds", "seconds", "seeds"])
    else:
        columns = (["strategy", "metric", "test", "test_final", "best_round", "rounds",
                    "seconds"] + (["test_novel"] if base.novel_clients else [])
                   + (["test_benign"] if base.attack else []))
    if any("adjusted_rand_index" in r for r in rows):  # runs that scored their graph
        columns.append("adjusted_rand_index")
    _print()
    _print(format_table(rows, columns))
    _print(f"\nresults written to {root}")
    if outcome.nothing_learned:
        _print(f"pyg-fedgraph: error: no client update was accepted in any round of "
               f"{', '.join(outcome.nothing_learned)} (see the warnings above): the results "
               f"are those of the initial model", err=True)
        return EXIT_NOTHING_LEARNED
    return 0


def _aborted(plan: Comparison, outcome: Outcome) -> int:
    hint = f"continue with: pyg-fedgraph run --resume {shlex.quote(str(plan.root))}"
    if outcome.stopped is not None:
        label, rnd, _, path = outcome.stopped
        _print(f"\npyg-fedgraph: aborted during {label}; its checkpoint of round {rnd} in "
               f"{path.parent} is kept; {hint}", err=True)
    else:
        _print(f"\npyg-fedgraph: aborted; {hint} (from what was checkpointed)", err=True)
    return EXIT_INTERRUPTED


def _partition_uses_beta(args: argparse.Namespace) -> None:
    r"""``--beta`` is the Dirichlet split's: refuse it with another split."""
    if args.beta is not None and args.partition not in (None, "dirichlet"):
        raise ValueError(f"--beta {args.beta} is the concentration of --partition dirichlet; "
                         f"the {args.partition} partition does not use it")


def run_main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    r"""``pyg-fedgraph run``; ``argv`` are the command's own arguments (to
    tell which options were given)."""
    from pyg_fedgraph.experiment.comparison import Comparison, prepare_output

    if args.resume is not None:
        return _resume(args, argv)
    args = apply_config(args, argv)
    if args.dataset is None:
        args = default_job(args)
    _partition_uses_beta(args)
    run = RunOptions.from_args(args)
    run = replace(run, tracker=_check_trackers(run.tracker))
    names = _strategy_list(args.strategy)
    if args.seeds is not None and "--seed" in _given(argv):
        raise ValueError("give --seed or --seeds, not both")
    seeds = [int(s) for s in args.seeds] if args.seeds else [args.seed]
    base = ExperimentConfig.from_args(args, strategy=names[0], seed=seeds[0])
    for seed in seeds:
        ExperimentConfig(**{**base.to_dict(), "seed": seed})  # each seed is a valid seed
    root: Path = args.out or Path("runs") / f"{args.dataset}-{datetime.now():%Y%m%d-%H%M%S}"
    plan = Comparison(root, base, names, seeds, run, "pyg-fedgraph " + shlex.join(argv))

    def before_run() -> None:  # --out is checked (and cleared with --overwrite) first
        prepare_output(root, overwrite=args.overwrite)
        plan.write_manifest()

    return _execute(plan, args.quiet, before_run)


def _resume(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from pyg_fedgraph.experiment.comparison import Comparison

    given = _given(argv)
    ignored = sorted(given - set(RESUME_OPTIONS))
    if ignored:
        raise ValueError(f"--resume continues a run with its saved settings: "
                         f"{', '.join(ignored)} cannot be given with it (only "
                         f"{', '.join(RESUME_OPTIONS[1:])})")
    changes = {k: getattr(args, k) for k in ("device", "threads")
               if f"--{k}" in given}
    run = RunOptions.from_args(args)
    plan = Comparison.resume(args.resume, run, rounds=args.rounds, changes=changes)
    if "--checkpoint-every" in given:
        plan.run = replace(plan.run, checkpoint_every=args.checkpoint_every)
    plan.run = replace(plan.run, tracker=_check_trackers(plan.run.tracker))
    return _execute(plan, args.quiet, plan.write_manifest)
