"""Name -> strategy class, filled by :func:`register_strategy` next to each strategy."""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from pyg_fedgraph.utils.registry import Registry

if TYPE_CHECKING:
    from pyg_fedgraph.strategies.base import Strategy

__all__ = ["STRATEGIES", "register_strategy", "build_strategy", "strategy_kwargs"]

#: CLI name -> strategy class; ``@register_strategy("fedavg")`` adds a class and
#: sets its ``name``.
STRATEGIES: Registry[type[Strategy]] = Registry("strategy", attribute="name")
register_strategy = STRATEGIES.register


def strategy_kwargs(name: str) -> set[str]:
    r"""Keyword arguments the strategy's constructor accepts."""
    cls = STRATEGIES[name]
    return {p for p in inspect.signature(cls.__init__).parameters if p != "self"}


def build_strategy(name: str, **kwargs: Any) -> Strategy:
    r"""Instantiates a registered strategy, with a clear error for unknown
    names or keyword arguments."""
    cls = STRATEGIES[name]
    unknown = set(kwargs) - strategy_kwargs(name)
    if unknown:
        raise ValueError(f"strategy {name!r} has no option(s) {sorted(unknown)}; "
                         f"it accepts {sorted(strategy_kwargs(name))}")
    return cls(**kwargs)
