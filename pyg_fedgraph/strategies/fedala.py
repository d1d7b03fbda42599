"""FedALA: FedAvg whose clients start from an adaptive local aggregation."""
from __future__ import annotations

import logging
from typing import Annotated, ClassVar

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.strategies.base import FederationContext, TrainPlan
from pyg_fedgraph.strategies.fedavg import FedAvg
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.ala import AdaptiveLocalAggregation
from pyg_fedgraph.train.jobs import EvaluatePlan

__all__ = ["FedALA"]

log = logging.getLogger(__name__)


@register_strategy("fedala")
class FedALA(FedAvg):
    r"""FedALA from the `"FedALA: Adaptive Local Aggregation for Personalized
    Federated Learning" <https://arxiv.org/abs/2212.01197>`_ paper (Zhang et
    al., AAAI 2023, Algorithm 1).

    The server runs FedAvg, :math:`\Theta^{t} = \sum_i \frac{n_i}{\sum_j n_j}
    \theta_i^{t}`. Each client does not start from :math:`\Theta` itself but
    from its adaptive local aggregation with its previous local model
    :math:`\theta_i` (eq. (4)-(6); the
    :class:`~pyg_fedgraph.train.ala.AdaptiveLocalAggregation` start job):
    lower layers from :math:`\Theta`, the top ``layers`` layers
    :math:`\theta_i + (\Theta - \theta_i) \odot W_i` with element-wise
    weights :math:`W_i \in [0, 1]` learned on a random share :math:`s` of
    its training data, then trains from there and uploads its model.
    :math:`W_i = 1` everywhere is FedAvg's start.

    Implementation choices:

    * The server keeps each client's :math:`W_i` (``ala_weights``) and
      whether its first, long weight learning is done (``ala_started``),
      sends them with the global model and receives the new :math:`W_i`
      (``graph.ala_weights``): the clients keep no state besides their model.
      The first weight learning ends when the standard deviation of the last
      ``num_pre_loss`` epoch losses is below ``threshold``, capped here at
      ``max_start_epochs`` (the authors' loop has no cap and their README
      warns that a small threshold may not end).
    * Evaluation follows the authors' code (``serverALA.py``), which
      evaluates every client after the ALA of the next round and before
      training: each client is evaluated with the ALA of the current global
      model and its own model, drawn as the next round will draw it, i.e.
      exactly the model it will start that round from if sampled
      (``draw_round``). The weights learned at evaluation are not kept.
    * The authors' code runs the ALA for every client every round, sampled
      or not (``send_models``), so the local models of clients that do not
      train move too; here only sampled clients aggregate (and every
      client at evaluation). With full participation both agree.
    * ``layers`` counts layers as the library does (a module's weight and
      bias are one layer); the authors' ``layer_idx`` counts parameter
      tensors, and its value 2 in their scripts (``run_me.sh``: ``-p 2``)
      is the last layer's weight and bias, ``layers=1`` here.

    Defaults follow the authors' scripts: :math:`s = 80\%` of the data,
    :math:`\eta = 1`, the top layer, and the convergence window of
    ``ALA.py`` (10 epochs); the threshold 0.01 is the paper's per the
    authors' README (``ALA.py``'s default is 0.1). FedAGHN (Sec. 4.4) runs
    FedALA "following the setting as original paper". Studies search
    :math:`s`, :math:`\eta`, ``layers`` and the local learning rate.

    Args:
        layers (int, optional): top layers :math:`p` that aggregate
            adaptively (default: :obj:`1`)
        share (float, optional): share :math:`s` of the training data the
            weights learn on (default: :obj:`0.8`)
        eta (float, optional): learning rate :math:`\eta` of the weights
            (default: :obj:`1.0`)
        threshold (float, optional): convergence threshold of the first
            weight learning (default: :obj:`0.01`)
        num_pre_loss (int, optional): epochs it looks back on
            (default: :obj:`10`)
        max_start_epochs (int, optional): cap on the epochs of the first
            weight learning (default: :obj:`50`)

    Shapes:
        - **state:** ``global_params`` :math:`(D)`, ``ala_weights``
          :math:`(N, P)` with :math:`P` the size of the top layers,
          ``ala_started`` :math:`(N)`, ``last_round`` (a scalar).
    """
    supports_private_parameters: ClassVar[bool] = False  # works on whole models

    def __init__(self,
                 layers: Annotated[int, Range(ge=1), Search(choices=(1, 2, 3))] = 1,
                 share: Annotated[float, Range(gt=0.0, le=1.0), Search(0.1, 1.0)] = 0.8,
                 eta: Annotated[float, Range(ge=0.0), Search(0.1, 10.0, log=True)] = 1.0,
                 threshold: Annotated[float, Range(ge=0.0)] = 0.01,
                 num_pre_loss: Annotated[int, Range(ge=1)] = 10,
                 max_start_epochs: Annotated[int, Range(ge=1)] = 50) -> None:
        super().__init__()
        self.layers = layers
        self.share = share
        self.eta = eta
        self.threshold = threshold
        self.num_pre_loss = num_pre_loss
        self.max_start_epochs = max_start_epochs
        self.top = 0  # first flat index of the top layers, set by setup()
        self.register_buffer("ala_weights", torch.empty(0))
        self.register_buffer("ala_started", torch.empty(0, dtype=torch.bool))
        self.register_buffer("last_round", torch.zeros((), dtype=torch.long))

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        num_layers = ctx.layout.num_layers
        if self.layers > num_layers:
            raise ValueError(f"strategy 'fedala': layers={self.layers} but the model has "
                             f"{num_layers} layers; use at most {num_layers}")
        init = ctx.init_params
        self.top = int(ctx.layout.ptr[num_layers - self.layers])
        self.ala_weights = init.new_ones(ctx.num_clients, init.numel() - self.top)
        self.ala_started = torch.zeros(ctx.num_clients, dtype=torch.bool, device=init.device)
        self.last_round = torch.zeros((), dtype=torch.long, device=init.device)

    def aggregation_job(self, clients: Tensor, draw_round: int) -> AdaptiveLocalAggregation:
        r"""The ALA start job of ``clients`` :math:`(S,)` with the current
        global model and their stored weights."""
        self._require_setup()
        clients = clients.to(torch.long)
        return AdaptiveLocalAggregation(
            self.global_params.clone(), self.ala_weights[clients].clone(),
            self.ala_started[clients].clone(), top=self.top, share=self.share, eta=self.eta,
            threshold=self.threshold, num_pre_loss=self.num_pre_loss,
            max_epochs=self.max_start_epochs, draw_round=draw_round)

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        return TrainPlan(start_job=self.aggregation_job(clients, rnd))

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        ctx = self._require_setup()
        self.last_round.fill_(int(rnd))
        if graph.num_clients == 0:
            return
        if "ala_weights" not in graph:
            raise ValueError("FedALA needs each client's aggregation weights as "
                             "graph.ala_weights: the output of the AdaptiveLocalAggregation "
                             "start job of its plan")
        ids = graph.client_id.to(torch.long)
        weights = graph.ala_weights.detach().to(self.ala_weights)
        if tuple(weights.shape) != (ids.numel(), self.ala_weights.size(1)):
            raise ValueError(f"graph.ala_weights has shape {tuple(weights.shape)}, expected "
                             f"{(ids.numel(), self.ala_weights.size(1))}")
        # A client whose model still equalled the global model skipped the ALA (its
        # first round); the client table still holds the models they started from.
        skipped = (ctx.table.params[ids] == self.global_params).all(dim=1)
        self.ala_weights[ids] = weights
        self.ala_started[ids] |= ~skipped
        log.debug("round %d: mean ALA weight %.4f", rnd, float(weights.mean()))
        super().aggregate_train(rnd, graph)

    def configure_evaluate(self, clients: Tensor) -> EvaluatePlan:
        r"""Every client is evaluated with the model it would start the next
        round from: the ALA of the global model and its own model."""
        return EvaluatePlan(start_job=self.aggregation_job(clients, int(self.last_round) + 1))
