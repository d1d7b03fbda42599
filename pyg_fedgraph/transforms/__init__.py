r"""Transforms of data sets into federations: who holds which graphs, and
each client's train / validation / test split."""
from pyg_fedgraph.transforms.graph_federation import (
    GCFL_FRACTIONS,
    GRAPH_PARTITIONS,
    GraphClient,
    GraphFederation,
    GraphPartition,
    cross_dataset_federation,
    gcfl_chunks,
    one_dataset_federation,
    pad_node_features,
    stratified_split,
)

__all__ = [
    "GraphClient",
    "GraphFederation",
    "GraphPartition",
    "GRAPH_PARTITIONS",
    "GCFL_FRACTIONS",
    "gcfl_chunks",
    "stratified_split",
    "pad_node_features",
    "one_dataset_federation",
    "cross_dataset_federation",
]
