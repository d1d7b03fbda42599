import math

import pytest
import torch
from strategy_toys import two_group_dataset as _dataset

from pyg_fedgraph.cli import main
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.fedamp import HeurFedAMP, heur_fedamp_weights
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig


def _simulator(strategy, rounds=3, epochs=2, seed=0):
    torch.manual_seed(seed)
    model = MLP(2, 8, 2, num_layers=2)
    return Simulator(_dataset(), model, strategy, rounds=rounds, seed=seed,
                     local=LocalConfig(lr=0.1, batch_size=8, epochs=epochs))


def _context(n=3, d=2, init=None):
    layout = ParamLayout.from_module(torch.nn.Linear(d - 1, 1))  # d parameters
    init = torch.zeros(d) if init is None else init
    return FederationContext(num_clients=n, layout=layout, init_params=init,
                             num_samples=torch.ones(n, dtype=torch.long))


def test_registered_hparams_and_errors():
    assert STRATEGIES["heurfedamp"] is HeurFedAMP
    assert build_strategy("heurfedamp").hparams() == {
        "lam": 1.0, "alpha_k": 1.0, "sigma": 10.0, "self_weight": 0.3, "centered": True}
    assert str(HeurFedAMP(sigma=5.0)).startswith("HeurFedAMP(lam=1.0, alpha_k=1.0, sigma=5.0")
    with pytest.raises(ValueError, match="self_weight must be <= 1"):
        HeurFedAMP(self_weight=1.5)
    with pytest.raises(ValueError, match="alpha_k must be > 0"):
        HeurFedAMP(alpha_k=0.0)
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        HeurFedAMP(sigma=-1.0)
    with pytest.raises(ValueError, match="centered: expected true or false"):
        HeurFedAMP(centered="yes")
    with pytest.raises(ValueError, match="num_clients, num_params"):
        heur_fedamp_weights(torch.ones(3))


def test_weights_by_hand():
    # Clients 0 and 1 point the same way, client 2 is orthogonal to both.
    x = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    xi = heur_fedamp_weights(x, sigma=1.0, self_weight=0.3)
    e = math.e
    expected = torch.tensor([
        [0.3, 0.7 * e / (e + 1), 0.7 / (e + 1)],
        [0.7 * e / (e + 1), 0.3, 0.7 / (e + 1)],
        [0.35, 0.35, 0.3],
    ])
    assert torch.allclose(xi, expected, atol=1e-6)
    assert torch.allclose(xi.sum(1), torch.ones(3))
    # Closer clients get more weight, and a larger sigma sharpens it.
    sharp = heur_fedamp_weights(x, sigma=10.0, self_weight=0.3)
    assert sharp[0, 1] > xi[0, 1] > xi[0, 2] > sharp[0, 2]
    assert torch.allclose(sharp.diagonal(), torch.full((3,), 0.3))


def test_weights_permutation_equivariant_and_single_client():
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    perm = torch.tensor([3, 0, 4, 1, 2])
    xi = heur_fedamp_weights(x)
    assert torch.allclose(heur_fedamp_weights(x[perm]), xi[perm][:, perm], atol=1e-6)
    assert torch.equal(heur_fedamp_weights(x[:1]), torch.ones(1, 1))
    # A zero vector has cosine 0 to everyone: uniform weights over the others.
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert torch.allclose(heur_fedamp_weights(z)[0], torch.tensor([0.3, 0.35, 0.35]))


def test_aggregate_builds_cloud_models_and_graph():
    init = torch.tensor([1.0, 1.0])
    strategy = HeurFedAMP(sigma=1.0, self_weight=0.3)
    strategy.setup(_context(n=3, init=init))
    assert torch.equal(strategy.collaboration_graph(), torch.eye(3))
    x = torch.tensor([[2.0, 1.0], [3.0, 1.0], [1.0, 4.0]])
    strategy.aggregate_train(1, FederationGraph(x=x))
    xi = heur_fedamp_weights(x - init, sigma=1.0, self_weight=0.3)  # centered on init
    assert torch.allclose(strategy.collaboration_graph(), xi)
    assert torch.allclose(strategy.cloud_params, xi @ x)
    assert bool(strategy.has_cloud.all())
    # Uncentered: the cosine of the parameters themselves.
    raw = HeurFedAMP(sigma=1.0, centered=False)
    raw.setup(_context(n=3, init=init))
    raw.aggregate_train(1, FederationGraph(x=x))
    assert torch.allclose(raw.collaboration_graph(), heur_fedamp_weights(x, sigma=1.0))
    assert not torch.allclose(raw.collaboration_graph(), xi)


def test_partial_participation_updates_sampled_rows_only():
    strategy = HeurFedAMP(sigma=2.0)
    strategy.setup(_context(n=3))
    x = torch.tensor([[1.0, 0.5], [-1.0, 2.0]])
    strategy.aggregate_train(1, FederationGraph(x=x, client_id=torch.tensor([0, 2])))
    w = strategy.collaboration_graph()
    xi = heur_fedamp_weights(x, sigma=2.0)
    assert torch.allclose(w[[0, 2]][:, [0, 2]], xi)
    assert torch.equal(w[1], torch.tensor([0.0, 1.0, 0.0]))
    assert w[:, 1].tolist() == [0.0, 1.0, 0.0]
    assert torch.allclose(w.sum(1), torch.ones(3))
    assert strategy.has_cloud.tolist() == [True, False, True]
    assert torch.equal(strategy.cloud_params[1], torch.zeros(2))


def test_plan_proximal_term():
    strategy = HeurFedAMP(lam=2.0, alpha_k=4.0)
    strategy.setup(_context(n=3))
    clients = torch.tensor([0, 1])
    plan = strategy.configure_train(1, clients)
    assert plan.params is None  # clients continue from their own models
    cloud, coefficient = plan.regularizer.refs
    assert coefficient.tolist() == [0.0, 0.0]  # no cloud model yet
    strategy.aggregate_train(1, FederationGraph(x=torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
                                                client_id=torch.tensor([0, 2])))
    plan = strategy.configure_train(2, clients)
    cloud, coefficient = plan.regularizer.refs
    assert coefficient.tolist() == [0.5, 0.0]  # lam / alpha_k for client 0 only
    assert torch.equal(cloud[0], strategy.cloud_params[0])
    theta = cloud[0] + torch.tensor([1.0, 2.0])
    # lam / (2 alpha_k) ||theta - u||^2 = 0.25 * 5
    assert plan.regularizer.penalty(theta, cloud[0], coefficient[0]).item() == pytest.approx(1.25)


def _distance_to_cloud(lam):
    sim = _simulator(HeurFedAMP(lam=lam), rounds=2, epochs=4)
    sim.step()
    cloud = sim.strategy.cloud_params.clone()
    sim.step()
    return (sim.local_params - cloud).norm(dim=1)


def test_large_lambda_keeps_models_near_cloud():
    free = _distance_to_cloud(0.0)
    tied = _distance_to_cloud(10.0)  # lr * lam / alpha_k = 1: stable
    assert bool((tied < 0.5 * free).all())


def test_groups_attend_to_each_other_in_simulation():
    sim = _simulator(HeurFedAMP(), rounds=2)
    sim.run()
    w = sim.strategy.collaboration_graph()
    assert torch.allclose(w.sum(1), torch.ones(4), atol=1e-6)
    # Clients 0, 1 share a labelling, as do 2, 3.
    assert w[0, 1] > w[0, 2] and w[0, 1] > w[0, 3]
    assert w[2, 3] > w[2, 0] and w[2, 3] > w[2, 1]
    assert sim.strategy.personalized_params(torch.arange(4)) is None


def test_state_dict_round_trip():
    sim = _simulator(HeurFedAMP(), rounds=2)
    sim.run()
    state = sim.strategy.state_dict()
    assert set(state) == {"init_params", "cloud_params", "has_cloud", "weights"}
    fresh = HeurFedAMP()
    fresh.setup(sim.strategy.ctx)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.collaboration_graph(), sim.strategy.collaboration_graph())
    clients = torch.tensor([1, 3])
    a = fresh.configure_train(3, clients).regularizer.refs
    b = sim.strategy.configure_train(3, clients).regularizer.refs
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


@pytest.mark.parametrize("dataset", ["fl60", "digits"])
def test_cli_runs(tmp_path, dataset):
    assert main(["run", "--dataset", dataset, "--strategy", "heurfedamp", "--rounds", "2",
                 "--set", "steps=2", "--out", str(tmp_path), "--quiet"]) == 0
