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
   last round; ``--checkpoint-every K`` adds one every K rounds. The first
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
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
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


@dataclass
class _Progress:
    r"""A tqdm bar over a run's rounds on a terminal; one line per evaluated
    round otherwise (logs, CI); nothing with ``--quiet``."""
    quiet: bool
    terminal: bool = field(default_factory=lambda: sys.stderr.isatty())
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


# ------------------------------------------------------------------ output
def _run_dir(root: Path, name: str, names: Sequence[str]) -> Path:
    return root if len(names) == 1 else root / name


def _run_files(folder: Path) -> list[Path]:
    r"""The files of a run (or comparison) in ``folder``, and those of the
    runs in its sub-folders."""
    from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME
    from pyg_fedgraph.simulation.report import RUN_FILES

    patterns = (*RUN_FILES, CHECKPOINT_NAME, f".{CHECKPOINT_NAME}.*.tmp", MANIFEST,
                *_COMPARISON_FILES, *_TRACKER_FILES)
    found = sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        found += sorted({p for pattern in patterns for p in sub.glob(pattern) if p.is_file()})
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
    for sub in {p.parent for p in existing if p.parent != root}:
        if not any(sub.iterdir()):
            sub.rmdir()
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
    r"""The data set of the runs, after checking every ``--set`` value of
    every strategy; then each strategy's requirements on that data."""
    from pyg_fedgraph.experiment import build_dataset, check_config, route_overrides

    parts = [route_overrides(replace(base, strategy=n)) for n in names]
    dataset = build_dataset(base, parts[0]["data"])
    for name in names:
        check_config(replace(base, strategy=name), dataset)
    return dataset


def _given(argv: Sequence[str]) -> set[str]:
    r"""The options of ``run`` that ``argv`` gives explicitly."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    given = set()
    for action in run._actions:
        for opt in action.option_strings:
            if any(tok == opt or tok.startswith(opt + "=") for tok in argv):
                given.add(action.option_strings[-1])
    return given


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
    stopped: tuple[str, int, int, Path] | None = None  # strategy, round, rounds, checkpoint


def _checkpoint(sim: Simulator, cfg: ExperimentConfig, out: Path, every: int,
                seconds: float) -> Path:
    from pyg_fedgraph.simulation.checkpoint import save_checkpoint

    # The settings travel with the state, so that --resume can rebuild the run.
    return save_checkpoint({**sim.state_dict(), "run": {
        "config": cfg.to_dict(), "checkpoint_every": every, "seconds": seconds}}, out)


def _train(sim: Simulator, cfg: ExperimentConfig, out: Path, every: int, seconds: float,
           progress: _Progress, stop: _Stop, saved: _Saved) -> float | None:
    r"""Runs ``sim`` to its last round, checkpointing every ``every`` rounds
    and at the end; returns the run's seconds so far (``seconds``, those of
    its earlier parts, plus this part's, as the final checkpoint records
    them), or ``None`` when a Ctrl-C stopped it (after a checkpoint of the
    round it finished)."""
    t0 = time.perf_counter()
    name = cfg.strategy
    progress.start(name, sim)
    try:
        while sim.round < sim.rounds:
            if not stop.requested:  # a Ctrl-C between two runs stops before this one starts
                record = sim.step()
                progress.update(name, sim, record is not None)
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


def _write(sim: Simulator, cfg: ExperimentConfig, out: Path, summary: dict[str, Any]) -> None:
    import torch

    from pyg_fedgraph.simulation.report import write_run
    config = {**cfg.to_dict(), "resolved": {
        "rounds": sim.rounds, "local": vars(sim.trainer.config),
        "model": repr(sim.trainer.model), "strategy": sim.strategy.hparams(),
        "num_params": sim.layout.num_params, "device": str(sim.device),
        "state_device": str(sim.state_device), "execution": sim.execution,
        "parallel_clients": sim.parallel_clients, "precision": sim.trainer.precision,
        "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled()}}
    write_run(out, sim.history, config, summary, collaboration=sim.strategy.collaboration_graph(),
              groups=sim.dataset.client_labels, prior_edge_index=sim.dataset.edge_index)


def _run_all(root: Path, base: ExperimentConfig, names: Sequence[str],
             dataset: FederatedDataset, every: int, quiet: bool,
             states: dict[str, dict[str, Any]], outcome: _Outcome,
             trackers: Sequence[str] = ()) -> None:
    r"""Runs (or continues, from ``states``) every strategy of the manifest,
    filling ``outcome`` (also when a second Ctrl-C aborts it), logging each
    run to ``trackers``."""
    from pyg_fedgraph.experiment import build_simulator
    from pyg_fedgraph.simulation.checkpoint import remove_partial_writes
    from pyg_fedgraph.tracking import build_tracker

    progress = _Progress(quiet)
    with _catch_sigint() as stop:
        for name in names:
            cfg = replace(base, strategy=name)
            out = _run_dir(root, name, names)
            out.mkdir(parents=True, exist_ok=True)
            remove_partial_writes(out)
            tracking = [build_tracker(t, root, run=name, experiment=root.resolve().name,
                                      hparams=cfg.to_dict()) for t in trackers]
            sim = build_simulator(cfg, dataset=dataset, progress=False,
                                  callbacks=tuple(tracking))
            seconds = 0.0
            state = states.get(name)
            if state is not None:
                sim.load_state_dict(state)
                seconds = float(state["run"].get("seconds", 0.0))
                if sim.round < sim.rounds:
                    print(f"{name}: resuming at round {sim.round} of {sim.rounds}")
            saved = _Saved()
            if state is not None:
                saved = _Saved(out / "checkpoint.pt", sim.round)
            try:
                total = _train(sim, cfg, out, every, seconds, progress, stop, saved)
            except KeyboardInterrupt:
                if saved.path is not None:
                    outcome.stopped = (name, saved.round, sim.rounds, saved.path)
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
                outcome.stopped = (name, sim.round, sim.rounds, saved.path)
                return
            summary = _summary(sim, cfg, total)
            _write(sim, cfg, out, summary)
            outcome.rows.append(summary)
            outcome.histories[name] = sim.history
            if sim.engine.accepted_total == 0:
                outcome.nothing_learned.append(name)


def _finish(root: Path, base: ExperimentConfig, names: Sequence[str],
            dataset: FederatedDataset, outcome: _Outcome) -> int:
    from pyg_fedgraph.simulation.report import format_table

    if outcome.stopped is not None:
        name, rnd, rounds, path = outcome.stopped
        print(f"pyg-fedgraph: {name} stopped after round {rnd} of {rounds}, checkpoint in "
              f"{path.parent}; continue with: pyg-fedgraph run --resume "
              f"{shlex.quote(str(root))}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if len(names) > 1:
        import matplotlib.pyplot as plt

        from pyg_fedgraph.viz import plot_learning_curves
        partition = dataset.info.get("partition")
        fig = plot_learning_curves(
            outcome.histories, title=f"{base.dataset}"
            + (f", {partition} partition" if partition else "")
            + f", {dataset.num_clients} clients: " + " vs ".join(names))
        fig.savefig(root / "learning_curves.png", dpi=120)
        plt.close(fig)
        (root / "comparison.json").write_text(json.dumps(outcome.rows, indent=2, default=str))
    columns = (["strategy", "metric", "test", "test_final", "best_round", "rounds", "seconds"]
               + (["test_novel"] if base.novel_clients else [])
               + (["test_benign"] if base.attack else []))
    print()
    print(format_table(outcome.rows, columns))
    print(f"\nresults written to {root}")
    if outcome.nothing_learned:
        print(f"pyg-fedgraph: error: no client update was accepted in any round of "
              f"{', '.join(outcome.nothing_learned)} (see the warnings above): the results "
              f"are those of the initial model", file=sys.stderr)
        return EXIT_NOTHING_LEARNED
    return 0


def _write_manifest(root: Path, names: Sequence[str], base: ExperimentConfig, every: int,
                    command: str, started: str | None = None,
                    resumed: list[dict[str, Any]] | None = None,
                    trackers: Sequence[str] = ()) -> None:
    manifest = {"format": MANIFEST_FORMAT, "strategies": list(names), "config": base.to_dict(),
                "checkpoint_every": every, "command": command,
                "started": started or datetime.now().isoformat(timespec="seconds"),
                "resumed": resumed or [], "trackers": list(trackers)}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))


def _interrupted(outcome: _Outcome, root: Path) -> int:
    if outcome.stopped is not None:
        name, rnd, _, path = outcome.stopped
        print(f"\npyg-fedgraph: aborted during {name}; its checkpoint of round {rnd} in "
              f"{path.parent} is kept; continue with: pyg-fedgraph run --resume "
              f"{shlex.quote(str(root))}", file=sys.stderr)
    else:
        print(f"\npyg-fedgraph: aborted; continue what was checkpointed with: pyg-fedgraph "
              f"run --resume {shlex.quote(str(root))}", file=sys.stderr)
    return EXIT_INTERRUPTED


def run_main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    r"""``pyg-fedgraph run``; ``argv`` are the command's own arguments (to
    tell which options were given)."""
    from pyg_fedgraph.experiment import ExperimentConfig, parse_value

    if args.checkpoint_every < 0:
        raise ValueError(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    if args.resume is not None:
        return _resume(args, argv)
    trackers = _check_trackers(args.tracker)
    names = _strategy_list(args.strategy)
    base = ExperimentConfig(dataset=args.dataset, strategy=names[0], rounds=args.rounds,
                            clients=args.clients, partition=args.partition, beta=args.beta,
                            classes_per_client=args.classes_per_client, seed=args.seed,
                            novel_clients=args.novel_clients, attack=args.attack,
                            attack_ratio=args.attack_ratio, dropout=args.dropout,
                            reject_policy=args.reject_policy, device=args.device,
                            threads=args.threads, precision=args.precision,
                            overrides={k: parse_value(v) for k, v in args.overrides})
    with _placement(base, args.deterministic):
        dataset = _build_data(base, names)
        root: Path = args.out or Path("runs") / f"{args.dataset}-{datetime.now():%Y%m%d-%H%M%S}"
        prepare_output(root, overwrite=args.overwrite)
        _write_manifest(root, names, base, args.checkpoint_every,
                        "pyg-fedgraph " + shlex.join(argv), trackers=trackers)
        print(f"{dataset}" + ("  [synthetic data]" if dataset.info.get("synthetic") else ""))
        outcome = _Outcome()
        try:
            _run_all(root, base, names, dataset, args.checkpoint_every, args.quiet, {}, outcome,
                     trackers)
        except KeyboardInterrupt:
            return _interrupted(outcome, root)
        return _finish(root, base, names, dataset, outcome)


def _check_trackers(names: Sequence[str]) -> list[str]:
    r"""The ``--tracker`` names, each once, after checking that each is known
    and installed (before any work)."""
    from pyg_fedgraph.tracking import check_tracker

    for name in names:
        check_tracker(name)
    return list(dict.fromkeys(names))


def _read_manifest(root: Path) -> tuple[list[str], dict[str, Any], int, dict[str, Any]]:
    r"""Strategies, base settings, checkpoint period and the manifest of the
    run in ``root``; a run written without a manifest (one strategy) is read
    from its checkpoint."""
    from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME, load_checkpoint

    path = root / MANIFEST
    if path.is_file():
        try:
            manifest = json.loads(path.read_text())
            names, config = list(manifest["strategies"]), dict(manifest["config"])
            every = int(manifest.get("checkpoint_every", 0))
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"{path} is not a run manifest ({type(err).__name__}: "
                             f"{err})") from None
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"{path} has format {manifest.get('format')!r}; this version "
                             f"reads format {MANIFEST_FORMAT}")
        return names, config, every, manifest
    if (root / CHECKPOINT_NAME).is_file():
        state = load_checkpoint(root)
        if "run" not in state:
            raise ValueError(f"{root / CHECKPOINT_NAME} holds no run settings; it was not "
                             f"written by 'pyg-fedgraph run'")
        config = dict(state["run"]["config"])
        return ([config["strategy"]], config, int(state["run"].get("checkpoint_every", 0)),
                {"resumed": []})
    raise FileNotFoundError(f"no run to resume in {root}: it holds neither {MANIFEST} nor "
                            f"{CHECKPOINT_NAME} (runs write them to their --out)")


def _resume(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from pyg_fedgraph.experiment import ExperimentConfig
    from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME, load_checkpoint

    ignored = sorted(_given(argv) - set(RESUME_OPTIONS))
    if ignored:
        raise ValueError(f"--resume continues a run with its saved settings: "
                         f"{', '.join(ignored)} cannot be given with it (only "
                         f"{', '.join(RESUME_OPTIONS[1:])})")
    root: Path = args.resume
    if not root.is_dir():
        raise FileNotFoundError(f"--resume {root}: no such directory")
    names, config, every, manifest = _read_manifest(root)
    trackers = _check_trackers([str(t) for t in manifest.get("trackers", [])])
    base = ExperimentConfig(**config)
    states: dict[str, dict[str, Any]] = {}
    for name in names:  # every checkpoint is read and checked before anything runs
        path = _run_dir(root, name, names) / CHECKPOINT_NAME
        if not path.is_file():
            continue  # never started: runs from round 1
        state = load_checkpoint(path)
        saved = dict(state.get("run", {}).get("config", {}))
        if {k: v for k, v in saved.items() if k not in _PLACEMENT} != \
                {k: v for k, v in base.to_dict().items() if k not in _PLACEMENT} \
                or saved.get("strategy") != name:
            raise ValueError(f"{path} belongs to another run than {root / MANIFEST} describes")
        if args.rounds is not None and int(state["round"]) > args.rounds:
            raise ValueError(f"--rounds {args.rounds} is below round {int(state['round'])}, "
                             f"which {name} has already reached in {path.parent}")
        states[name] = state
    if args.rounds is not None:
        base = replace(base, rounds=args.rounds)
    given = _given(argv)
    if "--device" in given:
        base = replace(base, device=args.device)
    if "--threads" in given:
        base = replace(base, threads=args.threads)
    if "--checkpoint-every" in given:
        every = args.checkpoint_every
    with _placement(base, args.deterministic):
        dataset = _build_data(base, names)
        resumed = [*manifest.get("resumed", []), {
            "at": datetime.now().isoformat(timespec="seconds"),
            "rounds": {n: int(s["round"]) for n, s in states.items()}}]
        _write_manifest(root, names, base, every, str(manifest.get("command", "")),
                        manifest.get("started"), resumed, trackers)
        print(f"{dataset}" + ("  [synthetic data]" if dataset.info.get("synthetic") else ""))
        outcome = _Outcome()
        try:
            _run_all(root, base, names, dataset, every, args.quiet, states, outcome, trackers)
        except KeyboardInterrupt:
            return _interrupted(outcome, root)
        return _finish(root, base, names, dataset, outcome)

