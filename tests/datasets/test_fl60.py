import math

import pytest
import torch

from pyg_fedgraph.datasets.fl60 import fl60


def gather(ds, split, client):
    sp = ds.splits[split]
    n = int(sp.counts[client])
    return sp.x[client, :n], sp.y[client, :n]


def all_samples(ds, client):
    xs, ys = zip(*(gather(ds, s, client) for s in ("train", "val", "test")), strict=True)
    return torch.cat(xs), torch.cat(ys)


def test_fl60_shapes_and_splits():
    ds = fl60()
    assert ds.name == "fl60" and ds.num_clients == 60 and ds.num_classes == 2
    assert ds.task == "classification" and ds.input_shape == (2,)
    assert ds.splits["train"].x.dtype == torch.float32
    assert ds.num_samples("train").tolist() == [64] * 60
    assert ds.num_samples("val").tolist() == [16] * 60
    assert ds.num_samples("test").tolist() == [20] * 60
    assert ds.info["synthetic"] is True and "Panacea" in ds.info["source"]
    for t in (0, 31, 59):
        _, y = all_samples(ds, t)
        assert y.numel() == 100 and int(y.sum()) == 50  # balanced labels


def test_fl60_graph_symmetric_no_self_loops():
    ds = fl60(seed=1)
    ei = ds.edge_index
    assert ei.dim() == 2 and ei.size(0) == 2
    assert bool((ei[0] != ei[1]).all())
    adj = torch.zeros(60, 60)
    adj[ei[0], ei[1]] = 1
    assert int(adj.sum()) == ei.size(1)  # no duplicate edges
    assert torch.equal(adj, adj.t())
    assert torch.equal(ds.edge_weight, torch.ones(ei.size(1)))

    # A_uv ~ Bern(0.5 a_u a_v + 0.5 b_u b_v + 0.5): the edge count matches the
    # expected count, and linked clients have closer angles than unlinked ones.
    emb = ds.info["client_embedding"].double()
    prob = 0.5 * emb @ emb.t() + 0.5
    iu = torch.triu_indices(60, 60, offset=1)
    p = prob[iu[0], iu[1]]
    linked = adj[iu[0], iu[1]].bool()
    assert abs(int(linked.sum()) - float(p.sum())) < 5 * math.sqrt(float((p * (1 - p)).sum()))
    cos = (emb @ emb.t())[iu[0], iu[1]]
    assert float(cos[linked].mean()) > float(cos[~linked].mean()) + 0.3


def test_fl60_reproducible():
    a, b, c = fl60(num_clients=6, seed=3), fl60(num_clients=6, seed=3), fl60(num_clients=6, seed=4)
    for s in ("train", "val", "test"):
        assert torch.equal(a.splits[s].x, b.splits[s].x)
        assert torch.equal(a.splits[s].y, b.splits[s].y)
    assert torch.equal(a.edge_index, b.edge_index)
    assert not torch.equal(a.splits["train"].x, c.splits["train"].x)


def test_fl60_class_means_follow_recipe():
    ds = fl60(num_clients=5, samples_per_client=4000, seed=2, recipe="paper")
    emb, omega = ds.info["client_embedding"], ds.info["client_angle"]
    assert torch.allclose(emb.norm(dim=1), torch.ones(5), atol=1e-6)
    assert torch.allclose(omega, torch.atan2(emb[:, 1], emb[:, 0]))
    for t in range(5):
        x, y = all_samples(ds, t)
        mu = omega[t] / math.pi * emb[t]
        assert torch.allclose(x[y == 1].mean(0), mu, atol=0.1)
        assert torch.allclose(x[y == 0].mean(0), -mu, atol=0.1)
        assert torch.allclose(x[y == 1].std(0), torch.ones(2), atol=0.1)


def test_fl60_grda_recipe_spiral_and_separable():
    ds = fl60(num_clients=6, samples_per_client=2000, seed=3)
    emb = ds.info["client_embedding"]
    phi = torch.remainder(torch.atan2(emb[:, 1], emb[:, 0]), 2 * math.pi)
    for t in range(6):
        x, y = all_samples(ds, t)
        mu = (1 + 6 * phi[t] / (2 * math.pi)) * emb[t]
        # Noise restricted to the unit disk: every point lies within 1 of its class mean.
        assert ((x[y == 1] - mu).norm(dim=1) <= 1 + 1e-5).all()
        assert ((x[y == 0] + mu).norm(dim=1) <= 1 + 1e-5).all()
        assert torch.allclose(x[y == 1].mean(0), mu, atol=0.05)
        # Hence the line through the origin orthogonal to mu separates the classes.
        assert ((x @ mu > 0).long() == y).all()


def test_fl60_errors():
    with pytest.raises(ValueError, match="recipe must be"):
        fl60(recipe="spiral")
    with pytest.raises(ValueError, match="positive validation fraction"):
        fl60(fractions=(0.8, 0.0, 0.2))
    with pytest.raises(ValueError, match="at least 2 clients"):
        fl60(num_clients=1)
    with pytest.raises(ValueError, match="fractions must sum to 1"):
        fl60(num_clients=3, fractions=(0.6, 0.1, 0.2))
