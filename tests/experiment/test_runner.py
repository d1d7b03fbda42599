"""The runner: the one loop with checkpoints, stopping, resuming, progress and trackers."""
from __future__ import annotations

import io
import sys
import types

import pytest
import torch

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
from pyg_fedgraph.experiment import runner as runner_module
from pyg_fedgraph.experiment.runner import (
    CHECKPOINT_FORMAT,
    RoundProgress,
    Runner,
    StopSignal,
    checkpoint_payload,
)
from pyg_fedgraph.simulation.checkpoint import load_checkpoint


def make(rounds: int = 4, strategy: str = "fedavg", seed: int = 0, **over):
    cfg = ExperimentConfig(dataset="digits", strategy=strategy, clients=3, rounds=rounds,
                           partition="pathological", seed=seed,
                           overrides={"steps": 3, "model.hidden_channels": 8, **over})
    return cfg, build_simulator(cfg)


def same_run(a, b) -> None:
    assert a.history.mean("val") == b.history.mean("val")
    assert a.history.mean("test") == b.history.mean("test")
    assert torch.equal(a.local_params, b.local_params)


class StopAfter:
    r"""A round callback that asks the runner to stop after round ``rnd``."""

    def __init__(self, stop: StopSignal, rnd: int) -> None:
        self.stop, self.rnd = stop, rnd

    def __call__(self, sim, record) -> None:
        if record.round == self.rnd:
            self.stop.request()


class Counter:
    r"""A stateful callback: counts the rounds it saw (kept by checkpoints)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, sim, record) -> None:
        self.count += 1

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


class Tracker:
    def __init__(self) -> None:
        self.rounds: list[int] = []
        self.status: str | None = None

    def __call__(self, sim, record) -> None:
        self.rounds.append(record.round)

    def close(self, status: str = "finished") -> None:
        self.status = status


def test_runner_equals_the_plain_loop_and_checkpoints_the_end(tmp_path):
    _, plain = make()
    plain.run()
    cfg, sim = make()
    tracker = Tracker()
    result = Runner(sim, checkpoint=tmp_path / "ckpt.pt", settings=cfg.to_dict(),
                    trackers=[tracker]).run()
    same_run(sim, plain)
    assert (result.status, result.round, result.rounds) == ("finished", 4, 4)
    assert tracker.rounds == [1, 2, 3, 4] and tracker.status == "finished"
    state = load_checkpoint(result.checkpoint)
    assert int(state["round"]) == 4
    run = state["run"]
    assert run["format"] == CHECKPOINT_FORMAT and run["config"] == \
        runner_module.plain_settings(cfg.to_dict())
    assert run["seconds"] == pytest.approx(result.seconds)


def test_stopped_run_resumes_to_the_uninterrupted_one(tmp_path):
    cfg, whole = make()
    whole.run()
    _, first = make()
    stop = StopSignal()
    counter = Counter()
    result = Runner(first, checkpoint=tmp_path / "c.pt", settings=cfg.to_dict(), stop=stop,
                    callbacks={"stop": StopAfter(stop, 2), "count": counter}).run()
    assert (result.status, result.round) == ("stopped", 2)
    assert int(load_checkpoint(tmp_path / "c.pt")["round"]) == 2
    # A new process: rebuild, resume, finish.
    _, second = make()
    counter = Counter()
    runner = Runner(second, checkpoint=tmp_path / "c.pt", settings=cfg.to_dict(),
                    callbacks={"stop": lambda s, r: None, "count": counter})
    assert runner.resume() and second.round == 2 and counter.count == 2
    assert runner.seconds_before == pytest.approx(result.seconds)
    assert runner.run().status == "finished"
    same_run(second, whole)
    assert counter.count == 4


def test_resume_checks_the_settings(tmp_path):
    cfg, sim = make(rounds=2)
    Runner(sim, checkpoint=tmp_path / "c.pt", settings=cfg.to_dict()).run()
    other, sim2 = make(rounds=2, seed=1)
    runner = Runner(sim2, checkpoint=tmp_path / "c.pt", settings=other.to_dict())
    with pytest.raises(ValueError, match="belongs to a run with other settings"):
        runner.resume()
    assert runner.resume(strict=False) is False and sim2.round == 0


def test_a_long_round_is_abandoned_between_local_steps(tmp_path, monkeypatch):
    # Every round counts as long: a stop request inside round 3 abandons it at the next
    # local step, and the run goes back to the end of round 2, checkpointed.
    monkeypatch.setattr(runner_module, "SNAPSHOT_SECONDS", 0.0)
    cfg, two = make(rounds=2)
    two.run()
    _, sim = make()
    stop = StopSignal()
    steps: list[int] = []

    def hook(phase, done, total):
        if phase == "train" and sim.round == 2:
            steps.append(done)
            if done == 1:
                stop.request()
    handle = sim.trainer.register_step_hook(hook)
    result = Runner(sim, checkpoint=tmp_path / "c.pt", settings=cfg.to_dict(), stop=stop).run()
    handle.remove()
    assert (result.status, result.round) == ("stopped", 2)
    assert steps == [0, 1]  # round 3 did not go on after the request
    same_run(sim, two)
    assert int(load_checkpoint(tmp_path / "c.pt")["round"]) == 2


def test_stop_when_prunes_without_a_checkpoint_and_closes_the_trackers(tmp_path):
    cfg, sim = make()
    tracker = Tracker()
    result = Runner(sim, checkpoint=tmp_path / "c.pt", settings=cfg.to_dict(),
                    trackers=[tracker], stop_when=lambda s, r: r.round == 2).run()
    assert (result.status, result.round) == ("pruned", 2)
    assert tracker.status == "stopped" and not (tmp_path / "c.pt").exists()


def test_a_failing_round_closes_the_trackers_as_failed(monkeypatch):
    _, sim = make()
    tracker = Tracker()

    def broken():
        raise RuntimeError("boom")
    monkeypatch.setattr(sim, "step", broken)
    with pytest.raises(RuntimeError, match="boom"):
        Runner(sim, trackers=[tracker]).run()
    assert tracker.status == "failed"


def test_progress_lines_per_round_and_inside_long_rounds():
    stream = io.StringIO()
    _, sim = make(rounds=2)
    Runner(sim, name="fedavg", progress=RoundProgress(terminal=False, interval=0.0,
                                                      stream=stream)).run()
    lines = stream.getvalue().splitlines()
    assert sum(line.startswith("fedavg: round 1/2  accuracy val") for line in lines) == 1
    assert any(line.startswith("fedavg: round 2/2: local step") for line in lines)
    assert any("evaluation batch" in line for line in lines)
    quiet = io.StringIO()
    _, sim = make(rounds=1)
    Runner(sim, progress=RoundProgress(quiet=True, stream=quiet)).run()
    assert quiet.getvalue() == ""


class BrokenPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError


def test_a_broken_pipe_stops_the_run_like_a_ctrl_c(tmp_path):
    cfg, sim = make()
    runner = Runner(sim, checkpoint=tmp_path / "c.pt", settings=cfg.to_dict(),
                    progress=RoundProgress(terminal=False, stream=BrokenPipe()))
    result = runner.run()
    assert runner.broken_pipe and result.status == "stopped" and result.round == 1
    assert int(load_checkpoint(tmp_path / "c.pt")["round"]) == 1


def test_payload_of_the_earlier_format_is_read(tmp_path):
    # Format 1 (before the runner): no format entry, the benchmarks' second history
    # under "second". It resumes with that history as the local_models callback's state.
    cfg, sim = make(rounds=2)
    sim.step()
    payload = checkpoint_payload(sim, cfg.to_dict(), seconds=3.0, cpu_seconds=2.0)
    run = payload["run"]
    payload["run"] = {"config": run["config"], "seconds": 3.0, "second": {"count": 5}}
    torch.save(payload, tmp_path / "old.pt")
    _, again = make(rounds=2)
    counter = Counter()
    runner = Runner(again, checkpoint=tmp_path / "old.pt", settings=cfg.to_dict(),
                    callbacks={"local_models": counter})
    assert runner.resume() and counter.count == 5 and runner.seconds_before == 3.0
    payload["run"]["format"] = 99
    torch.save(payload, tmp_path / "future.pt")
    with pytest.raises(ValueError, match="has format 99; this version of pyg_fedgraph reads"):
        Runner(again, checkpoint=tmp_path / "future.pt", settings=cfg.to_dict()).resume()


class _Stream:
    r"""Standard error as a terminal (``tty=True``) or as a log file."""

    def __init__(self, tty: bool) -> None:
        self.tty, self.text = tty, []

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> int:
        self.text.append(s)
        return len(s)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("tty,kernel", [(True, False), (False, False), (False, True)])
def test_progress_bar_only_on_a_terminal(tty, kernel, monkeypatch):
    # The runner's one display: a bar on standard error on a terminal; a log (CI, nohup)
    # gets lines, never carriage returns. A Jupyter kernel's stderr is no terminal, but
    # shows the bar (tqdm's text bar when ipywidgets is missing, as here).
    stream = _Stream(tty)
    monkeypatch.setattr("sys.stderr", stream)
    if kernel:
        monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    else:
        monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(runner_module, "is_terminal", lambda stream=None: tty)
    tty = tty or kernel
    _, sim = make(rounds=2)
    Runner(sim, progress=RoundProgress()).run()
    drawn = "".join(stream.text)
    assert ("fedavg:" in drawn and "0/2" in drawn) == tty, drawn
    assert ("\r" in drawn) == tty
