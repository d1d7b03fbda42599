r"""Operators: tensors in, tensors out (no rounds, no I/O, no device choice)."""
from pyg_fedgraph.nn.aggregation import GraphAggregation, dense_to_edges
from pyg_fedgraph.nn.aghn_conv import AGHNConv
from pyg_fedgraph.nn.bipartition import bipartition, min_cut
from pyg_fedgraph.nn.client_gat import AllocationLogits, ClientGAT, allocation_backward
from pyg_fedgraph.nn.cluster_propagation import (
    ClusterGraphPropagation,
    client_clusters,
    cluster_graph,
    distribute,
)
from pyg_fedgraph.nn.collaboration_qp import (
    CollaborationQP,
    collaboration_qp_cvxpy,
    initial_collaboration_graph,
    project_simplex,
    update_similarity,
)
from pyg_fedgraph.nn.functional import (
    cluster_mean,
    dtw_distance,
    global_pool,
    pairwise_cosine,
    pairwise_dtw,
    sample_shares,
)
from pyg_fedgraph.nn.hypernetwork import GCNHypernetwork, hypernetwork_grads, hypernetwork_update
from pyg_fedgraph.nn.khop import KHopPropagation
from pyg_fedgraph.nn.knn import knn_vote
from pyg_fedgraph.nn.layer_aggregation import LayerAggregationHypernetwork, layerwise_aggregate
from pyg_fedgraph.nn.masked_gcn_conv import MaskedGCNConv
from pyg_fedgraph.nn.masked_linear import MaskedLinear, pruned_mask

__all__ = [
    "GraphAggregation",
    "dense_to_edges",
    "AGHNConv",
    "ClientGAT",
    "AllocationLogits",
    "allocation_backward",
    "CollaborationQP",
    "collaboration_qp_cvxpy",
    "initial_collaboration_graph",
    "project_simplex",
    "update_similarity",
    "ClusterGraphPropagation",
    "cluster_graph",
    "client_clusters",
    "distribute",
    "GCNHypernetwork",
    "hypernetwork_grads",
    "hypernetwork_update",
    "KHopPropagation",
    "bipartition",
    "min_cut",
    "global_pool",
    "pairwise_cosine",
    "sample_shares",
    "cluster_mean",
    "dtw_distance",
    "pairwise_dtw",
    "knn_vote",
    "LayerAggregationHypernetwork",
    "layerwise_aggregate",
    "MaskedGCNConv",
    "MaskedLinear",
    "pruned_mask",
]
