r"""The server side: any pyg_fedgraph strategy as a Flower (Message API) strategy."""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy import Strategy as FlowerStrategy
from torch import Tensor, nn

import pyg_fedgraph.integrations.flower.protocol as P
from pyg_fedgraph.data.federated_dataset import FederatedDataset, Task
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.engine import History, RoundEngine, sample_clients, snapshot
from pyg_fedgraph.strategies.base import Strategy
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.private import PrivateParameters, private_prefixes
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["GraphStrategy", "DroppedReply"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DroppedReply:
    r"""A reply left out of a round, and why.

    Args:
        round (int): the strategy's round.
        stage (str): ``"train"``, ``"evaluate"`` or ``"query"``.
        node_id (int): Flower node id of the sender.
        partition_id (int, optional): its partition, when known.
        reason (str): what was wrong.
    """
    round: int
    stage: str
    node_id: int
    partition_id: int | None
    reason: str


@dataclass
class _Pending:
    partition_id: int
    start: Tensor | None
    outputs: tuple[str, ...]


class GraphStrategy(FlowerStrategy):
    r"""Runs a pyg_fedgraph :class:`~pyg_fedgraph.strategies.Strategy` on
    Flower's Message API: every sampled client receives its *own*
    personalized plan, and the replies of a round become a
    :class:`~pyg_fedgraph.data.FederationGraph` for the wrapped strategy.

    .. math::
        \text{round } t:\quad
        \text{TrainPlan}_{S_t} = \texttt{configure\_train}(t, S_t)
        \;\xrightarrow{\text{one message per client}}\;
        \theta_i = \mathrm{run\_plan}_i(\theta^{start}_i)
        \;\xrightarrow{\text{validated replies}}\;
        \texttt{aggregate\_train}(t, \mathcal{G}_t)

    The server side of a round (sampling, the strategy, checks of the
    uploads, the round's graph, the client table, the evaluation protocol) is
    the :class:`~pyg_fedgraph.engine.RoundEngine`, the same as in the
    in-process :class:`~pyg_fedgraph.Simulator`; this class only moves plans
    and replies (:mod:`~pyg_fedgraph.integrations.flower.protocol`) and
    handles the nodes.

    Flower node ids are random and change between runs, so clients are
    identified by a stable *partition id* that each node reports (from its
    ``node_config``, see :class:`GraphClient`): the first time a node is seen,
    a ``"query"`` message asks for it. A reply is dropped, logged with the
    reason and kept in :attr:`dropped`, when it carries an error, claims an
    unknown partition (or one that is not the sender's), was not expected,
    holds a model with the wrong number of arrays, a wrong shape or dtype, or
    non-finite values, lacks a job's output, or an update of absurd norm; the
    round continues with the other clients.

    Sampling is the engine's (``(seed, "sample", round)``) over the partitions
    that are connected. Per-client metrics of every round are kept in
    :attr:`train_metrics` and :attr:`evaluate_metrics` and in the engine's
    history (:attr:`history`: the papers' protocol, test metric at the round
    of best mean validation metric); the records returned to Flower hold
    their means over clients. The :class:`~flwr.app.ArrayRecord` returned
    after training holds every client's personalized model,
    ``"personalized-params"`` :math:`(N, D)`. :meth:`state_dict` is a snapshot
    of everything needed to resume; ``on_round_end`` is called at the end of
    every round, e.g. to save it.

    Args:
        strategy (Strategy): the pyg_fedgraph server algorithm.
        model (torch.nn.Module): the client architecture; its parameters are
            the initial model unless :meth:`start` gets ``initial_arrays``.
        num_clients (int): :math:`N`, partitions ``0 .. N-1``.
        num_samples (torch.Tensor, optional): training samples per partition
            :math:`(N,)`; ``None`` asks the clients (then all :math:`N` must be
            connected before round 1) (default: ``None``).
        edge_index (torch.Tensor, optional): prior client graph (default: ``None``).
        edge_weight (torch.Tensor, optional): its weights (default: ``None``).
        held_out (torch.Tensor, optional): partitions that never train (novel
            clients); they are evaluated (default: ``None``).
        task (str, optional): ``"classification"`` or ``"regression"``
            (default: ``"classification"``).
        local (LocalConfig, optional): the run's local settings, sent to the
            clients (a strategy's plan may override them for its round);
            ``None`` lets every client use its own (default: ``None``).
        fraction_train (float, optional): share of partitions sampled per
            round; ``None`` uses ``strategy.default_sample_fraction(N)``
            (default: ``None``).
        fraction_evaluate (float, optional): share of connected partitions
            evaluated (default: ``1.0``).
        evaluate_every (int, optional): evaluate every k rounds and after the
            last (default: ``1``).
        min_available_nodes (int, optional): nodes to wait for before round 1
            (default: :math:`N`).
        seed (int, optional): the run's seed, sent to the clients
            (default: ``0``).
        timeout (float, optional): seconds to wait for the replies of a query
            (default: ``600``).
        max_update_norm (float, optional): replies whose update
            :math:`\|\theta_i - \theta_i^{start}\|_2` exceeds it are dropped, as
            in the simulator; ``None`` disables the bound (default: ``1e6``).
        on_round_end (callable, optional): ``fn(graph_strategy, rnd)`` at the
            end of each round, after its aggregation and its evaluation (if
            the round is evaluated), e.g. to keep :meth:`state_dict`
            (default: ``None``).
        private (str or sequence of str, optional): parameter-name prefixes
            of the part of the model that stays on the clients
            (:mod:`pyg_fedgraph.train.private`): the server, its strategy and
            every message see the rest only; the clients must declare the
            same (default: the model's ``private_parameters``, usually none).
    """

    def __init__(self, strategy: Strategy, model: nn.Module, num_clients: int, *,
                 num_samples: Tensor | None = None, edge_index: Tensor | None = None,
                 edge_weight: Tensor | None = None, held_out: Tensor | None = None,
                 task: Task = "classification", local: LocalConfig | None = None,
                 fraction_train: float | None = None, fraction_evaluate: float = 1.0,
                 evaluate_every: int = 1, min_available_nodes: int | None = None,
                 seed: int = 0, timeout: float = 600.0,
                 max_update_norm: float | None = 1e6,
                 on_round_end: Callable[[GraphStrategy, int], None] | None = None,
                 private: str | Sequence[str] | None = None) -> None:
        if not isinstance(strategy, Strategy):
            raise TypeError(f"strategy must be a pyg_fedgraph Strategy, got "
                            f"{type(strategy).__name__}")
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        if num_samples is not None and num_samples.numel() != num_clients:
            raise ValueError(f"num_samples has {num_samples.numel()} entries for "
                             f"{num_clients} clients")
        fraction_train = (strategy.default_sample_fraction(num_clients)
                          if fraction_train is None else fraction_train)
        for name, value in (("fraction_train", fraction_train),
                            ("fraction_evaluate", fraction_evaluate)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if evaluate_every < 1:
            raise ValueError(f"evaluate_every must be >= 1, got {evaluate_every}")
        if task not in ("classification", "regression"):
            raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
        if max_update_norm is not None and not max_update_norm > 0:
            raise ValueError(f"max_update_norm must be positive or None, got {max_update_norm}")
        self.strategy = strategy
        self.model = model
        prefixes = private_prefixes(model, private)
        if prefixes and not strategy.supports_private_parameters:
            raise ValueError(f"strategy {strategy.name!r} works on whole models and cannot "
                             f"leave parameters {list(prefixes)} private to the clients")
        #: The layout of what the server sees: the model less its private part.
        self.layout = (ParamLayout.from_module(model) if not prefixes else
                       PrivateParameters(ParamLayout.from_module(model), prefixes).shared_layout)
        self.num_clients = int(num_clients)
        self.num_samples = None if num_samples is None else num_samples.detach().to(torch.long)
        self.edge_index, self.edge_weight = edge_index, edge_weight
        self.held_out = (torch.zeros(0, dtype=torch.long) if held_out is None
                         else torch.as_tensor(held_out, dtype=torch.long).unique())
        if self.held_out.numel() and not 0 <= int(self.held_out.min()) <= \
                int(self.held_out.max()) < num_clients:
            raise ValueError(f"held_out must name partitions in [0, {num_clients}), "
                             f"got {self.held_out.tolist()}")
        self.task = task
        self.local = local
        self.fraction_train = float(fraction_train)
        self.fraction_evaluate = float(fraction_evaluate)
        self.evaluate_every = int(evaluate_every)
        self.min_available_nodes = num_clients if min_available_nodes is None \
            else int(min_available_nodes)
        self.seed = int(seed)
        self.timeout = float(timeout)
        self.max_update_norm = None if max_update_norm is None else float(max_update_norm)
        self.on_round_end = on_round_end

        self.engine: RoundEngine | None = None
        self.last_graph: FederationGraph | None = None
        self.train_metrics: dict[int, dict[int, dict[str, float]]] = {}
        self.evaluate_metrics: dict[int, dict[int, dict[str, float]]] = {}
        self.dropped: list[DroppedReply] = []
        self.node_to_partition: dict[int, int] = {}
        self._reported_samples: dict[int, int] = {}
        self._ignored_nodes: set[int] = set()
        self._synced: set[int] = set()
        self._pending: dict[int, _Pending] = {}
        self._evaluating: dict[int, int] = {}
        self._last_round: int | None = None

    @classmethod
    def from_dataset(cls, strategy: Strategy, model: nn.Module, dataset: FederatedDataset,
                     **kwargs: Any) -> GraphStrategy:
        r"""Takes :math:`N`, the sample counts, the prior graph and the task
        from a :class:`FederatedDataset` the server may see (in simulation, or
        its metadata in a deployment)."""
        return cls(strategy, model, dataset.num_clients,
                   num_samples=dataset.num_samples("train").clone(),
                   edge_index=dataset.edge_index, edge_weight=dataset.edge_weight,
                   task=dataset.task, **kwargs)

    # ----------------------------------------------------------------- setup
    @property
    def is_setup(self) -> bool:
        return self.engine is not None

    @property
    def rounds_done(self) -> int:
        r"""The last finished round."""
        return 0 if self.engine is None else self.engine.round

    @property
    def history(self) -> History:
        r"""The engine's :class:`~pyg_fedgraph.engine.History` of evaluated rounds."""
        return self._require_engine().history

    def setup(self, init_params: Tensor, num_samples: Tensor | None = None) -> None:
        r"""Builds the round engine and sets up the wrapped strategy (called on
        the first :meth:`configure_train`, or by :meth:`load_state_dict`)."""
        num_samples = self.num_samples if num_samples is None else num_samples
        if num_samples is None:
            raise ValueError("GraphStrategy needs the training sample count of every partition: "
                             "pass num_samples= or let all clients connect before round 1")
        self.num_samples = num_samples.detach().to(torch.long)
        # fraction_train 0 trains nobody; the engine's sampler needs a positive share.
        fraction = self.fraction_train if self.fraction_train > 0 else 1.0
        self.engine = RoundEngine(
            self.strategy, layout=self.layout,
            # The server's state lives on the CPU, where the clients' replies are decoded.
            init_params=init_params.detach().to(device="cpu", dtype=torch.get_default_dtype()),
            num_samples=self.num_samples, task=self.task, local=self.local,
            edge_index=self.edge_index, edge_weight=self.edge_weight, held_out=self.held_out,
            sample_fraction=fraction, seed=self.seed, eval_every=self.evaluate_every,
            max_update_norm=self.max_update_norm)

    def _require_engine(self) -> RoundEngine:
        if self.engine is None:
            raise RuntimeError("GraphStrategy has not been set up; run a round or "
                               "load_state_dict() first")
        return self.engine

    def _setup_from(self, arrays: ArrayRecord) -> None:
        init = self.layout.flatten(self.model)
        if P.check_params_record(self.layout, arrays) is None:
            init = P.record_to_params(self.layout, arrays)
        elif len(arrays):
            log.warning("initial_arrays do not match the model %s; using the model's "
                        "parameters", self.layout)
        samples = self.num_samples
        if samples is None:
            missing = sorted(set(range(self.num_clients)) - set(self._reported_samples))
            if missing:
                raise ValueError(f"partitions {missing} did not report their sample counts "
                                 f"before round 1; pass num_samples= to GraphStrategy")
            samples = torch.tensor([self._reported_samples[i] for i in range(self.num_clients)])
        self.setup(init, samples)

    # ------------------------------------------------------------ discovery
    def _wait_for_nodes(self, grid: Grid) -> None:
        while len(list(grid.get_node_ids())) < self.min_available_nodes:
            log.info("waiting for nodes: %d connected, %d required",
                     len(list(grid.get_node_ids())), self.min_available_nodes)
            time.sleep(1.0)

    def discover(self, grid: Grid) -> None:
        r"""Forgets nodes that left and asks every connected node not seen
        before for its partition id."""
        current = set(grid.get_node_ids())
        for node in [n for n in self.node_to_partition if n not in current]:
            log.info("node %d (partition %d) left", node, self.node_to_partition.pop(node))
            self._synced.discard(node)
        self._ignored_nodes &= current
        new = [n for n in sorted(current)
               if n not in self.node_to_partition and n not in self._ignored_nodes]
        if not new:
            return
        messages = [Message(RecordDict({P.CONFIG: ConfigRecord({P.QUERY: P.PARTITION_ID})}),
                            dst_node_id=n, message_type=MessageType.QUERY) for n in new]
        taken = {p: n for n, p in self.node_to_partition.items()}
        for reply in grid.send_and_receive(messages, timeout=self.timeout):
            node = reply.metadata.src_node_id
            pid, reason = self._partition_of(reply)
            if reason is None and pid in taken:
                reason = f"partition {pid} is already served by node {taken[pid]}"
            if reason is not None:
                self._drop(self.rounds_done + 1, "query", node, pid, reason)
                if not reply.has_error():  # a wrong id stays wrong; errors are asked again
                    self._ignored_nodes.add(node)
                continue
            assert pid is not None  # _partition_of gives an id or a reason
            taken[pid] = node
            self.node_to_partition[node] = pid
            samples = reply.content[P.METRICS].get(P.NUM_EXAMPLES)
            if isinstance(samples, int) and samples >= 0:
                self._reported_samples[pid] = samples
        log.info("%d of %d partitions connected", len(self.node_to_partition), self.num_clients)

    def _partition_of(self, reply: Message) -> tuple[int | None, str | None]:
        if reply.has_error():
            return None, f"the client reported an error: {reply.error.reason}"
        metrics = reply.content.get(P.METRICS)
        if not isinstance(metrics, MetricRecord) or P.PARTITION_ID not in metrics:
            return None, f"the reply has no MetricRecord {P.METRICS!r} with {P.PARTITION_ID!r}"
        pid = metrics[P.PARTITION_ID]
        if not isinstance(pid, int) or not 0 <= pid < self.num_clients:
            return None, (f"unknown partition id {pid!r}; partitions are 0 .. "
                          f"{self.num_clients - 1}")
        return pid, None

    def _drop(self, rnd: int, stage: str, node: int, pid: int | None, reason: str) -> None:
        log.warning("round %d, %s: dropped the reply of node %d (partition %s): %s",
                    rnd, stage, node, pid, reason)
        self.dropped.append(DroppedReply(rnd, stage, node, pid, reason))

    def _connected(self) -> dict[int, int]:
        r"""Partition id -> node id of the connected partitions."""
        return {p: n for n, p in self.node_to_partition.items()}

    def _prepare(self, arrays: ArrayRecord, grid: Grid) -> None:
        if not self.is_setup:
            self._wait_for_nodes(grid)
        self.discover(grid)
        if not self.is_setup:
            self._setup_from(arrays)

    def _message(self, content: RecordDict, node: int, pid: int, kind: str) -> Message:
        engine = self._require_engine()
        if node not in self._synced:
            # Once per session: the client's latest model as the server knows it,
            # so that strategies that continue from local models also resume.
            content[P.LOCAL_PARAMS] = P.params_to_record(self.layout, engine.table.params[pid])
            config = cast(ConfigRecord, content[P.CONFIG])  # every message has its config
            config[P.RESET_BUFFERS] = not bool(engine.table.trained.any())
            self._synced.add(node)
        return Message(content, dst_node_id=node, message_type=kind)

    def _common_config(self, config: ConfigRecord, server_round: int, rnd: int
                       ) -> dict[str, Any]:
        common = {**dict(config), P.SERVER_ROUND: server_round, P.ROUND: rnd,
                  P.SEED: self.seed}
        if self.local is not None:
            common.update(P.local_config_to_dict(self.local))
        return common

    # -------------------------------------------------------------- training
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        r"""Samples partitions through the engine, asks the wrapped strategy
        for their plan, and sends each client its own row of it."""
        self._prepare(arrays, grid)
        engine = self._require_engine()
        rnd = engine.round + 1
        self._pending = {}
        connected = self._connected()
        candidates = torch.tensor(sorted(p for p in connected
                                         if p not in set(self.held_out.tolist())),
                                  dtype=torch.long)
        if self.fraction_train == 0.0 or candidates.numel() == 0:
            return []
        sampled = engine.sample(rnd, candidates)
        plan = engine.configure_train(rnd, sampled)
        outputs = plan.outputs
        common = self._common_config(config, server_round, rnd)
        messages = []
        for row, pid in enumerate(sampled.tolist()):
            node = connected[pid]
            text, records = P.encode_plan(plan, row, self.layout, self.strategy)
            content = RecordDict({P.CONFIG: ConfigRecord({**common, P.PARTITION_ID: pid,
                                                          P.PLAN: text})})
            for key, record in records.items():
                content[key] = record
            # Without a known start (none sent, or a start job) the client sends its update.
            start = plan.params[row].clone() if plan.sends_start and plan.params is not None \
                else None
            self._pending[node] = _Pending(pid, start, outputs)
            messages.append(self._message(content, node, pid, MessageType.TRAIN))
        log.info("round %d: sent %d personalized plans", rnd, len(messages))
        return messages

    def _check_train_reply(self, reply: Message
                           ) -> tuple[int | None, str | None, dict[str, Tensor]]:
        r"""``(partition id, reason to drop or None, decoded tensors)`` of a
        train reply (the format: the engine checks the update itself)."""
        node = reply.metadata.src_node_id
        pending = self._pending.get(node)
        pid, reason = self._partition_of(reply)
        if reason is not None:
            return (pending.partition_id if pending else pid), reason, {}
        if pending is None:
            return pid, f"node {node} was not sent a plan this round", {}
        if pid != pending.partition_id:
            return pid, (f"the reply claims partition {pid}, node {node} is partition "
                         f"{pending.partition_id}"), {}
        content = reply.content
        wanted = [(P.PARAMS, "trained model")]
        if pending.start is None:
            wanted.append((P.DELTA, "update"))
        wanted += [(P.output_key(name), f"output {name!r}") for name in pending.outputs]
        decoded = {}
        for key, what in wanted:
            if key not in content:
                return pid, f"the reply has no {what} ({key!r})", {}
            try:
                decoded[key] = P.record_to_tensor(self.layout, content[key], what)
            except ValueError as err:
                return pid, str(err), {}
            if key in (P.PARAMS, P.DELTA) and decoded[key].shape != (self.layout.num_params,):
                return pid, (f"{what}: sent {decoded[key].numel()} values, the model has "
                             f"{self.layout.num_params} parameters"), {}
        metrics = cast(MetricRecord, content[P.METRICS])  # _partition_of checked it
        loss = metrics.get(P.TRAIN_LOSS, math.nan)
        if not isinstance(loss, (int, float)):
            return pid, f"the train loss ({P.TRAIN_LOSS}) is not a number: {loss!r}", {}
        decoded["start"] = (pending.start if pending.start is not None
                            else decoded[P.PARAMS] - decoded[P.DELTA])
        return pid, None, decoded

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        r"""Checks the replies' format, hands the valid ones to the engine (in
        partition order), and returns every client's personalized model and
        the round's mean metrics."""
        engine = self._require_engine()
        rnd = engine.round + 1
        valid: dict[int, tuple[dict[str, Tensor], MetricRecord, int]] = {}
        answered = set()
        for reply in replies:
            node = reply.metadata.src_node_id
            pid, reason, decoded = self._check_train_reply(reply)
            if reason is None and pid in valid:
                reason = f"a second reply for partition {pid}"
            answered.add(node)
            if reason is not None:
                self._drop(rnd, "train", node, pid, reason)
                continue
            assert pid is not None
            valid[pid] = (decoded, cast(MetricRecord, reply.content[P.METRICS]), node)
        for node, pending in self._pending.items():
            if node not in answered:
                self._drop(rnd, "train", node, pending.partition_id, "no reply before the timeout")
        ids = torch.tensor(sorted(valid), dtype=torch.long)
        rows = [valid[p][0] for p in ids.tolist()]
        d = self.layout.num_params
        params = torch.stack([r[P.PARAMS] for r in rows]) if rows else torch.zeros(0, d)
        start = torch.stack([r["start"] for r in rows]) if rows else torch.zeros(0, d)
        outputs = {name: torch.stack([r[P.output_key(name)] for r in rows])
                   for name in (self._pending_outputs() if rows else ())}
        # Numbers: _check_train_reply checked them.
        losses = torch.tensor([float(cast(float, valid[p][1].get(P.TRAIN_LOSS, math.nan)))
                               for p in ids.tolist()])
        update = engine.aggregate_train(rnd, ids, params, start, outputs, losses)
        for k, pid in enumerate(ids.tolist()):
            if not bool(update.accepted[k]):
                self._drop(rnd, "train", valid[pid][2], pid, str(update.reasons[k]))
        self.last_graph = update.graph
        accepted = ids[update.accepted] if ids.numel() else ids
        self.train_metrics[rnd] = {p: {k: float(v) for k, v in valid[p][1].items()
                                       if isinstance(v, (int, float))}
                                   for p in accepted.tolist()}
        self._pending = {}
        summary = MetricRecord({"num-clients": len(self.train_metrics[rnd]),
                                "num-dropped": sum(1 for d in self.dropped
                                                   if d.round == rnd and d.stage == "train")})
        if math.isfinite(update.loss):
            summary[P.TRAIN_LOSS] = update.loss
        return self._personalized_record(), summary

    def _pending_outputs(self) -> tuple[str, ...]:
        return next(iter(self._pending.values())).outputs if self._pending else ()

    def personalized_params(self) -> Tensor:
        r"""Every partition's personalized model :math:`(N, D)` (the
        strategy's :meth:`~pyg_fedgraph.strategies.Strategy.personalized_params`;
        the clients' latest models when it personalizes none), before any
        client-side choice or fine-tuning at evaluation."""
        engine = self._require_engine()
        params = self.strategy.personalized_params(torch.arange(self.num_clients))
        return engine.table.params.clone() if params is None else params.detach().clone()

    def _personalized_record(self) -> ArrayRecord:
        return ArrayRecord({"personalized-params":
                            Array(self.personalized_params().cpu().numpy())})

    # ------------------------------------------------------------ evaluation
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        r"""Sends each evaluated partition its row of the engine's
        :class:`~pyg_fedgraph.train.jobs.EvaluatePlan` (the model to
        evaluate, none for the clients' own models, and any fine-tuning)."""
        if self.fraction_evaluate == 0.0 or not self.is_setup:
            return []
        engine = self._require_engine()
        rnd = engine.round
        if not (engine.should_evaluate(rnd) or rnd == self._last_round):
            return []
        self.discover(grid)
        connected = self._connected()
        candidates = torch.tensor(sorted(connected), dtype=torch.long)
        if candidates.numel() == 0:
            return []
        # Its own stream: evaluation must not shift the training sample sequence.
        clients = sample_clients(candidates, self.fraction_evaluate,
                                 make_generator(self.seed, "evaluate-sample", rnd))
        plan = engine.configure_evaluate(clients)
        common = self._common_config(config, server_round, rnd)
        messages = []
        for row, pid in enumerate(clients.tolist()):
            text, records = P.encode_plan(plan, row, self.layout, self.strategy)
            content = RecordDict({P.CONFIG: ConfigRecord({**common, P.PARTITION_ID: pid,
                                                          P.PLAN: text})})
            for key, record in records.items():
                content[key] = record
            messages.append(self._message(content, connected[pid], pid, MessageType.EVALUATE))
        self._evaluating = {connected[p]: p for p in clients.tolist()}
        return messages

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        r"""Keeps every client's validation and test metrics, records them in
        the engine's history (NaN for clients not evaluated) and returns their
        means over clients. Flower calls it every round, evaluated or not: the
        round ends here, with ``on_round_end``."""
        out = self._aggregate_evaluate(replies)
        if self.on_round_end is not None and self.is_setup:
            self.on_round_end(self, self.rounds_done)
        return out

    def _aggregate_evaluate(self, replies: Iterable[Message]) -> MetricRecord | None:
        replies = list(replies)
        if self.engine is None or (not replies and not self._evaluating):
            return None  # a round without evaluation
        engine = self.engine
        rnd = engine.round
        expected = self._evaluating
        per_client: dict[int, dict[str, float]] = {}
        for reply in replies:
            node = reply.metadata.src_node_id
            pid, reason = self._partition_of(reply)
            if reason is None and expected.get(node) != pid:
                reason = (f"the reply claims partition {pid}, node {node} was asked to "
                          f"evaluate partition {expected.get(node)}")
            if reason is None and pid in per_client:
                reason = f"a second reply for partition {pid}"
            if reason is not None:
                self._drop(rnd, "evaluate", node, pid, reason)
                continue
            assert pid is not None
            per_client[pid] = {k: float(v) for k, v in reply.content[P.METRICS].items()
                               if isinstance(v, (int, float))}
        self._evaluating = {}
        self.evaluate_metrics[rnd] = per_client
        if not per_client:
            return None
        split_metrics: dict[str, dict[str, Tensor]] = {"val": {}, "test": {}}
        for key in sorted({k for m in per_client.values() for k in m}):
            split, _, name = key.partition("-")
            if split in split_metrics:
                column = torch.full((self.num_clients,), math.nan)
                for pid, m in per_client.items():
                    column[pid] = m.get(key, math.nan)
                split_metrics[split][name] = column
        if all(engine.objective.primary in split_metrics[s] for s in ("val", "test")):
            engine.record(rnd, split_metrics["val"], split_metrics["test"],
                          num_sampled=len(self.train_metrics.get(rnd, {})))
        out = MetricRecord({"num-clients": len(per_client)})
        for split, metrics in split_metrics.items():
            for name, column in metrics.items():
                values = column[~torch.isnan(column)]
                if values.numel():
                    out[f"{split}-{name}"] = float(values.mean())
        return out

    # --------------------------------------------------------------- running
    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None,
              num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None,
              evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None
              ) -> Result:
        r"""Runs ``num_rounds`` more rounds (Flower's loop); ``initial_arrays``
        defaults to the model's parameters. After :meth:`load_state_dict`
        the rounds continue from the checkpoint."""
        if initial_arrays is None:
            initial_arrays = P.params_to_record(self.layout, self.layout.flatten(self.model))
        self._last_round = self.rounds_done + num_rounds
        if self.engine is not None:
            self.engine.rounds = self._last_round
        self._synced = set()
        return super().start(grid, initial_arrays, num_rounds=num_rounds, timeout=timeout,
                             train_config=train_config, evaluate_config=evaluate_config,
                             evaluate_fn=evaluate_fn)

    def summary(self) -> None:
        log.info("GraphStrategy(%s, clients=%d, fraction_train=%.2f, D=%d)",
                 self.strategy.name or type(self.strategy).__name__, self.num_clients,
                 self.fraction_train, self.layout.num_params)

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        r"""A snapshot (deep copy) of everything needed to resume: the engine's
        state (round, client table, history, the wrapped strategy's state),
        the initial model, the sample counts and the per-client metrics."""
        if self.engine is None:
            raise RuntimeError("nothing to save before the first round")
        return snapshot({
            "engine": self.engine.state_dict(),
            "init_params": self.engine.ctx.init_params,
            "num_samples": self.num_samples,
            "train_metrics": self.train_metrics,
            "evaluate_metrics": self.evaluate_metrics})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Restores :meth:`state_dict` (builds the engine and sets the wrapped
        strategy up first)."""
        state = snapshot(state)
        table = state["engine"]["table"]["params"]
        if tuple(table.shape) != (self.num_clients, self.layout.num_params):
            raise ValueError(f"the checkpoint holds {tuple(table.shape)} client models, "
                             f"this federation has ({self.num_clients}, "
                             f"{self.layout.num_params})")
        self.setup(state["init_params"], state["num_samples"])
        self._require_engine().load_state_dict(state["engine"])
        self.train_metrics = state["train_metrics"]
        self.evaluate_metrics = state["evaluate_metrics"]

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.strategy.name or type(self.strategy).__name__}, "
                f"clients={self.num_clients}, rounds_done={self.rounds_done})")
