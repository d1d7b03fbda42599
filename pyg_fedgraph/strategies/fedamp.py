"""FedAMP in its heuristic form HeurFedAMP: attentive message passing between clients."""
from __future__ import annotations

import logging
from typing import Annotated

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.nn.aggregation import GraphAggregation
from pyg_fedgraph.nn.functional import pairwise_cosine
from pyg_fedgraph.strategies.base import FederationContext, Strategy, TrainPlan
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.engine import Regularizer

__all__ = ["FedAMP", "heur_fedamp_weights"]

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


@register_strategy("fedamp")
class FedAMP(Strategy):
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
    :math:`\theta_i`. The aggregation is one dense
    :class:`~pyg_fedgraph.nn.GraphAggregation` over :math:`\xi` (no
    :math:`(E, D)` messages).

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
        return TrainPlan(params=None, regularizer=Regularizer(
            _weighted_proximal_term, self.cloud_params[clients],
            coefficient.to(self.cloud_params.dtype)))

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


def _weighted_proximal_term(theta: Tensor, cloud: Tensor, coefficient: Tensor) -> Tensor:
    # One client's  c/2 ||theta - u||^2 with a per-client coefficient c (0 before
    # its first cloud model).
    return 0.5 * coefficient * (theta - cloud).pow(2).sum()
