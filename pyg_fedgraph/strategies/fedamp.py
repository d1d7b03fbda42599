"""FedAMP (Huang et al., AAAI 2021) in its original form and its heuristic form HeurFedAMP:
attentive message passing between clients."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.nn.aggregation import GraphAggregation
from pyg_fedgraph.nn.functional import pairwise_cosine
from pyg_fedgraph.strategies.base import FederationContext, Strategy, TrainPlan
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.regularizers import Regularizer, per_client, register_regularizer

__all__ = ["FedAMP", "HeurFedAMP", "fedamp_weights", "heur_fedamp_weights"]

log = logging.getLogger(__name__)


def heur_fedamp_weights(x: Tensor, sigma: float = 10.0, self_weight: float = 0.3) -> Tensor:
    r"""HeurFedAMP's message-passing weights :math:`\xi` (the heuristic
    variant in the FedAMP paper, used as the pFedGraph baseline).

    .. math::
        \xi_{ij} = (1 - \xi_{ii})\,
        \frac{\exp(\sigma \cos(x_i, x_j))}
             {\sum_{h \neq i} \exp(\sigma \cos(x_i, x_h))}
        \quad (j \neq i), \qquad \xi_{ii} = \text{self\_weight},

    so every row sums to one. With a single client there is nobody else to
    attend to and :math:`\xi = [1]`. A zero row of ``x`` has cosine 0 to
    everyone.

    Args:
        x (torch.Tensor): one vector per client :math:`(S, D)` (parameters, or
            parameters minus the initial model).
        sigma (float, optional): scale :math:`\sigma` (default: :obj:`10.0`)
        self_weight (float, optional): :math:`\xi_{ii}` (default: :obj:`0.3`)

    Shapes:
        - **input:** :math:`(S, D)`
        - **output:** :math:`(S, S)`, row :math:`i` = weights client :math:`i` gives.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (num_clients, num_params), got shape {tuple(x.shape)}")
    s = x.size(0)
    if s == 1:
        return x.new_ones(1, 1)
    logits = sigma * pairwise_cosine(x)
    eye = torch.eye(s, dtype=torch.bool, device=x.device)
    attention = logits.masked_fill(eye, float("-inf")).softmax(dim=1)
    return (1.0 - self_weight) * attention + self_weight * eye.to(x.dtype)


def fedamp_weights(x: Tensor, sigma: float = 1.0, alpha_k: float = 1.0,
                   sources: Tensor | None = None) -> Tensor:
    r"""FedAMP's message-passing weights :math:`\xi` (Huang et al., AAAI 2021,
    Sec. 4.1, eq. (5)-(6)): one gradient step of size :math:`\alpha_k` on the
    attention-inducing term :math:`\sum_{i<j} A(\lVert x_i - x_j\rVert^2)`
    with :math:`A(d) = 1 - e^{-d/\sigma}`, written as a convex-looking
    combination of the clients' models:

    .. math::
        \xi_{ij} = \alpha_k\, A'(\lVert x_i - x_j \rVert^2)
                 = \frac{\alpha_k}{\sigma}\, e^{-\lVert x_i - x_j \rVert^2 / \sigma}
        \quad (j \neq i), \qquad
        \xi_{ii} = 1 - \sum_{j \neq i} \xi_{ij},

    so every row sums to one and :math:`u_i = \sum_j \xi_{ij} x_j`. Closer
    models get larger weights. The self weight is non-negative only when
    :math:`\alpha_k \sum_{j \neq i} A'(\cdot) \le 1`, which
    :math:`\alpha_k \le \sigma / (N - 1)` guarantees; otherwise :math:`u_i`
    extrapolates away from :math:`x_i` (the formula is kept as written).
    Squared distances are computed from differences
    (:func:`torch.cdist` without the matrix-product shortcut), which keeps
    them exact for nearby models of large norm.

    Args:
        x (torch.Tensor): client models :math:`(N, D)`.
        sigma (float, optional): :math:`\sigma` (default: :obj:`1.0`)
        alpha_k (float, optional): step size :math:`\alpha_k` (default: :obj:`1.0`)
        sources (torch.Tensor, optional): bool mask :math:`(N,)` of the clients
            whose models may be passed to others (default: all); the others
            only keep their self weight.

    Shapes:
        - **input:** :math:`(N, D)`
        - **output:** :math:`(N, N)`, row :math:`i` = weights client :math:`i` gives.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (num_clients, num_params), got shape {tuple(x.shape)}")
    if sigma <= 0 or alpha_k <= 0:
        raise ValueError(f"sigma and alpha_k must be > 0, got sigma={sigma}, alpha_k={alpha_k}")
    n = x.size(0)
    dist2 = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    xi = (alpha_k / sigma) * torch.exp(-dist2 / sigma)
    keep = ~torch.eye(n, dtype=torch.bool, device=x.device)
    if sources is not None:
        if sources.shape != (n,):
            raise ValueError(f"sources must be a mask of the {n} clients, got shape "
                             f"{tuple(sources.shape)}")
        keep &= sources.to(device=x.device, dtype=torch.bool).unsqueeze(0)
    xi = xi * keep
    return xi + torch.diag_embed(1.0 - xi.sum(dim=1))


@register_strategy("heurfedamp")
class HeurFedAMP(Strategy):
    r"""HeurFedAMP, the heuristic form of FedAMP from the `"Personalized
    Cross-Silo Federated Learning on Non-IID Data"
    <https://arxiv.org/abs/2007.03797>`_ paper.

    After local training the server builds, for every sampled client
    :math:`i`, a cloud model by attentive message passing over the uploaded
    models (weights :func:`heur_fedamp_weights`):

    .. math::
        u_i = \sum_{j} \xi_{ij}\, \theta_j, \qquad
        \xi_{ij} \propto \exp(\sigma \cos(\theta_i, \theta_j)) \;(j \neq i),
        \quad \xi_{ii} = \text{self\_weight},

    and in its next round client :math:`i` continues from its own model with
    the proximal objective

    .. math::
        \min_{\theta_i}\; F_i(\theta_i) + \frac{\lambda}{2\alpha_k}
        \|\theta_i - u_i\|_2^2 .

    Clients are evaluated with their own (personalized) models
    :math:`\theta_i`. This is what pFedGraph's tables report as "FedAMP"
    (their appendix C.1.4: "we use the heuristic improvement version"); the
    original FedAMP is :class:`FedAMP` (``fedamp``). Until this strategy had
    its own name it was registered as ``fedamp``: states saved under that
    name are refused by :class:`FedAMP` with a message naming ``heurfedamp``.
    The aggregation is one dense :class:`~pyg_fedgraph.nn.GraphAggregation`
    over :math:`\xi` (no :math:`(E, D)` messages).

    Implementation choices, following the pFedGraph authors' HeurFedAMP
    baseline (their appendix C.1.4 and code):

    * ``centered=True`` takes the cosine between the models minus the initial
      model, :math:`\theta_j - \theta^0` ("similarity based on current model
      subtracted by initial global model (Huang et al., 2021)"); the FedAMP
      paper writes the cosine of the parameters themselves
      (``centered=False``).
    * A client trains without the proximal term until it has a cloud model
      (its first round).
    * Local training continues from the client's own model, as the authors'
      code; :math:`u_i` enters only through the proximal term.
    * With partial participation, :math:`\xi` is computed among the clients
      sampled this round; the rows of the others keep their previous cloud
      model (and row in :meth:`collaboration_graph`).
    * Held-out clients never train and have no model to compare: they are
      evaluated with the initial model.

    Studies search :math:`\lambda`, :math:`\sigma` and the self weight
    around pFedGraph's baseline values (appendix C.1.4); ``alpha_k`` only
    rescales :math:`\lambda` and is not tuned.

    Args:
        lam (float, optional): :math:`\lambda` (pFedGraph appendix C.1.4: 1)
            (default: :obj:`1.0`)
        alpha_k (float, optional): the step size :math:`\alpha_k` of FedAMP's
            server step, which in HeurFedAMP only scales the proximal
            coefficient to :math:`\lambda / \alpha_k`; 1 reproduces the
            pFedGraph authors' proximal coefficient 1 (default: :obj:`1.0`)
        sigma (float, optional): attention scale :math:`\sigma` (pFedGraph
            appendix C.1.4: 10) (default: :obj:`10.0`)
        self_weight (float, optional): self-attention weight :math:`\xi_{ii}`
            (pFedGraph appendix C.1.4: 0.3) (default: :obj:`0.3`)
        centered (bool, optional): cosine of :math:`\theta - \theta^0`
            instead of :math:`\theta` (default: :obj:`True`)

    Shapes:
        - **state:** cloud models ``cloud_params`` :math:`(N, D)` with mask
          ``has_cloud`` :math:`(N)`, weights ``weights`` :math:`(N, N)`.
    """

    def __init__(self,
                 lam: Annotated[float, Range(ge=0.0), Search(0.1, 10.0, log=True)] = 1.0,
                 alpha_k: Annotated[float, Range(gt=0.0)] = 1.0,
                 sigma: Annotated[float, Range(ge=0.0), Search(1.0, 100.0, log=True)] = 10.0,
                 self_weight: Annotated[float, Range(ge=0.0, le=1.0), Search(0.1, 0.9)] = 0.3,
                 centered: bool = True) -> None:
        super().__init__()
        self.lam = lam
        self.alpha_k = alpha_k
        self.sigma = sigma
        self.self_weight = self_weight
        self.centered = centered
        self.aggregation = GraphAggregation()
        self.register_buffer("init_params", torch.empty(0))
        self.register_buffer("cloud_params", torch.empty(0))
        self.register_buffer("has_cloud", torch.empty(0, dtype=torch.bool))
        self.register_buffer("weights", torch.empty(0))

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        n = ctx.num_clients
        self.init_params = ctx.init_params.detach().clone()
        self.cloud_params = self.init_params.unsqueeze(0).repeat(n, 1)
        self.has_cloud = torch.zeros(n, dtype=torch.bool)
        # No collaboration before the first aggregation: every client keeps itself.
        self.weights = torch.eye(n, dtype=self.init_params.dtype)

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        coefficient = torch.where(self.has_cloud[clients], self.lam / self.alpha_k, 0.0)
        return TrainPlan(params=None, regularizer=WeightedProximalTerm(
            self.cloud_params[clients], coefficient.to(self.cloud_params.dtype)))

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        self._require_setup()
        if graph.num_clients == 0:
            return
        x = graph.x.detach()
        feature = x - self.init_params if self.centered else x
        xi = heur_fedamp_weights(feature, self.sigma, self.self_weight)
        ids = graph.client_id
        self.cloud_params[ids] = self.aggregation(x, weight=xi)
        self.has_cloud[ids] = True
        self.weights[ids] = 0.0
        self.weights[ids.unsqueeze(1), ids.unsqueeze(0)] = xi
        log.debug("round %d: mean self weight %.3f, max off-diagonal %.3f", rnd,
                  float(xi.diagonal().mean()),
                  float((xi - torch.diag_embed(xi.diagonal())).max()))

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        return None

    def collaboration_graph(self) -> Tensor | None:
        return self.weights.clone() if self.weights.numel() else None

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.extra_repr()})"


@register_strategy("fedamp")
class FedAMP(Strategy):
    r"""FedAMP, federated attentive message passing, from the `"Personalized
    Cross-Silo Federated Learning on Non-IID Data"
    <https://arxiv.org/abs/2007.03797>`_ paper (Huang et al., AAAI 2021),
    in its original form (Algorithm 1).

    Every round the server computes, for each sampled client :math:`i`, a
    cloud model by one gradient step on the attention-inducing function
    (Sec. 4.1, eq. (5)-(6); weights :func:`fedamp_weights`)

    .. math::
        u_i = \Big(1 - \alpha_k \sum_{j \neq i} A'(\lVert w_i - w_j \rVert^2)\Big) w_i
              + \alpha_k \sum_{j \neq i} A'(\lVert w_i - w_j \rVert^2)\, w_j,
        \qquad A(d) = 1 - e^{-d/\sigma},

    over the server's latest copy :math:`w_j` of every client's model, and
    the client continues from its own model with the proximal objective of
    eq. (7)

    .. math::
        \min_{w}\; F_i(w) + \frac{\lambda}{2\alpha_k} \lVert w - u_i \rVert_2^2 ,

    whose result :math:`w_i` it uploads. Clients are evaluated with their own
    models :math:`w_i`. The aggregation is a dense :math:`(S, N)` by
    :math:`(N, D)` product (no :math:`(E, D)` messages).

    Implementation choices:

    * The cloud models are computed when the round is configured, from the
      client table (:attr:`FederationContext.clients`: every client's latest
      accepted model), as the paper's server holds all :math:`w_j`
      (Algorithm 1). PFLlib's FedAMP (``serveramp.py``) uses only the
      models uploaded in the previous round; with full participation the two
      agree.
    * Only clients that have trained at least once pass their model to
      others (``sources`` of :func:`fedamp_weights`): the others still hold
      the initial model. In the first round nobody has trained, so
      :math:`u_i = w_i = w^0` and the proximal term starts at zero.
    * :math:`\xi` uses the models themselves, as eq. (5): unlike
      :class:`HeurFedAMP` there is no centering and no cosine.
    * Held-out clients never train: they are evaluated with the initial model.

    Defaults are those of PFLlib's FedAMP (``main.py``: ``alphaK=1``,
    ``lamda=1``, ``sigma=1``); the paper tunes them per data set. Studies
    search :math:`\lambda`, :math:`\sigma` and :math:`\alpha_k` on log
    scales around them (this implementation's grids).

    Until this form existed, ``fedamp`` named :class:`HeurFedAMP` (now
    ``heurfedamp``): the state format version of this class is 2, and
    loading a state saved under ``fedamp`` before (version 1) fails with a
    message naming ``heurfedamp``.

    Args:
        lam (float, optional): :math:`\lambda` (default: :obj:`1.0`)
        alpha_k (float, optional): step size :math:`\alpha_k` of the
            message-passing step (default: :obj:`1.0`)
        sigma (float, optional): scale :math:`\sigma` of
            :math:`A(d) = 1 - e^{-d/\sigma}` (default: :obj:`1.0`)

    Shapes:
        - **state:** the weights ``weights`` :math:`(N, N)` each client last
          received its cloud model with (identity before its first round).
    """
    _version = 2

    def __init__(self,
                 lam: Annotated[float, Range(ge=0.0), Search(0.1, 10.0, log=True)] = 1.0,
                 alpha_k: Annotated[float, Range(gt=0.0), Search(0.01, 10.0, log=True)] = 1.0,
                 sigma: Annotated[float, Range(gt=0.0), Search(0.1, 100.0, log=True)] = 1.0
                 ) -> None:
        super().__init__()
        self.lam = lam
        self.alpha_k = alpha_k
        self.sigma = sigma
        self.register_buffer("weights", torch.empty(0))
        self._warned = False

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        self.weights = torch.eye(ctx.num_clients, dtype=ctx.init_params.dtype,
                                 device=ctx.init_params.device)

    def cloud_models(self, clients: Tensor) -> tuple[Tensor, Tensor]:
        r"""The cloud models :math:`u_i` :math:`(S, D)` of ``clients`` and
        their rows of :math:`\xi` :math:`(S, N)`, from the client table."""
        ctx = self._require_setup()
        table = ctx.table
        models = table.params
        xi = fedamp_weights(models, self.sigma, self.alpha_k, sources=table.trained)
        rows = xi[clients.to(torch.long)]
        return rows @ models, rows

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        clients = clients.to(torch.long)
        cloud, rows = self.cloud_models(clients)
        self.weights[clients] = rows.to(self.weights.dtype)
        coefficient = cloud.new_full((clients.numel(),), self.lam / self.alpha_k)
        self_weight = rows.gather(1, clients.to(rows.device).view(-1, 1)).view(-1)
        if bool((self_weight < 0).any()) and not self._warned:
            self._warned = True
            log.warning("fedamp: self weights down to %.3g in round %d: the cloud models "
                        "extrapolate; alpha_k <= sigma / (N - 1) keeps them convex",
                        float(self_weight.min()), rnd)
        return TrainPlan(params=None, regularizer=WeightedProximalTerm(cloud, coefficient))

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        # The server's step is the message passing of the next configure_train, over the
        # client table, which the round engine updates with these uploads.
        self._require_setup()

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        return None

    def collaboration_graph(self) -> Tensor | None:
        return self.weights.clone() if self.weights.numel() else None

    @classmethod
    def state_version_error(cls, version: int, what: str = "state") -> str:
        if version < 2:
            return (f"this 'fedamp' {what} was made by the heuristic FedAMP, which is now the "
                    f"strategy 'heurfedamp'; 'fedamp' is the original FedAMP and cannot "
                    f"continue it: run it again with --strategy heurfedamp")
        return super().state_version_error(version, what)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.extra_repr()})"


@register_regularizer("weighted-proximal")
@dataclass
class WeightedProximalTerm(Regularizer):
    r"""FedAMP's proximal term with a coefficient of each client's own:
    :math:`\frac{c_i}{2} \lVert \theta - u_i \rVert_2^2` (:math:`c_i = 0`
    before the client's first cloud model).

    Args:
        center (torch.Tensor): the cloud models :math:`u_i` :math:`(S, D)`.
        coefficient (torch.Tensor): :math:`c_i` :math:`(S,)`.
    """
    center: Tensor = per_client()
    coefficient: Tensor = per_client()

    def penalty(self, theta: Tensor, *rows: Tensor) -> Tensor:
        center, coefficient = rows
        return 0.5 * coefficient * (theta - center).pow(2).sum()
