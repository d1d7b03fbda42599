"""The reproduction's cached runs (benchmarks/_runs.py) survive interruption:
a run stopped mid-way resumes from its per-round checkpoint and ends with the
history and summary of an uninterrupted run."""
from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path

import pytest

from pyg_fedgraph.experiment import ExperimentConfig

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def runs(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    module = importlib.import_module("_runs")
    monkeypatch.setattr(module, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(module, "USED", {})
    yield module
    sys.modules.pop("_runs", None)


class Interrupted(Exception):
    pass


def _configs():
    cfg = ExperimentConfig(dataset="digits", strategy="fedavg", clients=3, rounds=4,
                           partition="pathological", overrides={"steps": 3})
    twin = dataclasses.replace(cfg, strategy="fedavg-ft",
                               overrides={**cfg.overrides, "finetune_from": "local"})
    return cfg, twin


def _same(a: dict, b: dict) -> None:
    assert a["val"] == b["val"] and a["test"] == b["test"]
    assert a["summary"] == b["summary"]


def test_interrupted_run_resumes_to_the_uninterrupted_history(runs, tmp_path, monkeypatch):
    cfg, twin = _configs()
    whole = runs.cached_run(cfg, local_models_as=twin, log=lambda *a, **k: None)
    whole_twin = runs.load_cached(twin)
    assert len(whole["test"]) == 4 and whole_twin is not None
    assert not runs.checkpoint_file(cfg).exists()  # removed once the entry is stored

    monkeypatch.setattr(runs, "CACHE", tmp_path / "second")

    def stop_in_round_3(msg, **_):
        if msg.startswith("  round 3:"):
            raise Interrupted
    with pytest.raises(Interrupted):
        runs.cached_run(cfg, local_models_as=twin, log=stop_in_round_3)
    assert runs.load_cached(cfg) is None
    assert runs.checkpoint_round(cfg) == 2
    # A checkpoint is only taken up by its own configuration.
    assert runs.checkpoint_round(dataclasses.replace(cfg, seed=1)) is None

    lines: list[str] = []
    resumed = runs.cached_run(cfg, local_models_as=twin, log=lambda m, **_: lines.append(m))
    assert any(m.startswith("  resuming fedavg at round 2 of 4") for m in lines)
    assert [m.split(":")[0] for m in lines if m.startswith("  round")] == ["  round 3",
                                                                          "  round 4"]
    _same(resumed, whole)
    _same(runs.load_cached(twin), whole_twin)
    assert not runs.checkpoint_file(cfg).exists()
