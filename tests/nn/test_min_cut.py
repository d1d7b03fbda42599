r"""GCFL's split of a cluster: the Stoer-Wagner minimum cut, by hand and
against networkx's."""
import networkx as nx
import pytest
import torch

from pyg_fedgraph.nn import bipartition, min_cut


def test_min_cut_by_hand():
    # Two triangles of weight 3 joined by one edge of weight 1 (nodes 2 and 3): the cut
    # is that edge.
    w = torch.zeros(6, 6)
    for a, b in [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5)]:
        w[a, b] = w[b, a] = 3.0
    w[2, 3] = w[3, 2] = 1.0
    side, value = min_cut(w)
    assert side.tolist() == [False, False, False, True, True, True]
    assert float(value) == 1.0
    # A lonely node is cut off by its lightest total weight: node 2 has 0.5 + 0.25.
    w = torch.tensor([[0.0, 2.0, 0.5], [2.0, 0.0, 0.25], [0.5, 0.25, 0.0]])
    side, value = min_cut(w)
    assert side.tolist() == [False, False, True] and float(value) == 0.75
    # The diagonal is ignored.
    assert min_cut(w + 9 * torch.eye(3))[0].tolist() == [False, False, True]


def test_min_cut_equals_networkx_stoer_wagner():
    gen = torch.Generator().manual_seed(0)
    for trial in range(60):
        m = int(torch.randint(2, 9, (1,), generator=gen))
        w = torch.rand(m, m, generator=gen, dtype=torch.float64)
        w = (w + w.t()) / 2
        if trial % 3 == 0:  # sparse graphs, possibly disconnected (a cut of 0)
            w = w * (w > 0.6)
        side, value = min_cut(w)
        g = nx.Graph()
        g.add_weighted_edges_from((i, j, float(w[i, j])) for i in range(m)
                                  for j in range(i + 1, m))
        expected, _ = nx.stoer_wagner(g)
        assert float(value) == pytest.approx(expected, abs=1e-12)
        assert float(w[side][:, ~side].sum()) == pytest.approx(expected, abs=1e-12)
        assert bool(side.any()) and not bool(side[0])


def test_bipartition_by_min_cut_and_errors():
    sim = torch.tensor([[1.0, 0.9, -0.8, -0.9], [0.9, 1.0, -0.7, -0.8],
                        [-0.8, -0.7, 1.0, 0.95], [-0.9, -0.8, 0.95, 1.0]])
    assert bipartition(sim + 1, "min-cut").tolist() == [False, False, True, True]
    with pytest.raises(ValueError, match="min_cut needs finite non-negative edge weights"):
        bipartition(sim, "min-cut")
    with pytest.raises(ValueError, match="min_cut needs at least 2 nodes, got 1"):
        min_cut(torch.ones(1, 1))
    with pytest.raises(ValueError, match="linkage must be one of"):
        bipartition(sim, "average")
