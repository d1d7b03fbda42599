r"""The client side: a torch model and one client's data as a Flower ClientApp."""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import Tensor, nn

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.integrations.flower import protocol as P
from pyg_fedgraph.train.engine import ClientTrainer, LocalConfig, Regularizer
from pyg_fedgraph.train.objective import Objective

__all__ = ["GraphClient", "make_client_app", "client_seed"]

log = logging.getLogger(__name__)

ClientData = FederatedDataset | Callable[[Context], FederatedDataset]

# Key of this client's own state in Flower's Context.state (never leaves the node).
_STATE = "pyg-fedgraph"
_ONE = torch.zeros(1, dtype=torch.long)


def client_seed(seed: int, rnd: int, partition_id: int, stream: int = 0) -> int:
    r"""Seed of a client's batch order in round ``rnd``: distinct per client,
    round and ``stream`` (0 training, 1 fine-tuning), reproducible anywhere."""
    return (((seed * 1_000_003 + rnd) * 1_000_033 + partition_id) * 4 + stream) % 2**63


class GraphClient:
    r"""Trains and evaluates one federated client the way
    :class:`~pyg_fedgraph.Simulator` does, answering :class:`GraphStrategy`'s
    messages.

    The local update is :meth:`ClientTrainer.train
    <pyg_fedgraph.train.ClientTrainer.train>` on a one-client dataset, so the
    rules are those of the simulator: local SGD from the starting model the
    server sent (or from the client's own latest model), with the strategy's
    :class:`~pyg_fedgraph.train.Regularizer` rebuilt from the message
    (pFedGraph's cosine term, FedProx's and Ditto's proximal terms, FedAMP,
    SFL), the strategy's local-settings override (Panacea's step count), a
    second local job for :attr:`TrainPlan.personal` (Ditto), the exact
    held-out gradient at the starting model when the strategy asks for it
    (pFedGAT), and local fine-tuning before evaluation (``-ft`` strategies).
    Updates (``delta``, used by FedAGHN, Panacea and pFedHN) are computed by
    the server from the model it sent.

    State kept on the node between rounds (Flower's ``Context.state``, never
    uploaded): the latest local model and the floating-point buffers
    (BatchNorm statistics), which stay local as in the simulator.

    Differences from the simulator: each client draws its batch order from its
    own generator (:func:`client_seed`), while the simulator draws all clients'
    orders from one generator, so trained models agree with the simulator's
    exactly only when the order does not matter (full-batch local steps).

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
        local (LocalConfig, optional): local SGD settings used when the server
            sends none (default: :class:`LocalConfig()`).
        objective (Objective, optional): loss and metrics (default: by task).
        seed (int, optional): seed of the batch orders (default: ``0``).
        partition_key (str, optional): key of ``Context.node_config`` holding
            the partition id (default: ``"partition-id"``, as set by Flower's
            simulation and by ``flower-supernode --node-config``).
        regularizers (dict, optional): extra name -> function for regularizers
            registered on the server with
            :func:`~pyg_fedgraph.integrations.flower.register_regularizer`.
        parallel (bool, optional): batched (``vmap``) training path
            (default: ``True``).
    """

    def __init__(self, model: nn.Module, data: ClientData, *, local: LocalConfig | None = None,
                 objective: Objective | None = None, seed: int = 0,
                 partition_key: str = "partition-id",
                 regularizers: Mapping[str, Callable[..., Tensor]] | None = None,
                 parallel: bool = True) -> None:
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
        self.regularizers = dict(regularizers or {})
        self.parallel = parallel
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
            objective = self.objective or getattr(data, "objective", None)
            self._trainers[key] = ClientTrainer(self.model, data, objective, self.local)
        return self._trainers[key]

    def _state(self, context: Context, trainer: ClientTrainer, content: RecordDict
               ) -> tuple[Tensor, Tensor]:
        layout = trainer.layout
        config = content[P.CONFIG]
        state = context.state.get(_STATE)
        if state is None or config.get("reset-buffers", False):
            buffers = trainer.initial_buffers(1)[0]
        else:
            buffers = torch.from_numpy(state["buffers"].numpy().copy())
        if P.LOCAL_PARAMS in content:
            params = self._params(layout, content[P.LOCAL_PARAMS], "local model")
        elif state is not None:
            params = torch.from_numpy(state["params"].numpy().copy())
        else:
            params = layout.flatten(trainer.model)
        return params, buffers

    @staticmethod
    def _save(context: Context, params: Tensor, buffers: Tensor) -> None:
        context.state[_STATE] = ArrayRecord({"params": Array(params.detach().numpy()),
                                             "buffers": Array(buffers.detach().numpy())})

    @staticmethod
    def _params(layout: ParamLayout, record: ArrayRecord, what: str) -> Tensor:
        reason = P.check_params_record(layout, record, what)
        if reason is not None:
            raise ValueError(f"the server sent an invalid {reason}")
        return P.record_to_params(layout, record)

    def _regularizer(self, content: RecordDict, config: ConfigRecord, key: str
                     ) -> Regularizer | None:
        if key not in config:
            return None
        spec = P.RegularizerSpec.from_json(str(config[key]))
        refs = P.record_to_tensors(content[key]) if key in content else []
        return P.decode_regularizer(spec, refs, self.regularizers)

    # ------------------------------------------------------------- handlers
    def query(self, message: Message, context: Context) -> Message:
        r"""Reports this node's partition id and training sample count."""
        pid = self.partition_id(context)
        n = int(self.trainer(context).dataset.num_samples("train")[0])
        return Message(RecordDict({P.METRICS: MetricRecord(
            {P.PARTITION_ID: pid, P.NUM_EXAMPLES: n})}), reply_to=message)

    def train(self, message: Message, context: Context) -> Message:
        r"""One round of local training, as :meth:`Simulator.step` does it."""
        pid = self.partition_id(context)
        trainer = self.trainer(context)
        layout = trainer.layout
        content = message.content
        config = content[P.CONFIG]
        rnd = int(config["round"])
        local, buffers = self._state(context, trainer, content)
        sent = P.PARAMS in content
        start = self._params(layout, content[P.PARAMS], "starting model") if sent else local
        generator = torch.Generator().manual_seed(client_seed(self.seed, rnd, pid))
        result = trainer.train(_ONE, start.unsqueeze(0), buffers.unsqueeze(0),
                               regularizer=self._regularizer(content, config, P.REGULARIZER),
                               config=P.local_config_from_record(config),
                               generator=generator, parallel=self.parallel)
        trained = result.params[0]
        out = RecordDict({P.PARAMS: P.params_to_record(layout, trained)})
        if not sent:
            out[P.DELTA] = P.params_to_record(layout, trained - start)
        if config.get("feedback-gradient", False):
            grad, _ = trainer.loss_gradient(_ONE, start.unsqueeze(0), buffers.unsqueeze(0), "val")
            out[P.FEEDBACK] = P.params_to_record(layout, grad[0].detach())
        if P.PERSONAL_PARAMS in content:
            # Ditto's personal model: same buffers as the main job started from,
            # its trained buffers dropped (Simulator._train_personal).
            personal = self._params(layout, content[P.PERSONAL_PARAMS], "personal model")
            res = trainer.train(_ONE, personal.unsqueeze(0), buffers.unsqueeze(0).clone(),
                                regularizer=self._regularizer(content, config,
                                                              P.PERSONAL_REGULARIZER),
                                config=P.local_config_from_record(config, "personal-local."),
                                generator=generator, parallel=self.parallel)
            out[P.PERSONAL_PARAMS] = P.params_to_record(layout, res.params[0])
        self._save(context, trained, result.buffers[0])
        out[P.METRICS] = MetricRecord({
            P.PARTITION_ID: pid,
            P.NUM_EXAMPLES: int(trainer.dataset.num_samples("train")[0]),
            "train-loss": float(result.loss[0]), "steps": int(result.steps[0])})
        log.debug("partition %d trained round %d, loss %.4f", pid, rnd, float(result.loss[0]))
        return Message(out, reply_to=message)

    def evaluate(self, message: Message, context: Context) -> Message:
        r"""Validation and test metrics of the personalized model the server
        sent (or of the local model), after local fine-tuning when asked."""
        pid = self.partition_id(context)
        trainer = self.trainer(context)
        layout = trainer.layout
        content = message.content
        config = content[P.CONFIG]
        local, buffers = self._state(context, trainer, content)
        if P.LOCAL_PARAMS in content:
            self._save(context, local, buffers)
        params = self._params(layout, content[P.PARAMS], "model to evaluate") \
            if P.PARAMS in content else local
        params, buffers = params.unsqueeze(0), buffers.unsqueeze(0)
        if config.get("finetune", False):
            cfg = P.local_config_from_record(config) or trainer.config
            if "finetune-epochs" in config:
                cfg = LocalConfig(**{**vars(cfg), "epochs": int(config["finetune-epochs"]),
                                     "steps": None})
            gen = torch.Generator().manual_seed(
                client_seed(self.seed, int(config["round"]), pid, stream=1))
            res = trainer.train(_ONE, params, buffers, config=cfg, generator=gen,
                                parallel=self.parallel)
            params, buffers = res.params, res.buffers
        metrics: dict[str, float] = {}
        for split in ("val", "test"):
            for name, value in trainer.evaluate(_ONE, params, buffers, split).items():
                metrics[f"{split}-{name}"] = float(value[0])
        metrics[P.PARTITION_ID] = pid
        metrics[P.NUM_EXAMPLES] = int(trainer.dataset.num_samples("test")[0])
        return Message(RecordDict({P.METRICS: MetricRecord(metrics)}), reply_to=message)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({type(self.model).__name__}, seed={self.seed})"


def make_client_app(model: nn.Module, data: ClientData, *, local: LocalConfig | None = None,
                    objective: Objective | None = None, seed: int = 0,
                    partition_key: str = "partition-id",
                    regularizers: Mapping[str, Callable[..., Tensor]] | None = None,
                    parallel: bool = True, mods: list | None = None) -> ClientApp:
    r"""A Flower :class:`~flwr.clientapp.ClientApp` that trains a
    pyg_fedgraph client for :class:`GraphStrategy` (see :class:`GraphClient`
    for the arguments).

    Args:
        mods (list, optional): Flower mods wrapped around every handler.

    Example::

        app = make_client_app(model, fl60(num_clients=10), local=LocalConfig(lr=0.05))
    """
    client = GraphClient(model, data, local=local, objective=objective, seed=seed,
                         partition_key=partition_key, regularizers=regularizers,
                         parallel=parallel)
    app = ClientApp(mods=mods)
    app.query()(client.query)
    app.train()(client.train)
    app.evaluate()(client.evaluate)
    return app
