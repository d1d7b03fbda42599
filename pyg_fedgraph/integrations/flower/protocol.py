r"""What :class:`GraphStrategy` and the client app exchange, as pure functions.

A pyg_fedgraph model travels as an :class:`flwr.app.ArrayRecord` holding one
array per named parameter (what ``ArrayRecord(model.state_dict())`` gives for a
model without buffers), in the order and dtype of the
:class:`~pyg_fedgraph.data.ParamLayout`. The functions here convert between
those records and flat parameter vectors, check a client's reply against the
layout, and turn a strategy's :class:`~pyg_fedgraph.train.Regularizer` into a
name, scalar keyword arguments and reference tensors that a client can rebuild
(code is never sent: the client looks the function up).

Record keys of a train message (server -> client): ``"config"``
(:class:`~flwr.app.ConfigRecord`), ``"params"`` (starting model, absent when
the strategy lets the client continue from its own model), ``"local-params"``
(the client's latest model as the server knows it, sent once per session),
``"regularizer"`` and ``"personal-params"`` / ``"personal-regularizer"``
(the second local job of :attr:`TrainPlan.personal`). Reply (client ->
server): ``"metrics"`` (:class:`~flwr.app.MetricRecord` with
``"partition-id"``), ``"params"`` (trained model), ``"delta"`` (only when no
starting model was sent), ``"personal-params"``, ``"feedback"``.
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
from flwr.app import Array, ArrayRecord, ConfigRecord
from torch import Tensor

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.train.engine import LocalConfig, Regularizer

__all__ = [
    "CONFIG", "PARAMS", "LOCAL_PARAMS", "DELTA", "PERSONAL_PARAMS", "FEEDBACK", "REGULARIZER",
    "PERSONAL_REGULARIZER", "METRICS", "PARTITION_ID", "NUM_EXAMPLES",
    "params_to_record", "record_to_params", "check_params_record",
    "tensors_to_record", "record_to_tensors", "TRUSTED_MODULES",
    "RegularizerSpec", "register_regularizer", "encode_regularizer", "decode_regularizer",
    "resolve_regularizer",
    "local_config_to_dict", "local_config_from_record",
]

CONFIG = "config"
PARAMS = "params"
LOCAL_PARAMS = "local-params"
DELTA = "delta"
PERSONAL_PARAMS = "personal-params"
FEEDBACK = "feedback"
REGULARIZER = "regularizer"
PERSONAL_REGULARIZER = "personal-regularizer"
METRICS = "metrics"
PARTITION_ID = "partition-id"
NUM_EXAMPLES = "num-examples"

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


def encode_regularizer(regularizer: Regularizer, num_params: int, strategy: Any = None,
                       personal: bool = False) -> RegularizerSpec:
    r"""The :class:`RegularizerSpec` of ``regularizer`` (built by ``strategy``).

    Args:
        regularizer (Regularizer): the strategy's regularizer for :math:`S`
            clients.
        num_params (int): :math:`D`, to probe the function with.
        strategy (Strategy, optional): the strategy that built it.
        personal (bool, optional): it belongs to :attr:`TrainPlan.personal`.

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
def local_config_to_dict(config: LocalConfig, prefix: str = "local.") -> dict[str, Any]:
    r"""The fields of ``config`` as ConfigRecord entries (``None`` left out)."""
    return {prefix + f.name: getattr(config, f.name) for f in fields(LocalConfig)
            if getattr(config, f.name) is not None}


def local_config_from_record(record: ConfigRecord, prefix: str = "local.") -> LocalConfig | None:
    r"""The :class:`LocalConfig` written by :func:`local_config_to_dict`, or
    ``None`` when ``record`` has none."""
    values = {f.name: record[prefix + f.name] for f in fields(LocalConfig)
              if prefix + f.name in record}
    if not values:
        return None
    for key in ("epochs", "steps"):
        values.setdefault(key, None)
    return LocalConfig(**values)
