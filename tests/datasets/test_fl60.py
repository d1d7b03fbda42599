import importlib
import logging
import math

import pytest
import torch

from pyg_fedgraph.datasets.fl60 import angle_knn_graph, fl60
from pyg_fedgraph.experiment import ExperimentConfig, build_simulator

# The package re-exports the builder under the module's name.
fl60_module = importlib.import_module("pyg_fedgraph.datasets.fl60")


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


def adjacency(edge_index, n):
    adj = torch.zeros(n, n, dtype=torch.long)
    adj.index_put_((edge_index[0], edge_index[1]), torch.ones(edge_index.size(1),
                                                               dtype=torch.long), accumulate=True)
    return adj


def test_fl60_knn_graph_is_symmetric_k_regular_and_links_close_angles():
    n, k = 40, 6
    ds = fl60(num_clients=n, graph="knn", graph_k=k, seed=2)
    assert ds.info["graph"] == "knn"
    adj = adjacency(ds.edge_index, n)
    assert int(adj.max()) == 1                           # no duplicate edges
    assert int(adj.diagonal().sum()) == 0                # no self loops
    assert torch.equal(adj, adj.t())                     # symmetric
    assert adj.sum(1).tolist() == [k] * n                # k neighbours each
    assert ds.edge_index.size(1) == k * n
    assert torch.equal(ds.edge_weight, torch.ones(k * n))
    # Brute force: client i's neighbours are the k/2 clients nearest counterclockwise
    # (smallest (w_j - w_i) mod 2 pi) and the k/2 nearest clockwise.
    omega = ds.info["client_angle"].double()
    ccw = torch.remainder(omega.unsqueeze(0) - omega.unsqueeze(1), 2 * math.pi)  # [i, j]
    ccw.fill_diagonal_(float("inf"))
    cw = torch.remainder(omega.unsqueeze(1) - omega.unsqueeze(0), 2 * math.pi)
    cw.fill_diagonal_(float("inf"))
    expected = torch.zeros(n, n, dtype=torch.long)
    rows = torch.arange(n).unsqueeze(1)
    expected[rows, ccw.topk(k // 2, dim=1, largest=False).indices] = 1
    expected[rows, cw.topk(k // 2, dim=1, largest=False).indices] = 1
    assert torch.equal(adj, expected)
    # Linked clients are close on the circle: about k/2 / N of a turn apart on average.
    gap = torch.minimum(ccw, cw).fill_diagonal_(0.0)
    linked = adj.bool()
    assert float(gap[linked].max()) < float(gap[~linked & ~torch.eye(n, dtype=torch.bool)].min()
                                            + 2 * math.pi * k / n)
    assert float(gap[linked].mean()) < 0.2 * float(gap[~linked].mean())


def test_angle_knn_graph_by_hand():
    # Five clients on the circle; in angle order: 3 (-3.0), 1 (-1.0), 0 (0.1), 4 (2.0), 2 (3.1).
    angle = torch.tensor([0.1, -1.0, 3.1, -3.0, 2.0])
    ei = angle_knn_graph(angle, 2)
    pairs = set(map(tuple, ei.t().tolist()))
    assert pairs == {(3, 1), (1, 3), (1, 0), (0, 1), (0, 4), (4, 0), (4, 2), (2, 4),
                     (2, 3), (3, 2)}
    assert torch.equal(ei, torch.tensor(sorted(pairs)).t())  # sorted by source
    # k = 4 = N - 1: the complete graph.
    assert angle_knn_graph(angle, 4).size(1) == 20


def test_fl60_graph_auto_none_and_same_inputs(monkeypatch, caplog):
    paper = fl60(num_clients=12, seed=5)
    assert paper.info["graph"] == "paper"
    none = fl60(num_clients=12, seed=5, graph="none")
    assert none.edge_index is None and none.edge_weight is None and none.info["graph"] == "none"
    # Inputs and labels do not depend on the graph (only the split drawn after it does).
    for t in range(12):
        (xa, ya), (xb, yb) = all_samples(paper, t), all_samples(none, t)
        oa, ob = xa[:, 0].argsort(), xb[:, 0].argsort()
        assert torch.equal(xa[oa], xb[ob]) and torch.equal(ya[oa], yb[ob])
    monkeypatch.setattr(fl60_module, "PAPER_GRAPH_MAX_CLIENTS", 10)
    with caplog.at_level(logging.INFO, logger="pyg_fedgraph.datasets.fl60"):
        auto = fl60(num_clients=12, seed=5, graph_k=4)
    assert auto.info["graph"] == "knn" and auto.edge_index.size(1) == 4 * 12
    assert "sparse knn graph (k=4)" in caplog.text
    assert torch.equal(auto.edge_index, fl60(num_clients=12, seed=5, graph="knn",
                                             graph_k=4).edge_index)


def test_strategies_without_a_prior_graph_run_on_fl60_without_one():
    def config(strategy):
        return ExperimentConfig(dataset="fl60", strategy=strategy, rounds=2, clients=6,
                                seed=0, overrides={"steps": 2, "data.samples_per_client": 20,
                                                   "data.graph": "none"})
    for name in ("fedavg", "pfedgraph"):
        sim = build_simulator(config(name))
        assert sim.dataset.edge_index is None
        sim.run()
        assert sim.engine.round == 2 and bool(sim.engine.table.trained.all())
    with pytest.raises(ValueError, match="needs a prior client graph"):
        build_simulator(config("panacea"))


def test_fl60_errors():
    with pytest.raises(ValueError, match="recipe must be"):
        fl60(recipe="spiral")
    with pytest.raises(ValueError, match="positive validation fraction"):
        fl60(fractions=(0.8, 0.0, 0.2))
    with pytest.raises(ValueError, match="at least 2 clients"):
        fl60(num_clients=1)
    with pytest.raises(ValueError, match="fractions must sum to 1"):
        fl60(num_clients=3, fractions=(0.6, 0.1, 0.2))
    with pytest.raises(ValueError, match="graph must be 'auto'"):
        fl60(graph="dense")  # type: ignore[arg-type]
    for k in (3, 0, 60):
        with pytest.raises(ValueError, match=f"from 2 to 59 for 60 clients, got {k}"):
            fl60(graph="knn", graph_k=k)


# ------------------------------------------------------------ GRDA's data file
def write_grda_toy(path, k=4, per=10, seed=0, protocol=4, **replace):
    r"""A file in the format of GRDA's ``toy_d60_spiral.pkl``: a pickled dict of
    numpy arrays, samples ordered by client, first half of each client label 0."""
    import pickle

    import numpy as np
    rng = np.random.default_rng(seed)
    angle = rng.random(k) * 2 * np.pi
    data, label, domain = [], [], []
    for i, a in enumerate(angle):
        mean = (1 + 6 * a / (2 * np.pi)) * np.array([np.cos(a), np.sin(a)])
        data += [mean + 0.1 * rng.standard_normal((per // 2, 2)),
                 -mean + 0.1 * rng.standard_normal((per - per // 2, 2))]
        label.append(np.r_[np.zeros(per // 2), np.ones(per - per // 2)])
        domain.append(np.full(per, float(i)))
    adj = np.zeros((k, k))
    adj[0, 1] = adj[1, 0] = adj[2, 3] = adj[3, 2] = 1.0
    obj = {"data": np.concatenate(data), "label": np.concatenate(label),
           "domain": np.concatenate(domain), "A": adj, "angle": angle}
    obj.update(replace)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    return obj


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_fl60_reads_grda_data_file(tmp_path, protocol):
    import hashlib
    path = tmp_path / "toy.pkl"
    obj = write_grda_toy(path, protocol=protocol)
    ds = fl60(path=path, graph="file", seed=3)
    assert ds.num_clients == 4 and ds.info["recipe"] == "grda-file"
    assert ds.info["file_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    for i in range(4):  # each client's samples, over its three splits, are the file's rows
        rows = torch.cat([ds.splits[s].x[i, :int(ds.splits[s].counts[i])] for s in
                          ("train", "val", "test")])
        labels = torch.cat([ds.splits[s].y[i, :int(ds.splits[s].counts[i])] for s in
                            ("train", "val", "test")])
        mine = torch.from_numpy(obj["data"][obj["domain"] == i]).float()
        assert rows.shape == mine.shape == (10, 2)
        got = sorted(zip(rows.tolist(), labels.tolist(), strict=True))
        want = sorted(zip(mine.tolist(), obj["label"][obj["domain"] == i].astype(int).tolist(),
                          strict=True))
        assert got == want
    assert sorted(map(tuple, ds.edge_index.t().tolist())) == [(0, 1), (1, 0), (2, 3), (3, 2)]
    assert torch.allclose(ds.info["client_embedding"][:, 0],
                          torch.from_numpy(obj["angle"]).cos().float())
    # Panacea's Bernoulli graph drawn on the file's angles (drawn before the split,
    # as from the recipes); without a draw, the same split as with the file's graph.
    drawn = fl60(path=path, seed=3)
    assert drawn.info["graph"] == "paper" and drawn.edge_index.size(1) > 0
    assert torch.equal(fl60(path=path, graph="none", seed=3).splits["train"].x,
                       ds.splits["train"].x)


def test_fl60_grda_file_runs_a_strategy(tmp_path):
    path = tmp_path / "toy.pkl"
    write_grda_toy(path, per=20)
    cfg = ExperimentConfig(dataset="fl60", strategy="sfl", rounds=1,
                           overrides={"data.path": str(path), "data.graph": "file"})
    sim = build_simulator(cfg)
    sim.run()
    assert sim.dataset.num_clients == 4 and len(sim.history) == 1


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


def test_fl60_grda_file_errors(tmp_path):
    import numpy as np
    marker = tmp_path / "pwned"
    path = tmp_path / "toy.pkl"
    write_grda_toy(path, A=Exploit(marker))
    with pytest.raises(ValueError, match=r"refusing to unpickle .*toy.pkl.*system.*GRDA toy"):
        fl60(path=path)
    assert not marker.exists()
    path.write_bytes(b"\x80\x04garbage")
    with pytest.raises(ValueError, match=r"toy.pkl is not a GRDA toy data pickle"):
        fl60(path=path)
    write_grda_toy(path)
    path.write_bytes(path.read_bytes()[:200])  # truncated
    with pytest.raises(ValueError, match=r"toy.pkl is not a GRDA toy data pickle"):
        fl60(path=path)
    cases = [({"A": None}, r"missing numpy arrays \['A'\]"),
             ({"label": np.full(40, 2.0)}, "labels must be 0 or 1"),
             ({"domain": np.full(40, 7.0)}, r"domain must hold client ids 0..3"),
             ({"A": np.triu(np.ones((4, 4)), 1)}, "symmetric 0/1 matrix"),
             ({"data": np.zeros((40, 3))}, r"data must have shape \(M, 2\)"),
             ({"label": np.zeros(39)}, r"label and domain must have shape \(40,\)"),
             ({"data": np.full((40, 2), "a")}, r"arrays \['data'\] must hold real numbers"),
             ({"angle": np.ones(4) * 1j}, r"arrays \['angle'\] must hold real numbers"),
             ({"data": np.full((40, 2), 1e300)}, "data must be finite in float32")]
    for change, message in cases:
        write_grda_toy(path, **change)
        with pytest.raises(ValueError, match=message):
            fl60(path=path)
    write_grda_toy(path)
    with pytest.raises(ValueError, match="holds 4 clients, got num_clients=5"):
        fl60(path=path, num_clients=5)
    with pytest.raises(ValueError, match="draws the inputs, path= reads them"):
        fl60(path=path, recipe="paper")
    with pytest.raises(ValueError, match="graph='file' takes the graph of GRDA's data file"):
        fl60(graph="file")
    with pytest.raises(ValueError, match="not found: expected a GRDA toy data pickle"):
        fl60(path=tmp_path / "nothing.pkl")


# ------------------------------------------- FL-60's variants under their record names
def old_grda_graph(num_clients=60, seed=0):
    r"""``fl60-grda-graph`` as ``benchmarks/reproduce/fl60_protocol.py`` registered it
    before ``graph="grda"`` existed: FL-60 with the paper's graph, its edges replaced by
    GRDA's drawn from a generator of its own."""
    from dataclasses import replace

    data = fl60(num_clients=num_clients, seed=seed)
    emb = data.info["client_embedding"].double()
    cos = emb @ emb.t()
    gen = torch.Generator().manual_seed(seed + 1)
    row, col = torch.triu_indices(num_clients, num_clients, offset=1)
    p = cos[row, col]
    keep = (p >= 0.2) & (torch.rand(p.numel(), generator=gen, dtype=torch.float64) < p)
    ei = torch.stack([torch.cat([row[keep], col[keep]]), torch.cat([col[keep], row[keep]])])
    return replace(data, edge_index=ei, edge_weight=torch.ones(ei.size(1)),
                   info={**data.info, "graph": "grda"})


def assert_same(a, b):
    r"""Two federations hold the same tensors, graph and metadata."""
    assert a.name == b.name and a.num_clients == b.num_clients
    for s in ("train", "val", "test"):
        for field in ("x", "y", "counts"):
            assert torch.equal(getattr(a.splits[s], field), getattr(b.splits[s], field)), s
    assert torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(a.edge_weight, b.edge_weight)
    assert a.info.keys() == b.info.keys()
    for k, v in a.info.items():
        assert torch.equal(v, b.info[k]) if torch.is_tensor(v) else v == b.info[k], k


@pytest.mark.parametrize("seed", [0, 3])
def test_grda_graph_option_is_the_earlier_variant(seed):
    from pyg_fedgraph.datasets import load_dataset

    new = fl60(seed=seed, graph="grda")
    assert_same(new, old_grda_graph(seed=seed))
    assert_same(load_dataset("fl60-grda-graph", seed=seed), new)
    assert new.info["graph"] == "grda"
    # GRDA's rule: only pairs whose cosine is at least 0.2, each once in each direction.
    emb = new.info["client_embedding"].double()
    cos = (emb @ emb.t())[new.edge_index[0], new.edge_index[1]]
    assert bool((cos >= 0.2).all()) and new.edge_index.size(1) % 2 == 0
    adj = torch.zeros(60, 60)
    adj[new.edge_index[0], new.edge_index[1]] = 1
    assert torch.equal(adj, adj.t()) and int(adj.sum()) == new.edge_index.size(1)
    # Same inputs and splits as the paper's graph: the runs differ by the graph alone.
    paper = fl60(seed=seed)
    for s in ("train", "val", "test"):
        assert torch.equal(paper.splits[s].x, new.splits[s].x)
    assert not torch.equal(paper.edge_index, new.edge_index)


def test_paper_inputs_variant_is_the_recipe():
    from pyg_fedgraph.experiment.build import build_dataset, resolved_defaults

    cfg = ExperimentConfig(dataset="fl60-paper-inputs", strategy="fedavg", seed=2)
    data = build_dataset(cfg)
    assert_same(data, fl60(seed=2, recipe="paper"))
    assert resolved_defaults(data, cfg.dataset) == resolved_defaults(data, "fl60")


def test_grda_file_variants_read_the_named_file(tmp_path, monkeypatch):
    import hashlib

    from pyg_fedgraph.datasets import GRDA_DG60_ENV, load_dataset
    from pyg_fedgraph.experiment.build import build_dataset

    path = tmp_path / "toy_d60_spiral.pkl"
    write_grda_toy(path, per=20)
    monkeypatch.delenv(GRDA_DG60_ENV, raising=False)
    with pytest.raises(ValueError, match=f"set {GRDA_DG60_ENV}=PATH"):
        load_dataset("fl60-grda-file")
    with pytest.raises(ValueError, match=r"toy_d60_spiral.pkl is not GRDA's .*expected b3bb65f0"):
        load_dataset("fl60-grda-file", path=path)
    # The file the records were made from is GRDA's; here a small one stands in for it.
    monkeypatch.setattr(fl60_module, "GRDA_DG60_SHA256",
                        hashlib.sha256(path.read_bytes()).hexdigest())
    monkeypatch.setenv(GRDA_DG60_ENV, str(path))
    for name, graph in (("fl60-grda-file", "paper"), ("fl60-grda-file-graph", "file")):
        # The settings of their records name no file: the environment does.
        cfg = ExperimentConfig(dataset=name, strategy="sfl", seed=1)
        assert_same(build_dataset(cfg), fl60(seed=1, path=path, graph=graph))
    monkeypatch.setenv(GRDA_DG60_ENV, str(tmp_path / "elsewhere.pkl"))
    with pytest.raises(ValueError, match="elsewhere.pkl not found: expected GRDA's"):
        load_dataset("fl60-grda-file-graph")
    assert load_dataset("fl60-grda-file-graph", path=path).info["graph"] == "file"


def test_variants_take_fl60s_defaults_and_run():
    from pyg_fedgraph.datasets.fl60 import FL60_VARIANTS
    from pyg_fedgraph.experiment import DATASET_DEFAULTS

    assert set(FL60_VARIANTS) == {n for n in DATASET_DEFAULTS if n.startswith("fl60-")}
    assert all(DATASET_DEFAULTS[n] == DATASET_DEFAULTS["fl60"] for n in FL60_VARIANTS)
    cfg = ExperimentConfig(dataset="fl60-grda-graph", strategy="sfl", rounds=1, clients=8,
                           overrides={"steps": 1})
    sim = build_simulator(cfg)
    sim.run()
    assert sim.dataset.info["graph"] == "grda" and len(sim.history) == 1
