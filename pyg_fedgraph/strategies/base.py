"""The server-side strategy interface."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.train.engine import LocalConfig, Regularizer

if TYPE_CHECKING:
    import optuna

__all__ = ["Strategy", "TrainPlan", "FederationContext", "ServerOptimizerState"]


@dataclass
class FederationContext:
    r"""What a strategy may know about the federation when it is set up.

    Args:
        num_clients (int): :math:`N`.
        layout (ParamLayout): the client model's flat layout.
        init_params (torch.Tensor): the common initial model :math:`(D,)`.
        num_samples (torch.Tensor): training samples per client :math:`(N,)`.
        edge_index, edge_weight (torch.Tensor, optional): prior client graph.
        seed (int): the run's seed, for strategies with their own randomness.
    """
    num_clients: int
    layout: ParamLayout
    init_params: Tensor
    num_samples: Tensor
    edge_index: Tensor | None = None
    edge_weight: Tensor | None = None
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainPlan:
    r"""What the server sends to the :math:`S` clients sampled this round.

    Args:
        params (torch.Tensor, optional): starting parameters :math:`(S, D)`;
            ``None`` lets every client continue from its own local model.
        regularizer (Regularizer, optional): extra local loss term.
        config (LocalConfig, optional): overrides the local SGD settings.
        personal (TrainPlan, optional): a second local training of the same
            clients in the same round (Ditto's personalized models): its
            ``params`` :math:`(S, D)` are the clients' personal starting
            models (required), with its own ``regularizer`` and ``config``.
            The trained result reaches :meth:`Strategy.aggregate_train` as
            ``graph.personal_x`` :math:`(S, D)`; the simulator keeps no copy
            of it, so the strategy stores what it needs (default: ``None``).
    """
    params: Tensor | None = None
    regularizer: Regularizer | None = None
    config: LocalConfig | None = None
    personal: TrainPlan | None = None


class Strategy(nn.Module):
    r"""Base class of server algorithms.

    A strategy owns its operators, learnable modules and optimizers. The
    orchestration (who is sampled, local training, evaluation) calls, each
    round:

    1. :meth:`configure_train` for the sampled clients,
    2. :meth:`aggregate_train` with a :class:`FederationGraph` of their
       results (``x`` = trained parameters, ``delta`` = their updates),
    3. :meth:`personalized_params` for the models to evaluate.

    All resumable state is in :meth:`state_dict` (tensors registered as
    buffers or parameters, plus :meth:`get_extra_state` for optimizers).
    Subclasses set the class attribute ``name`` (the CLI name).

    Attributes:
        finetune (bool): evaluate after local fine-tuning from the
            personalized model (FedAvg-FT style).
        needs_prior_graph (bool): the strategy requires ``edge_index``.
    """
    name: ClassVar[str] = ""
    finetune: bool = False
    needs_prior_graph: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.ctx: FederationContext | None = None

    def setup(self, ctx: FederationContext) -> None:
        r"""Called once before round 1 (and before :meth:`load_state_dict`)."""
        if self.needs_prior_graph and ctx.edge_index is None:
            raise ValueError(f"strategy {self.name!r} needs a prior client graph; "
                             f"use a dataset that provides edge_index (e.g. fl60)")
        self.ctx = ctx

    def default_sample_fraction(self, num_clients: int) -> float:
        r"""Share of clients sampled per round when the user does not choose
        (the paper's setting; e.g. Panacea samples 5 clients, FedCEDAR 30%)."""
        return 1.0

    @classmethod
    def search_space(cls, trial: optuna.trial.Trial) -> dict[str, Any]:
        r"""The hyper-parameters an Optuna study tunes (:mod:`pyg_fedgraph.tune`),
        sampled from ``trial`` over the paper's grid: a dict from ``--set``
        keys to values, each drawn with ``trial.suggest_*`` under the same
        name. Keys are usually constructor keyword arguments; local-training
        keys (``lr``, ``epochs`` ...) are routed to the clients' SGD, as with
        the CLI's ``--set`` (see :meth:`local_search_space`). Users fix
        entries with ``--set`` and replace them with ``--param``.
        The default tunes nothing."""
        return {}

    @staticmethod
    def local_search_space(trial: optuna.trial.Trial) -> dict[str, Any]:
        r"""The local SGD learning rate ``lr``, log-uniform over
        :math:`[10^{-3}, 10^{-1}]`, the range of Panacea's grid
        :math:`\{0.001, 0.003, 0.01, 0.03, 0.1\}` for the target networks
        (Sec. IV-A). Strategies without server hyper-parameters return it as
        their :meth:`search_space`; ``tune_local=True`` adds it to any."""
        return {"lr": trial.suggest_float("lr", 1e-3, 1e-1, log=True)}

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        raise NotImplementedError

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        raise NotImplementedError

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        r"""Models to evaluate for ``clients`` :math:`(S, D)`; ``None`` means
        each client's own local model."""
        raise NotImplementedError

    def collaboration_graph(self) -> Tensor | None:
        r"""The latest client collaboration matrix :math:`(N, N)` if the
        strategy has one (row :math:`i` = weights client :math:`i` gives)."""
        return None

    def _require_setup(self) -> FederationContext:
        if self.ctx is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must be called first")
        return self.ctx

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.hparams().items())

    def hparams(self) -> dict[str, Any]:
        r"""The constructor's hyper-parameters (for configs and summaries)."""
        return {}


class ServerOptimizerState:
    r"""Mixin for strategies that learn on the server: saves the optimizer
    :attr:`optimizer` (created in :meth:`Strategy.setup`) in the strategy's
    ``state_dict()`` through PyTorch's extra-state hooks. List it before
    :class:`Strategy` in the bases: ``class FedAGHN(ServerOptimizerState, Strategy)``."""
    optimizer: torch.optim.Optimizer | None = None

    def get_extra_state(self) -> dict[str, Any]:
        return {} if self.optimizer is None else {"optimizer": self.optimizer.state_dict()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        if self.optimizer is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must be called before "
                               f"load_state_dict()")
        # Optimizer.load_state_dict keeps the given momentum tensors: copy them so
        # that the source strategy and this one never share (and step) a buffer.
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
