"""Build a full run (data, model, strategy, simulator) from plain settings.

This is the orchestration layer shared by the CLI, Optuna studies and the
examples: it only calls the data, model and strategy layers.
"""
from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal

import torch

from pyg_fedgraph.attacks import Attack, AttackName
from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.datasets import DATASETS, dataset_key, load_dataset
from pyg_fedgraph.engine.rounds import num_sampled
from pyg_fedgraph.engine.validation import RejectPolicy
from pyg_fedgraph.hparams import Range, parse_text, schema
from pyg_fedgraph.models import MODEL_NAMES, build_model, model_options
from pyg_fedgraph.simulation import Simulator
from pyg_fedgraph.strategies import STRATEGIES, Strategy, build_strategy
from pyg_fedgraph.train import LocalConfig
from pyg_fedgraph.train.engine import LOCAL_SCHEMA
from pyg_fedgraph.utils.device import Precision, resolve_device
from pyg_fedgraph.utils.seeds import derive_seed, make_generator

__all__ = ["ExperimentConfig", "CONFIG_SCHEMA", "DATASET_DEFAULTS", "build_dataset",
           "build_simulator", "resolved_defaults", "resolved_model", "route_overrides",
           "check_config", "parse_value"]

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
    # Panacea (Sec. V-A): GRU hidden 100, batch 64, K_c = 50 local SGD steps,
    # lr from the top of its grid {0.001, ..., 0.1}.
    "metr-la": {"model": "gru", "model_kwargs": {"hidden_channels": 100},
                "local": {"lr": 0.1, "batch_size": 64, "steps": 50}, "rounds": 100},
}
DATASET_DEFAULTS["pems-bay"] = DATASET_DEFAULTS["metr-la"]
DATASET_DEFAULTS["topology"] = DATASET_DEFAULTS["digits"]
_FALLBACK = {"model": "mlp", "model_kwargs": {}, "local": {}, "rounds": 30}


def parse_value(text: str) -> Any:
    r"""``"0.1"`` -> 0.1, ``"true"`` -> True, ``"[1,2]"`` -> [1, 2], else the string
    (:func:`pyg_fedgraph.hparams.parse_text`, which ``--set`` uses too)."""
    return parse_text(text)


PartitionName = Literal["iid", "pathological", "dirichlet", "group"]


@dataclass
class ExperimentConfig:
    r"""Everything that defines one run, checked on construction against its
    declared types and ranges (the same schema the command line reads).

    ``overrides`` (the CLI's ``--set key=value``) are routed by key
    (:func:`route_overrides`): local-training keys (``lr``, ``momentum``,
    ``weight_decay``, ``batch_size``, ``epochs``, ``steps``), simulator keys
    (``sample_fraction``, ``eval_every``, ``parallel``), ``model`` and
    ``model.<arg>``, ``data.<arg>`` for the dataset builder, and anything else
    goes to the strategy's constructor; each value is checked against the
    declaration of the option it reaches.
    """
    dataset: str = "digits"
    strategy: str = "fedavg"
    rounds: Annotated[int | None, Range(ge=1)] = None
    clients: Annotated[int | None, Range(ge=1)] = None
    partition: PartitionName | None = None
    beta: Annotated[float | None, Range(gt=0.0)] = None
    classes_per_client: Annotated[int | None, Range(ge=1)] = None
    seed: Annotated[int, Range(ge=0)] = 0
    novel_clients: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0
    overrides: dict[str, Any] = field(default_factory=dict)
    # Robustness (see pyg_fedgraph.attacks and Simulator): an attack name of
    # pyg_fedgraph.attacks.ATTACKS and the share of malicious clients, the
    # per-round dropout probability, and the policy for bad uploads.
    attack: AttackName | None = None
    attack_ratio: Annotated[float, Range(gt=0.0, lt=1.0)] = 0.4
    dropout: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0
    reject_policy: RejectPolicy = "drop"
    # Where and how it computes (see pyg_fedgraph.utils.device): the compute device
    # ("auto": CUDA when available), torch's intra-op threads (None: torch's choice;
    # applied by the command line, a process-wide setting) and the autocast precision.
    device: str = "auto"
    threads: Annotated[int | None, Range(ge=1)] = None
    precision: Precision = "fp32"

    def __post_init__(self) -> None:
        for name, hp in CONFIG_SCHEMA.items():
            if name != "overrides":
                setattr(self, name, hp.check(getattr(self, name)))
        if not isinstance(self.overrides, dict):
            raise ValueError(f"overrides must be a dict of --set keys, got "
                             f"{type(self.overrides).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: The declared fields of :class:`ExperimentConfig`.
CONFIG_SCHEMA = schema(ExperimentConfig)
#: ``--set`` keys of the simulator, declared by :class:`Simulator`.
SIM_SCHEMA = {k: v for k, v in schema(Simulator).items()
              if k in ("sample_fraction", "eval_every", "parallel", "parallel_clients",
                       "execution", "state_device", "compile")}


def route_overrides(cfg: ExperimentConfig, model: str | None = None
                    ) -> dict[str, dict[str, Any]]:
    r"""``cfg.overrides`` by destination (``local``, ``sim``, ``model``,
    ``data``, ``strategy``), every value checked against the declaration of
    the option it reaches; one :class:`ValueError` naming the key otherwise.

    Args:
        cfg (ExperimentConfig): the run.
        model (str, optional): the model the run uses when ``--set model=``
            does not choose one (the dataset's default), to check
            ``model.<arg>`` keys against; unchecked when unknown.
    """
    if cfg.strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {cfg.strategy!r}; known: "
                         f"{', '.join(sorted(STRATEGIES))}")
    out: dict[str, dict[str, Any]] = {"local": {}, "sim": {}, "model": {}, "data": {},
                                      "strategy": {}}
    strategy_schema = STRATEGIES[cfg.strategy].hparam_schema()
    # A dataset object built by the caller may carry a name of its own.
    builder = DATASETS.get(dataset_key(cfg.dataset))
    data_schema = schema(builder) if builder is not None else None
    name = cfg.overrides.get("model", model)
    if "model" in cfg.overrides:
        if not isinstance(name, str) or name.lower() not in MODEL_NAMES:
            raise ValueError(f"--set model: expected one of {', '.join(MODEL_NAMES)}, got {name!r}")
        out["model"]["name"] = name.lower()
    model_schema = model_options(name) if isinstance(name, str) else None
    for key, value in cfg.overrides.items():
        where = f"--set {key}"
        if key == "model":
            continue
        if key in LOCAL_SCHEMA:
            out["local"][key] = LOCAL_SCHEMA[key].check(value, where)
        elif key in SIM_SCHEMA:
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
        else:
            raise ValueError(
                f"{where}: not a local-training key ({', '.join(sorted(LOCAL_SCHEMA))}), a "
                f"simulator key ({', '.join(sorted(SIM_SCHEMA))}), model/model.*/data.*, nor "
                f"an option of strategy {cfg.strategy!r} "
                f"({', '.join(sorted(strategy_schema)) or 'none'})")
    return out


def dataset_options(name: str) -> set[str]:
    r"""The keyword arguments the builder of dataset ``name`` accepts."""
    key = dataset_key(name)
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    return set(inspect.signature(DATASETS[key]).parameters)


def build_dataset(cfg: ExperimentConfig, extra: dict[str, Any] | None = None
                  ) -> FederatedDataset:
    r"""Loads ``cfg.dataset`` passing only the options its builder accepts."""
    accepted = dataset_options(cfg.dataset)
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
    with torch.random.fork_rng(devices=[]):  # leaves the caller's random state alone
        build_model(plan.model_name, dataset.input_shape, plan.outputs, **plan.model_kwargs)


def build_simulator(cfg: ExperimentConfig, *, dataset: FederatedDataset | None = None,
                    progress: bool = True, callbacks: tuple = ()) -> Simulator:
    r"""Data, model, strategy and :class:`Simulator` for ``cfg``.

    Model, local training and rounds default to ``dataset.defaults`` (to the
    :data:`DATASET_DEFAULTS` entry of ``cfg.dataset`` for a dataset without
    them); ``cfg`` overrides them. The model is initialised from the stream
    ``(cfg.seed, "model-init")`` so that every strategy of a comparison starts
    from the same weights."""
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
    return Simulator(data, model, plan.strategy, rounds=plan.rounds, local=plan.local,
                     seed=cfg.seed, held_out=held_out, progress=progress, callbacks=callbacks,
                     attack=attack, dropout=cfg.dropout, reject_policy=cfg.reject_policy,
                     device=cfg.device, precision=cfg.precision, **plan.parts["sim"])
