r"""The round engine: the server side of federated rounds, whatever carries
the messages.

:class:`RoundEngine` owns the federation's persistent state (the
:class:`~pyg_fedgraph.data.ClientTable` of every client's latest accepted
model, which clients are held out, the prior graph, the history) and runs
the round logic once for every transport:

.. code-block:: text

    sample(t)  ->  configure_train(t, S_t)  ->  [clients run the TrainPlan]
               ->  aggregate_train(t, replies)  ->  [strategy.aggregate_train]
    should_evaluate(t)  ->  configure_evaluate(clients)  ->  [clients evaluate]
               ->  record(t, metrics)

A transport only moves the plans and the replies: the in-process
:class:`~pyg_fedgraph.Simulator` runs the plans for all sampled clients in one
batched computation, the Flower :class:`~pyg_fedgraph.integrations.flower.GraphStrategy`
sends them as messages to real clients. Both call the same methods here, so
sampling, checks of uploads, the round's graph, the fallbacks and the
evaluation protocol (test metric at the round of best mean validation
metric) are written once.
"""
from __future__ import annotations

import logging
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch_geometric.utils import subgraph

from pyg_fedgraph.data.federated_dataset import Task
from pyg_fedgraph.data.federation import ClientTable, FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.data.objective import Objective
from pyg_fedgraph.engine.history import History, RoundRecord
from pyg_fedgraph.engine.validation import DEFAULT_MAX_NORM, RejectPolicy, UpdateValidator
from pyg_fedgraph.strategies.base import FederationContext, Strategy
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.jobs import EvaluatePlan, TrainPlan
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["RoundEngine", "RoundUpdate", "Rejection", "sample_clients", "num_sampled",
           "snapshot", "STATE_FORMAT"]

log = logging.getLogger(__name__)

#: Version of the layout of :meth:`RoundEngine.state_dict` (and of the
#: orchestrators' checkpoints built on it).
STATE_FORMAT = 2


def num_sampled(num_candidates: int, fraction: float) -> int:
    r"""How many of ``num_candidates`` clients a round samples:
    ``max(1, round(fraction * num_candidates))``, all of them for
    ``fraction >= 1``."""
    if fraction >= 1.0 or num_candidates == 0:
        return num_candidates
    return max(1, int(round(fraction * num_candidates)))


def sample_clients(candidates: Tensor, fraction: float, generator: torch.Generator) -> Tensor:
    r"""A uniformly random subset of :func:`num_sampled` of ``candidates``,
    sorted (all of them when ``fraction >= 1``)."""
    n = candidates.numel()
    k = num_sampled(n, fraction)
    if k == n:
        return candidates.clone()
    pick = torch.randperm(n, generator=generator)[:k]
    return candidates[pick].sort().values


class Rejection(NamedTuple):
    r"""One upload the engine rejected (see
    :class:`~pyg_fedgraph.engine.UpdateValidator`): the round, the client
    that sent it and why (``"non-finite values"``, ``"absurd norm: ..."``)."""
    round: int
    client: int
    reason: str


@dataclass
class RoundUpdate:
    r"""The outcome of :meth:`RoundEngine.aggregate_train`.

    Attributes:
        accepted (torch.Tensor): which of the replying clients' uploads were
            aggregated :math:`(K,)` bool.
        reasons (list): why each rejected upload was rejected (``None`` for
            accepted ones).
        loss (float): mean training loss of the accepted clients (NaN if none).
        graph (FederationGraph, optional): what the strategy aggregated.
    """
    accepted: Tensor
    reasons: list[str | None]
    loss: float
    graph: FederationGraph | None

    @property
    def num_accepted(self) -> int:
        return int(self.accepted.sum())


class RoundEngine:
    r"""Runs federated rounds of a :class:`~pyg_fedgraph.strategies.Strategy`
    for any transport (see the module docstring).

    Args:
        strategy (Strategy): the server algorithm; set up here.
        layout (ParamLayout): the client model's flat layout.
        init_params (torch.Tensor): the common initial model :math:`(D,)`.
        num_samples (torch.Tensor): training samples per client :math:`(N,)`.
        task (str, optional): ``"classification"`` or ``"regression"``.
        objective (Objective, optional): the clients' loss and metrics
            (default: the task's); its primary metric picks the best round.
        local (LocalConfig, optional): the run's local settings.
        edge_index, edge_weight (torch.Tensor, optional): prior client graph.
        held_out (torch.Tensor, optional): clients that never train (novel
            clients); evaluated with the models the strategy generates.
        sample_fraction (float, optional): share of the candidates sampled
            per round (default: the strategy's
            :meth:`~pyg_fedgraph.strategies.Strategy.default_sample_fraction`).
        seed (int, optional): the run's seed (default: ``0``).
        rounds (int, optional): the last round, always evaluated.
        eval_every (int, optional): evaluate every k rounds (default: ``1``).
        eval_clients (torch.Tensor, optional): clients whose mean metric is
            reported (default: all; the benign ones under attack).
        reject_policy (str, optional): ``"drop"`` bad uploads (logged) or
            ``"raise"`` (default: ``"drop"``).
        max_update_norm (float, optional): uploads whose update norm
            :math:`\|\theta_i - \theta_i^{start}\|` exceeds it are rejected;
            ``None`` disables the bound (default: ``1e6``).
    """

    def __init__(self, strategy: Strategy, *, layout: ParamLayout, init_params: Tensor,
                 num_samples: Tensor, task: Task = "classification",
                 objective: Objective | None = None, local: LocalConfig | None = None,
                 edge_index: Tensor | None = None, edge_weight: Tensor | None = None,
                 held_out: Tensor | None = None, sample_fraction: float | None = None,
                 seed: int = 0, rounds: int | None = None, eval_every: int = 1,
                 eval_clients: Tensor | None = None, reject_policy: RejectPolicy = "drop",
                 max_update_norm: float | None = DEFAULT_MAX_NORM,
                 device: str | torch.device | None = None) -> None:
        if not isinstance(strategy, Strategy):
            raise TypeError(f"strategy must be a pyg_fedgraph Strategy, got "
                            f"{type(strategy).__name__}")
        #: Where the client table and the strategy live (see :attr:`device`).
        self.device = init_params.device if device is None else torch.device(device)
        init = init_params.detach().to(self.device)
        if tuple(init.shape) != (layout.num_params,):
            raise ValueError(f"initial parameters have shape {tuple(init.shape)}, the model has "
                             f"{layout.num_params} parameters")
        n = int(num_samples.numel())
        if n < 1:
            raise ValueError("a federation needs at least one client")
        if eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {eval_every}")
        if rounds is not None and rounds < 0:
            raise ValueError(f"rounds must be >= 0, got {rounds}")
        self.strategy = strategy
        self.layout = layout
        self.seed = int(seed)
        self.rounds = rounds
        self.eval_every = int(eval_every)
        self.table = ClientTable(init, n)
        place = self.device
        self.ctx = FederationContext(
            num_clients=n, layout=layout, init_params=init.clone(),
            num_samples=num_samples.detach().to(device=place, dtype=torch.long, copy=True),
            edge_index=None if edge_index is None else edge_index.to(place),
            edge_weight=None if edge_weight is None else edge_weight.to(place), seed=self.seed,
            held_out=torch.zeros(0, dtype=torch.long) if held_out is None else held_out,
            task=task, local=local or LocalConfig(), objective=objective, clients=self.table)
        self.held_out = self.ctx.held_out
        mask = torch.ones(n, dtype=torch.bool)
        mask[self.held_out] = False
        #: Clients that may be sampled (not held out).
        self.trainable = mask.nonzero().view(-1)
        if self.trainable.numel() == 0:
            raise ValueError("every client is held out; nothing would train")
        fraction = strategy.default_sample_fraction(n) if sample_fraction is None \
            else float(sample_fraction)
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"sample_fraction must be in (0, 1], got {fraction}")
        self.sample_fraction = fraction
        self.validator = UpdateValidator(layout.num_params, policy=reject_policy,
                                         max_norm=max_update_norm)
        obj = self.ctx.objective
        assert obj is not None
        self.objective = obj
        self.history = History(obj.primary, obj.higher_is_better, eval_clients=eval_clients)
        self.novel_history = (History(obj.primary, obj.higher_is_better,
                                      eval_clients=self.held_out)
                              if self.held_out.numel() else None)
        #: The last finished round.
        self.round = 0
        #: Uploads accepted since the start of the run.
        self.accepted_total = 0
        #: Every upload rejected since :attr:`rejections_from` (a
        #: :class:`Rejection` each, in the order of the rounds), whether or not
        #: the round was evaluated: the history's ``num_rejected`` counts only
        #: evaluated rounds, and the log only names the first rounds at
        #: WARNING level.
        self.rejections: list[Rejection] = []
        #: The first round :attr:`rejections` covers: 1, or the round after
        #: the checkpoint a run resumed from when that checkpoint was written
        #: by a version that did not keep them.
        self.rejections_from = 1
        self._said_nothing_accepted = False
        strategy.check_federation(n, self.num_sampled, edge_index is not None)
        strategy.to(place)  # its parameters and buffers (and the optimizers built in setup)
        strategy.setup(self.ctx)
        strategy.to(place)  # tensors setup assigned to buffers from CPU constructors

    @property
    def num_clients(self) -> int:
        return self.ctx.num_clients

    @property
    def num_sampled(self) -> int:
        r"""Clients sampled per round when all trainable clients are candidates."""
        return num_sampled(self.trainable.numel(), self.sample_fraction)

    # ---------------------------------------------------------------- rounds
    def sample(self, rnd: int, candidates: Tensor | None = None) -> Tensor:
        r"""The clients sampled in round ``rnd`` among ``candidates``
        (default: every client that is not held out), from the stream
        ``(seed, "sample", rnd)``."""
        if candidates is None:
            candidates = self.trainable
        return sample_clients(candidates, self.sample_fraction,
                              make_generator(self.seed, "sample", rnd))

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        r"""The strategy's :class:`~pyg_fedgraph.train.jobs.TrainPlan` for
        ``clients`` :math:`(S,)`, checked (one :math:`D`-row per client)."""
        clients = clients.to(torch.long)
        plan = self.strategy.configure_train(rnd, clients)
        if not isinstance(plan, TrainPlan):
            raise TypeError(f"strategy {self._name!r}.configure_train returned "
                            f"{type(plan).__name__}, expected a TrainPlan")
        plan.check(clients.numel(), self.layout.num_params, f"strategy {self._name!r}")
        if plan.params is not None:
            plan.params = plan.params.detach()
        return plan

    def aggregate_train(self, rnd: int, clients: Tensor, params: Tensor, start: Tensor,
                        outputs: dict[str, Tensor] | None = None,
                        loss: Tensor | None = None) -> RoundUpdate:
        r"""Checks the uploads of round ``rnd``, hands the accepted ones to the
        strategy as a :class:`~pyg_fedgraph.data.FederationGraph`, then
        writes them to the client table.

        Args:
            clients (torch.Tensor): the clients that replied :math:`(K,)`
                (possibly none: the round then only advances).
            params (torch.Tensor): their uploads :math:`(K, D)`.
            start (torch.Tensor): the models they started from :math:`(K, D)`;
                ``delta = params - start``.
            outputs (dict, optional): the outputs of the plan's client jobs,
                :math:`(K, \ldots)` each; they become graph attributes.
            loss (torch.Tensor, optional): their mean training loss :math:`(K,)`.
        """
        clients = clients.to(torch.long)
        outputs = outputs or {}
        k = clients.numel()
        if k:
            check = self.validator.check(params, reference=start, client_id=clients, rnd=rnd)
            accepted, reasons = check.keep.cpu(), check.reasons
            senders = clients.tolist()
            self.rejections.extend(Rejection(int(rnd), senders[i], str(reasons[i]))
                                   for i in (~accepted).nonzero().view(-1).tolist())
        else:
            accepted, reasons = torch.zeros(0, dtype=torch.bool), []
        kept = accepted.nonzero().view(-1)
        graph = None
        mean_loss = math.nan
        if kept.numel():
            ids = clients[kept]
            x = params[kept].detach()
            graph = self._graph(ids, x, x - start[kept].detach(),
                                {name: v[kept].detach() for name, v in outputs.items()})
            self.strategy.aggregate_train(rnd, graph)
            self.table.update(ids, x)
            if loss is not None:
                mean_loss = float(loss[kept].mean())
        else:
            self.table.update(clients[:0], params[:0])
            # Said once at WARNING level: a run where this repeats says it in its summary
            # (num_rejected, num_dropped) and, through the CLI, in its exit status.
            level = logging.WARNING if not self._said_nothing_accepted else logging.INFO
            self._said_nothing_accepted = True
            log.log(level, "round %d: no update was accepted (%d replied); the strategy was "
                    "not updated%s", rnd, k, "" if level == logging.INFO else
                    " (further such rounds are logged at INFO level)")
        self.accepted_total += int(kept.numel())
        self.round = rnd
        log.debug("round %d: %d of %d replies aggregated, loss %.4f", rnd, kept.numel(), k,
                  mean_loss)
        return RoundUpdate(accepted, reasons, mean_loss, graph)

    def _graph(self, clients: Tensor, x: Tensor, delta: Tensor,
               outputs: dict[str, Tensor]) -> FederationGraph:
        ei, ew = self.ctx.edge_index, self.ctx.edge_weight
        clients = clients.to(self.device)
        if ei is not None:
            ei, ew = subgraph(clients, ei, ew, relabel_nodes=True, num_nodes=self.num_clients)
        return FederationGraph(x=x, delta=delta, num_samples=self.ctx.num_samples[clients],
                               client_id=clients, layout=self.layout, edge_index=ei,
                               edge_weight=ew, **outputs)

    # -------------------------------------------------------------- evaluate
    def should_evaluate(self, rnd: int) -> bool:
        r"""Round ``rnd`` is evaluated: every ``eval_every`` rounds and the last."""
        return rnd % self.eval_every == 0 or (self.rounds is not None and rnd == self.rounds)

    def configure_evaluate(self, clients: Tensor) -> EvaluatePlan:
        r"""The strategy's :class:`~pyg_fedgraph.train.jobs.EvaluatePlan` for
        ``clients`` (``params=None``: their own local models), checked."""
        plan = self.strategy.configure_evaluate(clients.to(torch.long))
        if plan.params is not None:
            want = (clients.numel(), self.layout.num_params)
            if tuple(plan.params.shape) != want:
                raise ValueError(f"strategy {self._name!r} returned personalized parameters "
                                 f"of shape {tuple(plan.params.shape)}, expected {want}")
            plan.params = plan.params.detach()
        return plan

    def record(self, rnd: int, val: dict[str, Tensor], test: dict[str, Tensor], *,
               train_loss: float = math.nan, seconds: float = 0.0, num_sampled: int = 0,
               extra: dict[str, float] | None = None) -> RoundRecord:
        r"""Appends the per-client metrics of round ``rnd`` (``{metric: (N,)}``,
        NaN for clients not evaluated) to the history and returns the record."""
        record = RoundRecord(rnd, train_loss, val, test, seconds, num_sampled,
                             extra=dict(extra or {}))
        self.history.append(record)
        if self.novel_history is not None:
            self.novel_history.append(record)
        return record

    def summary(self) -> dict[str, Any]:
        r"""The history's summary (``test`` at the round of best mean
        validation metric), plus ``test_per_client_best`` (each client at its
        own best validation round, the rule of pFedGraph's code; see
        :class:`~pyg_fedgraph.engine.History`), and ``test_novel`` /
        ``test_novel_per_client_best`` when clients are held out."""
        out = self.history.summary()
        if len(self.history):
            out["test_per_client_best"] = self.history.test_at_best(protocol="per-client-best")
        if self.novel_history is not None and len(self.novel_history):
            out["test_novel"] = self.novel_history.mean("test")[self.history.best_index]
            out["test_novel_final"] = self.novel_history.mean("test")[-1]
            out["test_novel_per_client_best"] = self.novel_history.test_at_best(
                protocol="per-client-best")
        return out

    # --------------------------------------------------------------- resume
    @property
    def _name(self) -> str:
        return self.strategy.name or type(self.strategy).__name__

    def state_dict(self) -> dict[str, Any]:
        r"""The server's whole state: round, client table, histories and the
        strategy's :meth:`state_dict` (with its optimizers). As PyTorch's, it
        shares storage with the live state: copy it to keep a snapshot."""
        return {
            "format": STATE_FORMAT,
            "round": self.round,
            "seed": self.seed,
            "strategy_name": self._name,
            "num_clients": self.num_clients,
            "num_params": self.layout.num_params,
            "held_out": self.held_out,
            "accepted_total": self.accepted_total,
            # Plain lists (not named tuples), so that torch.load(weights_only=True) reads them.
            "rejections": [list(r) for r in self.rejections],
            "rejections_from": self.rejections_from,
            "table": self.table.state_dict(),
            "history": self.history.state_dict(),
            "novel_history": (None if self.novel_history is None
                              else self.novel_history.state_dict()),
            "strategy": self.strategy.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Restores :meth:`state_dict` into an engine built with the same
        settings (its strategy is already set up)."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"unsupported run state format {state.get('format')!r}; this "
                             f"version of pyg_fedgraph reads format {STATE_FORMAT} (the "
                             f"checkpoint was written by another version)")
        mine = {"num_clients": self.num_clients, "num_params": self.layout.num_params,
                "strategy_name": self._name, "seed": self.seed}
        for key, value in mine.items():
            if state[key] != value:
                raise ValueError(f"the saved run has {key}={state[key]!r} but this one has "
                                 f"{value!r}; build it with the saved run's settings")
        if not torch.equal(state["held_out"], self.held_out):
            raise ValueError(f"the saved run's held-out clients {state['held_out'].tolist()} "
                             f"differ from this run's {self.held_out.tolist()}")
        self.table.load_state_dict(state["table"])
        self.strategy.load_state_dict(state["strategy"])
        self.strategy.to(self.device)  # state a strategy re-assigned on load comes from the CPU
        self.history.load_state_dict(state["history"])
        if self.novel_history is not None:
            self.novel_history.load_state_dict(state["novel_history"])
        self.accepted_total = int(state["accepted_total"])
        self.round = int(state["round"])
        if "rejections" in state:
            self.rejections = [Rejection(int(r), int(c), str(why))
                               for r, c, why in state["rejections"]]
            self.rejections_from = int(state["rejections_from"])
        else:  # written before the engine kept its rejections: unknown up to its round
            self.rejections, self.rejections_from = [], self.round + 1

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self._name}, clients={self.num_clients}, "
                f"round={self.round})")


def snapshot(obj: Any) -> Any:
    r"""A deep copy of a state on the CPU (nested dicts / lists / tuples,
    tensors copied to host memory, state dicts keeping their ``_metadata``):
    what a consumer that keeps a state dict in memory takes, since live state
    dicts share storage; and what a checkpoint holds, so that it resumes on
    any device."""
    if isinstance(obj, Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, OrderedDict):
        out = OrderedDict((k, snapshot(v)) for k, v in obj.items())
        meta = getattr(obj, "_metadata", None)
        if meta is not None:
            out._metadata = snapshot(meta)  # type: ignore[attr-defined]  # not in OrderedDict's stubs
        return out
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [snapshot(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(snapshot(v) for v in obj)
    return obj
