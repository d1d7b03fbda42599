import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from pyg_fedgraph.cli import main, parse_distribution
from pyg_fedgraph.experiment import ExperimentConfig
from pyg_fedgraph.strategies import STRATEGIES, build_strategy, strategy_kwargs
from pyg_fedgraph.strategies.fedavg import Local
from pyg_fedgraph.train import LocalConfig
from pyg_fedgraph.tune import (
    TuneObjective,
    create_study,
    make_pruner,
    suggest_overrides,
    tune,
    write_study,
)

# Tiny runs: FL-60 restricted to 6 clients, one local epoch.
TINY = dict(dataset="fl60", clients=6, overrides={"epochs": 1})
LOCAL_KEYS = set(LocalConfig.__dataclass_fields__)


class ForgetAfterFirstRound(Local):
    r"""Local training, but from round 2 on every client is evaluated with the
    random initial model: validation peaks at round 1 and the last round's
    test metric differs from the one at the best validation round."""

    def __init__(self) -> None:
        super().__init__()
        self.last_round = 0

    def aggregate_train(self, rnd, graph):
        self.last_round = rnd

    def personalized_params(self, clients):
        if self.last_round <= 1:
            return None
        return self.ctx.init_params.expand(clients.numel(), -1).clone()

class AlwaysPrune(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        return True

def test_test_metric_is_taken_at_the_best_validation_round(monkeypatch):
    monkeypatch.setitem(STRATEGIES, "forget", ForgetAfterFirstRound)
    runs = []
    objective = TuneObjective(ExperimentConfig(strategy="forget", rounds=3, **TINY),
                              callbacks=(lambda sim, record: runs.append(sim),))
    study = optuna.create_study(direction=objective.direction, pruner=optuna.pruners.NopPruner(),
                                sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(objective, n_trials=1)

    history = runs[-1].history
    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert len(history) == 3 and history.best_round == 1
    # The objective is the best mean validation metric, the test one a user attribute.
    assert trial.value == pytest.approx(max(history.mean("val")))
    assert trial.user_attrs["test_at_best_val"] == pytest.approx(history.test_at_best())
    assert trial.user_attrs["test_at_best_val"] == pytest.approx(history.mean("test")[0])
    assert trial.user_attrs["best_round"] == 1
    assert trial.user_attrs["test_final"] == pytest.approx(history.mean("test")[-1])
    assert trial.user_attrs["test_at_best_val"] != pytest.approx(trial.user_attrs["test_final"])
    # Every evaluated round was reported, under its round number.
    assert trial.intermediate_values == pytest.approx(dict(zip([1, 2, 3],
                                                               history.mean("val"), strict=True)))
    # The lr tuned by Local's space reached the run.
    assert set(trial.params) == {"lr"}
    assert trial.user_attrs["overrides"] == {"lr": trial.params["lr"], "epochs": 1}


def test_pruned_trial_stops_at_the_first_report_and_keeps_its_attributes():
    objective = TuneObjective(ExperimentConfig(strategy="fedavg", rounds=3, **TINY))
    study = optuna.create_study(direction="maximize", pruner=AlwaysPrune(),
                                sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(objective, n_trials=1)
    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert list(trial.intermediate_values) == [1]
    assert trial.user_attrs["rounds_run"] == 1 and trial.user_attrs["best_round"] == 1
    assert 0.0 <= trial.user_attrs["test_at_best_val"] <= 1.0


def test_sqlite_study_resumes_and_refuses_other_settings(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    cfg = ExperimentConfig(strategy="fedprox", rounds=1, **TINY)
    study = tune(cfg, 1, storage=storage, pruner="median",
                 sampler=optuna.samplers.TPESampler(seed=0))
    assert len(study.trials) == 1
    assert study.study_name == "fedprox-fl60"
    assert study.user_attrs["settings"]["rounds"] == 1
    # A second call (a new process would do the same) adds trials to the stored study.
    again = tune(cfg, 1, storage=storage, pruner="median",
                 sampler=optuna.samplers.TPESampler(seed=1))
    assert [t.number for t in again.trials] == [0, 1]
    assert optuna.load_study(study_name="fedprox-fl60", storage=storage).trials[0].params \
        == study.trials[0].params
    assert all(set(t.params) == {"mu"} for t in again.trials)
    with pytest.raises(ValueError, match=r"other settings \(rounds: 1 -> 2\)"):
        tune(ExperimentConfig(strategy="fedprox", rounds=2, **TINY), 1, storage=storage)


def test_settings_added_later_count_as_their_default():
    storage = optuna.storages.InMemoryStorage()
    cfg = ExperimentConfig(strategy="fedprox", rounds=1, **TINY)
    study = create_study(cfg, storage=storage)
    old = {k: v for k, v in study.user_attrs["settings"].items() if k != "novel_clients"}
    study.set_user_attr("settings", old)  # as stored before novel_clients existed
    assert create_study(cfg, storage=storage).study_name == "fedprox-fl60"
    with pytest.raises(ValueError, match=r"novel_clients: 0\.0 -> 0\.2"):
        create_study(ExperimentConfig(strategy="fedprox", rounds=1, novel_clients=0.2, **TINY),
                     storage=storage)

def test_make_pruner():
    assert isinstance(make_pruner("median", 5), optuna.pruners.MedianPruner)
    assert isinstance(make_pruner("hyperband", 5), optuna.pruners.HyperbandPruner)
    assert isinstance(make_pruner("none", 5), optuna.pruners.NopPruner)
    with pytest.raises(ValueError, match="unknown pruner 'nope'"):
        make_pruner("nope", 5)


def test_suggest_overrides_fixed_user_and_local_parameters():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    out = suggest_overrides(trial, "fedprox", fixed={"lr": 0.02, "epochs": 1},
                            params={"mu": FloatDistribution(0.5, 0.6),
                                    "momentum": CategoricalDistribution([0.0, 0.9])},
                            tune_local=True)
    # lr is fixed, so it is neither sampled nor returned; mu comes from the user's range.
    assert set(out) == {"mu", "momentum"} == set(trial.params)
    assert 0.5 <= out["mu"] <= 0.6 and out["momentum"] in (0.0, 0.9)

    # A study keeps one distribution per name: a fresh one.
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    out = suggest_overrides(trial, "fedprox", tune_local=True)
    assert set(out) == {"mu", "lr"} and 1e-3 <= out["lr"] <= 1e-1

    out = suggest_overrides(study.ask(), "fedavg", space=lambda t: {
        "model.hidden_channels": t.suggest_categorical("model.hidden_channels", [4, 8])})
    assert set(out) == {"model.hidden_channels"}

    with pytest.raises(ValueError, match=r"\['mu'\] are both fixed"):
        suggest_overrides(study.ask(), "fedprox", fixed={"mu": 0.1},
                          params={"mu": FloatDistribution(0.5, 0.6)})
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        suggest_overrides(study.ask(), "nope")


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_search_space_builds_its_strategy(name):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    known = strategy_kwargs(name)
    for _ in range(3):
        trial = study.ask()
        out = suggest_overrides(trial, name, tune_local=True)
        # Each key is sampled under its own name and routed like --set.
        assert set(out) == set(trial.params)
        assert "lr" in out
        assert all(k in known or k in LOCAL_KEYS for k in out), out
        build_strategy(name, **{k: v for k, v in out.items() if k in known})

def test_paper_grids_of_two_strategies():
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    out = STRATEGIES["fedcedar"].search_space(trial)
    assert set(out) == {"num_clusters", "num_steps"}
    assert out["num_clusters"] in range(3, 8) and out["num_steps"] in range(1, 6)
    assert trial.distributions["num_clusters"] == IntDistribution(3, 7)
    # Baselines without server hyper-parameters tune the local learning rate.
    assert set(STRATEGIES["fedavg-ft"].search_space(optuna.create_study(
        sampler=optuna.samplers.RandomSampler(seed=0)).ask())) == {"lr"}


def test_parse_distribution():
    assert parse_distribution("0.5:2") == FloatDistribution(0.5, 2.0)
    assert parse_distribution("1e-3:1e-1:log") == FloatDistribution(1e-3, 1e-1, log=True)
    assert parse_distribution("3:7") == IntDistribution(3, 7)
    assert parse_distribution("2:8:2") == IntDistribution(2, 8, step=2)
    assert parse_distribution("0:1:0.25") == FloatDistribution(0.0, 1.0, step=0.25)
    assert parse_distribution('[1, 2, "a"]') == CategoricalDistribution((1, 2, "a"))
    with pytest.raises(ValueError, match="expected LOW:HIGH"):
        parse_distribution("0.5")
    with pytest.raises(ValueError, match="low 2 exceeds high 1"):
        parse_distribution("2:1")
    with pytest.raises(ValueError, match="a log scale needs low > 0"):
        parse_distribution("0:1:log")
    with pytest.raises(ValueError, match="'log' or a positive step"):
        parse_distribution("0:1:lin")


def test_write_study_of_an_empty_study(tmp_path):
    study = create_study(ExperimentConfig(strategy="fedavg", **TINY), rounds=1)
    written = write_study(study, tmp_path)
    assert set(written) == {"best", "trials"}
    best = json.loads((tmp_path / "best.json").read_text())
    assert "best_trial" not in best and best["trials"] == {}

def test_cli_tune_writes_best_json_and_plots_and_resumes(tmp_path, capsys):
    db = tmp_path / "db" / "study.db"
    args = ["tune", "--dataset", "fl60", "--clients", "6", "--strategy", "fedprox",
            "--rounds", "1", "--storage", f"sqlite:///{db}", "--study-name", "s",
            "--out", str(tmp_path / "out"), "--set", "epochs=1", "--param", "mu=0.001:1:log",
            "--quiet", "--sampler-seed", "0"]
    assert main(args + ["--n-trials", "2"]) == 0
    out = capsys.readouterr().out
    assert "best trial #" in out and "  mu = " in out and "pyg-fedgraph run" in out
    best = json.loads((tmp_path / "out" / "best.json").read_text())
    assert best["trials"] == {"complete": 2}
    assert best["metric"] == "accuracy" and best["direction"] == "maximize"
    assert set(best["best_params"]) == {"mu"}
    assert best["overrides"] == {"mu": best["best_params"]["mu"], "epochs": 1}
    assert 0.0 <= best["test_at_best_val"] <= 1.0 and best["best_round"] == 1
    for name in ("optimization_history", "param_importances", "intermediate_values"):
        assert (tmp_path / "out" / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name

    assert main(args + ["--n-trials", "1"]) == 0
    best = json.loads((tmp_path / "out" / "best.json").read_text())
    assert sum(best["trials"].values()) == 3


def test_cli_tune_bad_param_exits_2(tmp_path, capsys):
    code = main(["tune", "--dataset", "fl60", "--strategy", "fedprox", "--n-trials", "1",
                 "--storage", f"sqlite:///{tmp_path / 's.db'}", "--param", "mu=1:0"])
    assert code == 2
    assert "low 1 exceeds high 0" in capsys.readouterr().err


def test_a_study_of_the_old_fedamp_is_refused_with_one_line():
    # Studies record the strategy's state format version; one stored before the
    # version existed (no key) under "fedamp" was a study of the heuristic FedAMP.
    storage = optuna.storages.InMemoryStorage()
    cfg = ExperimentConfig(strategy="fedamp", rounds=1, **TINY)
    study = create_study(cfg, storage=storage)
    assert study.user_attrs["settings"]["strategy_version"] == 2
    old = {k: v for k, v in study.user_attrs["settings"].items() if k != "strategy_version"}
    study.set_user_attr("settings", old)
    with pytest.raises(ValueError) as err:
        create_study(cfg, storage=storage)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("study 'fedamp-fl60': this 'fedamp' study was made by "
                                     "the heuristic FedAMP")
    assert "'heurfedamp'" in str(err.value)
    # Strategies whose format never changed read old studies as before.
    heur = ExperimentConfig(strategy="heurfedamp", rounds=1, **TINY)
    study = create_study(heur, storage=storage)
    study.set_user_attr("settings", {k: v for k, v in study.user_attrs["settings"].items()
                                     if k != "strategy_version"})
    assert create_study(heur, storage=storage).study_name == "heurfedamp-fl60"


def test_tune_logs_a_line_per_trial_only_without_a_bar():
    from pyg_fedgraph.cli.tune import optuna_verbosity
    log = optuna.logging
    # Default level: a terminal's bar, or --quiet, leave warnings only; a log file
    # (no bar) gets Optuna's line per trial.
    assert optuna_verbosity("WARNING", quiet=False, bar=True) == log.WARNING
    assert optuna_verbosity("WARNING", quiet=True, bar=False) == log.WARNING
    assert optuna_verbosity("WARNING", quiet=False, bar=False) == log.INFO
    # An explicit --log-level wins either way.
    assert optuna_verbosity("error", quiet=False, bar=False) == log.ERROR
    assert optuna_verbosity("INFO", quiet=True, bar=True) == log.INFO
    assert optuna_verbosity("DEBUG", quiet=False, bar=True) == log.DEBUG


def test_cli_tune_without_a_terminal_draws_no_bar(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    args = ["tune", "--dataset", "fl60", "--clients", "6", "--strategy", "fedprox",
            "--rounds", "1", "--storage", f"sqlite:///{tmp_path / 's.db'}", "--n-trials", "1",
            "--out", str(tmp_path / "out"), "--set", "epochs=1"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "it/s" not in err  # no progress bar in a log
    assert optuna.logging.get_verbosity() == optuna.logging.INFO  # its line per trial instead
