"""SFL: structure-aware personalized models propagated over a client graph."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

import torch
from torch import Tensor
from torch_geometric.utils import add_remaining_self_loops

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.nn.khop import KHopPropagation
from pyg_fedgraph.strategies.base import FederationContext, Strategy, TrainPlan
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.regularizers import Regularizer, per_client, register_regularizer
from pyg_fedgraph.utils.graph import complete_graph

__all__ = ["SFL", "SFL_AUTHORS_CODE", "sfl_penalty"]

log = logging.getLogger(__name__)

NormalizationName = Literal["sym", "row"]
StartName = Literal["propagated", "local", "global"]
MissingGraphName = Literal["complete", "error"]
MemoryName = Literal["uploads", "propagated"]
PenaltyName = Literal["squared", "distance"]

#: The options with which :class:`SFL` trains as the authors' released code
#: does (dawenzi098/SFL-Structural-Federated-Learning, ``--agg graph``): every
#: stored model propagated each round, clients starting from the read-out,
#: the row-normalized graph, and no pull (that code's regularizer is computed
#: from detached copies and reaches no gradient). ``SFL(**SFL_AUTHORS_CODE)``,
#: or ``--set`` each of them; what each one changes: :doc:`/methods/sfl`.
#: Panacea's baselines ran this code ("We use the original implementation").
SFL_AUTHORS_CODE: Final[dict[str, Any]] = {"memory": "propagated", "lam": 0.0,
                                           "start": "global", "normalization": "row"}

#: How far from one a row sum of the propagation matrix may be before
#: :class:`SFL` warns that its structure-aware models scale the clients' ones.
_CONVEX_TOLERANCE = 0.05


def sfl_penalty(theta: Tensor, personalized: Tensor, *global_model: Tensor, lam: float,
                global_lam: float = 0.0, penalty: PenaltyName = "squared") -> Tensor:
    r"""SFL's local regularizer for one client,

    .. math::
        \frac{\lambda}{2} \lVert \theta - u_i \rVert^2
        + \frac{\lambda_g}{2} \lVert \theta - w \rVert^2
        \quad(\text{``squared''}), \qquad
        \lambda \lVert \theta - u_i \rVert
        + \lambda_g \lVert \theta - w \rVert
        \quad(\text{``distance''}),

    with :math:`u_i` the client's structure-aware model and :math:`w` the
    global read-out (the second term only when ``global_model`` is given).
    ``"distance"`` is the formula of the authors' code (``pairwise_distance``
    in ``federated.py``): a pull of constant strength :math:`\lambda`
    towards :math:`u_i`, however close; its gradient at :math:`\theta = u_i`
    is taken as 0. (That code computes it from detached copies of the model,
    so there it changes the reported loss and never the gradient.)

    Args:
        theta (torch.Tensor): the client's parameters :math:`(D,)`.
        personalized (torch.Tensor): :math:`u_i` :math:`(D,)`.
        *global_model (torch.Tensor): optionally :math:`w` :math:`(D,)`.
        lam (float): :math:`\lambda`.
        global_lam (float, optional): :math:`\lambda_g` (default: :obj:`0.0`).
        penalty (str, optional): ``"squared"`` or ``"distance"``
            (default: ``"squared"``).
    """
    if penalty == "distance":
        out = lam * torch.linalg.vector_norm(theta - personalized)
        for w in global_model:
            out = out + global_lam * torch.linalg.vector_norm(theta - w)
        return out
    out = 0.5 * lam * (theta - personalized).pow(2).sum()
    for w in global_model:
        out = out + 0.5 * global_lam * (theta - w).pow(2).sum()
    return out


@register_regularizer("sfl")
@dataclass
class SFLPenalty(Regularizer):
    r""":func:`sfl_penalty` as declared client work.

    Args:
        personalized (torch.Tensor): every client's :math:`u_i` :math:`(S, D)`.
        global_model (torch.Tensor, optional): :math:`w` for every client
            :math:`(S, D)` (default: :obj:`None`: no second term).
        lam (float): :math:`\lambda` (default: :obj:`0.0`).
        global_lam (float): :math:`\lambda_g` (default: :obj:`0.0`).
        penalty_form (str): ``"squared"`` or ``"distance"`` (default: ``"squared"``).
    """
    personalized: Tensor = per_client()
    global_model: Tensor | None = per_client(None)
    lam: float = 0.0
    global_lam: float = 0.0
    penalty_form: PenaltyName = "squared"

    def penalty(self, theta: Tensor, *rows: Tensor) -> Tensor:
        return sfl_penalty(theta, *rows, lam=self.lam, global_lam=self.global_lam,
                           penalty=self.penalty_form)


@register_strategy("sfl")
class SFL(Strategy):
    r"""Structured federated learning (SFL) from `"Personalized Federated
    Learning With a Graph" <https://arxiv.org/abs/2203.00829>`_ (Chen et al.,
    IJCAI 2022), parameter-free propagation variant.

    The server keeps every client's latest local model :math:`v_j` (rows of
    :math:`V`) and propagates them :math:`K` hops over the client graph
    :math:`A` with self loops, giving each client a structure-aware model
    :math:`u_i` (rows of :math:`U`; :class:`~pyg_fedgraph.nn.KHopPropagation`,
    sparse products):

    .. math::
        U = \hat{A}^{K} V, \qquad
        \hat{A} = \tilde{D}^{-1/2} (A + I) \tilde{D}^{-1/2}
        \;\;(\text{``sym''}) \quad\text{or}\quad
        \hat{A} = \tilde{D}^{-1} (A + I) \;\;(\text{``row''}),

    with :math:`\tilde{D}` the degree matrix of :math:`A + I`. Client :math:`i`
    then trains from :math:`u_i` with

    .. math::
        \min_{\theta}\; F_i(\theta) + \frac{\lambda}{2}
        \lVert \theta - u_i \rVert^2
        \;\Big(+ \frac{\lambda_g}{2} \lVert \theta - w \rVert^2\Big),
        \qquad w = \frac{1}{N}\sum_i u_i ,

    and uploads its trained model as the new :math:`v_i`;
    :meth:`personalized_params` returns :math:`u_i`. No GCN weight is learned
    and :math:`A` is fixed (SFL*'s graph learning is not implemented); without
    a prior graph the complete graph is used. How this differs from the paper
    and the authors' code, and the settings that reproduce that code:
    :doc:`/methods/sfl`.

    Args:
        num_hops (int, optional): propagation hops :math:`K`; :obj:`0` means
            :math:`U = V` (default: :obj:`3`).
        lam (float, optional): :math:`\lambda`, weight of the pull towards
            :math:`u_i`; :obj:`0` disables it (default: :obj:`0.3`).
        normalization (str, optional): ``"sym"`` or ``"row"``
            (default: ``"sym"``).
        start (str, optional): the model a client starts local training
            from: ``"propagated"`` (:math:`u_i`), ``"local"`` (its own last
            model :math:`v_i`) or ``"global"`` (the read-out :math:`w`)
            (default: ``"propagated"``).
        global_lam (float, optional): :math:`\lambda_g`, weight of the pull
            towards the read-out :math:`w` (default: :obj:`0.0`).
        missing_graph (str, optional): ``"complete"`` or ``"error"``, what to
            do when the dataset has no prior graph (default: ``"complete"``).
        memory (str, optional): ``"uploads"`` (each client's latest upload;
            clients that never uploaded send nothing) or ``"propagated"``
            (every stored model is propagated each round, as the authors' code)
            (default: ``"uploads"``).
        penalty (str, optional): ``"squared"`` or ``"distance"``, the form of
            the pull towards :math:`u_i` and :math:`w`
            (:func:`sfl_penalty`) (default: ``"squared"``).

    **State.** With ``memory="uploads"``, none of its own (:math:`V` is the
    engine's client table, :attr:`FederationContext.clients`); with
    ``memory="propagated"``, the stored models ``stored_params``, which are
    also :math:`U`.

    Shapes:
        - **derived:** structure-aware models :math:`U` :math:`(N, D)`.
        - **state** (``memory="propagated"``): ``stored_params``
          :math:`(N, D)`.

    Example:
        >>> from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
        >>> cfg = ExperimentConfig(dataset="digits", strategy="sfl", rounds=3,
        ...                        overrides={"num_hops": 2, "lam": 0.1})
        >>> history = build_simulator(cfg).run()
    """

    def __init__(self, num_hops: Annotated[int, Range(ge=0), Search(1, 4)] = 3,
                 lam: Annotated[float, Range(ge=0.0), Search(0.01, 1.0, log=True)] = 0.3,
                 normalization: NormalizationName = "sym", start: StartName = "propagated",
                 global_lam: Annotated[float, Range(ge=0.0)] = 0.0,
                 missing_graph: MissingGraphName = "complete",
                 memory: MemoryName = "uploads", penalty: PenaltyName = "squared") -> None:
        super().__init__()
        self.num_hops = num_hops
        self.lam = lam
        self.normalization = normalization
        self.start = start
        self.global_lam = global_lam
        self.missing_graph = missing_graph
        self.memory = memory
        self.penalty = penalty
        if memory == "propagated":  # only then: older states of the default keep their keys
            self.register_buffer("stored_params", torch.empty(0))
        self.propagation = KHopPropagation(num_hops, normalization)
        self._cache: tuple[int, Tensor] | None = None
        # The graph with self loops is rebuilt from the context by setup().
        self.register_buffer("graph_edge_index", torch.empty(2, 0, dtype=torch.long),
                             persistent=False)
        self.register_buffer("graph_edge_weight", torch.empty(0), persistent=False)

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        n = ctx.num_clients
        init = ctx.init_params.detach()
        edge_index, edge_weight = ctx.edge_index, ctx.edge_weight
        if edge_index is None:
            if self.missing_graph == "error":
                raise ValueError("strategy 'sfl' needs a prior client graph; use a dataset "
                                 "that provides edge_index (e.g. fl60), or "
                                 "missing_graph='complete' to fall back to the complete graph")
            log.warning("sfl: the dataset has no prior client graph; falling back to the "
                        "complete graph over %d clients (every client averages all models)", n)
            edge_index = complete_graph(n)
            edge_weight = None
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"the prior edge_index must be (2, E), got {tuple(edge_index.shape)}")
        if edge_index.numel() and (int(edge_index.max()) >= n or int(edge_index.min()) < 0):
            raise ValueError(f"the prior edge_index names client {int(edge_index.max())}, "
                             f"the federation has {n} clients")
        if edge_weight is None:
            edge_weight = init.new_ones(edge_index.size(1))
        if edge_weight.numel() != edge_index.size(1):
            raise ValueError(f"the prior edge_weight has {edge_weight.numel()} entries for "
                             f"{edge_index.size(1)} edges")
        edge_index, edge_weight = add_remaining_self_loops(
            edge_index.to(torch.long), edge_weight.to(init.dtype), fill_value=1.0, num_nodes=n)
        self.graph_edge_index = edge_index.to(init.device)
        self.graph_edge_weight = edge_weight.to(init.device)
        self._cache = None
        self._warn_if_not_convex(n)
        if self.memory == "propagated":
            self.stored_params = init.unsqueeze(0).repeat(n, 1)

    def row_sums(self) -> Tensor:
        r"""The row sums of :math:`\hat{A}^{K}` with every client uploading,
        :math:`\hat{A}^{K}\mathbf{1}` :math:`(N,)`: the total weight with
        which :math:`u_i` sums the models. All ones with ``"row"``; with
        ``"sym"`` only on regular graphs (e.g. the complete graph)."""
        ctx = self._require_setup()
        ones = self.graph_edge_weight.new_ones(ctx.num_clients, 1)
        return self.propagation(ones, self.graph_edge_index, self.graph_edge_weight)[0][:, 0]

    def _warn_if_not_convex(self, n: int) -> None:
        r"""Logs a warning when :math:`u_i` would scale the models: a row of
        :math:`\hat{A}^{K}` summing to more than 5% away from one."""
        if self.normalization != "sym" or self.num_hops == 0 or n == 0:
            return
        sums = self.row_sums()
        if float((sums - 1).abs().max()) > _CONVEX_TOLERANCE:
            log.warning("sfl: with normalization='sym' the rows of the propagation matrix "
                        "sum to %.2f-%.2f on this graph, so each structure-aware model is a "
                        "scaled sum of models, not an average, which can make training unstable; "
                        "normalization='row' keeps them averages",
                        float(sums.min()), float(sums.max()))

    # ------------------------------------------------------------- operator
    def propagate(self, x: Tensor) -> Tensor:
        r"""Applies :math:`\hat{A}^{K}` (restricted to clients that have
        uploaded) to ``x`` :math:`(N, F)`; rows of clients that receive no
        model are zero."""
        ctx = self._require_setup()
        return self.propagation(x, self.graph_edge_index, self.graph_edge_weight,
                                sources=ctx.table.trained)[0]

    @property
    def propagated(self) -> Tensor:
        r"""The structure-aware models :math:`U` :math:`(N, D)` of the current
        client table (the initial model for clients that receive nothing)."""
        ctx = self._require_setup()
        if self.memory == "propagated":
            return self.stored_params
        table = ctx.table
        if self._cache is None or self._cache[0] != table.version:
            u, receives = self.propagation(table.params, self.graph_edge_index,
                                           self.graph_edge_weight, sources=table.trained)
            self._cache = (table.version,
                           torch.where(receives.unsqueeze(1), u, ctx.init_params.unsqueeze(0)))
        return self._cache[1]

    def global_model(self) -> Tensor:
        r"""The read-out :math:`w`: mean of the structure-aware models of the
        clients that have uploaded (the initial model before any upload)."""
        ctx = self._require_setup()
        if self.memory == "propagated":  # the code's read_out: all N clients
            return self.stored_params.mean(dim=0)
        uploaded = ctx.table.trained
        if not bool(uploaded.any()):
            return ctx.init_params.clone()
        return self.propagated[uploaded].mean(dim=0)

    # --------------------------------------------------------------- rounds
    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        clients = clients.to(torch.long)
        u = self.propagated[clients]
        w = self.global_model().expand_as(u) if (self.start == "global" or self.global_lam) \
            else None
        if self.start == "propagated":
            params: Tensor | None = u.clone()
        elif self.start == "global":
            assert w is not None  # computed for start="global"
            params = w.clone()
        else:
            params = None
        regularizer = None
        if self.lam or self.global_lam:
            regularizer = SFLPenalty(u, w if self.global_lam else None, lam=self.lam,
                                     global_lam=self.global_lam, penalty_form=self.penalty)
        return TrainPlan(params=params, regularizer=regularizer)

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        # memory="uploads": the engine writes the uploads (V) to the client
        # table; U is propagated from it when next needed.
        log.debug("round %d: %d clients uploaded", rnd, graph.num_clients)
        if self.memory == "propagated" and graph.num_clients:
            stored = self.stored_params.clone()
            stored[graph.client_id.to(stored.device)] = graph.x.detach().to(stored)
            self.stored_params = self.propagation(
                stored, self.graph_edge_index, self.graph_edge_weight)[0]

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        self._require_setup()
        return self.propagated[clients.to(torch.long)].clone()

    def collaboration_graph(self) -> Tensor | None:
        r"""The propagation matrix :math:`M = \hat{A}^{K}` :math:`(N, N)`
        restricted to clients that have uploaded (:math:`u_i = \sum_j M_{ij}
        v_j`; a zero row means the client keeps the initial model);
        ``None`` before the first upload. With ``memory="propagated"``, the
        mixing one aggregation applies to the stored models, over all
        clients (:math:`S \leftarrow M S`)."""
        ctx = self._require_setup()
        if self.memory == "propagated":  # one round's mixing, over all clients
            return self.propagation(torch.eye(ctx.num_clients, dtype=ctx.init_params.dtype,
                                              device=self.graph_edge_index.device),
                                    self.graph_edge_index, self.graph_edge_weight)[0]
        if not bool(ctx.table.trained.any()):
            return None
        return self.propagate(torch.eye(ctx.num_clients, dtype=ctx.init_params.dtype,
                                        device=self.graph_edge_index.device))
