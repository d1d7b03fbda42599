"""The allow-list unpickler for scipy CSR matrices and defaultdicts of lists."""
import collections
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from pyg_fedgraph.utils.safe_pickle import (
    RefusedPickle,
    csr_from_state,
    loads_array_pickle,
    loads_sparse_pickle,
)


def _matrix():
    return sp.csr_matrix(np.array([[0, 1.5, 0], [2, 0, 0], [0, 0, 0]], dtype=np.float32))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_csr_matrices_of_this_scipy_read_back_equal(protocol):
    matrix = _matrix()
    obj = {"a": [matrix, np.arange(3)], "b": (matrix,)}
    out = loads_sparse_pickle(pickle.dumps(obj, protocol=protocol), "m.pkl")
    for got in (out["a"][0], out["b"][0]):
        assert isinstance(got, sp.csr_matrix) and got.shape == (3, 3)
        assert (got != matrix).nnz == 0 and got.dtype == np.float32
    assert np.array_equal(out["a"][1], np.arange(3))


def test_defaultdicts_of_lists_come_back_as_such():
    graph = collections.defaultdict(list, {0: [1, 2], 1: [0]})
    out = loads_sparse_pickle(pickle.dumps(graph, protocol=2), "g.pkl")
    assert isinstance(out, collections.defaultdict) and out.default_factory is list
    assert out == graph


def test_other_classes_and_factories_are_refused_in_one_line():
    coo = pickle.dumps(sp.coo_matrix(_matrix()), protocol=2)
    with pytest.raises(RefusedPickle) as err:
        loads_sparse_pickle(coo, "m.pkl", "a feature pickle")
    message = str(err.value)
    assert "\n" not in message and message.startswith("refusing to unpickle m.pkl")
    assert "coo_matrix" in message and "CSR matrices" in message
    factory = pickle.dumps(collections.defaultdict(np.dtype), protocol=2)  # allowed global
    with pytest.raises(ValueError, match="m.pkl is not .*only have list as its default factory"):
        loads_sparse_pickle(factory, "m.pkl")
    # The plain array unpickler still builds no matrix.
    with pytest.raises(RefusedPickle, match="csr_matrix"):
        loads_array_pickle(pickle.dumps(_matrix(), protocol=2), "m.pkl")


def test_csr_states_are_checked():
    matrix = _matrix()
    state = {"_shape": (3, 3), "indptr": matrix.indptr, "indices": matrix.indices,
             "data": matrix.data}
    assert (csr_from_state(state) != matrix).nnz == 0
    for change, problem in [({"indptr": matrix.indptr[:-1]}, "3 row pointers (expected 4)"),
                            ({"indices": matrix.indices + 3}, "column indices outside 0..2"),
                            ({"data": matrix.data.astype(object)}, "'data' is a 1-D object"),
                            ({"_shape": (3, -1)}, "shape (3, -1)"),
                            ({"format": "csc"}, "format is 'csc'")]:
        with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
            csr_from_state({**state, **change})
    with pytest.raises(ValueError, match="lacks indptr"):
        csr_from_state({k: v for k, v in state.items() if k != "indptr"})
