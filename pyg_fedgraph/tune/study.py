r"""Persistent studies: storage, pruners, creating or resuming a study, and
running it."""
from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.experiment.runner import StopSignal
from pyg_fedgraph.experiment.settings import ExperimentConfig
from pyg_fedgraph.tune.objective import Direction, TuneObjective
from pyg_fedgraph.tune.space import SearchSpace

if TYPE_CHECKING:
    import optuna

__all__ = ["PRUNERS", "make_storage", "make_pruner", "default_study_name", "create_study",
           "tune"]

log = logging.getLogger(__name__)

#: Names accepted by :func:`make_pruner` (and ``--pruner``).
PRUNERS = ("median", "hyperband", "none")
_STORAGE_ATTEMPTS = 5


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
    raise ValueError(f"unknown pruner {name!r}; expected one of {', '.join(PRUNERS)}")


def _settings(config: ExperimentConfig, rounds: int, tune_local: bool,
              params: Mapping[str, optuna.distributions.BaseDistribution],
              space: SearchSpace | None) -> dict[str, Any]:
    from optuna.distributions import distribution_to_json
    out = {**config.to_dict(), "rounds": rounds, "tune_local": tune_local,
           "strategy_version": _strategy_version(config.strategy),
           "params": {k: json.loads(distribution_to_json(d)) for k, d in sorted(params.items())},
           "space": "strategy" if space is None else getattr(space, "__qualname__", repr(space))}
    return json.loads(json.dumps(out, default=str))  # as the storage will hand it back


def _strategy_version(name: str) -> int:
    r"""The state format version of strategy ``name`` (1 for unknown names)."""
    from pyg_fedgraph.strategies import STRATEGIES
    cls = STRATEGIES.get(name)
    return 1 if cls is None else int(cls._version)


def default_study_name(config: ExperimentConfig) -> str:
    r"""``<strategy>-<dataset>[-<partition>]``."""
    return "-".join(str(p) for p in (config.strategy, config.dataset, config.partition)
                    if p is not None)


def create_study(config: ExperimentConfig, *, rounds: int | None = None,
                 storage: str | Any | None = None,
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
        rounds (int, optional): rounds per trial, when ``config.rounds`` is
            ``None`` (the dataset's default; :func:`tune` resolves it);
            default ``config.rounds`` (default: :obj:`None`).
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
    rounds = config.rounds if rounds is None else rounds
    if rounds is None:
        raise ValueError("create_study needs the rounds per trial: set config.rounds or "
                         "pass rounds= (tune() takes the dataset's default)")
    if isinstance(pruner, str):
        pruner = make_pruner(pruner, rounds)
    name = study_name or default_study_name(config)
    study = optuna.create_study(storage=make_storage(storage), study_name=name,
                                direction=direction, pruner=pruner, sampler=sampler,
                                load_if_exists=True)
    wanted = _settings(config, rounds, tune_local, dict(params or {}), space)
    stored = study.user_attrs.get("settings")
    if stored is None:
        study.set_user_attr("settings", wanted)
        return study
    # A study made by an older meaning of the strategy's name (fedamp before it named
    # the original FedAMP) cannot be continued: its trials are of another method.
    version = int(stored.get("strategy_version", 1))
    if version != wanted["strategy_version"]:
        from pyg_fedgraph.strategies import STRATEGIES
        raise ValueError(f"study {name!r}: " + STRATEGIES[config.strategy].state_version_error(
            version, "study"))
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
    out: dict[str, Any] = {"tune_local": False, "params": {}, "space": "strategy",
                           "strategy_version": 1}
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
         show_progress_bar: bool = False,
         trial_callbacks: Callable[[optuna.trial.Trial], Sequence[Any]] | None = None,
         stop: StopSignal | None = None) -> optuna.Study:
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
        space, params, tune_local, dataset, trial_callbacks, stop: as in
            :class:`TuneObjective` (``trial_callbacks`` logs each trial, e.g.
            to its own :class:`~pyg_fedgraph.tracking.Tracker`; a ``stop``
            request ends the trial in progress and the study).
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
                              dataset=dataset, trial_callbacks=trial_callbacks, stop=stop)
    study = create_study(config, rounds=objective.rounds, storage=storage,
                         study_name=study_name, direction=objective.direction, pruner=pruner,
                         sampler=sampler, tune_local=tune_local, params=params, space=space)
    study.optimize(objective, n_trials=n_trials, timeout=timeout,
                   show_progress_bar=show_progress_bar)
    return study


