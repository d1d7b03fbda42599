"""Weighted aggregation of client parameters over a collaboration graph."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import dense_to_sparse, spmm, to_torch_csr_tensor

from pyg_fedgraph.utils.graph import complete_graph

__all__ = ["GraphAggregation", "dense_to_edges"]


class GraphAggregation(MessagePassing):
    r"""Personalized aggregation of client models over a weighted graph.

    Client :math:`i` receives the weighted sum of its in-neighbours' parameters

    .. math::
        \tilde{\theta}_i = \sum_{j \in \mathcal{N}(i)} w_{j \rightarrow i}\, \theta_j,
        \qquad \tilde{\Theta} = W \Theta ,

    where :math:`W_{ij} = w_{j \rightarrow i}` (an edge :math:`j \rightarrow i`
    is ``edge_index[:, e] = (j, i)``). In the per-layer form each layer
    :math:`l` (the slice ``[layer_ptr[l], layer_ptr[l+1])`` of the flat
    vector) has its own weights :math:`W^{(l)}`:

    .. math::
        \tilde{\theta}_i^{(l)} = \sum_j W^{(l)}_{ij}\, \theta_j^{(l)} .

    Aggregation runs through :meth:`message_and_aggregate` as a sparse (or,
    for graphs with at least :math:`N^2/4` edges or a dense ``weight``,
    dense) matrix product, so no :math:`(|E|, D)` message tensor is ever
    built: extra memory is :math:`O(ND + |E|)`. A loop over layers (not over
    clients) handles the per-layer form.

    Args:
        normalize (bool, optional): if ``True``, divide each row of the weights
            by its sum so every client receives a convex combination; rows
            summing to zero are left at zero (default: ``False``).

    Shapes:
        - **input:** parameters :math:`(|\mathcal{V}|, D)`; weights either
          ``edge_index`` :math:`(2, |\mathcal{E}|)` with ``edge_weight``
          :math:`(|\mathcal{E}|)` or :math:`(|\mathcal{E}|, L)`, or a dense
          ``weight`` :math:`(|\mathcal{V}|, |\mathcal{V}|)` or
          :math:`(L, |\mathcal{V}|, |\mathcal{V}|)`; ``layer_ptr`` :math:`(L + 1)`
          for the per-layer forms.
        - **output:** aggregated parameters :math:`(|\mathcal{V}|, D)`.
    """

    def __init__(self, normalize: bool = False) -> None:
        super().__init__(aggr="add")
        self.normalize = normalize

    def forward(self, x: Tensor, edge_index: Tensor | None = None,
                edge_weight: Tensor | None = None, *, weight: Tensor | None = None,
                layer_ptr: Tensor | None = None) -> Tensor:
        r"""Aggregates ``x`` with the graph given as edges or as a dense ``weight``.

        Args:
            x (torch.Tensor): client parameters :math:`(N, D)`.
            edge_index (torch.Tensor, optional): edges :math:`j \rightarrow i`.
            edge_weight (torch.Tensor, optional): :math:`(E,)`, or :math:`(E, L)`
                for one weight per layer; ones when omitted.
            weight (torch.Tensor, optional): dense :math:`W` of shape
                :math:`(N, N)` or :math:`(L, N, N)` instead of edges.
            layer_ptr (torch.Tensor, optional): layer pointer, required with
                per-layer weights.
        """
        if x.dim() != 2:
            raise ValueError(f"x must be (num_clients, num_params), got {tuple(x.shape)}")
        n = x.size(0)
        if (edge_index is None) == (weight is None):
            raise ValueError("pass exactly one of edge_index or a dense weight=")
        if weight is not None:
            mats = self._dense_mats(weight, n)
        else:
            assert edge_index is not None  # exactly one of the two, checked above
            mats = self._sparse_mats(edge_index, edge_weight, n, x)
        if len(mats) == 1:
            return self.propagate(mats[0], x=x) if mats[0].is_sparse_csr else \
                self.message_and_aggregate(mats[0], x)
        if layer_ptr is None:
            raise ValueError(f"{len(mats)} per-layer weight matrices given but no layer_ptr")
        if layer_ptr.numel() != len(mats) + 1 or int(layer_ptr[-1]) != x.size(1):
            raise ValueError(f"layer_ptr {layer_ptr.tolist()} does not describe {len(mats)} "
                             f"layers covering {x.size(1)} parameters")
        out = torch.empty_like(x)
        bounds = layer_ptr.tolist()
        for layer, adj in enumerate(mats):
            xs = x[:, bounds[layer]:bounds[layer + 1]]
            out[:, bounds[layer]:bounds[layer + 1]] = (self.propagate(adj, x=xs)
                                                       if adj.is_sparse_csr
                                               else self.message_and_aggregate(adj, xs))
        return out

    def _dense_mats(self, weight: Tensor, n: int) -> list[Tensor]:
        shape = tuple(weight.shape)
        if weight.dim() == 2:
            weight = weight.unsqueeze(0)
        if weight.dim() != 3 or tuple(weight.shape[1:]) != (n, n):
            raise ValueError(f"dense weight must be ({n}, {n}) or (L, {n}, {n}), got {shape}")
        if self.normalize:
            weight = _row_normalize(weight)
        return list(weight.unbind(0))

    def _sparse_mats(self, edge_index: Tensor, edge_weight: Tensor | None, n: int,
                     x: Tensor) -> list[Tensor]:
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must be (2, E), got {tuple(edge_index.shape)}")
        if edge_index.numel() and int(edge_index.max()) >= n:
            raise ValueError(f"edge_index refers to client {int(edge_index.max())} "
                             f"but x has {n} clients")
        e = edge_index.size(1)
        if edge_weight is None:
            edge_weight = x.new_ones(e)
        if edge_weight.size(0) != e:
            raise ValueError(f"edge_weight has {edge_weight.size(0)} rows for {e} edges")
        ew = edge_weight.to(x.dtype).reshape(e, -1)
        if self.normalize:
            deg = x.new_zeros(n, ew.size(1)).index_add_(0, edge_index[1], ew)
            ew = ew / deg[edge_index[1]].masked_fill(deg[edge_index[1]] == 0, 1.0)
        if e * 4 >= n * n:
            # Nearly complete graph: a dense (N, N) product is several times faster
            # than CSR and still never builds an (E, D) tensor.
            dense = x.new_zeros(ew.size(1), n, n)
            for layer in range(ew.size(1)):
                dense[layer].index_put_((edge_index[1], edge_index[0]), ew[:, layer],
                                        accumulate=True)
            return list(dense.unbind(0))
        # Row i of adj_t gathers from the sources of the edges that end at i.
        flipped = edge_index.flip(0)
        # The indices were checked above and PyG sorts them: no invariant checks
        # (what torch does by default, said explicitly so that it does not warn),
        # and not torch's note that CSR tensors are in beta, once per process.
        with warnings.catch_warnings(), torch.sparse.check_sparse_tensor_invariants(False):
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta",
                                    category=UserWarning)
            return [to_torch_csr_tensor(flipped, ew[:, layer].contiguous(), size=(n, n))
                    for layer in range(ew.size(1))]

    def message(self, x_j: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        # Edge-wise form, used only if someone propagates over a plain edge_index:
        # forward() always goes through message_and_aggregate.
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor) -> Tensor:
        if adj_t.layout == torch.strided:
            return adj_t @ x
        return spmm(adj_t, x, reduce="sum")

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(normalize={self.normalize})"


def _row_normalize(weight: Tensor) -> Tensor:
    s = weight.sum(dim=-1, keepdim=True)
    return weight / s.masked_fill(s == 0, 1.0)


def dense_to_edges(weight: Tensor, keep_zeros: bool = False) -> tuple[Tensor, Tensor]:
    r"""Converts a dense collaboration matrix :math:`W` :math:`(N, N)` (row
    :math:`i` = weights client :math:`i` gives to every :math:`j`) to
    ``edge_index`` (edges :math:`j \rightarrow i`) and ``edge_weight``.

    This is :func:`torch_geometric.utils.dense_to_sparse` with the edges
    reversed: PyG reads entry :math:`(i, j)` of an adjacency matrix as the
    edge :math:`i \rightarrow j`, while row :math:`i` of :math:`W` holds what
    client :math:`i` receives. Edges are ordered by target, then source.

    Args:
        weight (torch.Tensor): :math:`(N, N)`.
        keep_zeros (bool, optional): keep zero-weight edges (default: ``False``).
    """
    if weight.dim() != 2 or weight.size(0) != weight.size(1):
        raise ValueError(f"weight must be square (N, N), got {tuple(weight.shape)}")
    if keep_zeros:
        edge_index = complete_graph(weight.size(0), device=weight.device)
        return edge_index, weight[edge_index[1], edge_index[0]]
    edge_index, edge_weight = dense_to_sparse(weight)  # (i, j): the edge i -> j
    return edge_index.flip(0), edge_weight
