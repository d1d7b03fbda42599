r"""Several runs as one experiment: every strategy with every seed, each run
in its folder, with a manifest that lets the whole comparison resume.

A :class:`Comparison` is what ``pyg-fedgraph run`` carries out (the command
line only parses its options into one): the runs go one after the other
through the :class:`~pyg_fedgraph.experiment.Runner`, each writing its run
folder (:func:`~pyg_fedgraph.experiment.files.write_results`); the
comparison's folder holds ``run.json`` (the manifest: strategies, seeds,
settings), and, for several runs, ``comparison.json`` and
``learning_curves.png``. :meth:`Comparison.resume` rebuilds a comparison
from its folder: finished runs are read back, the interrupted one continues
from its checkpoint, and those not started run from round 1, so that the
results equal an uninterrupted run's (up to the timings).
"""
from __future__ import annotations

import json
import logging
import math
import statistics
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyg_fedgraph.experiment.files import CONFIG_NAME, dump_yaml, run_summary, write_history
from pyg_fedgraph.experiment.files import write_results as write_run_folder
from pyg_fedgraph.experiment.runner import RoundProgress, Runner, StopSignal
from pyg_fedgraph.experiment.settings import ExperimentConfig, RunOptions

if TYPE_CHECKING:
    from pyg_fedgraph.data import FederatedDataset
    from pyg_fedgraph.engine.history import History

__all__ = ["Comparison", "RunKey", "Outcome", "MANIFEST", "MANIFEST_FORMAT", "PLACEMENT",
           "prepare_output", "aggregate_seeds", "check_strategies"]

log = logging.getLogger(__name__)

#: The manifest of a run (or comparison) in its folder.
MANIFEST = "run.json"
MANIFEST_FORMAT = 1
#: Files a comparison writes beside its runs' folders.
COMPARISON_FILES = ("comparison.json", "learning_curves.png")
#: Files of ``--tracker`` (TensorBoard's events in a run's folder, MLflow's store).
TRACKER_FILES = ("events.out.tfevents.*", "mlflow.db")
#: Settings a resumed run may change: where it computes, and how far it goes.
PLACEMENT = ("strategy", "rounds", "device", "threads")


@dataclass(frozen=True)
class RunKey:
    r"""One run of a comparison: a strategy with a seed."""
    strategy: str
    seed: int


@dataclass
class Outcome:
    r"""What a comparison produced: each finished run's summary and history,
    the runs that accepted no update, and where it stopped, if it did."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    histories: dict[str, History] = field(default_factory=dict)
    nothing_learned: list[str] = field(default_factory=list)
    #: ``(run label, round, rounds, checkpoint)`` of the run a stop request ended.
    stopped: tuple[str, int, int, Path] | None = None
    #: The stop came from a closed output pipe, not from Ctrl-C.
    broken_pipe: bool = False
    #: A second Ctrl-C aborted the run in progress (``stopped``: its last checkpoint).
    aborted: bool = False


def check_strategies(names: Sequence[str]) -> list[str]:
    r"""``names`` after checking each is registered and given once."""
    from pyg_fedgraph.strategies import STRATEGIES

    names = [n for n in names if n]
    if not names:
        raise ValueError("--strategy names no strategy")
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategy {unknown[0]!r}"
                         + (f" (and {', '.join(unknown[1:])})" if len(unknown) > 1 else "")
                         + f"; known: {', '.join(sorted(STRATEGIES))}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"--strategy names {', '.join(repeated)} more than once")
    return list(names)


# ------------------------------------------------------------------ output
def run_files(folder: Path) -> list[Path]:
    r"""The files of a run (or comparison) in ``folder``, and those of the
    runs in its sub-folders (two levels: ``<strategy>/seed-<s>``)."""
    from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME
    from pyg_fedgraph.simulation.report import RUN_FILES

    patterns = (*RUN_FILES, CHECKPOINT_NAME, f".{CHECKPOINT_NAME}.*.tmp", MANIFEST,
                *COMPARISON_FILES, *TRACKER_FILES)

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
    existing = run_files(root)
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


def aggregate_seeds(rows: Sequence[dict[str, Any]], strategies: Sequence[str]
                    ) -> list[dict[str, Any]]:
    r"""One row per strategy from its runs' summaries over several seeds:
    the mean of every number and, for ``test``, ``test_final`` (and
    ``test_novel``, ``test_benign`` when present), the sample standard
    deviation (:math:`n - 1`) as ``<key>_std``; ``runs`` keeps the per-seed
    summaries."""
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


@contextmanager
def placement(base: ExperimentConfig, deterministic: bool) -> Iterator[None]:
    r"""The process-wide settings of a run, restored afterwards (a command
    may run in a process that goes on): torch's threads, deterministic
    algorithms (with the cuBLAS workspace they need on CUDA). Checks the
    device first.

    Threads: ``base.threads`` when given; otherwise one thread for a run on
    the CPU unless ``OMP_NUM_THREADS`` is set (then torch's choice, which
    follows it), and torch's choice on other devices. The default job took a
    median 27.7 s with torch's two threads against 11.7 s with one on a
    2-core machine running another job (9 s either way when the second core
    was free), and a small CNN's training 4-18x longer; results do not
    depend on it. ``base.threads`` stays as given (``None``), so the
    settings, and the records keyed by them, do not change.
    """
    import os

    import torch

    from pyg_fedgraph.utils.device import deterministic_algorithms, resolve_device, set_threads

    device = resolve_device(base.device)
    threads = torch.get_num_threads()
    if base.threads is not None:
        set_threads(base.threads)
    elif device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        set_threads(1)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        with deterministic_algorithms(deterministic or
                                      torch.are_deterministic_algorithms_enabled()):
            yield
    finally:
        torch.set_num_threads(threads)


# ------------------------------------------------------------------ the plan
@dataclass
class Comparison:
    r"""Every strategy with every seed, each run in its folder (``root``,
    ``root/<strategy>``, ``root/seed-<s>`` or ``root/<strategy>/seed-<s>``).

    Args:
        root (pathlib.Path): the comparison's folder.
        base (ExperimentConfig): the settings every run shares (strategy and
            seed are each run's).
        strategies (list of str): the strategies, in order.
        seeds (list of int): the seeds.
        run (RunOptions): checkpoints, trackers, determinism, models.
        command (str): the command that started it (for the manifest).
    """
    root: Path
    base: ExperimentConfig
    strategies: list[str]
    seeds: list[int]
    run: RunOptions = field(default_factory=RunOptions)
    command: str = ""
    started: str = field(default_factory=lambda: datetime.now().isoformat(timespec="seconds"))
    resumed: list[dict[str, Any]] = field(default_factory=list)
    #: Checkpoints to continue from, by run (filled by :meth:`resume`).
    states: dict[RunKey, dict[str, Any]] = field(default_factory=dict)

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

    def manifest(self) -> dict[str, Any]:
        r"""``run.json``: what the comparison is, to resume it."""
        return {"format": MANIFEST_FORMAT, "strategies": list(self.strategies),
                "seeds": list(self.seeds), "config": self.base.to_dict(),
                "checkpoint_every": self.run.checkpoint_every, "trackers": list(self.run.tracker),
                "deterministic": self.run.deterministic, "save_models": self.run.save_models,
                "command": self.command, "started": self.started, "resumed": self.resumed}

    def write_manifest(self) -> None:
        (self.root / MANIFEST).write_text(json.dumps(self.manifest(), indent=2, default=str))
        if len(self.keys) > 1 and not self.resumed:
            # The comparison as given; each run has its resolved one.
            (self.root / CONFIG_NAME).write_text(dump_yaml({
                **{k: v for k, v in self.base.to_dict().items() if k not in ("overrides", "seed")},
                "strategy": ",".join(self.strategies), "seeds": self.seeds,
                "checkpoint_every": self.run.checkpoint_every,
                "deterministic": self.run.deterministic, "tracker": self.run.tracker,
                "save_models": self.run.save_models, "set": dict(self.base.overrides)}))

    # ------------------------------------------------------------- resuming
    @classmethod
    def resume(cls, root: Path, run: RunOptions, *, rounds: int | None = None,
               changes: dict[str, Any] | None = None) -> Comparison:
        r"""The comparison in ``root`` with its saved settings, every
        checkpoint read and checked against them before anything runs.

        Args:
            root (pathlib.Path): its folder.
            run (RunOptions): the options given now (only ``checkpoint_every``,
                ``deterministic``, ``quiet`` and ``log_level`` are read).
            rounds (int, optional): the total of rounds to reach (default: the
                saved one).
            changes (dict, optional): placement settings to change
                (``device``, ``threads``).
        """
        from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME, load_checkpoint

        if not root.is_dir():
            raise FileNotFoundError(f"--resume {root}: no such directory")
        manifest = _read_manifest(root)
        base = ExperimentConfig(**manifest["config"])
        seeds = [int(s) for s in manifest.get("seeds", [base.seed])]
        saved_run = RunOptions(checkpoint_every=int(manifest.get("checkpoint_every", 0)),
                               tracker=list(manifest.get("trackers", [])),
                               deterministic=bool(manifest.get("deterministic", False))
                               or run.deterministic,
                               save_models=bool(manifest.get("save_models", False)),
                               quiet=run.quiet, log_level=run.log_level)
        plan = cls(root, base, list(manifest["strategies"]), seeds, saved_run,
                   str(manifest.get("command", "")),
                   manifest.get("started") or datetime.now().isoformat(timespec="seconds"),
                   list(manifest.get("resumed", [])))
        for key in plan.keys:
            path = plan.folder(key) / CHECKPOINT_NAME
            if not path.is_file():
                continue  # never started: runs from round 1
            state = load_checkpoint(path)
            saved = dict(state.get("run", {}).get("config", {}))
            mine = plan.config(key).to_dict()
            if not _same_run(saved, mine) or saved.get("strategy") != key.strategy:
                raise ValueError(f"{path} belongs to another run than {root / MANIFEST} "
                                 f"describes")
            if rounds is not None and int(state["round"]) > rounds:
                raise ValueError(f"--rounds {rounds} is below round {int(state['round'])}, "
                                 f"which {plan.label(key)} has already reached in "
                                 f"{path.parent}")
            plan.states[key] = state
        if not plan.states:
            raise ValueError(f"--resume {root}: nothing of this run was saved (no checkpoint "
                             f"in its folders); start it again with --out {root} --overwrite")
        if rounds is not None:
            plan.base = replace(plan.base, rounds=rounds)
        if changes:
            plan.base = replace(plan.base, **changes)
        plan.resumed.append({"at": datetime.now().isoformat(timespec="seconds"),
                             "rounds": {plan.label(k): int(s["round"])
                                        for k, s in plan.states.items()}})
        return plan

    # ------------------------------------------------------------- running
    def execute(self, dataset: FederatedDataset | None = None, *,
                stop: StopSignal | None = None, progress: RoundProgress | None = None,
                announce: Callable[[str], None] | None = None) -> Outcome:
        r"""Runs (or continues) every run, one after the other, each through a
        :class:`~pyg_fedgraph.experiment.Runner` that checkpoints into its
        folder and logs to the trackers; writes every finished run's folder.
        A stop request ends the comparison after the run in progress has
        checkpointed (and written the history of its finished rounds); an
        abort (:class:`KeyboardInterrupt`, a second Ctrl-C) ends it at once,
        keeping the checkpoints written (``outcome.aborted``).

        Args:
            dataset (FederatedDataset, optional): the first seed's data, when
                already built (and checked).
            stop (StopSignal, optional): stop requests (Ctrl-C).
            progress (RoundProgress, optional): the display (default: quiet).
            announce (callable, optional): receives one line per resumed run.
        """
        from pyg_fedgraph.experiment.build import build_dataset, build_simulator, route_overrides
        from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME
        from pyg_fedgraph.tracking import build_tracker

        outcome = Outcome()
        stop = stop or StopSignal()
        data = dataset
        data_seed = self.seeds[0] if data is not None else None
        for key in self.keys:
            if stop.requested:
                break
            cfg = self.config(key)
            if data is None or data_seed != key.seed:
                data = build_dataset(cfg, route_overrides(cfg)["data"])
                data_seed = key.seed
            out = self.folder(key)
            out.mkdir(parents=True, exist_ok=True)
            label = self.label(key)
            trackers = [build_tracker(t, self.root, run=str(out.relative_to(self.root))
                                      if out != self.root else key.strategy,
                                      experiment=self.root.resolve().name,
                                      hparams=cfg.to_dict()) for t in self.run.tracker]
            sim = build_simulator(cfg, dataset=data)
            runner = Runner(sim, name=label, checkpoint=out / CHECKPOINT_NAME,
                            checkpoint_every=self.run.checkpoint_every, settings=cfg.to_dict(),
                            progress=progress, trackers=trackers, stop=stop)
            state = self.states.get(key)
            if state is not None:
                runner.resume(match=_same_run)
                if sim.round < sim.rounds and announce is not None:
                    announce(f"{label}: resuming at round {sim.round} of {sim.rounds}")
            try:
                result = runner.run()
            except KeyboardInterrupt:  # a second Ctrl-C: what was saved stays
                outcome.aborted = True
                if runner.saved is not None:
                    outcome.stopped = (label, _round_of(runner.saved), sim.rounds,
                                       runner.saved)
                return outcome
            if runner.broken_pipe:
                outcome.broken_pipe = True
            if result.status != "finished":
                assert result.checkpoint is not None  # a stopped run checkpoints
                write_history(out, sim)
                outcome.stopped = (label, result.round, result.rounds, result.checkpoint)
                break
            summary = run_summary(sim, cfg, result.seconds)
            write_run_folder(out, sim, cfg, summary, self.run)
            outcome.rows.append(summary)
            outcome.histories[label] = sim.history
            if sim.engine.accepted_total == 0:
                outcome.nothing_learned.append(label)
        return outcome

    def write_comparison(self, outcome: Outcome, dataset: FederatedDataset | None
                         ) -> list[dict[str, Any]]:
        r"""The rows of the results table (one per strategy, averaged over
        seeds when there are several); for several runs also
        ``comparison.json`` and ``learning_curves.png``."""
        several_seeds = len(self.seeds) > 1
        rows = (aggregate_seeds(outcome.rows, self.strategies) if several_seeds
                else outcome.rows)
        if len(self.keys) > 1:
            import matplotlib.pyplot as plt

            from pyg_fedgraph.viz import plot_learning_curves
            partition = dataset.info.get("partition") if dataset is not None else None
            clients = f", {dataset.num_clients} clients" if dataset is not None else ""
            seeds = f", seeds {','.join(map(str, self.seeds))}" if several_seeds else ""
            synthetic = (" (synthetic data)" if dataset is not None
                         and dataset.info.get("synthetic") else "")
            # Several seeds: each strategy's runs together (its mean with a band).
            curves: dict[str, Any] = (
                {n: [outcome.histories[self.label(RunKey(n, s))] for s in self.seeds]
                 for n in self.strategies} if several_seeds else dict(outcome.histories))
            fig = plot_learning_curves(
                curves, title=f"{self.base.dataset}{synthetic}"
                + (f", {partition} partition" if partition else "") + clients + seeds + ": "
                + " vs ".join(self.strategies))
            fig.savefig(self.root / "learning_curves.png", dpi=120)
            plt.close(fig)
            (self.root / "comparison.json").write_text(json.dumps(rows, indent=2, default=str))
        return rows


def _same_run(saved: dict[str, Any], mine: dict[str, Any]) -> bool:
    r"""Whether a checkpoint's settings are those of this run, where it
    computes and how far it goes aside (:data:`PLACEMENT`)."""
    from pyg_fedgraph.experiment.runner import plain_settings

    a, b = plain_settings(saved), plain_settings(mine)
    return ({k: v for k, v in a.items() if k not in PLACEMENT}
            == {k: v for k, v in b.items() if k not in PLACEMENT})


def _round_of(path: Path) -> int:
    from pyg_fedgraph.simulation.checkpoint import load_checkpoint
    return int(load_checkpoint(path)["round"])


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
                             f"written by a pyg-fedgraph runner")
        config = dict(state["run"]["config"])
        return {"strategies": [config["strategy"]], "config": config,
                "seeds": [config.get("seed", 0)],
                "checkpoint_every": int(state["run"].get("checkpoint_every", 0)),
                "resumed": []}
    raise FileNotFoundError(f"no run to resume in {root}: it holds neither {MANIFEST} nor "
                            f"{CHECKPOINT_NAME} (runs write them to their --out)")
