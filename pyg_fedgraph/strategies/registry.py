"""Name -> strategy class, filled by :func:`register_strategy` next to each strategy."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyg_fedgraph.strategies.base import Strategy

__all__ = ["STRATEGIES", "register_strategy", "build_strategy", "strategy_kwargs"]

#: CLI name -> strategy class, filled by :func:`register_strategy`.
STRATEGIES: dict[str, type[Strategy]] = {}
T = TypeVar("T", bound="type[Strategy]")


def register_strategy(name: str) -> Callable[[T], T]:
    r"""Class decorator registering a strategy under its CLI name ``name``
    (``@register_strategy("fedavg")``), in :data:`STRATEGIES`; sets the
    class's ``name``. A :class:`ValueError` when another class has the name."""
    def wrap(cls: T) -> T:
        if name in STRATEGIES and STRATEGIES[name] is not cls:
            raise ValueError(f"strategy name {name!r} is already taken by {STRATEGIES[name]}")
        cls.name = name
        STRATEGIES[name] = cls
        return cls
    return wrap


def strategy_kwargs(name: str) -> set[str]:
    r"""Keyword arguments the strategy's constructor accepts."""
    cls = _get(name)
    return {p for p in inspect.signature(cls.__init__).parameters if p != "self"}


def build_strategy(name: str, **kwargs: Any):
    r"""Instantiates a registered strategy, with a clear error for unknown
    names or keyword arguments."""
    cls = _get(name)
    unknown = set(kwargs) - strategy_kwargs(name)
    if unknown:
        raise ValueError(f"strategy {name!r} has no option(s) {sorted(unknown)}; "
                         f"it accepts {sorted(strategy_kwargs(name))}")
    return cls(**kwargs)


def _get(name: str) -> type[Strategy]:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}")
    return STRATEGIES[name]
