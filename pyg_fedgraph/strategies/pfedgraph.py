"""pFedGraph: personalized aggregation over an inferred collaboration graph."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.nn.aggregation import GraphAggregation, dense_to_edges
from pyg_fedgraph.nn.collaboration_qp import (
    CODE_ALPHA,
    DEFAULT_ALPHA_PER_CLIENT,
    CollaborationQP,
    initial_collaboration_graph,
    update_similarity,
)
from pyg_fedgraph.nn.functional import sample_shares
from pyg_fedgraph.strategies.base import FederationContext, Strategy, TrainPlan
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.jobs import FunctionalEmbedding
from pyg_fedgraph.train.regularizers import Regularizer, per_client, register_regularizer

__all__ = ["PFedGraph", "cosine_regularizer"]

log = logging.getLogger(__name__)

SolverName = Literal["projection", "cvxpy"]
SimilarityName = Literal["updates", "embedding"]
EvaluateName = Literal["local", "aggregated"]
AlphaRule = Literal["paper", "code"]

# Guards the cosine against a zero vector (a model whose parameters are all zero).
_EPS = 1e-12


def cosine_regularizer(theta: Tensor, reference: Tensor, lam: float) -> Tensor:
    r"""The model-similarity term of pFedGraph's local objective (Ye et al.,
    2023, eq. (3)), written for one client (vectorized by the trainer).

    .. math::
        r(\theta) = -\lambda \cos(\theta, \bar{\theta}_i)
        = -\lambda \frac{\langle \theta, \bar{\theta}_i \rangle}
        {\|\theta\|\, \|\bar{\theta}_i\|}

    Minimizing it *increases* the cosine similarity between the local model
    and the aggregate (the paper's sign).

    Args:
        theta (torch.Tensor): the client's flat parameters :math:`(D,)`.
        reference (torch.Tensor): :math:`\bar{\theta}_i` :math:`(D,)`.
        lam (float): :math:`\lambda \geq 0`.
    """
    denom = (torch.linalg.vector_norm(theta) * torch.linalg.vector_norm(reference)).clamp_min(_EPS)
    return -lam * torch.dot(theta, reference) / denom


@register_regularizer("pfedgraph-cosine")
@dataclass
class CosineTerm(Regularizer):
    r"""pFedGraph's model-similarity term as declared client work:
    :func:`cosine_regularizer` of each client's parameters and its reference
    :math:`\bar{\theta}_i`.

    Args:
        reference (torch.Tensor): :math:`\bar{\theta}_i` of every client :math:`(S, D)`.
        lam (float): :math:`\lambda \geq 0`.
    """
    reference: Tensor = per_client()
    lam: float = 0.0

    def penalty(self, theta: Tensor, *rows: Tensor) -> Tensor:
        return cosine_regularizer(theta, rows[0], self.lam)


@register_strategy("pfedgraph")
class PFedGraph(Strategy):
    r"""pFedGraph from `"Personalized Federated Learning with Inferred
    Collaboration Graphs" <https://proceedings.mlr.press/v202/ye23b.html>`_
    (Ye et al., ICML 2023).

    Over the clients :math:`\mathcal{A}` that have trained at least once, the
    server measures the cosine similarity of their changes since the initial
    model :math:`\theta^{(0)}` (Appendix C.1.4,
    :func:`~pyg_fedgraph.nn.update_similarity`; values above ``threshold``
    become 1), infers the collaboration graph row by row (eq. (2)/(4),
    :class:`~pyg_fedgraph.nn.CollaborationQP`, with
    :math:`p_j = n_j / \sum_{k \in \mathcal{A}} n_k`) and aggregates
    (:class:`~pyg_fedgraph.nn.GraphAggregation`, one dense product, no loop
    over clients):

    .. math::
        S_{ij} &= \cos(\theta_i - \theta^{(0)}, \theta_j - \theta^{(0)}), \qquad
        \mathbf{w}_i = \arg\min_{\mathbf{x} \geq 0,\ \mathbf{1}^\top\mathbf{x} = 1}
        \|\mathbf{x} - \mathbf{p}\|^2 - \alpha\, \mathbf{s}_i^\top \mathbf{x}, \\
        \tilde{\theta}_i &= \sum_j W_{ij}\, \theta_j, \qquad
        \bar{\theta}_i = \sum_j W_{ij}\, \frac{\theta_j}{\|\theta_j\|} .

    Client :math:`i` starts from :math:`\tilde{\theta}_i` and, from its second
    round on, minimizes (eq. (3), :func:`cosine_regularizer`)
    :math:`H_i(\theta) = F_i(\theta) - \lambda \cos(\theta, \bar{\theta}_i)`,
    with :math:`\tilde{\theta}_i` in place of :math:`\bar{\theta}_i` when
    ``normalized_aggregate=False``. The regularizer's sign and scale, round 1,
    partial participation, evaluation, the default :math:`\alpha` and the
    paper's settings: :doc:`/methods/pfedgraph`.

    Args:
        alpha (float, optional): similarity weight :math:`\alpha` of the QP;
            :obj:`None` follows ``alpha_rule`` (default: :obj:`None`).
        alpha_rule (str, optional): the default of :math:`\alpha` when
            ``alpha=None``: ``"paper"`` (:math:`0.08 N`, Appendix C.1.4) or
            ``"code"`` (:math:`1.25`, the authors' scripts) (default:
            ``"paper"``).
        lam (float, optional): regularization weight :math:`\lambda` of eq.
            (3) (default: :obj:`0.01`, Appendix C.1.4).
        threshold (float, optional): similarities above it become :math:`1`;
            :obj:`None` keeps the raw cosines (default: :obj:`0.9`).
        layers (str or list of str, optional): module-name substrings
            selecting the layers whose parameters enter the similarity;
            :obj:`None` uses all layers (default: :obj:`None`).
        normalized_aggregate (bool, optional): regularize with
            :math:`\bar{\theta}_i` (:obj:`True`) or with
            :math:`\tilde{\theta}_i` (default: :obj:`True`).
        solver (str, optional): ``"projection"`` (exact batched simplex
            projection) or ``"cvxpy"`` (reference QP solver) (default:
            ``"projection"``).
        evaluate (str, optional): ``"local"`` (each client's own latest model:
            :meth:`personalized_params` returns :obj:`None`) or
            ``"aggregated"`` (:math:`\tilde{\theta}_i`) (default: ``"local"``).
        similarity (str, optional): ``"updates"`` (the paper's) or
            ``"embedding"`` (cosines of the clients' functional embeddings, an
            ablation) (default: ``"updates"``).

    **State.** None of its own: :math:`W`, :math:`S` and the aggregates are
    functions of the engine's client table
    (:attr:`FederationContext.clients`), recomputed when it changes; with
    ``similarity="embedding"``, the buffer ``embeddings`` :math:`(N, H)`.

    Shapes:
        - **derived:** graph :math:`W` and similarity :math:`S` :math:`(N, N)`
          (float64), aggregates :math:`\tilde{\Theta}, \bar{\Theta}`
          :math:`(N, D)`.

    Example:
        >>> from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
        >>> cfg = ExperimentConfig(dataset="digits", strategy="pfedgraph",
        ...                        rounds=3, overrides={"lam": 0.1})
        >>> history = build_simulator(cfg).run()
    """

    def __init__(self, alpha: Annotated[float | None, Range(ge=0.0)] = None,
                 alpha_rule: AlphaRule = "paper",
                 lam: Annotated[float, Range(ge=0.0), Search(1e-3, 1.0, log=True)] = 0.01,
                 threshold: Annotated[float | None, Range(ge=-1.0, le=1.0)] = 0.9,
                 layers: str | list[str] | None = None,
                 normalized_aggregate: bool = True, solver: SolverName = "projection",
                 evaluate: EvaluateName = "local",
                 similarity: SimilarityName = "updates") -> None:
        super().__init__()
        if isinstance(layers, list) and not (layers and all(layers)):
            raise ValueError(f"layers must be a module-name substring, a non-empty list of "
                             f"them, or None for all layers; got {layers!r}")
        self.alpha_rule = alpha_rule
        self.lam = lam
        self.threshold = threshold
        self.layers = layers
        self.normalized_aggregate = normalized_aggregate
        self.solver = solver
        self.evaluate = evaluate
        self.similarity = similarity
        # The clients' latest functional embeddings (similarity="embedding"): (N, H); state
        # only then (with the paper's similarity the strategy keeps none of its own).
        self.register_buffer("embeddings", torch.empty(0),
                             persistent=similarity == "embedding")
        # alpha is checked by the operator; the paper's None is resolved to 0.08 N in setup().
        self.qp = CollaborationQP(CODE_ALPHA if alpha is None and alpha_rule == "code"
                                  else alpha, solver=solver)
        self.alpha = alpha
        self.aggregation = GraphAggregation()
        # Derived from `layers` and the layout in setup(): not state.
        self.register_buffer("similarity_mask", None, persistent=False)
        self._graph_cache: tuple[int, Tensor, Tensor] | None = None
        self._aggregate_cache: tuple[int, Tensor, Tensor | None] | None = None

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        if self.alpha is None and self.alpha_rule == "paper":
            # Appendix C.1.4: alpha = 0.08 K for the K clients of the federation, not
            # for however many have trained so far.
            self.qp = CollaborationQP(DEFAULT_ALPHA_PER_CLIENT * ctx.num_clients,
                                      solver=self.solver)
        self.similarity_mask = (None if self.layers is None
                                else ctx.layout.mask(ctx.layout.select_layers(self.layers)))
        self.embeddings = torch.empty(0, device=ctx.init_params.device)
        self._graph_cache = self._aggregate_cache = None

    # ----------------------------------------------------------- derived state
    def _graphs(self) -> tuple[Tensor, Tensor]:
        r"""``(W, S)`` :math:`(N, N)` for the current client table."""
        ctx = self._require_setup()
        table = ctx.table
        if self._graph_cache is not None and self._graph_cache[0] == table.version:
            return self._graph_cache[1], self._graph_cache[2]
        n = ctx.num_clients
        device = table.params.device
        weight = initial_collaboration_graph(n, dtype=torch.float64, device=device)
        similarity = torch.eye(n, dtype=torch.float64, device=device)
        active = table.trained.nonzero().view(-1)
        if active.numel():
            if self.similarity == "embedding":
                sim = update_similarity(self._active_embeddings(active),
                                        threshold=self.threshold).double()
            else:
                delta = table.params[active] - ctx.init_params
                sim = update_similarity(delta, mask=self.similarity_mask,
                                        threshold=self.threshold).double()
            rows = self.qp(sim, sample_shares(ctx.num_samples[active], torch.float64))
            # Rows of trained clients are solved over the trained clients; the
            # other rows keep their (initial) weights.
            block = (active.unsqueeze(1), active.unsqueeze(0))
            weight[active] = 0.0
            weight[block] = rows
            similarity[block] = sim
            log.debug("collaboration graph over %d clients, mean self weight %.3f",
                      active.numel(), float(rows.diagonal().mean()))
        self._graph_cache = (table.version, weight, similarity)
        return weight, similarity

    def _active_embeddings(self, active: Tensor) -> Tensor:
        if self.embeddings.dim() != 2:
            raise ValueError("pFedGraph with similarity='embedding' has no functional "
                             "embedding of the clients yet: they come with their trained "
                             "models (graph.embedding)")
        return self.embeddings[active]

    def _aggregates(self) -> tuple[Tensor, Tensor | None]:
        r"""``(theta_tilde, theta_bar)`` :math:`(N, D)` for the current table
        (``theta_bar`` ``None`` before any client trained or when not used)."""
        ctx = self._require_setup()
        table = ctx.table
        if self._aggregate_cache is not None and self._aggregate_cache[0] == table.version:
            return self._aggregate_cache[1], self._aggregate_cache[2]
        latest = table.params
        if not bool(table.trained.any()):
            # Every client holds the initial model: so does W latest, up to rounding.
            theta_tilde, theta_bar = latest, None
        else:
            weight = self._graphs()[0].to(latest.dtype)
            theta_tilde = self.aggregation(latest, weight=weight)
            theta_bar = None
            if self.normalized_aggregate:
                norm = torch.linalg.vector_norm(latest, dim=1, keepdim=True).clamp_min(_EPS)
                theta_bar = self.aggregation(latest / norm, weight=weight)
        self._aggregate_cache = (table.version, theta_tilde, theta_bar)
        return theta_tilde, theta_bar

    @property
    def theta_tilde(self) -> Tensor:
        r"""The personalized aggregates :math:`\tilde{\Theta} = W \Theta`
        :math:`(N, D)` of the current client table."""
        return self._aggregates()[0]

    @property
    def theta_bar(self) -> Tensor | None:
        r"""The normalized aggregates :math:`\bar{\Theta}` :math:`(N, D)` that
        regularize local training (``None`` before any client trained or with
        ``normalized_aggregate=False``)."""
        return self._aggregates()[1]

    # ------------------------------------------------------------------ rounds
    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        clients = clients.to(torch.long)
        theta_tilde, theta_bar = self._aggregates()
        regularizer = None
        if self.lam > 0 and bool(self._require_setup().table.trained.any()):
            reference = theta_bar if theta_bar is not None else theta_tilde
            regularizer = CosineTerm(reference[clients], lam=self.lam)
        jobs: tuple[FunctionalEmbedding, ...] = ()
        if self.similarity == "embedding":
            jobs = (FunctionalEmbedding(seed=self._require_setup().seed),)
        return TrainPlan(params=theta_tilde[clients].clone(), regularizer=regularizer,
                         jobs=jobs)

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        # The engine writes the uploads to the client table; the graph and the
        # aggregates are recomputed from it when next needed.
        if self.similarity != "embedding" or graph.num_clients == 0:
            return None
        if "embedding" not in graph:
            raise ValueError("pFedGraph with similarity='embedding' needs the clients' "
                             "functional embeddings as graph.embedding: the output of the "
                             "FunctionalEmbedding job of its plan")
        emb = graph.embedding.detach()
        n = self._require_setup().num_clients
        if self.embeddings.dim() != 2 or self.embeddings.size(1) != emb.size(1):
            self.embeddings = emb.new_zeros(n, emb.size(1))
        self.embeddings[graph.client_id.to(self.embeddings.device)] = emb.to(self.embeddings)
        self._graph_cache = self._aggregate_cache = None
        return None

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        # The embeddings' width is known once clients have sent some: take the saved one.
        saved = state_dict.get(prefix + "embeddings")
        if isinstance(saved, Tensor):
            self.embeddings = saved.new_zeros(saved.shape).to(self.embeddings.device)
        self._graph_cache = self._aggregate_cache = None
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        self._require_setup()
        if self.evaluate == "local":
            return None
        return self._aggregates()[0][clients.to(torch.long)].clone()

    # -------------------------------------------------------------- inspection
    def collaboration_graph(self) -> Tensor | None:
        r"""The collaboration graph :math:`W` :math:`(N, N)` (row :math:`i` =
        weights client :math:`i` gives; the initial graph before round 1)."""
        return self._graphs()[0].clone()

    def last_edges(self) -> tuple[Tensor, Tensor] | None:
        r"""The QP-inferred graph as ``(edge_index, edge_weight)`` with edges
        :math:`j \rightarrow i` of weight :math:`W_{ij} > 0` (PyG convention,
        see :func:`~pyg_fedgraph.nn.aggregation.dense_to_edges`); :obj:`None`
        before any client trained."""
        if not bool(self._require_setup().table.trained.any()):
            return None
        return dense_to_edges(self._graphs()[0])

    def last_similarity(self) -> Tensor:
        r"""The latest similarity matrix :math:`S` :math:`(N, N)` fed to the
        QP (identity before round 1; rows and columns of clients that never
        trained are those of the identity)."""
        return self._graphs()[1].clone()
