r"""Utilities: pure functions over tensors (clustering, client graphs)."""
from pyg_fedgraph.utils.clustering import kmeans
from pyg_fedgraph.utils.graph import complete_graph

__all__ = [
    "kmeans",
    "complete_graph",
]
