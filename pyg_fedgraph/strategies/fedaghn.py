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
    (:class:`~pyg_fedgraph.nn.AGHNConv`, paper eq. (7)-(9)):

    .. math::
        \tilde{\theta}_i^{(l)} = \sum_{j} \alpha_{ij}^{(l)}(p_{il}, q_{il},
        \Delta\theta^{t-1})\, \theta_j^{(l)} .

    After local training from :math:`\tilde{\theta}_i` the client returns
    :math:`\Delta\theta_i`, the server updates its two scalars per layer with
    the hypernetwork rule of pFedHN / pFedLA (eq. (10)),

    .. math::
        (p_i, q_i) \leftarrow (p_i, q_i) - \eta_{hn}
        \Big(\frac{\partial \tilde{\theta}_i}{\partial (p_i, q_i)}\Big)^{\top}
        (-\Delta\theta_i),

    then projects :math:`q_i \ge q_{\min}` (as the authors' code). The
    client's node feature for the next round is its upload,
    :math:`\theta_i \leftarrow \tilde{\theta}_i + \Delta\theta_i`, which
    the round engine writes to the client table.

    **Sign of the step** (``hn_rule``). The pFedHN rule above (default
    ``"pfedhn"``) is gradient descent on
    :math:`\frac{1}{2}\|\tilde{\theta}_i - (\tilde{\theta}_i + \Delta\theta_i)\|^2`
    with the trained model held fixed: it moves the personalized initial
    model towards where local training went. The authors' released code
    (``update_hn`` in ``serverfedaghn.py``) feeds ``-diff`` as
    ``grad_outputs`` where its client returns ``diff`` = model before minus
    model after training, i.e. :math:`+\Delta\theta_i`, and steps the same SGD
    optimizer: the opposite sign,

    .. math::
        (p_i, q_i) \leftarrow (p_i, q_i) - \eta_{hn}
        \Big(\frac{\partial \tilde{\theta}_i}{\partial (p_i, q_i)}\Big)^{\top}
        \Delta\theta_i ,

    which moves :math:`\tilde{\theta}_i` away from the trained model.
    ``hn_rule="code"`` reproduces the released code; the paper's eq. (10)
    and pFedHN / pFedLA, which it cites, have the default's sign.
    Measurements of both: ``benchmarks/results/claims.md`` (sections D, J).

    Implementation choices:

    * All :math:`N` personalized models and all layers come from one
      :class:`AGHNConv` forward per round; the :math:`(N, L)` tables
      :math:`p, q` are the two parameters of that submodule and the SGD
      optimizer over them is saved through :meth:`get_extra_state`, so
      :meth:`state_dict` resumes a run exactly (the authors' code keeps one
      file per client on disk instead).
    * The hypernetwork gradient is taken in :meth:`aggregate_train` by
      re-running the same forward on the same inputs (node features, stored
      deltas, :math:`p, q`: none changes between :meth:`configure_train` and
      :meth:`aggregate_train`) instead of holding an autograd graph across
      the two calls. The recomputation costs one aggregation, and the
      strategy can be saved and resumed between the two calls.
    * Round 1: no update exists yet, so every client averages all clients
      uniformly (all equal the initial model, so :math:`\tilde{\theta}_i =
      \theta^0`) and :math:`\tilde{\theta}` does not depend on :math:`p, q`:
      the hypernetwork step is skipped that round. (The authors' code feeds
      all-ones placeholder deltas instead.)
    * Only clients that have trained at least once are collaborators (graph
      sources): a client that was never sampled, or is held out, still holds
      the initial model, which would only dilute the aggregate. A client
      without a stored update has cosine 0 to everyone, i.e. weights
      :math:`1/(1+q)` spread uniformly over the collaborators.
    * Evaluation (:meth:`personalized_params`) uses each client's model after
      local training, :math:`\tilde{\theta}_i + \Delta\theta_i`, which is the
      client's own local model: the authors' code reports "personalized models
      after local training" and selects the round by their validation
      accuracy (paper Sec. 4.3). Held-out clients never train; they are
      evaluated with the personalized initial model the AGHN generates for
      them.
    * With partial participation the rows of :math:`p, q` of clients that
      were not sampled get a zero gradient; with ``hn_momentum > 0`` they
      still move by their momentum, as embeddings do in pFedHN.

    Studies search the paper's grids (Sec. 5.5): the initial sharpness
    :math:`p` over :math:`[1, 20]` (grid :math:`\{1, 5, 10, 20\}`), the
    initial self weight :math:`q` over :math:`[0.01, 0.3]` (around the
    average weight :math:`1/N`), and the hypernetwork learning rate around
    the paper's 0.005, all log-uniform.

    Args:
        sharpness (float, optional): initial :math:`p` of every client and
            layer (the code's ``beta``); the paper tunes it on a grid such as
            :math:`\{1, 5, 10, 20\}` (Sec. 5.5) (default: :obj:`5.0`)
        self_weight (float, optional): initial :math:`q` (the code's
            ``gamma``), the self-participation strength; the paper chooses it
            near the average weight :math:`1/N` (0.05 for 20 clients,
            Sec. 5.5) and its case study starts with :math:`q/(1+q) = 0.0291`
            (Table 10, :math:`q = 0.03`) (default: :obj:`0.1`)
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

    The node features :math:`\theta_j` are the engine's client table
    (:attr:`FederationContext.clients`: every client's latest upload).

    Shapes:
        - **state:** last updates ``last_delta`` :math:`(N, D)` (valid for the clients that have
          trained, :attr:`FederationContext.clients`), last
          collaboration weights ``alpha`` :math:`(L, N, N)`.
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
