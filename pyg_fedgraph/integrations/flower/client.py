r"""The client side: a torch model and one client's data as a Flower ClientApp."""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import cast

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import Tensor, nn

import pyg_fedgraph.integrations.flower.protocol as P
from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.data.objective import Objective
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.jobs import ClientStart, EvaluatePlan, TrainPlan, evaluate_clients, run_plan
from pyg_fedgraph.train.private import PrivateParameters, private_prefixes
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.utils.device import Precision, resolve_device

__all__ = ["GraphClient", "make_client_app"]

log = logging.getLogger(__name__)

ClientData = FederatedDataset | Callable[[Context], FederatedDataset]

# Key of this client's own state in Flower's Context.state (never leaves the node).
_STATE = "pyg-fedgraph"
#: Prefix of the kept optimizer state's arrays in that record.
_OPT = "optimizer."
_ONE = torch.zeros(1, dtype=torch.long)


class GraphClient:
    r"""Trains and evaluates one federated client for :class:`GraphStrategy`,
    with the code the in-process simulator runs.

    Each train message carries the server's
    :class:`~pyg_fedgraph.train.jobs.TrainPlan` for this client (decoded with
    :func:`~pyg_fedgraph.integrations.flower.protocol.decode_plan`); the
    client carries it out with :func:`~pyg_fedgraph.train.jobs.run_plan` on a
    one-client :class:`~pyg_fedgraph.train.ClientTrainer`: local training from
    the starting model the server sent (or from its own latest model) with the
    strategy's regularizer, local settings and update rule, then the plan's
    client jobs (Ditto's personal training, pFedGAT's held-out gradient ...),
    whose outputs go back with the trained model. Evaluate messages carry an
    :class:`~pyg_fedgraph.train.jobs.EvaluatePlan` (the model to evaluate,
    fine-tuning) for :func:`~pyg_fedgraph.train.jobs.evaluate_clients`.
    Updates (``delta``, used by FedAGHN, Panacea and pFedHN) are computed by
    the server from the model it sent.

    Randomness: the server sends the run's seed, and the client derives its
    batch orders from ``(seed, purpose, round, client)`` as the simulator does
    (:mod:`pyg_fedgraph.utils.seeds`), so a client trains on the same batches
    in both, and its trained model agrees with the simulator's up to float
    rounding.

    State kept on the node between rounds (Flower's ``Context.state``, never
    uploaded): the latest local model, the floating-point buffers (BatchNorm
    statistics) and, with ``keep_optimizer_state``, the local optimizer's
    state, which stay local as in the simulator. With a private part of the
    model (:mod:`pyg_fedgraph.train.private`), the node keeps the whole
    model, completes what the server sends with its own private part and
    uploads the shared part only.

    Args:
        model (torch.nn.Module): the client architecture; its parameters are
            only used before the server's first message.
        data (FederatedDataset or callable): either the whole federation
            (each node takes its own slice with
            :meth:`FederatedDataset.subset`, convenient in simulation) or a
            function ``context -> FederatedDataset`` returning this node's
            one-client dataset (real deployments load only local data; the
            partition id is ``context.node_config["partition-id"]``, the run
            settings ``context.run_config``).
        local (LocalConfig, optional): local settings used when the server
            sends none (default: :class:`LocalConfig()`).
        objective (Objective, optional): loss and metrics (default: the
            dataset's :attr:`~pyg_fedgraph.data.FederatedDataset.objective`).
        seed (int, optional): seed of the batch orders when the server sends
            none (default: ``0``).
        partition_key (str, optional): key of ``Context.node_config`` holding
            the partition id (default: ``"partition-id"``, as set by Flower's
            simulation and by ``flower-supernode --node-config``).
        parallel (bool, optional): batched (``vmap``) training path
            (default: ``True``).
        device (str or torch.device, optional): where this node trains:
            ``"auto"`` (CUDA when the node has it), ``"cpu"``, ``"cuda:N"``
            ... (default: ``"cpu"``); each node picks its own, messages carry
            CPU tensors.
        precision (str, optional): autocast precision of local training
            (``"fp32"``, ``"bf16"``, ``"fp16"``; default: ``"fp32"``).
        private (str or sequence of str, optional): parameter-name prefixes
            of the part of the model that never leaves the node; the server's
            :class:`GraphStrategy` must declare the same (default: the
            model's ``private_parameters`` attribute, usually none).
    """

    def __init__(self, model: nn.Module, data: ClientData, *, local: LocalConfig | None = None,
                 objective: Objective | None = None, seed: int = 0,
                 partition_key: str = "partition-id",
                 parallel: bool = True, device: str | torch.device = "cpu",
                 precision: Precision = "fp32",
                 private: str | Sequence[str] | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not (isinstance(data, FederatedDataset) or callable(data)):
            raise TypeError("data must be a FederatedDataset or a function "
                            "context -> one-client FederatedDataset")
        self.model = model
        self.data = data
        self.local = local or LocalConfig()
        self.objective = objective
        self.seed = seed
        self.partition_key = partition_key
        self.parallel = parallel
        self.device = resolve_device(device)
        self.precision: Precision = precision
        prefixes = private_prefixes(model, private)
        #: The model's private part (``None``: the whole model is shared).
        self.private = (PrivateParameters(ParamLayout.from_module(model), prefixes)
                        if prefixes else None)
        self._trainers: dict[tuple[int, int], ClientTrainer] = {}

    # ------------------------------------------------------------- helpers
    def partition_id(self, context: Context) -> int:
        r"""This node's stable client id, from its node config."""
        if self.partition_key not in context.node_config:
            raise ValueError(f"this node has no {self.partition_key!r} in its node config; "
                             f"start it with --node-config \"{self.partition_key}=<id>\"")
        return int(context.node_config[self.partition_key])

    def trainer(self, context: Context) -> ClientTrainer:
        r"""The :class:`ClientTrainer` of this node's partition (built once per
        run and process)."""
        partition_id = self.partition_id(context)
        key = (context.run_id, partition_id)
        if key not in self._trainers:
            if isinstance(self.data, FederatedDataset):
                if not 0 <= partition_id < self.data.num_clients:
                    raise ValueError(f"partition {partition_id} does not exist; the dataset "
                                     f"has {self.data.num_clients} clients")
                data = self.data.subset(torch.tensor([partition_id]))
            else:
                data = self.data(context)
            if data.num_clients != 1:
                raise ValueError(f"the data of partition {partition_id} holds "
                                 f"{data.num_clients} clients, expected exactly 1")
            self._trainers[key] = ClientTrainer(self.model, data, self.objective, self.local,
                                                device=self.device, precision=self.precision,
                                                parallel=self.parallel)
        return self._trainers[key]

    def _prepare(self, context: Context, content: RecordDict
                 ) -> tuple[int, ClientTrainer, ConfigRecord, Tensor, Tensor]:
        r"""Partition id, trainer (with the run's local settings when the
        server sends them), config, and this client's own model and buffers
        (its kept optimizer state: :meth:`_optimizer_state`)."""
        pid = self.partition_id(context)
        trainer = self.trainer(context)
        config = cast(ConfigRecord, content[P.CONFIG])  # the server sends one
        trainer.config = P.local_config_from_record(config) or self.local
        state = cast("ArrayRecord | None", context.state.get(_STATE))  # saved by _save
        if state is None or config.get(P.RESET_BUFFERS, False):
            buffers = trainer.initial_buffers(1)[0]
        else:
            buffers = torch.from_numpy(state["buffers"].numpy().copy())
        if state is not None:
            params = torch.from_numpy(state["params"].numpy().copy())
        else:
            params = trainer.layout.flatten(trainer.model).cpu()
        if P.LOCAL_PARAMS in content:  # the server's copy of this client's (shared) model
            sent = self._params(self._layout(trainer), content[P.LOCAL_PARAMS], "local model")
            params = sent if self.private is None else \
                self.private.lift(sent.unsqueeze(0), params.unsqueeze(0))[0]
        return pid, trainer, config, params, buffers

    def _layout(self, trainer: ClientTrainer) -> ParamLayout:
        r"""The layout of what travels: the shared part of the model."""
        return trainer.layout if self.private is None else self.private.shared_layout

    @staticmethod
    def _save(context: Context, params: Tensor, buffers: Tensor,
              optimizer_state: dict[str, Tensor] | None = None) -> None:
        old = cast("ArrayRecord | None", context.state.get(_STATE))
        arrays = {"params": Array(params.detach().numpy()),
                  "buffers": Array(buffers.detach().numpy())}
        if optimizer_state is not None:
            kept = {f"{_OPT}{k}": Array(v.detach().cpu().numpy())
                    for k, v in optimizer_state.items()}
        else:  # an evaluation: what the last training kept stays
            kept = {k: old[k] for k in old.keys() if k.startswith(_OPT)} if old is not None \
                else {}
        context.state[_STATE] = ArrayRecord({**arrays, **kept})

    @staticmethod
    def _optimizer_state(context: Context) -> dict[str, Tensor] | None:
        r"""The optimizer state this client kept from its previous local
        run (``keep_optimizer_state``), rows of one client, or ``None``."""
        state = cast("ArrayRecord | None", context.state.get(_STATE))
        if state is None:
            return None
        kept = {k[len(_OPT):]: torch.from_numpy(state[k].numpy().copy()).unsqueeze(0)
                for k in state.keys() if k.startswith(_OPT)}
        return kept or None

    @staticmethod
    def _params(layout: ParamLayout, record: object, what: str) -> Tensor:
        reason = P.check_params_record(layout, record, what)
        if reason is not None:
            raise ValueError(f"the server sent an invalid {reason}")
        return P.record_to_params(layout, cast(ArrayRecord, record))  # checked above

    def _plan(self, trainer: ClientTrainer, content: RecordDict, config: ConfigRecord
              ) -> TrainPlan | EvaluatePlan:
        try:
            return P.decode_plan(str(config[P.PLAN]), content, self._layout(trainer))
        except ValueError as err:
            raise ValueError(f"the server sent an invalid plan: {err}") from err

    # ------------------------------------------------------------- handlers
    def query(self, message: Message, context: Context) -> Message:
        r"""Reports this node's partition id and training sample count."""
        pid = self.partition_id(context)
        n = int(self.trainer(context).dataset.num_samples("train")[0])
        return Message(RecordDict({P.METRICS: MetricRecord(
            {P.PARTITION_ID: pid, P.NUM_EXAMPLES: n})}), reply_to=message)

    def train(self, message: Message, context: Context) -> Message:
        r"""One round of this client's work: the plan the server sent."""
        content = message.content
        pid, trainer, config, local, buffers = self._prepare(context, content)
        plan = self._plan(trainer, content, config)
        if not isinstance(plan, TrainPlan):
            raise ValueError(f"a train message must carry a TrainPlan, got "
                             f"{type(plan).__name__}")
        rnd = int(cast(int, config[P.ROUND]))
        if self.private is None:
            work, start = plan, (local if plan.params is None else plan.params[0]).unsqueeze(0)
        else:  # the server's shared part completed with this node's private one
            work, start = self.private.lift_plan(plan, local.unsqueeze(0), local.unsqueeze(0))
        result = run_plan(trainer, work,
                          ClientStart(_ONE, torch.tensor([pid]), start,
                                      buffers.unsqueeze(0), local.unsqueeze(0),
                                      self._optimizer_state(context)),
                          seed=int(cast(int, config.get(P.SEED, self.seed))), rnd=rnd)
        trained = result.params[0]
        if self.private is None:
            uploaded, started, outputs = result.params, result.start, result.outputs
        else:
            uploaded, started, outputs = self.private.share_result(result)
        layout = self._layout(trainer)
        out = RecordDict({P.PARAMS: P.params_to_record(layout, uploaded[0])})
        if not plan.sends_start:  # the server does not know where this client started
            out[P.DELTA] = P.params_to_record(layout, uploaded[0] - started[0])
        for name, value in outputs.items():
            out[P.output_key(name)] = P.tensor_to_record(layout, value[0].detach())
        self._save(context, trained, result.buffers[0],
                   {k: v[0] for k, v in result.optimizer_state.items()})
        out[P.METRICS] = MetricRecord({
            P.PARTITION_ID: pid,
            P.NUM_EXAMPLES: int(trainer.dataset.num_samples("train")[0]),
            P.TRAIN_LOSS: float(result.loss[0]), P.STEPS: int(result.steps[0])})
        log.debug("partition %d trained round %d, loss %.4f", pid, rnd, float(result.loss[0]))
        return Message(out, reply_to=message)

    def evaluate(self, message: Message, context: Context) -> Message:
        r"""Validation and test metrics of the model the server sent (or of
        the local model), after local fine-tuning when the plan asks for it."""
        content = message.content
        pid, trainer, config, local, buffers = self._prepare(context, content)
        if P.LOCAL_PARAMS in content:
            self._save(context, local, buffers)
        plan = self._plan(trainer, content, config)
        if not isinstance(plan, EvaluatePlan):
            raise ValueError(f"an evaluate message must carry an EvaluatePlan, got "
                             f"{type(plan).__name__}")
        if self.private is None:
            params = (local if plan.params is None else plan.params[0]).unsqueeze(0)
        else:
            plan, params = self.private.lift_evaluate(plan, local.unsqueeze(0))
        metrics = evaluate_clients(trainer, ClientStart(_ONE, torch.tensor([pid]), params,
                                                        buffers.unsqueeze(0),
                                                        local.unsqueeze(0)),
                                   finetune=plan.finetune, start_job=plan.start_job,
                                   evaluator=plan.evaluator,
                                   seed=int(cast(int, config.get(P.SEED, self.seed))),
                                   rnd=int(cast(int, config[P.ROUND])))
        record: dict[str, int | float | list[int] | list[float]] = {
            f"{split}-{name}": float(value[0])
            for split, values in metrics.items() for name, value in values.items()}
        record[P.PARTITION_ID] = pid
        record[P.NUM_EXAMPLES] = int(trainer.dataset.num_samples("test")[0])
        return Message(RecordDict({P.METRICS: MetricRecord(record)}), reply_to=message)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({type(self.model).__name__}, seed={self.seed})"


def make_client_app(model: nn.Module, data: ClientData, *, local: LocalConfig | None = None,
                    objective: Objective | None = None, seed: int = 0,
                    partition_key: str = "partition-id",
                    parallel: bool = True, mods: list | None = None,
                    device: str | torch.device = "cpu", precision: Precision = "fp32",
                    private: str | Sequence[str] | None = None) -> ClientApp:
    r"""A Flower :class:`~flwr.clientapp.ClientApp` that trains a
    pyg_fedgraph client for :class:`GraphStrategy` (see :class:`GraphClient`
    for the arguments).

    Args:
        mods (list, optional): Flower mods wrapped around every handler.

    Example::

        app = make_client_app(model, fl60(num_clients=10), local=LocalConfig(lr=0.05))
    """
    client = GraphClient(model, data, local=local, objective=objective, seed=seed,
                         partition_key=partition_key, parallel=parallel, device=device,
                         precision=precision, private=private)
    app = ClientApp(mods=mods)
    app.query()(client.query)
    app.train()(client.train)
    app.evaluate()(client.evaluate)
    return app
