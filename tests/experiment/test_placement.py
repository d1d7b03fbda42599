r"""``placement``: torch's threads of a command-line run (one on the CPU unless
asked), restored afterwards; the settings keep what the user gave."""
import pytest
import torch
import yaml

from pyg_fedgraph.cli import main
from pyg_fedgraph.experiment import ExperimentConfig
from pyg_fedgraph.experiment.comparison import placement


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # torch's choice on a 2-core machine
    yield
    torch.set_num_threads(before)


def threads_inside(cfg: ExperimentConfig) -> int:
    with placement(cfg, deterministic=False):
        inside = torch.get_num_threads()
    assert torch.get_num_threads() == 2  # restored
    return inside


def test_a_cpu_run_that_did_not_ask_gets_one_thread(two_threads, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_inside(ExperimentConfig(dataset="fl60", device="cpu")) == 1


def test_threads_that_were_asked_for_are_kept(two_threads, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_inside(ExperimentConfig(dataset="fl60", device="cpu", threads=3)) == 3
    # OMP_NUM_THREADS asks too: torch's choice (which follows it) stays.
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads_inside(ExperimentConfig(dataset="fl60", device="cpu")) == 2


@pytest.mark.slow  # a whole run: about 7 s
def test_the_run_records_the_threads_it_used_and_keeps_the_setting(two_threads, monkeypatch,
                                                                   tmp_path):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    out = tmp_path / "run"
    assert main(["run", "--dataset", "fl60", "--clients", "6", "--rounds", "1", "--strategy",
                 "fedavg", "--set", "data.samples_per_client=20", "--set", "steps=1",
                 "--device", "cpu", "--quiet", "--out", str(out)]) == 0
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["threads"] is None  # the setting as given: the run's key does not change
    assert saved["provenance"]["threads"] == 1
    assert torch.get_num_threads() == 2
