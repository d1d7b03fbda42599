import pytest
import torch

from pyg_fedgraph.nn.aggregation import GraphAggregation, dense_to_edges
from pyg_fedgraph.utils.graph import complete_graph


def test_complete_graph_by_hand():
    # Edge i * N + j goes from j to i.
    assert complete_graph(3).tolist() == [[0, 1, 2, 0, 1, 2, 0, 1, 2],
                                          [0, 0, 0, 1, 1, 1, 2, 2, 2]]
    assert complete_graph(3, self_loops=False).tolist() == [[1, 2, 0, 2, 0, 1],
                                                            [0, 0, 1, 1, 2, 2]]
    assert complete_graph(1).tolist() == [[0], [0]]
    assert complete_graph(1, self_loops=False).shape == (2, 0)
    assert complete_graph(0).shape == (2, 0)
    assert complete_graph(4).dtype == torch.long


def test_complete_graph_aggregates_every_model():
    # Uniform weights over the complete graph give every client the mean model.
    x = torch.arange(12.0).view(4, 3)
    ei = complete_graph(4)
    out = GraphAggregation()(x, ei, torch.full((16,), 0.25))
    assert torch.allclose(out, x.mean(0).expand(4, 3))
    # Without self loops: the mean of the others.
    ei = complete_graph(4, self_loops=False)
    out = GraphAggregation()(x, ei, torch.full((12,), 1 / 3))
    assert torch.allclose(out, (x.sum(0) - x) / 3)


def test_dense_to_edges_keeps_zeros_in_complete_graph_order():
    w = torch.tensor([[0.5, 0.0], [0.2, 0.8]])
    ei, ew = dense_to_edges(w, keep_zeros=True)
    assert torch.equal(ei, complete_graph(2))
    assert ew.tolist() == pytest.approx([0.5, 0.0, 0.2, 0.8])
    ei, ew = dense_to_edges(w)
    assert ei.tolist() == [[0, 0, 1], [0, 1, 1]]
    assert ew.tolist() == pytest.approx([0.5, 0.2, 0.8])


@pytest.mark.parametrize("bad", [-1, 2.0, True, "3"])
def test_complete_graph_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="non-negative int"):
        complete_graph(bad)
