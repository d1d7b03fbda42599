"""FedRoD: a generic model trained with a balanced loss, plus a personal head."""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.strategies.base import FederationContext, TrainPlan
from pyg_fedgraph.strategies.fedavg import FedAvg
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.rules import FedRoDStep

__all__ = ["FedRoD", "linear_head"]


def linear_head(layout: ParamLayout) -> tuple[int, int]:
    r"""The flat offsets ``(head_start, bias_start)`` of the model's last
    layer, which must be a linear classifier: a ``weight`` :math:`(C, F)`
    followed by a ``bias`` :math:`(C,)`, ending the parameter vector.

    Raises:
        ValueError: when the last layer is not of that form.
    """
    start = int(layout.ptr[-2])
    name = layout.layer_names[-1]
    entries = [e for e in layout.params if e.name.rsplit(".", 1)[0] == name
               or (name == "" and "." not in e.name)]
    prefix = f"{name}." if name else ""
    if [e.name for e in entries] != [prefix + "weight", prefix + "bias"] or \
            len(entries[0].shape) != 2 or entries[1].shape != entries[0].shape[:1]:
        raise ValueError(f"FedRoD needs a linear classifier as the model's last layer (a "
                         f"weight (C, F) then a bias (C,)); the last layer {name!r} holds "
                         f"{[(e.name, e.shape) for e in entries]}")
    return start, layout.num_params - entries[1].numel


@register_strategy("fedrod")
class FedRoD(FedAvg):
    r"""FedRoD from the `"On Bridging Generic and Personalized Federated
    Learning for Image Classification" <https://arxiv.org/abs/2107.00778>`_
    paper (Chen and Chao, ICLR 2022), with the linear personal head of its
    main experiments.

    Every model is a body :math:`\phi` with two heads: the generic head
    :math:`g`, which the federation trains with FedAvg together with the body
    under the balanced-softmax loss (robust to each client's class
    imbalance; the paper's "BSM"), and a personal head :math:`p_i` that
    stays with client :math:`i` and learns, with cross-entropy, what the
    generic logits miss on its data. Client :math:`i` predicts with the sum

    .. math::
        \hat{y} = g(\phi(x)) + p_i(\phi(x)),

    and its local steps minimize (one mini-batch, one SGD step for
    :math:`(\phi, g)` and one for :math:`p_i`; see
    :class:`~pyg_fedgraph.train.rules.FedRoDStep`)

    .. math::
        \mathrm{CE}\big(g(z) + \log n_i,\, y\big)
        + \mathrm{CE}\big(\mathrm{sg}[g(z)] + p_i(\mathrm{sg}[z]),\, y\big),

    with :math:`n_i` the client's training samples per class and
    :math:`\mathrm{sg}` a stop-gradient. The server averages the uploaded
    generic models, weighted by sample counts (FedAvg); the personal heads
    are kept by the server between rounds and travel with each client's
    starting model (body, :math:`g + p_i`), as Ditto's personal models do.

    The head is the model's last layer, a linear classifier whose output is
    the model's (as in every classification model of
    :mod:`pyg_fedgraph.models`; the layer's form is checked at setup, an
    activation after it cannot be seen in the parameters and is the user's
    to avoid): the sum of two linear heads is the model with the summed
    head, so each client is evaluated with its parameters
    (:meth:`personalized_params`). Personal heads start as the initial head
    (PFLlib's and FL-bench's ``deepcopy`` of it); held-out clients, which
    have none, are evaluated with the generic model. Classification only.

    Shapes:
        - **state:** ``global_params`` :math:`(D)`, ``personal_heads``
          :math:`(N, H)` with :math:`H` the size of the last layer.
    """
    supports_private_parameters: ClassVar[bool] = False  # works on whole models

    search_local: ClassVar[tuple[str, ...]] = ("lr",)

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("personal_heads", torch.empty(0))
        self.head_start = 0
        self.bias_start = 0

    def setup(self, ctx: FederationContext) -> None:
        if ctx.task != "classification":
            raise ValueError(f"FedRoD's balanced softmax is for classification; this "
                             f"federation's task is {ctx.task}")
        super().setup(ctx)
        self.head_start, self.bias_start = linear_head(ctx.layout)
        head = ctx.init_params.detach()[self.head_start:]
        self.personal_heads = head.unsqueeze(0).repeat(ctx.num_clients, 1)

    def _with_personal_heads(self, clients: Tensor) -> Tensor:
        clients = clients.to(torch.long)
        out = self.global_params.to(self.personal_heads.dtype).expand(clients.numel(), -1).clone()
        out[:, self.head_start:] += self.personal_heads[clients]
        return out

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        return TrainPlan(params=self._with_personal_heads(clients),
                         rule=FedRoDStep(self.global_params[self.head_start:].clone(),
                                         self.head_start, self.bias_start))

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        self._require_setup()
        if graph.num_clients == 0:
            return
        if "personal_head" not in graph:
            raise ValueError("FedRoD needs the clients' trained personal heads as "
                             "graph.personal_head: the output of the FedRoDStep rule of its "
                             "plan")
        super().aggregate_train(rnd, graph)
        self.personal_heads[graph.client_id.to(torch.long)] = \
            graph.personal_head.detach().to(self.personal_heads.dtype)

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        r"""The generic model with head :math:`g + p_i` (the generic model
        alone for held-out clients)."""
        ctx = self._require_setup()
        out = self._with_personal_heads(clients)
        held = ctx.is_held_out(clients.to(torch.long))
        out[held] = self.global_params.to(out.dtype)
        return out
