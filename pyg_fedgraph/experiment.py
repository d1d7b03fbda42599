"""Build a full run (data, model, strategy, simulator) from plain settings.

This is the orchestration layer shared by the CLI, Optuna studies and the
examples: it only calls the data, model and strategy layers.
"""
from __future__ import annotations

import inspect
import json
import logging
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import torch

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.datasets import DATASETS, load_dataset
from pyg_fedgraph.models import build_model
from pyg_fedgraph.simulation import Simulator
from pyg_fedgraph.strategies import STRATEGIES, build_strategy, strategy_kwargs
from pyg_fedgraph.train import LocalConfig
from pyg_fedgraph.utils.seeds import derive_seed, make_generator

if TYPE_CHECKING:
    from pyg_fedgraph.attacks import AttackName
    from pyg_fedgraph.engine.validation import RejectPolicy

__all__ = ["ExperimentConfig", "DATASET_DEFAULTS", "build_dataset", "build_simulator",
           "resolved_defaults", "parse_value"]

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
_SIM_KEYS = {"sample_fraction", "eval_every", "parallel"}
_LOCAL_KEYS = {f.name for f in fields(LocalConfig)}


def parse_value(text: str) -> Any:
    r"""``"0.1"`` -> 0.1, ``"true"`` -> True, ``"[1,2]"`` -> [1, 2], else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        if low in ("none", "null"):
            return None
        return text


@dataclass
class ExperimentConfig:
    r"""Everything that defines one run.

    ``overrides`` (the CLI's ``--set key=value``) are routed by key: local SGD
    keys (``lr``, ``momentum``, ``weight_decay``, ``batch_size``, ``epochs``,
    ``steps``), simulator keys (``sample_fraction``, ``eval_every``,
    ``parallel``), ``model`` and ``model.<kwarg>``, ``data.<kwarg>`` for the
    dataset builder, and anything else goes to the strategy's constructor.
    """
    dataset: str = "digits"
    strategy: str = "fedavg"
    rounds: int | None = None
    clients: int | None = None
    partition: str | None = None
    beta: float | None = None
    classes_per_client: int | None = None
    seed: int = 0
    novel_clients: float = 0.0
    overrides: dict[str, Any] = field(default_factory=dict)
    # Robustness (see pyg_fedgraph.attacks and Simulator): an attack name of
    # pyg_fedgraph.attacks.ATTACKS and the share of malicious clients, the
    # per-round dropout probability, and the policy for bad uploads.
    attack: AttackName | None = None
    attack_ratio: float = 0.4
    dropout: float = 0.0
    reject_policy: RejectPolicy = "drop"

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _split_overrides(cfg: ExperimentConfig) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"local": {}, "sim": {}, "model": {}, "data": {},
                                      "strategy": {}}
    known = strategy_kwargs(cfg.strategy)
    for key, value in cfg.overrides.items():
        if key in _LOCAL_KEYS:
            out["local"][key] = value
        elif key in _SIM_KEYS:
            out["sim"][key] = value
        elif key == "model":
            out["model"]["name"] = value
        elif key.startswith("model."):
            out["model"][key[6:]] = value
        elif key.startswith("data."):
            out["data"][key[5:]] = value
        elif key in known:
            out["strategy"][key] = value
        else:
            raise ValueError(
                f"--set {key}: not a local-training key {sorted(_LOCAL_KEYS)}, a simulator key "
                f"{sorted(_SIM_KEYS)}, model/model.*/data.*, nor an option of strategy "
                f"{cfg.strategy!r} {sorted(known)}")
    return out


def build_dataset(cfg: ExperimentConfig, extra: dict[str, Any] | None = None
                  ) -> FederatedDataset:
    r"""Loads ``cfg.dataset`` passing only the options its builder accepts."""
    if cfg.dataset.lower() not in DATASETS:
        raise ValueError(f"unknown dataset {cfg.dataset!r}; known: {sorted(DATASETS)}")
    builder = DATASETS[cfg.dataset.lower()]
    accepted = set(inspect.signature(builder).parameters)
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
        return DATASET_DEFAULTS.get(name.lower(), _FALLBACK)
    return {"model": own.model, "model_kwargs": dict(own.model_kwargs),
            "local": dict(own.local), "rounds": own.rounds}


def build_simulator(cfg: ExperimentConfig, *, dataset: FederatedDataset | None = None,
                    progress: bool = True, callbacks: tuple = ()) -> Simulator:
    r"""Data, model, strategy and :class:`Simulator` for ``cfg``.

    Model, local training and rounds default to ``dataset.defaults`` (to the
    :data:`DATASET_DEFAULTS` entry of ``cfg.dataset`` for a dataset without
    them); ``cfg`` overrides them. The model is initialised from the stream
    ``(cfg.seed, "model-init")`` so that every strategy of a comparison starts
    from the same weights."""
    if cfg.strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {cfg.strategy!r}; known: {sorted(STRATEGIES)}")
    parts = _split_overrides(cfg)
    data = dataset if dataset is not None else build_dataset(cfg, parts["data"])
    defaults = resolved_defaults(data, cfg.dataset)
    model_name = parts["model"].pop("name", defaults["model"])
    # The default model's arguments belong to it: another model starts from its own.
    base = defaults["model_kwargs"] if model_name == defaults["model"] else {}
    model_kwargs = {**base, **parts["model"]}
    if data.task == "classification":
        assert data.num_classes is not None  # FederatedDataset requires it
        outputs = data.num_classes
    else:
        outputs = int(data.splits["train"].y.shape[-1] if data.splits["train"].y.dim() > 2 else 1)
    torch.manual_seed(derive_seed(cfg.seed, "model-init"))
    model = build_model(model_name, data.input_shape, outputs, **model_kwargs)
    strategy = build_strategy(cfg.strategy, **parts["strategy"])
    local_kwargs = {**defaults["local"], **parts["local"]}
    if "epochs" in parts["local"] and "steps" not in parts["local"]:
        # Asking for epochs means epochs: a default step count would win over them.
        local_kwargs.pop("steps", None)
    local = LocalConfig(**local_kwargs)
    held_out = None
    if cfg.novel_clients:
        if not 0.0 < cfg.novel_clients < 1.0:
            raise ValueError(f"novel_clients must be a fraction in (0, 1), got {cfg.novel_clients}")
        k = max(1, int(round(cfg.novel_clients * data.num_clients)))
        held_out = torch.randperm(data.num_clients,
                                  generator=make_generator(cfg.seed, "held-out"))[:k].sort().values
    rounds = cfg.rounds if cfg.rounds is not None else defaults["rounds"]
    attack = None
    if cfg.attack is not None:
        from pyg_fedgraph.attacks import Attack
        attack = Attack(cfg.attack, cfg.attack_ratio)
    return Simulator(data, model, strategy, rounds=rounds, local=local, seed=cfg.seed,
                     held_out=held_out, progress=progress, callbacks=callbacks,
                     attack=attack, dropout=cfg.dropout, reject_policy=cfg.reject_policy,
                     **parts["sim"])
