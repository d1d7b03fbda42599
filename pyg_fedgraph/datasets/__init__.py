r"""Federated data sets: builders returning a
:class:`~pyg_fedgraph.data.FederatedDataset`, registered by name."""
from pyg_fedgraph.datasets.digits import digits
from pyg_fedgraph.datasets.fl60 import fl60
from pyg_fedgraph.datasets.registry import DATASETS, load_dataset, register_dataset
from pyg_fedgraph.datasets.topology import rand_index_callback, topology
from pyg_fedgraph.datasets.traffic import METRLA, PEMSBAY, TrafficDataset, synthetic_traffic
from pyg_fedgraph.datasets.vision import cifar10, cifar100, fashion_mnist

__all__ = [
    "DATASETS",
    "load_dataset",
    "register_dataset",
    "fl60",
    "digits",
    "fashion_mnist",
    "cifar10",
    "cifar100",
    "topology",
    "rand_index_callback",
    "METRLA",
    "PEMSBAY",
    "TrafficDataset",
    "synthetic_traffic",
]
