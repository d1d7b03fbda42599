r"""Reports of a study: ``best.json``, ``trials.csv`` and Optuna's plots."""
from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

__all__ = ["RunCommand", "study_summary", "write_study"]

log = logging.getLogger(__name__)

#: ``(settings, overrides) -> str``: how to reproduce a trial from the
#: command line (given by the CLI, which owns the flag syntax).
RunCommand = Callable[[Mapping[str, Any], Mapping[str, Any]], str]


def _trial_counts(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        key = t.state.name.lower()
        counts[key] = counts.get(key, 0) + 1
    return counts


def study_summary(study: optuna.Study, command: RunCommand | None = None) -> dict[str, Any]:
    r"""What ``best.json`` holds: the best trial (by validation), its
    parameters, its test metric at its best-validation round, the settings
    of the study, the trial counts by state, the parameter importances and,
    given ``command``, the command that reproduces the best trial."""
    import optuna

    settings = study.user_attrs.get("settings", {})
    out: dict[str, Any] = {"study_name": study.study_name,
                           "direction": study.direction.name.lower(),
                           "settings": settings, "trials": _trial_counts(study)}
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        return out
    best = study.best_trial
    attrs = best.user_attrs
    overrides = attrs.get("overrides", {**best.params, **settings.get("overrides", {})})
    out.update({
        "metric": attrs.get("metric"),
        "best_trial": best.number,
        "best_value": best.value,
        "best_params": best.params,
        "test_at_best_val": attrs.get("test_at_best_val"),
        "best_round": attrs.get("best_round"),
        "test_final": attrs.get("test_final"),
        "overrides": overrides,
    })
    if settings and command is not None:
        out["command"] = command(settings, overrides)
    if len(complete) > 1 and best.params:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out["importances"] = dict(optuna.importance.get_param_importances(study))
        except (ValueError, RuntimeError) as err:
            log.warning("parameter importances unavailable: %s", err)
    return out


def write_study(study: optuna.Study, out: str | Path, command: RunCommand | None = None
                ) -> dict[str, Path]:
    r"""Writes ``best.json`` (:func:`study_summary`), ``trials.csv`` and the
    optimization-history, intermediate-values and parameter-importance
    plots (Optuna's matplotlib visualization, with integer trial and round
    ticks and the trials' metric named on the axes) to ``out``; returns the
    paths written by name. A plot that Optuna cannot draw yet (no finished trial,
    a single trial for the importances) is skipped with a logged warning.
    Each file is written under a temporary name and then renamed, so workers
    of one study that finish together never leave a half-written file."""
    import optuna
    import optuna.visualization.matplotlib as ovm

    from pyg_fedgraph.simulation.report import write_csv
    from pyg_fedgraph.viz import _integer_ticks, _plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def commit(name: str, filename: str, write: Callable[[Path], object]) -> None:
        path = out / filename
        tmp = out / f".{filename}.{os.getpid()}.tmp"
        write(tmp)
        os.replace(tmp, path)
        written[name] = path

    summary = json.dumps(study_summary(study, command), indent=2, default=str)
    commit("best", "best.json", lambda p: p.write_text(summary))
    rows = [{"number": t.number, "state": t.state.name, "value": t.value,
             **{f"params_{k}": v for k, v in t.params.items()},
             **{f"user_attrs_{k}": v for k, v in t.user_attrs.items() if k != "overrides"}}
            for t in study.get_trials(deepcopy=False)]
    commit("trials", "trials.csv", lambda p: write_csv(p, rows))
    plt = _plt()
    finished = [t for t in study.get_trials(deepcopy=False)
                if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    # The objective is the best mean validation metric of a trial's rounds (TuneObjective);
    # the axes say so instead of Optuna's "Objective Value", "Intermediate Value", "Step".
    metric = next((t.user_attrs["metric"] for t in finished if "metric" in t.user_attrs),
                  None)
    value = "objective" if metric is None else f"validation {metric}"  # legends: short
    plots: dict[str, Callable[[optuna.Study], Any]] = {
        "optimization_history": lambda st: ovm.plot_optimization_history(st, target_name=value),
        "intermediate_values": ovm.plot_intermediate_values,
        "param_importances": lambda st: ovm.plot_param_importances(st, target_name=value)}
    steps = sorted({step for t in finished for step in t.intermediate_values})
    best = ("objective" if metric is None
            else f"best validation {metric}\n(mean over clients, best round)")
    labels = {"optimization_history": ("trial", best, [t.number for t in finished]),
              "intermediate_values": ("round", "validation "
                                      + (f"{metric} (mean over clients)" if metric else "value"),
                                      steps)}
    for name, plot in plots.items():
        # Optuna's plots switch matplotlib to its "ggplot" style: keep that local.
        with plt.rc_context():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # Optuna marks these plots experimental
                    if not finished:
                        raise ValueError("no finished trial")
                    # Axes, or an array of them for some plots (hence .flat below).
                    ax: Any = plot(study)
            except (ValueError, RuntimeError, ZeroDivisionError) as err:
                log.warning("%s plot skipped: %s", name, err)
                continue
            fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            if name in labels:  # trials and rounds are whole numbers
                xlabel, ylabel, ticks = labels[name]
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                _integer_ticks(ax, ticks)
            fig.tight_layout()

            def save(p: Path, fig: Any = fig) -> None:
                fig.savefig(p, dpi=120, format="png")

            commit(name, f"{name}.png", save)
            plt.close(fig)
    return written
