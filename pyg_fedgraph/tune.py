r"""Hyper-parameter studies with `Optuna <https://optuna.org>`_.

Every paper of the project tunes its server's hyper-parameters on a grid
(pFedGraph :math:`\alpha, \lambda`; FedAGHN the initial :math:`p, q`;
Panacea :math:`\lambda_d` and the learning rates; FedCEDAR :math:`K, P`).
Here one Optuna trial is one simulated federation:

* the search space is declared next to each strategy
  (:meth:`Strategy.search_space <pyg_fedgraph.strategies.Strategy.search_space>`),
  as a dict of ``--set`` keys, so it may hold constructor options and
  local-training keys (``lr``) alike; users replace single parameters
  (``params``), fix some (``config.overrides``, the CLI's ``--set``), add the
  local learning rate (``tune_local``) or pass their own ``space``;
* :class:`TuneObjective` runs the federation round by round, reports the
  mean *validation* metric after every evaluated round (``trial.report``)
  so that pruners stop bad trials early, and returns the best mean
  validation metric. The test metric is never optimized: it is recorded as
  the trial's user attribute ``test_at_best_val``, measured at the round of
  best validation (the papers' protocol, :meth:`History.test_at_best
  <pyg_fedgraph.simulation.History.test_at_best>`);
* :func:`create_study` opens a persistent study (``sqlite:///study.db`` by
  default) that can be resumed and shared: several worker processes, on one
  machine or several, call :func:`tune` with the same storage and study
  name, Optuna's documented way to distribute a study.

Concurrency on SQLite: :func:`make_storage` gives SQLite connections a 60 s
busy timeout, so concurrent writers wait for the file lock instead of
failing with "database is locked"; this is enough for a few local workers
(trials last seconds to minutes, writes take milliseconds). For many workers
use a server database (``postgresql://...``) or Optuna's journal file
(a storage path ending in ``.log``), which needs no database server and
suits network file systems.

This is the orchestration layer: it builds runs with
:mod:`pyg_fedgraph.experiment` and never prints; the CLI
(``pyg-fedgraph tune``) prints.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.experiment import (
    DATASET_DEFAULTS,
    ExperimentConfig,
    build_dataset,
    build_simulator,
)
from pyg_fedgraph.strategies import STRATEGIES, Strategy

if TYPE_CHECKING:  # optuna is a dependency, imported lazily to keep ``import pyg_fedgraph`` fast
    import optuna

__all__ = ["TuneObjective", "suggest_overrides", "parse_distribution", "make_storage",
           "make_pruner", "create_study", "default_study_name", "tune", "study_summary",
           "write_study", "PRUNERS"]

log = logging.getLogger(__name__)

#: Names accepted by :func:`make_pruner` (and ``--pruner``).
PRUNERS = ("median", "hyperband", "none")
_STORAGE_ATTEMPTS = 5

SearchSpace = Callable[["optuna.trial.Trial"], dict[str, Any]]
Direction = Literal["maximize", "minimize"]


# ------------------------------------------------------------------ spaces
class _SpaceTrial:
    r"""A view of an Optuna trial for search-space functions: parameters the
    user fixed return their fixed value without being sampled (so the study
    records only what is really tuned), and parameters the user re-declared
    are drawn from the user's distribution instead of the strategy's."""

    def __init__(self, trial: optuna.trial.Trial, fixed: Mapping[str, Any],
                 params: Mapping[str, optuna.distributions.BaseDistribution]) -> None:
        self._trial = trial
        self._fixed = fixed
        self._params = params

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)

    def _user(self, name: str) -> tuple[bool, Any]:
        if name in self._fixed:
            return True, self._fixed[name]
        if name in self._params:
            return True, _suggest(self._trial, name, self._params[name])
        return False, None

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        hit, value = self._user(name)
        return value if hit else self._trial.suggest_float(name, low, high, step=step, log=log)

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int:
        hit, value = self._user(name)
        return value if hit else self._trial.suggest_int(name, low, high, step=step, log=log)

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        hit, value = self._user(name)
        return value if hit else self._trial.suggest_categorical(name, choices)


def _suggest(trial: optuna.trial.Trial, name: str,
             dist: optuna.distributions.BaseDistribution) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    raise TypeError(f"parameter {name!r}: unsupported distribution {dist!r}; use optuna's "
                    f"FloatDistribution, IntDistribution or CategoricalDistribution")


def suggest_overrides(trial: optuna.trial.Trial, strategy: str, *,
                      space: SearchSpace | None = None,
                      params: Mapping[str, optuna.distributions.BaseDistribution] | None
                      = None,
                      fixed: Mapping[str, Any] | None = None,
                      tune_local: bool = False) -> dict[str, Any]:
    r"""Samples one trial's settings as ``--set`` keys (strategy options,
    local-training keys such as ``lr``, ``model.*`` ...).

    The space is ``space(trial)`` if given, else the strategy's
    :meth:`~pyg_fedgraph.strategies.Strategy.search_space`, plus
    :meth:`~pyg_fedgraph.strategies.Strategy.local_search_space` with
    ``tune_local``, plus every entry of ``params`` (a user distribution
    replaces the space's one of the same name). Keys in ``fixed`` keep their
    value and are not sampled.

    Args:
        trial (optuna.trial.Trial): the trial to sample from.
        strategy (str): a registered strategy name.
        space (callable, optional): ``trial -> dict`` replacing the
            strategy's space (default: :obj:`None`).
        params (dict, optional): name -> Optuna distribution, added to the
            space or replacing its entry (default: :obj:`None`).
        fixed (dict, optional): name -> value never tuned (default: :obj:`None`).
        tune_local (bool, optional): also tune the local learning rate
            (default: :obj:`False`).

    Returns:
        dict: the sampled keys; ``fixed`` is not included.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; known: {sorted(STRATEGIES)}")
    fixed = dict(fixed or {})
    params = dict(params or {})
    clash = sorted(set(fixed) & set(params))
    if clash:
        raise ValueError(f"{clash} are both fixed (--set) and tuned (--param); drop one of them")
    # A Trial to the search spaces: what _SpaceTrial does not answer goes to the trial.
    view = cast("optuna.trial.Trial", _SpaceTrial(trial, fixed, params))
    cls: type[Strategy] = STRATEGIES[strategy]
    out: dict[str, Any] = {}
    if tune_local:
        out.update(Strategy.local_search_space(view))
    out.update(space(view) if space is not None else cls.search_space(view))
    for name, dist in params.items():
        if name not in out:
            out[name] = _suggest(trial, name, dist)
    return {k: v for k, v in out.items() if k not in fixed}


def parse_distribution(text: str) -> optuna.distributions.BaseDistribution:
    r"""Parses the CLI's ``--param NAME=SPEC`` specification.

    ``LOW:HIGH`` is uniform (integers if both bounds are integers),
    ``LOW:HIGH:log`` log-uniform, ``LOW:HIGH:STEP`` discretized, and a JSON
    list ``[a, b, c]`` categorical.

    Examples:
        ``"0.5:2"`` -> ``FloatDistribution(0.5, 2.0)``;
        ``"1e-3:1e-1:log"`` -> log-uniform float;
        ``"3:7"`` -> ``IntDistribution(3, 7)``;
        ``"[1, 2, 4, 8]"`` -> ``CategoricalDistribution((1, 2, 4, 8))``.
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    text = text.strip()
    if text.startswith("["):
        try:
            choices = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"categorical choices {text!r} are not a JSON list: {err}") from None
        if not isinstance(choices, list) or not choices:
            raise ValueError(f"categorical choices {text!r} must be a non-empty list")
        return CategoricalDistribution(tuple(choices))
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"distribution {text!r}: expected LOW:HIGH, LOW:HIGH:log, "
                         f"LOW:HIGH:STEP or a JSON list [a, b, ...]")
    try:
        bounds = [json.loads(p) for p in parts[:2]]
    except json.JSONDecodeError:
        raise ValueError(f"distribution {text!r}: bounds must be numbers") from None
    if not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds):
        raise ValueError(f"distribution {text!r}: bounds must be numbers")
    low, high = bounds
    if low > high:
        raise ValueError(f"distribution {text!r}: low {low} exceeds high {high}")
    integer = isinstance(low, int) and isinstance(high, int)
    log_scale, step = False, None
    if len(parts) == 3:
        if parts[2].strip().lower() == "log":
            log_scale = True
        else:
            try:
                step = json.loads(parts[2])
            except json.JSONDecodeError:
                step = None
            if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
                raise ValueError(f"distribution {text!r}: the third field must be 'log' or "
                                 f"a positive step")
            integer = integer and isinstance(step, int)
    if log_scale and low <= 0:
        raise ValueError(f"distribution {text!r}: a log scale needs low > 0")
    if integer:
        return IntDistribution(low, high, log=log_scale, step=step or 1)
    return FloatDistribution(float(low), float(high), log=log_scale,
                             step=None if step is None else float(step))


# --------------------------------------------------------------- objective
class TuneObjective:
    r"""The Optuna objective: one simulated federation per trial.

    The trial's settings (:func:`suggest_overrides`) are merged into
    ``config.overrides``; the run is built by
    :func:`~pyg_fedgraph.experiment.build_simulator` and stepped round by
    round. After each evaluated round :math:`t` the mean validation metric
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
            ``fn(simulator, record)`` (default: ``()``).
    """

    def __init__(self, config: ExperimentConfig, *, space: SearchSpace | None = None,
                 params: Mapping[str, optuna.distributions.BaseDistribution] | None = None,
                 tune_local: bool = False, dataset: FederatedDataset | None = None,
                 callbacks: tuple = ()) -> None:
        if config.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {config.strategy!r}; known: "
                             f"{sorted(STRATEGIES)}")
        if config.rounds is not None and config.rounds < 1:
            raise ValueError(f"a study needs at least one round per trial, got "
                             f"rounds={config.rounds}")
        self.config = config
        self.space = space
        self.params = dict(params or {})
        self.tune_local = tune_local
        self.callbacks = tuple(callbacks)
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
        sim = build_simulator(cfg, dataset=None if own_data else self.dataset, progress=False,
                              callbacks=self.callbacks)
        trial.set_user_attr("overrides", overrides)
        t0 = time.perf_counter()
        while sim.round < sim.rounds:
            record = sim.step()
            if record is None:
                continue
            value = sim.history.mean("val")[-1]
            trial.report(value, record.round)
            if trial.should_prune():
                self._record(trial, sim, time.perf_counter() - t0)
                raise optuna.TrialPruned(f"pruned at round {record.round} with mean "
                                         f"validation {sim.history.metric} {value:.4f}")
        summary = self._record(trial, sim, time.perf_counter() - t0)
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


# ------------------------------------------------------------------ studies
def make_storage(storage: str | optuna.storages.BaseStorage | None
                 ) -> str | optuna.storages.BaseStorage | None:
    r"""An Optuna storage from a URL.

    * ``sqlite:///path.db``: :class:`optuna.storages.RDBStorage` whose
      connections wait up to 60 s for SQLite's file lock, so that several
      worker processes can share one file;
    * other database URLs (``postgresql://``, ``mysql://``): ``RDBStorage``;
    * a path ending in ``.log``: :class:`optuna.storages.JournalStorage` on a
      :class:`~optuna.storages.journal.JournalFileBackend` (an append-only
      file, no database);
    * :obj:`None` (in memory) or a storage object: returned as is.
    """
    import optuna

    if storage is None or not isinstance(storage, str):
        return storage
    if storage.endswith(".log") and "://" not in storage:
        from optuna.storages.journal import JournalFileBackend
        return optuna.storages.JournalStorage(JournalFileBackend(storage))
    if "://" not in storage:
        raise ValueError(f"storage {storage!r} is neither a database URL (sqlite:///study.db) "
                         f"nor a journal file path ending in .log")
    from sqlalchemy.exc import SQLAlchemyError

    engine_kwargs: dict[str, Any] = {}
    if storage.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}
    for attempt in range(_STORAGE_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(storage, engine_kwargs=engine_kwargs)
        except SQLAlchemyError as err:
            # Workers started together on a new database race to create its tables ("table
            # studies already exists", a duplicate schema version); the loser sees them
            # created when it tries again.
            if attempt == _STORAGE_ATTEMPTS - 1:
                raise
            log.info("storage %s not ready (%s); retrying", storage, type(err).__name__)
            time.sleep(0.5 * (attempt + 1) + random.random() / 2)
    raise AssertionError("unreachable")


def make_pruner(name: str, rounds: int, *, n_startup_trials: int = 5,
                n_warmup_steps: int = 0) -> optuna.pruners.BasePruner:
    r"""``"median"``: :class:`optuna.pruners.MedianPruner` (a trial stops when
    its value at round :math:`t` is worse than the median of earlier trials
    at :math:`t`, once ``n_startup_trials`` finished); ``"hyperband"``:
    :class:`optuna.pruners.HyperbandPruner` over 1..``rounds`` rounds of
    resource; ``"none"``: no pruning."""
    import optuna

    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=n_startup_trials,
                                           n_warmup_steps=n_warmup_steps)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(rounds, 1),
                                              reduction_factor=3)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ValueError(f"unknown pruner {name!r}; expected one of {list(PRUNERS)}")


def _resolved_rounds(config: ExperimentConfig) -> int:
    if config.rounds is not None:
        return config.rounds
    return int(DATASET_DEFAULTS.get(config.dataset.lower(), {}).get("rounds", 30))


def _settings(config: ExperimentConfig, tune_local: bool,
              params: Mapping[str, optuna.distributions.BaseDistribution],
              space: SearchSpace | None) -> dict[str, Any]:
    from optuna.distributions import distribution_to_json
    out = {**config.to_dict(), "rounds": _resolved_rounds(config), "tune_local": tune_local,
           "params": {k: json.loads(distribution_to_json(d)) for k, d in sorted(params.items())},
           "space": "strategy" if space is None else getattr(space, "__qualname__", repr(space))}
    return json.loads(json.dumps(out, default=str))  # as the storage will hand it back


def default_study_name(config: ExperimentConfig) -> str:
    r"""``<strategy>-<dataset>[-<partition>]``."""
    return "-".join(str(p) for p in (config.strategy, config.dataset, config.partition)
                    if p is not None)


def create_study(config: ExperimentConfig, *, storage: str | Any | None = None,
                 study_name: str | None = None, direction: Direction = "maximize",
                 pruner: str | optuna.pruners.BasePruner = "median",
                 sampler: optuna.samplers.BaseSampler | None = None,
                 tune_local: bool = False,
                 params: Mapping[str, optuna.distributions.BaseDistribution] | None = None,
                 space: SearchSpace | None = None) -> optuna.Study:
    r"""Creates the study, or loads it when ``storage`` already holds one of
    that name (resuming it, or joining other workers).

    The run settings (``config``, ``tune_local``, ``params``) are stored as
    the study's user attribute ``settings``; loading a study that was created
    with other settings raises :class:`ValueError`, since its trials would not
    be comparable.

    Args:
        config (ExperimentConfig): the fixed settings of every trial.
        storage (str or optuna.storages.BaseStorage, optional): see
            :func:`make_storage`; :obj:`None` keeps the study in memory
            (default: :obj:`None`).
        study_name (str, optional): default :func:`default_study_name`.
        direction (str, optional): ``"maximize"`` or ``"minimize"``
            (default: ``"maximize"``).
        pruner (str or optuna.pruners.BasePruner, optional): a name of
            :data:`PRUNERS` or a pruner (default: ``"median"``).
        sampler (optuna.samplers.BaseSampler, optional): default Optuna's
            TPE sampler, unseeded (default: :obj:`None`).
        tune_local, params, space: as in :class:`TuneObjective`.
    """
    import optuna

    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    if isinstance(pruner, str):
        pruner = make_pruner(pruner, _resolved_rounds(config))
    name = study_name or default_study_name(config)
    study = optuna.create_study(storage=make_storage(storage), study_name=name,
                                direction=direction, pruner=pruner, sampler=sampler,
                                load_if_exists=True)
    wanted = _settings(config, tune_local, dict(params or {}), space)
    stored = study.user_attrs.get("settings")
    if stored is None:
        study.set_user_attr("settings", wanted)
        return study
    # A setting the stored study does not list (added to ExperimentConfig since) had its
    # default value then.
    defaults = _setting_defaults()
    diff = sorted(k for k in set(stored) | set(wanted)
                  if stored.get(k, defaults.get(k)) != wanted.get(k, defaults.get(k)))
    if diff:
        details = ", ".join(f"{k}: {stored.get(k, defaults.get(k))!r} -> "
                            f"{wanted.get(k, defaults.get(k))!r}" for k in diff)
        raise ValueError(f"study {name!r} was created with other settings ({details}); "
                         f"use the same settings to resume it, or another study name")
    return study


def _setting_defaults() -> dict[str, Any]:
    out: dict[str, Any] = {"tune_local": False, "params": {}, "space": "strategy"}
    for f in fields(ExperimentConfig):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return json.loads(json.dumps(out, default=str))


def tune(config: ExperimentConfig, n_trials: int | None = None, *,
         storage: str | Any | None = "sqlite:///study.db",
         study_name: str | None = None,
         pruner: str | optuna.pruners.BasePruner = "median",
         sampler: optuna.samplers.BaseSampler | None = None,
         space: SearchSpace | None = None,
         params: Mapping[str, optuna.distributions.BaseDistribution] | None = None,
         tune_local: bool = False, timeout: float | None = None,
         dataset: FederatedDataset | None = None,
         show_progress_bar: bool = False) -> optuna.Study:
    r"""Runs (or resumes, or joins) a study of ``config.strategy`` on
    ``config.dataset`` and returns it.

    ``n_trials`` trials are added by this call, whatever the study already
    holds; run the same call in several processes to share the work.

    Args:
        config (ExperimentConfig): fixed settings (``overrides`` are never
            tuned).
        n_trials (int, optional): trials this call adds (default: until
            ``timeout``).
        storage (str or optuna.storages.BaseStorage, optional): see
            :func:`make_storage` (default: ``"sqlite:///study.db"``).
        study_name (str, optional): default :func:`default_study_name`.
        pruner (str or optuna.pruners.BasePruner, optional): default
            ``"median"``.
        sampler (optuna.samplers.BaseSampler, optional): default TPE.
            Workers sharing a study should not use the same seed, or they
            propose the same first trials (default: :obj:`None`).
        space, params, tune_local, dataset: as in :class:`TuneObjective`.
        timeout (float, optional): stop starting trials after this many
            seconds (default: :obj:`None`).
        show_progress_bar (bool, optional): Optuna's progress bar on stderr
            (default: :obj:`False`).
    """
    if n_trials is None and timeout is None:
        raise ValueError("give n_trials or timeout, or the study would never stop")
    if n_trials is not None and n_trials < 1:
        raise ValueError(f"n_trials must be >= 1, got {n_trials}")
    objective = TuneObjective(config, space=space, params=params, tune_local=tune_local,
                              dataset=dataset)
    study = create_study(config, storage=storage, study_name=study_name,
                         direction=objective.direction, pruner=pruner, sampler=sampler,
                         tune_local=tune_local, params=params, space=space)
    study.optimize(objective, n_trials=n_trials, timeout=timeout,
                   show_progress_bar=show_progress_bar)
    return study


# ------------------------------------------------------------------ reports
def _trial_counts(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        key = t.state.name.lower()
        counts[key] = counts.get(key, 0) + 1
    return counts


def _run_command(settings: Mapping[str, Any], overrides: Mapping[str, Any]) -> str:
    flags = [f"--dataset {settings['dataset']}", f"--strategy {settings['strategy']}",
             f"--rounds {settings['rounds']}", f"--seed {settings['seed']}"]
    defaults = _setting_defaults()
    for f in fields(ExperimentConfig):  # the other options of ``run`` are named after them
        key = f.name
        if key in ("dataset", "strategy", "rounds", "seed", "overrides"):
            continue
        if key in settings and settings[key] != defaults.get(key):
            flags.append(f"--{key.replace('_', '-')} {settings[key]}")
    flags += [f"--set {k}={json.dumps(v) if not isinstance(v, str) else v}"
              for k, v in overrides.items()]
    return "pyg-fedgraph run " + " ".join(flags)


def study_summary(study: optuna.Study) -> dict[str, Any]:
    r"""What ``best.json`` holds: the best trial (by validation), its
    parameters, its test metric at its best-validation round, the settings
    of the study, the trial counts by state, the parameter importances and
    the ``pyg-fedgraph run`` command that reproduces the best trial."""
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
    if settings:
        out["command"] = _run_command(settings, overrides)
    if len(complete) > 1 and best.params:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out["importances"] = dict(optuna.importance.get_param_importances(study))
        except (ValueError, RuntimeError) as err:
            log.warning("parameter importances unavailable: %s", err)
    return out


def write_study(study: optuna.Study, out: str | Path) -> dict[str, Path]:
    r"""Writes ``best.json`` (:func:`study_summary`), ``trials.csv`` and the
    optimization-history, intermediate-values and parameter-importance
    plots (Optuna's matplotlib visualization) to ``out``; returns the paths
    written by name. A plot that Optuna cannot draw yet (no finished trial,
    a single trial for the importances) is skipped with a logged warning.
    Each file is written under a temporary name and then renamed, so workers
    of one study that finish together never leave a half-written file."""
    import optuna
    import optuna.visualization.matplotlib as ovm

    from pyg_fedgraph.simulation.report import write_csv
    from pyg_fedgraph.viz import _plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def commit(name: str, filename: str, write: Callable[[Path], object]) -> None:
        path = out / filename
        tmp = out / f".{filename}.{os.getpid()}.tmp"
        write(tmp)
        os.replace(tmp, path)
        written[name] = path

    summary = json.dumps(study_summary(study), indent=2, default=str)
    commit("best", "best.json", lambda p: p.write_text(summary))
    rows = [{"number": t.number, "state": t.state.name, "value": t.value,
             **{f"params_{k}": v for k, v in t.params.items()},
             **{f"user_attrs_{k}": v for k, v in t.user_attrs.items() if k != "overrides"}}
            for t in study.get_trials(deepcopy=False)]
    commit("trials", "trials.csv", lambda p: write_csv(p, rows))
    plt = _plt()
    plots = {"optimization_history": ovm.plot_optimization_history,
             "intermediate_values": ovm.plot_intermediate_values,
             "param_importances": ovm.plot_param_importances}
    finished = [t for t in study.get_trials(deepcopy=False)
                if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
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
            fig.tight_layout()

            def save(p: Path, fig: Any = fig) -> None:
                fig.savefig(p, dpi=120, format="png")

            commit(name, f"{name}.png", save)
            plt.close(fig)
    return written
