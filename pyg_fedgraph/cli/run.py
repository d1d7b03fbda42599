r"""``pyg-fedgraph run``: simulate one strategy or compare several.

Order of work, so that bad input costs nothing:

1. *Preflight*: every strategy name, every setting and ``--set`` value
   (against the declared schema), the output folder (created, writable, not
   holding another run unless ``--overwrite``), the data set, and each
   strategy's requirements on it (a prior graph, enough clients per round),
   before the first round of the first strategy.
2. *Runs*, one strategy after the other, each in its folder (``--out`` for
   one strategy, ``--out/<strategy>`` for several), with ``run.json`` (the
   manifest: strategies and settings) in ``--out``. Every run checkpoints its
   last round; ``--checkpoint-every K`` also rewrites it every K rounds. The first
   Ctrl-C stops after the current round with a checkpoint and exit code 130;
   a second one aborts at once, keeping the last checkpoint.
3. ``--resume DIR`` reads the manifest and finishes the whole comparison:
   strategies already finished are reloaded, the interrupted one continues
   from its checkpoint, and those not started run from round 1, so that the
   results equal an uninterrupted run's (up to the timings).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from pyg_fedgraph.cli import (
    DEFAULT_COMPARISON,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_LEARNED,
    build_parser,
)

if TYPE_CHECKING:
    from pyg_fedgraph.data import FederatedDataset
    from pyg_fedgraph.experiment import ExperimentConfig
    from pyg_fedgraph.simulation import Simulator

__all__ = ["run_main", "MANIFEST", "MANIFEST_FORMAT", "RESUME_OPTIONS"]

log = logging.getLogger(__name__)

#: The manifest of a run (or comparison) in ``--out``.
MANIFEST = "run.json"
MANIFEST_FORMAT = 1
#: Files a comparison writes beside its runs' folders.
_COMPARISON_FILES = ("comparison.json", "learning_curves.png")
#: Files of ``--tracker`` (TensorBoard's events in a run's folder, MLflow's store).
_TRACKER_FILES = ("events.out.tfevents.*", "mlflow.db")
#: The options ``--resume`` accepts (the others come from the manifest).
RESUME_OPTIONS = ("--resume", "--rounds", "--checkpoint-every", "--device", "--threads",
                  "--deterministic", "--quiet", "--log-level")
#: Settings a resumed run may change: where it computes, not what.
_PLACEMENT = ("strategy", "rounds", "device", "threads")


@dataclass
class _Stop:
    r"""Ctrl-C: the first sets :attr:`requested` (the loop stops after the
    round), the second raises :class:`KeyboardInterrupt` at once."""
    requested: bool = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\npyg-fedgraph: stopping after this round (Ctrl-C again to abort at once)",
              file=sys.stderr, flush=True)


@contextmanager
def _catch_sigint() -> Iterator[_Stop]:
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # signals reach only the main thread: nothing to install
        return
    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _is_terminal() -> bool:
    r"""Whether stderr is a terminal a bar can be drawn on: a pseudo-terminal
    without a size (``script`` run without one, some CI runners) reports 0
    columns, where tqdm draws an empty bar, so it gets lines instead."""
    try:
        return sys.stderr.isatty() and os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (OSError, ValueError, AttributeError):
        return False


@dataclass
class _Progress:
    r"""A tqdm bar over a run's rounds on a terminal; one line per evaluated
    round otherwise (logs, CI, a terminal without a width); nothing with
    ``--quiet``."""
    quiet: bool
    terminal: bool = field(default_factory=_is_terminal)
    bar: Any = None

    def start(self, name: str, sim: Simulator) -> None:
        if self.quiet or not self.terminal:
            return
        from tqdm.auto import tqdm
        self.bar = tqdm(total=sim.rounds, initial=sim.round, desc=name, unit="round",
                        dynamic_ncols=True)

    def update(self, name: str, sim: Simulator, evaluated: bool) -> None:
        if self.quiet:
            return
        history = sim.history
        value = (f"{history.metric} val {history.mean('val')[-1]:.4f} test "
                 f"{history.mean('test')[-1]:.4f}" if evaluated and len(history) else "")
        if self.bar is not None:
            self.bar.update(1)
            if value:
                self.bar.set_postfix_str(value)
        elif evaluated:
            print(f"{name}: round {sim.round}/{sim.rounds}  {value}", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


# ------------------------------------------------------------------ the runs
@dataclass(frozen=True)
class RunKey:
    r"""One run of a comparison: a strategy with a seed."""
    strategy: str
    seed: int


@dataclass
class RunPlan:
    r"""What ``run`` does: every strategy with every seed, each run in its
    folder (``--out``, ``--out/<strategy>``, ``--out/seed-<s>`` or
    ``--out/<strategy>/seed-<s>``), checkpointing every ``every`` rounds."""
    root: Path
    base: ExperimentConfig
    strategies: list[str]
    seeds: list[int]
    every: int = 0
    trackers: list[str] = field(default_factory=list)
    deterministic: bool = False
    save_models: bool = False

    @property
    def keys(self) -> list[RunKey]:
        # Seed-major, so that each seed's dataset is built once.
        return [RunKey(n, s) for s in self.seeds for n in self.strategies]

    def folder(self, key: RunKey) -> Path:
        out = self.root if len(self.strategies) == 1 else self.root / key.strategy
        return out if len(self.seeds) == 1 else out / f"seed-{key.seed}"

    def config(self, key: RunKey) -> ExperimentConfig:
        return replace(self.base, strategy=key.strategy, seed=key.seed)

    def label(self, key: RunKey) -> str:
        return key.strategy if len(self.seeds) == 1 else f"{key.strategy} (seed {key.seed})"

    def manifest(self, command: str, started: str | None = None,
                 resumed: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"format": MANIFEST_FORMAT, "strategies": list(self.strategies),
                "seeds": list(self.seeds), "config": self.base.to_dict(),
                "checkpoint_every": self.every, "trackers": list(self.trackers),
                "deterministic": self.deterministic, "save_models": self.save_models,
                "command": command,
                "started": started or datetime.now().isoformat(timespec="seconds"),
                "resumed": resumed or []}


# ------------------------------------------------------------------ output
def _run_files(folder: Path) -> list[Path]:
    r"""The files of a run (or comparison) in ``folder``, and those of the
    runs in its sub-folders (two levels: ``<strategy>/seed-<s>``)."""
    from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME
    from pyg_fedgraph.simulation.report import RUN_FILES

    patterns = (*RUN_FILES, CHECKPOINT_NAME, f".{CHECKPOINT_NAME}.*.tmp", MANIFEST,
                *_COMPARISON_FILES, *_TRACKER_FILES)

    def here(d: Path) -> list[Path]:
        return sorted({p for pattern in patterns for p in d.glob(pattern) if p.is_file()})

    found = here(folder)
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        found += here(sub)
        for subsub in sorted(p for p in sub.iterdir() if p.is_dir()):
            found += here(subsub)
    return found


def prepare_output(root: Path, *, overwrite: bool) -> None:
    r"""Creates ``root`` and checks that it can hold a new run: a
    :class:`ValueError` when it is a file, lies under one, is not writable,
    or holds a run (unless ``overwrite``, which removes that run's files and
    nothing else)."""
    if root.exists() and not root.is_dir():
        raise ValueError(f"--out {root} is a file, not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"--out {root}: a part of the path is a file, not a directory") from None
    except OSError as err:
        raise ValueError(f"--out {root} cannot be created: {err.strerror}") from None
    try:
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as err:
        raise ValueError(f"--out {root} is not writable: {err.strerror}") from None
    existing = _run_files(root)
    if not existing:
        return
    if not overwrite:
        shown = ", ".join(str(p.relative_to(root)) for p in existing[:3])
        more = f" and {len(existing) - 3} more" if len(existing) > 3 else ""
        raise ValueError(f"--out {root} already holds a run ({shown}{more}); continue it with "
                         f"--resume {root}, replace it with --overwrite, or choose another --out")
    for path in existing:
        path.unlink()
    for sub in sorted({p.parent for p in existing if p.parent != root},
                      key=lambda p: len(p.parts), reverse=True):
        if sub.is_dir() and not any(sub.iterdir()):
            sub.rmdir()
            if sub.parent != root and sub.parent.is_dir() and not any(sub.parent.iterdir()):
                sub.parent.rmdir()
    log.info("--overwrite: removed %d file(s) of the previous run in %s", len(existing), root)


# ------------------------------------------------------------------ preflight
def _strategy_list(text: str | None) -> list[str]:
    from pyg_fedgraph.strategies import STRATEGIES

    names = [n.strip() for n in text.split(",")] if text else list(DEFAULT_COMPARISON)
    names = [n for n in names if n]
    if not names:
        raise ValueError("--strategy names no strategy")
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategy {unknown[0]!r}"
                         + (f" (and {unknown[1:]})" if len(unknown) > 1 else "")
                         + f"; known: {', '.join(sorted(STRATEGIES))}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"--strategy names {repeated} more than once")
    return names


@contextmanager
def _placement(base: ExperimentConfig, deterministic: bool) -> Iterator[None]:
    r"""The process-wide settings of a run, restored afterwards (the command
    line may run in a process that goes on): torch's threads, deterministic
    algorithms (with the cuBLAS workspace they need on CUDA). Checks the
    device first."""
    import os

    import torch

    from pyg_fedgraph.utils.device import deterministic_algorithms, resolve_device, set_threads

    resolve_device(base.device)
    threads = torch.get_num_threads()
    set_threads(base.threads)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        with deterministic_algorithms(deterministic or
                                      torch.are_deterministic_algorithms_enabled()):
            yield
    finally:
        torch.set_num_threads(threads)


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


def _actions(command: str) -> list[argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices[command]._actions)


def _given(argv: Sequence[str], command: str = "run") -> set[str]:
    r"""The options of ``command`` (``run`` or ``tune``) that ``argv`` gives
    explicitly, each by its long name."""
    given = set()
    for action in _actions(command):
        for opt in action.option_strings:
            if any(tok == opt or tok.startswith(opt + "=") for tok in argv):
                given.add(action.option_strings[-1])
    return given


def apply_config(args: argparse.Namespace, argv: Sequence[str]) -> argparse.Namespace:
    r"""``args`` with the settings of ``--config`` for every option not given
    on the command line, and the file's ``set`` keys under the command
    line's ``--set`` keys."""
    from pyg_fedgraph.cli.config import FILE_KEYS, load_config

    if getattr(args, "config", None) is None:
        return args
    values = load_config(args.config)
    given = _given(argv, args.command)
    out = argparse.Namespace(**vars(args))
    for key in FILE_KEYS:
        if key in ("set", "provenance") or not hasattr(out, key):
            continue
        if key in values and f"--{key.replace('_', '-')}" not in given:
            setattr(out, key, values[key])
    ignored = sorted(k for k in FILE_KEYS if k not in ("set", "provenance")
                     and not hasattr(args, k) and k in values)
    if ignored:
        log.warning("--config %s: %s ignore(s) %s", args.config, args.command, ignored)
    cli = [(k, v) for k, v in args.overrides]
    out.overrides = [(k, v) for k, v in values["set"].items()] + cli
    return out


def default_job(args: argparse.Namespace) -> argparse.Namespace:
    r"""``args`` of a run without ``--dataset``, completed with
    :data:`~pyg_fedgraph.cli.DEFAULT_JOB` where an option was not given."""
    from pyg_fedgraph.cli import DEFAULT_JOB

    out = argparse.Namespace(**vars(args))
    for key, value in DEFAULT_JOB.items():
        if key != "set" and getattr(out, key, None) is None:
            setattr(out, key, value)
    given = {k for k, _ in args.overrides}
    out.overrides = [(k, v) for k, v in DEFAULT_JOB["set"].items() if k not in given]
    out.overrides += list(args.overrides)
    return out


# ------------------------------------------------------------------ running
@dataclass
class _Saved:
    r"""The last checkpoint written of the current run."""
    path: Path | None = None
    round: int = 0


@dataclass
class _Outcome:
    rows: list[dict[str, Any]] = field(default_factory=list)
    histories: dict[str, Any] = field(default_factory=dict)
    nothing_learned: list[str] = field(default_factory=list)
    stopped: tuple[str, int, int, Path] | None = None  # run, round, rounds, checkpoint


def _checkpoint(sim: Simulator, cfg: ExperimentConfig, out: Path, every: int,
                seconds: float) -> Path:
    from pyg_fedgraph.simulation.checkpoint import save_checkpoint

    # The settings travel with the state, so that --resume can rebuild the run.
    return save_checkpoint({**sim.state_dict(), "run": {
        "config": cfg.to_dict(), "checkpoint_every": every, "seconds": seconds}}, out)


def _train(sim: Simulator, cfg: ExperimentConfig, label: str, out: Path, every: int,
           seconds: float, progress: _Progress, stop: _Stop, saved: _Saved) -> float | None:
    r"""Runs ``sim`` to its last round, checkpointing every ``every`` rounds
    and at the end; returns the run's seconds so far (``seconds``, those of
    its earlier parts, plus this part's, as the final checkpoint records
    them), or ``None`` when a Ctrl-C stopped it (after a checkpoint of the
    round it finished)."""
    t0 = time.perf_counter()
    progress.start(label, sim)
    try:
        while sim.round < sim.rounds:
            if not stop.requested:  # a Ctrl-C between two runs stops before this one starts
                record = sim.step()
                progress.update(label, sim, record is not None)
            if stop.requested or (every and sim.round % every == 0 and sim.round < sim.rounds):
                saved.path = _checkpoint(sim, cfg, out, every,
                                         seconds + time.perf_counter() - t0)
                saved.round = sim.round
                if stop.requested:
                    return None
        total = seconds + time.perf_counter() - t0
        _checkpoint(sim, cfg, out, every, total)
    finally:
        progress.close()
    return total


def _summary(sim: Simulator, cfg: ExperimentConfig, seconds: float) -> dict[str, Any]:
    dataset = sim.dataset
    return {"strategy": cfg.strategy, "dataset": cfg.dataset, **sim.summary(),
            "seconds": seconds, "seconds_per_round": seconds / max(sim.round, 1),
            "num_clients": dataset.num_clients, "seed": cfg.seed,
            "synthetic_data": bool(dataset.info.get("synthetic"))}


def _write(sim: Simulator, cfg: ExperimentConfig, plan: RunPlan, out: Path,
           summary: dict[str, Any]) -> None:
    import torch

    from pyg_fedgraph.cli.config import CONFIG_NAME, dump_yaml, resolved_config
    from pyg_fedgraph.simulation.report import write_models, write_run

    config = {**cfg.to_dict(), "resolved": {
        "rounds": sim.rounds, "local": vars(sim.trainer.config),
        "model": repr(sim.trainer.model), "strategy": sim.strategy.hparams(),
        "num_params": sim.layout.num_params, "device": str(sim.device),
        "state_device": str(sim.state_device), "execution": sim.execution,
        "parallel_clients": sim.parallel_clients, "precision": sim.trainer.precision,
        "compile": sim.trainer.compile,
        "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled()}}
    write_run(out, sim.history, config, summary, collaboration=sim.strategy.collaboration_graph(),
              groups=sim.dataset.client_labels, prior_edge_index=sim.dataset.edge_index)
    resolved = resolved_config(sim, cfg, checkpoint_every=plan.every,
                               deterministic=plan.deterministic, trackers=plan.trackers,
                               save_models=plan.save_models)
    (out / CONFIG_NAME).write_text(dump_yaml(resolved))
    if plan.save_models:
        params, buffers = sim.personalized_models()
        write_models(out, sim.layout, params, buffers, repr(sim.trainer.model))


def _run_all(plan: RunPlan, quiet: bool, states: dict[RunKey, dict[str, Any]],
             outcome: _Outcome, data: FederatedDataset | None = None) -> None:
    r"""Runs (or continues, from ``states``) every run of ``plan``, filling
    ``outcome`` (also when a second Ctrl-C aborts it), logging each run to the
    plan's trackers. ``data`` is the first seed's dataset, already built."""
    from pyg_fedgraph.experiment import build_dataset, build_simulator, route_overrides
    from pyg_fedgraph.simulation.checkpoint import remove_partial_writes
    from pyg_fedgraph.tracking import build_tracker

    progress = _Progress(quiet)
    data_seed = plan.seeds[0] if data is not None else None
    with _catch_sigint() as stop:
        for key in plan.keys:
            cfg = plan.config(key)
            if data is None or data_seed != key.seed:
                data = build_dataset(cfg, route_overrides(cfg)["data"])
                data_seed = key.seed
            out = plan.folder(key)
            out.mkdir(parents=True, exist_ok=True)
            remove_partial_writes(out)
            label = plan.label(key)
            tracking = [build_tracker(t, plan.root, run=str(out.relative_to(plan.root))
                                      if out != plan.root else key.strategy,
                                      experiment=plan.root.resolve().name,
                                      hparams=cfg.to_dict()) for t in plan.trackers]
            sim = build_simulator(cfg, dataset=data, progress=False, callbacks=tuple(tracking))
            seconds = 0.0
            state = states.get(key)
            saved = _Saved()
            if state is not None:
                sim.load_state_dict(state)
                seconds = float(state["run"].get("seconds", 0.0))
                saved = _Saved(out / "checkpoint.pt", sim.round)
                if sim.round < sim.rounds:
                    print(f"{label}: resuming at round {sim.round} of {sim.rounds}",
                          file=sys.stderr)  # with the per-round lines, not the results
            try:
                total = _train(sim, cfg, label, out, plan.every, seconds, progress, stop, saved)
            except KeyboardInterrupt:
                if saved.path is not None:
                    outcome.stopped = (label, saved.round, sim.rounds, saved.path)
                for tracker in tracking:
                    tracker.close("stopped")
                raise
            except BaseException:
                for tracker in tracking:
                    tracker.close("failed")
                raise
            for tracker in tracking:
                tracker.close("finished" if total is not None else "stopped")
            if total is None:
                assert saved.path is not None  # _train checkpoints before it stops
                outcome.stopped = (label, sim.round, sim.rounds, saved.path)
                return
            summary = _summary(sim, cfg, total)
            _write(sim, cfg, plan, out, summary)
            outcome.rows.append(summary)
            outcome.histories[label] = sim.history
            if sim.engine.accepted_total == 0:
                outcome.nothing_learned.append(label)


def aggregate_seeds(rows: Sequence[dict[str, Any]], strategies: Sequence[str]
                    ) -> list[dict[str, Any]]:
    r"""One row per strategy from its runs' summaries over several seeds:
    the mean of every number and, for ``test``, ``test_final`` (and
    ``test_novel``, ``test_benign`` when present), the sample standard
    deviation (:math:`n - 1`) as ``<key>_std``; ``runs`` keeps the per-seed
    summaries."""
    import math
    import statistics

    out = []
    for name in strategies:
        runs = [r for r in rows if r["strategy"] == name]
        if not runs:
            continue
        row: dict[str, Any] = {"strategy": name, "metric": runs[0].get("metric"),
                               "seeds": [r["seed"] for r in runs]}
        for key, value in runs[0].items():
            if key in row or key == "seed" or isinstance(value, bool):
                continue
            values = [r.get(key) for r in runs]
            same = len({json.dumps(v, default=str) for v in values}) == 1
            if all(isinstance(v, (int, float)) for v in values):
                numbers = [float(v) for v in values if v is not None]
                finite = [v for v in numbers if not math.isnan(v)]
                # The same in every run (rounds, ...) stays as it is, an int an int.
                row[key] = value if same else statistics.fmean(finite) if finite else math.nan
                if key in ("test", "test_final", "test_novel", "test_benign",
                           "test_novel_final", "test_benign_final"):
                    row[f"{key}_std"] = statistics.stdev(finite) if len(finite) > 1 else 0.0
            elif same:
                row[key] = value
        row["runs"] = list(runs)
        out.append(row)
    return out


def _finish(plan: RunPlan, dataset: FederatedDataset | None, outcome: _Outcome) -> int:
    from pyg_fedgraph.simulation.report import format_table

    root, base = plan.root, plan.base
    if outcome.stopped is not None:
        label, rnd, rounds, path = outcome.stopped
        print(f"pyg-fedgraph: {label} stopped after round {rnd} of {rounds}, checkpoint in "
              f"{path.parent}; continue with: pyg-fedgraph run --resume "
              f"{shlex.quote(str(root))}", file=sys.stderr)
        return EXIT_INTERRUPTED
    several_seeds = len(plan.seeds) > 1
    rows = aggregate_seeds(outcome.rows, plan.strategies) if several_seeds else outcome.rows
    if len(plan.keys) > 1:
        import matplotlib.pyplot as plt

        from pyg_fedgraph.viz import plot_learning_curves
        partition = dataset.info.get("partition") if dataset is not None else None
        clients = f", {dataset.num_clients} clients" if dataset is not None else ""
        seeds = f", seeds {','.join(map(str, plan.seeds))}" if several_seeds else ""
        fig = plot_learning_curves(
            outcome.histories, title=f"{base.dataset}"
            + (f", {partition} partition" if partition else "") + clients + seeds + ": "
            + " vs ".join(plan.strategies))
        fig.savefig(root / "learning_curves.png", dpi=120)
        plt.close(fig)
        (root / "comparison.json").write_text(json.dumps(rows, indent=2, default=str))
    if several_seeds:
        columns = (["strategy", "metric", "test", "test_std", "test_final", "test_final_std"]
                   + (["test_novel", "test_novel_std"] if base.novel_clients else [])
                   + (["test_benign", "test_benign_std"] if base.attack else [])
                   + ["rounds", "seconds", "seeds"])
    else:
        columns = (["strategy", "metric", "test", "test_final", "best_round", "rounds",
                    "seconds"] + (["test_novel"] if base.novel_clients else [])
                   + (["test_benign"] if base.attack else []))
    print()
    print(format_table(rows, columns))
    print(f"\nresults written to {root}")
    if outcome.nothing_learned:
        print(f"pyg-fedgraph: error: no client update was accepted in any round of "
              f"{', '.join(outcome.nothing_learned)} (see the warnings above): the results "
              f"are those of the initial model", file=sys.stderr)
        return EXIT_NOTHING_LEARNED
    return 0


def _interrupted(outcome: _Outcome, root: Path) -> int:
    if outcome.stopped is not None:
        label, rnd, _, path = outcome.stopped
        print(f"\npyg-fedgraph: aborted during {label}; its checkpoint of round {rnd} in "
              f"{path.parent} is kept; continue with: pyg-fedgraph run --resume "
              f"{shlex.quote(str(root))}", file=sys.stderr)
    else:
        print(f"\npyg-fedgraph: aborted; continue what was checkpointed with: pyg-fedgraph "
              f"run --resume {shlex.quote(str(root))}", file=sys.stderr)
    return EXIT_INTERRUPTED


def _check_trackers(names: Sequence[str]) -> list[str]:
    r"""The ``--tracker`` names, each once, after checking that each is known
    and installed (before any work)."""
    from pyg_fedgraph.tracking import check_tracker

    for name in names:
        check_tracker(name)
    return list(dict.fromkeys(names))


def _execute(plan: RunPlan, quiet: bool, states: dict[RunKey, dict[str, Any]],
             before_run: Callable[[], None]) -> int:
    r"""Builds (and checks) the first seed's data, calls ``before_run``
    (which prepares the output folder and writes the manifest), then runs
    the plan and reports."""
    with _placement(plan.base, plan.deterministic):
        dataset = _build_data(plan.config(plan.keys[0]), plan.strategies)
        before_run()
        print(f"{dataset}" + ("  [synthetic data]" if dataset.info.get("synthetic") else ""))
        outcome = _Outcome()
        try:
            _run_all(plan, quiet, states, outcome, dataset)
        except KeyboardInterrupt:
            return _interrupted(outcome, plan.root)
        return _finish(plan, dataset, outcome)


def run_main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    r"""``pyg-fedgraph run``; ``argv`` are the command's own arguments (to
    tell which options were given)."""
    from pyg_fedgraph.cli.config import CONFIG_NAME, dump_yaml
    from pyg_fedgraph.experiment import ExperimentConfig, parse_value

    if args.resume is not None:
        return _resume(args, argv)
    args = apply_config(args, argv)
    if args.dataset is None:
        args = default_job(args)
    if args.checkpoint_every < 0:
        raise ValueError(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    trackers = _check_trackers(args.tracker)
    names = _strategy_list(args.strategy)
    if args.seeds is not None and "--seed" in _given(argv):
        raise ValueError("give --seed or --seeds, not both")
    seeds = [int(s) for s in args.seeds] if args.seeds else [args.seed]
    base = ExperimentConfig(dataset=args.dataset, strategy=names[0], rounds=args.rounds,
                            clients=args.clients, partition=args.partition, beta=args.beta,
                            classes_per_client=args.classes_per_client, seed=seeds[0],
                            novel_clients=args.novel_clients, attack=args.attack,
                            attack_ratio=args.attack_ratio, dropout=args.dropout,
                            reject_policy=args.reject_policy, device=args.device,
                            threads=args.threads, precision=args.precision,
                            overrides={k: v if not isinstance(v, str) else parse_value(v)
                                       for k, v in args.overrides})
    for seed in seeds:
        ExperimentConfig(**{**base.to_dict(), "seed": seed})  # each seed is a valid seed
    root: Path = args.out or Path("runs") / f"{args.dataset}-{datetime.now():%Y%m%d-%H%M%S}"
    plan = RunPlan(root, base, names, seeds, args.checkpoint_every, trackers,
                   bool(args.deterministic), bool(args.save_models))
    command = "pyg-fedgraph " + shlex.join(argv)

    def write_manifest() -> None:
        (root / MANIFEST).write_text(json.dumps(plan.manifest(command), indent=2, default=str))
        if len(plan.keys) > 1:  # the comparison as given; each run has its resolved one
            (root / CONFIG_NAME).write_text(dump_yaml({
                **{k: v for k, v in base.to_dict().items() if k not in ("overrides", "seed")},
                "strategy": ",".join(names), "seeds": seeds,
                "checkpoint_every": plan.every, "deterministic": plan.deterministic,
                "tracker": trackers, "save_models": plan.save_models,
                "set": dict(base.overrides)}))

    def before_run() -> None:  # --out is checked (and cleared with --overwrite) first
        prepare_output(root, overwrite=args.overwrite)
        write_manifest()

    return _execute(plan, args.quiet, {}, before_run)


def _read_manifest(root: Path) -> dict[str, Any]:
    r"""The manifest of the run in ``root``; a run written without one (one
    strategy) is read from its checkpoint."""
    from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME, load_checkpoint

    path = root / MANIFEST
    if path.is_file():
        try:
            manifest = json.loads(path.read_text())
            manifest["strategies"] = list(manifest["strategies"])
            manifest["config"] = dict(manifest["config"])
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"{path} is not a run manifest ({type(err).__name__}: "
                             f"{err})") from None
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"{path} has format {manifest.get('format')!r}; this version "
                             f"reads format {MANIFEST_FORMAT}")
        return dict(manifest)
    if (root / CHECKPOINT_NAME).is_file():
        state = load_checkpoint(root)
        if "run" not in state:
            raise ValueError(f"{root / CHECKPOINT_NAME} holds no run settings; it was not "
                             f"written by 'pyg-fedgraph run'")
        config = dict(state["run"]["config"])
        return {"strategies": [config["strategy"]], "config": config,
                "checkpoint_every": int(state["run"].get("checkpoint_every", 0)),
                "resumed": []}
    raise FileNotFoundError(f"no run to resume in {root}: it holds neither {MANIFEST} nor "
                            f"{CHECKPOINT_NAME} (runs write them to their --out)")


def _resume(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from pyg_fedgraph.experiment import ExperimentConfig
    from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME, load_checkpoint

    given = _given(argv)
    ignored = sorted(given - set(RESUME_OPTIONS))
    if ignored:
        raise ValueError(f"--resume continues a run with its saved settings: "
                         f"{', '.join(ignored)} cannot be given with it (only "
                         f"{', '.join(RESUME_OPTIONS[1:])})")
    root: Path = args.resume
    if not root.is_dir():
        raise FileNotFoundError(f"--resume {root}: no such directory")
    manifest = _read_manifest(root)
    base = ExperimentConfig(**manifest["config"])
    seeds = [int(s) for s in manifest.get("seeds", [base.seed])]
    plan = RunPlan(root, base, manifest["strategies"], seeds,
                   int(manifest.get("checkpoint_every", 0)),
                   _check_trackers([str(t) for t in manifest.get("trackers", [])]),
                   bool(manifest.get("deterministic", False)) or bool(args.deterministic),
                   bool(manifest.get("save_models", False)))
    states: dict[RunKey, dict[str, Any]] = {}
    for key in plan.keys:  # every checkpoint is read and checked before anything runs
        path = plan.folder(key) / CHECKPOINT_NAME
        if not path.is_file():
            continue  # never started: runs from round 1
        state = load_checkpoint(path)
        saved = dict(state.get("run", {}).get("config", {}))
        mine = plan.config(key).to_dict()
        if {k: v for k, v in saved.items() if k not in _PLACEMENT} != \
                {k: v for k, v in mine.items() if k not in _PLACEMENT} \
                or saved.get("strategy") != key.strategy:
            raise ValueError(f"{path} belongs to another run than {root / MANIFEST} describes")
        if args.rounds is not None and int(state["round"]) > args.rounds:
            raise ValueError(f"--rounds {args.rounds} is below round {int(state['round'])}, "
                             f"which {plan.label(key)} has already reached in {path.parent}")
        states[key] = state
    if args.rounds is not None:
        plan.base = replace(plan.base, rounds=args.rounds)
    if "--device" in given:
        plan.base = replace(plan.base, device=args.device)
    if "--threads" in given:
        plan.base = replace(plan.base, threads=args.threads)
    if "--checkpoint-every" in given:
        plan.every = args.checkpoint_every
    resumed = [*manifest.get("resumed", []), {
        "at": datetime.now().isoformat(timespec="seconds"),
        "rounds": {plan.label(k): int(s["round"]) for k, s in states.items()}}]

    def write_manifest() -> None:
        (root / MANIFEST).write_text(json.dumps(
            plan.manifest(str(manifest.get("command", "")), manifest.get("started"), resumed),
            indent=2, default=str))

    return _execute(plan, args.quiet, states, write_manifest)
