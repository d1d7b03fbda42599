"""Per-FedAvg: FedAvg of a model-agnostic meta-learning objective."""
from __future__ import annotations

import dataclasses
from typing import Annotated, ClassVar, Literal

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.strategies.base import TrainPlan
from pyg_fedgraph.strategies.fedavg import FedAvg, weighted_average
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.jobs import FineTune
from pyg_fedgraph.train.rules import PerFedAvgHFStep, PerFedAvgStep

__all__ = ["PerFedAvg"]

Variant = Literal["fo", "hf"]


@register_strategy("per-fedavg")
class PerFedAvg(FedAvg):
    r"""Per-FedAvg from the `"Personalized Federated Learning with
    Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach"
    <https://arxiv.org/abs/2002.07948>`_ paper (Fallah et al., NeurIPS 2020).

    The federation learns a global model :math:`w` that is a good starting
    point for one local gradient step:

    .. math::
        \min_w \frac{1}{n} \sum_{i=1}^n F_i\big(w - \alpha \nabla F_i(w)\big).

    Each sampled client runs the meta steps of Algorithm 1 from :math:`w`
    (:class:`~pyg_fedgraph.train.rules.PerFedAvgStep` with two mini-batches
    per step, ``variant="fo"``; :class:`~pyg_fedgraph.train.rules.PerFedAvgHFStep`
    with a third for the Hessian-vector correction, ``variant="hf"``) and the
    server averages the results, as FedAvg. A client is evaluated with the
    global model after one step of size :math:`\alpha` on one of its training
    mini-batches (the paper's personalization; a
    :class:`~pyg_fedgraph.train.jobs.FineTune` of one step, batch order
    ``(seed, "finetune", round, client)``).

    Settings: :math:`\beta` is the run's local learning rate unless ``beta``
    is given (pFedGraph's baseline uses :math:`\alpha = 0.001`,
    :math:`\beta = 0.01`, its appendix C.1.4: the defaults with the run's
    default learning rate). The paper averages the clients uniformly
    (``weighted=False``); the default weighs them by sample counts, FedAvg's
    convention, so that :math:`\alpha = 0` is FedAvg on every second batch.
    The inner step is plain; momentum and weight decay act on the outer
    (:math:`\beta`) update.

    Args:
        alpha (float, optional): the personalization step size :math:`\alpha`
            (default: :obj:`0.001`).
        variant (str, optional): ``"fo"`` (first order) or ``"hf"``
            (Hessian-free) (default: ``"fo"``).
        beta (float, optional): the meta step size :math:`\beta`; ``None``
            uses the run's learning rate (default: ``None``).
        weighted (bool, optional): average weighted by sample counts
            (default: :obj:`True`).

    Shapes:
        - **state:** ``global_params`` :math:`(D)`.
    """

    search_local: ClassVar[tuple[str, ...]] = ("lr",)   # beta, when it is the run's lr

    def __init__(self,
                 alpha: Annotated[float, Range(ge=0.0),
                                  Search(1e-4, 1e-1, log=True,
                                         note="decades around pFedGraph's 0.001")] = 1e-3,
                 variant: Variant = "fo",
                 beta: Annotated[float | None, Range(gt=0.0)] = None,
                 weighted: bool = True) -> None:
        super().__init__()
        self.alpha = alpha
        self.variant = variant
        self.beta = beta
        self.weighted = weighted

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        ctx = self._require_setup()
        plan = super().configure_train(rnd, clients)
        plan.rule = (PerFedAvgHFStep if self.variant == "hf" else PerFedAvgStep)(self.alpha)
        if self.beta is not None:
            plan.config = dataclasses.replace(ctx.local, lr=self.beta)
        return plan

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        if graph.num_clients == 0:
            return
        weight = graph.num_samples if self.weighted else torch.ones_like(graph.num_samples)
        self.global_params = weighted_average(graph.x, weight)

    def finetune_job(self) -> FineTune | None:
        r"""One SGD step of size :math:`\alpha` on one training mini-batch
        (none for :math:`\alpha = 0`)."""
        return FineTune(steps=1, lr=self.alpha) if self.alpha > 0 else None
