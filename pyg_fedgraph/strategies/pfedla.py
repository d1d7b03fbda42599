"""pFedLA: layer-wise personalized aggregation weights from per-client hypernetworks."""
from __future__ import annotations

import logging
from typing import Annotated

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.nn.layer_aggregation import LayerAggregationHypernetwork, layerwise_aggregate
from pyg_fedgraph.strategies.base import (
    FederationContext,
    ServerOptimizerState,
    Strategy,
    TrainPlan,
)
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["PFedLA"]

log = logging.getLogger(__name__)


@register_strategy("pfedla")
class PFedLA(ServerOptimizerState, Strategy):
    r"""pFedLA from the `"Layer-wised Model Aggregation for Personalized
    Federated Learning" <https://arxiv.org/abs/2205.03993>`_ paper (Ma et
    al., CVPR 2022).

    The server holds one hypernetwork :math:`HN_i(v_i; \varphi_i)` per client
    (:class:`~pyg_fedgraph.nn.LayerAggregationHypernetwork`) that outputs
    layer-wise aggregation weights :math:`\alpha_i \in \mathbb{R}^{L \times N}`
    over all clients. Client :math:`i` starts its round from the
    personalized model

    .. math::
        \tilde{\theta}_i^{(l)} = \sum_{j} \alpha_{ilj}\, \theta_j^{(l)}

    (:func:`~pyg_fedgraph.nn.layer_aggregation.layerwise_aggregate`), where
    :math:`\theta_j` is the server's latest copy of client :math:`j`'s model,
    trains and returns :math:`\Delta\theta_i`. The server then updates the
    hypernetworks of the clients that trained with the hypernetwork rule
    (pFedHN's, as FedAGHN's eq. (10))

    .. math::
        (v_i, \varphi_i) \leftarrow (v_i, \varphi_i) - \eta_{hn}
        \Big(\frac{\partial \tilde{\theta}_i}{\partial (v_i, \varphi_i)}\Big)^{\top}
        (-\Delta\theta_i),

    and client :math:`i`'s model becomes :math:`\tilde{\theta}_i +
    \Delta\theta_i`, its upload (which the round engine writes to the client
    table). After one full-batch local SGD step of size :math:`\eta`,
    :math:`-\Delta\theta_i = \eta \nabla F_i(\tilde{\theta}_i)`, so the rule is
    :math:`\eta` times the gradient of :math:`\sum_i F_i(\tilde{\theta}_i)`
    through the hypernetworks (tested).

    Implementation choices:

    * All sampled clients are computed in one batched pass: their
      :math:`\alpha` :math:`(S, L, N)`, the aggregation (one dense product per
      layer) and one autograd call for all their hypernetworks. The public
      code (``KarhouTam/pFedLA``, the basis of FL-bench's pFedLA) processes
      the sampled clients one after the other, each seeing the models of the
      clients before it in the round, and saves every hypernetwork to disk.
    * The gradient is taken in :meth:`aggregate_train` by recomputing
      :math:`\tilde{\theta}` from the same inputs as in
      :meth:`configure_train` (the client table and the hypernetworks do not
      change in between), as :class:`FedAGHN` does; no autograd graph is
      held across the two calls, so the strategy can be saved in between.
    * Clients are evaluated with their personalized aggregate
      :math:`\tilde{\theta}_i` from the current hypernetworks and models, as
      the public code's ``test``. Held-out clients never train: their
      untrained hypernetworks aggregate the trained clients' models.
    * Before anyone trains every :math:`\theta_j` is the initial model, so
      :math:`\tilde{\theta}_i = \theta^0` and its gradient is zero.
    * The hypernetwork step is plain SGD (:math:`\eta_{hn} = 0.005`, the
      public code's default; FedAGHN's baseline settings of pFedLA are lost
      from its text) over all hypernetworks at once; clients that did not
      train get a zero gradient (with ``hn_momentum > 0`` they still move by
      their momentum). Embedding size and width 100 are the public code's.

    Args:
        embedding_dim (int, optional): size of :math:`v_i` (default: :obj:`100`)
        hidden_channels (int, optional): width of the hypernetworks' MLP
            (default: :obj:`100`)
        hn_lr (float, optional): :math:`\eta_{hn}` (default: :obj:`0.005`)
        hn_momentum (float, optional): momentum of the hypernetworks' SGD
            (default: :obj:`0.0`)

    Shapes:
        - **state:** the hypernetworks (embeddings :math:`(N, E)`, MLP weights
          :math:`(N, H, E)`, :math:`(N, H, H)` twice, heads
          :math:`(N, L, N, H)`) and their optimizer.
    """

    def __init__(self,
                 embedding_dim: Annotated[int, Range(ge=1), Search(choices=(25, 50, 100))] = 100,
                 hidden_channels: Annotated[int, Range(ge=1)] = 100,
                 hn_lr: Annotated[float, Range(gt=0.0), Search(1e-3, 1.0, log=True)] = 0.005,
                 hn_momentum: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0) -> None:
        super().__init__()
        self.embedding_dim = embedding_dim
        self.hidden_channels = hidden_channels
        self.hn_lr = hn_lr
        self.hn_momentum = hn_momentum
        self.hypernetwork: LayerAggregationHypernetwork | None = None
        self.server_optimizer: torch.optim.SGD | None = None

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        init = ctx.init_params
        self.hypernetwork = LayerAggregationHypernetwork(
            ctx.num_clients, ctx.layout.num_layers, self.embedding_dim,
            self.hidden_channels).to(device=init.device, dtype=init.dtype)
        self.hypernetwork.reset_parameters(make_generator(ctx.seed, "pfedla-init"))
        self.server_optimizer = torch.optim.SGD(self.hypernetwork.parameters(), lr=self.hn_lr,
                                                momentum=self.hn_momentum)

    def _hypernetwork(self) -> LayerAggregationHypernetwork:
        self._require_setup()
        assert self.hypernetwork is not None  # setup() creates it
        return self.hypernetwork

    def personalize(self, clients: Tensor) -> Tensor:
        r"""The personalized models :math:`\tilde{\theta}` :math:`(S, D)` of
        ``clients`` from the hypernetworks and the client table
        (differentiable with respect to the hypernetworks)."""
        hn = self._hypernetwork()
        ctx = self._require_setup()
        table = ctx.table.params
        alpha = hn(clients.to(torch.long))
        return layerwise_aggregate(table.to(alpha), alpha, ctx.layout.ptr)

    # --------------------------------------------------------------- rounds
    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        with torch.no_grad():
            params = self.personalize(clients)
        return TrainPlan(params=params.to(self._require_setup().init_params.dtype))

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        hn = self._hypernetwork()
        assert self.server_optimizer is not None  # setup() creates it
        if graph.num_clients == 0:
            return
        ids = graph.client_id.to(torch.long)
        theta = self.personalize(ids)  # the starts of this round, now with the graph
        params = list(hn.parameters())
        grads = torch.autograd.grad(theta, params, grad_outputs=-graph.delta.detach().to(theta))
        self.server_optimizer.zero_grad(set_to_none=True)
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        self.server_optimizer.step()
        log.debug("round %d: hypernetwork gradient norm %.4g", rnd,
                  float(torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()))

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        with torch.no_grad():
            return self.personalize(clients).to(self._require_setup().init_params.dtype)

    def collaboration_graph(self) -> Tensor | None:
        r"""The current weights averaged over layers :math:`(N, N)`, row
        :math:`i` = weights client :math:`i`'s model is aggregated with."""
        layers = self.layer_graphs()
        return None if layers is None else layers.mean(dim=0)

    def layer_graphs(self) -> Tensor | None:
        r"""The current layer-wise weights :math:`(L, N, N)`."""
        if self.ctx is None:
            return None
        hn = self._hypernetwork()
        with torch.no_grad():
            clients = torch.arange(self.ctx.num_clients, device=self.ctx.init_params.device)
            return hn(clients).transpose(0, 1).clone()
