r"""The Optuna objective: one simulated federation per trial."""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.experiment.build import build_dataset, build_simulator, resolved_defaults
from pyg_fedgraph.experiment.runner import Runner, StopSignal
from pyg_fedgraph.experiment.settings import ExperimentConfig
from pyg_fedgraph.strategies import STRATEGIES
from pyg_fedgraph.tune.space import SearchSpace, suggest_overrides

if TYPE_CHECKING:
    import optuna

__all__ = ["TuneObjective", "Direction"]

Direction = Literal["maximize", "minimize"]


class TuneObjective:
    r"""The Optuna objective: one simulated federation per trial.

    The trial's settings (:func:`suggest_overrides`) are merged into
    ``config.overrides``; the run is built by
    :func:`~pyg_fedgraph.experiment.build_simulator` and carried out by the
    :class:`~pyg_fedgraph.experiment.Runner`, whose ``stop_when`` is the
    pruning. After each evaluated round :math:`t` the mean validation metric
    over the evaluated clients :math:`\mathcal{C}` (those that train; only
    the benign ones under an attack),

    .. math::
        v_t = \frac{1}{|\mathcal{C}|} \sum_{i \in \mathcal{C}}
        \mathrm{metric}(\theta_i^{(t)}, \mathcal{D}_i^{val}),

    is reported with ``trial.report(v_t, t)``, and the trial is pruned when
    the study's pruner says so. The returned value is
    :math:`\max_t v_t` (:math:`\min_t` for MSE-like metrics), never a test
    metric. User attributes of the trial: ``test_at_best_val`` (mean test
    metric at the best validation round :math:`t^\star`), ``best_round``
    (:math:`t^\star`), ``val_best``, ``test_final`` (last evaluated round),
    ``rounds_run``, ``metric``, ``seconds`` and ``overrides`` (every
    ``--set`` key of the run, to reproduce it); a pruned trial records them
    for the rounds it ran.

    Args:
        config (ExperimentConfig): the fixed settings; its ``overrides`` are
            fixed values, never tuned.
        space (callable, optional): ``trial -> dict`` of ``--set`` keys
            replacing the strategy's :meth:`search_space`
            (default: :obj:`None`).
        params (dict, optional): name -> Optuna distribution, added to or
            replacing entries of the space (default: :obj:`None`).
        tune_local (bool, optional): also tune the local learning rate
            (default: :obj:`False`).
        dataset (FederatedDataset, optional): the federation's data, built
            once from ``config`` when omitted and reused by every trial
            (rebuilt when a trial tunes a ``data.*`` key)
            (default: :obj:`None`).
        callbacks (tuple, optional): simulator callbacks
            ``fn(simulator, record)`` shared by every trial (default: ``()``).
        trial_callbacks (callable, optional): ``trial -> trackers`` of that
            trial's run only (one :class:`~pyg_fedgraph.tracking.Tracker` per
            trial), closed by the runner when the trial ends, with
            ``"finished"``, ``"stopped"`` (pruned or interrupted) or
            ``"failed"`` (default: :obj:`None`).
        stop (StopSignal, optional): stop requests shared by the trials
            (default: a fresh one).
    """

    def __init__(self, config: ExperimentConfig, *, space: SearchSpace | None = None,
                 params: Mapping[str, optuna.distributions.BaseDistribution] | None = None,
                 tune_local: bool = False, dataset: FederatedDataset | None = None,
                 callbacks: tuple = (),
                 trial_callbacks: Callable[[optuna.trial.Trial], Sequence[Any]] | None = None,
                 stop: StopSignal | None = None) -> None:
        STRATEGIES[config.strategy]  # an unknown name is one line that lists the known ones
        if config.rounds is not None and config.rounds < 1:
            raise ValueError(f"a study needs at least one round per trial, got "
                             f"rounds={config.rounds}")
        self.config = config
        self.space = space
        self.params = dict(params or {})
        self.tune_local = tune_local
        self.callbacks = tuple(callbacks)
        self.trial_callbacks = trial_callbacks
        self.stop = stop or StopSignal()
        self._dataset = dataset

    @property
    def dataset(self) -> FederatedDataset:
        r"""The shared data (built on first use)."""
        if self._dataset is None:
            fixed = self.config.overrides
            self._dataset = build_dataset(self.config, {k[5:]: v for k, v in fixed.items()
                                                        if k.startswith("data.")})
        return self._dataset

    @property
    def rounds(self) -> int:
        r"""Rounds per trial: ``config.rounds``, else the dataset's default."""
        if self.config.rounds is not None:
            return self.config.rounds
        return int(resolved_defaults(self.dataset, self.config.dataset)["rounds"])

    @property
    def direction(self) -> Direction:
        r"""``"maximize"`` for accuracy-like metrics, ``"minimize"`` for MSE."""
        objective = self.dataset.objective
        higher = objective.higher_is_better
        return "maximize" if higher else "minimize"

    def __call__(self, trial: optuna.trial.Trial) -> float:
        import optuna

        sampled = suggest_overrides(trial, self.config.strategy, space=self.space,
                                    params=self.params, fixed=self.config.overrides,
                                    tune_local=self.tune_local)
        overrides = {**sampled, **self.config.overrides}
        cfg = replace(self.config, overrides=overrides)
        own_data = any(k.startswith("data.") for k in sampled)
        trackers = tuple(self.trial_callbacks(trial)) if self.trial_callbacks is not None else ()
        sim = build_simulator(cfg, dataset=None if own_data else self.dataset,
                              callbacks=self.callbacks)
        trial.set_user_attr("overrides", overrides)
        t0 = time.perf_counter()
        pruned_at: list[tuple[int, float]] = []

        def prune(sim_: Any, record: Any) -> bool:
            value = sim_.history.mean("val")[-1]
            trial.report(value, record.round)
            if trial.should_prune():
                pruned_at.append((record.round, value))
                return True
            return False

        result = Runner(sim, name=f"trial {trial.number}", trackers=trackers, stop_when=prune,
                        stop=self.stop).run()
        summary = self._record(trial, sim, time.perf_counter() - t0)
        if result.status == "pruned":
            rnd, value = pruned_at[-1]
            raise optuna.TrialPruned(f"pruned at round {rnd} with mean validation "
                                     f"{sim.history.metric} {value:.4f}")
        if result.status == "stopped":
            raise KeyboardInterrupt
        return float(summary["val_best"])

    @staticmethod
    def _record(trial: optuna.trial.Trial, sim: Any, seconds: float) -> dict[str, Any]:
        summary = sim.summary()
        trial.set_user_attr("metric", summary["metric"])
        trial.set_user_attr("test_at_best_val", _finite(summary["test"]))
        trial.set_user_attr("best_round", summary["best_round"])
        trial.set_user_attr("val_best", _finite(summary["val_best"]))
        trial.set_user_attr("test_final", _finite(summary["test_final"]))
        trial.set_user_attr("rounds_run", summary["rounds"])
        trial.set_user_attr("seconds", seconds)
        return summary


def _finite(value: float) -> float | None:
    # JSON (the storage's format) has no NaN.
    return None if value is None or math.isnan(value) else float(value)


