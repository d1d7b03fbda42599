r"""Utilities: pure functions over tensors (clustering, client graphs),
reading pickles of plain data without running code, and the C allocator
setting an application may choose (:func:`retain_freed_memory`)."""
from pyg_fedgraph.utils.allocator import KEEP_MEMORY_ENV, retain_freed_memory
from pyg_fedgraph.utils.clustering import kmeans
from pyg_fedgraph.utils.graph import complete_graph
from pyg_fedgraph.utils.safe_pickle import load_array_pickle

__all__ = [
    "kmeans",
    "complete_graph",
    "load_array_pickle",
    "retain_freed_memory",
    "KEEP_MEMORY_ENV",
]
