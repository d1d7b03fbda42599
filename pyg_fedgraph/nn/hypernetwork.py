r"""Graph hypernetwork of Panacea and the MLP hypernetwork of pFedHN."""
from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Literal, cast

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear, Parameter
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import MLP, InnerProductDecoder
from torch_geometric.utils import negative_sampling

__all__ = ["GCNHypernetwork", "hypernetwork_grads", "hypernetwork_update"]

logger = logging.getLogger(__name__)

_ENCODERS = ("gcn", "mlp")


class GCNHypernetwork(torch.nn.Module):
    r"""The graph hypernetwork of *Panacea* from the `"Graph-Relational
    Federated Learning: Enhanced Personalization and Robustness"` paper
    (Lin et al., Section III), which with
    ``encoder="mlp"`` is the MLP hypernetwork of `"Personalized Federated
    Learning using Hypernetworks" <https://arxiv.org/abs/2103.04628>`_
    (pFedHN, Shamsian et al., 2021; Panacea's ablation *Panacea-MLP*).

    Every client :math:`t` owns a learnable embedding
    :math:`\mathbf{h}_t^{(0)}`. An encoder :math:`E(\cdot; \psi_e)` maps the
    embeddings to :math:`\mathbf{z}_t`, and an MLP head
    :math:`M(\cdot; \psi_m)` maps :math:`\mathbf{z}_t` to the client's flat
    model parameters; a graph generator (training only, weighted by
    :math:`\lambda_d`) reconstructs :math:`\mathbf{A}` from MLP-transformed
    embeddings :math:`\hat{\mathbf{z}}_u` with an inner product decoder,
    Eq. (5), over negative pairs :math:`\mathcal{E}^-` from
    :func:`torch_geometric.utils.negative_sampling`:

    .. math::
        \mathbf{H}^{(l+1)} &= \mathrm{ReLU}\big(\hat{\mathbf{D}}^{-1/2}
        \hat{\mathbf{A}} \hat{\mathbf{D}}^{-1/2} \mathbf{H}^{(l)}
        \mathbf{W}^{(l)}\big), \qquad
        \mathbf{Z} = \mathbf{H}^{(L)}, \qquad
        \theta_t = M\big(\mathrm{ReLU}(\mathbf{z}_t); \psi_m\big),

        \mathcal{L}_d &= -\frac{1}{|\mathcal{E}|}\sum_{(u,v)\in\mathcal{E}}
        \log \sigma(\hat{\mathbf{z}}_u^\top \hat{\mathbf{z}}_v)
        -\frac{1}{|\mathcal{E}^-|}\sum_{(u,v)\in\mathcal{E}^-}
        \log\big(1 - \sigma(\hat{\mathbf{z}}_u^\top \hat{\mathbf{z}}_v)\big),

    with :math:`\hat{\mathbf{A}} = \mathbf{A} + \mathbf{I}` the prior client
    graph (GCN layers, no ReLU after the last one; ``encoder="mlp"`` ignores
    the graph). The server trains :math:`\psi` with the pFedHN rule
    (:func:`hypernetwork_update`). Held-out clients
    (:meth:`set_held_out`) keep their initial embeddings. The generator's own
    MLP, the chunked output head and novel clients:
    :doc:`/methods/panacea`.

    Args:
        num_clients (int): number of clients :math:`N` (graph nodes).
        out_channels (int): number of generated parameters :math:`D`.
        embedding_dim (int, optional): size of :math:`\mathbf{h}^{(0)}`
            (default: :obj:`100`).
        hidden_channels (int, optional): encoder width and width of the head's
            hidden layers :math:`H` (default: :obj:`100`).
        num_gnn_layers (int, optional): number of encoder layers :math:`L`
            (default: :obj:`3`).
        num_mlp_layers (int, optional): number of Linear layers of the head
            (default: :obj:`3`).
        encoder (str, optional): ``"gcn"`` (Panacea) or ``"mlp"`` (pFedHN,
            ignores the graph) (default: :obj:`"gcn"`).
        graph_generator (bool, optional): if :obj:`False`, no generator is
            built (*Panacea-GN*) and :meth:`reconstruction_loss` raises
            (default: :obj:`True`).
        chunk_size (int, optional): if set, generate :math:`D` in chunks of
            this size with learned chunk embeddings (default: :obj:`None`).

    Shapes:
        - **input:** ``edge_index`` :math:`(2, |\mathcal{E}|)`, optional
          ``edge_weight`` :math:`(|\mathcal{E}|)`, optional ``clients``
          :math:`(S)`.
        - **output:** generated parameters :math:`(S, D)` (:math:`S = N`
          without ``clients``).

    Example:
        >>> hn = GCNHypernetwork(num_clients=4, out_channels=20, embedding_dim=8,
        ...                      hidden_channels=16)
        >>> edge_index = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
        >>> hn(edge_index).shape
        torch.Size([4, 20])
    """
    held_out: Tensor  # a registered buffer

    def __init__(
        self,
        num_clients: int,
        out_channels: int,
        embedding_dim: int = 100,
        hidden_channels: int = 100,
        num_gnn_layers: int = 3,
        num_mlp_layers: int = 3,
        encoder: Literal["gcn", "mlp"] = "gcn",
        graph_generator: bool = True,
        chunk_size: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("num_clients", num_clients), ("out_channels", out_channels),
                            ("embedding_dim", embedding_dim),
                            ("hidden_channels", hidden_channels),
                            ("num_gnn_layers", num_gnn_layers),
                            ("num_mlp_layers", num_mlp_layers)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if encoder not in _ENCODERS:
            raise ValueError(f"encoder must be one of {_ENCODERS}, got {encoder!r}")
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive integer or None, got "
                             f"{chunk_size!r}")

        self.num_clients = num_clients
        self.out_channels = out_channels
        self.embedding_dim = embedding_dim
        self.hidden_channels = hidden_channels
        self.num_gnn_layers = num_gnn_layers
        self.num_mlp_layers = num_mlp_layers
        self.encoder = encoder
        self.graph_generator = graph_generator
        self.chunk_size = chunk_size

        self.embedding = Parameter(torch.empty(num_clients, embedding_dim))
        self.register_buffer("held_out", torch.zeros(num_clients, dtype=torch.bool))

        self.convs = torch.nn.ModuleList()
        for i in range(num_gnn_layers):
            in_ch = embedding_dim if i == 0 else hidden_channels
            if encoder == "gcn":
                self.convs.append(GCNConv(in_ch, hidden_channels))
            else:
                self.convs.append(Linear(in_ch, hidden_channels))

        if chunk_size is None:
            self.num_chunks = 1
            self.chunk_embedding = None
            head_in, head_out = hidden_channels, out_channels
        else:
            self.num_chunks = math.ceil(out_channels / chunk_size)
            self.chunk_embedding = Parameter(torch.empty(self.num_chunks, hidden_channels))
            head_in, head_out = 2 * hidden_channels, chunk_size
        self.head = MLP([head_in] + [hidden_channels] * (num_mlp_layers - 1) + [head_out],
                        act="relu", norm=None, dropout=0.0)

        if graph_generator:
            self.decoder_mlp = MLP([hidden_channels] * 3, act="relu", norm=None, dropout=0.0)
            self.decoder = InnerProductDecoder()
        else:
            self.decoder_mlp = None
            self.decoder = None

        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters (the held-out mask is kept)."""
        # N(0, 1), the initialization of torch.nn.Embedding used by pFedHN.
        torch.nn.init.normal_(self.embedding)
        for conv in self.convs:
            cast("GCNConv | Linear", conv).reset_parameters()
        if self.chunk_embedding is not None:
            torch.nn.init.normal_(self.chunk_embedding)
        self.head.reset_parameters()
        if self.decoder_mlp is not None:
            self.decoder_mlp.reset_parameters()

    def _check_graph(self, edge_index: Tensor | None,
                     edge_weight: Tensor | None) -> None:
        if edge_index is None:
            if self.encoder == "gcn":
                raise ValueError("encoder='gcn' needs the prior client graph: pass "
                                 "edge_index (an empty (2, 0) tensor for no edges)")
            return
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must have shape (2, num_edges), got "
                             f"{tuple(edge_index.shape)}")
        if edge_index.numel() > 0 and (int(edge_index.min()) < 0
                                       or int(edge_index.max()) >= self.num_clients):
            raise ValueError(f"edge_index refers to clients outside [0, {self.num_clients}); "
                             f"call add_clients() before adding nodes to the graph")
        if edge_weight is not None and edge_weight.shape != (edge_index.size(1),):
            raise ValueError(f"edge_weight must have shape ({edge_index.size(1)},), got "
                             f"{tuple(edge_weight.shape)}")

    def _check_clients(self, clients: Tensor) -> None:
        if clients.dim() != 1 or clients.dtype != torch.long:
            raise ValueError(f"clients must be a 1-D long tensor of client indices, got "
                             f"shape {tuple(clients.shape)} and dtype {clients.dtype}")
        if clients.numel() > 0 and (int(clients.min()) < 0
                                    or int(clients.max()) >= self.num_clients):
            raise ValueError(f"clients must lie in [0, {self.num_clients}), got indices "
                             f"from {int(clients.min())} to {int(clients.max())}")

    def _initial_embedding(self) -> Tensor:
        if bool(self.held_out.any()):
            return torch.where(self.held_out.unsqueeze(-1), self.embedding.detach(),
                               self.embedding)
        return self.embedding

    def _encode(self, h: Tensor, edge_index: Tensor | None,
                edge_weight: Tensor | None) -> Tensor:
        for i, conv in enumerate(self.convs):
            h = conv(h, edge_index, edge_weight) if self.encoder == "gcn" else conv(h)
            if i < self.num_gnn_layers - 1:
                h = h.relu()
        return h

    def embed(self, edge_index: Tensor | None = None,
              edge_weight: Tensor | None = None) -> Tensor:
        r"""Returns the encoder output :math:`\mathbf{Z}` of all clients,
        shape :math:`(N, H)`.

        Args:
            edge_index (torch.Tensor, optional): prior client graph; required
                with ``encoder="gcn"``, ignored with ``encoder="mlp"``.
            edge_weight (torch.Tensor, optional): edge weights of the graph.
        """
        self._check_graph(edge_index, edge_weight)
        return self._encode(self._initial_embedding(), edge_index, edge_weight)

    def generate(self, z: Tensor) -> Tensor:
        r"""Applies the head :math:`M` to embeddings ``z`` :math:`(S, H)` and
        returns flat parameters :math:`(S, D)`."""
        if z.dim() != 2 or z.size(-1) != self.hidden_channels:
            raise ValueError(f"z must have shape (num_clients, {self.hidden_channels}), got "
                             f"{tuple(z.shape)}")
        z = z.relu()
        if self.chunk_embedding is None:
            return self.head(z)
        assert self.chunk_size is not None  # set together with chunk_embedding
        s, k = z.size(0), self.num_chunks
        inp = torch.cat([z.unsqueeze(1).expand(s, k, -1),
                         self.chunk_embedding.unsqueeze(0).expand(s, k, -1)], dim=-1)
        return self.head(inp).reshape(s, k * self.chunk_size)[:, :self.out_channels]

    def forward(self, edge_index: Tensor | None = None,
                edge_weight: Tensor | None = None,
                clients: Tensor | None = None) -> Tensor:
        r"""Generates flat model parameters for ``clients``.

        The GCN encoder always runs over the whole graph (held-out clients
        included) before the rows of ``clients`` are selected.

        Args:
            edge_index (torch.Tensor, optional): prior client graph; required
                with ``encoder="gcn"``, ignored with ``encoder="mlp"``.
            edge_weight (torch.Tensor, optional): edge weights of the graph.
            clients (torch.Tensor, optional): long indices :math:`(S)`; all
                clients when omitted.
        """
        if clients is not None:
            self._check_clients(clients)
        if self.encoder == "mlp" and clients is not None:
            # pFedHN encodes clients independently: only the requested rows.
            z = self._encode(self._initial_embedding()[clients], None, None)
        else:
            z = self.embed(edge_index, edge_weight)
            if clients is not None:
                z = z[clients]
        return self.generate(z)

    def reconstruction_loss(self, z: Tensor, edge_index: Tensor,
                            neg_edge_index: Tensor | None = None) -> Tensor:
        r"""Graph generator loss :math:`\mathcal{L}_d` of Eq. (5).

        Binary cross-entropy of :math:`\sigma(\hat{\mathbf{z}}_u^\top
        \hat{\mathbf{z}}_v)` on the edges of ``edge_index`` (positives) and on
        ``neg_edge_index`` (negatives, sampled with
        :func:`~torch_geometric.utils.negative_sampling` when omitted), as in
        :meth:`torch_geometric.nn.GAE.recon_loss` but computed from logits
        with :func:`torch.nn.functional.logsigmoid`. If sampling finds no
        negative pair (complete graph), the negative term is zero.

        Args:
            z (torch.Tensor): encoder output :math:`(N, H)` from :meth:`embed`.
            edge_index (torch.Tensor): prior client graph (positive pairs).
            neg_edge_index (torch.Tensor, optional): negative pairs.

        Raises:
            ValueError: if the module was built with ``graph_generator=False``.
        """
        if self.decoder_mlp is None:
            raise ValueError("this hypernetwork has no graph generator "
                             "(graph_generator=False): skip the reconstruction loss or "
                             "build it with graph_generator=True")
        if z.dim() != 2 or z.size(-1) != self.hidden_channels:
            raise ValueError(f"z must have shape (num_clients, {self.hidden_channels}), got "
                             f"{tuple(z.shape)}")
        if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.size(1) == 0:
            raise ValueError(f"edge_index must have shape (2, num_edges) with at least one "
                             f"edge, got {tuple(edge_index.shape)}")
        z_hat = self.decoder_mlp(z)
        pos_loss = -F.logsigmoid(self.decoder(z_hat, edge_index, sigmoid=False)).mean()
        if neg_edge_index is None:
            neg_edge_index = negative_sampling(edge_index, num_nodes=z.size(0))
        if neg_edge_index.numel() == 0:
            return pos_loss
        # log(1 - sigmoid(x)) = logsigmoid(-x)
        neg_loss = -F.logsigmoid(-self.decoder(z_hat, neg_edge_index, sigmoid=False)).mean()
        return pos_loss + neg_loss

    def set_held_out(self, clients: Tensor | None) -> None:
        r"""Marks ``clients`` as held out (novel): their embeddings are
        detached in every forward pass; :obj:`None` clears the mask.

        Args:
            clients (torch.Tensor, optional): long indices of held-out clients.
        """
        self.held_out.zero_()
        if clients is not None:
            self._check_clients(clients)
            self.held_out[clients] = True

    @torch.no_grad()
    def add_clients(self, num_new: int, held_out: bool = False) -> Tensor:
        r"""Appends ``num_new`` client embeddings drawn from :math:`N(0, 1)`
        and returns the new clients' indices.

        The embedding becomes a new :class:`~torch.nn.Parameter`, so an
        optimizer built before this call must be rebuilt (or given the new
        parameter). The graph passed to :meth:`forward` must then contain the
        new nodes.

        Args:
            num_new (int): number of clients to add.
            held_out (bool, optional): mark the new clients as held out
                (default: :obj:`False`).
        """
        if not isinstance(num_new, int) or num_new < 1:
            raise ValueError(f"num_new must be a positive integer, got {num_new!r}")
        new = torch.randn(num_new, self.embedding_dim, device=self.embedding.device,
                          dtype=self.embedding.dtype)
        self.embedding = Parameter(torch.cat([self.embedding.data, new], dim=0))
        self.held_out = torch.cat([self.held_out, self.held_out.new_full((num_new,), held_out)])
        index = torch.arange(self.num_clients, self.num_clients + num_new,
                             device=self.embedding.device)
        self.num_clients += num_new
        logger.debug("added %d clients, now %d", num_new, self.num_clients)
        return index

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.num_clients}, {self.out_channels}, "
                f"encoder={self.encoder}, graph_generator={self.graph_generator}, "
                f"chunk_size={self.chunk_size})")


def hypernetwork_grads(generated: Tensor, delta: Tensor, params: Iterable[Tensor],
                       retain_graph: bool = False) -> tuple[Tensor | None, ...]:
    r"""Hypernetwork gradients of the pFedHN / Panacea server rule.

    .. math::
        \nabla_\psi = \sum_{t} \Big(\frac{\partial \theta_t}{\partial \psi}
        \Big)^{\top} (-\Delta\theta_t),

    which equals the gradient of
    :math:`\tfrac{1}{2}\sum_t \lVert \theta_t - \mathrm{sg}(\theta_t +
    \Delta\theta_t)\rVert^2` (:math:`\mathrm{sg}` = stop gradient): one step
    moves the generated models towards the clients' trained models. To
    average over the :math:`S` clients instead of summing, pass
    ``delta / S``.

    Args:
        generated (torch.Tensor): generated parameters :math:`(S, D)`, still
            attached to the hypernetwork's graph.
        delta (torch.Tensor): client updates :math:`(S, D)`.
        params (Iterable[torch.Tensor]): hypernetwork parameters :math:`\psi`.
        retain_graph (bool, optional): keep the autograd graph
            (default: :obj:`False`).

    Returns:
        One gradient per parameter, :obj:`None` for parameters that do not
        influence ``generated``.
    """
    _check_update(generated, delta)
    param_list: list[Tensor] = list(params)
    return torch.autograd.grad(generated, param_list, grad_outputs=-delta.detach(),
                               retain_graph=retain_graph, allow_unused=True)


def hypernetwork_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        generated: Tensor, delta: Tensor,
                        extra_loss: Tensor | None = None,
                        max_grad_norm: float | None = None) -> Tensor:
    r"""One server step of the pFedHN / Panacea rule (Algorithm 1, lines
    12-13): back-propagates :math:`-\sum_t \theta_t^\top \Delta\theta_t +
    \mathcal{L}_{\text{extra}}` and steps ``optimizer``.

    .. math::
        \psi \leftarrow \psi - \alpha\Big(\sum_t
        \big(\tfrac{\partial \theta_t}{\partial \psi}\big)^{\top}
        (-\Delta\theta_t) + \nabla_\psi \mathcal{L}_{\text{extra}}\Big)

    ``generated`` must come from a fresh forward pass (its graph is freed);
    for Panacea's :math:`K_s` server steps call the model and this function
    :math:`K_s` times with the same ``delta``. Pass
    ``extra_loss = lambda_d * model.reconstruction_loss(z, edge_index)``
    for the graph generator.

    Args:
        model (torch.nn.Module): the hypernetwork (used for gradient clipping).
        optimizer (torch.optim.Optimizer): optimizer over its parameters.
        generated (torch.Tensor): generated parameters :math:`(S, D)`.
        delta (torch.Tensor): client updates :math:`(S, D)`.
        extra_loss (torch.Tensor, optional): scalar added to the surrogate
            loss, e.g. the weighted reconstruction loss (default: :obj:`None`).
        max_grad_norm (float, optional): clip the total gradient norm to this
            value before stepping (default: :obj:`None`).

    Returns:
        The detached surrogate loss (its value is not meaningful on its own).
    """
    _check_update(generated, delta)
    optimizer.zero_grad()
    loss = -(generated * delta.detach()).sum()
    if extra_loss is not None:
        if extra_loss.dim() != 0:
            raise ValueError(f"extra_loss must be a scalar, got shape {tuple(extra_loss.shape)}")
        loss = loss + extra_loss
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return loss.detach()


def _check_update(generated: Tensor, delta: Tensor) -> None:
    if generated.shape != delta.shape:
        raise ValueError(f"delta must have the shape of the generated parameters "
                         f"{tuple(generated.shape)}, got {tuple(delta.shape)}")
    if not generated.requires_grad:
        raise ValueError("generated does not require grad: pass the output of the "
                         "hypernetwork's forward, not a detached copy")
