"""Local training, FedAvg and FedAvg with local fine-tuning."""
from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range
from pyg_fedgraph.nn.functional import sample_shares
from pyg_fedgraph.strategies.base import FederationContext, Strategy, TrainPlan
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.jobs import FineTune

__all__ = ["Local", "FedAvg", "FedAvgFT", "weighted_average", "FinetuneFrom", "Weighting"]

#: What FedAvg-FT evaluates (see :class:`FedAvgFT`).
FinetuneFrom = Literal["global", "local"]
#: How FedAvg weighs the clients it averages (see :class:`FedAvg`).
Weighting = Literal["samples", "uniform"]


def weighted_average(x: Tensor, num_samples: Tensor) -> Tensor:
    r"""FedAvg's aggregate :math:`\sum_i p_i \theta_i` with
    :math:`p_i = n_i / \sum_j n_j` (uniform if every :math:`n_i = 0`).

    Args:
        x (torch.Tensor): :math:`(S, D)`.
        num_samples (torch.Tensor): :math:`(S,)`.
    """
    return sample_shares(num_samples, x.dtype) @ x


@register_strategy("local")
class Local(Strategy):
    r"""No collaboration: every client trains and keeps its own model.

    The lower bound every personalized method should beat on heterogeneous
    data (all five papers report it).
    """

    # No server hyper-parameter: studies tune the local learning rate.
    search_local: ClassVar[tuple[str, ...]] = ("lr",)

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        return TrainPlan(params=None)

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        return None

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        return None


@register_strategy("fedavg")
class FedAvg(Strategy):
    r"""Federated averaging from `"Communication-Efficient Learning of Deep
    Networks from Decentralized Data" <https://arxiv.org/abs/1602.05629>`_.

    .. math::
        \theta^{t+1} = \sum_{i \in S_t} \frac{n_i}{\sum_{j \in S_t} n_j}\,
        \theta_i^{t}

    Every client starts each round from, and is evaluated with, the global
    model :math:`\theta^{t}`.

    With ``weighting="uniform"`` every sampled client counts the same,
    :math:`\theta^{t+1} = \frac{1}{|S_t|} \sum_{i \in S_t} \theta_i^{t}`: what
    FED-PUB's FedAvg baseline computes (``JinheonBaek/FED-PUB``,
    ``models/fedavg/client.py`` reports every client's ``train_size`` as 1) and
    CFL's and GCFL's code do.

    Args:
        weighting (str, optional): ``"samples"`` (:math:`p_i \propto n_i`,
            the paper's rule) or ``"uniform"`` (default: ``"samples"``).
    """

    def __init__(self, weighting: Weighting = "samples") -> None:
        super().__init__()
        self.weighting = weighting
        self.register_buffer("global_params", torch.empty(0))

    # No server hyper-parameter: studies tune the local learning rate (FedAvg-FT too).
    search_local: ClassVar[tuple[str, ...]] = ("lr",)

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        self.global_params = ctx.init_params.detach().clone()

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        return TrainPlan(params=self.global_params.expand(clients.numel(), -1).clone())

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        if graph.num_clients == 0:
            return
        n = graph.num_samples if self.weighting == "samples" else torch.ones_like(
            graph.num_samples)
        self.global_params = weighted_average(graph.x, n)

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        return self.global_params.expand(clients.numel(), -1).clone()


@register_strategy("fedavg-ft")
class FedAvgFT(FedAvg):
    r"""FedAvg, then local fine-tuning of the global model before evaluation.

    The fine-tuned models are used only for evaluation; the federation keeps
    training the global model. This is "FedAvg-finetune" of the Panacea paper
    (Table II) and "FedAvg-FT" of pFedGraph.

    Two ways to get the fine-tuned models:

    * ``finetune_from="global"`` (default): at every evaluation each client
      fine-tunes the *current* global model for ``finetune_epochs`` (the
      run's local schedule by default). This doubles the local computation
      of a run.
    * ``finetune_from="local"``: each client is evaluated with its model
      right after its last local training, which started from the global
      model of that round. This is what pFedGraph's released code reports as
      FedAvg-FT (``fedavg_ft.py`` tests every client's model after its local
      iterations, before aggregation) and costs no extra training; the model
      is fine-tuned from the *previous* global model, for one round's local
      schedule, and ``finetune_epochs`` is not used.

    Args:
        finetune_epochs (int, optional): local epochs of fine-tuning; ``None``
            uses the run's local epochs (default: ``None``).
        finetune_from (str, optional): ``"global"`` or ``"local"``, see above
            (default: ``"global"``).
        weighting (str, optional): as :class:`FedAvg` (default: ``"samples"``).
    """

    def __init__(self, finetune_epochs: Annotated[int | None, Range(ge=0)] = None,
                 finetune_from: FinetuneFrom = "global", weighting: Weighting = "samples"
                 ) -> None:
        super().__init__(weighting=weighting)
        self.finetune_epochs = finetune_epochs
        self.finetune_from = finetune_from

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        if self.finetune_from == "local":
            return None  # each client's own model after its last local training
        return super().personalized_params(clients)

    def finetune_job(self) -> FineTune | None:
        return None if self.finetune_from == "local" else FineTune(self.finetune_epochs)
