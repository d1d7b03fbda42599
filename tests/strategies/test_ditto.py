import pytest
import torch
from strategy_toys import two_group_dataset as _dataset
from torch import nn

from pyg_fedgraph.cli import main
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.ditto import Ditto
from pyg_fedgraph.strategies.fedavg import FedAvg
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.jobs import PersonalTraining


def _simulator(strategy, rounds=3, lr=0.1, model=None, held_out=None, seed=0):
    torch.manual_seed(seed)
    model = model if model is not None else MLP(2, 8, 2, num_layers=2)
    return Simulator(_dataset(), model, strategy, rounds=rounds, seed=seed,
                     local=LocalConfig(lr=lr, batch_size=8, epochs=2), held_out=held_out)


def test_registered_hparams_and_errors():
    assert STRATEGIES["ditto"] is Ditto
    assert build_strategy("ditto").hparams() == {"lam": 1.0}
    assert str(Ditto(lam=0.5)) == "Ditto(lam=0.5)"
    with pytest.raises(ValueError, match="lam must be >= 0"):
        Ditto(lam=-0.1)


def test_plan_has_personal_job():
    sim = _simulator(Ditto(lam=2.0), rounds=1)
    strategy = sim.strategy
    strategy.personal_params[2] += 1.0
    clients = torch.tensor([0, 2])
    plan = strategy.configure_train(1, clients)
    assert torch.equal(plan.params, strategy.global_params.expand(2, -1))
    assert plan.regularizer is None
    (personal,) = plan.jobs
    assert isinstance(personal, PersonalTraining)
    assert torch.equal(personal.params, strategy.personal_params[clients])
    (ref,) = personal.regularizer.refs
    assert torch.equal(ref, plan.params)
    # lam/2 ||v - theta||^2 with v = theta + 1 everywhere.
    v = ref[1] + 1.0
    assert personal.regularizer.penalty(v, ref[1]).item() == pytest.approx(
        ref.size(1), rel=1e-5)


def test_global_model_is_fedavg_in_round_one():
    # The personal job runs after the main one, so round 1's global model is
    # exactly FedAvg's; the personalized models differ from it.
    a = _simulator(FedAvg(), rounds=1)
    b = _simulator(Ditto(lam=0.1), rounds=1)
    a.step(), b.step()
    assert torch.equal(a.strategy.global_params, b.strategy.global_params)
    assert torch.equal(a.local_params, b.local_params)
    personal = b.strategy.personalized_params(torch.arange(4))
    assert not torch.allclose(personal, b.strategy.global_params.expand(4, -1), atol=1e-3)
    assert not torch.allclose(personal, b.local_params, atol=1e-3)


def test_simulator_attaches_personal_x():
    seen = {}

    class Spy(Ditto):
        def aggregate_train(self, rnd, graph):
            seen["personal_x"] = graph.personal_x.clone()
            seen["x"] = graph.x.clone()
            super().aggregate_train(rnd, graph)

    sim = _simulator(Spy(lam=1.0), rounds=1)
    init = sim.strategy.personal_params.clone()
    sim.step()
    assert seen["personal_x"].shape == seen["x"].shape == (4, sim.layout.num_params)
    assert torch.equal(sim.strategy.personal_params, seen["personal_x"])
    assert not torch.equal(seen["personal_x"], init)
    assert not torch.equal(seen["personal_x"], seen["x"])


def _personal_distance(lam):
    sim = _simulator(Ditto(lam=lam), rounds=2)
    sim.step()
    received = sim.strategy.global_params.clone()  # the reference of round 2
    sim.step()
    return (sim.strategy.personal_params - received).norm(dim=1).mean()


def test_large_lambda_ties_personal_to_global():
    d = [_personal_distance(lam) for lam in (0.0, 1.0, 10.0)]  # lr * lam <= 1: stable
    assert d[0] > d[1] > d[2]
    assert d[2] < 0.2 * d[0]


def test_batchnorm_buffers_of_main_job_are_kept():
    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))

    a = _simulator(FedAvg(), rounds=1, model=model())
    b = _simulator(Ditto(lam=1.0), rounds=1, model=model())
    a.step(), b.step()
    assert b.local_buffers.abs().sum() > 0
    assert torch.equal(a.local_buffers, b.local_buffers)


def test_held_out_clients_get_global_model():
    sim = _simulator(Ditto(lam=1.0), rounds=2, held_out=torch.tensor([3]))
    sim.run()
    out = sim.strategy.personalized_params(torch.arange(4))
    assert torch.equal(out[3], sim.strategy.global_params)
    assert torch.equal(out[:3], sim.strategy.personal_params[:3])


def test_errors_without_personal_results():
    sim = _simulator(Ditto(), rounds=1)
    graph = FederationGraph(x=sim.local_params[:2].clone(), client_id=torch.arange(2))
    with pytest.raises(ValueError, match="personal_x"):
        sim.strategy.aggregate_train(1, graph)

    class NoStart(Ditto):
        def configure_train(self, rnd, clients):
            plan = super().configure_train(rnd, clients)
            plan.jobs = (PersonalTraining(params=None),)
            return plan

    with pytest.raises(ValueError, match="personal-training job without params"):
        _simulator(NoStart(), rounds=1).step()


def test_state_dict_round_trip():
    sim = _simulator(Ditto(lam=0.5), rounds=2)
    sim.run()
    state = sim.strategy.state_dict()
    assert set(state) == {"global_params", "personal_params"}
    fresh = Ditto(lam=0.5)
    fresh.setup(sim.strategy.ctx)
    fresh.load_state_dict(state)
    everyone = torch.arange(4)
    assert torch.equal(fresh.personalized_params(everyone),
                       sim.strategy.personalized_params(everyone))
    assert torch.equal(fresh.global_params, sim.strategy.global_params)


@pytest.mark.parametrize("dataset", ["fl60", "digits"])
def test_cli_runs(tmp_path, dataset):
    assert main(["run", "--dataset", dataset, "--strategy", "ditto", "--rounds", "2",
                 "--set", "steps=2", "--out", str(tmp_path), "--quiet"]) == 0
