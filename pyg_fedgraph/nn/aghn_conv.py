"""Attentive graph hypernetwork of FedAGHN: layer-wise personalized aggregation."""
from __future__ import annotations

import logging

import torch
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.typing import OptTensor
from torch_geometric.utils import remove_self_loops, scatter, softmax

from pyg_fedgraph.nn.aggregation import (
    check_edge_index,
    edge_adjacency,
    sparse_aggregate,
    weighted_messages,
)
from pyg_fedgraph.nn.functional import pairwise_cosine
from pyg_fedgraph.utils.graph import complete_graph

__all__ = ["AGHNConv"]

logger = logging.getLogger(__name__)

# Deltas whose layer-l slice has a smaller norm than this count as zero: their
# cosine with every other client is 0 (the authors' code would divide by zero).


class AGHNConv(MessagePassing):
    r"""The attentive graph hypernetwork (AGHN) operator from the `"FedAGHN:
    Personalized Federated Learning with Attentive Graph HyperNetworks"
    <https://arxiv.org/abs/2501.16379>`_ paper.

    Every client :math:`i` owns two trainable scalars per layer :math:`l`:
    the sharpness :math:`p_{il}` (paper's :math:`p`, authors' code ``beta``)
    and the self weight :math:`q_{il}` (paper's :math:`q`, code ``gamma``).
    From the cosine similarity of the layer-:math:`l` slices of the previous
    round's updates :math:`\Delta\theta`,

    .. math::
        c_{ij}^{(l)} &= \cos\big(\Delta\theta_i^{(l)}, \Delta\theta_j^{(l)}\big)

        w_{ij}^{(l)} &= \frac{\exp(p_{il}\, c_{ij}^{(l)})}
            {\sum_{k \in \mathcal{N}(i) \setminus \{i\}} \exp(p_{il}\, c_{ik}^{(l)})},
            \qquad w_{ii}^{(l)} = \max(q_{il}, q_{\min})

        \alpha_{ij}^{(l)} &= \frac{w_{ij}^{(l)}}{\sum_{k} w_{ik}^{(l)}},
        \qquad \tilde{\theta}_i^{(l)} = \sum_{j} \alpha_{ij}^{(l)}\, \theta_j^{(l)},

    so the self share is :math:`\alpha_{ii}^{(l)} = q/(1+q)` whenever client
    :math:`i` has at least one in-neighbour. All clients and layers are
    computed in one pass; the :math:`(N, L)` tables are two
    :class:`~torch.nn.Parameter` of this module, and :math:`\tilde{\theta}` is
    differentiable w.r.t. them only (paper eq. (10) updates them with the
    hypernetwork rule; :meth:`clamp_self_weight_` projects :math:`q`). With
    ``delta=None`` (round 0) every client averages itself and its
    in-neighbours uniformly. Round 0, the update of :math:`p, q`, and why a
    self weight at the threshold stays there: :doc:`/methods/fedaghn`.

    Args:
        num_clients (int): number of rows :math:`N` of the parameter tables.
        num_layers (int): number of layers :math:`L` of the client model.
        sharpness (float, optional): initial value of every :math:`p_{il}`;
            the paper tunes it on a grid such as :math:`\{1, 5, 10, 20\}`
            (default: :obj:`5.0`)
        self_weight (float, optional): initial value of every :math:`q_{il}`
            (default: :obj:`0.1`)
        self_weight_min (float, optional): lower threshold :math:`q_{\min}`
            the self weight is clamped to in the forward pass, as in the
            authors' code (default: :obj:`0.0`)

    Shapes:
        - **input:** parameters ``x`` :math:`(N, D)`, optional ``edge_index``
          :math:`(2, |\mathcal{E}|)` (edges :math:`j \rightarrow i`, complete
          graph without self loops when omitted), updates ``delta``
          :math:`(N, D)` or ``None``, ``layer_ptr`` :math:`(L + 1)`, optional
          ``client_id`` :math:`(N)`.
        - **output:** personalized parameters :math:`(N, D)`, and with
          ``return_attention_weights=True`` the dense weights
          :math:`(L, N, N)` (row :math:`i` holds client :math:`i`'s
          :math:`\alpha_{i\cdot}^{(l)}`).

    Example:
        >>> conv = AGHNConv(num_clients=4, num_layers=2)
        >>> x, delta = torch.randn(4, 10), torch.randn(4, 10)
        >>> conv(x, delta=delta, layer_ptr=torch.tensor([0, 6, 10])).shape
        torch.Size([4, 10])
    """

    # The arguments of propagate(): forward() passes a sparse adjacency and its
    # values (see edge_adjacency); a plain edge_index runs the edge-wise message().
    propagate_type = {"x": Tensor, "edge_weight": OptTensor, "layer_ptr": OptTensor}

    def __init__(self, num_clients: int, num_layers: int, sharpness: float = 5.0,
                 self_weight: float = 0.1, self_weight_min: float = 0.0) -> None:
        super().__init__(aggr="add")
        if int(num_clients) < 1:
            raise ValueError(f"num_clients must be at least 1, got {num_clients}")
        if int(num_layers) < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        self.num_clients = int(num_clients)
        self.num_layers = int(num_layers)
        self.initial_sharpness = float(sharpness)
        self.initial_self_weight = float(self_weight)
        self.self_weight_min = float(self_weight_min)
        self.sharpness = Parameter(torch.empty(self.num_clients, self.num_layers))
        self.self_weight = Parameter(torch.empty(self.num_clients, self.num_layers))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Fills both tables with their initial values (same for all layers)."""
        with torch.no_grad():
            self.sharpness.fill_(self.initial_sharpness)
            self.self_weight.fill_(self.initial_self_weight)

    def add_clients(self, num_new: int) -> None:
        r"""Grows both tables by ``num_new`` rows for clients joining the
        federation; existing rows are kept, new rows get the initial values.

        The tables are replaced by new :class:`~torch.nn.Parameter` objects:
        rebuild (or extend) any optimizer that holds the old ones.
        """
        if int(num_new) < 0:
            raise ValueError(f"num_new must be non-negative, got {num_new}")
        if int(num_new) == 0:
            return
        old_p, old_q = self.sharpness.detach(), self.self_weight.detach()
        new_p = old_p.new_full((int(num_new), self.num_layers), self.initial_sharpness)
        new_q = old_q.new_full((int(num_new), self.num_layers), self.initial_self_weight)
        self.sharpness = Parameter(torch.cat([old_p, new_p]))
        self.self_weight = Parameter(torch.cat([old_q, new_q]))
        self.num_clients += int(num_new)
        logger.debug("AGHNConv grew to %d clients", self.num_clients)

    @torch.no_grad()
    def clamp_self_weight_(self) -> None:
        r"""Projects the stored self weights onto :math:`q \ge q_{\min}` in
        place, as the authors' code does after each optimizer step, so that
        the stored table equals the weights the forward pass uses (without
        it a :math:`q` that stepped below the threshold would keep its stale
        value). It does not let such a :math:`q` recover: at the threshold the
        clamp in the forward pass still passes no gradient (see the class
        docstring)."""
        self.self_weight.clamp_(min=self.self_weight_min)

    def forward(self, x: Tensor, edge_index: Tensor | None = None,
                delta: Tensor | None = None, layer_ptr: Tensor | None = None, *,
                client_id: Tensor | None = None, return_attention_weights: bool = False
                ) -> Tensor | tuple[Tensor, Tensor]:
        r"""Computes the personalized initial models of all clients.

        Args:
            x (torch.Tensor): client parameters :math:`\theta` :math:`(N, D)`
                (treated as constants).
            edge_index (torch.Tensor, optional): candidate collaborators,
                edges :math:`j \rightarrow i`; self loops are dropped because
                the self weight is :math:`q`. Should hold no duplicate edges.
                (default: complete graph)
            delta (torch.Tensor, optional): previous round's updates
                :math:`(N, D)` (treated as constants), or ``None`` in round 0
                for uniform weights (default: ``None``)
            layer_ptr (torch.Tensor, optional): layer pointer :math:`(L + 1)`;
                layer :math:`l` owns ``[layer_ptr[l], layer_ptr[l + 1])``
                (default: one layer, ``[0, D]``, only for ``num_layers=1``)
            client_id (torch.Tensor, optional): row of the parameter tables
                for every node of ``x``, when ``x`` holds a subset of the
                federation (default: ``arange(N)``)
            return_attention_weights (bool, optional): also return the dense
                weights :math:`\alpha` :math:`(L, N, N)` (default: ``False``)
        """
        if isinstance(edge_index, Tensor) and edge_index.is_floating_point():
            raise TypeError(f"edge_index must be an integer (2, E) tensor, got a "
                            f"{edge_index.dtype} one of shape {tuple(edge_index.shape)}: "
                            f"the arguments are (x, edge_index, delta, layer_ptr); pass "
                            f"delta= and layer_ptr= by name")
        n, layer_ptr, client_id = self._check_inputs(x, delta, layer_ptr, client_id)
        x = x.detach()
        if edge_index is None:
            edge_index = complete_graph(n, self_loops=False, device=x.device)
        else:
            check_edge_index(edge_index, n)
            edge_index, _ = remove_self_loops(edge_index.to(torch.long))
        src, tgt = edge_index[0], edge_index[1]
        num_edges = src.numel()

        if delta is None:
            # Round 0: uniform over the in-neighbours and the client itself.
            edge_w = x.new_ones(num_edges, self.num_layers)
            self_w = x.new_ones(n, self.num_layers)
        else:
            cos = self._layer_cosines(delta.detach(), layer_ptr).to(x.dtype)  # (L, N, N)
            p = self.sharpness[client_id].to(x.dtype)  # (N, L)
            logits = p[tgt] * cos[:, tgt, src].t()  # (E, L)
            edge_w = softmax(logits, tgt, num_nodes=n, dim=0)
            q = self.self_weight[client_id].to(x.dtype)
            self_w = torch.where(q > self.self_weight_min, q, self.self_weight_min)

        total = scatter(edge_w, tgt, dim=0, dim_size=n, reduce="sum") + self_w
        # A client with no in-neighbour and a zero self weight keeps its own
        # model, as the authors' code falls back to the one-hot self weight.
        empty = total == 0
        total = total.masked_fill(empty, 1.0)
        self_alpha = torch.where(empty, torch.ones_like(self_w), self_w / total)
        edge_alpha = edge_w / total[tgt]

        loops = torch.arange(n, device=x.device)
        full_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        full_alpha = torch.cat([edge_alpha, self_alpha], dim=0)  # (E + N, L)
        out = self.propagate(edge_adjacency(full_index, full_alpha, n), x=x,
                             edge_weight=full_alpha.squeeze(1) if self.num_layers == 1
                             else full_alpha, layer_ptr=layer_ptr)

        if not return_attention_weights:
            return out
        dense = full_alpha.new_zeros(self.num_layers, n, n)
        dense[:, full_index[1], full_index[0]] = full_alpha.t()
        return out, dense

    def message(self, x_j: Tensor, edge_weight: Tensor | None = None,
                layer_ptr: Tensor | None = None) -> Tensor:
        # The edge-wise form, for a propagate() over a plain edge_index.
        return weighted_messages(x_j, edge_weight, layer_ptr)

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor, edge_weight: Tensor | None = None,
                              layer_ptr: Tensor | None = None) -> Tensor:
        return sparse_aggregate(adj_t, x, edge_weight, layer_ptr)

    def _check_inputs(self, x: Tensor, delta: Tensor | None, layer_ptr: Tensor | None,
                      client_id: Tensor | None) -> tuple[int, Tensor, Tensor]:
        if x.dim() != 2:
            raise ValueError(f"x must be (num_clients, num_params), got {tuple(x.shape)}")
        n, d = x.shape
        if delta is not None and delta.shape != x.shape:
            raise ValueError(f"delta has shape {tuple(delta.shape)} but x has "
                             f"{tuple(x.shape)}: pass one update per client and parameter")
        if layer_ptr is None:
            if self.num_layers != 1:
                raise ValueError(f"pass layer_ptr: this AGHNConv has {self.num_layers} "
                                 f"layers (only num_layers=1 defaults to [0, D])")
            layer_ptr = torch.tensor([0, d])
        layer_ptr = torch.as_tensor(layer_ptr, dtype=torch.long)
        if layer_ptr.dim() != 1 or layer_ptr.numel() != self.num_layers + 1:
            raise ValueError(f"layer_ptr must have {self.num_layers + 1} entries for "
                             f"{self.num_layers} layers, got shape {tuple(layer_ptr.shape)}")
        if int(layer_ptr[0]) != 0 or int(layer_ptr[-1]) != d or bool(
                (layer_ptr[1:] < layer_ptr[:-1]).any()):
            raise ValueError(f"layer_ptr {layer_ptr.tolist()} must increase from 0 to "
                             f"the {d} parameters of x")
        if client_id is None:
            if n > self.num_clients:
                raise ValueError(f"x holds {n} clients but the tables have "
                                 f"{self.num_clients} rows: call add_clients() first")
            client_id = torch.arange(n, device=self.sharpness.device)
        else:
            client_id = torch.as_tensor(client_id, device=self.sharpness.device)
            if client_id.dim() != 1 or client_id.numel() != n:
                raise ValueError(f"client_id must have one entry per row of x ({n}), "
                                 f"got shape {tuple(client_id.shape)}")
            if client_id.is_floating_point() or client_id.dtype == torch.bool:
                raise TypeError(f"client_id must be an integer tensor, got {client_id.dtype}")
            if n and (int(client_id.min()) < 0 or int(client_id.max()) >= self.num_clients):
                raise ValueError(f"client_id must lie in [0, {self.num_clients}), got "
                                 f"values in [{int(client_id.min())}, {int(client_id.max())}]")
            if client_id.unique().numel() != n:
                raise ValueError("client_id contains duplicates: each client may appear once")
        return n, layer_ptr.to(x.device), client_id.to(torch.long)

    def _layer_cosines(self, delta: Tensor, layer_ptr: Tensor) -> Tensor:
        r"""Cosine similarity matrices of the per-layer slices, :math:`(L, N, N)`."""
        bounds = layer_ptr.tolist()
        mats = []
        for layer in range(self.num_layers):
            mats.append(pairwise_cosine(delta[:, bounds[layer]:bounds[layer + 1]]))
        return torch.stack(mats)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_clients={self.num_clients}, "
                f"num_layers={self.num_layers})")

