r"""K hops of parameter-free propagation over a client graph (SFL)."""
from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from pyg_fedgraph.nn.aggregation import GraphAggregation

__all__ = ["KHopPropagation"]

NormalizationName = Literal["sym", "row"]
_NORMALIZATIONS = ("sym", "row")


class KHopPropagation(torch.nn.Module):
    r"""Parameter-free propagation of client models over a graph for
    :math:`K` hops, from a subset of source clients, the server step of SFL
    (`"Personalized Federated Learning With a Graph"
    <https://arxiv.org/abs/2203.00829>`_, Chen et al., IJCAI 2022).

    .. math::
        U = \hat{A}_{\mathcal{S}}^{K} X, \qquad
        \hat{A}_{\mathcal{S}} = \tilde{D}^{-1/2} A_{\mathcal{S}} \tilde{D}^{-1/2}
        \;\;(\text{``sym''}) \quad\text{or}\quad
        \tilde{D}^{-1} A_{\mathcal{S}} \;\;(\text{``row''}),

    where :math:`A_{\mathcal{S}}` keeps the edges of ``edge_index`` whose
    source is in ``sources`` (clients with a model to send) and
    :math:`\tilde{D}` is its degree matrix (GCN normalization,
    :func:`torch_geometric.nn.conv.gcn_conv.gcn_norm`, no self loops added:
    the caller includes them). Each hop is a
    :class:`~pyg_fedgraph.nn.GraphAggregation`, a sparse matrix product with
    no :math:`(E, D)` messages. Rows of clients that receive nothing (no
    in-edge from a source) are zero, and reported in ``receives``.

    Args:
        num_hops (int): :math:`K`; :obj:`0` returns ``x`` unchanged.
        normalization (str, optional): ``"sym"`` or ``"row"``
            (default: ``"sym"``).

    Shapes:
        - **input:** :math:`X` :math:`(N, F)`, ``edge_index`` :math:`(2, E)`,
          ``edge_weight`` :math:`(E,)`, ``sources`` :math:`(N,)` bool.
        - **output:** :math:`U` :math:`(N, F)`, ``receives`` :math:`(N,)` bool.
    """

    def __init__(self, num_hops: int, normalization: NormalizationName = "sym") -> None:
        super().__init__()
        if isinstance(num_hops, bool) or not isinstance(num_hops, int) or num_hops < 0:
            raise ValueError(f"num_hops must be a non-negative int, got {num_hops!r}")
        if normalization not in _NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {_NORMALIZATIONS}, "
                             f"got {normalization!r}")
        self.num_hops = num_hops
        self.normalization = normalization
        self.aggregation = GraphAggregation(normalize=normalization == "row")

    def operator(self, edge_index: Tensor, edge_weight: Tensor, num_nodes: int,
                 sources: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        r"""One hop's edges and weights (normalized for ``"sym"``; ``"row"``
        normalizes inside :class:`GraphAggregation`) and the mask of nodes
        that receive anything."""
        if sources is not None:
            keep = sources[edge_index[0]]
            edge_index, edge_weight = edge_index[:, keep], edge_weight[keep]
        if self.normalization == "sym":
            edge_index, edge_weight = gcn_norm(edge_index, edge_weight, num_nodes=num_nodes,
                                               add_self_loops=False)
        receives = torch.zeros(num_nodes, dtype=torch.bool, device=edge_index.device)
        receives[edge_index[1]] = True
        return edge_index, edge_weight, receives

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor,
                sources: Tensor | None = None) -> tuple[Tensor, Tensor]:
        r"""``(U, receives)`` for client features ``x`` :math:`(N, F)`."""
        n = x.size(0)
        if self.num_hops == 0:
            return x.clone(), torch.ones(n, dtype=torch.bool, device=x.device)
        edge_index, edge_weight, receives = self.operator(edge_index, edge_weight, n, sources)
        if edge_index.size(1) == 0:  # nobody sends anything
            return torch.zeros_like(x), receives
        h = x
        for _ in range(self.num_hops):  # K sparse products, K is a small constant
            h = self.aggregation(h, edge_index, edge_weight)
        return h * receives.unsqueeze(1).to(h.dtype), receives

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_hops={self.num_hops}, "
                f"normalization={self.normalization!r})")
