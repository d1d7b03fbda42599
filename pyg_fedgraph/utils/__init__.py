r"""Utilities: pure functions over tensors (clustering, client graphs, graph
recovery scores), reading pickles of plain data without running code, and the
C allocator setting an application may choose (:func:`retain_freed_memory`)."""
from pyg_fedgraph.utils.allocator import KEEP_MEMORY_ENV, retain_freed_memory
from pyg_fedgraph.utils.clustering import kmeans
from pyg_fedgraph.utils.graph import complete_graph
from pyg_fedgraph.utils.recovery import (
    allocation_stats,
    graph_recovery,
    partition_scores,
    read_groups,
    relation_weights,
)
from pyg_fedgraph.utils.safe_pickle import load_array_pickle

__all__ = [
    "kmeans",
    "complete_graph",
    "read_groups",
    "partition_scores",
    "graph_recovery",
    "relation_weights",
    "allocation_stats",
    "load_array_pickle",
    "retain_freed_memory",
    "KEEP_MEMORY_ENV",
]
