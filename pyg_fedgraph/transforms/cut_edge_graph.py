r"""The prior client graph of a partition: how many edges link two clients."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_fedgraph.transforms.graph_partition import undirected_edges

__all__ = ["cut_edge_graph", "client_membership"]


def client_membership(clients: Sequence[Data], num_nodes: int) -> Tensor:
    r"""The :math:`(N, |\mathcal{V}|)` boolean matrix :math:`M` with
    :math:`M_{iv} = 1` iff client :math:`i` holds node :math:`v` (read from
    each client's ``node_id``)."""
    member = torch.zeros(len(clients), num_nodes, dtype=torch.bool)
    for i, client in enumerate(clients):  # one index write per client, at build time
        node_id = getattr(client, "node_id", None)
        if not isinstance(node_id, Tensor):
            raise ValueError(f"client {i} has no node_id: build clients with a partitioner "
                             f"of pyg_fedgraph.transforms")
        if node_id.numel() and (int(node_id.min()) < 0 or int(node_id.max()) >= num_nodes):
            raise ValueError(f"client {i} holds node ids outside the graph's "
                             f"0..{num_nodes - 1}")
        member[i, node_id] = True
    return member


def cut_edge_graph(data: Data, clients: Sequence[Data]) -> tuple[Tensor, Tensor]:
    r"""The prior client graph from the edges a partition cut: clients
    :math:`i \neq j` are linked with weight the number of undirected edges
    of the original graph with one end among client :math:`i`'s nodes
    :math:`\mathcal{V}_i` and the other among client :math:`j`'s:

    .. math::
        W_{ij} = \Big|\big\{\{u, v\} \in \mathcal{E} :
        (u \in \mathcal{V}_i \wedge v \in \mathcal{V}_j) \vee
        (v \in \mathcal{V}_i \wedge u \in \mathcal{V}_j)\big\}\Big|,
        \qquad i \neq j.

    For disjoint clients these are exactly the edges cut between them. For
    overlapping clients each edge counts once per pair of clients it
    connects, including edges inside the nodes two clients share (an edge
    with both ends in :math:`\mathcal{V}_i \cap \mathcal{V}_j` counts once,
    not twice). Computed for all pairs at once: with :math:`U, V` the
    :math:`(|\mathcal{E}|, N)` memberships of the edges' two ends,

    .. math::
        W = U^\top V + V^\top U - (U \odot V)^\top (U \odot V),

    the last term removing the double count of edges inside overlaps.

    Args:
        data (Data): the original graph (its ``edge_index``, either
            direction).
        clients (list of Data): the clients, each with ``node_id``.

    Returns:
        ``(edge_index, edge_weight)``: both directions of each linked pair,
        sorted by row, weights as float32; clients linked by no edge are not
        listed.

    Shapes:
        - **edge_index:** :math:`(2, |\mathcal{E}_{\text{clients}}|)`
        - **edge_weight:** :math:`(|\mathcal{E}_{\text{clients}}|,)`
    """
    counts = _pair_counts(data, clients)
    counts.fill_diagonal_(0)
    edge_index = counts.nonzero().t()
    return edge_index, counts[edge_index[0], edge_index[1]].float()


def _pair_counts(data: Data, clients: Sequence[Data]) -> Tensor:
    r"""The :math:`(N, N)` matrix of :math:`W_{ij}` above, diagonal included
    (:math:`W_{ii}` is then the number of edges inside client :math:`i`)."""
    member = client_membership(clients, data.num_nodes).double()
    u, v = undirected_edges(data.edge_index, data.num_nodes)
    ends_u, ends_v = member[:, u], member[:, v]  # (N, E)
    both = ends_u * ends_v
    counts = ends_u @ ends_v.t() + ends_v @ ends_u.t() - both @ both.t()
    return counts.round().long()
