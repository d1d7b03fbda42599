r"""METIS partitions of a graph into clients (FED-PUB's disjoint setting)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_fedgraph.transforms.graph_partition import GraphPartition, undirected_edges
from pyg_fedgraph.typing import WITH_PYMETIS, require

__all__ = ["MetisPartition", "metis_parts"]


def metis_parts(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int = 0,
                recursive: bool = False) -> Tensor:
    r"""The METIS part of every node (Karypis and Kumar, `"A Fast and High
    Quality Multilevel Scheme for Partitioning Irregular Graphs"
    <https://doi.org/10.1137/S1064827595287997>`_, SIAM J. Sci. Comput. 1998),
    minimizing the number of cut edges among balanced parts, through
    :func:`pymetis.part_graph` on the CSR adjacency of the undirected graph
    (both directions, no self loops, no duplicates, as METIS requires).

    METIS draws from its own random generator, seeded with
    ``options.seed``: for a given graph, options and seed the parts are the
    same on every run (without a seed METIS seeds itself with a fixed value,
    so it is deterministic then too).

    Args:
        edge_index (Tensor): the edges (either direction, or both).
        num_nodes (int): the number of nodes.
        num_parts (int): the number of parts asked for.
        seed (int, optional): METIS's seed. (default: :obj:`0`)
        recursive (bool, optional): recursive bisection
            (``METIS_PartGraphRecursive``) instead of direct :math:`k`-way
            partitioning (``METIS_PartGraphKway``). (default: :obj:`False`)

    Returns:
        The part of each node, in :math:`\{0, \ldots, k - 1\}`; some parts
        may be empty.

    Raises:
        ImportError: naming the extra ``metis``, if :mod:`pymetis` is not
            installed.

    Shapes:
        - **edge_index:** :math:`(2, |\mathcal{E}|)`
        - **output:** :math:`(|\mathcal{V}|,)`
    """
    require(WITH_PYMETIS, "pymetis", "metis")
    import pymetis

    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    u, v = undirected_edges(edge_index, num_nodes)
    row, col = torch.cat([u, v]), torch.cat([v, u])
    order = torch.argsort(row * num_nodes + col)
    adjacent = col[order]
    starts = torch.zeros(num_nodes + 1, dtype=torch.long)
    starts[1:] = torch.cumsum(torch.bincount(row, minlength=num_nodes), 0)
    adjacency = pymetis.CSRAdjacency(adj_starts=starts.numpy(), adjacent=adjacent.numpy())
    _, parts = pymetis.part_graph(num_parts, adjacency=adjacency, recursive=recursive,
                                  options=pymetis.Options(seed=seed))
    return torch.as_tensor(parts, dtype=torch.long)


class MetisPartition(GraphPartition):
    r"""Splits a graph into ``num_clients`` disjoint subgraphs with METIS
    (:func:`metis_parts`), one part per client: the non-overlapping setting
    of FED-PUB (Baek et al., `"Personalized Subgraph Federated Learning"
    <https://arxiv.org/abs/2206.10206>`_, ICML 2023), whose released data
    generator (``JinheonBaek/FED-PUB``, ``data/generators/disjoint.py``,
    commit ``302980d``) gives each METIS part to one client (5, 10 and 20
    clients) with the induced subgraph of its nodes. FED-PUB calls METIS
    through ``metispy.part_graph``, whose default is direct :math:`k`-way
    partitioning, hence ``recursive=False`` here (pymetis's own default is
    recursive bisection up to 8 parts).

    Client :math:`i` holds :math:`\mathcal{V}_i = \{v : \pi(v) = i\}` and
    the edges of :math:`\mathcal{G}` between them; edges between parts are
    lost (:func:`~pyg_fedgraph.transforms.cut_edge_graph` counts them).
    Each client's ``group`` is its own index.

    Args:
        num_clients (int): the number of clients (METIS parts).
        seed (int, optional): METIS's seed; the same seed gives the same
            parts. (default: :obj:`0`)
        recursive (bool, optional): recursive bisection instead of
            :math:`k`-way. (default: :obj:`False`)

    Raises:
        ValueError: one line, if METIS leaves a part empty (more clients than
            it can give non-empty parts) or the graph has fewer nodes than
            clients.
        ImportError: naming the extra ``metis`` without :mod:`pymetis`.
    """

    def __init__(self, num_clients: int, seed: int = 0, recursive: bool = False) -> None:
        super().__init__(num_clients, seed)
        self.recursive = bool(recursive)

    def node_sets(self, data: Data) -> tuple[list[Tensor], list[int]]:
        parts = nonempty_metis_parts(data, self.num_clients, self.seed, self.recursive)
        order = torch.argsort(parts, stable=True)
        sets = torch.split(order, torch.bincount(parts, minlength=self.num_clients).tolist())
        return list(sets), list(range(self.num_clients))

    def _options(self) -> str:
        return f"seed={self.seed}" + (", recursive=True" if self.recursive else "")


def nonempty_metis_parts(data: Data, num_parts: int, seed: int, recursive: bool) -> Tensor:
    r""":func:`metis_parts` of ``data``, or a one-line error if a part is empty."""
    parts = metis_parts(data.edge_index, data.num_nodes, num_parts, seed, recursive)
    sizes = torch.bincount(parts, minlength=num_parts)
    empty = int((sizes == 0).sum())
    if empty:
        num_edges = undirected_edges(data.edge_index, data.num_nodes).size(1)
        raise ValueError(f"METIS left {empty} of the {num_parts} parts asked for empty on a "
                         f"graph of {data.num_nodes} nodes and {num_edges} edges: ask "
                         f"for fewer parts (clients)")
    return parts
