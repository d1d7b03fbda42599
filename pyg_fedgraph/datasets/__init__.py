r"""Federated data sets: builders returning a
:class:`~pyg_fedgraph.data.FederatedDataset`, registered by name; readers of
graphs to partition into clients (:mod:`pyg_fedgraph.transforms`)."""
from pyg_fedgraph.datasets.digits import digits
from pyg_fedgraph.datasets.fl60 import (
    FL60_VARIANTS,
    GRDA_DG60_ENV,
    GRDA_DG60_SHA256,
    angle_knn_graph,
    fl60,
    grda_dg60_file,
    read_grda_toy,
)
from pyg_fedgraph.datasets.graph_classification import (
    GCFL_DEFAULTS,
    federate_graph_sets,
    tu,
    tu_names,
)
from pyg_fedgraph.datasets.graph_federation import (
    GCFL_FRACTIONS,
    GRAPH_PARTITIONS,
    GraphFederation,
    GraphSetClient,
    GraphSplitName,
    cross_dataset_federation,
    gcfl_chunks,
    one_dataset_federation,
    pad_node_features,
    stratified_split,
)
from pyg_fedgraph.datasets.idx import download_idx, read_idx
from pyg_fedgraph.datasets.mnist import fashion_mnist, mnist, read_mnist
from pyg_fedgraph.datasets.planetoid import download_planetoid, read_planetoid
from pyg_fedgraph.datasets.registry import DATASETS, dataset_key, load_dataset, register_dataset
from pyg_fedgraph.datasets.subgraphs import (
    GRAPH_SPLITS,
    citeseer,
    cora,
    federate_graph,
    planted_graphs,
    pubmed,
)
from pyg_fedgraph.datasets.synthetic_graphs import contextual_sbm, planted_graph_federation
from pyg_fedgraph.datasets.topology import (
    TOPOLOGY_BASES,
    TopologyBase,
    rand_index_callback,
    topology,
)
from pyg_fedgraph.datasets.traffic import (
    METRLA,
    PEMSBAY,
    TrafficDataset,
    synthetic_traffic,
    synthetic_windows,
)
from pyg_fedgraph.datasets.tu import (
    GCFL_GROUPS,
    TU_SHA256,
    TU_URL,
    TUGraphs,
    check_tu_names,
    download_tu,
    known_tu_names,
    read_tu,
)
from pyg_fedgraph.datasets.vision import cifar10, cifar100

__all__ = [
    "cora",
    "citeseer",
    "pubmed",
    "planted_graphs",
    "federate_graph",
    "GRAPH_SPLITS",
    "DATASETS",
    "dataset_key",
    "load_dataset",
    "register_dataset",
    "fl60",
    "angle_knn_graph",
    "read_grda_toy",
    "grda_dg60_file",
    "GRDA_DG60_SHA256",
    "GRDA_DG60_ENV",
    "FL60_VARIANTS",
    "digits",
    "fashion_mnist",
    "mnist",
    "read_mnist",
    "read_idx",
    "download_idx",
    "cifar10",
    "cifar100",
    "topology",
    "rand_index_callback",
    "TopologyBase",
    "TOPOLOGY_BASES",
    "METRLA",
    "PEMSBAY",
    "TrafficDataset",
    "synthetic_traffic",
    "synthetic_windows",
    "read_planetoid",
    "download_planetoid",
    "contextual_sbm",
    "planted_graph_federation",
    "TUGraphs",
    "read_tu",
    "download_tu",
    "check_tu_names",
    "known_tu_names",
    "TU_URL",
    "TU_SHA256",
    "GCFL_GROUPS",
    "GCFL_FRACTIONS",
    "GRAPH_PARTITIONS",
    "GraphSetClient",
    "GraphFederation",
    "GraphSplitName",
    "cross_dataset_federation",
    "gcfl_chunks",
    "one_dataset_federation",
    "pad_node_features",
    "stratified_split",
    "tu",
    "tu_names",
    "federate_graph_sets",
    "GCFL_DEFAULTS",
]
