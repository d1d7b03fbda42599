"""Ditto: a global FedAvg model plus one proximally regularized model per client."""
from __future__ import annotations

import logging
from typing import Annotated

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.strategies.base import FederationContext, TrainPlan
from pyg_fedgraph.strategies.fedavg import FedAvg
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.jobs import PersonalTraining
from pyg_fedgraph.train.regularizers import ProximalTerm

__all__ = ["Ditto"]

log = logging.getLogger(__name__)


@register_strategy("ditto")
class Ditto(FedAvg):
    r"""Ditto from the `"Ditto: Fair and Robust Federated Learning Through
    Personalization" <https://arxiv.org/abs/2012.04221>`_ paper.

    The federation trains a global model :math:`\theta` with FedAvg; every
    client :math:`i` also keeps a personalized model :math:`v_i`, trained
    locally against the global model it received this round (paper
    Algorithm 1):

    .. math::
        \min_{v_i}\; F_i(v_i) + \frac{\lambda}{2}\|v_i - \theta^t\|_2^2 ,
        \qquad
        \theta^{t+1} = \sum_{i \in S_t} \frac{n_i}{\sum_{j \in S_t} n_j}\,
        \theta_i^{t} .

    Each sampled client therefore runs two local trainings per round: the
    global copy (plain local SGD from :math:`\theta^t`) and :math:`v_i`
    (from its previous :math:`v_i`, same local schedule). The second runs
    as a :class:`~pyg_fedgraph.train.jobs.PersonalTraining` client job; its
    result arrives in :meth:`aggregate_train` as ``graph.personal_x``. Clients are evaluated
    with :math:`v_i`, initialized to the common initial model (Algorithm 1:
    :math:`v_i^0 = \theta^0`). A held-out client never trains, so it has no
    personalized model: it is evaluated with the global model.
    :math:`\lambda \to 0` gives local training, :math:`\lambda \to \infty`
    gives FedAvg.

    BatchNorm statistics: the simulator keeps one buffer set per client, that
    of the global copy's training; :math:`v_i` trains from (a copy of) the
    same buffers and is evaluated with them.

    Args:
        lam (float, optional): :math:`\lambda`; the Ditto paper tunes it per
            dataset, pFedGraph's baseline uses 1 (pFedGraph appendix C.1.4)
            (default: :obj:`1.0`)

    Shapes:
        - **state:** ``global_params`` :math:`(D)`, ``personal_params``
          :math:`(N, D)`.
    """

    search_local = ()

    def __init__(self, lam: Annotated[float, Range(ge=0.0),
                                      Search(0.01, 10.0, log=True,
                                             note="two decades around pFedGraph's 1")]
                 = 1.0) -> None:
        super().__init__()
        self.lam = lam
        self.register_buffer("personal_params", torch.empty(0))

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        self.personal_params = ctx.init_params.detach().unsqueeze(0).repeat(ctx.num_clients, 1)

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        plan = super().configure_train(rnd, clients)
        assert plan.params is not None  # FedAvg sends the global model
        plan.jobs = (PersonalTraining(
            params=self.personal_params[clients].clone(),
            regularizer=ProximalTerm(plan.params, coefficient=self.lam)),)
        return plan

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        if graph.num_clients == 0:
            return
        if "personal_x" not in graph:
            raise ValueError("Ditto needs the clients' trained personalized models as "
                             "graph.personal_x: the output of the PersonalTraining job of "
                             "its plan")
        personal = graph.personal_x
        if personal.shape != graph.x.shape:
            raise ValueError(f"graph.personal_x has shape {tuple(personal.shape)}, "
                             f"graph.x has {tuple(graph.x.shape)}")
        super().aggregate_train(rnd, graph)
        self.personal_params[graph.client_id] = personal.detach().to(self.personal_params.dtype)

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        ctx = self._require_setup()
        out = self.personal_params[clients].clone()
        out[ctx.is_held_out(clients)] = self.global_params.to(out.dtype)
        return out
