r"""pFedGAT's server operator: a graph attention network over the clients
decides how much each client takes from every other client."""
from __future__ import annotations

import warnings
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.data import Data
from torch_geometric.nn.conv import GATConv
from torch_geometric.utils import add_self_loops, remove_self_loops, softmax

from pyg_fedgraph.nn.aggregation import GraphAggregation, check_edge_index
from pyg_fedgraph.nn.functional import pairwise_cosine
from pyg_fedgraph.utils.graph import complete_graph

__all__ = ["ClientGAT", "AllocationLogits", "allocation_backward", "client_similarity"]

FEEDBACK_MODES = ("gradient", "delta")


def _client_params(x: Tensor) -> Tensor:
    if isinstance(x, Data) and isinstance(x.x, Tensor):
        # Accepted before the (x, edge_index) signature; its edges were never used.
        warnings.warn(f"passing a {type(x).__name__} in place of x is deprecated and will "
                      f"stop working: pass its x (graph.x)", FutureWarning, stacklevel=3)
        x = x.x
    if not isinstance(x, Tensor):
        raise TypeError(f"expected client parameters as a (num_clients, num_params) tensor, "
                        f"got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"client parameters must be (num_clients, num_params), "
                         f"got shape {tuple(x.shape)}")
    if x.size(0) == 0:
        raise ValueError("got zero clients: pass at least one parameter vector")
    if not (x.is_floating_point() or x.is_complex()):
        raise ValueError(f"client parameters are {x.dtype}: pass floating-point parameters "
                         f"(e.g. x.float())")
    bad = ~torch.isfinite(x).all(dim=1)
    if bool(bad.any()):
        rows = bad.nonzero().view(-1).tolist()
        shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
        raise ValueError(f"client parameters hold NaN or inf in {len(rows)} of {x.size(0)} "
                         f"clients (rows {shown}): one such client would make every client's "
                         f"weights NaN; drop or repair those clients first")
    return x


def _candidate_edges(edge_index: Tensor, num_clients: int) -> Tensor:
    # The given edges j -> i with exactly one self loop per client, as on the
    # complete graph (GATConv's add_self_loops, done here so that the
    # similarity term knows which edges are loops).
    check_edge_index(edge_index, num_clients)
    edge_index, _ = remove_self_loops(edge_index.to(torch.long))
    edge_index, _ = add_self_loops(edge_index, num_nodes=num_clients)
    return edge_index


def check_similarity_options(similarity: Any, similarity_scale: Any) -> None:
    r"""Raises if ``similarity`` is not a bool or ``similarity_scale`` is not
    positive."""
    if not isinstance(similarity, bool):
        raise TypeError(f"similarity must be a bool, got {similarity!r}")
    if not similarity_scale > 0:
        raise ValueError(f"similarity_scale must be positive, got {similarity_scale!r}")


def client_similarity(x: Tensor) -> Tensor:
    r"""Cosine similarity of the clients' deviations from their mean model,

    .. math::
        s_{ij} = \frac{(\theta_i - \bar{\theta})^\top (\theta_j - \bar{\theta})}
        {\lVert \theta_i - \bar{\theta} \rVert \, \lVert \theta_j - \bar{\theta} \rVert},
        \qquad \bar{\theta} = \frac{1}{N} \sum_{m=1}^N \theta_m .

    A client equal to the mean has zero similarity with everyone (itself
    included), so :math:`N` identical clients give :math:`S = 0`.

    Args:
        x (torch.Tensor): client parameters :math:`(N, D)`.

    Returns:
        torch.Tensor: :math:`S` :math:`(N, N)`, symmetric, entries in
        :math:`[-1, 1]`.
    """
    return pairwise_cosine(x - x.mean(dim=0, keepdim=True))


class ClientGAT(torch.nn.Module):
    r"""The server-side graph attention network of pFedGAT, from the
    "Personalized Federated Learning via Learning Dynamic Graphs" paper
    (Zhou et al.), that allocates aggregation weights between clients.

    Node :math:`i` of a fully connected client graph (all :math:`N^2` edges,
    self loops included; or the edges of ``edge_index`` and a self loop per
    client, with :math:`A_{ij} = 0` off the graph) carries
    :math:`h_i = \mathrm{LayerNorm}(\theta_i)` (no affine parameters; paper
    eq. 3). One :class:`~torch_geometric.nn.conv.GATConv` layer with :math:`K`
    heads scores every pair (eq. 4-6) and only its
    attention coefficients are kept; their mean over heads is the allocation
    matrix (eq. 7) and the personalized models are its product with the
    parameters (eq. 8):

    .. math::
        e_{ij}^k &= \mathrm{LeakyReLU}\left(
            \mathbf{a}_{dst}^{k\top} \mathbf{W}^k h_i +
            \mathbf{a}_{src}^{k\top} \mathbf{W}^k h_j +
            \beta_k\, s_{ij}\, [i \neq j] + \gamma_k\, [i = j] \right), \qquad
        \alpha_{ij}^k = \frac{\exp(e_{ij}^k)}{\sum_{m=1}^N \exp(e_{im}^k)},

        A_{ij} &= \frac{1}{K} \sum_{k=1}^K \alpha_{ij}^k, \qquad
        \tilde{\theta}_i = \sum_{j=1}^N A_{ij}\, \theta_j .

    :math:`A_{ij}` is the weight client :math:`i` gives to client :math:`j`
    (PyG's edge :math:`j \rightarrow i`), so every row of :math:`A` sums to
    one. The terms in :math:`\beta_k` and :math:`\gamma_k` are **our addition**
    (``similarity=True``, the default; ``False`` is exactly the paper's GAT):
    :math:`s_{ij}` is the cosine similarity of two clients' deviations from
    the mean model (:func:`client_similarity`), :math:`\beta_k`
    (:attr:`similarity_coefficients`) and :math:`\gamma_k`
    (:attr:`self_coefficients`) are :math:`\tau` times learned parameters
    (:obj:`similarity_weight`, :obj:`self_weight`) that start at 0. Gradients
    reach the GAT only through :math:`A` (eq. 9-10,
    :func:`allocation_backward`); ``theta`` is not detached. The weights do
    not depend on :math:`N`, so clients may join between calls. Why the two
    terms, the measurements, learning speed and memory:
    :doc:`/methods/pfedgat`.

    Args:
        in_channels (int): number of model parameters :math:`D`.
        hidden_channels (int, optional): per-head projection size :math:`C`
            (paper's :math:`F'`); the projection has :math:`D \times K C`
            weights. (default: :obj:`64`)
        heads (int, optional): number of attention heads :math:`K`.
            (default: :obj:`8`)
        negative_slope (float, optional): LeakyReLU slope. (default: :obj:`0.2`)
        similarity (bool, optional): add the terms in :math:`\beta_k` and
            :math:`\gamma_k` to the attention scores; ``False`` gives the
            paper's GAT exactly. (default: :obj:`True`)
        similarity_scale (float, optional): :math:`\tau`; one SGD step
            changes :math:`\beta_k` and :math:`\gamma_k` by :math:`\tau^2`
            times the learning rate times their gradients. (default: :obj:`80.0`)

    Shapes:
        - **input:** client parameters :math:`(|\mathcal{V}|, D)`, optional
          ``edge_index`` :math:`(2, |\mathcal{E}|)` (edges :math:`j \rightarrow i`;
          complete graph when omitted).
        - **output:** personalized parameters :math:`(|\mathcal{V}|, D)` and
          allocation matrix :math:`(|\mathcal{V}|, |\mathcal{V}|)`.

    Example:
        >>> gat = ClientGAT(in_channels=10, hidden_channels=4, heads=2)
        >>> theta_tilde, A = gat(torch.randn(5, 10))
        >>> A.shape, bool(torch.allclose(A.sum(dim=1), torch.ones(5)))
        (torch.Size([5, 5]), True)
    """

    def __init__(self, in_channels: int, hidden_channels: int = 64, heads: int = 8,
                 negative_slope: float = 0.2, similarity: bool = True,
                 similarity_scale: float = 80.0) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("hidden_channels", hidden_channels),
                            ("heads", heads)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        check_similarity_options(similarity, similarity_scale)
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.heads = heads
        self.negative_slope = negative_slope
        self.similarity = similarity
        self.similarity_scale = float(similarity_scale)
        self.conv = GATConv(in_channels, hidden_channels, heads=heads, concat=False,
                            negative_slope=negative_slope, add_self_loops=False,
                            edge_dim=heads if similarity else None)
        if similarity:
            # GATConv's edge path is fixed (see reset_parameters): the learned
            # part of the edge term lives in the two coefficient vectors.
            self.conv.lin_edge.weight.requires_grad_(False)
            self.conv.att_edge.requires_grad_(False)
            self.similarity_weight = Parameter(torch.empty(heads))
            self.self_weight = Parameter(torch.empty(heads))
        else:
            self.register_parameter("similarity_weight", None)
            self.register_parameter("self_weight", None)
        self.aggregation = GraphAggregation()
        self._edge_index: Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Re-draws the GAT's weights (glorot, as PyG's GATConv); the
        coefficients :math:`\beta_k` and :math:`\gamma_k` start at zero, so a
        fresh module scores exactly like the paper's GAT."""
        self.conv.reset_parameters()
        if self.similarity:
            with torch.no_grad():
                # Edge feature k goes to the C channels of head k, each read
                # with weight 1/C: head k's score gets feature k unchanged.
                heads, channels = self.heads, self.hidden_channels
                eye = torch.eye(heads, dtype=self.conv.lin_edge.weight.dtype,
                                device=self.conv.lin_edge.weight.device)
                self.conv.lin_edge.weight.copy_(eye.repeat_interleave(channels, dim=0))
                self.conv.att_edge.fill_(1.0 / channels)
                self.similarity_weight.zero_()
                self.self_weight.zero_()

    @property
    def similarity_coefficients(self) -> Tensor | None:
        r"""The per-head coefficients :math:`\beta_k = \tau \cdot`
        ``similarity_weight[k]`` of the similarity to the other clients
        :math:`(K,)` (``None`` with ``similarity=False``); detached."""
        if not self.similarity:
            return None
        return self.similarity_scale * self.similarity_weight.detach()

    @property
    def self_coefficients(self) -> Tensor | None:
        r"""The per-head self-loop coefficients :math:`\gamma_k = \tau \cdot`
        ``self_weight[k]`` :math:`(K,)` (``None`` with ``similarity=False``);
        detached."""
        if not self.similarity:
            return None
        return self.similarity_scale * self.self_weight.detach()

    def full_edge_index(self, num_clients: int, device: torch.device | None = None) -> Tensor:
        r"""All :math:`N^2` edges :math:`j \rightarrow i`, ordered so that edge
        :math:`iN + j` has source :math:`j` and target :math:`i` (cached for
        the last :math:`N` and device)."""
        device = torch.device("cpu") if device is None else torch.device(device)
        ei = self._edge_index
        if ei is None or ei.size(1) != num_clients * num_clients or ei.device != device:
            ei = complete_graph(num_clients, device=device)
            self._edge_index = ei
        return ei

    def edge_scores(self, x: Tensor, edge_index: Tensor) -> Tensor:
        r"""The added score of every edge and head, :math:`\beta_k s_{ij}` off
        the diagonal and :math:`\gamma_k` on it :math:`(|\mathcal{E}|, K)`
        (``similarity=True`` only)."""
        src, dst = edge_index[0], edge_index[1]
        is_self = (src == dst).unsqueeze(-1)
        sim = client_similarity(x)[dst, src].unsqueeze(-1)
        scores = torch.where(is_self, self.self_weight, sim * self.similarity_weight)
        return self.similarity_scale * scores

    def attention(self, x: Tensor, edge_index: Tensor | None = None) -> tuple[Tensor, Tensor]:
        r"""The allocation as edges: ``(edge_index, weight)`` with the mean
        attention over the heads of every edge :math:`j \rightarrow i`
        :math:`(|\mathcal{E}|,)` (all :math:`N^2` edges when ``edge_index`` is
        omitted, else its edges and a self loop per client)."""
        x = self._check(_client_params(x))
        n = x.size(0)
        h = F.layer_norm(x, (x.size(1),))
        edge_index = (self.full_edge_index(n, x.device) if edge_index is None
                      else _candidate_edges(edge_index, n))
        edge_attr = self.edge_scores(x, edge_index) if self.similarity else None
        _, (edge_index, alpha) = self.conv(h, edge_index, edge_attr=edge_attr,
                                           return_attention_weights=True)
        return edge_index, alpha.mean(dim=-1)

    def allocation(self, x: Tensor, edge_index: Tensor | None = None) -> Tensor:
        r"""Returns only the allocation matrix :math:`A` :math:`(N, N)`."""
        edges, weight = self.attention(x, edge_index)
        n = x.size(0)
        return weight.new_zeros(n, n).index_put((edges[1], edges[0]), weight)

    def forward(self, x: Tensor, edge_index: Tensor | None = None) -> tuple[Tensor, Tensor]:
        r"""Computes the personalized parameters and the allocation matrix.

        Args:
            x (torch.Tensor): client parameters :math:`(N, D)` (a graph in
                their place, accepted before, is deprecated: pass ``graph.x``).
            edge_index (torch.Tensor, optional): candidate collaborators,
                edges :math:`j \rightarrow i`; the aggregation propagates over
                them (default: the complete graph, one dense product).

        Returns:
            (torch.Tensor, torch.Tensor): :math:`\tilde{\Theta} = A\Theta`
            :math:`(N, D)` and :math:`A` :math:`(N, N)`; both keep the graph
            back to the GAT's weights.

        Raises:
            ValueError: if the parameters are not floating point, not of the
                GAT's dtype, or hold NaN or inf (one such client would give
                every row of :math:`A` NaN, since the softmax runs over all
                clients).
        """
        x = _client_params(x)
        edges, weight = self.attention(x, edge_index)
        n = x.size(0)
        allocation = weight.new_zeros(n, n).index_put((edges[1], edges[0]), weight)
        if edge_index is None:
            return self.aggregation(x, weight=allocation), allocation
        return self.aggregation(x, edges, weight), allocation

    def _check(self, x: Tensor) -> Tensor:
        if x.size(1) != self.in_channels:
            raise ValueError(f"clients sent {x.size(1)} parameters each, this ClientGAT "
                             f"was built for in_channels={self.in_channels}")
        dtype = self.conv.lin.weight.dtype
        if x.dtype != dtype:
            raise ValueError(f"client parameters are {x.dtype}, the GAT's weights are "
                             f"{dtype}: convert one of them (x.to({dtype}) or "
                             f"module.to({x.dtype}))")
        return x

    def __repr__(self) -> str:
        extra = "" if self.similarity else ", similarity=False"
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, "
                f"heads={self.heads}{extra})")


class AllocationLogits(torch.nn.Module):
    r"""The "without GAT" ablation of pFedGAT, from the "Personalized
    Federated Learning via Learning Dynamic Graphs" paper (Table 4): the
    allocation matrix is learned directly, one logit per pair.

    .. math::
        A_{ij} = \frac{\exp(\ell_{ij})}{\sum_{m=1}^N \exp(\ell_{im})}, \qquad
        \tilde{\theta}_i = \sum_{j=1}^N A_{ij}\, \theta_j .

    Logits start at zero (uniform :math:`A`, i.e. FedAvg with equal weights)
    and are trained with the same feedback as :class:`ClientGAT`
    (:func:`allocation_backward`). The paper reports it below the GAT version
    on CIFAR-100 in all five data splits (e.g. 49.87 vs. 51.32 for Dir(0.1)).
    Unlike the GAT, the table is tied to the client count: call
    :meth:`add_clients` when clients join.

    Args:
        num_clients (int): number of clients :math:`N`.

    Shapes:
        - **input:** client parameters :math:`(N, D)`, optional ``edge_index``
          :math:`(2, |\mathcal{E}|)` (the softmax then runs over each client's
          in-edges and itself).
        - **output:** personalized parameters :math:`(N, D)` and allocation
          matrix :math:`(N, N)`.
    """

    def __init__(self, num_clients: int) -> None:
        super().__init__()
        if not isinstance(num_clients, int) or num_clients < 1:
            raise ValueError(f"num_clients must be a positive int, got {num_clients!r}")
        self.num_clients = num_clients
        self.logits = Parameter(torch.empty(num_clients, num_clients))
        self.aggregation = GraphAggregation()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Sets all logits to zero (uniform allocation)."""
        with torch.no_grad():
            self.logits.zero_()

    @torch.no_grad()
    def add_clients(self, num_new: int) -> None:
        r"""Grows the table by ``num_new`` clients, keeping the learned logits.

        New entries (the new clients' rows and columns) are zero, the initial
        value. The logits become a new :class:`~torch.nn.Parameter`: build the
        optimizer again after calling this.
        """
        if not isinstance(num_new, int) or num_new < 0:
            raise ValueError(f"num_new must be a non-negative int, got {num_new!r}")
        n = self.num_clients
        grown = self.logits.new_zeros(n + num_new, n + num_new)
        grown[:n, :n] = self.logits
        self.logits = Parameter(grown)
        self.num_clients = n + num_new

    def allocation(self, x: Tensor | None = None, edge_index: Tensor | None = None) -> Tensor:
        r"""Returns only the allocation matrix :math:`A` :math:`(N, N)` (``x``,
        if given, is only checked for its client count)."""
        if x is not None:
            self._check(_client_params(x))
        if edge_index is None:
            return self.logits.softmax(dim=-1)
        edges, weight = self._edge_softmax(edge_index)
        n = self.num_clients
        return weight.new_zeros(n, n).index_put((edges[1], edges[0]), weight)

    def forward(self, x: Tensor, edge_index: Tensor | None = None) -> tuple[Tensor, Tensor]:
        r"""Computes the personalized parameters and the allocation matrix.

        Args:
            x (torch.Tensor): client parameters :math:`(N, D)` (a graph in
                their place, accepted before, is deprecated: pass ``graph.x``).
            edge_index (torch.Tensor, optional): candidate collaborators,
                edges :math:`j \rightarrow i` (a self loop per client is
                added); the aggregation propagates over them (default: the
                complete graph, one dense product).
        """
        x = self._check(_client_params(x))
        if edge_index is None:
            allocation = self.logits.softmax(dim=-1).to(x.dtype)
            return self.aggregation(x, weight=allocation), allocation
        edges, weight = self._edge_softmax(edge_index)
        weight = weight.to(x.dtype)
        n = self.num_clients
        allocation = weight.new_zeros(n, n).index_put((edges[1], edges[0]), weight)
        return self.aggregation(x, edges, weight), allocation

    def _edge_softmax(self, edge_index: Tensor) -> tuple[Tensor, Tensor]:
        # Row i's softmax over the logits of its in-edges and its self loop.
        edges = _candidate_edges(edge_index, self.num_clients)
        src, dst = edges[0], edges[1]
        return edges, softmax(self.logits[dst, src], dst, num_nodes=self.num_clients)

    def _check(self, x: Tensor) -> Tensor:
        if x.size(0) != self.num_clients:
            raise ValueError(f"got {x.size(0)} clients, the logit table has "
                             f"{self.num_clients}: call add_clients() when clients join")
        return x

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        # A saved table may be larger than this one (clients joined after it was
        # built): grow first so resuming works, also inside a parent module.
        logits = state_dict.get(prefix + "logits")
        if logits is not None and logits.dim() == 2 and logits.size(0) > self.num_clients:
            self.add_clients(int(logits.size(0)) - self.num_clients)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(num_clients={self.num_clients})"


def allocation_backward(theta_tilde: Tensor, feedback: Tensor,
                        mode: Literal["gradient", "delta"] = "gradient",
                        retain_graph: bool = False) -> None:
    r"""Backpropagates the clients' feedback on their personalized models into
    the allocation module (pFedGAT eq. 9-10).

    The total loss is :math:`L = \sum_i L_i(\tilde{\theta}_i)`, so

    .. math::
        \frac{\partial L}{\partial \psi} = \sum_i
        \left(\frac{\partial \tilde{\theta}_i}{\partial \psi}\right)^{\top}
        g_i, \qquad g_i = \frac{\partial L_i}{\partial \tilde{\theta}_i},

    for the server's parameters :math:`\psi` (GAT weights or logits). The
    scalar :math:`L_i` the paper says clients upload is not enough to compute
    this: the server needs :math:`g_i`. Two modes supply it:

    * ``"gradient"`` (exact): client :math:`i` evaluates
      :math:`\tilde{\theta}_i` on its held-out data and uploads
      :math:`g_i = \partial L_i / \partial \tilde{\theta}_i`, a
      :math:`D`-vector: **one extra model-sized upload per client per round**
      (on top of its model). ``feedback`` is :math:`G` with rows :math:`g_i`
      and the call is ``theta_tilde.backward(gradient=G)``.
    * ``"delta"`` (no extra upload): client :math:`i` starts its next local
      training from :math:`\tilde{\theta}_i` and uploads its model as usual;
      the server uses :math:`\Delta_i = \theta_i^{after} - \tilde{\theta}_i`
      and takes :math:`-\Delta_i` as the pseudo-gradient (local SGD moved
      against :math:`g_i`), the hypernetwork rule of pFedHN and FedAGHN:
      ``theta_tilde.backward(gradient=-Delta)``. The autograd graph of
      ``theta_tilde`` (which holds :math:`\Theta` and :math:`A`) must be kept
      until the deltas arrive, or ``theta_tilde`` recomputed from the same
      inputs.

    Rows of zeros mark clients that sent no feedback this round. Gradients
    accumulate into ``.grad`` as with any ``backward``: zero them and step the
    server optimizer (paper: SGD, lr 0.01) around this call.

    Args:
        theta_tilde (torch.Tensor): personalized parameters :math:`(N, D)`
            returned by :class:`ClientGAT` or :class:`AllocationLogits`.
        feedback (torch.Tensor): :math:`G` or :math:`\Delta`, :math:`(N, D)`.
        mode (str, optional): ``"gradient"`` or ``"delta"``.
            (default: :obj:`"gradient"`)
        retain_graph (bool, optional): keep the graph for another backward.
            (default: :obj:`False`)
    """
    if mode not in FEEDBACK_MODES:
        raise ValueError(f"mode must be one of {FEEDBACK_MODES}, got {mode!r}")
    if not theta_tilde.requires_grad:
        raise ValueError("theta_tilde carries no autograd graph: pass the output of the "
                         "allocation module's forward, computed with gradients enabled")
    if feedback.shape != theta_tilde.shape:
        raise ValueError(f"feedback has shape {tuple(feedback.shape)}, theta_tilde has "
                         f"{tuple(theta_tilde.shape)}: send one D-vector per client")
    feedback = feedback.detach().to(dtype=theta_tilde.dtype, device=theta_tilde.device)
    grad = feedback if mode == "gradient" else -feedback
    theta_tilde.backward(gradient=grad, retain_graph=retain_graph)
