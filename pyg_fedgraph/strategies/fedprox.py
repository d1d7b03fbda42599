"""FedProx and FedProx with local fine-tuning."""
from __future__ import annotations

from typing import Annotated

from torch import Tensor

from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.strategies.base import TrainPlan
from pyg_fedgraph.strategies.fedavg import FedAvg, FinetuneFrom
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.jobs import FineTune
from pyg_fedgraph.train.regularizers import ProximalTerm, proximal_term

__all__ = ["FedProx", "FedProxFT", "proximal_term"]

#: FedProx's proximal coefficient; its paper's grid is {0.001, 0.01, 0.1, 1}.
Mu = Annotated[float, Range(ge=0.0), Search(1e-3, 1.0, log=True)]


@register_strategy("fedprox")
class FedProx(FedAvg):
    r"""FedProx from the `"Federated Optimization in Heterogeneous Networks"
    <https://arxiv.org/abs/1812.06127>`_ paper.

    FedAvg whose clients minimize a proximal objective around the global
    model :math:`\theta^t` they received (paper eq. (2)):

    .. math::
        \min_{\theta_i}\; F_i(\theta_i) + \frac{\mu}{2}
        \|\theta_i - \theta^t\|_2^2, \qquad
        \theta^{t+1} = \sum_{i \in S_t} \frac{n_i}{\sum_{j \in S_t} n_j}\,
        \theta_i .

    With :math:`\mu = 0` it is FedAvg. The paper's device-side variable
    amount of work (inexact solutions, "stragglers") is not simulated: every
    client runs the same local SGD schedule. Clients are evaluated with the
    global model.

    Args:
        mu (float, optional): proximal coefficient :math:`\mu`; the FedProx
            paper picks the best from :math:`\{0.001, 0.01, 0.1, 1\}` per dataset,
            and pFedGraph's baseline uses 0.01 (pFedGraph appendix C.1.4, where
            it is written :math:`\lambda`) (default: :obj:`0.01`)

    Shapes:
        - **state:** ``global_params`` :math:`(D)`.
    """

    search_local = ()

    def __init__(self, mu: Mu = 0.01) -> None:
        super().__init__()
        self.mu = mu

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        plan = super().configure_train(rnd, clients)
        assert plan.params is not None  # FedAvg sends the global model
        mu = self.mu
        plan.regularizer = ProximalTerm(plan.params, coefficient=mu)
        return plan


@register_strategy("fedprox-ft")
class FedProxFT(FedProx):
    r"""FedProx, then local fine-tuning of the global model before evaluation
    ("FedProx-FT" of the pFedGraph paper, Tables 1-3).

    Fine-tuning is plain local SGD (no proximal term); the fine-tuned models
    are used only for evaluation, the federation keeps training the global
    model, as in :class:`~pyg_fedgraph.strategies.FedAvgFT`. With
    ``finetune_from="local"`` each client is evaluated with its model right
    after its last (proximal) local training instead, as pFedGraph's code does,
    at no extra cost.

    Args:
        mu (float, optional): proximal coefficient :math:`\mu`, see
            :class:`FedProx` (default: :obj:`0.01`)
        finetune_epochs (int, optional): local epochs of fine-tuning; ``None``
            uses the run's local epochs (default: ``None``).
        finetune_from (str, optional): ``"global"`` or ``"local"``, see
            :class:`~pyg_fedgraph.strategies.FedAvgFT` (default: ``"global"``).
    """

    def __init__(self, mu: Mu = 0.01,
                 finetune_epochs: Annotated[int | None, Range(ge=0)] = None,
                 finetune_from: FinetuneFrom = "global") -> None:
        super().__init__(mu=mu)
        self.finetune_epochs = finetune_epochs
        self.finetune_from = finetune_from

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        if self.finetune_from == "local":
            return None
        return super().personalized_params(clients)

    def finetune_job(self) -> FineTune | None:
        return None if self.finetune_from == "local" else FineTune(self.finetune_epochs)
