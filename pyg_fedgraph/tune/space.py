r"""Search spaces of a study: the strategy's declared space, the user's
fixed and replaced parameters, and the local learning rate."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from pyg_fedgraph.strategies import STRATEGIES, Strategy

if TYPE_CHECKING:
    import optuna

__all__ = ["SearchSpace", "suggest_overrides"]

SearchSpace = Callable[["optuna.trial.Trial"], dict[str, Any]]


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
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(sorted(STRATEGIES))}")
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


