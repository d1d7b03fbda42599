r"""Utilities: pure functions over tensors (clustering, client graphs, graph
recovery scores), reading pickles of plain data without running code, the
C allocator setting an application may choose (:func:`retain_freed_memory`),
and the seconds and memory of a call as the benchmarks measure them
(:mod:`~pyg_fedgraph.utils.timing`)."""
from pyg_fedgraph.utils.allocator import (
    KEEP_MEMORY_ENV,
    keep_freed_memory_at_start,
    retain_freed_memory,
)
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
from pyg_fedgraph.utils.timing import current_rss, peak_rss, synchronize, time_calls, timed

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
    "keep_freed_memory_at_start",
    "KEEP_MEMORY_ENV",
    "synchronize",
    "timed",
    "time_calls",
    "peak_rss",
    "current_rss",
]
