"""FedAGHN: personalized initial models from attentive graph hypernetworks."""
from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.nn.aghn_conv import AGHNConv
from pyg_fedgraph.strategies.base import (
    FederationContext,
    ServerOptimizerState,
    Strategy,
    TrainPlan,
)
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.utils.graph import complete_graph

__all__ = ["FedAGHN", "HNRule"]

#: The sign of the hypernetwork step (see :class:`FedAGHN`).
HNRule = Literal["pfedhn", "code"]

log = logging.getLogger(__name__)


@register_strategy("fedaghn")
class FedAGHN(ServerOptimizerState, Strategy):
    r"""The FedAGHN server from the `"FedAGHN: Personalized Federated Learning
    with Attentive Graph HyperNetworks" <https://arxiv.org/abs/2501.16379>`_
    paper.

    Every round each sampled client :math:`i` starts from its personalized
    initial model, aggregated layer by layer over a collaboration graph whose
    weights come from the cosine similarity of the previous round's updates
    (:class:`~pyg_fedgraph.nn.AGHNConv`, paper eq. (7)-(9), one forward for all
    clients and layers). After local training the client returns
    :math:`\Delta\theta_i`, and the server updates its two scalars per layer
    (sharpness :math:`p`, self weight :math:`q`) with the hypernetwork rule of
    pFedHN / pFedLA (eq. (10)), then projects :math:`q_i \ge q_{\min}`:

    .. math::
        \tilde{\theta}_i^{(l)} &= \sum_{j} \alpha_{ij}^{(l)}(p_{il}, q_{il},
        \Delta\theta^{t-1})\, \theta_j^{(l)}, \\
        (p_i, q_i) &\leftarrow (p_i, q_i) - \eta_{hn}
        \Big(\frac{\partial \tilde{\theta}_i}{\partial (p_i, q_i)}\Big)^{\top}
        (-\Delta\theta_i) .

    The node features :math:`\theta_j` are the engine's client table
    (:attr:`FederationContext.clients`: every client's latest upload,
    :math:`\tilde{\theta}_i + \Delta\theta_i`). The authors' code steps with
    the opposite sign (``hn_rule="code"``). That sign, round 1, who
    collaborates, evaluation, partial participation and the search space:
    :doc:`/methods/fedaghn`.

    Args:
        sharpness (float, optional): initial :math:`p` of every client and
            layer (the code's ``beta``) (default: :obj:`5.0`)
        self_weight (float, optional): initial :math:`q` (the code's
            ``gamma``), the self-participation strength (default: :obj:`0.1`)
        hn_lr (float, optional): learning rate :math:`\eta_{hn}` of the
            hypernetwork SGD (paper Table 2: 0.005) (default: :obj:`0.005`)
        hn_momentum (float, optional): momentum of that SGD; eq. (10) is plain
            gradient descent and the authors' code defaults to 0
            (default: :obj:`0.0`)
        self_weight_min (float, optional): threshold :math:`q_{\min}` of the
            self weight (authors' code: 0) (default: :obj:`0.0`)
        hn_rule (str, optional): sign of the hypernetwork step: ``"pfedhn"``
            (eq. (10), pFedHN's rule) or ``"code"`` (the opposite sign, as
            the authors' released code) (default: ``"pfedhn"``)

    Shapes:
        - **state:** last updates ``last_delta`` :math:`(N, D)` (valid for the
          clients that have trained), last collaboration weights ``alpha``
          :math:`(L, N, N)`; the tables :math:`p, q` :math:`(N, L)`.

    Example:
        >>> from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
        >>> cfg = ExperimentConfig(dataset="digits", strategy="fedaghn", rounds=3,
        ...                        overrides={"sharpness": 10.0})
        >>> history = build_simulator(cfg).run()
    """

    def __init__(self,
                 sharpness: Annotated[float, Search(1.0, 20.0, log=True)] = 5.0,
                 self_weight: Annotated[float, Search(0.01, 0.3, log=True)] = 0.1,
                 hn_lr: Annotated[float, Range(gt=0.0), Search(1e-3, 5e-2, log=True)] = 0.005,
                 hn_momentum: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0,
                 self_weight_min: float = 0.0, hn_rule: HNRule = "pfedhn") -> None:
        super().__init__()
        if self_weight < self_weight_min:
            raise ValueError(f"self_weight={self_weight} lies below self_weight_min="
                             f"{self_weight_min}; raise self_weight or lower the threshold")
        self.sharpness = sharpness
        self.self_weight = self_weight
        self.hn_lr = hn_lr
        self.hn_momentum = hn_momentum
        self.self_weight_min = self_weight_min
        self.hn_rule = hn_rule
        self.conv: AGHNConv | None = None
        self.server_optimizer: torch.optim.SGD | None = None
        self.register_buffer("last_delta", torch.empty(0))
        self.register_buffer("alpha", torch.empty(0))
        # Round whose weights ``alpha`` holds (0: none computed yet).
        self.register_buffer("alpha_round", torch.zeros((), dtype=torch.long))

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        n, layout = ctx.num_clients, ctx.layout
        init = ctx.init_params.detach()
        self.conv = AGHNConv(n, layout.num_layers, sharpness=self.sharpness,
                             self_weight=self.self_weight,
                             self_weight_min=self.self_weight_min).to(init.device)
        self.server_optimizer = torch.optim.SGD(self.conv.parameters(), lr=self.hn_lr,
                                         momentum=self.hn_momentum)
        self.last_delta = init.new_zeros(n, init.numel())
        self.alpha = init.new_zeros(layout.num_layers, n, n)
        self.alpha_round = torch.zeros((), dtype=torch.long)

    # ------------------------------------------------------------- rounds
    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        with torch.no_grad():
            theta_tilde, alpha = self._personalize(return_attention_weights=True)
        self.alpha = alpha
        self.alpha_round.fill_(int(rnd))
        return TrainPlan(params=theta_tilde[clients].clone())

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        self._require_setup()
        assert self.conv is not None and self.server_optimizer is not None  # setup() creates them
        if graph.num_clients == 0:
            return
        ids = graph.client_id.to(self.last_delta.device)
        delta = graph.delta.to(self.last_delta)
        # The client table still holds the models of the previous round (the
        # engine writes this round's after aggregate_train): same inputs as in
        # configure_train, so this is the theta_tilde the
        # clients started from, now with the graph to p and q.
        theta_tilde = self._personalize()
        if theta_tilde.requires_grad:
            # pFedHN: descend along J^T (theta_tilde - theta_trained) = J^T (-delta);
            # the authors' code feeds +delta (see the class docstring).
            grads = torch.autograd.grad(theta_tilde[ids],
                                        [self.conv.sharpness, self.conv.self_weight],
                                        grad_outputs=-delta if self.hn_rule == "pfedhn"
                                        else delta)
            self.server_optimizer.zero_grad(set_to_none=True)
            self.conv.sharpness.grad, self.conv.self_weight.grad = grads
            self.server_optimizer.step()
            self.conv.clamp_self_weight_()
            log.debug("round %d: mean sharpness %.4f, mean self weight %.4f", rnd,
                      float(self.conv.sharpness.detach().mean()),
                      float(self.conv.self_weight.detach().mean()))
        self.last_delta[ids] = delta.detach()

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        r"""``None`` (each client's model after local training) unless some
        of ``clients`` are held out: those get the personalized initial model
        the AGHN generates for them from the current state."""
        ctx = self._require_setup()
        novel = ctx.is_held_out(clients)
        if not bool(novel.any()):
            return None
        with torch.no_grad():
            theta_tilde = self._personalize()
        out = ctx.table.params[clients].clone()
        out[novel] = theta_tilde[clients[novel]]
        return out

    # ------------------------------------------------------------- graphs
    def collaboration_graph(self) -> Tensor | None:
        r"""The last round's weights :math:`\alpha` averaged over layers
        :math:`(N, N)`, row :math:`i` = weights client :math:`i` gives."""
        layers = self.layer_graphs()
        return None if layers is None else layers.mean(dim=0)

    def diagnostics(self) -> dict[str, Any]:
        r"""``final_self_weight``: the mean of the tunable self weights
        :math:`q`, how many reached 0, and how many there are."""
        if self.conv is None:
            return {}
        q = self.conv.self_weight.detach()
        return {"final_self_weight": [float(q.mean()), int((q <= 0).sum()), q.numel()]}

    def layer_graphs(self) -> Tensor | None:
        r"""The last round's layer-wise weights :math:`\alpha` :math:`(L, N, N)`
        (paper Fig. 7), or ``None`` before the first round."""
        if self.ctx is None or int(self.alpha_round) == 0:
            return None
        return self.alpha.clone()

    # ------------------------------------------------------------ helpers
    def _personalize(self, return_attention_weights: bool = False):
        r"""One :class:`AGHNConv` forward for all clients from the stored state."""
        ctx = self._require_setup()
        assert self.conv is not None  # setup() creates it
        trained = ctx.table.trained
        if bool(trained.any()):
            delta: Tensor | None = self.last_delta
            edge_index = None if bool(trained.all()) else _edges_from(trained)
        else:
            # Round 1: no update yet, uniform weights over the trainable clients.
            delta = None
            edge_index = None
            if ctx.held_out.numel() > 0:
                sources = torch.ones_like(trained)
                sources[ctx.held_out.to(trained.device)] = False
                edge_index = _edges_from(sources)
        theta = ctx.table.params
        return self.conv(theta, edge_index, delta=delta,
                         layer_ptr=ctx.layout.ptr.to(theta.device),
                         return_attention_weights=return_attention_weights)


def _edges_from(sources: Tensor) -> Tensor:
    r"""Edges :math:`j \rightarrow i` from every client with ``sources[j]`` to
    every other client, as :math:`(2, E)`."""
    edge_index = complete_graph(sources.numel(), self_loops=False, device=sources.device)
    return edge_index[:, sources[edge_index[0]]]
