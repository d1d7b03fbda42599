r"""FedCEDAR's server operators: centre graph, propagation, distribution."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.typing import OptTensor

from pyg_fedgraph.nn.aggregation import (
    check_edge_index,
    edge_adjacency,
    sparse_aggregate,
    weighted_messages,
)
from pyg_fedgraph.nn.functional import pairwise_cosine

__all__ = ["ClusterGraphPropagation", "cluster_graph", "client_clusters", "distribute"]


def cluster_graph(centres: Tensor) -> Tensor:
    r"""Dense weighted graph over cluster centres from "Rethinking
    Personalized Federated Learning with Clustering-based Dynamic Graph
    Propagation" (Wang et al., FedCEDAR, Sec. 3.3).

    .. math::
        r^{i,j} = \frac{\max(0, \cos(c_i, c_j))}
        {\sum_{m=1}^{K} \max(0, \cos(c_i, c_m))},
        \qquad \sum_{j=1}^{K} r^{i,j} = 1 .

    The paper defines :math:`r^{i,j}` as the *normalized* cosine similarity
    with rows summing to one, without saying what happens to negative
    cosines; they are clamped to zero here so every weight is non-negative
    and each row is a convex combination. The diagonal is set to
    :math:`\cos(c_i, c_i) = 1` (also for an all-zero centre, whose cosine
    is otherwise undefined), so no row can sum to zero.

    Args:
        centres (torch.Tensor): cluster centres :math:`(K, D)`.

    Shapes:
        - **input:** :math:`(K, D)`
        - **output:** row-stochastic :math:`R` of shape :math:`(K, K)`, with
          ``R[i, j]`` the weight node :math:`i` gives to node :math:`j`.
    """
    if centres.dim() != 2 or centres.size(0) == 0:
        raise ValueError(f"centres must be (num_clusters, num_params) with at least one row, "
                         f"got {tuple(centres.shape)}")
    if not centres.is_floating_point():
        raise TypeError(f"centres must be a floating point tensor, got {centres.dtype}")
    cos = pairwise_cosine(centres).clamp_(min=0.0, max=1.0)
    cos.fill_diagonal_(1.0)
    return cos / cos.sum(dim=1, keepdim=True)


class ClusterGraphPropagation(MessagePassing):
    r"""Parameter-free knowledge propagation over the cluster-centre graph from
    "Rethinking Personalized Federated Learning with Clustering-based Dynamic
    Graph Propagation" (Wang et al., FedCEDAR, Sec. 3.4, Eq. 2).

    Each centre becomes the weighted sum of the centres, repeated :math:`P`
    times with the same weights:

    .. math::
        c_k^{(p)} = \sum_{i=1}^{K} r^{k,i}\, c_i^{(p-1)},
        \qquad \hat{C} = R^{P} C ,

    where :math:`R` is :func:`cluster_graph` of the input centres (built once,
    before the first step) unless a graph is passed as ``edge_index`` /
    ``edge_weight`` (an edge :math:`j \rightarrow i` with weight :math:`w`
    sets :math:`R_{ij} = w`; given weights are used as they are, so pass
    row-normalized ones to keep convex combinations). The paper uses
    :math:`P = 2` (Sec. 4.1) and finds :math:`P \in \{2, 3\}` best (Sec. 4.5).
    ``num_steps=0`` returns the centres unchanged (the paper's ablation AS-2,
    no propagation).

    A given graph goes through :meth:`propagate` once per step, as a sparse
    adjacency to :meth:`message_and_aggregate` (a matrix product, never an
    :math:`(|E|, D)` message tensor); the default dense :math:`R` has no edges
    to propagate and is multiplied directly, :math:`P` products
    :math:`R\,C^{(p-1)}`.

    Args:
        num_steps (int, optional): number of propagation steps :math:`P`
            (default: :obj:`2`).

    Shapes:
        - **input:** centres :math:`(K, D)`, optional ``edge_index``
          :math:`(2, |\mathcal{E}|)` and ``edge_weight``
          :math:`(|\mathcal{E}|)`
        - **output:** propagated centres :math:`(K, D)`
    """

    # The arguments of propagate(): forward() passes a sparse adjacency and its
    # values (see edge_adjacency); a plain edge_index runs the edge-wise message().
    propagate_type = {"x": Tensor, "edge_weight": OptTensor}

    def __init__(self, num_steps: int = 2) -> None:
        super().__init__(aggr="add")
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 0:
            raise ValueError(f"num_steps must be a non-negative int, got {num_steps!r}")
        self.num_steps = num_steps

    def forward(self, x: Tensor, edge_index: Tensor | None = None,
                edge_weight: Tensor | None = None) -> Tensor:
        r"""Propagates the centres ``x`` :math:`(K, D)` ``num_steps`` times.

        Args:
            x (torch.Tensor): cluster centres :math:`(K, D)`.
            edge_index (torch.Tensor, optional): edges :math:`j \rightarrow i`;
                when omitted the graph is :func:`cluster_graph` ``(x)``.
            edge_weight (torch.Tensor, optional): :math:`(|\mathcal{E}|,)`
                weights; ones when omitted.
        """
        if x.dim() != 2:
            raise ValueError(f"x must be (num_clusters, num_params), got {tuple(x.shape)}")
        if edge_index is None and edge_weight is not None:
            raise ValueError("edge_weight given without edge_index; pass both, or neither "
                             "to use the cosine cluster graph")
        out = x
        if edge_index is None:
            # R is built once from the input centres (Eq. 2), then applied P times.
            weight = cluster_graph(x)
            for _ in range(self.num_steps):
                out = weight @ out
            return out
        check_edge_index(edge_index, x.size(0))
        if edge_weight is None:
            edge_weight = x.new_ones(edge_index.size(1))
        if edge_weight.dim() != 1 or edge_weight.size(0) != edge_index.size(1):
            raise ValueError(f"edge_weight must be ({edge_index.size(1)},) for "
                             f"{edge_index.size(1)} edges, got {tuple(edge_weight.shape)}")
        edge_weight = edge_weight.to(x.dtype)
        adj_t = edge_adjacency(edge_index, edge_weight, x.size(0))
        for _ in range(self.num_steps):
            out = self.propagate(adj_t, x=out, edge_weight=edge_weight)
        return out

    def message(self, x_j: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        # The edge-wise form, for a propagate() over a plain edge_index.
        return weighted_messages(x_j, edge_weight)

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor,
                              edge_weight: Tensor | None = None) -> Tensor:
        return sparse_aggregate(adj_t, x, edge_weight)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(num_steps={self.num_steps})"


def client_clusters(assignment: Tensor, sampled_ids: Tensor, num_clients: int) -> Tensor:
    r"""Cluster of every client in one round, :math:`-1` for clients not
    sampled in it: the record FedCEDAR's distribution rule reads one round
    later (Sec. 3.5). Keep it in a strategy's ``state_dict()`` together with
    the propagated centres.

    Args:
        assignment (torch.Tensor): cluster of each sampled client :math:`(S,)`,
            as returned by :func:`~pyg_fedgraph.utils.clustering.kmeans`.
        sampled_ids (torch.Tensor): client ids of the sampled clients
            :math:`(S,)`, in the order of the rows that were clustered.
        num_clients (int): total number of clients :math:`N`.

    Shapes:
        - **output:** :math:`(N,)` ``long``.
    """
    if assignment.dim() != 1 or sampled_ids.dim() != 1 or \
            assignment.numel() != sampled_ids.numel():
        raise ValueError(f"assignment {tuple(assignment.shape)} and sampled_ids "
                         f"{tuple(sampled_ids.shape)} must be 1-D of the same length")
    if assignment.is_floating_point() or sampled_ids.is_floating_point():
        raise TypeError("assignment and sampled_ids must be integer tensors")
    if sampled_ids.numel():
        if int(sampled_ids.min()) < 0 or int(sampled_ids.max()) >= num_clients:
            raise ValueError(f"sampled_ids must lie in [0, {num_clients}), got "
                             f"[{int(sampled_ids.min())}, {int(sampled_ids.max())}]")
        if sampled_ids.unique().numel() != sampled_ids.numel():
            raise ValueError("sampled_ids contains a client twice; sample without replacement")
        if int(assignment.min()) < 0:
            raise ValueError("assignment must hold cluster ids >= 0")
    out = torch.full((num_clients,), -1, dtype=torch.long, device=sampled_ids.device)
    out[sampled_ids.long()] = assignment.to(torch.long)
    return out


def distribute(propagated: Tensor, cluster_of: Tensor) -> Tensor:
    r"""FedCEDAR's precise personalized model distribution (Sec. 3.5).

    With :math:`\hat{c}_1, \dots, \hat{c}_K` the propagated centres of round
    :math:`t-1` and :math:`k_n` the cluster client :math:`n` was in at
    :math:`t-1` (``cluster_of[n]``, :math:`-1` if :math:`n` was not sampled
    then), client :math:`n` starts round :math:`t` from

    .. math::
        \theta_n = \begin{cases}
            \hat{c}_{k_n} & \text{if } n \in S_{t-1}
                \quad \text{(Condition 1)} \\
            \frac{1}{K} \sum_{k=1}^{K} \hat{c}_k & \text{otherwise}
                \quad \text{(Condition 2)}
        \end{cases}

    The mean is unweighted, as in the paper. All clients are served with one
    gather; a strategy sends only the rows of the clients it samples at
    :math:`t`. Build ``cluster_of`` with :func:`client_clusters`.

    Args:
        propagated (torch.Tensor): propagated centres :math:`(K, D)` of the
            previous round.
        cluster_of (torch.Tensor): cluster of each client in the previous
            round, :math:`-1` for clients not sampled then, :math:`(N,)`.

    Shapes:
        - **input:** :math:`(K, D)` and :math:`(N,)`
        - **output:** initial parameters :math:`(N, D)`
    """
    if propagated.dim() != 2 or propagated.size(0) == 0:
        raise ValueError(f"propagated must be (num_clusters, num_params) with at least one row, "
                         f"got {tuple(propagated.shape)}")
    if cluster_of.dim() != 1 or cluster_of.is_floating_point():
        raise ValueError(f"cluster_of must be a 1-D integer tensor, got "
                         f"{tuple(cluster_of.shape)} {cluster_of.dtype}")
    k = propagated.size(0)
    if cluster_of.numel() and (int(cluster_of.min()) < -1 or int(cluster_of.max()) >= k):
        raise ValueError(f"cluster_of must hold -1 (not sampled) or a cluster in [0, {k}), got "
                         f"[{int(cluster_of.min())}, {int(cluster_of.max())}]")
    # Row K of the table is the mean; -1 maps to it.
    table = torch.cat([propagated, propagated.mean(dim=0, keepdim=True)], dim=0)
    index = cluster_of.to(device=propagated.device, dtype=torch.long)
    index = torch.where(index >= 0, index, torch.full_like(index, k))
    return table.index_select(0, index)
