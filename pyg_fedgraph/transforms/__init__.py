r"""Graph transforms in PyG's style: partitions of one graph into the
subgraphs of federated clients, what they hold, the prior client graph of
the edges they lost, and FED-PUB's preparation of a graph."""
from pyg_fedgraph.transforms.community_partition import CommunityPartition
from pyg_fedgraph.transforms.cut_edge_graph import client_membership, cut_edge_graph
from pyg_fedgraph.transforms.fedpub_preprocess import FedPubPreprocess, random_node_split
from pyg_fedgraph.transforms.graph_partition import (
    GraphPartition,
    client_subgraphs,
    undirected_edges,
)
from pyg_fedgraph.transforms.louvain_partition import LouvainPartition, pack_communities
from pyg_fedgraph.transforms.metis_partition import MetisPartition, metis_parts
from pyg_fedgraph.transforms.overlapping_partition import OverlappingPartition
from pyg_fedgraph.transforms.partition_report import partition_report
from pyg_fedgraph.transforms.random_node_partition import RandomNodePartition

__all__ = [
    "GraphPartition",
    "MetisPartition",
    "OverlappingPartition",
    "LouvainPartition",
    "RandomNodePartition",
    "CommunityPartition",
    "FedPubPreprocess",
    "client_subgraphs",
    "undirected_edges",
    "metis_parts",
    "pack_communities",
    "random_node_split",
    "partition_report",
    "cut_edge_graph",
    "client_membership",

]
