r"""Interrupted and resumed command-line runs: Ctrl-C, killed comparisons,
accumulated time, leftovers of killed writes, progress output."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pyg_fedgraph.cli import main
from pyg_fedgraph.simulation import Simulator
from pyg_fedgraph.simulation.checkpoint import load_checkpoint

FL60 = ["--dataset", "fl60", "--clients", "6", "--set", "data.samples_per_client=20",
        "--set", "steps=2"]
TIMING = ("seconds", "seconds_per_round")


def history(folder):
    r"""The rows of ``history.csv`` but for their timing."""
    with open(folder / "history.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(f)]


def comparison(path):
    rows = json.loads((path / "comparison.json").read_text())
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


@pytest.mark.parametrize("crash_in,crash_round", [("pfedgraph", 3), ("fedavg", 1)])
def test_a_killed_comparison_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, capsys,
                                                                  crash_in, crash_round):
    args = ["run", *FL60, "--strategy", "pfedgraph,fedavg", "--rounds", "4", "--quiet"]
    assert main(args + ["--out", str(tmp_path / "full")]) == 0

    real_step = Simulator.step

    def killed(self):
        if self.strategy.name == crash_in and self.round == crash_round:
            raise KeyboardInterrupt  # as a kill inside the round: nothing of it is saved
        return real_step(self)

    monkeypatch.setattr(Simulator, "step", killed)
    out = tmp_path / "killed"
    assert main(args + ["--out", str(out), "--checkpoint-every", "1"]) == 130
    monkeypatch.undo()
    assert not (out / "comparison.json").exists()
    if crash_in == "fedavg":  # the first strategy finished, the second has one round
        assert (out / "pfedgraph" / "summary.json").is_file()
    assert load_checkpoint(out / crash_in)["round"] == crash_round
    capsys.readouterr()

    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert f"{crash_in}: resuming at round {crash_round} of 4" in capsys.readouterr().err
    assert comparison(out) == comparison(tmp_path / "full")
    assert (out / "learning_curves.png").is_file()
    for name in ("pfedgraph", "fedavg"):
        assert history(out / name) == history(tmp_path / "full" / name)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["strategies"] == ["pfedgraph", "fedavg"]
    assert manifest["resumed"][0]["rounds"][crash_in] == crash_round


def test_seconds_accumulate_across_resumes_and_partial_writes_are_removed(tmp_path):
    out = tmp_path / "run"
    args = ["run", *FL60, "--strategy", "fedavg", "--quiet"]
    assert main(args + ["--rounds", "3", "--out", str(out)]) == 0
    first = json.loads((out / "summary.json").read_text())["seconds"]
    assert load_checkpoint(out)["run"]["seconds"] == pytest.approx(first, rel=0.5)
    leftover = out / ".checkpoint.pt.abc123.tmp"
    leftover.write_bytes(b"half a checkpoint")

    assert main(["run", "--resume", str(out), "--quiet"]) == 0  # already finished
    again = json.loads((out / "summary.json").read_text())["seconds"]
    assert again >= first  # not the ~0 s of the resumed part alone
    assert not leftover.exists()
    assert main(["run", "--resume", str(out), "--rounds", "5", "--quiet"]) == 0
    extended = json.loads((out / "summary.json").read_text())
    assert extended["rounds"] == 5 and extended["seconds"] > again


def test_progress_without_a_terminal_is_one_line_per_evaluated_round(tmp_path, capsys):
    assert main(["run", *FL60, "--strategy", "fedavg", "--rounds", "4", "--checkpoint-every",
                 "2", "--set", "eval_every=2", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("fedavg: round")]
    # The whole run's numbering, not restarted at each checkpoint.
    assert [line.split()[2] for line in lines] == ["2/4", "4/4"]


@pytest.mark.slow
def test_ctrl_c_stops_after_the_round_with_a_checkpoint_and_exit_130(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pyg_fedgraph.cli", "run", *FL60, "--strategy",
           "fedavg,pfedgraph", "--rounds", "100000", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 240
        for line in proc.stderr:  # rounds report one line each (stderr is a pipe)
            if line.startswith("fedavg: round 3/"):
                break
            assert time.monotonic() < deadline, "the run never reached round 3"
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, rest
    assert "Traceback" not in rest
    stopped = [line for line in rest.splitlines() if "stopped after round" in line]
    assert len(stopped) == 1
    assert f"continue with: pyg-fedgraph run --resume {out}" in stopped[0]
    state = load_checkpoint(out / "fedavg")
    reached = int(state["round"])
    assert reached >= 3 and f"stopped after round {reached} of 100000" in stopped[0]
    # The checkpoint is usable: the comparison finishes from it.
    assert main(["run", "--resume", str(out), "--rounds", str(reached + 1), "--quiet"]) == 0
    assert len(json.loads((out / "comparison.json").read_text())) == 2
    assert load_checkpoint(out / "fedavg")["round"] == reached + 1


@pytest.mark.slow
def test_a_closed_output_pipe_stops_the_run_like_ctrl_c(tmp_path):
    # `pyg-fedgraph run ... 2>&1 | head -1`: standard output and error share one pipe, whose
    # reader leaves after the first line. The run stops as a Ctrl-C stops it: exit 130, a
    # checkpoint of its last finished round (before the 50th), the history of those rounds.
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pyg_fedgraph.cli", "run", *FL60, "--strategy", "fedavg",
           "--rounds", "50", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert first.startswith(b"FederatedDataset(fl60")
    assert code == 130
    reached = int(load_checkpoint(out)["round"])
    assert 1 <= reached < 50
    assert [int(row["round"]) for row in history(out)] == list(range(1, reached + 1))


def _start(out, steps):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pyg_fedgraph.cli", "run", "--dataset", "fl60", "--clients", "6",
           "--set", "data.samples_per_client=20", "--set", f"steps={steps}", "--strategy",
           "fedavg", "--rounds", "5", "--out", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


@pytest.mark.slow
def test_ctrl_c_in_a_long_round_stops_at_its_next_local_step(tmp_path):
    # Rounds of thousands of local steps: the first Ctrl-C in round 2 abandons it between
    # two steps and goes back to the end of round 1 (checkpoint, history of that round),
    # instead of finishing the round first.
    out = tmp_path / "run"
    proc = _start(out, 20000)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("fedavg: round 1/5"):
                break
        time.sleep(1.0)  # well inside round 2
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, rest
    assert "stopped after round 1 of 5" in rest and "Traceback" not in rest
    assert int(load_checkpoint(out)["round"]) == 1
    assert [row["round"] for row in history(out)] == ["1"]


@pytest.mark.slow
def test_a_second_ctrl_c_aborts_at_once(tmp_path):
    # The first Ctrl-C comes in round 1, which cannot be abandoned (no earlier round to go
    # back to): the run would finish the round. The second ends the process at once.
    proc = _start(tmp_path / "run", 200000)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()  # the data set is built: training starts
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        for line in proc.stderr:
            if "stopping after this round" in line:
                break
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == -signal.SIGINT
