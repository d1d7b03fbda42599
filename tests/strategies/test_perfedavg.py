"""Per-FedAvg: its meta steps by hand, alpha = 0 as FedAvg, one-step personalization."""
import pytest
import torch
from least_squares import client_xy, grad, hessian, least_squares_dataset, linear_model
from strategy_toys import two_group_dataset

from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, FedAvg, PerFedAvg, build_strategy
from pyg_fedgraph.train import ClientTrainer, LocalConfig
from pyg_fedgraph.train.jobs import FineTune
from pyg_fedgraph.train.rules import PerFedAvgHFStep, PerFedAvgStep

ALPHA, BETA = 0.1, 0.05


def test_registered_hparams_and_errors():
    assert STRATEGIES["per-fedavg"] is PerFedAvg
    assert build_strategy("per-fedavg").hparams() == {"alpha": 1e-3, "variant": "fo",
                                                      "beta": None, "weighted": True}
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        PerFedAvg(alpha=-1.0)
    with pytest.raises(ValueError, match="variant"):
        PerFedAvg(variant="so")


@pytest.mark.parametrize("hf", [False, True], ids=["fo", "hf"])
def test_one_meta_step_by_hand_on_least_squares(hf):
    # Full batches (B = n = 4) in steps mode: D, D' and D'' all hold every
    # sample, so one meta step is, with the closed-form gradient and Hessian,
    #   w~ = w - alpha g(w);  w <- w - beta (I - alpha H [hf]) g(w~).
    data = least_squares_dataset(1)
    k = 3 if hf else 2
    cfg = LocalConfig(lr=BETA, batch_size=4, epochs=None, steps=k)
    trainer = ClientTrainer(linear_model(), data, config=cfg)
    w = torch.tensor([[0.5, 0.25]])
    rule = (PerFedAvgHFStep if hf else PerFedAvgStep)(alpha=ALPHA)
    out = trainer.train(torch.tensor([0]), w, rule=rule)
    x, y = client_xy(data, 0)
    meta = grad(w[0] - ALPHA * grad(w[0], x, y), x, y)
    if hf:
        meta = meta - ALPHA * hessian(x) @ meta
    torch.testing.assert_close(out.params[0], w[0] - BETA * meta, atol=1e-6, rtol=0)
    assert out.steps.tolist() == [1]
    # The Hessian term matters: first order and Hessian-free differ.
    other = (PerFedAvgStep if hf else PerFedAvgHFStep)(alpha=ALPHA)
    cfg_other = LocalConfig(lr=BETA, batch_size=4, epochs=None, steps=5 - k)
    assert not torch.allclose(trainer.train(torch.tensor([0]), w, rule=other,
                                            config=cfg_other).params, out.params, atol=1e-5)


def _simulator(strategy, steps, data=None, model=None, rounds=3):
    torch.manual_seed(0)
    return Simulator(data or two_group_dataset(), model or MLP(2, 8, 2, num_layers=2),
                     strategy, rounds=rounds, seed=0,
                     local=LocalConfig(lr=0.2, batch_size=24, epochs=None, steps=steps))


def test_first_order_with_alpha_zero_is_fedavg():
    # Full batches of the 24 training samples: two meta steps of alpha = 0
    # are two SGD steps on the second batch of each pair, i.e. FedAvg's.
    per = _simulator(PerFedAvg(alpha=0.0), steps=4)
    fedavg = _simulator(FedAvg(), steps=2)
    per.run(), fedavg.run()
    torch.testing.assert_close(per.strategy.global_params, fedavg.strategy.global_params,
                               atol=1e-6, rtol=0)
    assert per.strategy.finetune_job() is None   # no personalization step either
    for split in ("val", "test"):
        assert per.history.mean(split) == pytest.approx(fedavg.history.mean(split), abs=1e-6)


def test_evaluation_takes_one_step_of_size_alpha_on_training_data():
    data = least_squares_dataset(3)
    sim = _simulator(PerFedAvg(alpha=ALPHA), steps=2, data=data, model=linear_model(),
                     rounds=2)
    sim.run()
    w = sim.strategy.global_params
    # A batch of 24 rows cycles 6 times through a client's 4 samples: a full
    # gradient step.
    personal, _ = sim.personalized_models()
    for i in range(3):
        x, y = client_xy(data, i)
        torch.testing.assert_close(personal[i], w - ALPHA * grad(w, x, y), atol=1e-6, rtol=0)


def test_plan_rule_beta_and_fine_tuning():
    sim = _simulator(PerFedAvg(alpha=0.01, variant="hf", beta=0.3), steps=3, rounds=1)
    plan = sim.strategy.configure_train(1, torch.tensor([0, 2]))
    assert isinstance(plan.rule, PerFedAvgHFStep) and plan.rule.alpha == 0.01
    assert plan.config.lr == 0.3 and plan.config.steps == 3   # beta; the run's other settings
    assert torch.equal(plan.params, sim.strategy.global_params.expand(2, -1))
    assert sim.strategy.finetune_job() == FineTune(steps=1, lr=0.01)
    sim = _simulator(PerFedAvg(), steps=2, rounds=1)   # beta=None: the run's settings
    assert sim.strategy.configure_train(1, torch.tensor([0])).config is None


def test_finetune_local_config():
    base = LocalConfig(lr=0.2, momentum=0.9, batch_size=8, epochs=5)
    one = FineTune(steps=1, lr=0.001).local_config(base)
    assert (one.steps, one.lr, one.momentum, one.batch_size) == (1, 0.001, 0.9, 8)
    two = FineTune(epochs=2).local_config(LocalConfig(steps=7))
    assert (two.epochs, two.steps, two.lr) == (2, None, 0.01)
    assert FineTune().local_config(base) is base


def test_uniform_average_when_not_weighted():
    # Client sample counts 24 vs 12: the uniform mean differs from the weighted.
    data = two_group_dataset()
    data.splits["train"].counts[2:] = 12
    runs = {}
    for weighted in (True, False):
        sim = _simulator(PerFedAvg(alpha=0.0, weighted=weighted), steps=2, data=data,
                         rounds=1)
        plan = sim.strategy.configure_train(1, torch.arange(4))
        sim.step()
        runs[weighted] = (sim.strategy.global_params, sim.local_params, plan)
    uniform = runs[False][1].mean(0)
    shares = torch.tensor([24.0, 24, 12, 12]) / 72
    torch.testing.assert_close(runs[False][0], uniform)
    torch.testing.assert_close(runs[True][0], shares @ runs[True][1])
