"""pFedLA: per-client hypernetworks, layer-wise aggregation and the hypernetwork rule."""
import pytest
import torch
import torch.nn.functional as F
from strategy_toys import two_group_dataset
from torch.func import functional_call

from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.nn import LayerAggregationHypernetwork, layerwise_aggregate
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, FedAvg, PFedLA, build_strategy
from pyg_fedgraph.train import LocalConfig

LOCAL = LocalConfig(lr=0.2, batch_size=8, epochs=2)


def _simulator(strategy, rounds=3, seed=0, local=LOCAL):
    torch.manual_seed(seed)
    return Simulator(two_group_dataset(), MLP(2, 8, 2, num_layers=2), strategy, rounds=rounds,
                     local=local, seed=seed)


def _reference_alpha(hn, i):
    r"""Client i's hypernetwork written as the networks it stacks."""
    h = hn.embedding[i]
    for weight, bias in zip(hn.mlp_weights, hn.mlp_biases, strict=True):
        h = F.relu(F.linear(h, weight[i], bias[i]))
    rows = []
    for layer in range(hn.num_layers):
        a = F.relu(F.linear(h, hn.head_weight[i, layer], hn.head_bias[i, layer]))
        rows.append(a / a.sum() if float(a.sum().detach()) > 0 else F.one_hot(torch.tensor(i),
                                                                       hn.num_clients).float())
    return torch.stack(rows)


def test_layerwise_aggregate_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0], [5.0, 6.0, 7.0], [0.0, 0.0, 1.0]])
    ptr = torch.tensor([0, 2, 3])  # layer 0: two parameters, layer 1: one
    alpha = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]],
                          [[1.0, 0.0, 0.0], [0.25, 0.25, 0.5]]])
    out = layerwise_aggregate(x, alpha, ptr)
    torch.testing.assert_close(out, torch.tensor([[3.0, 4.0, 1.0], [1.0, 2.0, 3.0]]))
    with pytest.raises(ValueError, match=r"alpha must be \(S, 2, 3\)"):
        layerwise_aggregate(x, alpha[:, :1], ptr)


def test_batched_hypernetworks_equal_one_network_per_client():
    hn = LayerAggregationHypernetwork(5, 3, embedding_dim=4, hidden_channels=6)
    hn.reset_parameters(torch.Generator().manual_seed(0))
    with torch.no_grad():  # client 3's layer 1 scores are all negative: it keeps its own
        hn.head_bias[3, 1] = -1e3
    clients = torch.tensor([4, 0, 3])
    alpha = hn(clients)
    assert alpha.shape == (3, 3, 5)
    for row, i in enumerate(clients.tolist()):
        torch.testing.assert_close(alpha[row], _reference_alpha(hn, i))
    torch.testing.assert_close(alpha.sum(-1), torch.ones(3, 3))
    assert alpha[2, 1].tolist() == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert bool((alpha >= 0).all())
    with pytest.raises(ValueError, match=r"client ids must lie in \[0, 5\)"):
        hn(torch.tensor([5]))
    assert str(hn) == ("LayerAggregationHypernetwork(num_clients=5, num_layers=3, "
                       "embedding_dim=4, hidden_channels=6)")


def test_hypernetwork_gradient_equals_autograd_through_the_round():
    # One full-batch SGD step per round: -delta_i = lr * grad F_i(theta_i), so the rule's
    # gradient (d theta / d phi)^T (-delta) is lr * d/dphi sum_i F_i(theta_i(phi)).
    local = LocalConfig(lr=0.1, batch_size=24, epochs=1)  # every client has 24 samples
    sim = _simulator(PFedLA(embedding_dim=4, hidden_channels=8, hn_lr=0.1), rounds=2,
                     local=local)
    sim.step()  # the clients' models now differ, so theta depends on the weights
    strategy = sim.strategy
    hn = strategy.hypernetwork
    models = strategy.ctx.table.params.clone()
    phi = [p.detach().clone().requires_grad_(True) for p in hn.parameters()]
    captured = []
    step = strategy.server_optimizer.step

    def spy():
        captured.extend(p.grad.clone() for p in hn.parameters())
        step()

    strategy.server_optimizer.step = spy
    sim.step()
    # The same round by hand: alpha from a copy of the hypernetworks, the loss of
    # every client's start on its whole training set, plain autograd.
    copy = LayerAggregationHypernetwork(4, strategy.ctx.layout.num_layers, 4, 8)
    names = [n for n, _ in hn.named_parameters()]
    data, layout, model = sim.dataset, sim.layout, sim.trainer.model
    total = 0.0
    for i in range(4):
        alpha = functional_call(copy, dict(zip(names, phi, strict=True)), (torch.tensor([i]),))
        theta = layerwise_aggregate(models, alpha, layout.ptr)[0]
        x, y = data.batch("train", torch.arange(24).view(1, -1), torch.tensor([i]))
        out = functional_call(model, layout.unflatten(theta), (x[0],))
        total = total + local.lr * F.cross_entropy(out, y[0])
    expected = torch.autograd.grad(total, phi)
    assert len(captured) == len(expected)
    for got, want, name in zip(captured, expected, names, strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4, msg=name)
    assert float(torch.stack([g.abs().sum() for g in expected]).sum()) > 0


def test_groups_learn_to_weigh_each_other():
    # Opposite label maps in two groups: clients aggregate their own group more.
    sim = _simulator(PFedLA(hn_lr=0.5), rounds=8)
    fedavg = _simulator(FedAvg(), rounds=8)
    sim.run(), fedavg.run()
    w = sim.strategy.collaboration_graph()
    torch.testing.assert_close(w.sum(1), torch.ones(4))
    same = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    assert bool((w[same].view(4, 2).min(1).values > w[~same].view(4, 2).max(1).values).all())
    assert sim.summary()["test"] > fedavg.summary()["test"] + 0.2
    assert sim.strategy.layer_graphs().shape == (2, 4, 4)


def test_first_round_starts_from_the_initial_model():
    sim = _simulator(PFedLA(), rounds=1)
    plan = sim.strategy.configure_train(1, torch.arange(4))
    torch.testing.assert_close(plan.params, sim.strategy.ctx.init_params.expand(4, -1))


def test_options_and_errors():
    assert STRATEGIES["pfedla"] is PFedLA
    assert build_strategy("pfedla").hparams() == {"embedding_dim": 100, "hidden_channels": 100,
                                                  "hn_lr": 0.005, "hn_momentum": 0.0}
    with pytest.raises(ValueError, match="hn_lr must be > 0"):
        PFedLA(hn_lr=0.0)
    with pytest.raises(RuntimeError, match=r"setup\(\) must be called first"):
        PFedLA().personalize(torch.arange(2))
