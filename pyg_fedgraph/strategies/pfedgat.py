"""pFedGAT: a graph attention network on the server allocates aggregation weights."""
from __future__ import annotations

import copy
import logging
from typing import Annotated, Any, Literal

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range
from pyg_fedgraph.nn.client_gat import (
    AllocationLogits,
    ClientGAT,
    allocation_backward,
)
from pyg_fedgraph.strategies.base import (
    FederationContext,
    ServerOptimizerState,
    Strategy,
    TrainPlan,
)
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.jobs import LossGradient

__all__ = ["PFedGAT"]

log = logging.getLogger(__name__)

Positive = Annotated[int, Range(ge=1)]


@register_strategy("pfedgat")
class PFedGAT(ServerOptimizerState, Strategy):
    r"""The pFedGAT server from the "Personalized Federated Learning via
    Learning Dynamic Graphs" paper (Zhou et al.).

    Every round a graph attention network over the fully connected client
    graph (:class:`~pyg_fedgraph.nn.ClientGAT`, paper eq. 3-7) turns the
    clients' latest models :math:`\Theta` into an allocation matrix :math:`A`
    and personalized models (eq. 8); each sampled client trains from its
    personalized model, and the GAT takes an optimizer step on the clients'
    feedback :math:`g_i` about their personalized models (eq. 9-10,
    :func:`~pyg_fedgraph.nn.client_gat.allocation_backward`):

    .. math::
        A = \mathrm{GAT}_{\psi}(\Theta), \qquad
        \tilde{\theta}_i = \sum_{j=1}^N A_{ij}\, \theta_j, \qquad
        \psi \leftarrow \psi - \eta \sum_{i \in S}
        \Big(\frac{\partial \tilde{\theta}_i}{\partial \psi}\Big)^{\top} g_i .

    With ``feedback="gradient"`` (exact eq. 9-10) :math:`g_i = \nabla
    L_i(\tilde{\theta}_i)` on the client's validation split, **one extra**
    :math:`D` **-vector upload per client per round**; with ``"delta"``
    :math:`g_i = -\Delta\theta_i`, no extra upload. By default the attention
    scores get a learned similarity and self term (``similarity=True``, a
    departure from the paper). Why these defaults, the implementation choices
    and the measurements: :doc:`/methods/pfedgat`.

    Args:
        hidden_channels (int, optional): per-head projection size of the GAT
            (paper's :math:`F'`, not reported) (default: :obj:`16`)
        heads (int, optional): attention heads (paper Sec. 4.1: 8)
            (default: :obj:`8`)
        negative_slope (float, optional): LeakyReLU slope (paper: 0.2)
            (default: :obj:`0.2`)
        gat_lr (float, optional): learning rate :math:`\eta` of the server
            optimizer (paper: SGD, 0.01) (default: :obj:`0.01`)
        optimizer (str, optional): ``"sgd"`` (the paper's) or ``"adam"``
            (default: :obj:`"sgd"`)
        feedback (str, optional): ``"gradient"`` or ``"delta"``
            (default: :obj:`"gradient"`)
        similarity (bool, optional): add the learned similarity and self
            terms :math:`\beta_k s_{ij}` and :math:`\gamma_k` to the GAT's
            attention scores; ``False`` is the paper's GAT (default: :obj:`True`)
        similarity_scale (float, optional): :math:`\tau`: one SGD step changes
            those terms by :math:`\tau^2` times ``gat_lr`` times their gradient
            (default: :obj:`80.0`)
        use_gat (bool, optional): if ``False``, learn the :math:`N \times N`
            allocation logits directly (:class:`~pyg_fedgraph.nn.AllocationLogits`,
            the "without GAT" ablation of paper Table 4) (default: :obj:`True`)
        server_steps (int, optional): optimizer steps of the server per round
            (default: :obj:`1`)
        evaluate (str, optional): the model :meth:`personalized_params`
            reports: ``"personalized"`` (:math:`\tilde{\theta}_i`, eq. 8) or
            ``"trained"`` (each client's model after its local training;
            held-out clients still get :math:`\tilde{\theta}_i`)
            (default: :obj:`"personalized"`)

    Shapes:
        - **state:** node features ``theta`` :math:`(N, D)`; the GAT's
          weights (``hidden_channels * heads`` by :math:`D` plus attention
          vectors) or the logits :math:`(N, N)`; optimizer state.

    Example:
        >>> from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
        >>> cfg = ExperimentConfig(dataset="digits", strategy="pfedgat", rounds=3,
        ...                        overrides={"feedback": "delta"})
        >>> history = build_simulator(cfg).run()
    """

    def __init__(self, hidden_channels: Positive = 16, heads: Positive = 8,
                 negative_slope: float = 0.2, gat_lr: Annotated[float, Range(gt=0.0)] = 0.01,
                 optimizer: Literal["sgd", "adam"] = "sgd",
                 feedback: Literal["gradient", "delta"] = "gradient", use_gat: bool = True,
                 similarity: bool = True,
                 similarity_scale: Annotated[float, Range(gt=0.0)] = 80.0,
                 server_steps: Positive = 1,
                 evaluate: Literal["personalized", "trained"] = "personalized") -> None:
        super().__init__()
        self.hidden_channels = hidden_channels
        self.heads = heads
        self.negative_slope = negative_slope
        self.gat_lr = gat_lr
        self.optimizer = optimizer
        self.feedback = feedback
        self.use_gat = use_gat
        self.similarity = similarity
        self.similarity_scale = similarity_scale
        self.server_steps = server_steps
        self.evaluate = evaluate
        self.server: ClientGAT | AllocationLogits | None = None
        self.server_optimizer: torch.optim.Optimizer | None = None

    @property
    def num_clients(self) -> int:
        r"""Current number of clients (grows with :meth:`add_clients`)."""
        return self._require_setup().num_clients

    @property
    def theta(self) -> Tensor:
        r"""The GAT's node features: every client's latest model, the
        engine's client table :math:`(N, D)`."""
        return self._require_setup().table.params

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        init = ctx.init_params.detach()
        if self.use_gat:
            self.server = ClientGAT(ctx.layout.num_params, self.hidden_channels, heads=self.heads,
                                    negative_slope=self.negative_slope,
                                    similarity=self.similarity,
                                    similarity_scale=self.similarity_scale)
        else:
            self.server = AllocationLogits(ctx.num_clients)
        self.server = self.server.to(device=init.device, dtype=init.dtype)
        self.server_optimizer = self._make_optimizer()

    # ------------------------------------------------------------- rounds
    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        assert self.server is not None  # setup() creates it
        with torch.no_grad():
            theta_tilde, _ = self.server(self.theta)
        # The exact feedback is each client's held-out loss gradient at its start.
        jobs = (LossGradient("val"),) if self.feedback == "gradient" else ()
        return TrainPlan(params=theta_tilde[clients.to(self.theta.device)].clone(), jobs=jobs)

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        self._require_setup()
        assert self.server is not None and self.server_optimizer is not None  # setup() creates them
        if graph.num_clients == 0:
            return
        ids = graph.client_id.to(self.theta.device)
        if self.feedback == "gradient" and "feedback" not in graph:
            raise ValueError("pFedGAT with feedback='gradient' needs graph.feedback (S, D): each "
                             "client's validation-loss gradient at the model it started from, "
                             "the output of the LossGradient job of its plan; or use "
                             "feedback='delta'")
        feedback = graph.feedback if self.feedback == "gradient" else graph.delta
        if feedback.shape != graph.x.shape:
            raise ValueError(f"feedback has shape {tuple(feedback.shape)} for "
                             f"{tuple(graph.x.shape)} client parameters: send one D-vector "
                             f"per sampled client")
        feedback = feedback.detach().to(self.theta)
        # All node features equal (round 1): theta_tilde does not depend on A.
        if bool((self.theta == self.theta[:1]).all()):
            log.debug("round %d: all clients hold the same model, no server step", rnd)
        else:
            for _ in range(self.server_steps):
                self.server_optimizer.zero_grad(set_to_none=True)
                theta_tilde, _ = self.server(self.theta)
                allocation_backward(theta_tilde[ids], feedback, mode=self.feedback)
                self.server_optimizer.step()

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        r"""The personalized models :math:`\tilde{\theta}_i` (eq. 8) of
        ``clients`` from the current models and GAT :math:`(S, D)`; with
        ``evaluate="trained"`` ``None`` (each client's trained model), except
        that held-out clients still get :math:`\tilde{\theta}_i`."""
        ctx = self._require_setup()
        assert self.server is not None  # setup() creates it
        clients = clients.to(self.theta.device)
        if self.evaluate == "personalized":
            with torch.no_grad():
                return self.server(self.theta)[0][clients].clone()
        novel = ctx.is_held_out(clients)
        if not bool(novel.any()):
            return None
        with torch.no_grad():
            theta_tilde, _ = self.server(self.theta)
        out = self.theta[clients].clone()
        out[novel] = theta_tilde[clients[novel]]
        return out

    def collaboration_graph(self) -> Tensor | None:
        r"""The allocation matrix :math:`A` :math:`(N, N)` the next round
        starts from (row :math:`i` = weights client :math:`i` gives)."""
        if self.server is None:
            return None
        with torch.no_grad():
            return self.server.allocation(self.theta).clone()

    # ------------------------------------------------------------ joining
    def add_clients(self, num_new: int, init_params: Tensor | None = None) -> None:
        r"""Adds ``num_new`` clients, who get ids :math:`N, \ldots, N + k - 1`
        (paper Sec. 5.3: clients joining mid-training).

        The GAT is kept as is (its weights do not depend on :math:`N`); with
        ``use_gat=False`` the logit table grows (new logits zero) and its
        optimizer state is padded with zeros. The federation context grows
        (:meth:`FederationContext.add_clients`: the client table, and
        ``num_samples`` recorded as 0, unknown). Joining is supported when the
        strategy is driven directly, as in the paper's experiment; the
        orchestrators keep a fixed set of clients.

        Args:
            num_new (int): number of joining clients :math:`k`.
            init_params (torch.Tensor, optional): their node features, one
                model :math:`(D,)` for all or :math:`(k, D)`; after their first
                local training their trained models replace them
                (default: the common initial model).
        """
        ctx = self._require_setup()
        if not isinstance(num_new, int) or isinstance(num_new, bool) or num_new < 0:
            raise ValueError(f"num_new must be a non-negative int, got {num_new!r}")
        d = self.theta.size(1)
        new = ctx.init_params if init_params is None else init_params
        new = new.detach().to(self.theta)
        if new.dim() == 1:
            new = new.unsqueeze(0).expand(num_new, -1)
        if tuple(new.shape) != (num_new, d):
            raise ValueError(f"init_params must be ({d},) or ({num_new}, {d}) for {num_new} "
                             f"new clients, got {tuple(new.shape)}")
        ctx.add_clients(new, ctx.num_samples.new_zeros(num_new))
        if isinstance(self.server, AllocationLogits):
            self._grow_logits(num_new)

    def _grow_logits(self, num_new: int) -> None:
        assert isinstance(self.server, AllocationLogits) and self.server_optimizer is not None
        old_state = self.server_optimizer.state_dict()
        self.server.add_clients(num_new)
        self.server_optimizer = self._make_optimizer()
        self.server_optimizer.load_state_dict(_pad_state(old_state, self.server.logits.size(0)))

    # ------------------------------------------------------------ helpers
    def _make_optimizer(self) -> torch.optim.Optimizer:
        assert self.server is not None  # built before its optimizer
        params = [p for p in self.server.parameters() if p.requires_grad]
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.gat_lr)
        return torch.optim.SGD(params, lr=self.gat_lr)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        # A saved logit table may hold more clients than this one (clients joined
        # after it was set up): grow first, so the shapes match.
        logits = state_dict.get(prefix + "server.logits")
        if (isinstance(self.server, AllocationLogits) and isinstance(logits, Tensor)
                and logits.size(0) > self.server.logits.size(0)):
            self._grow_logits(int(logits.size(0)) - int(self.server.logits.size(0)))
        super()._load_from_state_dict(state_dict, prefix, *args)


def _pad_state(state: dict[str, Any], num_clients: int) -> dict[str, Any]:
    r"""Zero-pads the per-logit optimizer state (momentum, Adam moments) of an
    :math:`(N, N)` logit table to :math:`(N + k, N + k)`."""
    state = copy.deepcopy(state)
    for per_param in state["state"].values():
        for key, value in per_param.items():
            if isinstance(value, Tensor) and value.dim() == 2:
                grown = value.new_zeros(num_clients, num_clients)
                grown[:value.size(0), :value.size(1)] = value
                per_param[key] = grown
    return state
