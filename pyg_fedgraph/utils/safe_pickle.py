r"""Reading pickles of plain data without running code.

Data sets of the papers ship as pickles: DCRNN's sensor graphs
(``adj_mx.pkl``), GRDA's DG-60 (``toy_d60_spiral.pkl``), Planetoid's Cora,
CiteSeer and PubMed (``ind.cora.x`` ...). Plain :func:`pickle.load` runs
whatever the file asks for, so a pickle a user hands us goes through
:class:`ArrayUnpickler`, which builds only lists, tuples, dicts, strings,
numbers and numpy arrays and refuses every other global, or through
:class:`SparseArrayUnpickler`, which also builds scipy CSR matrices (from
arrays it checks, never through scipy's own unpickling) and
``defaultdict(list)``.
"""
from __future__ import annotations

import collections
import importlib
import io
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pyg_fedgraph.utils.errors import one_line

__all__ = ["ArrayUnpickler", "SparseArrayUnpickler", "RefusedPickle", "load_array_pickle",
           "loads_array_pickle", "load_sparse_pickle", "loads_sparse_pickle", "csr_from_state",
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

    #: What a file read by this class may hold, for messages.
    _HOLDS = "lists, dicts, strings and numpy arrays"

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
                f"{module}.{name}, but {self.what} may only hold {self._HOLDS}; the file "
                f"is corrupted or malicious (do not open it with plain pickle)")
        return make()

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle(f"refusing to unpickle {self.source}: persistent ids are not "
                            f"allowed")


def loads_array_pickle(raw: bytes, source: str, what: str = "a data pickle",
                       expected: str = "") -> Any:
    r"""The object pickled in ``raw`` (the bytes of file ``source``), read
    with :class:`ArrayUnpickler`; errors as :func:`load_array_pickle`."""
    return _load(ArrayUnpickler(io.BytesIO(raw), source, what), source, what, expected)


def _load(unpickler: ArrayUnpickler, source: str, what: str, expected: str) -> Any:
    try:
        return unpickler.load()
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


class _CSRState:
    r"""Stands in for ``scipy.sparse.csr_matrix`` while a pickle is read: the
    pickle creates it empty (``NEWOBJ``) and hands it the matrix's attribute
    dict (``BUILD``), which is kept as data; :class:`SparseArrayUnpickler`
    then builds the matrix from the arrays of that dict, after checking them."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]  # (dict, slots) form of BUILD's argument
        if not isinstance(state, dict):
            raise ValueError(f"a pickled csr_matrix carries a {type(state).__name__} "
                             f"as its state, not a dict")
        self.state = state


def _defaultdict(factory: Any = None) -> collections.defaultdict:
    # The only default factory a data file needs; ``defaultdict(x)`` calls
    # nothing at load time, but no other factory is ever handed out.
    if factory is not list:
        raise ValueError(f"a pickled defaultdict may only have list as its default "
                         f"factory, not {type(factory).__name__}")
    return collections.defaultdict(list)


def _check_array(value: Any, key: str, kinds: str) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.ndim != 1 or value.dtype.kind not in kinds:
        got = (f"a {value.ndim}-D {value.dtype} array" if isinstance(value, np.ndarray)
               else f"a {type(value).__name__}")
        raise ValueError(f"its {key!r} is {got}, not a 1-D numeric array")
    return value


def csr_from_state(state: dict[str, Any]) -> Any:
    r"""A :class:`scipy.sparse.csr_matrix` built from the attribute dict of a
    pickled one (``data``, ``indices``, ``indptr`` and ``_shape``; other
    keys, such as scipy's ``maxprint`` and sorted-indices flags, are ignored)
    after checking that the arrays describe a valid matrix.

    Raises:
        ValueError: saying what is wrong with the arrays.
    """
    import scipy.sparse as sp

    missing = [k for k in ("data", "indices", "indptr") if k not in state]
    shape = state.get("_shape", state.get("shape"))
    if missing or shape is None:
        raise ValueError(f"a pickled csr_matrix lacks {', '.join(missing or ['_shape'])}")
    if state.get("format", "csr") != "csr":
        raise ValueError(f"a pickled csr_matrix says its format is {state['format']!r}")
    if (not isinstance(shape, tuple) or len(shape) != 2
            or not all(isinstance(n, int) and n >= 0 for n in shape)):
        raise ValueError(f"a pickled csr_matrix has shape {shape!r}, not two "
                         f"non-negative ints")
    rows, cols = shape
    data = _check_array(state["data"], "data", "biuf")
    indices = _check_array(state["indices"], "indices", "iu")
    indptr = _check_array(state["indptr"], "indptr", "iu")
    if len(indptr) != rows + 1 or len(indices) != len(data):
        raise ValueError(f"a pickled {rows} x {cols} csr_matrix has {len(indptr)} row "
                         f"pointers (expected {rows + 1}), {len(indices)} column indices "
                         f"and {len(data)} values")
    if rows and (indptr[0] != 0 or indptr[-1] != len(data) or np.any(np.diff(indptr) < 0)):
        raise ValueError(f"a pickled {rows} x {cols} csr_matrix has row pointers that do "
                         f"not rise from 0 to its {len(data)} values")
    if len(indices) and (indices.min() < 0 or indices.max() >= cols):
        raise ValueError(f"a pickled {rows} x {cols} csr_matrix has column indices "
                         f"outside 0..{cols - 1}")
    return sp.csr_matrix((data, indices, indptr), shape=(rows, cols))


class SparseArrayUnpickler(ArrayUnpickler):
    r"""An :class:`ArrayUnpickler` that also builds the scipy CSR matrices
    and adjacency dicts of Planetoid's files (Yang et al., 2016): it resolves
    ``scipy.sparse.csr.csr_matrix`` (and the newer module paths of the same
    class) to a stand-in that keeps the pickled attribute dict as data, and
    ``collections.defaultdict`` / ``__builtin__.list`` to
    ``defaultdict(list)``. Use it through :func:`loads_sparse_pickle`, which
    turns the stand-ins into checked matrices (:func:`csr_from_state`)."""

    _HOLDS = "lists, dicts, defaultdicts of lists, strings, numpy arrays and CSR matrices"
    _ALLOWED = {
        **ArrayUnpickler._ALLOWED,
        **{(module, "csr_matrix"): (lambda: _CSRState)
           for module in ("scipy.sparse.csr", "scipy.sparse._csr", "scipy.sparse")},
        ("__builtin__", "list"): lambda: list,  # Python 2's name
        ("builtins", "list"): lambda: list,
        ("collections", "defaultdict"): lambda: _defaultdict,
    }

    def __init__(self, file: io.BufferedIOBase, source: str, what: str = "a data pickle"
                 ) -> None:
        super().__init__(file, source, what)
        self.holds_matrices = False

    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class(module, name)
        self.holds_matrices |= found is _CSRState
        return found


def _build_matrices(obj: Any, depth: int = 0) -> Any:
    r"""``obj`` with every stand-in replaced by its checked matrix, in place
    in lists and dicts (fresh from the pickle, nobody else holds them)."""
    if isinstance(obj, _CSRState):  # one the pickle never gave a state has none
        return csr_from_state(getattr(obj, "state", {}))
    if depth >= 4:
        return obj
    if isinstance(obj, list):
        for i, value in enumerate(obj):
            obj[i] = _build_matrices(value, depth + 1)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            obj[key] = _build_matrices(value, depth + 1)
    elif isinstance(obj, tuple):
        return tuple(_build_matrices(v, depth + 1) for v in obj)
    return obj


def loads_sparse_pickle(raw: bytes, source: str, what: str = "a data pickle",
                        expected: str = "") -> Any:
    r"""The object pickled in ``raw`` (the bytes of file ``source``), read
    with :class:`SparseArrayUnpickler`, its CSR matrices built from checked
    arrays; errors as :func:`load_sparse_pickle`."""
    unpickler = SparseArrayUnpickler(io.BytesIO(raw), source, what)
    obj = _load(unpickler, source, what, expected)
    if not unpickler.holds_matrices:
        return obj
    try:
        return _build_matrices(obj)
    except ValueError as err:
        raise ValueError(f"{source} is not {what}: {one_line(err)}") from None


def load_sparse_pickle(path: str | Path, what: str = "a data pickle", expected: str = ""
                       ) -> Any:
    r"""The object pickled in ``path``, read with
    :class:`SparseArrayUnpickler`: as :func:`load_array_pickle`, and scipy
    CSR matrices (rebuilt from checked arrays) and ``defaultdict(list)``.

    Raises:
        ValueError: if the file is missing, is not a pickle, asks for
            anything outside the allow-list (:class:`RefusedPickle`), or holds
            a matrix whose arrays are inconsistent.
    """
    return loads_sparse_pickle(read_pickle_file(path, what), str(path), what, expected)
