"""The server-side strategy interface."""
from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from pyg_fedgraph.data.federated_dataset import Task
from pyg_fedgraph.data.federation import ClientTable, FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.data.objective import Objective, objective_for
from pyg_fedgraph.hparams import HParam, schema
from pyg_fedgraph.nn.functional import sample_shares
from pyg_fedgraph.train.config import LOCAL_SCHEMA, LocalConfig
from pyg_fedgraph.train.jobs import EvaluatePlan, FineTune, TrainPlan

if TYPE_CHECKING:
    import optuna

__all__ = ["Strategy", "TrainPlan", "FederationContext", "ServerOptimizerState"]


def _no_clients() -> Tensor:
    return torch.zeros(0, dtype=torch.long)


@dataclass
class FederationContext:
    r"""What a strategy may know about the federation, given once at
    :meth:`Strategy.setup`.

    Args:
        num_clients (int): :math:`N`.
        layout (ParamLayout): the client model's flat layout.
        init_params (torch.Tensor): the common initial model :math:`(D,)`.
        num_samples (torch.Tensor): training samples per client :math:`(N,)`.
        edge_index, edge_weight (torch.Tensor, optional): prior client graph.
        seed (int): the run's seed, for strategies with their own randomness
            (derive streams with :func:`~pyg_fedgraph.utils.seeds.make_generator`).
        held_out (torch.Tensor): clients that never train (novel clients),
            sorted ids :math:`(H,)` (default: none).
        task (str): ``"classification"`` or ``"regression"``.
        local (LocalConfig): the run's local training settings.
        objective (Objective, optional): the clients' loss and metrics
            (default: the task's).
        clients (ClientTable, optional): the server's table of every client's
            latest accepted model, owned and written by the round engine
            (default: a fresh table of the initial model, for strategies used
            on their own).
    """
    num_clients: int
    layout: ParamLayout
    init_params: Tensor
    num_samples: Tensor
    edge_index: Tensor | None = None
    edge_weight: Tensor | None = None
    seed: int = 0
    held_out: Tensor = field(default_factory=_no_clients)
    task: Task = "classification"
    local: LocalConfig = field(default_factory=LocalConfig)
    objective: Objective | None = None
    clients: ClientTable | None = None

    def __post_init__(self) -> None:
        self.held_out = torch.as_tensor(self.held_out, dtype=torch.long).unique()
        if self.held_out.numel() and not 0 <= int(self.held_out.min()) <= \
                int(self.held_out.max()) < self.num_clients:
            raise ValueError(f"held_out names clients outside [0, {self.num_clients}): "
                             f"{self.held_out.tolist()}")
        if self.objective is None:
            self.objective = objective_for(self.task)
        if self.clients is None:
            self.clients = ClientTable(self.init_params, self.num_clients)
        if self.clients.num_clients != self.num_clients:
            raise ValueError(f"the client table holds {self.clients.num_clients} clients, "
                             f"the federation has {self.num_clients}")

    @property
    def table(self) -> ClientTable:
        r"""The client table (never ``None`` after construction)."""
        assert self.clients is not None
        return self.clients

    def shares(self, clients: Tensor | None = None) -> Tensor:
        r"""Sample shares :math:`p_i = n_i / \sum_j n_j` over ``clients``
        (default: all) :math:`(S,)`."""
        n = self.num_samples if clients is None else self.num_samples[clients]
        return sample_shares(n, self.init_params.dtype)

    def add_clients(self, init_params: Tensor, num_samples: Tensor) -> None:
        r"""Clients joining the federation: they get ids :math:`N, \ldots,
        N + k - 1`, hold ``init_params`` :math:`(k, D)` in the client table and
        ``num_samples`` :math:`(k,)` training samples."""
        if init_params.dim() != 2 or init_params.size(0) != num_samples.numel():
            raise ValueError(f"init_params must be (k, D) for k = {num_samples.numel()} "
                             f"joining clients, got {tuple(init_params.shape)}")
        self.table.grow(init_params)
        self.num_samples = torch.cat([self.num_samples, num_samples.to(self.num_samples)])
        self.num_clients = self.table.num_clients

    def is_held_out(self, clients: Tensor) -> Tensor:
        r"""Which of ``clients`` :math:`(S,)` are held out, as a bool mask."""
        return torch.isin(clients, self.held_out.to(clients.device))


class Strategy(nn.Module):
    r"""Base class of server algorithms.

    A strategy owns its operators, learnable modules and optimizers. The
    orchestration (who is sampled, local training, evaluation) calls, each
    round:

    1. :meth:`configure_train` for the sampled clients: a
       :class:`~pyg_fedgraph.train.jobs.TrainPlan` (starting models,
       regularizer, local settings and rule, further client jobs),
    2. :meth:`aggregate_train` with a :class:`FederationGraph` of their
       accepted results (``x`` = uploaded parameters, ``delta`` = their
       updates, one attribute per client job's output),
    3. :meth:`personalized_params` (and :meth:`finetune_job`) for the models
       to evaluate.

    The federation's state that is not the strategy's own (every client's
    latest model, which clients trained or are held out, the local settings)
    is read from :attr:`ctx` (:class:`FederationContext`); a strategy keeps
    no copy of the client table. All resumable state of the strategy is in
    :meth:`state_dict` (tensors registered as buffers or parameters, plus
    :meth:`get_extra_state` for optimizers). As in PyTorch, state tensors are
    updated in place and ``state_dict()`` shares their storage: whoever keeps
    a snapshot copies it. Subclasses set the class attribute ``name`` (the
    CLI name).

    Attributes:
        needs_prior_graph (bool): the strategy requires ``edge_index``.
        supports_private_parameters (bool): the strategy works on the shared
            part of models whose rest stays on the clients
            (:mod:`pyg_fedgraph.train.private`); :obj:`False` for rules that
            need whole models.
    """
    name: ClassVar[str] = ""
    needs_prior_graph: ClassVar[bool] = False
    supports_private_parameters: ClassVar[bool] = True
    #: Local-training keys (``"lr"`` ...) its default search space also tunes.
    search_local: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_checks_hparams", False):
            cls.__init__ = _checked_init(init)  # type: ignore[method-assign]  # adds the hparam check

    def __init__(self) -> None:
        super().__init__()
        self.ctx: FederationContext | None = None

    def setup(self, ctx: FederationContext) -> None:
        r"""Called once before round 1 (and before :meth:`load_state_dict`)."""
        # The engine ran the strategy's own check_federation; this keeps the
        # requirement every strategy shares for callers that drive setup directly.
        Strategy.check_federation(self, ctx.num_clients, ctx.num_clients,
                                  ctx.edge_index is not None)
        self.ctx = ctx

    def check_federation(self, num_clients: int, num_sampled: int,
                         has_prior_graph: bool) -> None:
        r"""Raises a :class:`ValueError` when the strategy cannot run on a
        federation of ``num_clients`` clients of which ``num_sampled`` train
        per round, with or without a prior client graph, and logs a warning
        when it can run but degenerately (the round engine and the command
        line's preflight call it before any work)."""
        if self.needs_prior_graph and not has_prior_graph:
            raise ValueError(f"strategy {self.name!r} needs a prior client graph; "
                             f"use a dataset that provides edge_index (e.g. fl60)")

    def default_sample_fraction(self, num_clients: int) -> float:
        r"""Share of clients sampled per round when the user does not choose
        (the paper's setting; e.g. Panacea samples 5 clients, FedCEDAR 30%)."""
        return 1.0

    @classmethod
    def hparam_schema(cls) -> dict[str, HParam]:
        r"""The constructor's declared hyper-parameters
        (:func:`~pyg_fedgraph.hparams.schema`): what ``--set``, config files
        and search spaces accept for this strategy."""
        return schema(cls)

    @classmethod
    def search_space(cls, trial: optuna.trial.Trial) -> dict[str, Any]:
        r"""The hyper-parameters an Optuna study tunes (:mod:`pyg_fedgraph.tune`):
        every constructor argument declared with a
        :class:`~pyg_fedgraph.hparams.Search` (the paper's grid), plus the
        local-training keys of :attr:`search_local`, each drawn from ``trial``
        under its own name (users fix entries with ``--set`` and replace
        them with ``--param``)."""
        out: dict[str, Any] = {}
        for name in cls.search_local:
            local = LOCAL_SCHEMA[name]
            assert local.search is not None  # search_local names searched keys only
            out[name] = local.search.suggest(trial, name, local.is_integer)
        for name, hp in cls.hparam_schema().items():
            if hp.search is not None:
                out[name] = hp.search.suggest(trial, name, hp.is_integer)
        return out

    @staticmethod
    def local_search_space(trial: optuna.trial.Trial) -> dict[str, Any]:
        r"""The local SGD learning rate ``lr`` where
        :class:`~pyg_fedgraph.train.LocalConfig` declares it searched
        (``tune_local=True`` adds it to any strategy's space)."""
        hp = LOCAL_SCHEMA["lr"]
        assert hp.search is not None
        return {"lr": hp.search.suggest(trial, "lr", hp.is_integer)}

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        raise NotImplementedError

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        raise NotImplementedError

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        r"""Models to evaluate for ``clients`` :math:`(S, D)`; ``None`` means
        each client's own local model."""
        raise NotImplementedError

    def finetune_job(self) -> FineTune | None:
        r"""Local fine-tuning of :meth:`personalized_params` before every
        evaluation (FedAvg-FT), or ``None`` (the default)."""
        return None

    def configure_evaluate(self, clients: Tensor) -> EvaluatePlan:
        r"""What ``clients`` :math:`(S,)` are evaluated with: by default
        :meth:`personalized_params` and :meth:`finetune_job`; a strategy whose
        clients choose their model (IFCA) returns a plan with a start job."""
        return EvaluatePlan(params=self.personalized_params(clients),
                            finetune=self.finetune_job())

    def collaboration_graph(self) -> Tensor | None:
        r"""The latest client collaboration matrix :math:`(N, N)` if the
        strategy has one (row :math:`i` = weights client :math:`i` gives)."""
        return None

    def diagnostics(self) -> dict[str, Any]:
        r"""Figures of the strategy's learned state worth keeping with a
        finished run's record (plain JSON values; default: none)."""
        return {}

    def _require_setup(self) -> FederationContext:
        if self.ctx is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must be called first")
        return self.ctx

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.hparams().items())

    def hparams(self) -> dict[str, Any]:
        r"""The constructor's hyper-parameters and their values (for configs
        and summaries), read from the attributes of the same names."""
        return {name: getattr(self, name) for name in self.hparam_schema()}

    # The format version of a strategy's state is PyTorch's module version
    # (``_version``, saved in the metadata of every state_dict()): a strategy
    # whose saved state changes meaning under the same name raises it and
    # says in state_version_error() why older states cannot be loaded.
    @classmethod
    def state_version_error(cls, version: int, what: str = "state") -> str:
        r"""The one-line reason why a ``what`` (a state, an Optuna study) made
        by this strategy's format ``version`` (another than the class's
        ``_version``) cannot be continued by this strategy."""
        return (f"this {cls.name or cls.__name__!r} {what} has format version {version}, "
                f"this version of pyg_fedgraph reads version {cls._version}; it was written "
                f"by another version and cannot be loaded")

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        version = local_metadata.get("version") if local_metadata else None
        if version is not None and int(version) != self._version:
            raise ValueError(self.state_version_error(int(version)))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)


class ServerOptimizerState:
    r"""Mixin for strategies that learn on the server: saves the optimizer
    :attr:`server_optimizer` (created in :meth:`Strategy.setup`) in the
    strategy's ``state_dict()`` through PyTorch's extra-state hooks. List it
    before :class:`Strategy` in the bases:
    ``class FedAGHN(ServerOptimizerState, Strategy)``."""
    server_optimizer: torch.optim.Optimizer | None = None

    def get_extra_state(self) -> dict[str, Any]:
        if self.server_optimizer is None:
            return {}
        return {"optimizer": self.server_optimizer.state_dict()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        if self.server_optimizer is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must be called before "
                               f"load_state_dict()")
        # Optimizer.load_state_dict keeps the given momentum tensors: copy them so
        # that the source strategy and this one never share (and step) a buffer.
        self.server_optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))


def _checked_init(init: Callable[..., None]) -> Callable[..., None]:
    r"""``init`` preceded by the check of its arguments against its declared
    hyper-parameters (:func:`~pyg_fedgraph.hparams.schema`): one checker for
    every strategy, so constructors hold only the checks that relate
    several arguments."""
    signature = inspect.signature(init)
    hps = schema(init)

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        values = {k: hps[k].check(v) if k in hps else v
                  for k, v in bound.arguments.items() if k != "self"}
        init(self, **values)

    checked._checks_hparams = True  # type: ignore[attr-defined]  # a marker for __init_subclass__
    return checked
