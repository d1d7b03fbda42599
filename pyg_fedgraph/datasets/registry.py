r"""Name -> builder registry of the federated data sets."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pyg_fedgraph.data.federated_dataset import FederatedDataset

__all__ = ["DATASETS", "register_dataset", "load_dataset", "dataset_key"]

F = TypeVar("F", bound=Callable[..., FederatedDataset])

#: Every registered builder, keyed by its normalized name (lower case, ``-``).
DATASETS: dict[str, Callable[..., FederatedDataset]] = {}


def dataset_key(name: str) -> str:
    r"""The registry key of a dataset name: ``"Fashion_MNIST"`` -> ``"fashion-mnist"``."""
    return name.strip().lower().replace("_", "-")


def register_dataset(name: str) -> Callable[[F], F]:
    r"""Decorator adding a builder ``fn(**kwargs) -> FederatedDataset`` to
    :data:`DATASETS` under ``name`` (``"fashion_mnist"`` and
    ``"Fashion-MNIST"`` both become ``"fashion-mnist"``).

    Args:
        name (str): the name :func:`load_dataset` will accept.
    """
    key = dataset_key(name)

    def decorator(fn: F) -> F:
        old = DATASETS.get(key)
        # A module reloaded in a notebook re-registers the same function: allow it.
        if old is not None and (old.__module__, old.__qualname__) != (fn.__module__,
                                                                       fn.__qualname__):
            raise ValueError(f"dataset {key!r} is already registered by "
                             f"{old.__module__}.{old.__qualname__}; choose another name")
        DATASETS[key] = fn
        return fn

    return decorator


def load_dataset(name: str, **kwargs) -> FederatedDataset:
    r"""Builds the registered data set ``name`` with keyword arguments
    ``kwargs`` (e.g. ``load_dataset("digits", num_clients=10, partition="iid")``).

    Raises:
        ValueError: if ``name`` is not registered (the message lists the known names).
    """
    key = dataset_key(name)
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: "
                         f"{', '.join(sorted(DATASETS))}")
    return DATASETS[key](**kwargs)
