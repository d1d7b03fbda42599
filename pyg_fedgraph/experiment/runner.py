r"""The one loop that runs a simulation: checkpoints, Ctrl-C, resuming,
progress and trackers.

:class:`Runner` steps a :class:`~pyg_fedgraph.simulation.Simulator` to its
last round. Everything around the rounds lives here, once, for the command
line, Optuna studies and the benchmarks' record cache alike:

* **checkpoints**: the simulator's whole state plus the run's settings and
  timings (:func:`checkpoint_payload`, one format), written atomically every
  ``checkpoint_every`` rounds (or at most every ``checkpoint_seconds``), when
  the run is stopped, and at its end;
* **resuming** from a checkpoint whose saved settings match (:meth:`Runner.resume`);
* **stopping**: a :class:`StopSignal` (Ctrl-C) ends the run after the round in
  progress; when rounds are long (at least :data:`SNAPSHOT_SECONDS`), the round
  in progress is abandoned between two local steps instead and the run goes
  back to its last finished round, so that a stop takes seconds;
* **progress**: one display (:class:`RoundProgress`): a bar over the rounds on
  a terminal (with the local steps of the round in progress), else a line per
  evaluated round and a line at least every ``interval`` seconds inside long
  rounds;
* **trackers** (:mod:`pyg_fedgraph.tracking`), called after every evaluated
  round and closed with the run's outcome.

A plain loop without any of this is :meth:`Simulator.run
<pyg_fedgraph.simulation.Simulator.run>`.
"""
from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pyg_fedgraph.simulation.checkpoint import (
    load_checkpoint,
    remove_partial_writes,
    save_checkpoint,
)

if TYPE_CHECKING:
    from pyg_fedgraph.engine.history import RoundRecord
    from pyg_fedgraph.simulation.simulator import Simulator

__all__ = ["Runner", "RunResult", "RunStatus", "StopSignal", "RoundProgress", "StatefulCallback",
           "checkpoint_payload", "plain_settings", "CHECKPOINT_FORMAT", "SNAPSHOT_SECONDS",
           "is_terminal"]

log = logging.getLogger(__name__)

#: How a run ended.
RunStatus = Literal["finished", "stopped", "pruned"]
#: The format of the ``"run"`` entry of a checkpoint (see :func:`checkpoint_payload`).
#: Format 1, written before the runner, is read too: its ``"second"`` entry
#: (the benchmarks' local-models history) is the state of the callback named
#: ``"local_models"``.
CHECKPOINT_FORMAT = 2
#: Rounds at least this long (seconds, the previous round's) are made
#: abandonable: the runner keeps the state at the round's start in memory, so
#: that a stop request ends the round between two local steps.
SNAPSHOT_SECONDS = 2.0


def plain_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    r"""``settings`` as a checkpoint and a run record keep them: plain JSON
    types (tuples become lists, paths and other objects text), so that
    settings compare equal however they were written."""
    return json.loads(json.dumps(dict(settings), default=str))


def checkpoint_payload(sim: Simulator, settings: Mapping[str, Any], *, seconds: float,
                       cpu_seconds: float, checkpoint_every: int = 0,
                       load_start: float | None = None,
                       callbacks: Mapping[str, Any] | None = None) -> dict[str, Any]:
    r"""What a checkpoint holds: :meth:`Simulator.state_dict` and, under
    ``"run"``, the run's settings (``settings``, plain), its checkpoint
    interval, the wall and CPU seconds of its finished rounds, the load
    average when it started, and the state of its stateful callbacks."""
    run: dict[str, Any] = {"format": CHECKPOINT_FORMAT, "config": plain_settings(settings),
                           "checkpoint_every": int(checkpoint_every), "seconds": float(seconds),
                           "cpu_seconds": float(cpu_seconds),
                           "callbacks": dict(callbacks or {})}
    if load_start is not None:
        run["load_start"] = float(load_start)
    return {**sim.state_dict(), "run": run}


def _upgrade(run: Mapping[str, Any]) -> dict[str, Any]:
    r"""A checkpoint's ``"run"`` entry in :data:`CHECKPOINT_FORMAT`."""
    out = dict(run)
    if out.get("format", 1) == 1:
        callbacks = {"local_models": out.pop("second")} if "second" in out else {}
        out.setdefault("callbacks", callbacks)
        out.setdefault("cpu_seconds", 0.0)
        out["format"] = CHECKPOINT_FORMAT
    elif out["format"] != CHECKPOINT_FORMAT:
        raise ValueError(f"the checkpoint's run entry has format {out['format']!r}; this "
                         f"version of pyg_fedgraph reads formats 1 and {CHECKPOINT_FORMAT}")
    return out


@runtime_checkable
class StatefulCallback(Protocol):
    r"""A round callback with state of its own that a checkpoint keeps
    (such as the benchmarks' second history of the local models)."""

    def __call__(self, sim: Simulator, record: RoundRecord) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


# ------------------------------------------------------------------ stopping
class StopSignal:
    r"""Ctrl-C for runs: the first one asks the runs to stop (after the round
    in progress, or between two local steps of a long one), the second one
    aborts at once.

    Args:
        hard_abort (bool, optional): after the first Ctrl-C, give SIGINT back
            to the operating system, so that a second one ends the process at
            once even inside a long computation (the command line: every
            checkpoint is written atomically, so nothing is lost that was
            saved); otherwise the second one raises :class:`KeyboardInterrupt`
            when Python next runs (default: :obj:`False`).
        stream (file, optional): where the one-line notice goes
            (default: :obj:`sys.stderr`).
    """

    def __init__(self, *, hard_abort: bool = False, stream: IO[str] | None = None) -> None:
        self.hard_abort = hard_abort
        self.stream = stream
        self.requested = False

    def request(self) -> None:
        r"""Asks the runs to stop (what the first Ctrl-C does)."""
        self.requested = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.request()
        if self.hard_abort:  # before saying so: a second Ctrl-C may follow at once
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        again = "at once" if self.hard_abort else "as soon as Python runs"
        print(f"\npyg-fedgraph: stopping after this round or its next local step (Ctrl-C "
              f"again aborts {again}; saved checkpoints stay)", file=self.stream or sys.stderr,
              flush=True)

    @contextmanager
    def installed(self) -> Iterator[StopSignal]:
        r"""Catches SIGINT while the block runs, in the main thread only
        (elsewhere signals never arrive), and restores the previous handler."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


class _RoundAbandoned(BaseException):
    r"""Raised inside a round by the trainer's step hook when a stop was
    requested (a :class:`BaseException`, so that no ``except Exception``
    between the hook and the runner catches it)."""


# ------------------------------------------------------------------ progress
def is_terminal(stream: IO[str] | None = None) -> bool:
    r"""Whether ``stream`` (default: standard error) is a terminal a bar can
    be drawn on: a pseudo-terminal without a size (``script`` run without one,
    some CI runners) reports 0 columns, where tqdm draws an empty bar, so it
    gets lines instead."""
    stream = stream or sys.stderr
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (OSError, ValueError, AttributeError):
        return False


@dataclass
class RoundProgress:
    r"""The display of a run's progress: on a terminal, a bar over the rounds
    that also shows the local steps of the round in progress; otherwise one
    line per evaluated round and, inside rounds that take long, a line at
    least every ``interval`` seconds; nothing when ``quiet``. Lines go to
    ``stream`` (default: standard error).

    Args:
        quiet (bool): show nothing (default: :obj:`False`).
        terminal (bool, optional): draw a bar (default: :func:`is_terminal`;
            in a Jupyter kernel, whose streams are no terminal, a bar too).
        interval (float): seconds between two lines inside a round without a
            terminal (default: ``30.0``).
        stream (file, optional): where the lines go (default: standard error).
    """
    quiet: bool = False
    terminal: bool | None = None
    interval: float = 30.0
    stream: IO[str] | None = None
    _bar: Any = field(default=None, repr=False)
    _name: str = field(default="", repr=False)
    _round_start: float = field(default=0.0, repr=False)
    _last_line: float = field(default=0.0, repr=False)
    _current: int = field(default=0, repr=False)
    _rounds: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.terminal is None:
            self.terminal = is_terminal(self.stream) or "ipykernel" in sys.modules

    def _write(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)

    def start(self, name: str, sim: Simulator) -> None:
        r"""A run begins (or resumes) at ``sim.round`` of ``sim.rounds``."""
        self._name, self._rounds = name, sim.rounds
        self.begin_round(sim.round + 1)
        if self.quiet or not self.terminal:
            return
        from tqdm.auto import tqdm
        self._bar = tqdm(total=sim.rounds, initial=sim.round, desc=name, unit="round",
                         dynamic_ncols=True, file=self.stream or sys.stderr)

    def begin_round(self, rnd: int) -> None:
        self._current = rnd
        self._round_start = self._last_line = time.perf_counter()

    def inner(self, phase: str, done: int, total: int) -> None:
        r"""Progress inside the round in progress (a trainer step hook)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(f"round {self._current}: {phase} {done}/{total}",
                                      refresh=True)
            return
        now = time.perf_counter()
        if now - self._last_line >= self.interval:
            self._last_line = now
            word = "local step" if phase == "train" else "evaluation batch"
            self._write(f"{self._name}: round {self._current}/{self._rounds}: {word} {done}/"
                        f"{total} ({now - self._round_start:.0f} s into the round)")

    def end_round(self, sim: Simulator, record: RoundRecord | None) -> None:
        r"""A round ended (``record``: its record when it was evaluated)."""
        if not self.quiet:
            history = sim.history
            value = ""
            if record is not None and len(history):
                test = history.mean("test")[-1]  # NaN at a round test_at="best" skips
                value = (f"{history.metric} val {history.mean('val')[-1]:.4f}"
                         + ("" if math.isnan(test) else f" test {test:.4f}"))
            if self._bar is not None:
                self._bar.update(1)
                self._bar.set_postfix_str(value, refresh=True)
            elif record is not None:
                self._write(f"{self._name}: round {sim.round}/{sim.rounds}  {value} "
                            f"({time.perf_counter() - self._round_start:.1f} s)")
        self.begin_round(sim.round + 1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


# ------------------------------------------------------------------ the runner
@dataclass
class RunResult:
    r"""How a :meth:`Runner.run` ended.

    Attributes:
        status (str): ``"finished"``, ``"stopped"`` (a stop request) or
            ``"pruned"`` (``stop_when`` said so).
        round (int): the last finished round.
        rounds (int): the rounds the run was to reach.
        seconds (float): wall seconds of its finished rounds, earlier parts of
            a resumed run included.
        cpu_seconds (float): CPU seconds, likewise.
        checkpoint (pathlib.Path, optional): the checkpoint written last.
        load_start (float): the load average when the run (first) started.
    """
    status: RunStatus
    round: int
    rounds: int
    seconds: float
    cpu_seconds: float
    checkpoint: Path | None
    load_start: float


class Runner:
    r"""Steps a simulator to its last round, with checkpoints, stopping,
    resuming, progress and trackers (see the module docstring).

    Args:
        sim (Simulator): the run.
        name (str, optional): its name in progress lines (default: the
            strategy's).
        checkpoint (str or pathlib.Path, optional): the checkpoint file; no
            checkpoints without one (default: :obj:`None`).
        checkpoint_every (int, optional): also checkpoint every K rounds;
            ``0``: only at the end and when stopped (default: ``0``).
        checkpoint_seconds (float, optional): also checkpoint after every
            round once this many seconds have passed since the last
            checkpoint (``0.0``: after every round) (default: :obj:`None`).
        settings (dict, optional): the run's settings, saved with every
            checkpoint and compared by :meth:`resume` (default: ``{}``).
        progress (RoundProgress, optional): the display (default: none).
        trackers (sequence, optional): round callbacks closed with the run's
            outcome (:class:`~pyg_fedgraph.tracking.Tracker`) (default: ``()``).
        callbacks (sequence or dict, optional): further round callbacks
            ``fn(sim, record)`` after every evaluated round; those given by name
            (a dict) that have state (:class:`StatefulCallback`) are saved
            with the checkpoints (default: ``()``).
        stop_when (callable, optional): ``fn(sim, record) -> bool`` after every
            evaluated round; :obj:`True` ends the run as ``"pruned"`` (an
            Optuna study's pruning) (default: :obj:`None`).
        stop (StopSignal, optional): the stop requests (default: a fresh one;
            install it with :meth:`StopSignal.installed` to catch Ctrl-C).
    """

    def __init__(self, sim: Simulator, *, name: str | None = None,
                 checkpoint: str | Path | None = None, checkpoint_every: int = 0,
                 checkpoint_seconds: float | None = None,
                 settings: Mapping[str, Any] | None = None,
                 progress: RoundProgress | None = None, trackers: Sequence[Any] = (),
                 callbacks: Sequence[Callable[..., Any]] | Mapping[str, Callable[..., Any]] = (),
                 stop_when: Callable[[Simulator, RoundRecord], bool] | None = None,
                 stop: StopSignal | None = None) -> None:
        if checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0, got {checkpoint_every}")
        self.sim = sim
        self.name = name or sim.strategy.name or "run"
        self.checkpoint = None if checkpoint is None else Path(checkpoint)
        self.checkpoint_every = int(checkpoint_every)
        self.checkpoint_seconds = checkpoint_seconds
        self.settings = plain_settings(settings or {})
        self.progress = progress or RoundProgress(quiet=True)
        self.trackers = list(trackers)
        self.callbacks: dict[str, Callable[..., Any]] = (
            dict(callbacks) if isinstance(callbacks, Mapping)
            else {f"callback-{i}": cb for i, cb in enumerate(callbacks)})
        self.stop_when = stop_when
        self.stop = stop or StopSignal()
        #: Wall and CPU seconds of the parts of this run before a resume.
        self.seconds_before = 0.0
        self.cpu_seconds_before = 0.0
        self.load_start = os.getloadavg()[0]
        self._saved: Path | None = None
        self._abandonable = False
        #: Whether the progress display's stream broke (a closed pipe): the run
        #: then stops as after a Ctrl-C, and shows nothing more.
        self.broken_pipe = False

    @property
    def saved(self) -> Path | None:
        r"""The checkpoint written (or resumed from) last."""
        return self._saved

    def _show(self, method: Callable[..., None], *args: Any) -> None:
        r"""Calls a method of the progress display; a broken pipe (``| head``)
        stops the run as a Ctrl-C does and silences the display."""
        try:
            method(*args)
        except BrokenPipeError:
            self.broken_pipe = True
            self.progress.quiet = True
            self.stop.request()

    # ------------------------------------------------------------- resuming
    def saved_settings(self) -> dict[str, Any] | None:
        r"""The settings of the checkpoint at :attr:`checkpoint` (``None``
        when there is none)."""
        if self.checkpoint is None or not self.checkpoint.is_file():
            return None
        return plain_settings(_upgrade(load_checkpoint(self.checkpoint).get("run", {}))
                              .get("config", {}))

    def resume(self, *, match: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None,
               strict: bool = True) -> bool:
        r"""Continues from the checkpoint at :attr:`checkpoint`, if there is
        one: the simulator's state, the timings of the earlier parts and the
        state of the stateful callbacks. Returns whether it resumed.

        Args:
            match (callable, optional): ``fn(saved, mine) -> bool`` on the
                plain settings; the default asks for equal settings.
            strict (bool, optional): a checkpoint of other settings is a
                :class:`ValueError`; otherwise it is ignored (and the run
                starts from round 1) (default: :obj:`True`).
        """
        if self.checkpoint is None:
            return False
        remove_partial_writes(self.checkpoint)
        if not self.checkpoint.is_file():
            return False
        state = load_checkpoint(self.checkpoint)
        if "run" not in state:
            raise ValueError(f"{self.checkpoint} holds no run settings; it was not written by "
                             f"a pyg-fedgraph runner")
        run = _upgrade(state["run"])
        saved = plain_settings(run.get("config", {}))
        same = match(saved, self.settings) if match is not None else saved == self.settings
        if not same:
            if strict:
                raise ValueError(f"{self.checkpoint} belongs to a run with other settings")
            log.info("ignoring %s: it belongs to a run with other settings", self.checkpoint)
            return False
        if self.sim.rounds < int(state["round"]):
            raise ValueError(f"rounds={self.sim.rounds} is below round {int(state['round'])}, "
                             f"which the run in {self.checkpoint.parent} has already reached")
        missing = [n for n in run["callbacks"] if n not in self.callbacks]
        stateful = [n for n, cb in self.callbacks.items() if isinstance(cb, StatefulCallback)]
        if missing or any(n not in run["callbacks"] for n in stateful):
            if strict:
                raise ValueError(f"{self.checkpoint} holds the state of callbacks "
                                 f"{sorted(run['callbacks'])}, this run has {sorted(stateful)}")
            return False
        self.sim.load_state_dict(state)
        for name_, cb_state in run["callbacks"].items():
            cb = self.callbacks[name_]
            if isinstance(cb, StatefulCallback):
                cb.load_state_dict(cb_state)
        self.seconds_before = float(run.get("seconds", 0.0))
        self.cpu_seconds_before = float(run.get("cpu_seconds", 0.0))
        self.load_start = float(run.get("load_start", self.load_start))
        self._saved = self.checkpoint
        return True

    # ------------------------------------------------------------- running
    def _save(self, seconds: float, cpu_seconds: float) -> Path | None:
        if self.checkpoint is None:
            return None
        states = {n: cb.state_dict() for n, cb in self.callbacks.items()
                  if isinstance(cb, StatefulCallback)}
        self._saved = save_checkpoint(checkpoint_payload(
            self.sim, self.settings, seconds=seconds, cpu_seconds=cpu_seconds,
            checkpoint_every=self.checkpoint_every, load_start=self.load_start,
            callbacks=states), self.checkpoint)
        return self._saved

    def _due(self, last_save: float) -> bool:
        sim = self.sim
        if self.checkpoint is None or sim.round >= sim.rounds:
            return False
        if self.checkpoint_every and sim.round % self.checkpoint_every == 0:
            return True
        return (self.checkpoint_seconds is not None
                and time.perf_counter() - last_save >= self.checkpoint_seconds)

    def _hook(self, phase: str, done: int, total: int) -> None:
        self._show(self.progress.inner, phase, done, total)
        if self.stop.requested and self._abandonable:
            raise _RoundAbandoned

    def _round_evaluated(self, sim: Simulator, record: RoundRecord) -> None:
        r"""The first of a round's callbacks: from here on the round is not
        abandoned (its trackers have seen it)."""
        self._abandonable = False

    def run(self) -> RunResult:
        r"""Runs to the last round (or until stopped or pruned); returns how
        it ended. Trackers are closed with ``"finished"``, ``"stopped"`` (a
        stop request, a pruned trial) or ``"failed"`` (an exception, which
        propagates)."""
        sim = self.sim
        t0, cpu0 = time.perf_counter(), time.process_time()

        def seconds() -> tuple[float, float]:
            return (self.seconds_before + time.perf_counter() - t0,
                    self.cpu_seconds_before + time.process_time() - cpu0)

        status: RunStatus = "finished"
        last_save = time.perf_counter()
        last_round = 0.0
        handle = sim.trainer.register_step_hook(self._hook)
        self._show(self.progress.start, self.name, sim)
        try:
            while sim.round < sim.rounds:
                if self.stop.requested:
                    status = "stopped"
                    break
                snapshot = sim.state_dict() if last_round >= SNAPSHOT_SECONDS else None
                self._abandonable = snapshot is not None
                started = time.perf_counter()
                # The trackers and callbacks run inside the round, as the simulator's
                # own callbacks, where they see its evaluated models; once they begin,
                # the round is done and a stop request waits for its end.
                base, extra = len(sim.callbacks), (self._round_evaluated, *self.trackers,
                                                   *self.callbacks.values())
                sim.callbacks.extend(extra)
                try:
                    record = sim.step()
                except _RoundAbandoned:
                    assert snapshot is not None  # only then does the hook raise
                    sim.load_state_dict(snapshot)
                    status = "stopped"
                    break
                finally:
                    self._abandonable = False
                    del sim.callbacks[base:base + len(extra)]
                last_round = time.perf_counter() - started
                self._show(self.progress.end_round, sim, record)
                if record is not None:
                    if self.stop_when is not None and self.stop_when(sim, record):
                        status = "pruned"
                        break
                if self._due(last_save):
                    self._save(*seconds())
                    last_save = time.perf_counter()
            wall, cpu = seconds()
            if status != "pruned" and (status == "stopped" or sim.round >= sim.rounds):
                self._save(wall, cpu)
        except BaseException:
            for tracker in self.trackers:
                tracker.close("stopped" if self.stop.requested else "failed")
            raise
        finally:
            handle.remove()
            self._show(self.progress.close)
        for tracker in self.trackers:
            tracker.close("finished" if status == "finished" else "stopped")
        return RunResult(status, sim.round, sim.rounds, wall, cpu, self._saved, self.load_start)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.name}, round={self.sim.round}/"
                f"{self.sim.rounds}, checkpoint={self.checkpoint})")
