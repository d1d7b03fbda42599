r"""Reading pickles of plain data without running code.

Data sets of the papers ship as pickles: DCRNN's sensor graphs
(``adj_mx.pkl``), GRDA's DG-60 (``toy_d60_spiral.pkl``). Plain
:func:`pickle.load` runs whatever the file asks for, so a pickle a user hands
us goes through :class:`ArrayUnpickler`, which builds only lists, tuples,
dicts, strings, numbers and numpy arrays and refuses every other global.
"""
from __future__ import annotations

import importlib
import io
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pyg_fedgraph.utils.errors import one_line

__all__ = ["ArrayUnpickler", "RefusedPickle", "load_array_pickle", "loads_array_pickle",
           "read_pickle_file"]


def _numpy_global(module: str, name: str) -> Callable[[], Any]:
    def resolve() -> Any:
        try:  # numpy >= 2 names its core numpy._core
            return getattr(importlib.import_module(f"numpy._core.{module}"), name)
        except ImportError:  # pragma: no cover - numpy 1.x
            return getattr(importlib.import_module(f"numpy.core.{module}"), name)
    return resolve


def _codecs_encode() -> Callable[..., Any]:
    import codecs
    return codecs.encode


class RefusedPickle(ValueError):
    r"""The pickle asked for something outside the allow-list."""


class ArrayUnpickler(pickle.Unpickler):
    r"""Builds only lists, tuples, dicts, strings, numbers and numpy arrays.
    The only globals it resolves are those numpy needs to rebuild an array
    (``_reconstruct``, ``ndarray``, ``dtype``; ``_frombuffer`` for pickle
    protocol 5) and ``_codecs.encode``, with which Python 3 writes ``bytes``
    in protocols 2 and 3.

    Args:
        file: the open binary file.
        source (str): the file's name, for messages.
        what (str): what the file should be, for messages (e.g. ``"a
            sensor-graph pickle"``).
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _numpy_global("multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"): _numpy_global("multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"): _numpy_global("numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"): _numpy_global("numeric", "_frombuffer"),
        ("numpy", "ndarray"): lambda: np.ndarray,
        ("numpy", "dtype"): lambda: np.dtype,
        ("_codecs", "encode"): _codecs_encode,
    }

    def __init__(self, file: io.BufferedIOBase, source: str, what: str = "a data pickle"
                 ) -> None:
        super().__init__(file, encoding="latin1")  # pickles written by Python 2 too
        self.source = source
        self.what = what

    def find_class(self, module: str, name: str) -> Any:
        make = self._ALLOWED.get((module, name))
        if make is None:
            raise RefusedPickle(
                f"refusing to unpickle {self.source}: it asks for the Python object "
                f"{module}.{name}, but {self.what} may only hold lists, dicts, strings "
                f"and numpy arrays; the file is corrupted or malicious (do not open it "
                f"with plain pickle)")
        return make()

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle(f"refusing to unpickle {self.source}: persistent ids are not "
                            f"allowed")


def loads_array_pickle(raw: bytes, source: str, what: str = "a data pickle",
                       expected: str = "") -> Any:
    r"""The object pickled in ``raw`` (the bytes of file ``source``), read
    with :class:`ArrayUnpickler`; errors as :func:`load_array_pickle`."""
    try:
        return ArrayUnpickler(io.BytesIO(raw), source, what).load()
    except RefusedPickle:
        raise
    except Exception as err:  # garbage fails in many ways, all meaning the same
        raise ValueError(f"{source} is not {what} ({type(err).__name__}: {one_line(err)})"
                         + (f"; expected {expected}" if expected else "")) from None


def load_array_pickle(path: str | Path, what: str = "a data pickle", expected: str = ""
                      ) -> Any:
    r"""The object pickled in ``path``, read with :class:`ArrayUnpickler`.

    Args:
        path (str or Path): the file.
        what (str, optional): what the file should be, for messages.
        expected (str, optional): the format expected, appended to the error
            of a file that is not a readable pickle.

    Raises:
        ValueError: if the file is missing, is not a pickle, or asks for
            anything outside the allow-list (:class:`RefusedPickle`).
    """
    return loads_array_pickle(read_pickle_file(path, what), str(path), what, expected)


def read_pickle_file(path: str | Path, what: str = "a data pickle") -> bytes:
    r"""The bytes of ``path``, for :func:`loads_array_pickle` (read once, so a
    caller can also hash what it unpickles).

    Raises:
        ValueError: if there is no such file.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} not found: expected {what} there")
    return path.read_bytes()
