import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from pyg_fedgraph.engine.history import History, RoundRecord  # noqa: E402
from pyg_fedgraph.viz import (  # noqa: E402
    plot_collaboration_matrix,
    plot_collaboration_network,
    plot_layer_graphs,
)


def _history(offset: float) -> History:
    h = History("accuracy", True)
    for r in range(1, 4):
        vals = {"accuracy": torch.full((3,), 0.1 * r + offset)}
        h.append(RoundRecord(r, 1.0 / r, vals, vals, 0.1, 3))
    return h


def _images(fig):
    return [im for ax in fig.axes for im in ax.get_images()]


def test_learning_curves_one_line_per_run_and_split():
    from pyg_fedgraph.viz import plot_learning_curves
    fig = plot_learning_curves({"a": _history(0.0), "b": _history(0.05)}, title="t")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(ax.get_lines()) == 2
    y = fig.axes[1].get_lines()[1].get_ydata()
    np.testing.assert_allclose(y, [0.15, 0.25, 0.35], atol=1e-6)


def test_collaboration_matrix_orders_clients_by_group():
    w = torch.rand(6, 6)
    groups = torch.tensor([2, 0, 1, 0, 2, 1])
    fig = plot_collaboration_matrix(w, groups)
    images = _images(fig)
    assert len(images) == 1
    order = torch.tensor([1, 3, 2, 5, 0, 4])  # stable sort by group
    np.testing.assert_allclose(np.asarray(images[0].get_array()), w[order][:, order].numpy())
    # without groups the matrix is shown as is
    plain = _images(plot_collaboration_matrix(w))[0]
    np.testing.assert_allclose(np.asarray(plain.get_array()), w.numpy())


def test_collaboration_network_draws_top_k_edges():
    n = 5
    w = torch.full((n, n), 0.01)
    w[0, 1] = w[1, 0] = 0.9
    w[2, 3] = 0.8
    prior = torch.tensor([[0, 4], [4, 0]])
    fig = plot_collaboration_network(w, prior_edge_index=prior, groups=torch.arange(n), top_k=1)
    assert len(fig.axes) == 1
    assert "prior" in fig.axes[0].get_title()
    # only two weights exceed 1/N: edges {0,1} and {2,3} in blue, one prior edge in grey
    collections = fig.axes[0].collections
    segs = sum(len(c.get_segments()) for c in collections if hasattr(c, "get_segments"))
    assert segs == 3


def test_layer_graphs_one_heatmap_per_layer_ordered_by_group():
    torch.manual_seed(0)
    alphas = torch.rand(3, 4, 4)
    alphas = alphas / alphas.sum(-1, keepdim=True)
    groups = torch.tensor([1, 0, 1, 0])
    fig = plot_layer_graphs(alphas, ["conv1", "conv2", "fc"], groups)
    images = _images(fig)
    assert len(images) == 3
    order = torch.tensor([1, 3, 0, 2])
    for layer, im in enumerate(images):
        np.testing.assert_allclose(np.asarray(im.get_array()),
                                   alphas[layer][order][:, order].numpy(), rtol=1e-6)
    titles = [ax.get_title() for ax in fig.axes if ax.get_images()]
    assert titles == ["conv1", "conv2", "fc"]
    # one shared colour scale
    assert {im.get_clim() for im in images} == {(0.0, float(alphas.max()))}


def test_layer_graphs_errors():
    with pytest.raises(ValueError, match=r"\(L, N, N\)"):
        plot_layer_graphs(torch.rand(2, 3, 4))
    with pytest.raises(ValueError, match="layer names"):
        plot_layer_graphs(torch.rand(2, 3, 3), ["only one"])
    with pytest.raises(ValueError, match="groups"):
        plot_layer_graphs(torch.rand(2, 3, 3), groups=torch.arange(4))
