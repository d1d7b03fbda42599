import csv
import datetime
import io

import pytest
import torch
from robustness_helpers import tiny_simulator

from pyg_fedgraph.cli import main
from pyg_fedgraph.simulation import checkpoint as checkpoint_module
from pyg_fedgraph.simulation.checkpoint import (
    CHECKPOINT_NAME,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
)
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES

# The five strategies of the acceptance criterion; those not registered yet are skipped.
RESUMABLE = ["fedavg", "pfedgraph", "fedaghn", "pfedgat", "panacea"]


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def assert_same_run(a: Simulator, b: Simulator) -> None:
    assert a.round == b.round
    assert a.history == b.history  # train losses and per-client val/test metrics, exactly
    assert torch.equal(a.local_params, b.local_params)
    sa, sb = a.strategy.state_dict(), b.strategy.state_dict()
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(sb[key], value, rtol=0, atol=0, equal_nan=True, msg=key)


@pytest.mark.parametrize("name", RESUMABLE)
def test_resumed_run_equals_uninterrupted_run(name):
    if name not in STRATEGIES:
        pytest.skip(f"strategy {name!r} is not registered in pyg_fedgraph.strategies yet")
    full = tiny_simulator(name, rounds=10)
    full.run()

    first = tiny_simulator(name, rounds=10)
    first.run(5)
    state = roundtrip(first.state_dict())  # what a checkpoint file holds
    torch.manual_seed(12345)  # a fresh process has another global RNG state

    resumed = tiny_simulator(name, rounds=10)
    resumed.load_state_dict(state)
    assert resumed.round == 5 and len(resumed.history) == 5
    resumed.run()
    assert len(resumed.history) == 10
    assert_same_run(full, resumed)
    # The interrupted half did not change after its state was taken.
    first.run()
    assert_same_run(full, first)


def test_resume_under_attack_and_dropout():
    kwargs = {"rounds": 6, "attack": "gaussian", "attack_ratio": 0.4, "dropout": 0.5}
    full = tiny_simulator("fedavg", **kwargs)
    full.run()
    first = tiny_simulator("fedavg", **kwargs)
    first.run(3)
    resumed = tiny_simulator("fedavg", **kwargs)
    resumed.load_state_dict(roundtrip(first.state_dict()))
    resumed.run()
    assert_same_run(full, resumed)
    assert sum(r.extra["num_dropped"] for r in full.history.records) > 0


def test_state_dict_is_a_deep_copy():
    sim = tiny_simulator("fedavg", rounds=2)
    sim.run(1)
    state = sim.state_dict()
    before = state["local_params"].clone()
    strategy_before = state["strategy"]["global_params"].clone()
    sim.run()
    assert torch.equal(state["local_params"], before)
    assert torch.equal(state["strategy"]["global_params"], strategy_before)
    assert not torch.equal(sim.local_params.cpu(), before)


def test_state_dict_holds_the_global_rng_and_loads_weights_only():
    sim = tiny_simulator("fedavg", rounds=3)
    sim.run()
    state = roundtrip(sim.state_dict())
    assert state["round"] == 3
    # The other random streams are derived from (seed, purpose, round): no state.
    assert not any("generator" in key for key in state)
    assert torch.equal(state["torch_rng"], torch.get_rng_state())
    assert state["table"]["trained"].all()
    assert len(state["history"]["records"]) == 3
    assert state["local_params"].shape == (6, sim.layout.num_params)


def test_load_state_dict_rejects_another_run():
    state = tiny_simulator("fedavg", rounds=2).state_dict()
    with pytest.raises(ValueError, match="strategy_name='fedavg'"):
        tiny_simulator("local", rounds=2).load_state_dict(state)
    with pytest.raises(ValueError, match="num_clients=6"):
        tiny_simulator("fedavg", rounds=2, clients=5).load_state_dict(state)
    attacked = tiny_simulator("fedavg", rounds=2, attack="sign-flip", attack_ratio=0.4)
    with pytest.raises(ValueError, match="malicious clients"):
        attacked.load_state_dict(state)


# ------------------------------------------------------------- atomic writes
def test_save_and_load_checkpoint(tmp_path):
    state = {"round": 3, "x": torch.arange(4.0), "nested": {"a": [1, 2.5, "s", None]}}
    path = save_checkpoint(state, tmp_path / "run")
    assert path == tmp_path / "run" / CHECKPOINT_NAME
    loaded = load_checkpoint(tmp_path / "run")
    assert loaded["round"] == 3 and torch.equal(loaded["x"], state["x"])
    assert loaded["nested"] == {"a": [1, 2.5, "s", None]}
    assert checkpoint_path(path) == path
    # No temporary file is left behind.
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [CHECKPOINT_NAME]


@pytest.mark.parametrize("error", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_interrupted_write_keeps_previous_checkpoint(tmp_path, monkeypatch, error):
    good = {"round": 5, "x": torch.ones(1000)}
    save_checkpoint(good, tmp_path)
    real_save = torch.save

    def crash_midway(obj, f, *args, **kwargs):
        buf = io.BytesIO()
        real_save(obj, buf)
        data = buf.getvalue()
        f.write(data[: len(data) // 2])  # partial bytes reach the disk, then the crash
        f.flush()
        raise error

    monkeypatch.setattr(checkpoint_module.torch, "save", crash_midway)
    with pytest.raises(type(error)):
        save_checkpoint({"round": 6, "x": torch.zeros(1000)}, tmp_path)
    monkeypatch.undo()
    loaded = load_checkpoint(tmp_path)
    assert loaded["round"] == 5 and torch.equal(loaded["x"], good["x"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_NAME]


def test_killed_write_leaves_previous_checkpoint(tmp_path, monkeypatch):
    # A kill (no cleanup code runs) between the write and the rename: the
    # half-written temporary file stays, the checkpoint is the previous one.
    save_checkpoint({"round": 5}, tmp_path)

    def killed(*args, **kwargs):
        raise SystemExit(137)

    monkeypatch.setattr(checkpoint_module.os, "replace", killed)
    with pytest.raises(SystemExit):
        save_checkpoint({"round": 6}, tmp_path)
    monkeypatch.undo()
    assert load_checkpoint(tmp_path)["round"] == 5


def test_truncated_checkpoint_fails_clearly(tmp_path):
    save_checkpoint({"round": 1, "x": torch.ones(100)}, tmp_path)
    path = tmp_path / CHECKPOINT_NAME
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(ValueError, match="is not a pyg-fedgraph checkpoint"):
        load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing")


def test_checkpoint_rejects_arbitrary_pickles(tmp_path):
    # Any object outside tensors / containers / numbers / strings is refused.
    torch.save({"round": 1, "when": datetime.date(2024, 1, 1)}, tmp_path / CHECKPOINT_NAME)
    with pytest.raises(ValueError, match="is not a pyg-fedgraph checkpoint"):
        load_checkpoint(tmp_path)


# ----------------------------------------------------------------- the CLI
def history_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row.pop("seconds")
    return rows


def test_cli_crash_and_resume_reproduces_the_run(tmp_path, monkeypatch, capsys):
    args = ["run", "--dataset", "fl60", "--clients", "6", "--strategy", "fedavg",
            "--rounds", "6", "--quiet", "--set", "steps=2", "--set", "data.samples_per_client=20"]
    assert main(args + ["--out", str(tmp_path / "full")]) == 0

    real_step = Simulator.step

    def crash_after_round_4(self):
        if self.round == 4:
            raise KeyboardInterrupt  # the process is stopped during round 5
        return real_step(self)

    monkeypatch.setattr(Simulator, "step", crash_after_round_4)
    out = tmp_path / "crashed"
    # An interrupt inside a round (a second Ctrl-C) aborts at once: the round's
    # half-done state is not saved, the last periodic checkpoint is kept.
    assert main(args + ["--out", str(out), "--checkpoint-every", "2"]) == 130
    monkeypatch.undo()
    assert load_checkpoint(out)["round"] == 4
    assert not (out / "history.csv").exists()
    err = capsys.readouterr().err
    assert f"checkpoint of round 4 in {out} is kept" in err
    assert f"pyg-fedgraph run --resume {out}" in err and "Traceback" not in err

    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert "resuming" in capsys.readouterr().err  # with the per-round lines
    assert history_rows(out / "history.csv") == history_rows(tmp_path / "full" / "history.csv")
    assert load_checkpoint(out)["round"] == 6  # the final state is checkpointed too


def test_cli_resume_extends_a_finished_run(tmp_path):
    args = ["run", "--dataset", "fl60", "--clients", "6", "--strategy", "fedavg", "--quiet",
            "--set", "steps=2", "--set", "data.samples_per_client=20"]
    assert main(args + ["--rounds", "4", "--out", str(tmp_path / "full")]) == 0
    out = tmp_path / "extended"
    assert main(args + ["--rounds", "2", "--out", str(out), "--checkpoint-every", "2"]) == 0
    assert main(["run", "--resume", str(out), "--rounds", "4", "--quiet"]) == 0
    assert history_rows(out / "history.csv") == history_rows(tmp_path / "full" / "history.csv")


def test_cli_resume_without_checkpoint_exits_2(tmp_path, capsys):
    assert main(["run", "--resume", str(tmp_path), "--quiet"]) == 2
    assert f"no run to resume in {tmp_path}" in capsys.readouterr().err
