import json

import pytest
import torch
from strategy_toys import aggregate, context_copy
from strategy_toys import two_group_dataset as _two_group_dataset

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.nn.aghn_conv import AGHNConv
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.fedaghn import FedAGHN
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig


def _simulator(strategy, held_out=None, seed=0):
    torch.manual_seed(seed)
    model = MLP(2, 8, 2, num_layers=2)
    return Simulator(_two_group_dataset(), model, strategy, rounds=4,
                     local=LocalConfig(lr=0.1, batch_size=8, epochs=3), seed=seed,
                     held_out=held_out)


def _context(n=4, seed=0):
    torch.manual_seed(seed)
    model = MLP(2, 3, 2, num_layers=2)
    from pyg_fedgraph.data.layout import ParamLayout
    layout = ParamLayout.from_module(model)
    return FederationContext(num_clients=n, layout=layout, init_params=layout.flatten(model),
                             num_samples=torch.ones(n, dtype=torch.long))


def _graph(strategy, clients, start, seed):
    gen = torch.Generator().manual_seed(seed)
    delta = 0.1 * torch.randn(start.shape, generator=gen)
    return FederationGraph(x=start + delta, delta=delta, client_id=clients,
                           layout=strategy.ctx.layout)


def _params(strategy):
    return (strategy.conv.sharpness.detach().clone(),
            strategy.conv.self_weight.detach().clone())


def test_registered_and_hparams():
    assert STRATEGIES["fedaghn"] is FedAGHN
    strategy = build_strategy("fedaghn", sharpness=10.0, self_weight=0.03)
    assert strategy.hparams() == {"sharpness": 10.0, "self_weight": 0.03, "hn_lr": 0.005,
                                  "hn_momentum": 0.0, "self_weight_min": 0.0,
                                  "hn_rule": "pfedhn"}
    assert str(strategy).startswith("FedAGHN(sharpness=10.0, self_weight=0.03")


def test_constructor_errors():
    with pytest.raises(ValueError, match="hn_lr must be > 0"):
        FedAGHN(hn_lr=0.0)
    with pytest.raises(ValueError, match="hn_momentum"):
        FedAGHN(hn_momentum=1.0)
    with pytest.raises(ValueError, match="below self_weight_min"):
        FedAGHN(self_weight=0.01, self_weight_min=0.05)
    with pytest.raises(RuntimeError, match="setup"):
        FedAGHN().configure_train(1, torch.arange(2))


def test_round_one_is_uniform_and_skips_the_hypernetwork_step():
    strategy = FedAGHN()
    ctx = _context()
    strategy.setup(ctx)
    assert strategy.collaboration_graph() is None and strategy.layer_graphs() is None
    clients = torch.arange(4)
    plan = strategy.configure_train(1, clients)
    torch.testing.assert_close(plan.params, ctx.init_params.expand(4, -1))
    torch.testing.assert_close(strategy.layer_graphs(), torch.full((2, 4, 4), 0.25))
    p, q = _params(strategy)
    graph = _graph(strategy, clients, plan.params, seed=1)
    aggregate(strategy, 1, graph)
    torch.testing.assert_close(_params(strategy)[0], p)
    torch.testing.assert_close(_params(strategy)[1], q)
    torch.testing.assert_close(strategy.ctx.table.params, graph.x)
    torch.testing.assert_close(strategy.last_delta, graph.delta)
    assert bool(strategy.ctx.table.trained.all())


@pytest.mark.parametrize("momentum, rule", [(0.0, "pfedhn"), (0.9, "pfedhn"), (0.0, "code")])
def test_update_matches_hand_run_autograd(momentum, rule):
    strategy = FedAGHN(sharpness=2.0, self_weight=0.2, hn_lr=0.05, hn_momentum=momentum,
                       hn_rule=rule)
    strategy.setup(_context())
    everyone = torch.arange(4)
    plan = strategy.configure_train(1, everyone)
    aggregate(strategy, 1, _graph(strategy, everyone, plan.params, seed=1))

    # Round 2 with only clients 1 and 3 sampled.
    theta, last_delta = strategy.ctx.table.params.clone(), strategy.last_delta.clone()
    p0, q0 = _params(strategy)
    sampled = torch.tensor([1, 3])
    plan = strategy.configure_train(2, sampled)
    graph = _graph(strategy, sampled, plan.params, seed=2)
    aggregate(strategy, 2, graph)

    conv = AGHNConv(4, 2)
    with torch.no_grad():
        conv.sharpness.copy_(p0)
        conv.self_weight.copy_(q0)
    out = conv(theta, delta=last_delta, layer_ptr=strategy.ctx.layout.ptr)
    torch.testing.assert_close(plan.params, out[sampled].detach())
    # pFedHN's rule feeds -delta (pull theta_tilde towards the trained model); the
    # authors' code feeds +delta.
    sign = -1.0 if rule == "pfedhn" else 1.0
    grad_p, grad_q = torch.autograd.grad(out[sampled], [conv.sharpness, conv.self_weight],
                                         grad_outputs=sign * graph.delta)
    p1, q1 = _params(strategy)
    # First step with a gradient: the momentum buffer is the gradient itself.
    torch.testing.assert_close(p1, p0 - 0.05 * grad_p)
    torch.testing.assert_close(q1, (q0 - 0.05 * grad_q).clamp(min=0.0))
    # Only the sampled clients' rows have a gradient; p and q really moved.
    assert grad_p[[0, 2]].abs().sum() == 0 and grad_q[[0, 2]].abs().sum() == 0
    assert (p1[sampled] != p0[sampled]).any() and (q1[sampled] != q0[sampled]).all()
    # Node features of sampled clients are their trained models, others kept.
    torch.testing.assert_close(strategy.ctx.table.params[sampled], graph.x)
    torch.testing.assert_close(strategy.ctx.table.params[[0, 2]], theta[[0, 2]])


def test_code_rule_steps_opposite_to_pfedhn():
    steps = {}
    for rule in ("pfedhn", "code"):
        strategy = FedAGHN(sharpness=2.0, self_weight=0.2, hn_lr=0.01, hn_rule=rule)
        strategy.setup(_context())
        everyone = torch.arange(4)
        for rnd in (1, 2):
            plan = strategy.configure_train(rnd, everyone)
            aggregate(strategy, rnd, _graph(strategy, everyone, plan.params, seed=rnd))
        p, q = _params(strategy)
        steps[rule] = (p - 2.0, q - 0.2)
    # Same state before the first hypernetwork step (round 2), opposite steps.
    torch.testing.assert_close(steps["code"][0], -steps["pfedhn"][0])
    torch.testing.assert_close(steps["code"][1], -steps["pfedhn"][1])
    assert steps["code"][0].abs().sum() > 0


def test_self_weight_is_clamped_after_the_step():
    strategy = FedAGHN(self_weight=0.1, self_weight_min=0.05, hn_lr=100.0)
    strategy.setup(_context())
    everyone = torch.arange(4)
    for rnd in (1, 2):
        plan = strategy.configure_train(rnd, everyone)
        # Updates pointing back to the clients' own initial models push q up or
        # down by a lot; whichever way, the table stays above the threshold.
        aggregate(strategy, rnd, _graph(strategy, everyone, plan.params, seed=rnd))
    q = strategy.conv.self_weight.detach()
    assert (q >= 0.05).all() and (q != 0.1).any()


def test_simulation_updates_hypernetwork_from_round_two():
    strategy = FedAGHN(sharpness=5.0, self_weight=0.1, hn_lr=0.05)
    sim = _simulator(strategy)
    p0, q0 = _params(strategy)
    sim.step()
    p1, q1 = _params(strategy)
    assert torch.equal(p1, p0) and torch.equal(q1, q0)
    sim.step()
    p2, q2 = _params(strategy)
    assert not torch.equal(p2, p1) and not torch.equal(q2, q1)
    # The evaluated models are the clients' own locally trained models.
    assert strategy.personalized_params(torch.arange(4)) is None
    torch.testing.assert_close(strategy.ctx.table.params, sim.local_params)

    sim.run(3)
    # Weights of round 4 come from the p, q after round 3.
    q = strategy.conv.self_weight.detach().clone()
    sim.step()
    graph = strategy.collaboration_graph()
    assert graph.shape == (4, 4)
    torch.testing.assert_close(graph.sum(dim=1), torch.ones(4))
    layers = strategy.layer_graphs()
    assert layers.shape == (2, 4, 4)
    torch.testing.assert_close(layers.mean(dim=0), graph)
    # Self share is q / (1 + q) in every layer.
    torch.testing.assert_close(torch.diagonal(layers, dim1=1, dim2=2), (q / (1 + q)).t())
    # Opposite label maps: the output layer prefers the client of the same group.
    last = layers[-1]
    same = torch.stack([last[0, 1], last[1, 0], last[2, 3], last[3, 2]])
    other = last[[0, 0, 1, 1, 2, 2, 3, 3], [2, 3, 2, 3, 0, 1, 0, 1]].view(4, 2).max(dim=1).values
    assert (same > other).all()


def test_state_dict_resumes_exactly():
    strategy = FedAGHN(hn_lr=0.05, hn_momentum=0.9)
    sim = _simulator(strategy)
    sim.run(3)
    state = strategy.state_dict()
    assert "_extra_state" in state and "conv.sharpness" in state

    fresh = FedAGHN(hn_lr=0.05, hn_momentum=0.9)
    fresh.setup(context_copy(strategy.ctx))
    stale = FedAGHN(hn_lr=0.05, hn_momentum=0.9)
    stale.setup(context_copy(strategy.ctx))
    fresh.load_state_dict(state)
    stale.load_state_dict({k: v for k, v in state.items() if k != "_extra_state"},
                          strict=False)

    everyone = torch.arange(4)
    expected = strategy.configure_train(4, everyone).params
    assert torch.equal(fresh.configure_train(4, everyone).params, expected)
    assert torch.equal(fresh.collaboration_graph(), strategy.collaboration_graph())
    stale.configure_train(4, everyone)
    # The momentum buffers travel in the extra state: without them the next
    # hypernetwork step differs.
    graph = _graph(strategy, everyone, expected, seed=5)
    for s in (strategy, fresh, stale):
        aggregate(s, 4, graph)
    assert torch.equal(_params(fresh)[0], _params(strategy)[0])
    assert torch.equal(_params(fresh)[1], _params(strategy)[1])
    assert not torch.equal(_params(stale)[0], _params(strategy)[0])


def test_held_out_client_gets_a_generated_model_and_is_no_collaborator():
    strategy = FedAGHN()
    sim = _simulator(strategy, held_out=torch.tensor([3]))
    sim.run(2)
    assert not bool(strategy.ctx.table.trained[3])
    graph = strategy.layer_graphs()
    # Nobody aggregates the held-out client's (initial) model.
    assert (graph[:, :3, 3] == 0).all()
    params = strategy.personalized_params(torch.arange(4))
    torch.testing.assert_close(params[:3], sim.local_params[:3])
    # The held-out client has no update: cosine 0 to all, so the others share
    # 1 / (1 + q) equally and its own initial model keeps q / (1 + q).
    q = 0.1
    theta = strategy.ctx.table.params
    expected = (q * theta[3] + theta[:3].mean(dim=0)) / (1 + q)
    torch.testing.assert_close(params[3], expected)
    assert strategy.personalized_params(torch.tensor([0, 2])) is None


def test_cli_run_writes_summary(tmp_path):
    from pyg_fedgraph.cli import main
    out = tmp_path / "run"
    code = main(["run", "--dataset", "digits", "--partition", "pathological", "--strategy",
                 "fedaghn", "--rounds", "3", "--quiet", "--out", str(out),
                 "--set", "epochs=1"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategy"] == "fedaghn" and summary["rounds"] == 3
    assert 0.0 <= summary["test"] <= 1.0
