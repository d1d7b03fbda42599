r"""Small Planetoid data sets written in exactly the published format: Python 2
protocol-2 pickles (``GLOBAL`` opcodes with Python 2 module names, byte
strings as ``BINSTRING``), a scipy CSR matrix pickled as ``NEWOBJ`` + ``BUILD``
of its attribute dict as scipy 0.x wrote it, numpy arrays through
``numpy.core.multiarray._reconstruct``, ``defaultdict(list)`` adjacency lists,
and the text test index."""
import collections
import io
import os
import pickle
import pickletools
import struct
from pathlib import Path

import numpy as np
import scipy.sparse as sp

SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")

# ../shared/data next to the project root (one level further up from a git worktree).
SHARED = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[2].parents
               if (p / "shared" / "data").is_dir()), Path("../shared/data"))
PLANETOID = SHARED / "planetoid"


class _CSRMatrix:  # written as scipy.sparse.csr.csr_matrix
    pass


_NAMES = {
    _CSRMatrix: ("scipy.sparse.csr", "csr_matrix"),
    np.ndarray: ("numpy", "ndarray"),
    np.dtype: ("numpy", "dtype"),
    collections.defaultdict: ("collections", "defaultdict"),
    list: ("__builtin__", "list"),
}


class Py2Pickler(pickle._Pickler):
    r"""The pure-Python pickler, writing what Python 2's cPickle wrote."""

    dispatch = pickle._Pickler.dispatch.copy()

    def __init__(self, file):
        super().__init__(file, protocol=2)

    def save_py2_string(self, obj):
        data = obj.encode("latin1") if isinstance(obj, str) else obj
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[str] = save_py2_string
    dispatch[bytes] = save_py2_string

    def save_global(self, obj, name=None):
        if getattr(obj, "__name__", None) == "_reconstruct":
            module, name = "numpy.core.multiarray", "_reconstruct"
        else:
            module, name = _NAMES[obj]
        self.write(pickle.GLOBAL + f"{module}\n{name}\n".encode())
        self.memoize(obj)



def py2_csr(matrix) -> _CSRMatrix:
    r"""An object pickled as Python 2's scipy pickled a CSR matrix: its class
    ``scipy.sparse.csr.csr_matrix``, its attribute dict in that order."""
    matrix = sp.csr_matrix(matrix)
    out = _CSRMatrix()
    out.__dict__.update({
        "format": "csr", "_shape": tuple(int(n) for n in matrix.shape),
        "indptr": matrix.indptr.astype(np.int32), "_cs_matrix__has_sorted_indices": True,
        "indices": matrix.indices.astype(np.int32), "maxprint": 50, "data": matrix.data})
    return out


def py2_dumps(obj) -> bytes:
    out = io.BytesIO()
    Py2Pickler(out).dump(py2_csr(obj) if sp.issparse(obj) else obj)
    return out.getvalue()


def globals_of(data: bytes) -> set[str]:
    return {str(arg) for op, arg, _ in pickletools.genops(data)
            if op.name in ("GLOBAL", "STACK_GLOBAL")}


def make_planetoid(num_classes=3, num_features=7, num_train=6, num_val_extra=20,
                   num_test=30, gaps=(), seed=0, dtype=np.float32):
    r"""The eight objects of a small Planetoid data set: ``allx`` holds the
    ``num_train`` labelled nodes, the 500 validation nodes and
    ``num_val_extra`` more; the test ids follow, in shuffled order, skipping
    the ids in ``gaps`` (isolated test nodes without a row, as CiteSeer's).
    The graph lists each undirected edge in both directions, plus a self loop
    and a duplicate."""
    rng = np.random.default_rng(seed)
    num_all = num_train + 500 + num_val_extra
    test_ids = [i for i in range(num_all, num_all + num_test + len(gaps))
                if i - num_all not in gaps]
    num_nodes = num_all + num_test + len(gaps)

    def features(rows):
        dense = rng.random((rows, num_features)) * (rng.random((rows, num_features)) < 0.3)
        return sp.csr_matrix(dense.astype(dtype))

    def one_hot(rows):
        return np.eye(num_classes, dtype=np.int32)[rng.integers(0, num_classes, rows)]

    allx, ally = features(num_all), one_hot(num_all)
    shuffled = list(rng.permutation(test_ids))
    gap_ids = {num_all + g for g in gaps}
    edges = set()
    while len(edges) < 2 * num_nodes:
        u, v = sorted(int(i) for i in rng.integers(0, num_nodes, 2))
        if u != v and u not in gap_ids and v not in gap_ids:
            edges.add((u, v))
    graph = collections.defaultdict(list)
    for u, v in sorted(edges):
        graph[u].append(v)
        graph[v].append(u)
    graph[0].append(0)  # a self loop
    graph[0].append(graph[0][0])  # a duplicate
    for g in sorted(gap_ids):  # isolated test ids keep empty lists
        graph[g] = []
    return {
        "x": sp.csr_matrix(allx[:num_train]), "y": ally[:num_train],
        "allx": allx, "ally": ally,
        "tx": features(num_test), "ty": one_hot(num_test),
        "graph": graph, "test.index": shuffled,
    }


def write_planetoid(folder, name, objects):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in SUFFIXES:
        path = folder / f"ind.{name}.{suffix}"
        if suffix == "test.index":
            path.write_text("".join(f"{i}\n" for i in objects[suffix]))
        else:
            path.write_bytes(py2_dumps(objects[suffix]))
    return folder


class Exploit:
    r"""Unpickled with plain pickle, creates ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)
