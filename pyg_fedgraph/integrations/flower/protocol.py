r"""What :class:`GraphStrategy` and the client app exchange, as pure functions.

Every message key is a constant of this module. A pyg_fedgraph model travels
as an :class:`flwr.app.ArrayRecord` holding one array per named parameter
(what ``ArrayRecord(model.state_dict())`` gives for a model without buffers),
in the order and dtype of the :class:`~pyg_fedgraph.data.ParamLayout`.

A round's client work is a :class:`~pyg_fedgraph.train.jobs.TrainPlan` (or an
:class:`~pyg_fedgraph.train.jobs.EvaluatePlan`): :func:`encode_plan` turns
one client's row of it into a JSON description (``config[PLAN]``) plus one
:class:`~flwr.app.ArrayRecord` per tensor, and :func:`decode_plan` rebuilds
it on the client. Code is never sent: local rules and client jobs are rebuilt
from their registered names (:data:`~pyg_fedgraph.train.rules.RULES`,
:data:`~pyg_fedgraph.train.jobs.JOBS`), regularizers from a function name
(registered, or a top-level function of a trusted module) with JSON-scalar
keyword arguments.

Train message (server -> client): ``CONFIG`` (round, seed, partition id, the
run's local settings, ``PLAN``), an ``ArrayRecord`` per tensor of the plan
(``"params"`` is the starting model, absent when the client continues from
its own), and once per session ``LOCAL_PARAMS`` (the client's latest model as
the server knows it). Reply: ``METRICS`` (with ``PARTITION_ID``), ``PARAMS``
(trained model), ``DELTA`` (only when no starting model was sent) and
``OUTPUT_PREFIX + name`` for each client job's output.
"""
from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord
from torch import Tensor

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.train.engine import LOCAL_WHEN_SET, LocalConfig, Regularizer
from pyg_fedgraph.train.jobs import JOBS, EvaluatePlan, FineTune, Job, TrainPlan
from pyg_fedgraph.train.rules import RULES, LocalRule

__all__ = [
    "CONFIG", "PARAMS", "LOCAL_PARAMS", "DELTA", "METRICS", "PARTITION_ID", "NUM_EXAMPLES",
    "PLAN", "ROUND", "SEED", "SERVER_ROUND", "RESET_BUFFERS", "QUERY", "OUTPUT_PREFIX",
    "TRAIN_LOSS", "STEPS", "LOCAL_PREFIX",
    "params_to_record", "record_to_params", "check_params_record",
    "tensors_to_record", "record_to_tensors", "TRUSTED_MODULES",
    "RegularizerSpec", "register_regularizer", "encode_regularizer", "decode_regularizer",
    "resolve_regularizer", "encode_plan", "decode_plan", "output_key", "tensor_to_record",
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

#: Modules whose top-level functions a client may import by name to rebuild a
#: regularizer (where the strategies define theirs); anything else must be
#: registered with :func:`register_regularizer`. The server can make a client
#: call nothing outside them and the registry.
TRUSTED_MODULES: tuple[str, ...] = ("pyg_fedgraph.strategies.",)

_REGISTRY: dict[str, Callable[..., Tensor]] = {}


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


# ------------------------------------------------------------- regularizers
@dataclass(frozen=True)
class RegularizerSpec:
    r"""A regularizer as it travels: the name of its function, scalar keyword
    arguments, and each client's reference rows.

    Args:
        name (str): a name from :func:`register_regularizer`, or
            ``"module:qualname"`` of a top-level function in a trusted module.
        kwargs (dict): JSON scalars bound to the function as keywords.
    """
    name: str
    kwargs: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "kwargs": self.kwargs}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RegularizerSpec:
        data = json.loads(text)
        return cls(str(data["name"]), dict(data["kwargs"]))


def register_regularizer(name: str, fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    r"""Makes ``fn`` sendable to Flower clients under ``name``. Register it
    on the server and on the clients (or pass it to
    :func:`~pyg_fedgraph.integrations.flower.make_client_app` as
    ``regularizers={name: fn}``); build the strategy's regularizer as ``fn``
    itself or ``functools.partial(fn, **scalar_kwargs)``."""
    if ":" in name:
        raise ValueError(f"regularizer names may not contain ':', got {name!r}")
    if name in _REGISTRY and _REGISTRY[name] is not fn:
        raise ValueError(f"regularizer name {name!r} is already taken by {_REGISTRY[name]}")
    _REGISTRY[name] = fn
    return fn


def _function_name(fn: Callable[..., Tensor]) -> str | None:
    for name, registered in _REGISTRY.items():
        if registered is fn:
            return name
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if (module and any((module + ".").startswith(p) for p in TRUSTED_MODULES)
            and "<" not in qualname and "." not in qualname):
        return f"{module}:{qualname}"
    return None


def encode_regularizer(regularizer: Regularizer, num_params: int, strategy: Any = None
                       ) -> RegularizerSpec:
    r"""The :class:`RegularizerSpec` of ``regularizer`` (built by ``strategy``).

    Args:
        regularizer (Regularizer): the strategy's regularizer for :math:`S`
            clients.
        num_params (int): :math:`D`, to probe the function with.
        strategy (Strategy, optional): the strategy that built it.

    Accepted: a registered or trusted top-level function, or a
    :func:`functools.partial` of one with JSON-scalar keyword arguments (as
    FedProx and Ditto build their proximal terms). The spec is checked by evaluating
    the rebuilt function against the original on the first client's
    references, so a wrong encoding fails here rather than on the clients.

    Raises:
        ValueError: if the regularizer cannot be described by name.
    """
    fn = regularizer.fn
    spec: RegularizerSpec | None = None
    if isinstance(fn, functools.partial) and not fn.args:
        name = _function_name(fn.func)
        if name is not None and _json_scalars(fn.keywords or {}):
            spec = RegularizerSpec(name, dict(fn.keywords or {}))
    elif not isinstance(fn, functools.partial):
        name = _function_name(fn)
        if name is not None:
            spec = RegularizerSpec(name, {})
    if spec is None:
        raise ValueError(
            f"the regularizer {fn!r} of strategy {getattr(strategy, 'name', strategy)!r} "
            f"cannot be sent to Flower clients: write it as a top-level function of a "
            f"pyg_fedgraph.strategies module, or register it with "
            f"register_regularizer(name, fn) on the server and the clients, and build it "
            f"as fn or functools.partial(fn, **scalar_kwargs)")
    _verify(spec, regularizer, num_params)
    return spec


def _json_scalars(kwargs: Mapping[str, Any]) -> bool:
    return all(v is None or isinstance(v, (bool, int, float, str)) for v in kwargs.values())


def _verify(spec: RegularizerSpec, regularizer: Regularizer, num_params: int) -> None:
    if any(r.size(0) == 0 for r in regularizer.refs):
        return  # no client to probe with
    rebuilt = resolve_regularizer(spec.name)
    refs = [r[0] for r in regularizer.refs]
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(num_params, generator=gen)
    want = regularizer.fn(theta, *refs)
    got = rebuilt(theta, *refs, **spec.kwargs)
    if not torch.allclose(want, got, rtol=1e-5, atol=1e-7):
        raise ValueError(f"the regularizer {regularizer.fn!r} was encoded as {spec}, but the "
                         f"rebuilt function gives {float(got):.6g} instead of {float(want):.6g}; "
                         f"register the exact function with register_regularizer")


def resolve_regularizer(name: str, extra: Mapping[str, Callable[..., Tensor]] | None = None
                        ) -> Callable[..., Tensor]:
    r"""The function called ``name``: from ``extra``, the registry, or a
    top-level function of a trusted module (:obj:`TRUSTED_MODULES`)."""
    if extra and name in extra:
        return extra[name]
    if name in _REGISTRY:
        return _REGISTRY[name]
    module, _, qualname = name.partition(":")
    if qualname and any((module + ".").startswith(p) for p in TRUSTED_MODULES) \
            and "." not in qualname:
        fn = getattr(importlib.import_module(module), qualname, None)
        if callable(fn):
            return fn
    raise ValueError(f"unknown regularizer {name!r}: register it on this client with "
                     f"register_regularizer or make_client_app(regularizers={{...}})")


def decode_regularizer(spec: RegularizerSpec, refs: Sequence[Tensor],
                       extra: Mapping[str, Callable[..., Tensor]] | None = None
                       ) -> Regularizer:
    r"""The :class:`~pyg_fedgraph.train.Regularizer` of one client: ``refs``
    are its reference rows (without the client dimension)."""
    fn = resolve_regularizer(spec.name, extra)
    if spec.kwargs:
        fn = functools.partial(fn, **spec.kwargs)
    return Regularizer(fn, *(r.unsqueeze(0) for r in refs))


# ------------------------------------------------------------ local config
def local_config_to_dict(config: LocalConfig, prefix: str = LOCAL_PREFIX) -> dict[str, Any]:
    r"""The fields of ``config`` as ConfigRecord entries (``None`` left out,
    and those of :data:`~pyg_fedgraph.train.engine.LOCAL_WHEN_SET` while at
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
        if isinstance(value, Regularizer):
            spec = encode_regularizer(value, self.layout.num_params, self.strategy)
            refs = [r[self.row] for r in value.refs] if self.row is not None else list(value.refs)
            self.arrays[path] = tensors_to_record(refs)
            return {"regularizer": {"name": spec.name, "kwargs": spec.kwargs}, "refs": path}
        if isinstance(value, LocalConfig):
            return {"local": local_config_to_dict(value, "")}
        if isinstance(value, (LocalRule, Job)):
            is_rule = isinstance(value, LocalRule)
            registry: Mapping[str, type] = RULES if is_rule else JOBS
            if registry.get(value.kind) is not type(value):
                raise ValueError(f"{type(value).__name__} cannot be sent to Flower clients: "
                                 f"register it with register_{'rule' if is_rule else 'job'}")
            return {"r" if is_rule else "j": value.kind, "fields": self.fields(value, path)}
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
    def __init__(self, layout: ParamLayout, arrays: Mapping[str, Any],
                 regularizers: Mapping[str, Callable[..., Tensor]] | None) -> None:
        self.layout, self.arrays, self.regularizers = layout, arrays, regularizers

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
        if "regularizer" in spec:
            reg = RegularizerSpec(str(spec["regularizer"]["name"]),
                                  dict(spec["regularizer"]["kwargs"]))
            refs = record_to_tensors(self.array(spec["refs"]))
            return decode_regularizer(reg, refs, self.regularizers)
        if "local" in spec:
            return local_config_from_record(spec["local"], "")
        if "finetune" in spec:
            return FineTune(**self.fields(FineTune, spec["finetune"]))
        for key, registry in (("r", RULES), ("j", JOBS)):
            if key in spec:
                cls = registry.get(str(spec[key]))
                if cls is None:
                    raise ValueError(f"unknown {'rule' if key == 'r' else 'client job'} "
                                     f"{spec[key]!r}: it is not registered on this client")
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


def decode_plan(text: str, arrays: Mapping[str, Any], layout: ParamLayout,
                regularizers: Mapping[str, Callable[..., Tensor]] | None = None
                ) -> TrainPlan | EvaluatePlan:
    r"""The one-client plan described by ``text`` (from :func:`encode_plan`)
    with its records ``arrays``: per-client tensors come back with a leading
    client dimension of 1, registered rules and jobs are rebuilt by name."""
    data = json.loads(text)
    cls = _PLANS.get(data.get("type"))
    if cls is None:
        raise ValueError(f"unknown plan type {data.get('type')!r}")
    dec = _Decoder(layout, arrays, regularizers)
    return cls(**dec.fields(cls, data["fields"]))
