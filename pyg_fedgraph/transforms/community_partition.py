r"""Clients within known communities of a graph."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_fedgraph.transforms.graph_partition import GraphPartition
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["CommunityPartition"]


class CommunityPartition(GraphPartition):
    r"""Splits each community of a graph (a node attribute, such as the
    ``community`` of :func:`~pyg_fedgraph.datasets.contextual_sbm`) into
    :math:`N / K` clients with disjoint, uniformly random node sets of
    near-equal sizes, so that every client lies within one community, which
    is its ``group``: the true client groups of a federation with planted
    communities. Client :math:`kC + c` is the :math:`c`-th client of
    community :math:`k` (:math:`C = N / K`).

    Args:
        num_clients (int): the number of clients :math:`N`, a multiple of the
            number :math:`K` of communities.
        attr (str, optional): the node attribute holding each node's
            community in :math:`\{0, \ldots, K - 1\}`.
            (default: :obj:`"community"`)
        seed (int, optional): the seed of the split. (default: :obj:`0`)

    Raises:
        ValueError: one line, if the attribute is missing, if ``num_clients``
            is not a multiple of :math:`K`, or if a community has fewer nodes
            than its clients.
    """

    def __init__(self, num_clients: int, attr: str = "community", seed: int = 0) -> None:
        super().__init__(num_clients, seed)
        self.attr = attr

    def node_sets(self, data: Data) -> tuple[list[Tensor], list[int]]:
        community = getattr(data, self.attr, None)
        if not isinstance(community, Tensor) or community.shape != (data.num_nodes,):
            raise ValueError(f"the graph has no node attribute {self.attr!r} of shape "
                             f"({data.num_nodes},) naming each node's community")
        sizes = torch.bincount(community.long())
        num_communities = len(sizes)
        if self.num_clients % num_communities:
            raise ValueError(f"num_clients ({self.num_clients}) must be a multiple of the "
                             f"{num_communities} communities")
        per = self.num_clients // num_communities
        if int(sizes.min()) < per:
            raise ValueError(f"community {int(sizes.argmin())} has {int(sizes.min())} nodes, "
                             f"fewer than its {per} clients")
        gen = make_generator(self.seed, "graph-partition")
        order = torch.randperm(data.num_nodes, generator=gen)
        order = order[torch.argsort(community[order], stable=True)]  # shuffled within each
        sets: list[Tensor] = []
        groups: list[int] = []
        for k, members in enumerate(torch.split(order, sizes.tolist())):
            sets.extend(torch.tensor_split(members, per))
            groups.extend([k] * per)
        return sets, groups

    def _options(self) -> str:
        return f"attr={self.attr!r}, seed={self.seed}"
