r"""Louvain communities of a graph, packed into clients."""
from __future__ import annotations

import heapq

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_fedgraph.transforms.graph_partition import GraphPartition, undirected_edges

__all__ = ["LouvainPartition", "pack_communities"]


def pack_communities(communities: list[Tensor], num_clients: int) -> list[Tensor]:
    r"""Deals communities to ``num_clients`` clients, largest first, each to
    the client holding the fewest nodes so far (ties: the lowest client
    index; communities of equal size: the one with the smallest node id
    first), so that client sizes stay close without splitting a community.

    Raises:
        ValueError: if there are fewer communities than clients.
    """
    if len(communities) < num_clients:
        raise ValueError(f"{len(communities)} communities cannot fill {num_clients} clients: "
                         f"ask for at most {len(communities)} clients")
    order = sorted(range(len(communities)),
                   key=lambda c: (-len(communities[c]), int(communities[c].min())))
    load = [(0, i) for i in range(num_clients)]  # (nodes held, client): a min-heap
    held: list[list[Tensor]] = [[] for _ in range(num_clients)]
    for c in order:
        size, i = heapq.heappop(load)
        held[i].append(communities[c])
        heapq.heappush(load, (size + len(communities[c]), i))
    return [torch.cat(h) for h in held]


class LouvainPartition(GraphPartition):
    r"""Splits a graph into ``num_clients`` disjoint subgraphs along its
    Louvain communities (Blondel et al., `"Fast unfolding of communities in
    large networks" <https://arxiv.org/abs/0803.0476>`_, J. Stat. Mech.
    2008), the community split of FedSage+ (Zhang et al., NeurIPS 2021) and
    OpenFGL. The communities maximize the modularity

    .. math::
        Q = \frac{1}{2m} \sum_{u, v} \Big(A_{uv} - \gamma
        \frac{d_u d_v}{2m}\Big) \mathbb{1}[c_u = c_v]

    (:func:`networkx.community.louvain_communities`, seeded) and are packed
    into clients by :func:`pack_communities` (largest community first, to
    the client with the fewest nodes), so a client holds whole communities.
    Each client's ``group`` is its own index.

    Args:
        num_clients (int): the number of clients.
        resolution (float, optional): :math:`\gamma`; larger values give
            more, smaller communities. (default: :obj:`1.0`)
        seed (int, optional): the seed of the Louvain node order.
            (default: :obj:`0`)

    Raises:
        ValueError: one line, if Louvain finds fewer communities than
            clients.
    """

    def __init__(self, num_clients: int, resolution: float = 1.0, seed: int = 0) -> None:
        super().__init__(num_clients, seed)
        if not resolution > 0:
            raise ValueError(f"resolution must be positive, got {resolution}")
        self.resolution = float(resolution)

    def node_sets(self, data: Data) -> tuple[list[Tensor], list[int]]:
        import networkx as nx

        graph = nx.Graph()
        graph.add_nodes_from(range(data.num_nodes))
        graph.add_edges_from(undirected_edges(data.edge_index, data.num_nodes).t().tolist())
        found = nx.community.louvain_communities(graph, resolution=self.resolution,
                                                 seed=self.seed)
        communities = [torch.tensor(sorted(c), dtype=torch.long) for c in found]
        if len(communities) < self.num_clients:
            raise ValueError(f"Louvain found {len(communities)} communities in a graph of "
                             f"{data.num_nodes} nodes, fewer than the {self.num_clients} "
                             f"clients asked for: ask for fewer clients or raise resolution")
        return pack_communities(communities, self.num_clients), list(range(self.num_clients))

    def _options(self) -> str:
        return f"resolution={self.resolution}, seed={self.seed}"
