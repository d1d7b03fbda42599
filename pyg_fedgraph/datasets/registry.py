r"""Name -> builder registry of the federated data sets."""
from __future__ import annotations

from collections.abc import Callable

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.utils.registry import Registry

__all__ = ["DATASETS", "register_dataset", "load_dataset", "dataset_key"]


def dataset_key(name: str) -> str:
    r"""The registry key of a dataset name: ``"Fashion_MNIST"`` -> ``"fashion-mnist"``."""
    return name.strip().lower().replace("_", "-")


#: Every registered builder ``fn(**kwargs) -> FederatedDataset``, keyed by its
#: normalized name (lower case, ``-``): ``@register_dataset("fashion_mnist")``
#: and ``"Fashion-MNIST"`` both name ``"fashion-mnist"``.
DATASETS: Registry[Callable[..., FederatedDataset]] = Registry("dataset", normalize=dataset_key)
register_dataset = DATASETS.register


def load_dataset(name: str, **kwargs) -> FederatedDataset:
    r"""Builds the registered data set ``name`` with keyword arguments
    ``kwargs`` (e.g. ``load_dataset("digits", num_clients=10, partition="iid")``).

    Raises:
        ValueError: if ``name`` is not registered (the message lists the known names).
    """
    return DATASETS.resolve(name, **kwargs)
