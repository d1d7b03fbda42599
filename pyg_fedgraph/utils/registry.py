r"""One registry shape for everything chosen by name: strategies, datasets,
client models, local rules, client jobs and regularizers.

A :class:`Registry` maps a name to a class or builder and reads like a
:class:`dict` (``name in REG``, ``REG[name]``, ``sorted(REG)``). Entries are
added with the :meth:`Registry.register` decorator next to their definition,
and built by name with :meth:`Registry.resolve`, in the manner of PyG's
``torch_geometric.nn.resolver``: an unknown name is one :class:`ValueError`
that lists the known ones.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "UnknownNameError"]

T = TypeVar("T")
E = TypeVar("E")


class UnknownNameError(ValueError, KeyError):
    r"""A name no entry of a :class:`Registry` has: a :class:`ValueError` (one
    line that lists the known names) that is also a :class:`KeyError`, so that
    ``Mapping.get`` and ``in`` work as for a dict."""

    def __str__(self) -> str:  # a KeyError would quote its message
        return str(self.args[0]) if self.args else ""


class Registry(Mapping[str, T], Generic[T]):
    r"""Name -> class (or builder function) of one kind of thing.

    Args:
        what (str): what the entries are, for error messages
            (``"strategy"``, ``"dataset"``, ...).
        attribute (str, optional): the class attribute :meth:`register` sets
            to the entry's name (``"name"`` for strategies, ``"kind"`` for
            rules, jobs and regularizers); :obj:`None` sets none
            (default: :obj:`None`).
        normalize (callable, optional): maps a name to its key (datasets
            accept ``"Fashion_MNIST"`` for ``"fashion-mnist"``)
            (default: the name itself).
    """

    def __init__(self, what: str, *, attribute: str | None = None,
                 normalize: Callable[[str], str] | None = None) -> None:
        self.what = what
        self.attribute = attribute
        self.normalize = normalize or (lambda name: name)
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[E], E]:
        r"""Decorator adding a class or function under ``name``; a
        :class:`ValueError` when another object already has the name. The
        same definition registered again (a module reloaded in a notebook)
        replaces itself."""
        key = self.normalize(name)

        def wrap(obj: E) -> E:
            old = self._entries.get(key)
            if old is not None and old is not obj and _origin(old) != _origin(obj):
                raise ValueError(f"{self.what} name {key!r} is already taken by "
                                 f"{_origin(old)}; choose another name")
            if self.attribute is not None:
                setattr(obj, self.attribute, key)
            self._entries[key] = obj  # type: ignore[assignment]
            return obj
        return wrap

    def __getitem__(self, name: str) -> T:
        key = self.normalize(name)
        if key not in self._entries:
            raise UnknownNameError(f"unknown {self.what} {name!r}; known: "
                                   f"{', '.join(sorted(self))}")
        return self._entries[key]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.normalize(name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __setitem__(self, name: str, obj: T) -> None:
        r"""``REG[name] = obj`` registers ``obj`` under ``name`` (as
        :meth:`register` does)."""
        self.register(name)(obj)

    def __delitem__(self, name: str) -> None:
        r"""Removes the entry ``name`` (a test's temporary registration)."""
        del self._entries[self.normalize(name)]

    def resolve(self, name: str, *args: Any, **kwargs: Any) -> Any:
        r"""The entry ``name`` called with ``args`` and ``kwargs`` (an
        instance of a class, the result of a builder)."""
        return self[name](*args, **kwargs)  # type: ignore[operator]

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {sorted(self)})"


def _origin(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
