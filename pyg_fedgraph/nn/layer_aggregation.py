"""pFedLA's per-client hypernetworks: layer-wise aggregation weights over the clients."""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn import Module, Parameter

__all__ = ["LayerAggregationHypernetwork", "layerwise_aggregate"]


def layerwise_aggregate(x: Tensor, alpha: Tensor, layer_ptr: Tensor) -> Tensor:
    r"""Personalized models from layer-wise aggregation weights,

    .. math::
        \tilde{\theta}_i^{(l)} = \sum_{j=1}^{N} \alpha_{ilj}\, \theta_j^{(l)},

    one dense :math:`(S, N) \times (N, D_l)` product per layer (a loop over
    layers, never over clients, and no :math:`(E, D)` message tensor).

    Args:
        x (torch.Tensor): the clients' models :math:`(N, D)`.
        alpha (torch.Tensor): weights :math:`(S, L, N)`.
        layer_ptr (torch.Tensor): layer pointer :math:`(L + 1)`.

    Shapes:
        - **output:** :math:`(S, D)`.
    """
    bounds = [int(b) for b in layer_ptr.tolist()]
    if alpha.dim() != 3 or alpha.size(1) != len(bounds) - 1 or alpha.size(2) != x.size(0):
        raise ValueError(f"alpha must be (S, {len(bounds) - 1}, {x.size(0)}) for "
                         f"{len(bounds) - 1} layers and {x.size(0)} clients, got "
                         f"{tuple(alpha.shape)}")
    if bounds[-1] != x.size(1):
        raise ValueError(f"layer_ptr ends at {bounds[-1]}, x has {x.size(1)} parameters")
    parts = [alpha[:, layer] @ x[:, a:b]
             for layer, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))]
    return torch.cat(parts, dim=1)


class LayerAggregationHypernetwork(Module):
    r"""The hypernetworks of pFedLA, from the `"Layer-wised Model Aggregation
    for Personalized Federated Learning" <https://arxiv.org/abs/2205.03993>`_
    paper (Ma et al., CVPR 2022): one small network per client, all stored
    stacked so that any set of clients is computed in one batched pass.

    Client :math:`i`'s hypernetwork maps its embedding :math:`v_i` through
    an MLP of three linear layers with ReLUs, then one linear head per layer
    :math:`l` of the client model to :math:`N` non-negative scores, normalized
    into that layer's aggregation weights over the clients:

    .. math::
        h_i = \mathrm{MLP}_i(v_i), \qquad
        a_{il} = \mathrm{ReLU}(U_{il} h_i + c_{il}) \in \mathbb{R}^{N}, \qquad
        \alpha_{il} = \frac{a_{il}}{\sum_j a_{ilj}},

    with :math:`\alpha_{il} = e_i` (the client keeps its own layer) when all
    scores are zero. The architecture (hidden width 100, three linear layers,
    heads initialized :math:`\mathcal{U}(0, 1)` with zero bias so that the
    first scores are positive, ReLU then normalization) follows the public
    pFedLA code by Tam (``KarhouTam/pFedLA``, ``HyperNetwork``); the paper
    does not give it. FedAGHN describes pFedLA's heads as softmax layers; the
    public code's ReLU and normalization are used here.

    Args:
        num_clients (int): :math:`N` (hypernetworks, and scores per head).
        num_layers (int): layers :math:`L` of the client model.
        embedding_dim (int, optional): size of :math:`v_i` (default: :obj:`100`)
        hidden_channels (int, optional): MLP width (default: :obj:`100`)

    Shapes:
        - **input:** client ids :math:`(S,)`.
        - **output:** weights :math:`(S, L, N)`, each :math:`(s, l)` row
          non-negative and summing to one.
    """

    def __init__(self, num_clients: int, num_layers: int, embedding_dim: int = 100,
                 hidden_channels: int = 100) -> None:
        super().__init__()
        for name, value in (("num_clients", num_clients), ("num_layers", num_layers),
                            ("embedding_dim", embedding_dim),
                            ("hidden_channels", hidden_channels)):
            if int(value) < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self.num_clients = int(num_clients)
        self.num_layers = int(num_layers)
        self.embedding_dim = int(embedding_dim)
        self.hidden_channels = int(hidden_channels)
        n, e, h = self.num_clients, self.embedding_dim, self.hidden_channels
        self.embedding = Parameter(torch.empty(n, e))
        self.mlp_weights = torch.nn.ParameterList(
            [Parameter(torch.empty(n, h, e)), Parameter(torch.empty(n, h, h)),
             Parameter(torch.empty(n, h, h))])
        self.mlp_biases = torch.nn.ParameterList([Parameter(torch.empty(n, h))
                                                  for _ in range(3)])
        self.head_weight = Parameter(torch.empty(n, self.num_layers, n, h))
        self.head_bias = Parameter(torch.empty(n, self.num_layers, n))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        r"""Embeddings :math:`\mathcal{N}(0, 1)` (as :class:`torch.nn.Embedding`),
        MLP layers as :class:`torch.nn.Linear` (uniform within
        :math:`\pm 1/\sqrt{\text{fan-in}}`), heads :math:`\mathcal{U}(0, 1)` with
        zero bias, all drawn from ``generator``."""
        self.embedding.copy_(torch.randn(self.embedding.shape, generator=generator))
        for weight, bias in zip(self.mlp_weights, self.mlp_biases, strict=True):
            bound = 1.0 / math.sqrt(weight.size(-1))
            weight.copy_((2 * torch.rand(weight.shape, generator=generator) - 1) * bound)
            bias.copy_((2 * torch.rand(bias.shape, generator=generator) - 1) * bound)
        self.head_weight.copy_(torch.rand(self.head_weight.shape, generator=generator))
        self.head_bias.zero_()

    def forward(self, clients: Tensor) -> Tensor:
        r"""The layer-wise aggregation weights :math:`\alpha` :math:`(S, L, N)`
        of ``clients`` :math:`(S,)`."""
        clients = torch.as_tensor(clients, dtype=torch.long, device=self.embedding.device)
        if clients.dim() != 1:
            raise ValueError(f"clients must be a 1-d tensor of ids, got {tuple(clients.shape)}")
        if clients.numel() and (int(clients.min()) < 0
                                or int(clients.max()) >= self.num_clients):
            raise ValueError(f"client ids must lie in [0, {self.num_clients}), got "
                             f"{clients.tolist()}")
        h = self.embedding[clients]
        for weight, bias in zip(self.mlp_weights, self.mlp_biases, strict=True):
            h = torch.relu(torch.einsum("she,se->sh", weight[clients], h) + bias[clients])
        scores = torch.relu(torch.einsum("slnh,sh->sln", self.head_weight[clients], h)
                            + self.head_bias[clients])
        total = scores.sum(dim=-1, keepdim=True)
        own = torch.nn.functional.one_hot(clients, self.num_clients).to(scores.dtype)
        own = own.unsqueeze(1).expand_as(scores)
        empty = total == 0
        return torch.where(empty, own, scores / total.masked_fill(empty, 1.0))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_clients={self.num_clients}, "
                f"num_layers={self.num_layers}, embedding_dim={self.embedding_dim}, "
                f"hidden_channels={self.hidden_channels})")
