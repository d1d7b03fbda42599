"""pFedMe: K inner steps by hand, the server's beta step, personalized models."""
import pytest
import torch
from least_squares import client_xy, grad, least_squares_dataset, linear_model
from strategy_toys import aggregate

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, PFedMe, build_strategy
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.train import ClientTrainer, LocalConfig
from pyg_fedgraph.train.rules import PFedMeStep


def test_registered_hparams_and_errors():
    assert STRATEGIES["pfedme"] is PFedMe
    # pFedGraph's settings (appendix C.1.4): beta 1, lambda 15, K 5.
    assert build_strategy("pfedme").hparams() == {"lam": 15.0, "inner_lr": 0.01,
                                                  "inner_steps": 5, "beta": 1.0,
                                                  "weighted": True}
    with pytest.raises(ValueError, match="inner_steps must be >= 1"):
        PFedMe(inner_steps=0)


def test_k_inner_steps_against_a_hand_run_loop():
    # Two local steps on full batches (B = n = 4), K = 3 inner steps each, by hand.
    data = least_squares_dataset(1)
    lam, nu, eta, k = 2.0, 0.05, 0.1, 3
    trainer = ClientTrainer(linear_model(), data,
                            config=LocalConfig(lr=eta, batch_size=4, epochs=None, steps=2))
    w0 = torch.tensor([[0.5, 0.25]])
    out = trainer.train(torch.tensor([0]), w0, rule=PFedMeStep(lam, nu, k))
    x, y = client_xy(data, 0)
    w, theta = w0[0].clone(), w0[0].clone()
    for _ in range(2):
        for _ in range(k):
            theta = theta - nu * (grad(theta, x, y) + lam * (theta - w))
        w = w - eta * lam * (w - theta)
    torch.testing.assert_close(out.params[0], w, atol=1e-6, rtol=0)
    torch.testing.assert_close(out.extra["personal_x"][0], theta, atol=1e-6, rtol=0)
    # The personalized model fits the client better than the local model w.
    loss = lambda v: float((x @ v - y.view(-1)).pow(2).mean())  # noqa: E731
    assert loss(theta) < loss(w)


def _strategy(beta=0.5, weighted=True, held_out=()):
    layout = ParamLayout.from_module(torch.nn.Linear(2, 1, bias=False))
    ctx = FederationContext(num_clients=4, layout=layout, init_params=torch.zeros(2),
                            num_samples=torch.tensor([1, 3, 2, 2]),
                            held_out=torch.tensor(held_out, dtype=torch.long))
    strategy = PFedMe(beta=beta, weighted=weighted)
    strategy.setup(ctx)
    return strategy


def test_server_step_and_personalized_models():
    strategy = _strategy(beta=0.5, held_out=(3,))
    strategy.global_params = torch.tensor([1.0, 1.0])
    x = torch.tensor([[2.0, 0.0], [6.0, 4.0]])
    personal = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    graph = FederationGraph(x=x, num_samples=torch.tensor([1, 3]),
                            client_id=torch.tensor([0, 1]), personal_x=personal)
    aggregate(strategy, 1, graph)
    # w <- (1 - beta) w + beta sum p_i w_i with p = (1/4, 3/4): mean (5, 3).
    torch.testing.assert_close(strategy.global_params, torch.tensor([3.0, 2.0]))
    out = strategy.personalized_params(torch.tensor([1, 0, 2, 3]))
    # Trained clients their theta_i; client 2 (never trained) and the held-out 3 the global.
    torch.testing.assert_close(out, torch.tensor([[-3.0, -4.0], [-1.0, -2.0],
                                                  [3.0, 2.0], [3.0, 2.0]]))
    plan = strategy.configure_train(2, torch.tensor([2]))
    assert plan.rule == PFedMeStep(15.0, 0.01, 5) and plan.outputs == ("personal_x",)
    with pytest.raises(ValueError, match="graph.personal_x"):
        strategy.aggregate_train(2, FederationGraph(x=x, client_id=torch.tensor([0, 1])))


def test_uniform_server_mean_when_not_weighted():
    strategy = _strategy(beta=1.0, weighted=False)
    x = torch.tensor([[2.0, 0.0], [6.0, 4.0]])
    aggregate(strategy, 1, FederationGraph(x=x, num_samples=torch.tensor([1, 3]),
                                           client_id=torch.tensor([0, 1]), personal_x=x))
    torch.testing.assert_close(strategy.global_params, torch.tensor([4.0, 2.0]))


def test_simulated_rounds_keep_each_clients_personalized_model():
    data = least_squares_dataset(3)
    torch.manual_seed(0)
    sim = Simulator(data, linear_model(), PFedMe(lam=2.0, inner_lr=0.05, inner_steps=2),
                    rounds=2, sample_fraction=2 / 3,
                    local=LocalConfig(lr=0.1, batch_size=4, epochs=1))
    sampled = sim.engine.sample(1)
    sim.step()
    trained = torch.zeros(3, dtype=torch.bool)
    trained[sampled] = True
    out = sim.strategy.personalized_params(torch.arange(3))
    assert torch.equal(out[~trained], sim.strategy.global_params.expand(1, -1))
    assert not torch.allclose(out[trained], sim.local_params[trained], atol=1e-4)
    assert torch.equal(out[trained], sim.strategy.personal_params[trained])


def test_settings_that_diverge_are_refused():
    # |1 - 0.01 * 15|^5 |1 - 0.5 * 15| = 0.444 * 6.5 > 1: the gap w - theta grows.
    data = least_squares_dataset(2)
    with pytest.raises(ValueError, match=r"pFedMe diverges with lr=0.5, lam=15.*multiplies "
                                         r"the gap .* by 2\.88 >= 1; lower lr \(below 0\.133"):
        Simulator(data, linear_model(), PFedMe(), rounds=1,
                  local=LocalConfig(lr=0.5))
    Simulator(data, linear_model(), PFedMe(lam=1.0), rounds=1,
              local=LocalConfig(lr=0.5))
