r"""Utilities: pure functions over tensors (clustering, client graphs), and
reading pickles of plain data without running code."""
from pyg_fedgraph.utils.clustering import kmeans
from pyg_fedgraph.utils.graph import complete_graph
from pyg_fedgraph.utils.safe_pickle import load_array_pickle

__all__ = [
    "kmeans",
    "complete_graph",
    "load_array_pickle",
]
