r"""The base of the graph partitioners: one graph in, one induced subgraph per
client out."""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

__all__ = ["GraphPartition", "client_subgraphs", "undirected_edges"]


def check_num_clients(num_clients: int) -> int:
    r"""``num_clients`` as an int, or a one-line :class:`ValueError`."""
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
        raise ValueError(f"num_clients must be an int of at least 1, got {num_clients!r}")
    return num_clients


def undirected_edges(edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""Each undirected edge of ``edge_index`` once, as :math:`(u, v)` with
    :math:`u < v`, sorted; self loops dropped, either direction counts.

    Shapes:
        - **input:** :math:`(2, |\mathcal{E}|)`
        - **output:** :math:`(2, M)`, :math:`M` undirected edges
    """
    u, v = edge_index.min(dim=0).values, edge_index.max(dim=0).values
    keep = u != v
    key = torch.unique(u[keep] * num_nodes + v[keep])
    return torch.stack([key // num_nodes, key % num_nodes])


def client_subgraphs(data: Data, node_sets: Sequence[Tensor],
                     groups: Sequence[int] | None = None) -> list[Data]:
    r"""The subgraph of ``data`` induced by each node set, one per client.

    Each client's :class:`~torch_geometric.data.Data` holds every node-level
    attribute of ``data`` (``x``, ``y``, the train / validation / test
    masks ...) restricted to its nodes, the edges between them relabelled to
    :math:`0, \ldots, |\mathcal{V}_i| - 1` (:meth:`Data.subgraph`), and

    - ``node_id``: the indices of its nodes in ``data``, ascending;
    - ``group``: the part it was drawn from (an int), where ``groups`` is
      given.

    One :meth:`Data.subgraph` per client: the loop runs once, when the
    federation is built, never in training.

    Args:
        data (Data): the whole graph.
        node_sets (list of Tensor): each client's node indices (any order;
            sets may overlap).
        groups (list of int, optional): each client's group.
            (default: :obj:`None`)
    """
    if groups is not None and len(groups) != len(node_sets):
        raise ValueError(f"{len(groups)} groups given for {len(node_sets)} clients")
    clients = []
    for i, nodes in enumerate(node_sets):
        nodes = torch.unique(nodes.long())  # sorted, once each
        client = data.subgraph(nodes)
        client.node_id = nodes
        if groups is not None:
            client.group = int(groups[i])
        clients.append(client)
    return clients


class GraphPartition(BaseTransform):
    r"""Base class of the partitioners: :meth:`node_sets` says which nodes
    each client holds (and its group), calling the transform returns the
    induced subgraphs (:func:`client_subgraphs`).

    Args:
        num_clients (int): the number of clients.
        seed (int, optional): the seed of every random draw.
            (default: :obj:`0`)
    """

    def __init__(self, num_clients: int, seed: int = 0) -> None:
        self.num_clients = check_num_clients(num_clients)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
            raise ValueError(f"seed must be an int in [0, 2**31), got {seed!r}")
        self.seed = seed

    def __call__(self, data: Data) -> list[Data]:  # no copy: nothing of data is changed
        return self.forward(data)

    def forward(self, data: Data) -> list[Data]:
        if data.num_nodes is None or data.num_nodes < self._num_sets():
            raise ValueError(f"cannot split a graph of {data.num_nodes} nodes into "
                             f"{self._num_sets()} non-empty disjoint sets")
        node_sets, groups = self.node_sets(data)
        return client_subgraphs(data, node_sets, groups)

    @abstractmethod
    def node_sets(self, data: Data) -> tuple[list[Tensor], list[int]]:
        r"""Each client's node indices and group."""

    def _num_sets(self) -> int:
        return self.num_clients  # disjoint clients; overlapping ones share parts

    def _options(self) -> str:
        return f"seed={self.seed}"

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.num_clients}, {self._options()})"
