import pytest
import torch
from strategy_toys import two_group_dataset as _dataset

from pyg_fedgraph.cli import main
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.fedavg import FedAvg
from pyg_fedgraph.strategies.fedprox import FedProx, FedProxFT, proximal_term
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig


def _simulator(strategy, rounds=3, lr=0.1, epochs=2, parallel=True, seed=0):
    torch.manual_seed(seed)
    model = MLP(2, 8, 2, num_layers=2)
    return Simulator(_dataset(), model, strategy, rounds=rounds, seed=seed,
                     local=LocalConfig(lr=lr, batch_size=8, epochs=epochs), parallel=parallel)


def test_registered_hparams_and_errors():
    assert STRATEGIES["fedprox"] is FedProx
    assert STRATEGIES["fedprox-ft"] is FedProxFT
    assert build_strategy("fedprox").hparams() == {"mu": 0.01}
    assert build_strategy("fedprox-ft", mu=0.1, finetune_epochs=2).hparams() == {
        "mu": 0.1, "finetune_epochs": 2, "finetune_from": "global"}
    # finetune_from="local": the model after the (proximal) local training, no extra job.
    local = FedProxFT(finetune_from="local")
    assert local.finetune_job() is None and local.personalized_params(torch.arange(2)) is None
    assert str(FedProx(mu=0.5)) == "FedProx(mu=0.5)"
    assert FedProxFT().finetune_job() is not None and FedProx().finetune_job() is None
    with pytest.raises(ValueError, match="mu must be >= 0"):
        FedProx(mu=-1.0)
    with pytest.raises(ValueError, match="finetune_epochs"):
        FedProxFT(finetune_epochs=-1)
    with pytest.raises(RuntimeError, match="setup"):
        FedProx().configure_train(1, torch.arange(2))


def test_proximal_term_by_hand():
    theta = torch.tensor([1.0, 2.0, -1.0])
    ref = torch.tensor([0.0, 1.0, 1.0])
    # ||theta - ref||^2 = 1 + 1 + 4 = 6
    assert proximal_term(theta, ref, 0.5).item() == pytest.approx(0.25 * 6)
    grad = torch.func.grad(proximal_term)(theta, ref, 0.5)
    assert torch.allclose(grad, 0.5 * (theta - ref))


def test_plan_regularizes_towards_global():
    sim = _simulator(FedProx(mu=0.3), rounds=1)
    strategy = sim.strategy
    clients = torch.tensor([0, 2])
    plan = strategy.configure_train(1, clients)
    assert torch.equal(plan.params, strategy.global_params.expand(2, -1))
    (ref,) = plan.regularizer.refs
    assert torch.equal(ref, plan.params)
    theta = ref[0] + 1.0
    assert plan.regularizer.penalty(theta, ref[0]).item() == pytest.approx(
        0.5 * 0.3 * ref.size(1), rel=1e-5)


def test_mu_zero_equals_fedavg():
    a = _simulator(FedAvg(), rounds=3)
    b = _simulator(FedProx(mu=0.0), rounds=3)
    ha, hb = a.run(), b.run()
    assert torch.equal(a.strategy.global_params, b.strategy.global_params)
    assert torch.equal(a.local_params, b.local_params)
    for ra, rb in zip(ha.records, hb.records, strict=True):
        assert ra.train_loss == rb.train_loss
        for key in ra.test:
            assert torch.equal(ra.test[key], rb.test[key])
    # A positive mu changes the run.
    c = _simulator(FedProx(mu=1.0), rounds=3)
    c.run()
    assert not torch.equal(a.strategy.global_params, c.strategy.global_params)


def _local_distance(mu):
    sim = _simulator(FedProx(mu=mu), rounds=2, epochs=6)
    sim.step()
    start = sim.strategy.global_params.clone()  # what the clients receive in round 2
    sim.step()
    return (sim.local_params - start).norm(dim=1)


def test_large_mu_keeps_local_models_near_global():
    free = _local_distance(0.0)
    tied = _local_distance(10.0)  # lr * mu = 1: stable
    assert bool((free > 0.3).all())
    assert bool((tied < 0.25 * free).all())


def test_parallel_matches_reference_loop():
    a = _simulator(FedProx(mu=0.5), rounds=2, parallel=True)
    b = _simulator(FedProx(mu=0.5), rounds=2, parallel=False)
    a.run(), b.run()
    assert torch.allclose(a.strategy.global_params, b.strategy.global_params, atol=1e-5)


def test_fedprox_ft_evaluates_finetuned_models():
    sim = _simulator(FedProxFT(mu=0.1, finetune_epochs=1), rounds=1)
    sim.run()
    params, _ = sim.personalized_models()
    glob = sim.strategy.global_params
    assert not torch.allclose(params, glob.expand_as(params))
    assert torch.equal(sim.strategy.personalized_params(torch.arange(4)),
                       glob.expand(4, -1))


def test_state_dict_round_trip():
    sim = _simulator(FedProx(mu=0.1), rounds=2)
    sim.run()
    state = sim.strategy.state_dict()
    fresh = FedProx(mu=0.1)
    fresh.setup(sim.strategy.ctx)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.global_params, sim.strategy.global_params)
    clients = torch.tensor([1, 3])
    assert torch.equal(fresh.configure_train(3, clients).params,
                       sim.strategy.configure_train(3, clients).params)


@pytest.mark.parametrize("strategy", ["fedprox", "fedprox-ft"])
@pytest.mark.parametrize("dataset", ["fl60", "digits"])
def test_cli_runs(tmp_path, dataset, strategy):
    assert main(["run", "--dataset", dataset, "--strategy", strategy, "--rounds", "2",
                 "--set", "steps=2", "--out", str(tmp_path), "--quiet"]) == 0
