import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

import pyg_fedgraph.viz as viz
from pyg_fedgraph.engine.history import History, RoundRecord
from pyg_fedgraph.viz import (
    block_weights,
    client_order,
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


def _colorbar_label(fig):
    # The colour bar is the axes without images next to the heatmap.
    labels = [ax.get_ylabel() for ax in fig.axes if not ax.get_images()]
    return " ".join(labels)


def _legend_labels(fig):
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def _hidden_blocks(num_blocks: int, size: int, seed: int = 0):
    r"""A row-stochastic matrix whose clients form ``num_blocks`` blocks of
    ``size`` (weight 0.9 spread inside the block, 0.1 outside), in interleaved
    index order: client i belongs to block i % num_blocks."""
    n = num_blocks * size
    block = torch.arange(n) % num_blocks
    same = (block.unsqueeze(0) == block.unsqueeze(1)).double()
    gen = torch.Generator().manual_seed(seed)
    noise = 1.0 + 0.1 * torch.rand(n, n, generator=gen, dtype=torch.double)
    w = noise * (0.9 * same / size + 0.1 * (1 - same) / (n - size))
    return w / w.sum(dim=1, keepdim=True), block


def test_learning_curves_one_line_per_run_and_split():
    from pyg_fedgraph.viz import plot_learning_curves
    fig = plot_learning_curves({"a": _history(0.0), "b": _history(0.05)}, title="t")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(ax.get_lines()) == 2
    y = fig.axes[1].get_lines()[1].get_ydata()
    np.testing.assert_allclose(y, [0.15, 0.25, 0.35], atol=1e-6)
    # rounds are whole numbers on the x axis
    ticks = fig.axes[0].get_xticks()
    np.testing.assert_array_equal(ticks, np.round(ticks))


def test_learning_curves_mark_the_rounds_of_a_line_with_gaps():
    from pyg_fedgraph.viz import plot_learning_curves
    h = History("accuracy", True)
    nan = torch.full((3,), float("nan"))
    for r in range(1, 61):  # 60 rounds: a full line has no markers
        vals = {"accuracy": torch.full((3,), 0.01 * r)}
        h.append(RoundRecord(r, 1.0, vals, vals if r in (45, 60) else {"accuracy": nan},
                             0.1, 3))
    fig = plot_learning_curves({"a": h})
    val_line, test_line = fig.axes[0].get_lines()[0], fig.axes[1].get_lines()[0]
    assert val_line.get_marker() == "None"
    assert test_line.get_marker() == "."
    assert np.isfinite(test_line.get_ydata()).sum() == 2


def test_collaboration_matrix_orders_clients_by_group():
    w = torch.rand(6, 6)
    groups = torch.tensor([2, 0, 1, 0, 2, 1])
    fig = plot_collaboration_matrix(w, groups, title="pfedgraph: collaboration matrix",
                                    after_round=7)
    images = _images(fig)
    assert len(images) == 1
    order = torch.tensor([1, 3, 2, 5, 0, 4])  # stable sort by group
    np.testing.assert_allclose(np.asarray(images[0].get_array()), w[order][:, order].numpy())
    ax = images[0].axes
    assert ax.get_title() == "pfedgraph: collaboration matrix after round 7"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "3", "2", "5", "0", "4"]
    # one wording: row i = weights client i gives, column j = the model used
    assert "row i = weights client i gives" in ax.get_ylabel()
    assert "whose model is used" in ax.get_xlabel()
    assert "client i gives client j" in _colorbar_label(fig)
    # white lines between the three groups, group names on top
    assert len(ax.get_lines()) == 4
    assert "ordered by group" in " ".join(t.get_text() for t in fig.texts)


def test_collaboration_matrix_without_groups_orders_by_clustering():
    w, block = _hidden_blocks(2, 4)
    fig = plot_collaboration_matrix(w.float())
    co = client_order(w)
    assert co.kind == "cluster"
    # the clustering puts each hidden block in one run of the order
    first = set(co.order[:4].tolist())
    assert first in ({0, 2, 4, 6}, {1, 3, 5, 7})
    image = np.asarray(_images(fig)[0].get_array())
    np.testing.assert_allclose(image, w.float()[co.order][:, co.order].numpy())
    assert "no groups known" in " ".join(t.get_text() for t in fig.texts)


def test_collaboration_matrix_thins_tick_labels_at_large_n():
    w = torch.rand(120, 120)
    ax = _images(plot_collaboration_matrix(w, torch.arange(120) // 30))[0].axes
    assert 10 <= len(ax.get_xticks()) <= 30


def test_block_weights_by_hand():
    w = torch.arange(16, dtype=torch.float).view(4, 4)
    blocks = torch.tensor([1, 0, 1, 0])
    sums, counts = block_weights(w, blocks)
    assert counts.tolist() == [2, 2]
    # S_00 = W[1,1] + W[1,3] + W[3,1] + W[3,3]; S_01 = W[1,0] + W[1,2] + W[3,0] + W[3,2]
    expected = torch.tensor([[5 + 7 + 13 + 15, 4 + 6 + 12 + 14],
                             [1 + 3 + 9 + 11, 0 + 2 + 8 + 10]], dtype=torch.double)
    torch.testing.assert_close(sums, expected)


def test_large_matrix_is_drawn_as_block_means_of_groups():
    torch.manual_seed(0)
    w = torch.rand(12, 12)
    groups = torch.tensor([3, 1, 2, 0] * 3)  # four groups of three clients
    fig = plot_collaboration_matrix(w, groups, max_clients=5)
    image = np.asarray(_images(fig)[0].get_array())
    assert image.shape == (4, 4)
    members = [torch.nonzero(groups == g).flatten() for g in range(4)]
    expected = torch.tensor([[float(w[a][:, b].mean()) for b in members] for a in members])
    np.testing.assert_allclose(image, expected.numpy(), rtol=1e-5)
    ax = _images(fig)[0].axes
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"group {g}" for g in range(4)]
    assert "mean weight" in _colorbar_label(fig)
    assert "12 clients shown as block means over 4 groups" in fig.texts[0].get_text()


def test_large_matrix_without_groups_is_drawn_as_block_means_of_clusters(monkeypatch):
    w, block = _hidden_blocks(4, 10)
    # The k-means path (above 2,000 clients by default) on a small matrix.
    monkeypatch.setattr(viz, "_MAX_HIERARCHICAL", 10)
    co = client_order(w, max_blocks=4)
    assert co.num_blocks == 4 and co.kind == "cluster"
    # each cluster is one hidden block, and the order keeps clusters contiguous
    pairs = torch.stack([co.blocks, block]).unique(dim=1)
    assert pairs.size(1) == 4
    assert bool((co.blocks[co.order].diff() >= 0).all())
    fig = plot_collaboration_matrix(w, max_clients=20, order=co)
    image = np.asarray(_images(fig)[0].get_array())
    assert image.shape == (4, 4)
    # a block of 10 gives 0.9 in total to itself: 0.09 on average per client pair
    np.testing.assert_allclose(np.diag(image), 0.09, rtol=0.1)


def test_many_groups_are_merged_into_runs():
    co = client_order(torch.rand(30, 30), torch.arange(30) // 2, max_blocks=5)
    assert co.num_blocks == 5 and co.kind == "group run"
    assert co.names[0] == "groups 0-2"
    assert bool((co.blocks[co.order].diff() >= 0).all())


def test_collaboration_network_draws_top_k_edges_with_legend():
    n = 5
    w = torch.full((n, n), 0.01)
    w[0, 1] = w[1, 0] = 0.9
    w[2, 3] = 0.8
    prior = torch.tensor([[0, 4], [4, 0]])
    fig = plot_collaboration_network(w, prior_edge_index=prior, groups=torch.tensor(
        [0, 0, 1, 1, 2]), top_k=1, title="g", after_round=3)
    assert len(fig.axes) == 1
    assert fig.axes[0].get_title() == "g after round 3"
    # only two weights exceed 1/N: edges {0,1} and {2,3} in blue, one prior edge in grey
    collections = fig.axes[0].collections
    segs = sum(len(c.get_segments()) for c in collections if hasattr(c, "get_segments"))
    assert segs == 3
    labels = _legend_labels(fig)
    assert {"group 0", "group 1", "group 2"} <= set(labels)
    assert any("prior graph" in t for t in labels)
    assert any("top-1 weights above 1/N" in t and "width by weight" in t for t in labels)
    # the prior graph is drawn beneath the learned edges
    lines = [c for c in collections if hasattr(c, "get_segments")]
    assert lines[0].get_zorder() < lines[1].get_zorder()


def test_collaboration_network_fills_the_canvas():
    w, _ = _hidden_blocks(2, 5)
    fig = plot_collaboration_network(w)
    nodes = [c for c in fig.axes[0].collections if not hasattr(c, "get_segments")][0]
    xy = nodes.get_offsets()
    np.testing.assert_allclose(xy.min(0), [-1, -1])
    np.testing.assert_allclose(xy.max(0), [1, 1])


def test_large_network_is_drawn_as_blocks():
    w, block = _hidden_blocks(3, 10)
    prior = torch.tensor([[0, 3, 1], [3, 0, 2]])
    fig = plot_collaboration_network(w, prior_edge_index=prior, groups=block, max_nodes=10)
    ax = fig.axes[0]
    nodes = [c for c in ax.collections if not hasattr(c, "get_segments")][0]
    assert len(nodes.get_offsets()) == 3
    assert "30 clients shown as 3 groups" in ax.get_title()
    # one prior segment: only blocks 1 and 2 are linked (0 - 3 is inside block 0)
    prior_lines = [c for c in ax.collections if hasattr(c, "get_segments")][0]
    assert len(prior_lines.get_segments()) == 1
    labels = _legend_labels(fig)
    assert any("block of clients" in t for t in labels)
    assert {"group 0", "group 1", "group 2"} <= set(labels)


def test_network_without_edges_says_so():
    fig = plot_collaboration_network(torch.eye(4))
    assert "no edges" in fig.axes[0].get_title()


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
    assert "client i gives client j" in _colorbar_label(fig)


def test_layer_graphs_errors():
    with pytest.raises(ValueError, match=r"\(L, N, N\)"):
        plot_layer_graphs(torch.rand(2, 3, 4))
    with pytest.raises(ValueError, match="layer names"):
        plot_layer_graphs(torch.rand(2, 3, 3), ["only one"])
    with pytest.raises(ValueError, match="groups"):
        plot_layer_graphs(torch.rand(2, 3, 3), groups=torch.arange(4))


def test_client_order_errors():
    with pytest.raises(ValueError, match=r"square"):
        client_order(torch.rand(3, 4))
    with pytest.raises(ValueError, match="groups has 4 entries"):
        client_order(torch.rand(3, 3), torch.arange(4))


def test_cli_comparison_title_names_dataset_partition_and_strategies(tmp_path, monkeypatch):
    from pyg_fedgraph.cli import main
    titles = []
    original = viz.plot_learning_curves

    def spy(histories, title=None):
        titles.append(title)
        return original(histories, title=title)
    monkeypatch.setattr(viz, "plot_learning_curves", spy)
    code = main(["run", "--dataset", "digits", "--partition", "group", "--clients", "5",
                 "--strategy", "local,fedavg", "--rounds", "1", "--quiet", "--out",
                 str(tmp_path), "--set", "epochs=1"])
    assert code == 0
    assert titles[-1] == "digits, group partition, 5 clients: local vs fedavg"
    assert (tmp_path / "learning_curves.png").is_file()
    assert (tmp_path / "comparison.json").is_file()


def _seeded(values) -> History:
    r"""A history whose mean metric is ``values[r - 1]`` at round ``r``."""
    h = History("accuracy", True)
    for r, v in enumerate(values, start=1):
        vals = {"accuracy": torch.full((2,), float(v))}
        h.append(RoundRecord(r, 0.0, vals, vals, 0.1, 2))
    return h


def test_learning_curves_of_seeds_are_a_mean_with_a_min_max_band_and_an_outer_legend():
    from pyg_fedgraph.viz import plot_learning_curves
    runs = [_seeded([0.2, 0.5, 0.6]), _seeded([0.4, 0.5, 0.9]), _seeded([0.3, 0.8, 0.9])]
    fig = plot_learning_curves({"fedavg": runs, "local": _seeded([0.1, 0.1, 0.1])})
    for ax in fig.axes:
        (mean, single) = ax.get_lines()
        np.testing.assert_allclose(mean.get_ydata(), [0.3, 0.6, 0.8], atol=1e-6)
        np.testing.assert_allclose(single.get_ydata(), [0.1, 0.1, 0.1], atol=1e-6)
        (band,) = ax.collections  # one band: the single run has none
        ys = band.get_paths()[0].vertices[:, 1]
        np.testing.assert_allclose([ys.min(), ys.max()], [0.2, 0.9], atol=1e-6)
        assert ax.get_legend() is None
    labels = _legend_labels(fig)
    assert labels == ["fedavg (mean of 3 runs)", "local",
                      "band: minimum to maximum over the runs"]
    # The legend lies below both panels, over no curve.
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert all(legend.y1 <= ax.get_window_extent().y0 for ax in fig.axes)


def test_learning_curves_of_seeds_keep_the_rounds_all_runs_evaluated():
    from pyg_fedgraph.viz import plot_learning_curves
    short = _seeded([0.2, 0.4])
    fig = plot_learning_curves({"s": [short, _seeded([0.4, 0.6, 0.8])]})
    np.testing.assert_array_equal(fig.axes[0].get_lines()[0].get_xdata(), [1, 2])
    with pytest.raises(ValueError, match="no history given for 'x'"):
        plot_learning_curves({"x": []})


def test_one_round_gets_one_integer_tick():
    from pyg_fedgraph.viz import plot_learning_curves
    fig = plot_learning_curves({"a": _seeded([0.5]), "b": _seeded([0.25])})
    for ax in fig.axes:
        np.testing.assert_array_equal(ax.get_xticks(), [1])
        lo, hi = ax.get_xlim()
        assert lo < 1 < hi


@pytest.mark.parametrize("n,rotation", [(20, 0.0), (207, 90.0)])
def test_matrix_column_labels_turn_when_they_would_overlap(n, rotation):
    # 30 labels of 3 digits (207 METR-LA sensors) overlapped when upright.
    fig = plot_collaboration_matrix(torch.full((n, n), 1.0 / n), groups=torch.zeros(n))
    labels = [t for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert labels and {t.get_rotation() for t in labels} == {rotation}


def _ring(n: int, width: int) -> torch.Tensor:
    r"""Each client gives equal weight to its ``width`` nearest neighbours on a
    ring on each side, and as much to itself."""
    i = torch.arange(n)
    d = (i.unsqueeze(0) - i.unsqueeze(1)).abs()
    d = torch.minimum(d, n - d)
    w = (d <= width).double()
    return w / w.sum(1, keepdim=True)


def test_a_flat_dense_matrix_is_drawn_as_a_few_blocks():
    # 60 clients with 20 equal partners each (as Panacea's normalized prior graph on FL-60):
    # a client's top 3 carry 3 / 20 of what it gives the others.
    fig = plot_collaboration_network(_ring(60, 10), top_k=3)
    ax = fig.axes[0]
    nodes = [c for c in ax.collections if not hasattr(c, "get_segments")][0]
    assert len(nodes.get_offsets()) <= 8  # about sqrt(60) clusters
    assert "60 clients shown as" in ax.get_title()
    assert "top 3 weights carry 15% of what it gives the others" in " ".join(
        ax.get_title().split())
    # Two partners per side: the top 3 carry 3 / 4 of it, clients are drawn one by one.
    fig = plot_collaboration_network(_ring(60, 2), top_k=3)
    nodes = [c for c in fig.axes[0].collections if not hasattr(c, "get_segments")][0]
    assert len(nodes.get_offsets()) == 60
    # Up to 30 clients the picture stays per client, flat or not.
    fig = plot_collaboration_network(_ring(30, 10), top_k=3)
    nodes = [c for c in fig.axes[0].collections if not hasattr(c, "get_segments")][0]
    assert len(nodes.get_offsets()) == 30


def _bar_heights(ax):
    return [round(p.get_height(), 6) for p in ax.patches]


def test_client_accuracy_bars_side_by_side_and_gains_over_the_baseline():
    from pyg_fedgraph.viz import plot_client_accuracy
    acc = {"local": torch.tensor([0.5, 0.8, 0.6]), "fedpub": torch.tensor([0.7, 0.7, 0.9]),
           "pfedgraph": [0.6, 0.9, float("nan")]}
    groups = torch.tensor([1, 0, 1])
    fig = plot_client_accuracy(acc, groups=groups, baseline="local", title="cora")
    top, gains = fig.axes
    # Clients ordered by group (then id): 1, 0, 2; three bars per client.
    assert [t.get_text() for t in gains.get_xticklabels()] == ["1", "0", "2"]
    assert _bar_heights(top)[:3] == [0.8, 0.5, 0.6]           # local
    assert _bar_heights(top)[3:6] == [0.7, 0.7, 0.9]          # fedpub
    # Gains over local: fedpub loses on client 1, gains on 0 and 2; no bar for a NaN.
    assert _bar_heights(gains)[:3] == [-0.1, 0.2, 0.3]
    assert _bar_heights(gains)[3:5] == [0.1, 0.1]
    assert np.isnan(gains.patches[5].get_height())
    assert gains.get_ylabel() == "gain over local"
    assert _legend_labels(fig) == ["local", "fedpub", "pfedgraph"]
    assert [t.get_text() for t in top.texts] == ["group 0", "group 1"]
    assert fig._suptitle.get_text() == "cora"
    assert len(plot_client_accuracy({"a": [0.1, 0.2]}).axes) == 1


def test_client_accuracy_errors():
    from pyg_fedgraph.viz import plot_client_accuracy
    with pytest.raises(ValueError, match="one value per client; got sizes"):
        plot_client_accuracy({"a": [0.1, 0.2], "b": [0.3]})
    with pytest.raises(ValueError, match="baseline 'local' is not one of the strategies a"):
        plot_client_accuracy({"a": [0.1]}, baseline="local")
    with pytest.raises(ValueError, match="needs the values of at least one strategy"):
        plot_client_accuracy({})
