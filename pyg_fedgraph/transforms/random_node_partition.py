r"""Uniformly random disjoint node sets, one per client."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_fedgraph.transforms.graph_partition import GraphPartition
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["RandomNodePartition"]


class RandomNodePartition(GraphPartition):
    r"""Splits the nodes of a graph uniformly at random into ``num_clients``
    disjoint sets of sizes :math:`\lfloor |\mathcal{V}| / N \rfloor` or
    :math:`\lceil |\mathcal{V}| / N \rceil` (one random permutation, cut into
    consecutive chunks), each client holding the subgraph its nodes induce:
    the structure-blind baseline of subgraph federated learning, which cuts
    about a share :math:`1 - 1/N` of the edges. Each client's ``group`` is its
    own index.

    Args:
        num_clients (int): the number of clients.
        seed (int, optional): the seed of the permutation. (default: :obj:`0`)
    """

    def node_sets(self, data: Data) -> tuple[list[Tensor], list[int]]:
        gen = make_generator(self.seed, "graph-partition")
        order = torch.randperm(data.num_nodes, generator=gen)
        return list(torch.tensor_split(order, self.num_clients)), list(range(self.num_clients))
