"""pairwise_cosine (the one epsilon rule), sample_shares, and the DTW distances of GCFL+."""
import math

import pytest
import torch
import torch.nn.functional as F

from pyg_fedgraph.nn import (
    KHopPropagation,
    bipartition,
    dtw_distance,
    pairwise_cosine,
    pairwise_dtw,
    sample_shares,
)
from pyg_fedgraph.nn.functional import COSINE_EPS


def test_pairwise_cosine_by_hand():
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, -2.0]])
    expected = torch.tensor([[1.0, 1 / math.sqrt(2), 0.0],
                             [1 / math.sqrt(2), 1.0, -1 / math.sqrt(2)],
                             [0.0, -1 / math.sqrt(2), 1.0]])
    torch.testing.assert_close(pairwise_cosine(x), expected)
    # Against another set of rows, and against torch's own cosine.
    y = torch.tensor([[3.0, 4.0]])
    torch.testing.assert_close(pairwise_cosine(x, y)[:, 0],
                               F.cosine_similarity(x, y.expand(3, -1), dim=1))


def test_zero_rows_have_similarity_zero_not_nan():
    x = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    c = pairwise_cosine(x)
    assert not torch.isnan(c).any()
    assert c[0].tolist() == [0.0, 0.0] and c[1, 1] == pytest.approx(1.0)
    # Norms below the epsilon count as zero: the row is scaled by 1/eps, not normalized.
    tiny = torch.tensor([[COSINE_EPS / 10, 0.0]], dtype=torch.float64)
    assert float(pairwise_cosine(tiny)[0, 0]) == pytest.approx(1e-2)


def test_pairwise_cosine_checks_shapes():
    with pytest.raises(ValueError, match=r"\(M, D\) and \(K, D\)"):
        pairwise_cosine(torch.ones(3))
    with pytest.raises(ValueError, match=r"\(M, D\) and \(K, D\)"):
        pairwise_cosine(torch.ones(3, 2), torch.ones(3, 4))


def test_sample_shares():
    torch.testing.assert_close(sample_shares(torch.tensor([1, 3])), torch.tensor([0.25, 0.75]))
    torch.testing.assert_close(sample_shares(torch.tensor([0, 0, 0])), torch.full((3,), 1 / 3))
    assert sample_shares(torch.tensor([2, 2]), torch.float64).dtype == torch.float64


def test_khop_propagation_by_hand():
    # Path 0 - 1 - 2 with self loops, row normalization, one hop.
    edge_index = torch.tensor([[0, 1, 1, 2, 0, 1, 2], [1, 0, 2, 1, 0, 1, 2]])
    weight = torch.ones(edge_index.size(1))
    x = torch.tensor([[3.0], [6.0], [9.0]])
    out, receives = KHopPropagation(1, "row")(x, edge_index, weight)
    torch.testing.assert_close(out, torch.tensor([[4.5], [6.0], [7.5]]))
    assert receives.all()
    # Two hops equal the one-hop operator applied twice.
    two, _ = KHopPropagation(2, "row")(x, edge_index, weight)
    torch.testing.assert_close(two, KHopPropagation(1, "row")(out, edge_index, weight)[0])
    # Only client 0 has a model to send: 1 receives its model, 2 receives nothing.
    sources = torch.tensor([True, False, False])
    out, receives = KHopPropagation(1, "row")(x, edge_index, weight, sources)
    assert receives.tolist() == [True, True, False]
    torch.testing.assert_close(out, torch.tensor([[3.0], [3.0], [0.0]]))
    # Nobody sends: zeros, nobody receives.
    out, receives = KHopPropagation(1)(x, edge_index, weight, torch.zeros(3, dtype=torch.bool))
    assert not receives.any() and not out.any()
    with pytest.raises(ValueError, match="num_hops must be a non-negative int"):
        KHopPropagation(-1)
    with pytest.raises(ValueError, match="normalization must be one of"):
        KHopPropagation(1, "left")


def test_bipartition_is_exported_from_nn():
    sim = pairwise_cosine(torch.tensor([[1.0, 0.0], [1.0, 0.1], [-1.0, 0.0], [-1.0, -0.1]]))
    assert bipartition(sim).tolist() == [False, False, True, True]


# ------------------------------------------------------------------ dynamic time warping
def test_dtw_by_hand():
    # a = 0 1 2, b = 0 2: squared costs [[0, 4], [1, 1], [4, 0]]; accumulated
    # A = [[0, 4], [1, 1], [5, 1]] (A22 = 1 + min(0, 4, 1), A32 = 0 + min(1, 1, 5)): DTW = 1.
    a, b = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 2.0])
    assert float(dtw_distance(a, b)) == 1.0
    assert float(dtw_distance(b, a)) == 1.0
    # Warping absorbs repeated values: 0 0 1 against 0 1 1 costs nothing on the path
    # (1,1) (2,1) (3,2) (3,3); a band of 0 forces the diagonal, (0-1)^2 at step 2.
    a, b = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.0, 1.0, 1.0])
    assert float(dtw_distance(a, b)) == 0.0
    assert float(dtw_distance(a, b, window=0)) == 1.0
    # Squared differences summed, then the root: two steps of 3 and 4 give 5.
    assert float(dtw_distance(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 0.0]), window=0)) == 5.0


def brute_force_dtw(a, b, window=None):
    r"""Every warping path enumerated; the smallest sum of squared costs."""
    r, c = len(a), len(b)

    def inside(i, j):
        shift = j - i
        return window is None or (-(window + max(0, r - c)) <= shift <= window + max(0, c - r))

    def best(i, j):
        if not inside(i, j):
            return math.inf
        cost = (a[i] - b[j]) ** 2
        if i == 0 and j == 0:
            return cost
        steps = [(i - 1, j - 1), (i - 1, j), (i, j - 1)]
        return cost + min((best(p, q) for p, q in steps if p >= 0 and q >= 0), default=math.inf)
    return math.sqrt(best(r - 1, c - 1))


@pytest.mark.parametrize("seed", range(12))
def test_dtw_equals_the_brute_force_over_all_warping_paths(seed):
    g = torch.Generator().manual_seed(seed)
    r, c = (int(v) for v in torch.randint(1, 6, (2,), generator=g))
    a = torch.randn(r, generator=g, dtype=torch.float64)
    b = torch.randn(c, generator=g, dtype=torch.float64)
    for window in (None, 0, 1, 2):
        expected = brute_force_dtw(a.tolist(), b.tolist(), window)
        assert float(dtw_distance(a, b, window)) == pytest.approx(expected, rel=1e-12)


def test_pairwise_dtw_is_every_pair():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 6, generator=g, dtype=torch.float64)
    d = pairwise_dtw(x)
    assert d.shape == (5, 5) and torch.equal(d, d.t()) and d.diagonal().tolist() == [0.0] * 5
    for p in range(5):
        for q in range(5):
            if p != q:
                assert float(d[p, q]) == pytest.approx(float(dtw_distance(x[p], x[q])), rel=1e-12)
    torch.testing.assert_close(pairwise_dtw(x, window=1)[1, 3], dtw_distance(x[1], x[3], 1))
    # Repeating every value of a sequence leaves it at distance 0 from the original.
    assert float(dtw_distance(x[0], x[0].repeat_interleave(2))) == 0.0
    assert pairwise_dtw(x[:1]).tolist() == [[0.0]]


def test_dtw_agrees_with_dtaidistance():
    dtw = pytest.importorskip("dtaidistance.dtw", reason="dtaidistance (GCFL+'s library) absent")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 10, generator=g, dtype=torch.float64)
    torch.testing.assert_close(pairwise_dtw(x), torch.from_numpy(dtw.distance_matrix(x.numpy())))
    # dtaidistance's window w + 1 is the band |i - j| <= w here.
    assert float(dtw_distance(x[0], x[1, :7], window=2)) == pytest.approx(
        dtw.distance(x[0].numpy(), x[1, :7].numpy(), window=3), rel=1e-12)


def test_dtw_checks_its_input():
    with pytest.raises(ValueError, match="two non-empty 1-D sequences"):
        dtw_distance(torch.ones(2, 3), torch.ones(3))
    with pytest.raises(ValueError, match="two non-empty 1-D sequences"):
        dtw_distance(torch.ones(0), torch.ones(3))
    with pytest.raises(ValueError, match=r"\(N, T\) sequences"):
        pairwise_dtw(torch.ones(3))
    with pytest.raises(ValueError, match="window must be a non-negative"):
        pairwise_dtw(torch.ones(3, 2), window=-1)
