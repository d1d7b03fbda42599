import itertools
import json

import pytest
import torch

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.nn import bipartition, pairwise_cosine
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.cfl import CFL
from pyg_fedgraph.strategies.fedavg import FedAvg
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig


def _ctx(n, init, num_samples=None, held_out=()):
    layout = ParamLayout.from_module(torch.nn.Linear(init.numel() - 1, 1))
    if num_samples is None:
        num_samples = torch.ones(n, dtype=torch.long)
    return FederationContext(num_clients=n, layout=layout, init_params=init,
                             num_samples=num_samples,
                             held_out=torch.tensor(held_out, dtype=torch.long))


def _strategy(n, init, num_samples=None, held_out=(), **kwargs):
    s = CFL(**kwargs)
    s.setup(_ctx(n, init, num_samples, held_out))
    return s


def _upload(s, rnd, clients, delta, num_samples=None):
    clients = torch.as_tensor(clients)
    start = s.configure_train(rnd, clients).params
    if num_samples is None:
        num_samples = s.ctx.num_samples[clients]
    s.aggregate_train(rnd, FederationGraph(x=start + delta, delta=delta, client_id=clients,
                                           num_samples=num_samples))


def _label_dataset(flip, n=(16, 8, 8), seed=0):
    r"""4 clients sharing the same inputs; with ``flip`` clients 2 and 3 use the
    opposite label map, otherwise all four hold identical data."""
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for name, count in zip(("train", "val", "test"), n, strict=True):
        x = torch.randn(count, 2, generator=gen)
        y = (x[:, 0] > 0).long()
        ys = [1 - y if flip and c >= 2 else y for c in range(4)]
        splits[name] = ClientSplit.from_lists([x] * 4, ys)
    return FederatedDataset("labels", "classification", splits, num_classes=2)


def _simulator(strategy, dataset, rounds=3, held_out=None):
    torch.manual_seed(0)
    # Full-batch local training (batch = all 16 samples): clients with identical
    # data compute identical updates whatever their batch order.
    return Simulator(dataset, MLP(2, 4, 2, num_layers=2), strategy, rounds=rounds,
                     local=LocalConfig(lr=0.5, batch_size=16, epochs=3),
                     seed=0, held_out=held_out)


def test_registered_hparams_and_defaults():
    assert STRATEGIES["cfl"] is CFL
    s = build_strategy("cfl", eps1=0.1, eps2=0.2, linkage="single")
    assert s.hparams() == {"eps1": 0.1, "eps2": 0.2, "min_cluster_size": 3,
                           "warmup_rounds": 20, "linkage": "single", "mean_norm": "weighted",
                           "evaluate": "cluster"}
    assert "eps1=0.1" in str(s)
    # Authors' code: EPS_1 = 0.4, EPS_2 = 1.6, len(cluster) > 2, round > 20.
    assert CFL().hparams() == {"eps1": 0.4, "eps2": 1.6, "min_cluster_size": 3,
                               "warmup_rounds": 20, "linkage": "complete",
                               "mean_norm": "weighted", "evaluate": "cluster"}


@pytest.mark.parametrize("kwargs, match", [
    ({"eps1": -1.0}, "eps1 must be >= 0, got -1.0"),
    ({"eps2": float("nan")}, "eps2: expected a finite number, got nan"),
    ({"min_cluster_size": 1}, "min_cluster_size must be >= 2, got 1"),
    ({"warmup_rounds": -1}, "warmup_rounds must be >= 0, got -1"),
    ({"linkage": "ward"}, "linkage: expected one of 'complete', 'single', 'min-cut', got 'ward'"),
    ({"evaluate": "local"}, "evaluate: expected one of 'cluster', 'trained', got 'local'"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CFL(**kwargs)


def test_bipartition_by_hand():
    sim = torch.tensor([[1.0, 0.9, -0.8, -0.7],
                        [0.9, 1.0, -0.6, -0.9],
                        [-0.8, -0.6, 1.0, 0.8],
                        [-0.7, -0.9, 0.8, 1.0]])
    for linkage in ("complete", "single"):
        assert bipartition(sim, linkage).tolist() == [False, False, True, True]
    # Single and complete linkage differ on a chain: 0-1-2 strongly linked in a row,
    # 3 loosely tied to everyone.
    chain = torch.tensor([[1.0, 0.9, 0.1, 0.5],
                          [0.9, 1.0, 0.9, 0.5],
                          [0.1, 0.9, 1.0, 0.4],
                          [0.5, 0.5, 0.4, 1.0]])
    # single: {0,1} joins 2 at 0.9 (its best link); complete: {0,1} vs 2 is only 0.1,
    # so 3 joins {0,1} at 0.5 and 2 stays alone.
    assert bipartition(chain, "single").tolist() == [False, False, False, True]
    assert bipartition(chain, "complete").tolist() == [False, False, True, False]
    with pytest.raises(ValueError, match="at least 2"):
        bipartition(torch.ones(1, 1))
    with pytest.raises(ValueError, match="square"):
        bipartition(torch.ones(2, 3))


@pytest.mark.parametrize("linkage", ["complete", "single"])
def test_bipartition_agrees_with_scikit_learn(linkage):
    from sklearn.cluster import AgglomerativeClustering
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        sim = pairwise_cosine(torch.randn(9, 5, generator=gen))
        ours = bipartition(sim, linkage)
        labels = AgglomerativeClustering(n_clusters=2, metric="precomputed",
                                         linkage=linkage).fit((1 - sim).double().numpy()).labels_
        theirs = torch.as_tensor(labels != labels[0])
        assert torch.equal(ours, theirs)


def test_single_linkage_is_the_optimal_bipartition():
    # The paper's criterion: minimize the largest cross-group similarity.
    gen = torch.Generator().manual_seed(2)
    m = 6
    for _ in range(4):
        sim = pairwise_cosine(torch.randn(m, 3, generator=gen))
        best, best_cost = None, float("inf")
        for r in range(1, m):
            for group in itertools.combinations(range(1, m), r):
                side = torch.zeros(m, dtype=torch.bool)
                side[list(group)] = True
                cost = float(sim[~side][:, side].max())
                if cost < best_cost:
                    best, best_cost = side, cost
        ours = bipartition(sim, "single")
        assert float(sim[~ours][:, ours].max()) == pytest.approx(best_cost)
        assert torch.equal(ours, best)


def test_split_and_clusterwise_averaging_by_hand():
    s = _strategy(4, torch.zeros(2), num_samples=torch.tensor([1, 3, 2, 2]), warmup_rounds=0,
                  eps1=0.5, eps2=1.5)
    d = torch.tensor([[2.0, 0.0], [2.0, 0.2], [-2.0, 0.0], [-2.0, -0.4]])
    # Weighted mean update: (1*d0 + 3*d1 + 2*d2 + 2*d3) / 8 = (0, -0.025): norm < 0.5;
    # max update norm sqrt(4.16) > 1.5: the cluster splits.
    _upload(s, 1, [0, 1, 2, 3], d)
    assert s.cluster_of.tolist() == [0, 0, 1, 1] and int(s.num_clusters) == 2
    assert s.last_mean_norm[0] == pytest.approx(0.025)
    assert s.last_max_norm[0] == pytest.approx(4.16 ** 0.5)
    # Each new cluster takes its own weighted mean update.
    first = (1 * d[0] + 3 * d[1]) / 4
    second = (d[2] + d[3]) / 2
    expected = torch.stack([first, first, second, second])
    assert torch.allclose(s.personalized_params(torch.arange(4)), expected)
    assert torch.allclose(s.configure_train(2, torch.tensor([3])).params, second.view(1, -1))
    a = s.collaboration_graph()
    assert torch.allclose(a, torch.tensor([[0.25, 0.75, 0, 0], [0.25, 0.75, 0, 0],
                                           [0, 0, 0.5, 0.5], [0, 0, 0.5, 0.5]]))


@pytest.mark.parametrize("kwargs, rnd", [
    ({"warmup_rounds": 1}, 1),          # still warming up
    ({"min_cluster_size": 5}, 2),       # cluster too small
    ({"eps1": 0.01}, 2),                # mean update norm 0.05 not small enough
    ({"eps2": 3.0}, 2),                 # no member far from stationary
])
def test_split_conditions(kwargs, rnd):
    options = {"warmup_rounds": 0, "eps1": 0.5, "eps2": 1.5, **kwargs}
    s = _strategy(4, torch.zeros(2), **options)
    d = torch.tensor([[2.0, 0.0], [2.0, 0.2], [-2.0, 0.0], [-2.0, -0.4]])
    _upload(s, rnd, [0, 1, 2, 3], d)
    assert int(s.num_clusters) == 1 and s.cluster_of.tolist() == [0, 0, 0, 0]


def test_no_split_while_a_member_is_missing():
    s = _strategy(5, torch.zeros(2), warmup_rounds=0, eps1=0.5, eps2=1.5)
    d = torch.tensor([[2.0, 0.0], [2.0, 0.2], [-2.0, 0.0], [-2.0, -0.4]])
    _upload(s, 1, [0, 1, 2, 3], d)   # client 4 did not upload
    assert int(s.num_clusters) == 1
    # The sampled clients' mean update still moves the whole cluster, client 4 included.
    assert torch.allclose(s.cluster_params[4], d.mean(0))


@pytest.mark.parametrize("eps1, eps2", [(0.5, 0.5), (1.0, 3.0), (0.1, 5.0), (3.0, 3.0)])
def test_identical_updates_never_split(eps1, eps2):
    # Mean update norm equals max update norm, so mean < eps1 <= eps2 < max is impossible.
    for scale in (0.3, 1.7, 4.0):
        s = _strategy(4, torch.zeros(3), warmup_rounds=0, eps1=eps1, eps2=eps2)
        d = scale * torch.tensor([0.6, -0.8, 0.0]).expand(4, -1)
        for rnd in range(1, 3):
            _upload(s, rnd, [0, 1, 2, 3], d)
        assert int(s.num_clusters) == 1


def test_opposite_label_maps_split_into_two_clusters():
    s = CFL(eps1=0.2, eps2=0.3, warmup_rounds=0)
    sim = _simulator(s, _label_dataset(flip=True))
    sim.run()
    assert int(s.num_clusters) == 2
    assert s.cluster_of.tolist() == [0, 0, 1, 1]
    assert [c.tolist() for c in s.clusters()] == [[0, 1], [2, 3]]
    params = s.personalized_params(torch.arange(4))
    assert torch.equal(params[0], params[1]) and torch.equal(params[2], params[3])
    assert not torch.allclose(params[0], params[2])


def test_identical_clients_never_split():
    s = CFL(eps1=0.2, eps2=0.3, warmup_rounds=0)
    sim = _simulator(s, _label_dataset(flip=False))
    sim.run()
    assert int(s.num_clusters) == 1 and s.cluster_of.tolist() == [0, 0, 0, 0]
    # Same data, full batch: the updates agree, so mean and max norms agree.
    assert float(s.last_mean_norm[0]) == pytest.approx(float(s.last_max_norm[0]), rel=1e-5)


def test_one_cluster_is_fedavg():
    data = _label_dataset(flip=True)
    cfl = _simulator(CFL(), data)          # warm-up: no split in 3 rounds
    fedavg = _simulator(FedAvg(), data)
    cfl.run()
    fedavg.run()
    assert torch.allclose(cfl.strategy.personalized_params(torch.arange(4)),
                          fedavg.strategy.personalized_params(torch.arange(4)), atol=1e-6)


def test_held_out_clients():
    s = _strategy(4, torch.zeros(2), held_out=(3,), warmup_rounds=0, eps1=0.5, eps2=1.5,
                  min_cluster_size=2)
    assert s.cluster_of.tolist() == [0, 0, 0, -1]
    d = torch.tensor([[4.0, 0.0], [-2.0, 0.0], [-2.0, 0.2]])
    _upload(s, 1, [0, 1, 2], d)
    assert s.cluster_of.tolist() == [0, 1, 1, -1]
    params = s.personalized_params(torch.arange(4))
    assert torch.allclose(params[3], params[:3].mean(0))
    assert torch.allclose(s.collaboration_graph()[3], s.collaboration_graph()[:3].mean(0))
    with pytest.raises(ValueError, match="held out"):
        _upload(s, 2, [3], torch.zeros(1, 2))


def test_evaluate_trained_is_the_clients_own_models_after_the_same_training():
    from pyg_fedgraph.train.jobs import ClientStart, evaluate_clients

    # _label_dataset's clients with their own inputs: members of a cluster train apart.
    gen = torch.Generator().manual_seed(1)
    splits = {}
    for name, count in zip(("train", "val", "test"), (16, 8, 8), strict=True):
        xs = [torch.randn(count, 2, generator=gen) for _ in range(4)]
        ys = [(x[:, 0] > 0).long() if c < 2 else (x[:, 0] <= 0).long()
              for c, x in enumerate(xs)]
        splits[name] = ClientSplit.from_lists(xs, ys)
    data = FederatedDataset("labels", "classification", splits, num_classes=2)
    sims = [_simulator(CFL(eps1=0.2, eps2=0.3, warmup_rounds=0, evaluate=e), data)
            for e in ("cluster", "trained")]
    for sim in sims:
        sim.run()
    cluster, trained = sims
    # The same training: the same clusters and cluster models.
    assert int(trained.strategy.num_clusters) == 2
    assert torch.equal(cluster.strategy.cluster_of, trained.strategy.cluster_of)
    assert torch.equal(cluster.strategy.cluster_params, trained.strategy.cluster_params)
    assert trained.strategy.personalized_params(torch.arange(4)) is None
    # Evaluated on each client's own model after its last local training (what
    # LocalModelsCallback measures during a run evaluated on the cluster models).
    everyone = torch.arange(4)
    own = evaluate_clients(cluster.trainer, ClientStart(everyone, everyone, cluster.local_params,
                                                        cluster.local_buffers),
                           seed=cluster.seed, rnd=cluster.round)
    val, test = trained.evaluate()
    for name in test:
        assert torch.equal(test[name], own["test"][name])
        assert torch.equal(val[name], own["val"][name])
    # ... which are not the cluster models.
    assert not torch.allclose(cluster.local_params, cluster.strategy.cluster_params, atol=1e-3)
    assert not all(torch.equal(test[k], cluster.evaluate()[1][k]) for k in test)


def test_evaluate_trained_keeps_the_mean_cluster_model_for_held_out_clients():
    s = _strategy(4, torch.zeros(2), held_out=(3,), warmup_rounds=0, eps1=0.5, eps2=1.5,
                  min_cluster_size=2, evaluate="trained")
    _upload(s, 1, [0, 1, 2], torch.tensor([[4.0, 0.0], [-2.0, 0.0], [-2.0, 0.2]]))
    latest = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    s.ctx.table.params[:3] = latest  # what the engine writes after the aggregation
    assert s.personalized_params(torch.tensor([0, 2])) is None
    params = s.personalized_params(torch.arange(4))
    assert torch.equal(params[:3], latest)
    assert torch.allclose(params[3], s.cluster_params[:3].mean(0))


def test_state_dict_round_trip():
    s = CFL(eps1=0.2, eps2=0.3, warmup_rounds=0)
    sim = _simulator(s, _label_dataset(flip=True), rounds=2)
    sim.run()
    assert int(s.num_clusters) == 2
    state = s.state_dict()
    fresh = CFL(eps1=0.2, eps2=0.3, warmup_rounds=0)
    fresh.setup(s.ctx)
    fresh.load_state_dict(state)
    assert int(fresh.num_clusters) == 2
    assert torch.equal(fresh.cluster_of, s.cluster_of)
    assert torch.equal(fresh.cluster_params, s.cluster_params)
    assert torch.equal(fresh.configure_train(3, torch.arange(4)).params,
                       s.configure_train(3, torch.arange(4)).params)


@pytest.mark.parametrize("dataset", ["fl60", "digits"])
def test_cli_runs(tmp_path, dataset):
    from pyg_fedgraph.cli import main
    code = main(["run", "--dataset", dataset, "--strategy", "cfl", "--rounds", "2",
                 "--out", str(tmp_path), "--quiet", "--set", "steps=2",
                 "--set", "warmup_rounds=0"])
    assert code == 0
    summary = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert summary["strategy"] == "cfl" and 0.0 <= summary["test"] <= 1.0
