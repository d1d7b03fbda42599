"""Weighted aggregation of client parameters over a collaboration graph."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.typing import OptTensor
from torch_geometric.utils import coalesce, dense_to_sparse, spmm, to_torch_csr_tensor
from torch_geometric.utils.sparse import ptr2index

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

    An edge list goes through :meth:`propagate` as a sparse adjacency (with one
    value column per layer in the per-layer form, see :func:`edge_adjacency`)
    to :meth:`message_and_aggregate`, a CSR product (a dense one of the same
    matrix for graphs with at least :math:`N^2/4` edges), so no
    :math:`(|E|, D)` message tensor is ever built: extra memory is
    :math:`O(ND + |E|)`. A dense ``weight`` has no edges to propagate: it is
    multiplied directly (:math:`W\Theta`, one product per layer). A loop over
    layers (not over clients) handles the per-layer form.

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

    # The arguments of propagate(): forward() passes a sparse adjacency and its
    # values (see edge_adjacency); a plain edge_index runs the edge-wise message().
    propagate_type = {"x": Tensor, "edge_weight": OptTensor, "layer_ptr": OptTensor}

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
            if mats.size(0) > 1:
                _check_layer_ptr(layer_ptr, mats.size(0), x.size(1))
            return dense_aggregate(mats, x, layer_ptr)
        assert edge_index is not None  # exactly one of the two, checked above
        check_edge_index(edge_index, n)
        e = edge_index.size(1)
        if edge_weight is None:
            edge_weight = x.new_ones(e)
        if edge_weight.size(0) != e:
            raise ValueError(f"edge_weight has {edge_weight.size(0)} rows for {e} edges")
        ew = edge_weight.to(x.dtype).reshape(e, -1)
        if ew.size(1) > 1:
            _check_layer_ptr(layer_ptr, ew.size(1), x.size(1))
        if self.normalize:
            deg = x.new_zeros(n, ew.size(1)).index_add_(0, edge_index[1], ew)
            ew = ew / deg[edge_index[1]].masked_fill(deg[edge_index[1]] == 0, 1.0)
        adj_t = edge_adjacency(edge_index, ew, n)
        return self.propagate(adj_t, x=x, edge_weight=ew if ew.size(1) > 1 else ew.view(-1),
                              layer_ptr=layer_ptr if ew.size(1) > 1 else None)

    def _dense_mats(self, weight: Tensor, n: int) -> Tensor:
        shape = tuple(weight.shape)
        if weight.dim() == 2:
            weight = weight.unsqueeze(0)
        if weight.dim() != 3 or tuple(weight.shape[1:]) != (n, n):
            raise ValueError(f"dense weight must be ({n}, {n}) or (L, {n}, {n}), got {shape}")
        if self.normalize:
            weight = _row_normalize(weight)
        return weight

    def message(self, x_j: Tensor, edge_weight: Tensor | None = None,
                layer_ptr: Tensor | None = None) -> Tensor:
        # The edge-wise form, for a propagate() over a plain edge_index:
        # forward() always goes through message_and_aggregate.
        return weighted_messages(x_j, edge_weight, layer_ptr)

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor, edge_weight: Tensor | None = None,
                              layer_ptr: Tensor | None = None) -> Tensor:
        return sparse_aggregate(adj_t, x, edge_weight, layer_ptr)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(normalize={self.normalize})"


def check_edge_index(edge_index: Tensor, num_nodes: int) -> None:
    r"""Raises unless ``edge_index`` is an integer :math:`(2, E)` tensor of
    nodes in :math:`[0, N)`."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"edge_index must be a (2, E) tensor, got {type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must be (2, E), got {tuple(edge_index.shape)}")
    if edge_index.is_floating_point() or edge_index.is_complex() \
            or edge_index.dtype == torch.bool:
        raise ValueError(f"edge_index must hold integer node ids, got {edge_index.dtype}")
    if edge_index.numel():
        low, high = int(edge_index.min()), int(edge_index.max())
        if low < 0 or high >= num_nodes:
            bad = low if low < 0 else high
            raise ValueError(f"edge_index refers to node {bad}, outside [0, {num_nodes}) "
                             f"for the {num_nodes} rows of x")


def _check_layer_ptr(layer_ptr: Tensor | None, num_layers: int, num_params: int) -> None:
    if layer_ptr is None:
        raise ValueError(f"{num_layers} per-layer weight matrices given but no layer_ptr")
    if layer_ptr.numel() != num_layers + 1 or int(layer_ptr[-1]) != num_params:
        raise ValueError(f"layer_ptr {layer_ptr.tolist()} does not describe {num_layers} "
                         f"layers covering {num_params} parameters")


def edge_adjacency(edge_index: Tensor, edge_weight: Tensor, num_nodes: int) -> Tensor:
    r"""The transposed weighted adjacency :math:`W` of edges :math:`j
    \rightarrow i` (row :math:`i` holds what node :math:`i` gathers), the
    input :meth:`~MessagePassing.propagate` takes: a sparse COO tensor with the
    edges in their given order, not coalesced (duplicate edges count as the sum
    of their weights), :math:`(N, N)` for weights :math:`(E,)` or
    :math:`(E, 1)`, a hybrid :math:`(N, N, L)` for one weight column per
    layer.

    Its values are detached: the operators pass ``edge_weight`` itself to
    :meth:`propagate` as well, so that gradients reach it without a backward
    pass through a sparse tensor (which costs more than the whole aggregation
    on CPU), and building it sorts nothing.
    """
    if edge_weight.dim() == 2 and edge_weight.size(1) == 1:
        edge_weight = edge_weight.squeeze(1)
    # The indices are checked by the callers: no invariant checks (what torch
    # does by default, said explicitly so that it does not warn).
    with torch.sparse.check_sparse_tensor_invariants(False):
        return torch.sparse_coo_tensor(edge_index.flip(0), edge_weight.detach(),
                                       (num_nodes, num_nodes, *edge_weight.shape[1:]),
                                       is_coalesced=False)


def sparse_aggregate(adj_t: Tensor, x: Tensor, edge_weight: Tensor | None = None,
                     layer_ptr: Tensor | None = None) -> Tensor:
    r"""The product :math:`W\Theta` of a sparse adjacency, COO or CSR (per layer
    for a hybrid :math:`(N, N, L)` one, with ``layer_ptr``), the body of the
    operators' :meth:`message_and_aggregate`; ``edge_weight``, if given,
    replaces the adjacency's values (in their storage order, see
    :func:`edge_adjacency`). A graph with at least :math:`N^2/4` entries is
    multiplied as a dense matrix, several times faster than CSR at these sizes
    and still without an :math:`(E, D)` tensor; a sparser one as CSR."""
    n, m = adj_t.size(0), adj_t.size(1)
    if adj_t.dim() == 3 and layer_ptr is None:
        raise ValueError(f"a per-layer adjacency ({adj_t.size(2)} layers) needs a layer_ptr")
    if adj_t.layout == torch.sparse_csr:
        row, col = ptr2index(adj_t.crow_indices()), adj_t.col_indices()
        weight = adj_t.values() if edge_weight is None else edge_weight
    elif edge_weight is None:
        adj_t = adj_t.coalesce()
        (row, col), weight = adj_t.indices(), adj_t.values()
    else:
        (row, col), weight = adj_t._indices(), edge_weight
    if weight.size(0) * 4 >= n * m:
        dense = weight.new_zeros(n, m, *weight.shape[1:]).index_put_(
            (row, col), weight, accumulate=True)
        if dense.dim() == 2:
            return dense @ x
        return dense_aggregate(dense.permute(2, 0, 1).contiguous(), x, layer_ptr)
    # Sorted once (duplicates summed), then one CSR product per layer.
    index, weight = coalesce(torch.stack([row, col]), weight, max(n, m))
    with warnings.catch_warnings(), torch.sparse.check_sparse_tensor_invariants(False):
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta",
                                category=UserWarning)
        if weight.dim() == 1:
            mat = to_torch_csr_tensor(index, weight, size=(n, m), is_coalesced=True)
            return spmm(mat, x, reduce="sum")
        assert layer_ptr is not None  # checked above
        out = torch.empty(n, x.size(1), dtype=x.dtype, device=x.device)
        bounds = layer_ptr.tolist()
        for layer in range(weight.size(1)):
            mat = to_torch_csr_tensor(index, weight[:, layer].contiguous(), size=(n, m),
                                      is_coalesced=True)
            out[:, bounds[layer]:bounds[layer + 1]] = spmm(
                mat, x[:, bounds[layer]:bounds[layer + 1]], reduce="sum")
    return out


def dense_aggregate(weight: Tensor, x: Tensor, layer_ptr: Tensor | None = None) -> Tensor:
    r"""The dense product :math:`W\Theta` for ``weight`` :math:`(N, N)` or
    :math:`(1, N, N)`, or per layer for :math:`(L, N, N)` with ``layer_ptr``."""
    if weight.dim() == 2:
        return weight @ x
    if weight.size(0) == 1:
        return weight[0] @ x
    assert layer_ptr is not None  # checked by the callers
    out = torch.empty(weight.size(1), x.size(1), dtype=x.dtype, device=x.device)
    bounds = layer_ptr.tolist()
    for layer in range(weight.size(0)):
        out[:, bounds[layer]:bounds[layer + 1]] = weight[layer] @ x[
            :, bounds[layer]:bounds[layer + 1]]
    return out


def weighted_messages(x_j: Tensor, edge_weight: Tensor | None,
                      layer_ptr: Tensor | None = None) -> Tensor:
    r"""The edge-wise messages :math:`w_{j \rightarrow i} \theta_j`
    :math:`(E, D)` (per layer for weights :math:`(E, L)`), the reference form
    of :func:`sparse_aggregate` for a :meth:`~MessagePassing.propagate` over
    a plain ``edge_index``."""
    if edge_weight is None:
        return x_j
    if edge_weight.dim() == 1 or edge_weight.size(1) == 1:
        return edge_weight.view(-1, 1) * x_j
    if layer_ptr is None:
        raise ValueError(f"per-layer edge weights ({edge_weight.size(1)} layers) "
                         f"need a layer_ptr")
    return edge_weight.repeat_interleave(layer_ptr.diff(), dim=1) * x_j


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
