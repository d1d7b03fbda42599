r"""Experiment tracking: what TensorBoard's and MLflow's own readers get back
equals the run's history; resumed runs log each round once; missing extras
are one clear line."""
import math
import sqlite3
import time

import matplotlib
import numpy as np
import pytest
import torch

from pyg_fedgraph import tracking
from pyg_fedgraph.cli import main
from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
from pyg_fedgraph.tracking import (
    TRACKERS,
    MLflowTracker,
    TensorBoardTracker,
    Tracker,
    build_tracker,
    matrix_image,
    round_scalars,
)

# FL-60 with 6 clients of 20 samples: pfedgraph has a collaboration matrix.
CFG = ExperimentConfig(dataset="fl60", strategy="pfedgraph", rounds=5, clients=6,
                       overrides={"data.samples_per_client": 20, "steps": 2, "eval_every": 2})
CLI = ["--dataset", "fl60", "--clients", "6", "--set", "data.samples_per_client=20",
       "--set", "steps=2", "--rounds", "3", "--quiet"]


def _events(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    return acc


def _steps_values(acc, tag):
    return [e.step for e in acc.Scalars(tag)], [e.value for e in acc.Scalars(tag)]


def test_tracker_names_match_the_cli():
    from typing import get_args

    from pyg_fedgraph.typing import TrackerName

    assert get_args(TrackerName) == TRACKERS


# --------------------------------------------------------------- what is logged
def test_round_scalars_are_the_history_means():
    # Under an attack the means are over benign clients; novel clients have their own.
    cfg = ExperimentConfig(dataset="fl60", strategy="fedavg", rounds=2, clients=10,
                           novel_clients=0.2, attack="sign-flip", attack_ratio=0.25,
                           overrides={"data.samples_per_client": 20, "steps": 2})
    logged = []
    sim = build_simulator(cfg,
                          callbacks=[lambda s, r: logged.append(round_scalars(s, r))])
    sim.run()
    rows = sim.history.round_rows()
    assert len(logged) == len(rows) == 2
    for scalars, row, i in zip(logged, rows, range(2), strict=True):
        for key in ("val_accuracy", "test_accuracy", "val_loss", "test_loss"):
            split, metric = key.split("_")
            assert scalars[f"{split}/{metric}"] == pytest.approx(row[key], nan_ok=True)
        assert scalars["novel/test/accuracy"] == pytest.approx(
            sim.novel_history.mean("test")[i])
        assert scalars["train_loss"] == pytest.approx(row["train_loss"])
        assert scalars["num_rejected"] == row["num_rejected"]
    # The benign mean differs from the mean over all trained clients here.
    record = sim.history.records[-1]
    all_trained = record.test["accuracy"][sim.train_clients].mean()
    assert logged[-1]["test/accuracy"] != pytest.approx(float(all_trained))


def test_matrix_image_by_hand():
    viridis = matplotlib.colormaps["viridis"]
    w = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    img = matrix_image(w, min_size=1)
    assert img.shape == (2, 2, 3) and img.dtype == np.float32
    expected = np.array([[viridis(1.0), viridis(0.0)], [viridis(0.5), viridis(0.5)]])[..., :3]
    assert np.allclose(img, expected, atol=1e-6)
    # Small matrices grow by whole pixels; large ones shrink to block means.
    assert matrix_image(w, min_size=5).shape == (6, 6, 3)
    big = torch.zeros(4, 4)
    big[:2, :2] = 1.0        # block means: [[1, 0], [0, 0]]
    big[2:, 2:] = 0.5        # -> [[1, 0], [0, 0.5]]
    shrunk = matrix_image(big, max_size=2, min_size=1)
    assert np.allclose(shrunk, np.array([[viridis(1.0), viridis(0.0)],
                                         [viridis(0.0), viridis(0.5)]])[..., :3], atol=1e-6)
    with pytest.raises(ValueError, match=r"\(N, N\)"):
        matrix_image(torch.zeros(2, 3))


def test_bad_tracker_settings():
    with pytest.raises(ValueError, match="matrix_every"):
        Tracker(matrix_every=-1)
    with pytest.raises(ValueError, match="unknown tracker 'wandb'"):
        build_tracker("wandb", ".", run="r", experiment="e")


# ----------------------------------------------------------------- TensorBoard
def test_tensorboard_reads_back_one_scalar_per_evaluated_round(tmp_path):
    pytest.importorskip("tensorboard")
    tracker = TensorBoardTracker(tmp_path / "tb", hparams={"run": {"note": "x"}},
                                 matrix_every=4)
    sim = build_simulator(CFG, callbacks=[tracker])
    with tracker:
        sim.run()
    acc = _events(tmp_path / "tb")
    history = sim.history
    assert history.rounds == [2, 4, 5]
    for split in ("val", "test"):
        steps, values = _steps_values(acc, f"{split}/accuracy")
        assert steps == [2, 4, 5]
        assert values == pytest.approx(history.mean(split), abs=1e-6)
    # The matrix at the multiples of 4 and at the last round, with its self weight.
    images = acc.Images("collaboration/matrix")
    assert [im.step for im in images] == [4, 5]
    assert images[0].width == images[0].height >= 256
    steps, values = _steps_values(acc, "collaboration/self_weight")
    assert steps == [4, 5]
    assert values[-1] == pytest.approx(
        float(sim.strategy.collaboration_graph().diagonal().mean()), abs=1e-6)
    summary = sim.summary()
    assert _steps_values(acc, "summary/test") == ([5], [pytest.approx(summary["test"])])

    from tensorboard.plugins.hparams import plugin_data_pb2
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]).session_start_info.hparams
    assert start["strategy"].string_value == "pfedgraph"
    assert start["local.steps"].number_value == 2
    assert start["strategy.lam"].number_value == pytest.approx(sim.strategy.lam)
    assert start["strategy.normalized_aggregate"].number_value == 1  # True, as torch writes it
    assert start["strategy.alpha"].string_value == "None"  # the default, alpha = 0.08 N
    assert start["run.note"].string_value == "x"
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/experiment"]).experiment
    metrics = {m.name.tag for m in experiment.metric_infos}
    assert {"val/accuracy", "test/accuracy", "summary/test"} <= metrics

    with pytest.raises(RuntimeError, match="closed"):
        tracker(sim, history.records[-1])


def test_tensorboard_resumed_run_logs_each_round_once(tmp_path):
    pytest.importorskip("tensorboard")
    cfg = ExperimentConfig(dataset="fl60", strategy="fedavg", rounds=4, clients=6,
                           overrides={"data.samples_per_client": 20, "steps": 2})
    first = TensorBoardTracker(tmp_path)
    sim = build_simulator(cfg, callbacks=[first])
    sim.run(2)
    checkpoint = sim.state_dict()
    sim.run(3)               # round 3 logged, then the run is aborted before a checkpoint
    first.close("stopped")
    second = TensorBoardTracker(tmp_path)
    resumed = build_simulator(cfg, callbacks=[second])
    resumed.load_state_dict(checkpoint)
    resumed.run()
    second.close()
    steps, values = _steps_values(_events(tmp_path), "val/accuracy")
    assert steps == [1, 2, 3, 4]
    assert values == pytest.approx(resumed.history.mean("val"), abs=1e-6)


# ---------------------------------------------------------------------- MLflow
def _mlflow_runs(uri, experiment):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id], order_by=["attributes.start_time"])


# The SQLite store the CLI uses, and MLflow's plain-folder file store (``file:``).
@pytest.mark.parametrize("store", ["sqlite", "file"])
def test_mlflow_reads_back_one_metric_per_evaluated_round_and_resumes(tmp_path, store,
                                                                       monkeypatch):
    pytest.importorskip("mlflow")
    # MLflow 3 refuses its maintenance-mode file store unless asked for it.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (f"sqlite:///{tmp_path / 'mlflow.db'}" if store == "sqlite"
           else (tmp_path / "mlruns").as_uri())
    cfg = ExperimentConfig(dataset="fl60", strategy="pfedgraph", rounds=4, clients=6,
                           overrides={"data.samples_per_client": 20, "steps": 2})
    first = MLflowTracker(uri, experiment="exp", run_name="run-a",
                          artifact_location=(tmp_path / "art").as_uri(), tags={"who": "test"})
    sim = build_simulator(cfg, callbacks=[first])
    sim.run(2)
    first.close("stopped")
    client, runs = _mlflow_runs(uri, "exp")
    assert [r.info.status for r in runs] == ["KILLED"]

    # The resumed run continues the unfinished MLflow run of the same name.
    second = MLflowTracker(uri, experiment="exp", run_name="run-a")
    resumed = build_simulator(cfg, callbacks=[second])
    resumed.load_state_dict(sim.state_dict())
    resumed.run()
    second.close()
    client, runs = _mlflow_runs(uri, "exp")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name == "run-a"
    assert run.data.tags["who"] == "test"
    assert run.data.params["strategy"] == "pfedgraph"
    assert run.data.params["local.steps"] == "2"
    for split in ("val", "test"):
        history = client.get_metric_history(run.info.run_id, f"{split}/accuracy")
        assert [m.step for m in history] == [1, 2, 3, 4]
        assert [m.value for m in history] == pytest.approx(resumed.history.mean(split))
    assert run.data.metrics["summary/test"] == pytest.approx(resumed.summary()["test"])
    assert run.data.metrics["collaboration/self_weight"] == pytest.approx(
        float(resumed.strategy.collaboration_graph().diagonal().mean()))

    # A finished run is never continued: the same name starts a new run.
    third = MLflowTracker(uri, experiment="exp", run_name="run-a")
    again = build_simulator(cfg, callbacks=[third])
    again.run(1)
    third.close("failed")
    _, runs = _mlflow_runs(uri, "exp")
    assert [r.info.status for r in runs] == ["FINISHED", "FAILED"]
    assert "summary/test" not in runs[1].data.metrics  # a failed run has no summary
    assert not (tmp_path / "art").exists()  # no artifact is written


# ------------------------------------------------------------- missing extras
@pytest.mark.parametrize("name,flag", [("tensorboard", "WITH_TENSORBOARD"),
                                       ("mlflow", "WITH_MLFLOW")])
def test_missing_extra_is_one_line_before_any_work(name, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tracking, flag, False)
    with pytest.raises(ImportError, match=rf"pip install 'pyg-fedgraph\[{name}\]'"):
        build_tracker(name, tmp_path, run="r", experiment="e")
    out = tmp_path / "out"
    assert main(["run", *CLI, "--tracker", name, "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"pyg-fedgraph[{name}]" in err[0]
    assert not out.exists()
    assert main(["tune", "--strategy", "fedavg", "--n-trials", "1", "--storage",
                 f"sqlite:///{tmp_path / 'study.db'}", "--tracker", name, "--quiet"]) == 2
    assert f"pyg-fedgraph[{name}]" in capsys.readouterr().err
    assert not (tmp_path / "study.db").exists()


def test_unknown_tracker_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--tracker", "wandb"])
    assert exc.value.code == 2
    assert "invalid choice: 'wandb'" in capsys.readouterr().err


# ------------------------------------------------------------------ the CLI
def test_cli_run_logs_each_strategy_and_overwrite_replaces_the_logs(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    out = tmp_path / "out"
    args = ["run", *CLI, "--strategy", "fedavg,pfedgraph", "--tracker", "tensorboard",
            "--tracker", "mlflow", "--out", str(out)]
    assert main(args) == 0
    for name in ("fedavg", "pfedgraph"):
        steps, values = _steps_values(_events(out / name), "test/accuracy")
        rows = (out / name / "history.csv").read_text().splitlines()
        header = rows[0].split(",")
        column = [float(r.split(",")[header.index("test_accuracy")]) for r in rows[1:]]
        assert steps == [1, 2, 3] and values == pytest.approx(column, abs=1e-6)
    client, runs = _mlflow_runs(f"sqlite:///{out / 'mlflow.db'}", "out")
    assert sorted(r.info.run_name for r in runs) == ["fedavg", "pfedgraph"]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert {r.data.params["dataset"] for r in runs} == {"fl60"}

    with sqlite3.connect(out / "mlflow.db") as db:  # the store as a plain SQLite file
        assert db.execute("select count(*) from runs").fetchone() == (2,)

    # --overwrite removes the logs of the run it replaces (MLflow's store too).
    assert main([*args[:-4], "--out", str(out), "--overwrite"]) == 0
    assert len(list((out / "fedavg").glob("events.out.tfevents.*"))) == 1
    assert not (out / "mlflow.db").exists()


def test_cli_tune_logs_each_trial(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "tune"
    assert main(["tune", *CLI, "--strategy", "fedavg", "--n-trials", "2", "--pruner", "none",
                 "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--sampler-seed", "0",
                 "--tracker", "tensorboard", "--out", str(out)]) == 0
    for trial in (0, 1):
        acc = _events(out / f"trial-{trial}")
        assert [e.step for e in acc.Scalars("val/accuracy")] == [1, 2, 3]
        best = acc.Scalars("summary/val_best")[0].value
        assert best == pytest.approx(max(e.value for e in acc.Scalars("val/accuracy")))
        assert not math.isnan(best)


def test_trial_callbacks_are_closed_with_the_trials_outcome():
    pytest.importorskip("optuna")
    import optuna

    from pyg_fedgraph.tune import tune

    closed = []

    class Recorder:
        def __init__(self, number):
            self.number, self.rounds = number, []

        def __call__(self, sim, record):
            self.rounds.append(record.round)

        def close(self, status):
            closed.append((self.number, status, self.rounds))

    cfg = ExperimentConfig(dataset="fl60", strategy="fedavg", rounds=2, clients=6,
                           overrides={"data.samples_per_client": 20, "steps": 2})
    tune(cfg, 2, storage=None, pruner="none", sampler=optuna.samplers.TPESampler(seed=0),
         trial_callbacks=lambda trial: [Recorder(trial.number)])
    assert closed == [(0, "finished", [1, 2]), (1, "finished", [1, 2])]

    # A pruned trial is closed as stopped after the round that pruned it.
    class PruneAt2(optuna.pruners.BasePruner):
        def prune(self, study, trial):
            return trial.last_step == 2

    closed.clear()
    tune(cfg, 1, storage=None, pruner=PruneAt2(), sampler=optuna.samplers.TPESampler(seed=0),
         trial_callbacks=lambda trial: [Recorder(trial.number)])
    assert closed == [(0, "stopped", [1, 2])]


def test_cli_resume_keeps_the_runs_trackers(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    out = tmp_path / "out"
    assert main(["run", *CLI[:-3], "--rounds", "2", "--quiet", "--strategy", "fedavg",
                 "--tracker", "tensorboard", "--out", str(out)]) == 0
    # The manifest remembers the tracker; --tracker itself is not accepted with --resume.
    assert main(["run", "--resume", str(out), "--tracker", "mlflow"]) == 2
    assert "--tracker cannot be given" in capsys.readouterr().err
    # TensorBoard reads event files in name order, and the name holds the second it
    # was opened: a resume within the same second as the first run could sort first.
    time.sleep(1.1)
    assert main(["run", "--resume", str(out), "--rounds", "3", "--quiet"]) == 0
    steps, _ = _steps_values(_events(out / "fedavg"), "val/accuracy")
    assert steps == [1, 2, 3]
