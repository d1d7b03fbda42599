"""pFedMe: personalized models as Moreau envelopes of the clients' losses."""
from __future__ import annotations

import logging
from typing import Annotated

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.strategies.base import FederationContext, TrainPlan
from pyg_fedgraph.strategies.fedavg import FedAvg, weighted_average
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.rules import PFedMeStep

__all__ = ["PFedMe"]

log = logging.getLogger(__name__)


@register_strategy("pfedme")
class PFedMe(FedAvg):
    r"""pFedMe from the `"Personalized Federated Learning with Moreau
    Envelopes" <https://arxiv.org/abs/2006.08848>`_ paper (T. Dinh et al.,
    NeurIPS 2020).

    Client :math:`i`'s personalized model solves (its Moreau envelope)

    .. math::
        \hat{\theta}_i(w) = \arg\min_{\theta}\; f_i(\theta) + \frac{\lambda}{2}
        \|\theta - w\|_2^2 ,

    and the federation minimizes the mean of these Moreau envelopes over
    :math:`w`. Each sampled client starts from the global model, runs the
    local steps of Algorithm 1
    (:class:`~pyg_fedgraph.train.rules.PFedMeStep`: :math:`K` inner steps of
    size :math:`\nu` on :math:`\hat{\theta}_i`, then
    :math:`w_i \leftarrow w_i - \eta \lambda (w_i - \hat{\theta}_i)` with the
    run's learning rate :math:`\eta`) and returns :math:`w_i` and
    :math:`\hat{\theta}_i`. The server (Algorithm 1, last line):

    .. math::
        w \leftarrow (1 - \beta)\, w + \beta \sum_{i \in S_t} p_i w_i ,

    with :math:`p_i` the sample shares (the authors' code; the paper writes a
    uniform mean, ``weighted=False``). Clients are evaluated with their
    latest :math:`\hat{\theta}_i`; one that never trained (held out, or not
    yet sampled) with the global model.

    Defaults are pFedGraph's baseline settings (its appendix C.1.4:
    :math:`\eta = 0.01` (the run's default learning rate), :math:`\beta = 1`,
    :math:`\lambda = 15`, :math:`K = 5`) with the personal learning rate
    :math:`\nu = 0.01` of PFLlib and FL-bench. The authors' scripts
    (CharlieDinh/pFedMe) use :math:`\beta \in \{1, 2\}`,
    :math:`\lambda \in \{15, 20, 30\}`, :math:`K = 5`; the search spaces
    span these grids. Their inner optimizer adds :math:`\mu \hat{\theta}`
    with :math:`\mu = 0.001`; here it is the run's weight decay (default 0).

    Stability: without the loss, a local step multiplies the gap
    :math:`w_i - \hat{\theta}_i` by :math:`|1 - \nu\lambda|^K
    |1 - \eta\lambda|`; settings where that is 1 or more diverge and are
    refused at setup (with :math:`\lambda = 15` the run's learning rate must
    stay below about :math:`2 / 15`).

    Args:
        lam (float, optional): :math:`\lambda` (default: :obj:`15.0`).
        inner_lr (float, optional): the personal learning rate :math:`\nu`
            (default: :obj:`0.01`).
        inner_steps (int, optional): :math:`K` (default: :obj:`5`).
        beta (float, optional): the server's step :math:`\beta`
            (default: :obj:`1.0`).
        weighted (bool, optional): average weighted by sample counts
            (default: :obj:`True`).

    Shapes:
        - **state:** ``global_params`` :math:`(D)`, ``personal_params``
          :math:`(N, D)` (rows of clients that never trained are unused).
    """

    search_local = ()

    def __init__(self,
                 lam: Annotated[float, Range(gt=0.0),
                                Search(1.0, 50.0, log=True,
                                       note="around pFedGraph's 15 and the scripts' 15-30")] = 15.0,
                 inner_lr: Annotated[float, Range(gt=0.0),
                                     Search(1e-3, 1e-1, log=True)] = 0.01,
                 inner_steps: Annotated[int, Range(ge=1), Search(1, 10)] = 5,
                 beta: Annotated[float, Range(gt=0.0),
                                 Search(1.0, 2.0, note="the pFedMe scripts' {1, 2}")] = 1.0,
                 weighted: bool = True) -> None:
        super().__init__()
        self.lam = lam
        self.inner_lr = inner_lr
        self.inner_steps = inner_steps
        self.beta = beta
        self.weighted = weighted
        self.register_buffer("personal_params", torch.empty(0))

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        # Without the loss, each local step multiplies the gap w - theta by
        # |1 - nu lam|^K |1 - eta lam|: at 1 or more the two models run away.
        eta = ctx.local.lr
        growth = abs(1 - self.inner_lr * self.lam) ** self.inner_steps * abs(1 - eta * self.lam)
        if growth >= 1:
            raise ValueError(
                f"pFedMe diverges with lr={eta:g}, lam={self.lam:g}, inner_lr={self.inner_lr:g}, "
                f"inner_steps={self.inner_steps}: each local step multiplies the gap between "
                f"the local and the personalized model by {growth:.3g} >= 1; lower lr "
                f"(below {2 / self.lam:.3g} for lam={self.lam:g}) or lam")
        if ctx.local.momentum:
            log.info("pFedMe's local steps use no momentum (momentum=%g is ignored)",
                     ctx.local.momentum)
        self.personal_params = ctx.init_params.detach().unsqueeze(0).repeat(ctx.num_clients, 1)

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        plan = super().configure_train(rnd, clients)
        plan.rule = PFedMeStep(self.lam, self.inner_lr, self.inner_steps)
        return plan

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        self._require_setup()
        if graph.num_clients == 0:
            return
        if "personal_x" not in graph:
            raise ValueError("pFedMe needs the clients' personalized models as "
                             "graph.personal_x: the output of the PFedMeStep rule of its plan")
        weight = graph.num_samples if self.weighted else torch.ones_like(graph.num_samples)
        mean = weighted_average(graph.x, weight)
        self.global_params = (1.0 - self.beta) * self.global_params + self.beta * mean
        ids = graph.client_id.to(torch.long)
        self.personal_params[ids] = graph.personal_x.detach().to(self.personal_params.dtype)

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        ctx = self._require_setup()
        clients = clients.to(device=self.personal_params.device, dtype=torch.long)
        own = ctx.table.trained[clients] & ~ctx.is_held_out(clients)
        return torch.where(own.unsqueeze(1), self.personal_params[clients],
                           self.global_params.to(self.personal_params.dtype))
