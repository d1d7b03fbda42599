r"""What :class:`GraphStrategy` and the client app exchange, as pure functions.

Every message key is a constant of this module. A pyg_fedgraph model travels
as an :class:`flwr.app.ArrayRecord` holding one array per named parameter
(what ``ArrayRecord(model.state_dict())`` gives for a model without buffers),
in the order and dtype of the :class:`~pyg_fedgraph.data.ParamLayout`.

A round's client work is a :class:`~pyg_fedgraph.train.jobs.TrainPlan` (or an
:class:`~pyg_fedgraph.train.jobs.EvaluatePlan`): :func:`encode_plan` turns
one client's row of it into a JSON description (``config[PLAN]``) plus one
:class:`~flwr.app.ArrayRecord` per tensor, and :func:`decode_plan` rebuilds
it on the client. Code is never sent: local rules, client jobs and
regularizers are declared data, rebuilt from their registered names
(:data:`~pyg_fedgraph.train.rules.RULES`, :data:`~pyg_fedgraph.train.jobs.JOBS`,
:data:`~pyg_fedgraph.train.regularizers.REGULARIZERS`) and their fields.

Train message (server -> client): ``CONFIG`` (round, seed, partition id, the
run's local settings, ``PLAN``), an ``ArrayRecord`` per tensor of the plan
(``"params"`` is the starting model, absent when the client continues from
its own), and once per session ``LOCAL_PARAMS`` (the client's latest model as
the server knows it). Reply: ``METRICS`` (with ``PARTITION_ID``), ``PARAMS``
(trained model), ``DELTA`` (only when no starting model was sent) and
``OUTPUT_PREFIX + name`` for each client job's output.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord
from torch import Tensor

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.train.config import LOCAL_WHEN_SET, LocalConfig
from pyg_fedgraph.train.jobs import JOBS, EvaluatePlan, FineTune, Job, TrainPlan
from pyg_fedgraph.train.regularizers import REGULARIZERS, Regularizer
from pyg_fedgraph.train.rules import RULES, LocalRule

__all__ = [
    "CONFIG", "PARAMS", "LOCAL_PARAMS", "DELTA", "METRICS", "PARTITION_ID", "NUM_EXAMPLES",
    "PLAN", "ROUND", "SEED", "SERVER_ROUND", "RESET_BUFFERS", "QUERY", "OUTPUT_PREFIX",
    "TRAIN_LOSS", "STEPS", "LOCAL_PREFIX",
    "params_to_record", "record_to_params", "check_params_record",
    "tensors_to_record", "record_to_tensors",
    "encode_plan", "decode_plan", "output_key", "tensor_to_record",
    "record_to_tensor",
    "local_config_to_dict", "local_config_from_record",
]

# Records of a message.
CONFIG = "config"
PARAMS = "params"
LOCAL_PARAMS = "local-params"
DELTA = "delta"
METRICS = "metrics"
#: Prefix of the records holding the outputs of a plan's client jobs.
OUTPUT_PREFIX = "output."
# Entries of the config record.
PLAN = "plan"
ROUND = "round"
SEED = "seed"
SERVER_ROUND = "server-round"
RESET_BUFFERS = "reset-buffers"
QUERY = "query"
#: Prefix of the run's local settings in the config record.
LOCAL_PREFIX = "local."
# Entries of the metrics record.
PARTITION_ID = "partition-id"
NUM_EXAMPLES = "num-examples"
TRAIN_LOSS = "train-loss"
STEPS = "steps"

# ------------------------------------------------------------------ params
def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


def params_to_record(layout: ParamLayout, flat: Tensor) -> ArrayRecord:
    r"""One client's flat parameters :math:`(D,)` as an :class:`ArrayRecord`
    with one array per named parameter (layout order and dtypes)."""
    if flat.dim() != 1 or flat.numel() != layout.num_params:
        raise ValueError(f"expected one flat parameter vector of {layout.num_params} values, "
                         f"got shape {tuple(flat.shape)}")
    return ArrayRecord({name: Array(t.detach().cpu().contiguous().numpy())
                        for name, t in layout.unflatten(flat.detach()).items()})


def record_to_params(layout: ParamLayout, record: ArrayRecord) -> Tensor:
    r"""The flat vector :math:`(D,)` of a record made by :func:`params_to_record`
    (check it first with :func:`check_params_record`)."""
    parts = [torch.from_numpy(np.array(record[e.name].numpy(), copy=True)).reshape(-1)
             for e in layout.params]
    return torch.cat(parts).to(torch.get_default_dtype())


def check_params_record(layout: ParamLayout, record: Any, what: str = "parameters"
                        ) -> str | None:
    r"""Why ``record`` is not a valid model for ``layout`` (``None`` if it is):
    wrong type, wrong array count or names, undecodable bytes, wrong shape,
    wrong dtype, or non-finite values."""
    if not isinstance(record, ArrayRecord):
        return f"{what}: expected an ArrayRecord, got {type(record).__name__}"
    expected = layout.param_names
    if set(record.keys()) != set(expected):
        missing = [n for n in expected if n not in record]
        unexpected = [n for n in record.keys() if n not in expected]
        return (f"{what}: sent {len(record)} arrays, the model has {len(expected)} "
                f"(missing {missing}, unexpected {unexpected})")
    for e in layout.params:
        try:
            value = record[e.name].numpy()
        except Exception as err:  # any decoding failure makes the reply unusable
            return f"{what}: array {e.name!r} could not be decoded ({err})"
        if tuple(value.shape) != e.shape:
            return (f"{what}: array {e.name!r} has shape {tuple(value.shape)}, "
                    f"the model has {e.shape}")
        want = _numpy_dtype(e.dtype)
        if value.dtype != want:
            return f"{what}: array {e.name!r} has dtype {value.dtype}, the model uses {want}"
        if not np.isfinite(value).all():
            return f"{what}: array {e.name!r} holds non-finite values (NaN or Inf)"
    return None


def tensors_to_record(tensors: Sequence[Tensor]) -> ArrayRecord:
    r"""Arbitrary tensors (a regularizer's reference rows) keyed ``"0"``, ``"1"``..."""
    return ArrayRecord({str(k): Array(t.detach().cpu().contiguous().numpy())
                        for k, t in enumerate(tensors)})


def record_to_tensors(record: ArrayRecord) -> list[Tensor]:
    r"""The tensors of :func:`tensors_to_record`, in order."""
    return [torch.from_numpy(np.array(record[str(k)].numpy(), copy=True))
            for k in range(len(record))]


# ------------------------------------------------------------ local config
def local_config_to_dict(config: LocalConfig, prefix: str = LOCAL_PREFIX) -> dict[str, Any]:
    r"""The fields of ``config`` as ConfigRecord entries (``None`` left out,
    and those of :data:`~pyg_fedgraph.train.trainer.LOCAL_WHEN_SET` while at
    their defaults, so that clients without them still read the record)."""
    optional = config.optional_set()
    return {prefix + f.name: getattr(config, f.name) for f in fields(LocalConfig)
            if getattr(config, f.name) is not None
            and (f.name not in LOCAL_WHEN_SET or f.name in optional)}


def local_config_from_record(record: Mapping[str, Any], prefix: str = LOCAL_PREFIX
                             ) -> LocalConfig | None:
    r"""The :class:`LocalConfig` written by :func:`local_config_to_dict`, or
    ``None`` when ``record`` has none."""
    values = {f.name: record[prefix + f.name] for f in fields(LocalConfig)
              if prefix + f.name in record}
    if not values:
        return None
    for key in ("epochs", "steps"):
        values.setdefault(key, None)
    return LocalConfig(**values)


# -------------------------------------------------------------------- plans
def output_key(name: str) -> str:
    r"""The record key of a client job's output ``name``."""
    return OUTPUT_PREFIX + name


def tensor_to_record(layout: ParamLayout, t: Tensor) -> ArrayRecord:
    r"""One tensor as a record: a model-sized vector :math:`(D,)` with the
    layout's names (:func:`params_to_record`), anything else as one array."""
    if t.dim() == 1 and t.numel() == layout.num_params and t.is_floating_point():
        return params_to_record(layout, t)
    return tensors_to_record([t])


def record_to_tensor(layout: ParamLayout, record: object, what: str) -> Tensor:
    r"""The tensor of :func:`tensor_to_record`, checked (an :class:`ArrayRecord`;
    a model against the layout; any array for finite values); raises a
    :class:`ValueError` starting with ``what``."""
    if not isinstance(record, ArrayRecord):
        raise ValueError(f"{what}: expected an ArrayRecord, got {type(record).__name__}")
    if set(record.keys()) != {"0"}:  # a model
        reason = check_params_record(layout, record, what)
        if reason is not None:
            raise ValueError(reason)
        return record_to_params(layout, record)
    (t,) = record_to_tensors(record)
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{what}: holds non-finite values (NaN or Inf)")
    return t


#: Declared client work sent by name: (message key, base class, registry, how to register).
_DECLARED: tuple[tuple[str, type, Mapping[str, type], str], ...] = (
    ("r", LocalRule, RULES, "register_rule"), ("j", Job, JOBS, "register_job"),
    ("g", Regularizer, REGULARIZERS, "register_regularizer"))


class _Encoder:
    def __init__(self, layout: ParamLayout, row: int | None, strategy: Any) -> None:
        self.layout, self.row, self.strategy = layout, row, strategy
        self.arrays: dict[str, ArrayRecord] = {}

    def value(self, value: Any, path: str, per_client: bool) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, Tensor):
            t = value[self.row] if per_client and self.row is not None else value
            self.arrays[path] = tensor_to_record(self.layout, t.detach())
            return {"tensor": path}
        if isinstance(value, LocalConfig):
            return {"local": local_config_to_dict(value, "")}
        for key, base, registry, how in _DECLARED:
            if isinstance(value, base):
                kind = getattr(value, "kind", "")
                if registry.get(kind) is not type(value):
                    raise ValueError(f"{type(value).__name__} of strategy "
                                     f"{getattr(self.strategy, 'name', self.strategy)!r} cannot "
                                     f"be sent to Flower clients: register it with {how} on "
                                     f"the server and the clients")
                return {key: kind, "fields": self.fields(value, path)}
        if isinstance(value, tuple):
            return [self.value(v, f"{path}.{k}", per_client) for k, v in enumerate(value)]
        if isinstance(value, FineTune):
            return {"finetune": self.fields(value, path)}
        raise ValueError(f"cannot send {type(value).__name__} to Flower clients")

    def fields(self, obj: Any, path: str) -> dict[str, Any]:
        return {f.name: self.value(getattr(obj, f.name), f"{path}.{f.name}".lstrip("."),
                                   bool(f.metadata.get("per_client")))
                for f in fields(obj)}


def encode_plan(plan: TrainPlan | EvaluatePlan, row: int | None, layout: ParamLayout,
                strategy: Any = None) -> tuple[str, dict[str, ArrayRecord]]:
    r"""Client ``row``'s part of ``plan``: its JSON description (for
    ``config[PLAN]``) and its arrays by record key. ``row=None`` sends
    per-client tensors whole (a plan already restricted to one client)."""
    enc = _Encoder(layout, row, strategy)
    spec = enc.fields(plan, "")
    return json.dumps({"type": type(plan).__name__, "fields": spec}, sort_keys=True), enc.arrays


class _Decoder:
    def __init__(self, layout: ParamLayout, arrays: Mapping[str, Any]) -> None:
        self.layout, self.arrays = layout, arrays

    def array(self, path: str) -> Any:
        if path not in self.arrays:
            raise ValueError(f"the plan refers to the missing record {path!r}")
        return self.arrays[path]

    def value(self, spec: Any, per_client: bool) -> Any:
        if spec is None or isinstance(spec, (bool, int, float, str)):
            return spec
        if isinstance(spec, list):
            return tuple(self.value(v, per_client) for v in spec)
        if not isinstance(spec, dict):
            raise ValueError(f"malformed plan entry {spec!r}")
        if "tensor" in spec:
            t = record_to_tensor(self.layout, self.array(spec["tensor"]),
                                  str(spec["tensor"]))
            return t.unsqueeze(0) if per_client else t
        if "local" in spec:
            return local_config_from_record(spec["local"], "")
        if "finetune" in spec:
            return FineTune(**self.fields(FineTune, spec["finetune"]))
        for key, _, registry, _ in _DECLARED:
            if key in spec:
                cls = registry.get(str(spec[key]))
                if cls is None:
                    what = {"r": "local rule", "j": "client job", "g": "regularizer"}[key]
                    raise ValueError(f"unknown {what} {spec[key]!r}: it is not registered on "
                                     f"this client")
                return cls(**self.fields(cls, spec["fields"]))
        raise ValueError(f"malformed plan entry {spec!r}")

    def fields(self, cls: type, spec: Mapping[str, Any]) -> dict[str, Any]:
        known = {f.name: f for f in fields(cls)}
        unknown = set(spec) - set(known)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
        return {name: self.value(value, bool(known[name].metadata.get("per_client")))
                for name, value in spec.items()}


_PLANS: dict[str, type] = {"TrainPlan": TrainPlan, "EvaluatePlan": EvaluatePlan}


def decode_plan(text: str, arrays: Mapping[str, Any], layout: ParamLayout
                ) -> TrainPlan | EvaluatePlan:
    r"""The one-client plan described by ``text`` (from :func:`encode_plan`)
    with its records ``arrays``: per-client tensors come back with a leading
    client dimension of 1, registered rules and jobs are rebuilt by name."""
    data = json.loads(text)
    cls = _PLANS.get(data.get("type"))
    if cls is None:
        raise ValueError(f"unknown plan type {data.get('type')!r}")
    dec = _Decoder(layout, arrays)
    return cls(**dec.fields(cls, data["fields"]))
