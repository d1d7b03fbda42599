r"""Hyper-parameters declared once: the one schema that constructors, the
command line (``--set``), config files and Optuna search spaces read.

A hyper-parameter is a keyword argument of a constructor (a strategy, a
model, :class:`~pyg_fedgraph.train.LocalConfig`) whose annotation says what
it accepts, and optionally where a study searches it::

    def __init__(self, mu: Annotated[float, Range(ge=0.0), Search(1e-3, 1.0, log=True)]
                 = 0.01) -> None:

:func:`schema` reads those annotations into :class:`HParam` entries;
:meth:`HParam.check` accepts a value or raises one clear :class:`ValueError`
(wrong type, NaN or infinity, out of range, not among the choices), coercing
integers to floats where a float is declared; :meth:`HParam.parse` does the
same for text (``--set lr=abc``). The strategies' constructors are checked
against their schema before they run (:class:`~pyg_fedgraph.strategies.Strategy`),
their :meth:`hparams` and search spaces are derived from it.
"""
from __future__ import annotations

import inspect
import json
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

__all__ = ["Range", "Search", "HParam", "schema", "check_kwargs", "parse_text"]


@dataclass(frozen=True)
class Range:
    r"""Bounds of a numeric hyper-parameter (any subset of ``>=``, ``>``,
    ``<=``, ``<``)."""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def violation(self, value: float) -> str | None:
        for bound, ok, word in ((self.ge, lambda b: value >= b, ">="),
                                (self.gt, lambda b: value > b, ">"),
                                (self.le, lambda b: value <= b, "<="),
                                (self.lt, lambda b: value < b, "<")):
            if bound is not None and not ok(bound):
                return f"must be {word} {_num(bound)}"
        return None

    def describe(self) -> str:
        parts = [f"{w} {_num(b)}" for b, w in ((self.ge, ">="), (self.gt, ">"), (self.le, "<="),
                                               (self.lt, "<")) if b is not None]
        return " and ".join(parts)


@dataclass(frozen=True)
class Search:
    r"""Where an Optuna study searches a hyper-parameter: ``[low, high]``
    (log-uniform with ``log``, on a grid of ``step``) for numbers, or a list
    of ``choices``.

    Args:
        low, high (float, optional): the interval.
        log (bool, optional): log-uniform (default: ``False``).
        step (float, optional): grid step.
        choices (tuple, optional): categorical choices instead of an interval.
        note (str, optional): where the range comes from (a paper's grid).
    """
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] | None = None
    note: str = ""

    def suggest(self, trial: Any, name: str, integer: bool) -> Any:
        r"""Draws ``name`` from ``trial`` (an :class:`optuna.trial.Trial` or a
        view of one)."""
        if self.choices is not None:
            return trial.suggest_categorical(name, list(self.choices))
        if self.low is None or self.high is None:
            raise ValueError(f"the search of {name!r} needs choices or both low and high")
        if integer:
            return trial.suggest_int(name, int(self.low), int(self.high), log=self.log,
                                     step=int(self.step or 1))
        return trial.suggest_float(name, float(self.low), float(self.high), log=self.log,
                                   step=self.step)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _strip(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    r"""The type without ``Annotated`` and its metadata; an ``Annotated`` arm
    of a union (``Rounds | None``, a declared alias made optional) gives its
    metadata to the whole union."""
    if get_origin(annotation) is typing.Annotated:
        base, *meta = get_args(annotation)
        return base, tuple(meta)
    arms = _arms(annotation)
    if len(arms) > 1 and any(get_origin(a) is typing.Annotated for a in arms):
        bases, metas = zip(*(_strip(a) for a in arms), strict=True)
        return Union[bases], tuple(m for ms in metas for m in ms)  # noqa: UP007 - a runtime union
    return annotation, ()


def _arms(annotation: Any) -> tuple[Any, ...]:
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return get_args(annotation)
    return (annotation,)


def _describe(annotation: Any) -> str:
    names = []
    for arm in _arms(annotation):
        if arm is type(None):
            names.append("None")
        elif get_origin(arm) is Literal:
            names.append("one of " + ", ".join(repr(a) for a in get_args(arm)))
        elif get_origin(arm) in (list, tuple, Sequence) or arm in (list, tuple):
            names.append("a list")
        else:
            names.append({bool: "true or false", int: "an int", float: "a float",
                          str: "a string"}.get(arm, getattr(arm, "__name__", str(arm))))
    return " or ".join(names)


def _accept(arm: Any, value: Any) -> tuple[bool, Any]:
    r"""``(accepted, coerced value)`` of ``value`` for one arm of a type."""
    if arm is type(None):
        return value is None, value
    if arm is Any:
        return True, value
    if get_origin(arm) is Literal:
        choices = get_args(arm)
        if isinstance(value, bool) and not any(isinstance(c, bool) for c in choices):
            return False, value  # True == 1: a bool is not the literal 1
        return value in choices, value
    if arm is bool:
        return isinstance(value, bool), value
    if arm is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if arm is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False, value
        return True, float(value)
    if arm is str:
        return isinstance(value, str), value
    origin = get_origin(arm)
    if origin in (list, tuple, Sequence) or arm in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False, value
        args = get_args(arm)
        inner = args[0] if args else Any
        out = []
        for v in value:
            ok, v = _accept(inner, v)
            if not ok:
                return False, value
            out.append(v)
        return True, list(out)
    if isinstance(arm, type):
        return isinstance(value, arm), value
    return True, value


@dataclass(frozen=True)
class HParam:
    r"""One declared hyper-parameter.

    Attributes:
        name (str): its keyword.
        annotation: the declared type (``float``, ``int | None``,
            ``Literal["sgd", "adam"]`` ...), without ``Annotated``.
        default: the default value (:obj:`inspect.Parameter.empty` if none).
        range (Range, optional): numeric bounds.
        search (Search, optional): where studies search it.
    """
    name: str
    annotation: Any
    default: Any = inspect.Parameter.empty
    range: Range | None = None
    search: Search | None = None

    @property
    def is_integer(self) -> bool:
        return int in _arms(self.annotation) and float not in _arms(self.annotation)

    def describe(self) -> str:
        r"""What the parameter accepts, in words."""
        text = _describe(self.annotation)
        if self.range is not None:
            text += f" {self.range.describe()}"
        return text

    def check(self, value: Any, where: str = "") -> Any:
        r"""``value`` as the parameter holds it (ints become floats where a
        float is declared), or a :class:`ValueError` naming ``where`` (e.g.
        ``"--set lr"``), the parameter and what it accepts."""
        who = where or self.name
        for arm in _arms(self.annotation):
            ok, coerced = _accept(arm, value)
            if ok:
                break
        else:
            raise ValueError(f"{who}: expected {self.describe()}, got {value!r}")
        if isinstance(coerced, float) and not math.isfinite(coerced):
            raise ValueError(f"{who}: expected a finite number, got {value!r}")
        if self.range is not None and isinstance(coerced, (int, float)) \
                and not isinstance(coerced, bool):
            why = self.range.violation(coerced)
            if why is not None:
                raise ValueError(f"{who} {why}, got {value!r}")
        return coerced

    def parse(self, text: str, where: str = "") -> Any:
        r"""The value of command-line text (JSON, ``true``/``false``,
        ``none``, or a plain string), checked."""
        return self.check(parse_text(text), where)


#: Spellings of the non-finite floats, in lower case. JSON's reader takes only ``NaN``,
#: ``Infinity`` and ``-Infinity``; the others would stay strings and get a different error
#: than those three ("expected a float" against "expected a finite number").
_NON_FINITE = frozenset(f"{sign}{word}" for sign in ("", "+", "-")
                        for word in ("nan", "inf", "infinity"))


def parse_text(text: str) -> Any:
    r"""``"0.1"`` -> 0.1, ``"true"`` -> True, ``"[1,2]"`` -> [1, 2], ``"none"``
    -> None, ``"nan"`` / ``"NaN"`` / ``"inf"`` / ``"-Infinity"`` (any case) -> the
    float, anything else the string itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        low = text.strip().lower()
        if low in ("true", "false"):
            return low == "true"
        if low in ("none", "null"):
            return None
        if low in _NON_FINITE:
            return float(low)
        return text


def _callable_of(obj: Any) -> Callable[..., Any]:
    return obj.__init__ if inspect.isclass(obj) else obj


def schema(obj: Any) -> dict[str, HParam]:
    r"""The declared hyper-parameters of a class's constructor (or of a
    function), in signature order: every keyword parameter but ``self``,
    ``*args`` and ``**kwargs``."""
    fn = inspect.unwrap(_callable_of(obj))
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError):
        hints = {}
    out: dict[str, HParam] = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        base, meta = _strip(hints.get(name, Any))
        out[name] = HParam(name, base, p.default,
                           next((m for m in meta if isinstance(m, Range)), None),
                           next((m for m in meta if isinstance(m, Search)), None))
    return out


def check_kwargs(obj: Any, kwargs: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    r"""``kwargs`` checked against ``schema(obj)`` (unknown keys are an
    error naming the known ones); ``where`` prefixes the messages."""
    hps = schema(obj)
    unknown = sorted(set(kwargs) - set(hps))
    if unknown:
        owner = getattr(obj, "__name__", repr(obj))
        raise ValueError(f"{where or owner} has no option(s) {unknown}; it accepts "
                         f"{sorted(hps)}")
    return {k: hps[k].check(v, f"{where}{'.' if where else ''}{k}" if where else "")
            for k, v in kwargs.items()}
