r"""The axes of a study's plots: integer trials and rounds, the trials' metric by name."""
import numpy as np
import pytest

optuna = pytest.importorskip("optuna")
import optuna.visualization.matplotlib as ovm  # noqa: E402 - after the optuna check

from pyg_fedgraph.tune import write_study  # noqa: E402


def _study(num_trials: int) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    dist = {"lam": optuna.distributions.FloatDistribution(1e-3, 1.0, log=True)}
    for t in range(num_trials):
        study.add_trial(optuna.trial.create_trial(
            params={"lam": 0.01 * (t + 1)}, distributions=dist, value=0.5 + 0.1 * t,
            intermediate_values={1: 0.3, 2: 0.5 + 0.1 * t}, user_attrs={"metric": "accuracy"}))
    return study


@pytest.mark.parametrize("num_trials", [1, 3])
def test_study_plots_have_integer_ticks_and_name_the_metric(num_trials, tmp_path, monkeypatch):
    axes = {}
    for name in ("plot_optimization_history", "plot_intermediate_values"):
        original = getattr(ovm, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            axes[_name] = ax = _original(*args, **kwargs)
            return ax
        monkeypatch.setattr(ovm, name, spy)
    write_study(_study(num_trials), tmp_path)
    history, rounds = axes["plot_optimization_history"], axes["plot_intermediate_values"]
    assert history.get_xlabel() == "trial"
    assert history.get_ylabel() == ("best validation accuracy\n"
                                    "(mean over clients, best round)")
    assert "Objective Value" not in [t.get_text() for t in history.get_legend().get_texts()]
    np.testing.assert_array_equal(history.get_xticks(), np.arange(num_trials))
    assert rounds.get_xlabel() == "round"
    assert rounds.get_ylabel() == "validation accuracy (mean over clients)"
    np.testing.assert_array_equal(rounds.get_xticks(), [1, 2])
