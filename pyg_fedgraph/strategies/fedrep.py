"""FedRep: a shared representation (body) and a personal head per client."""
from __future__ import annotations

import dataclasses
import logging
from typing import Annotated, ClassVar

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.strategies.base import FederationContext, Strategy, TrainPlan
from pyg_fedgraph.strategies.fedavg import weighted_average
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.jobs import EvaluatePlan, SharedBody
from pyg_fedgraph.train.rules import SGD

__all__ = ["FedRep", "head_mask"]

log = logging.getLogger(__name__)


def head_mask(layout: ParamLayout, head_layers: int = 1) -> Tensor:
    r"""The coordinates of the last ``head_layers`` layers of ``layout``
    (the head), as a :math:`(D,)` bool mask.

    Raises:
        ValueError: when the head would take every layer (no body is left).
    """
    if not 1 <= head_layers < layout.num_layers:
        raise ValueError(f"the head must be 1 to {layout.num_layers - 1} of the model's "
                         f"{layout.num_layers} layers {layout.layer_names}, got "
                         f"head_layers={head_layers}")
    return layout.mask(range(layout.num_layers - head_layers, layout.num_layers))


@register_strategy("fedrep")
class FedRep(Strategy):
    r"""FedRep from the `"Exploiting Shared Representations for Personalized
    Federated Learning" <https://arxiv.org/abs/2102.07078>`_ paper (Collins
    et al., ICML 2021).

    The model is a body :math:`\phi` (the representation), shared, and a head
    :math:`h_i`, personal. In each round (paper Algorithm 1) a sampled client
    takes the server's body and its own head, trains the head with the body
    frozen, then the body with the head frozen:

    .. math::
        h_i \leftarrow \mathrm{LocalSGD}_h(\phi^t, h_i), \qquad
        \phi_i \leftarrow \mathrm{LocalSGD}_\phi(\phi^t, h_i), \qquad
        \phi^{t+1} = \sum_{i \in S_t} \frac{n_i}{\sum_{j \in S_t} n_j}\,\phi_i .

    The head phase is the :class:`~pyg_fedgraph.train.jobs.SharedBody` start
    job, the body phase the main training (an
    :class:`~pyg_fedgraph.train.rules.SGD` whose mask freezes the head). The
    server sends the body only and averages bodies only; heads stay with the
    clients (their latest models) and no client's head ever reaches
    another. A client is evaluated with the current body and its own head
    (a client that never trained, with the initial head).

    Which layers form the head is an explicit choice on the model's
    :class:`~pyg_fedgraph.data.ParamLayout`: its last ``head_layers`` layers
    (default: the last, the classifier, as the paper's experiments). The
    head trains for ``head_epochs`` epochs (the authors' scripts run
    ``--local_ep 11 --local_rep_ep 1``: 10 head epochs, 1 body epoch), or
    ``head_steps`` steps when given (for runs that count local steps, where
    10 epochs of head training can be far more work than the body's), the
    body for ``body_epochs`` epochs, or the run's local schedule when
    ``None``; all with the run's learning rate, momentum and weight decay.

    Args:
        head_layers (int, optional): layers, counted from the last, that form
            the head (default: :obj:`1`).
        head_epochs (int, optional): epochs of head training per round
            (default: :obj:`10`).
        head_steps (int, optional): steps of head training per round
            instead; wins over ``head_epochs`` (default: :obj:`None`).
        body_epochs (int, optional): epochs of body training per round;
            ``None`` uses the run's local schedule (default: :obj:`None`).

    Shapes:
        - **state:** ``global_params`` :math:`(D)`, whose head coordinates
          keep the initial head and are never sent.
    """
    supports_private_parameters: ClassVar[bool] = False  # works on whole models

    search_local: ClassVar[tuple[str, ...]] = ("lr",)

    def __init__(self, head_layers: Annotated[int, Range(ge=1)] = 1,
                 head_epochs: Annotated[int, Range(ge=0), Search(1, 10)] = 10,
                 head_steps: Annotated[int | None, Range(ge=0)] = None,
                 body_epochs: Annotated[int | None, Range(ge=1)] = None) -> None:
        super().__init__()
        self.head_layers = head_layers
        self.head_epochs = head_epochs
        self.head_steps = head_steps
        self.body_epochs = body_epochs
        self.register_buffer("global_params", torch.empty(0))
        # Derived from the layout at setup, not state.
        self.register_buffer("head", torch.empty(0, dtype=torch.bool), persistent=False)

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        self.head = head_mask(ctx.layout, self.head_layers).to(ctx.init_params.device)
        self.global_params = ctx.init_params.detach().clone()
        log.debug("FedRep head: layers %s (%d of %d parameters)",
                  ctx.layout.layer_names[-self.head_layers:], int(self.head.sum()),
                  self.head.numel())

    def _shared(self, epochs: int, steps: int | None = None) -> SharedBody:
        return SharedBody(self.global_params[~self.head].clone(), self.head.clone(), epochs,
                          steps)

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        ctx = self._require_setup()
        config = None if self.body_epochs is None else \
            dataclasses.replace(ctx.local, epochs=self.body_epochs, steps=None)
        return TrainPlan(params=None,
                         start_job=self._shared(self.head_epochs, self.head_steps),
                         rule=SGD(mask=~self.head), config=config)

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        self._require_setup()
        if graph.num_clients == 0:
            return
        body = weighted_average(graph.x[:, ~self.head], graph.num_samples)
        self.global_params[~self.head] = body.to(self.global_params.dtype)
        if "head_loss" in graph:
            log.debug("round %d: mean head-phase loss %.4f", rnd,
                      float(graph.head_loss.mean()))

    def configure_evaluate(self, clients: Tensor) -> EvaluatePlan:
        r"""Every client is evaluated with the current body and its own head."""
        self._require_setup()
        return EvaluatePlan(start_job=self._shared(0))

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        r"""The current body with each client's latest head (from the
        server's table of accepted uploads: what :meth:`configure_evaluate`
        evaluates, for clients whose last upload was accepted)."""
        ctx = self._require_setup()
        own = ctx.table.params[clients.to(torch.long)].to(self.global_params.dtype)
        return torch.where(self.head, own, self.global_params)
