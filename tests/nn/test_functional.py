"""pairwise_cosine (the one epsilon rule) and sample_shares."""
import math

import pytest
import torch
import torch.nn.functional as F

from pyg_fedgraph.nn import KHopPropagation, bipartition, pairwise_cosine, sample_shares
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
