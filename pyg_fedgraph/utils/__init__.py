r"""Utilities: pure functions over tensors (clustering, client graphs, graph
recovery scores), and reading pickles of plain data without running code."""
from pyg_fedgraph.utils.clustering import kmeans
from pyg_fedgraph.utils.graph import complete_graph
from pyg_fedgraph.utils.recovery import graph_recovery, partition_scores, read_groups
from pyg_fedgraph.utils.safe_pickle import load_array_pickle

__all__ = [
    "kmeans",
    "complete_graph",
    "read_groups",
    "partition_scores",
    "graph_recovery",
    "load_array_pickle",
]
