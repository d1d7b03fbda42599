"""Build a full run (data, model, strategy, simulator) from its settings
(:class:`~pyg_fedgraph.experiment.ExperimentConfig`).

Shared by the command line, the runner, Optuna studies and the examples: it
only calls the data, model and strategy layers.
"""
from __future__ import annotations

import inspect
import logging
import typing
from dataclasses import dataclass
from typing import Any

import torch

from pyg_fedgraph.attacks import Attack
from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.graph_dataset import GraphFederatedDataset
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.data.partition import PARTITIONS
from pyg_fedgraph.datasets import DATASETS, dataset_key, load_dataset
from pyg_fedgraph.datasets.fl60 import FL60_VARIANTS
from pyg_fedgraph.datasets.subgraphs import GRAPH_SPLITS
from pyg_fedgraph.engine.rounds import num_sampled
from pyg_fedgraph.experiment.settings import CONFIG_SCHEMA, ExperimentConfig
from pyg_fedgraph.hparams import parse_text, schema
from pyg_fedgraph.models import MODELS, build_model, model_options
from pyg_fedgraph.simulation.config import SIM_KEYS, SIM_SCHEMA
from pyg_fedgraph.simulation.recovery import GroupRecoveryCallback
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, Strategy, build_strategy
from pyg_fedgraph.train.config import LOCAL_SCHEMA, LocalConfig
from pyg_fedgraph.train.private import PrivateParameters, private_prefixes
from pyg_fedgraph.typing import WITH_PYMETIS
from pyg_fedgraph.utils.device import resolve_device
from pyg_fedgraph.utils.seeds import derive_seed, make_generator

__all__ = ["DATASET_DEFAULTS", "build_dataset", "build_simulator", "resolved_defaults",
           "resolved_model", "route_overrides", "check_config", "check_partition",
           "parse_value", "dataset_options"]

log = logging.getLogger(__name__)

#: Model and local-training defaults by dataset name (small enough for 2 CPU
#: cores), for datasets that carry no ``defaults`` of their own.
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "digits": {"model": "mlp", "model_kwargs": {"hidden_channels": 64},
               "local": {"lr": 0.05, "momentum": 0.9, "batch_size": 32, "epochs": 2},
               "rounds": 30},
    "fl60": {"model": "mlp", "model_kwargs": {"hidden_channels": 16, "num_layers": 3},
             "local": {"lr": 0.05, "momentum": 0.9, "batch_size": 16, "epochs": 2},
             "rounds": 60},
    # Panacea (Sec. IV-A): GRU hidden 100, batch 64, K_c = 50 local SGD steps,
    # lr from the top of its grid {0.001, ..., 0.1}.
    "metr-la": {"model": "gru", "model_kwargs": {"hidden_channels": 100},
                "local": {"lr": 0.1, "batch_size": 64, "steps": 50}, "rounds": 100},
}
DATASET_DEFAULTS["pems-bay"] = DATASET_DEFAULTS["metr-la"]
DATASET_DEFAULTS["topology"] = DATASET_DEFAULTS["digits"]
# FL-60 with one option set, under the names of its earlier records.
DATASET_DEFAULTS.update({name: DATASET_DEFAULTS["fl60"] for name in FL60_VARIANTS})
_FALLBACK = {"model": "mlp", "model_kwargs": {}, "local": {}, "rounds": 30}


#: ``--set`` values are read as the command line reads them.
parse_value = parse_text


def route_overrides(cfg: ExperimentConfig, model: str | None = None
                    ) -> dict[str, dict[str, Any]]:
    r"""``cfg.overrides`` by destination (``local``, ``sim``, ``model``,
    ``data``, ``strategy``), every value checked against the declaration of
    the option it reaches; one :class:`ValueError` naming the key otherwise.

    A key the strategy declares as its own option reaches the strategy even
    where a client setting has the same name (pFedGAT's, pFedHN's and
    Panacea's ``optimizer`` is their server's; the clients' is then
    ``local.optimizer``), so that a key means what it meant before the
    client setting existed and the records made with it keep their meaning.
    ``local.<key>`` always reaches the clients' setting.

    Args:
        cfg (ExperimentConfig): the run.
        model (str, optional): the model the run uses when ``--set model=``
            does not choose one (the dataset's default), to check
            ``model.<arg>`` keys against; unchecked when unknown.
    """
    out: dict[str, dict[str, Any]] = {"local": {}, "sim": {}, "model": {}, "data": {},
                                      "strategy": {}}
    strategy_schema = STRATEGIES[cfg.strategy].hparam_schema()
    # A dataset object built by the caller may carry a name of its own.
    builder = DATASETS.get(dataset_key(cfg.dataset))
    data_schema = schema(builder) if builder is not None else None
    chosen = cfg.overrides.get("model")
    if chosen is not None and cfg.model is not None and str(chosen).lower() != cfg.model.lower():
        raise ValueError(f"--model {cfg.model} and --set model={chosen} name two models; give "
                         f"one")
    chosen = cfg.model if cfg.model is not None else chosen
    name = chosen if chosen is not None else model
    if chosen is not None:
        where = "--model" if cfg.model is not None else "--set model"
        if not isinstance(name, str) or name not in MODELS:
            raise ValueError(f"{where}: expected one of {', '.join(MODELS)}, got {name!r}")
        out["model"]["name"] = name.lower()
    model_schema = model_options(name) if isinstance(name, str) else None
    for key, value in cfg.overrides.items():
        where = f"--set {key}"
        if key == "model":
            continue
        if key.startswith("local."):
            arg = key[6:]
            if arg not in LOCAL_SCHEMA:
                raise ValueError(f"{where}: not a local-training key; they are "
                                 f"{', '.join(sorted(LOCAL_SCHEMA))}")
            out["local"][arg] = LOCAL_SCHEMA[arg].check(value, where)
        elif key in strategy_schema and key in LOCAL_SCHEMA:
            out["strategy"][key] = strategy_schema[key].check(value, where)
        elif key in LOCAL_SCHEMA:
            out["local"][key] = LOCAL_SCHEMA[key].check(value, where)
        elif key in SIM_KEYS:
            out["sim"][key] = SIM_SCHEMA[key].check(value, where)
        elif key.startswith("model."):
            arg = key[6:]
            if model_schema is not None:
                if arg not in model_schema:
                    raise ValueError(f"{where}: model {name!r} has no option {arg!r}; it "
                                     f"accepts {', '.join(sorted(model_schema))}")
                value = model_schema[arg].check(value, where)
            out["model"][arg] = value
        elif key.startswith("data."):
            arg = key[5:]
            if data_schema is None:
                raise ValueError(f"{where}: unknown dataset {cfg.dataset!r}; known: "
                                 f"{', '.join(sorted(DATASETS))}")
            if arg not in data_schema:
                raise ValueError(f"{where}: dataset {cfg.dataset!r} has no option {arg!r}; "
                                 f"it accepts {', '.join(sorted(data_schema))}")
            out["data"][arg] = data_schema[arg].check(value, where)
        elif key in strategy_schema:
            out["strategy"][key] = strategy_schema[key].check(value, where)
        elif key in CONFIG_SCHEMA:
            flag = "--" + key.replace("_", "-")
            raise ValueError(f"{where}: {key} is a setting of its own, not a --set key: give "
                             f"{flag} {value}")
        else:
            raise ValueError(
                f"{where}: not a local-training key ({', '.join(sorted(LOCAL_SCHEMA))}), a "
                f"simulator key ({', '.join(sorted(SIM_KEYS))}), model/model.*/data.*, nor "
                f"an option of strategy {cfg.strategy!r} "
                f"({', '.join(sorted(strategy_schema)) or 'none'})")
    return out


def dataset_options(name: str) -> set[str]:
    r"""The keyword arguments the builder of dataset ``name`` accepts."""
    key = dataset_key(name)
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    return set(inspect.signature(DATASETS[key]).parameters)


#: The partitions that need METIS (:mod:`pymetis`, the extra ``metis``).
_METIS_SPLITS = ("metis", "overlapping")


def _either(names: tuple[str, ...]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1]


def check_partition(name: str, partition: str | None) -> None:
    r"""Checks, before any data is read, that ``partition`` can split dataset
    ``name``: samples are split by their labels
    (:data:`~pyg_fedgraph.data.partition.PARTITIONS`), one graph by its nodes
    (:data:`~pyg_fedgraph.datasets.subgraphs.GRAPH_SPLITS`). A dataset is a
    graph split over clients when its builder is declared to return a
    :class:`~pyg_fedgraph.data.GraphFederatedDataset`, one of samples when it
    returns another :class:`~pyg_fedgraph.data.FederatedDataset`; a builder
    declaring neither is not checked. A METIS split (``partition``, or the
    builder's default where ``partition`` is :obj:`None`) needs
    :mod:`pymetis`.

    Args:
        name (str): the dataset's name.
        partition (str, optional): the partition asked for (``--partition``);
            :obj:`None` for the dataset's default.

    Raises:
        ValueError: one line, for an unknown dataset or a partition of the
            other kind, naming those that fit.
        ImportError: naming the extra ``metis``, for a METIS split without
            :mod:`pymetis`.
    """
    options = dataset_options(name)  # an unknown dataset: one line listing the known ones
    builder = DATASETS[dataset_key(name)]
    takes = "partition" in options
    given = partition is not None
    if partition is None:
        default = inspect.signature(builder).parameters["partition"].default if takes else None
        partition = default if isinstance(default, str) else None
    if partition is None:
        return
    try:
        returned = typing.get_type_hints(builder).get("return")
    except (NameError, TypeError):  # a builder of the user's with annotations we cannot read
        returned = None
    if isinstance(returned, type) and issubclass(returned, FederatedDataset):
        graph = issubclass(returned, GraphFederatedDataset)
        if graph and partition not in GRAPH_SPLITS:
            how = f"choose {_either(GRAPH_SPLITS)}" if takes else "it takes no --partition"
            raise ValueError(f"--partition {partition} splits samples by their labels, but the "
                             f"clients of dataset {name!r} hold subgraphs of one graph: {how}")
        if not graph and partition in GRAPH_SPLITS:
            how = f"choose {_either(PARTITIONS)}" if takes else "it takes no --partition"
            raise ValueError(f"--partition {partition} splits one graph into subgraphs by its "
                             f"nodes, but the clients of dataset {name!r} hold samples: {how}")
    if partition in _METIS_SPLITS and not WITH_PYMETIS:
        which = "" if given else f" (the default of dataset {name!r})"
        raise ImportError(f"--partition {partition}{which} needs METIS through 'pymetis': "
                          f"install it with pip install 'pyg-fedgraph[metis]'"
                          + ("" if given else " or choose another --partition"))


def build_dataset(cfg: ExperimentConfig, extra: dict[str, Any] | None = None
                  ) -> FederatedDataset:
    r"""Loads ``cfg.dataset`` passing only the options its builder accepts,
    after :func:`check_partition`."""
    accepted = dataset_options(cfg.dataset)
    check_partition(cfg.dataset, cfg.partition)
    wanted = {"num_clients": cfg.clients, "partition": cfg.partition, "beta": cfg.beta,
              "classes_per_client": cfg.classes_per_client, "seed": cfg.seed,
              **(extra or {})}
    kwargs = {k: v for k, v in wanted.items() if v is not None}
    ignored = sorted(k for k in kwargs if k not in accepted)
    if ignored:
        log.warning("dataset %s ignores %s", cfg.dataset, ignored)
    return load_dataset(cfg.dataset, **{k: v for k, v in kwargs.items() if k in accepted})


def resolved_defaults(data: FederatedDataset, name: str) -> dict[str, Any]:
    r"""The dataset's own :class:`~pyg_fedgraph.data.DatasetDefaults`, else
    the :data:`DATASET_DEFAULTS` entry of ``name``: ``model``,
    ``model_kwargs``, ``local`` and ``rounds``."""
    own = data.defaults
    if own is None:
        return DATASET_DEFAULTS.get(dataset_key(name), _FALLBACK)
    return {"model": own.model, "model_kwargs": dict(own.model_kwargs),
            "local": dict(own.local), "rounds": own.rounds}


@dataclass
class _RunPlan:
    r"""What :func:`build_simulator` builds a run from, resolved and checked."""
    parts: dict[str, dict[str, Any]]
    model_name: str
    model_kwargs: dict[str, Any]
    outputs: int
    local: LocalConfig
    rounds: int
    strategy: Strategy
    held_out: int


def _plan(cfg: ExperimentConfig, data: FederatedDataset) -> _RunPlan:
    defaults = resolved_defaults(data, cfg.dataset)
    parts = route_overrides(cfg, defaults["model"])
    model_name = parts["model"].pop("name", defaults["model"])
    # The default model's arguments belong to it: another model starts from its own.
    base = defaults["model_kwargs"] if model_name == defaults["model"] else {}
    model_kwargs = {**base, **parts["model"]}
    if data.task == "classification":
        assert data.num_classes is not None  # FederatedDataset requires it
        outputs = data.num_classes
    else:
        outputs = int(data.splits["train"].y.shape[-1] if data.splits["train"].y.dim() > 2 else 1)
    local_kwargs = {**defaults["local"], **parts["local"]}
    if "epochs" in parts["local"] and "steps" not in parts["local"]:
        # Asking for epochs means epochs: a default step count would win over them.
        local_kwargs.pop("steps", None)
    n = data.num_clients
    held_out = max(1, int(round(cfg.novel_clients * n))) if cfg.novel_clients else 0
    return _RunPlan(parts, model_name, model_kwargs, outputs, LocalConfig(**local_kwargs),
                    cfg.rounds if cfg.rounds is not None else int(defaults["rounds"]),
                    build_strategy(cfg.strategy, **parts["strategy"]), held_out)


def resolved_model(cfg: ExperimentConfig, dataset: FederatedDataset
                   ) -> tuple[str, dict[str, Any]]:
    r"""The model name and arguments ``cfg`` builds on ``dataset`` (the
    dataset's defaults with the run's ``--set model`` keys applied)."""
    plan = _plan(cfg, dataset)
    return plan.model_name, dict(plan.model_kwargs)


def check_config(cfg: ExperimentConfig, dataset: FederatedDataset) -> None:
    r"""Checks that ``cfg`` can run on ``dataset`` before any work, without
    allocating its client tables: every ``--set`` value, the strategy's
    options and requirements (a prior graph, enough clients per round), the
    model against the data, and settings that leave nothing to learn (every
    client held out, or malicious). Raises one :class:`ValueError`."""
    resolve_device(cfg.device)
    plan = _plan(cfg, dataset)
    if "state_device" in plan.parts["sim"]:
        resolve_device(plan.parts["sim"]["state_device"])
    trainable = dataset.num_clients - plan.held_out
    if trainable < 1:
        raise ValueError(f"novel_clients={cfg.novel_clients} holds out all "
                         f"{dataset.num_clients} clients: nobody would train")
    if cfg.attack is not None:
        malicious = min(trainable, max(1, int(round(cfg.attack_ratio * trainable))))
        if malicious >= trainable:
            raise ValueError(f"attack_ratio={cfg.attack_ratio} makes all {trainable} training "
                             f"clients malicious: no benign client is left to report on")
    fraction = plan.parts["sim"].get("sample_fraction") or \
        plan.strategy.default_sample_fraction(dataset.num_clients)
    plan.strategy.check_federation(trainable, num_sampled(trainable, fraction),
                                   dataset.edge_index is not None)
    inputs = MODELS[plan.model_name].inputs
    if inputs != dataset.input_kind:
        what = {"graph": "a client's graph", "tensor": "a batch of samples",
                "graph-set": "a batch of a client's graphs"}
        fits = ", ".join(n for n, m in MODELS.items() if m.inputs == dataset.input_kind)
        raise ValueError(f"model {plan.model_name!r} takes {what.get(inputs, inputs)}, but "
                         f"dataset {cfg.dataset!r} gives {what.get(dataset.input_kind, '?')}: "
                         f"choose a model for its data with --model ({fits})")
    with torch.random.fork_rng(devices=[]):  # leaves the caller's random state alone
        model = build_model(plan.model_name, dataset.input_shape, plan.outputs,
                            **plan.model_kwargs)
    prefixes = private_prefixes(model, plan.parts["sim"].get("private"))
    if prefixes:
        PrivateParameters(ParamLayout.from_module(model), prefixes)  # names checked
        if not plan.strategy.supports_private_parameters:
            hint = ("; the model keeps them private: --set model.share=all federates all of it"
                    if "private" not in plan.parts["sim"]
                    and "share" in model_options(plan.model_name) else "")
            raise ValueError(f"strategy {cfg.strategy!r} works on whole models and cannot "
                             f"leave parameters {list(prefixes)} private to the clients{hint}")


def build_simulator(cfg: ExperimentConfig, *, dataset: FederatedDataset | None = None,
                    callbacks: tuple = ()) -> Simulator:
    r"""Data, model, strategy and :class:`Simulator` for ``cfg``.

    Model, local training and rounds default to ``dataset.defaults`` (to the
    :data:`DATASET_DEFAULTS` entry of ``cfg.dataset`` for a dataset without
    them); ``cfg`` overrides them. The model is initialised from the stream
    ``(cfg.seed, "model-init")`` so that every strategy of a comparison starts
    from the same weights. On a dataset with known client groups
    (``client_labels``), a strategy with a collaboration graph or clusters
    gets a :class:`~pyg_fedgraph.simulation.recovery.GroupRecoveryCallback` after
    ``callbacks``: its history (``history.csv``) has the columns
    ``rand_index`` and ``adjusted_rand_index``, and its summary the last
    round's."""
    data = dataset if dataset is not None else build_dataset(
        cfg, route_overrides(cfg)["data"])
    plan = _plan(cfg, data)
    torch.manual_seed(derive_seed(cfg.seed, "model-init"))
    model = build_model(plan.model_name, data.input_shape, plan.outputs, **plan.model_kwargs)
    held_out = None
    if plan.held_out:
        held_out = torch.randperm(data.num_clients, generator=make_generator(
            cfg.seed, "held-out"))[:plan.held_out].sort().values
    attack = None
    if cfg.attack is not None:
        attack = Attack(cfg.attack, cfg.attack_ratio)
    if GroupRecoveryCallback.applies(data, plan.strategy):
        callbacks = (*callbacks, GroupRecoveryCallback())
    return Simulator(data, model, plan.strategy, rounds=plan.rounds, local=plan.local,
                     seed=cfg.seed, held_out=held_out, callbacks=callbacks,
                     attack=attack, dropout=cfg.dropout, reject_policy=cfg.reject_policy,
                     device=cfg.device, precision=cfg.precision, **plan.parts["sim"])
