import math

import pytest
import torch
from sklearn.metrics import rand_score
from torch import nn

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.datasets.registry import DATASETS, load_dataset
from pyg_fedgraph.datasets.topology import (
    rand_index_callback,
    ring_topology,
    topology,
    topology_edges,
)
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.fedcedar import FedCEDAR
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig


def _ctx(num_clients: int, init: torch.Tensor, seed: int = 0) -> FederationContext:
    layout = ParamLayout.from_module(nn.Linear(init.numel() - 1, 1))
    return FederationContext(num_clients=num_clients, layout=layout, init_params=init,
                             num_samples=torch.ones(num_clients, dtype=torch.long), seed=seed)


def _strategy(num_clients: int, init: torch.Tensor, seed: int = 0, **kwargs) -> FedCEDAR:
    s = FedCEDAR(**kwargs)
    s.setup(_ctx(num_clients, init, seed))
    return s


def _upload(strategy: FedCEDAR, rnd: int, clients, x: torch.Tensor) -> None:
    clients = torch.as_tensor(clients)
    strategy.aggregate_train(rnd, FederationGraph(x=x, delta=torch.zeros_like(x),
                                                  client_id=clients))


def _blobs(truth: torch.Tensor, dim: int = 6, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    means = 10.0 * torch.randn(int(truth.max()) + 1, dim, generator=g)
    return means[truth] + 0.01 * torch.randn(truth.numel(), dim, generator=g)


def test_registered_and_hparams():
    assert STRATEGIES["fedcedar"] is FedCEDAR
    s = build_strategy("fedcedar", num_clusters=3, num_steps=1)
    assert s.hparams() == {"num_clusters": 3, "num_steps": 1, "num_init": 10,
                           "evaluate": "distributed"}
    assert "num_clusters=3" in str(s) and "ClusterGraphPropagation(num_steps=1)" in str(s)
    # The paper's defaults (Sec. 4.1): K = 5, P = 2.
    assert FedCEDAR().hparams()["num_clusters"] == 5 and FedCEDAR().num_steps == 2


@pytest.mark.parametrize("kwargs, match", [
    ({"num_clusters": 0}, "num_clusters must be >= 1, got 0"),
    ({"num_clusters": 2.0}, "num_clusters: expected an int >= 1, got 2.0"),
    ({"num_steps": -1}, "num_steps must be >= 0, got -1"),
    ({"num_init": 0}, "num_init must be >= 1, got 0"),
    ({"evaluate": "after"}, "evaluate: expected one of 'distributed', 'local'"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FedCEDAR(**kwargs)


def test_requires_setup():
    with pytest.raises(RuntimeError, match="setup"):
        FedCEDAR().configure_train(1, torch.arange(3))


def test_round_one_starts_from_the_initial_model():
    init = torch.tensor([0.5, -1.0, 2.0])
    s = _strategy(5, init)
    plan = s.configure_train(1, torch.tensor([0, 3, 4]))
    assert torch.equal(plan.params, init.expand(3, -1))
    assert torch.equal(s.personalized_params(torch.arange(5)), init.expand(5, -1))
    clients, assignment = s.last_assignment()
    assert clients.numel() == 0 and assignment.numel() == 0
    assert s.collaboration_graph() is None


def test_clusters_of_separated_groups_are_recovered():
    truth = torch.tensor([2, 0, 1, 1, 0, 2, 0, 2, 1])
    clients = torch.tensor([0, 2, 3, 5, 6, 7, 9, 10, 11])   # a sample of 12 clients
    s = _strategy(12, torch.zeros(6), num_clusters=3)
    _upload(s, 1, clients, _blobs(truth))

    got_clients, assignment = s.last_assignment()
    assert torch.equal(got_clients, clients)
    assert rand_score(truth.numpy(), assignment.numpy()) == 1.0
    assert s.cluster_of[[1, 4, 8]].tolist() == [-1, -1, -1]


def test_distribution_rule_by_hand():
    # Clients 0, 1 upload (1, 0); clients 3, 4 upload (1, 1). Client 2 is not sampled.
    # Centres c0 = (1, 0), c1 = (1, 1): cos = 1/sqrt(2), so with one propagation step
    # R = [[1, a], [a, 1]] / (1 + a), a = 1/sqrt(2).
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    s = _strategy(5, torch.zeros(2), num_clusters=2, num_steps=1)
    _upload(s, 1, [0, 1, 3, 4], x)

    a = 1.0 / math.sqrt(2.0)
    hat_a = torch.tensor([1.0 + a, a]) / (1.0 + a)          # propagated (1, 0)
    hat_b = torch.tensor([1.0 + a, 1.0]) / (1.0 + a)        # propagated (1, 1)
    mean = (hat_a + hat_b) / 2
    expected = torch.stack([hat_a, hat_a, mean, hat_b, hat_b])

    plan = s.configure_train(2, torch.arange(5))
    assert torch.allclose(plan.params, expected, atol=1e-6)
    assert torch.allclose(s.personalized_params(torch.tensor([4, 2])), expected[[4, 2]],
                          atol=1e-6)
    r = torch.tensor([[1.0, a], [a, 1.0]]) / (1.0 + a)
    graph = s.cluster_graph_matrix()
    order = s.cluster_of[[0, 3]]                            # cluster ids of (1,0), (1,1)
    assert torch.allclose(graph[order][:, order], r, atol=1e-6)


def test_two_propagation_steps_and_no_propagation():
    truth = torch.tensor([0, 0, 1, 1, 2, 2])
    x = _blobs(truth, dim=4, seed=3).abs()      # positive vectors: every cosine is > 0
    for steps in (0, 2):
        s = _strategy(6, torch.zeros(4), num_clusters=3, num_steps=steps)
        _upload(s, 1, torch.arange(6), x)
        _, assignment = s.last_assignment()
        means = torch.stack([x[assignment == k].mean(0) for k in range(3)])
        unit = means / means.norm(dim=1, keepdim=True)
        r = unit @ unit.t()
        r = r / r.sum(dim=1, keepdim=True)
        expected = means if steps == 0 else r @ r @ means
        assert torch.allclose(s.personalized_params(torch.arange(6)), expected[assignment],
                              atol=1e-5)


def test_clients_not_sampled_last_round_receive_the_mean_after_a_second_round():
    s = _strategy(6, torch.zeros(3), num_clusters=2)
    truth = torch.tensor([0, 0, 1, 1])
    _upload(s, 1, [0, 1, 2, 3], _blobs(truth, dim=3, seed=1))
    _upload(s, 2, [2, 3, 4, 5], _blobs(truth, dim=3, seed=2))
    params = s.personalized_params(torch.arange(6))
    mean = s.centres[:2].mean(dim=0)
    # 0 and 1 were sampled in round 1 but not in round 2: Condition 2.
    assert torch.allclose(params[0], mean) and torch.allclose(params[1], mean)
    assert torch.allclose(params[2], s.centres[s.cluster_of[2]])
    assert not torch.allclose(params[2], params[4])       # different clusters


def test_more_clusters_than_sampled_clients():
    init = torch.zeros(3)
    s = _strategy(10, init, num_clusters=5, num_steps=0)
    x = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    _upload(s, 1, [7, 1, 4], x)

    assert int(s.num_centres) == 3 and s.centres.shape == (5, 3)
    assert s.cluster_graph_matrix().shape == (3, 3)
    params = s.personalized_params(torch.arange(10))
    assert torch.allclose(params[[7, 1, 4]], x)                 # own cluster, P = 0
    assert torch.allclose(params[0], x.mean(dim=0))             # mean of 3 centres, not 5
    # Orthogonal centres: the graph is the identity.
    assert torch.allclose(s.cluster_graph_matrix(), torch.eye(3))


def test_collaboration_graph_is_the_linear_map_from_uploads_to_received_models():
    truth = torch.tensor([0, 1, 0, 2, 1, 2, 0])
    clients = torch.tensor([0, 1, 3, 4, 6, 7, 8])
    x = _blobs(truth, dim=5, seed=4)
    s = _strategy(9, torch.zeros(5), num_clusters=3)
    _upload(s, 1, clients, x)

    a = s.collaboration_graph()
    assert a.shape == (9, 9)
    assert torch.allclose(a.sum(dim=1), torch.ones(9), atol=1e-6)
    assert (a >= 0).all()
    assert torch.equal(a[:, [2, 5]], torch.zeros(9, 2))         # 2 and 5 uploaded nothing
    uploads = torch.zeros(9, 5)
    uploads[clients] = x
    assert torch.allclose(a @ uploads, s.personalized_params(torch.arange(9)), atol=1e-4)


def _objective(s: FedCEDAR, x: torch.Tensor) -> float:
    _, a = s.last_assignment()
    return sum(float(((x[a == k] - x[a == k].mean(0)) ** 2).sum()) for k in a.unique())


def test_restarts_keep_the_lowest_kmeans_objective():
    x = torch.randn(12, 4, generator=torch.Generator().manual_seed(0))  # no clear clusters
    gains = []
    for seed in range(5):
        one = _strategy(12, torch.zeros(4), seed=seed, num_clusters=4, num_init=1)
        ten = _strategy(12, torch.zeros(4), seed=seed, num_clusters=4, num_init=10)
        _upload(one, 1, torch.arange(12), x)
        _upload(ten, 1, torch.arange(12), x)
        # The first restart is the single run (same generator), so ten can only do better.
        gains.append(_objective(one, x) - _objective(ten, x))
    assert min(gains) >= -1e-4
    assert max(gains) > 0.5


def test_deterministic_with_a_seed():
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))  # no clear clusters
    states = []
    for _ in range(2):
        s = _strategy(8, torch.zeros(4), seed=5, num_clusters=3)
        _upload(s, 3, torch.arange(8), x)
        states.append(s.state_dict())
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_state_dict_round_trip():
    s = _strategy(7, torch.zeros(3), seed=1, num_clusters=5)
    _upload(s, 1, [1, 2, 5], torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [1.0, 1.0, 0]]))
    state = s.state_dict()
    assert {"centres", "centre_graph", "num_centres", "cluster_of"} <= set(state)

    t = _strategy(7, torch.zeros(3), seed=1, num_clusters=5)
    t.load_state_dict(state)
    everyone = torch.arange(7)
    assert torch.equal(t.personalized_params(everyone), s.personalized_params(everyone))
    assert torch.equal(t.configure_train(2, everyone).params,
                       s.configure_train(2, everyone).params)
    assert torch.equal(t.collaboration_graph(), s.collaboration_graph())
    for a, b in zip(t.last_assignment(), s.last_assignment(), strict=True):
        assert torch.equal(a, b)


def test_empty_upload_resets_the_sampled_record():
    s = _strategy(4, torch.zeros(2), num_clusters=2)
    _upload(s, 1, [0, 1, 2], torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1]]))
    centres = s.centres.clone()
    _upload(s, 2, torch.zeros(0, dtype=torch.long), torch.zeros(0, 2))
    assert torch.equal(s.cluster_of, torch.full((4,), -1))
    assert torch.equal(s.centres, centres)


def test_evaluate_local_reports_the_clients_own_models():
    s = _strategy(3, torch.zeros(2), evaluate="local")
    assert s.personalized_params(torch.arange(3)) is None
    assert s.configure_train(1, torch.arange(3)).params.shape == (3, 2)


# ---- end to end on a tiny federation ----------------------------------------------------

def _grouped_dataset(num_groups: int = 3, per_group: int = 2) -> FederatedDataset:
    r"""Three well separated blobs, one per class; group g labels blob c as (c + g) % 3,
    so groups need different classifiers."""
    g = torch.Generator().manual_seed(0)
    centres = 4.0 * torch.eye(3, 4)
    group = torch.arange(num_groups).repeat_interleave(per_group)

    def split(n: int) -> ClientSplit:
        xs, ys = [], []
        for grp in group.tolist():
            c = torch.arange(3).repeat(n)
            xs.append(centres[c] + 0.3 * torch.randn(c.numel(), 4, generator=g))
            ys.append((c + grp) % 3)
        return ClientSplit.from_lists(xs, ys)

    return FederatedDataset("grouped", "classification",
                            {"train": split(6), "val": split(2), "test": split(2)},
                            num_classes=3, client_labels=group)


def test_simulator_recovers_groups_and_records_rand_index():
    torch.manual_seed(0)
    scores = []
    sim = Simulator(_grouped_dataset(), nn.Linear(4, 3), FedCEDAR(num_clusters=3), rounds=3,
                    local=LocalConfig(lr=0.1, batch_size=6, epochs=2),
                    callbacks=[rand_index_callback(scores)], sample_fraction=1.0)
    history = sim.run()
    assert [s["round"] for s in scores] == [1, 2, 3]
    assert all(s["num_clustered"] == 6 for s in scores)
    assert scores[-1]["rand_index"] == 1.0
    assert history.records[-1].extra["rand_index"] == scores[-1]["rand_index"]
    assert "rand_index" in history.round_rows()[-1]


def test_simulator_runs_are_reproducible_with_partial_sampling():
    def run():
        torch.manual_seed(0)
        sim = Simulator(_grouped_dataset(per_group=3), nn.Linear(4, 3),
                        FedCEDAR(num_clusters=3), rounds=3, sample_fraction=0.5,
                        local=LocalConfig(lr=0.1, batch_size=6, epochs=1),
                        seed=2)
        sim.run()
        return sim.strategy.state_dict()

    a, b = run(), run()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert int((a["cluster_of"] >= 0).sum()) == 4               # round(0.5 * 9) clients


def test_rand_index_callback_errors():
    class NoClusters:
        pass

    class Sim:
        strategy = NoClusters()
        dataset = None

    with pytest.raises(TypeError, match="last_assignment"):
        rand_index_callback([])(Sim(), None)


# ---- the topology case-study dataset ------------------------------------------------------

def test_ring_topology_and_edges():
    assert ring_topology(3) == [[0, 1, 2], [2, 3, 4], [0, 4, 5]]
    assert topology_edges(ring_topology(3)) == [[0, 1], [0, 2], [1, 2]]
    assert topology_edges(ring_topology(4)) == [[0, 1], [0, 3], [1, 2], [2, 3]]
    with pytest.raises(ValueError, match="num_groups must be an int in"):
        ring_topology(6)


def test_topology_dataset_follows_its_groups():
    assert DATASETS["topology"] is topology
    data = load_dataset("topology", num_groups=3, num_clients=7, seed=1)
    assert data.num_clients == 7 and data.num_classes == 10
    assert data.client_labels.tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert data.info["groups"] == ring_topology(3)
    assert data.info["topology_edges"] == [[0, 1], [0, 2], [1, 2]]
    for split in ("train", "test"):
        sp = data.splits[split]
        for i in range(7):
            seen = set(sp.y[i, :int(sp.counts[i])].tolist())
            assert seen <= set(ring_topology(3)[int(data.client_labels[i])])
    # Every client sees all labels of its group in training.
    sp = data.splits["train"]
    assert set(sp.y[0, :int(sp.counts[0])].tolist()) == {0, 1, 2}


def test_topology_custom_groups_and_errors():
    data = topology(groups=[[1, 7], [7, 9]], num_clients=4)
    assert data.client_labels.tolist() == [0, 0, 1, 1]
    sp = data.splits["train"]
    labels = {int(v) for i in range(4) for v in sp.y[i, :int(sp.counts[i])]}
    assert labels == {1, 7, 9}
    with pytest.raises(ValueError, match="group 1 holds label 10"):
        topology(groups=[[0], [10]])
    with pytest.raises(ValueError, match="group 0 must be a non-empty list"):
        topology(groups=[[]])
    with pytest.raises(ValueError, match="num_clients must be an int >= the 3 groups"):
        topology(num_clients=2)
