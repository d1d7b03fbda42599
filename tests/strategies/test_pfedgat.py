import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from strategy_toys import aggregate, context_copy
from torch.func import functional_call

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.nn.client_gat import AllocationLogits, ClientGAT
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.pfedgat import PFedGAT
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.jobs import LossGradient


def _two_group_dataset(n_per_split=(16, 6, 6), seed=0):
    r"""4 clients: 0, 1 label a point by the sign of its first feature,
    clients 2, 3 with the opposite label map."""
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for name, n in zip(("train", "val", "test"), n_per_split, strict=True):
        xs, ys = [], []
        for client in range(4):
            x = torch.randn(n + client, 3, generator=gen)  # unequal sizes on purpose
            y = (x[:, 0] > 0).long()
            xs.append(x)
            ys.append(y if client < 2 else 1 - y)
        splits[name] = ClientSplit.from_lists(xs, ys)
    return FederatedDataset("two-groups", "classification", splits, num_classes=2,
                            client_labels=torch.tensor([0, 0, 1, 1]))


def _simulator(strategy, rounds=3, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    return Simulator(_two_group_dataset(), model, strategy, rounds=rounds,
                     local=LocalConfig(lr=0.2, batch_size=8, epochs=2), seed=seed)


def _context(n=4, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2).to(dtype)
    layout = ParamLayout.from_module(model)
    return FederationContext(num_clients=n, layout=layout,
                             init_params=layout.flatten(model).to(dtype),
                             num_samples=torch.ones(n, dtype=torch.long))


def _fake_round(strategy, rnd, clients, seed):
    r"""configure_train, then a made-up local update and feedback for ``clients``."""
    start = strategy.configure_train(rnd, clients).params
    gen = torch.Generator().manual_seed(seed)
    delta = 0.5 * torch.randn(start.shape, generator=gen)
    graph = FederationGraph(x=start + delta, delta=delta, client_id=clients,
                            layout=strategy.ctx.layout)
    graph.feedback = torch.randn(start.shape, generator=gen)
    aggregate(strategy, rnd, graph)


def _server_params(strategy):
    return {k: v.detach().clone() for k, v in strategy.server.named_parameters()}


def _val_loss_sum(sim, theta):
    r"""sum_i of client i's mean validation cross-entropy at row i of ``theta``."""
    split = sim.dataset.splits["val"]
    model, layout = sim.trainer.model, sim.layout
    total = theta.new_zeros(())
    for i in range(theta.size(0)):  # reference: one client at a time
        n = int(split.counts[i])
        out = functional_call(model, layout.unflatten(theta[i]), (split.x[i, :n],))
        total = total + F.cross_entropy(out, split.y[i, :n])
    return total


def test_registered_and_hparams():
    assert STRATEGIES["pfedgat"] is PFedGAT
    strategy = build_strategy("pfedgat", hidden_channels=4, heads=2)
    assert strategy.hparams() == {"hidden_channels": 4, "heads": 2, "negative_slope": 0.2,
                                  "gat_lr": 0.01, "optimizer": "sgd", "feedback": "gradient",
                                  "use_gat": True, "similarity": True,
                                  "similarity_scale": 80.0, "server_steps": 1,
                                  "evaluate": "personalized"}
    # The exact feedback is a client job of the plan; the delta feedback needs none.
    strategy.setup(_context())
    (job,) = strategy.configure_train(1, torch.arange(2)).jobs
    assert isinstance(job, LossGradient) and job.split == "val"
    delta = PFedGAT(feedback="delta", hidden_channels=4, heads=2)
    delta.setup(_context())
    assert delta.configure_train(1, torch.arange(2)).jobs == ()
    assert "feedback=gradient" in str(strategy)


@pytest.mark.parametrize("kwargs, match", [
    ({"feedback": "loss"}, "feedback: expected one of 'gradient', 'delta'"),
    ({"optimizer": "rmsprop"}, "optimizer: expected one of 'sgd', 'adam'"),
    ({"gat_lr": 0.0}, "gat_lr must be > 0, got 0.0"),
    ({"server_steps": 0}, "server_steps must be >= 1, got 0"),
    ({"hidden_channels": 2.5}, "hidden_channels: expected an int >= 1, got 2.5"),
    ({"evaluate": "local"}, "evaluate: expected one of 'personalized', 'trained'"),
    ({"similarity_scale": -1.0}, "similarity_scale must be > 0"),
])
def test_invalid_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PFedGAT(**kwargs)


def test_allocation_rows_sum_to_one_and_first_round_is_uniform():
    strategy = PFedGAT(hidden_channels=4, heads=2)
    assert strategy.collaboration_graph() is None
    strategy.setup(_context())
    before = _server_params(strategy)
    alloc = strategy.collaboration_graph()
    # Every client holds the initial model: uniform allocation.
    torch.testing.assert_close(alloc, torch.full((4, 4), 0.25))
    # Round 1: theta_tilde does not depend on A, so no server step.
    _fake_round(strategy, 1, torch.arange(4), seed=0)
    for name, value in _server_params(strategy).items():
        assert torch.equal(value, before[name]), name
    _fake_round(strategy, 2, torch.arange(4), seed=1)
    alloc = strategy.collaboration_graph()
    assert alloc.shape == (4, 4) and (alloc >= 0).all()
    torch.testing.assert_close(alloc.sum(dim=1), torch.ones(4))
    assert (alloc - 0.25).abs().max() > 1e-4  # trained models differ now
    # The personalized models are A @ theta.
    torch.testing.assert_close(strategy.personalized_params(torch.tensor([2, 0])),
                               (alloc @ strategy.theta)[[2, 0]])


def test_round_changes_gat_and_uses_only_sampled_feedback():
    strategy = PFedGAT(hidden_channels=4, heads=2, gat_lr=0.5, feedback="gradient")
    strategy.setup(_context())
    _fake_round(strategy, 1, torch.arange(4), seed=0)
    theta = strategy.theta.clone()
    before = _server_params(strategy)
    clients = torch.tensor([1, 3])
    start = strategy.configure_train(2, clients).params
    feedback = torch.randn(2, start.size(1))
    graph = FederationGraph(x=start + 1.0, delta=torch.ones_like(start), client_id=clients)
    graph.feedback = feedback

    # Expected: one SGD step on sum_i <theta_tilde_i, g_i> over the sampled clients.
    reference = ClientGAT(theta.size(1), 4, heads=2)
    reference.load_state_dict(strategy.server.state_dict())
    theta_tilde, _ = reference(theta)
    (theta_tilde[clients] * feedback).sum().backward()
    aggregate(strategy, 2, graph)

    for name, param in reference.named_parameters():
        if param.grad is None:  # GATConv's output bias never reaches A
            # GATConv's output bias never reaches A; its edge path is fixed.
            assert name in ("conv.bias", "conv.lin_edge.weight", "conv.att_edge")
            continue
        assert param.grad.abs().sum() > 0, name
        torch.testing.assert_close(dict(strategy.server.named_parameters())[name],
                                   before[name] - 0.5 * param.grad)
    # Sampled clients' node features are their trained models, the others keep theirs.
    torch.testing.assert_close(strategy.theta[clients], start + 1.0)
    torch.testing.assert_close(strategy.theta[[0, 2]], theta[[0, 2]])


def test_delta_feedback_is_negated_delta():
    ctx = _context()
    a = PFedGAT(hidden_channels=4, heads=2, feedback="delta", gat_lr=0.3)
    b = PFedGAT(hidden_channels=4, heads=2, feedback="gradient", gat_lr=0.3)
    for strategy in (a, b):
        torch.manual_seed(0)
        strategy.setup(context_copy(ctx))
        _fake_round(strategy, 1, torch.arange(4), seed=0)
    start = a.configure_train(2, torch.arange(4)).params
    delta = torch.randn(start.shape)
    graph_a = FederationGraph(x=start + delta, delta=delta)
    graph_b = FederationGraph(x=start + delta, delta=delta)
    graph_b.feedback = -delta
    aggregate(a, 2, graph_a)
    aggregate(b, 2, graph_b)
    for name, value in _server_params(a).items():
        torch.testing.assert_close(value, _server_params(b)[name])


def _held_out_split(n=4, samples=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, samples, 3, generator=gen, dtype=torch.float64)
    return x, torch.randint(0, 2, (n, samples), generator=gen)


def _held_out_losses(ctx, theta, split):
    r"""Client i's mean held-out cross-entropy at row i of ``theta`` :math:`(N,)`."""
    x, y = split
    model = torch.nn.Linear(3, 2).double()
    return torch.stack([  # reference: one client at a time
        F.cross_entropy(functional_call(model, ctx.layout.unflatten(theta[i]), (x[i],)), y[i])
        for i in range(theta.size(0))])


def _held_out_gradients(ctx, theta, split):
    leaf = theta.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(_held_out_losses(ctx, leaf, split).sum(), leaf)
    return grad


def _finite_differences(loss_fn, params, eps=1e-6):
    grads = {}
    for name, param in params.items():
        grad = torch.zeros_like(param)
        flat = param.data.view(-1)
        for k in range(flat.numel()):
            old = float(flat[k])
            flat[k] = old + eps
            plus = float(loss_fn())
            flat[k] = old - eps
            minus = float(loss_fn())
            flat[k] = old
            grad.view(-1)[k] = (plus - minus) / (2 * eps)
        grads[name] = grad
    return grads


def _float64_round_two(feedback, gat_lr, eta=0.05):
    r"""A float64 strategy after round 1, the finite-difference gradient of the
    sum of held-out losses over its GAT's trained parameters at round 2, and
    round 2's graph: ``feedback`` (gradient mode) or the delta of one local
    step of size ``eta`` on the held-out loss (delta mode)."""
    ctx = _context(dtype=torch.float64)
    strategy = PFedGAT(hidden_channels=3, heads=2, gat_lr=gat_lr, feedback=feedback)
    strategy.setup(ctx)
    _fake_round(strategy, 1, torch.arange(4), seed=0)
    split = _held_out_split()
    theta = strategy.theta.clone()
    params = {name: p for name, p in strategy.server.named_parameters()
              if p.requires_grad and name != "conv.bias"}

    def loss():
        with torch.no_grad():
            return _held_out_losses(ctx, strategy.server(theta)[0], split).sum()

    grads = _finite_differences(loss, params)
    clients = torch.arange(4)
    start = strategy.configure_train(2, clients).params
    held_out_grad = _held_out_gradients(ctx, start, split)
    delta = -eta * held_out_grad
    graph = FederationGraph(x=start + delta, delta=delta, client_id=clients)
    graph.feedback = held_out_grad
    return strategy, params, grads, loss, graph


@pytest.mark.parametrize("feedback", ["gradient", "delta"])
def test_server_step_matches_finite_differences(feedback):
    # aggregate_train's SGD step is -gat_lr * dL/dpsi for L = sum_i L_i(theta_tilde_i),
    # L_i on held-out data; with feedback="delta" and one local step of size
    # eta on that same loss, delta_i = -eta g_i, so the step is eta times it.
    lr, eta = 0.1, 0.05
    strategy, params, grads, _, graph = _float64_round_two(feedback, lr, eta)
    before = {name: p.detach().clone() for name, p in params.items()}
    strategy.aggregate_train(2, graph)
    scale = lr if feedback == "gradient" else lr * eta
    for name, param in params.items():
        assert grads[name].abs().max() > 1e-5, name
        torch.testing.assert_close(before[name] - param.detach(), scale * grads[name],
                                   atol=1e-9, rtol=1e-6)


def test_small_server_step_decreases_held_out_loss():
    # One step at a small gat_lr lowers the sum of held-out losses by
    # gat_lr * |dL/dpsi|^2, the first-order prediction.
    lr = 1e-3
    strategy, _, grads, loss, graph = _float64_round_two("gradient", lr)
    before = float(loss())
    strategy.aggregate_train(2, graph)
    predicted = lr * sum(float((g ** 2).sum()) for g in grads.values())
    assert predicted > 1e-4 * before
    assert before - float(loss()) == pytest.approx(predicted, rel=0.05)


def test_gradient_feedback_requires_feedback_attribute():
    strategy = PFedGAT(hidden_channels=2, heads=1, feedback="gradient")
    strategy.setup(_context())
    start = strategy.configure_train(1, torch.arange(4)).params
    with pytest.raises(ValueError, match="needs graph.feedback"):
        strategy.aggregate_train(1, FederationGraph(x=start, delta=torch.zeros_like(start)))
    graph = FederationGraph(x=start, delta=torch.zeros_like(start))
    graph.feedback = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="one D-vector per sampled client"):
        strategy.aggregate_train(1, graph)


def test_simulator_hook_gradient_equals_end_to_end_autograd():
    lr = 0.05
    strategy = PFedGAT(hidden_channels=3, heads=2, gat_lr=lr, feedback="gradient")
    sim = _simulator(strategy)
    seen = {}
    aggregate = strategy.aggregate_train

    def spy(rnd, graph):
        seen[rnd] = graph
        aggregate(rnd, graph)

    strategy.aggregate_train = spy
    sim.step()
    theta = strategy.theta.clone()
    before = _server_params(strategy)

    # What round 2 should do, straight through autograd: theta_tilde = GAT(theta),
    # L = sum_i L_i^val(theta_tilde_i), one SGD step on the GAT.
    reference = ClientGAT(theta.size(1), 3, heads=2)
    reference.load_state_dict(strategy.server.state_dict())
    theta_tilde, _ = reference(theta)
    loss = _val_loss_sum(sim, theta_tilde)
    leaf = theta_tilde.detach().requires_grad_(True)
    (per_client,) = torch.autograd.grad(_val_loss_sum(sim, leaf), leaf)
    loss.backward()

    sim.step()
    feedback = seen[2].feedback
    assert feedback.shape == theta.shape
    # The hook's feedback is dL_i / d theta_tilde_i at the model client i started from.
    torch.testing.assert_close(feedback, per_client, atol=1e-6, rtol=1e-5)
    after = _server_params(strategy)
    moved = 0
    for name, param in reference.named_parameters():
        if param.grad is None:
            continue
        torch.testing.assert_close(after[name], before[name] - lr * param.grad,
                                   atol=1e-6, rtol=1e-5)
        moved += int(not torch.equal(after[name], before[name]))
    assert moved == 5  # lin.weight, att_src, att_dst, similarity_weight, self_weight


def test_simulator_adds_feedback_only_when_asked():
    strategy = PFedGAT(hidden_channels=3, heads=2, feedback="delta")
    sim = _simulator(strategy)
    graphs = []
    aggregate = strategy.aggregate_train
    strategy.aggregate_train = lambda rnd, graph: (graphs.append(graph), aggregate(rnd, graph))
    sim.step()
    assert "feedback" not in graphs[0]


def test_without_gat_learns_logits():
    strategy = PFedGAT(use_gat=False, gat_lr=0.5, optimizer="adam")
    sim = _simulator(strategy, rounds=3)
    assert isinstance(strategy.server, AllocationLogits)
    assert strategy.collaboration_graph().shape == (4, 4)
    sim.run()
    logits = strategy.server.logits.detach()
    assert logits.abs().sum() > 0
    alloc = strategy.collaboration_graph()
    torch.testing.assert_close(alloc, logits.softmax(dim=1))
    torch.testing.assert_close(alloc.sum(dim=1), torch.ones(4))
    # Clients 0, 1 and 2, 3 share a labelling: they learn to take more from each other.
    same = torch.tensor([[1., 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]])
    assert (alloc * same).sum(dim=1).min() > 0.5


@pytest.mark.parametrize("use_gat", [True, False])
def test_add_clients(use_gat):
    ctx = _context(n=4)
    strategy = PFedGAT(hidden_channels=4, heads=2, use_gat=use_gat, optimizer="adam",
                       gat_lr=0.1)
    strategy.setup(ctx)
    for rnd in (1, 2):
        _fake_round(strategy, rnd, torch.arange(4), seed=rnd)
    server_before = _server_params(strategy)
    theta_before = strategy.theta.clone()
    newcomers = torch.randn(2, ctx.layout.num_params)
    strategy.add_clients(2, newcomers)

    assert strategy.num_clients == 6 and strategy.ctx.num_clients == 6
    assert strategy.ctx.num_samples.tolist() == [1, 1, 1, 1, 0, 0]
    torch.testing.assert_close(strategy.theta, torch.cat([theta_before, newcomers]))
    alloc = strategy.collaboration_graph()
    assert alloc.shape == (6, 6)
    torch.testing.assert_close(alloc.sum(dim=1), torch.ones(6))
    if use_gat:
        # Nothing was rebuilt: same GAT weights, same optimizer.
        for name, value in _server_params(strategy).items():
            assert torch.equal(value, server_before[name]), name
    else:
        # The old clients' logits are kept; the newcomers' start at zero.
        logits = strategy.server.logits.detach()
        assert torch.equal(logits[:4, :4], server_before["logits"])
        assert (logits[4:] == 0).all() and (logits[:, 4:] == 0).all()
        torch.testing.assert_close(alloc[4:], torch.full((2, 6), 1 / 6))
        # Adam's moments are padded, not reset.
        state = strategy.server_optimizer.state[strategy.server.logits]
        assert state["exp_avg"].shape == (6, 6) and state["exp_avg"][:4, :4].abs().sum() > 0
        assert int(state["step"]) == 1

    # The grown federation trains, newcomers included.
    _fake_round(strategy, 3, torch.tensor([0, 4, 5]), seed=3)
    assert strategy.personalized_params(torch.arange(6)).shape == (6, ctx.layout.num_params)
    # A strategy set up for the original 4 clients resumes the grown state.
    resumed = PFedGAT(hidden_channels=4, heads=2, use_gat=use_gat, optimizer="adam",
                      gat_lr=0.1)
    resumed.setup(ctx)
    resumed.load_state_dict(strategy.state_dict())
    assert resumed.num_clients == 6
    torch.testing.assert_close(resumed.collaboration_graph(), strategy.collaboration_graph())
    with pytest.raises(ValueError, match=r"init_params must be \(8,\) or \(1, 8\)"):
        strategy.add_clients(1, torch.zeros(2, 13))


@pytest.mark.parametrize("use_gat", [True, False])
def test_state_dict_round_trip_reproduces_next_round(use_gat):
    ctx = _context()

    def make(source):
        torch.manual_seed(5)  # the same GAT initialisation for every copy
        strategy = PFedGAT(hidden_channels=4, heads=2, optimizer="adam", gat_lr=0.05,
                           use_gat=use_gat)
        strategy.setup(context_copy(source))
        return strategy

    original = make(ctx)
    for rnd in (1, 2, 3):
        _fake_round(original, rnd, torch.arange(4), seed=rnd)
    state = original.state_dict()
    assert "_extra_state" in state and state["_extra_state"]["optimizer"]["state"]

    # The client table is the engine's (restored by it); the strategy's own state here.
    resumed, fresh_optimizer = make(original.ctx), make(original.ctx)
    resumed.load_state_dict(state)
    fresh_optimizer.load_state_dict({k: v for k, v in state.items() if k != "_extra_state"},
                                    strict=False)
    for strategy in (original, resumed, fresh_optimizer):
        _fake_round(strategy, 4, torch.tensor([0, 2, 3]), seed=4)
    for name, value in _server_params(original).items():
        assert torch.equal(_server_params(resumed)[name], value), name
    assert torch.equal(resumed.personalized_params(torch.arange(4)),
                       original.personalized_params(torch.arange(4)))
    # Without the optimizer state (Adam's moments) the next round differs.
    assert not torch.equal(fresh_optimizer.personalized_params(torch.arange(4)),
                           original.personalized_params(torch.arange(4)))


def test_evaluate_trained_uses_local_models():
    strategy = PFedGAT(hidden_channels=3, heads=2, evaluate="trained")
    sim = _simulator(strategy)
    sim.step()
    assert strategy.personalized_params(torch.arange(4)) is None
    torch.testing.assert_close(sim.local_params, strategy.theta)


def test_cli_run_writes_summary(tmp_path):
    from pyg_fedgraph.cli import main
    out = tmp_path / "run"
    code = main(["run", "--dataset", "digits", "--partition", "pathological", "--strategy",
                 "pfedgat", "--rounds", "2", "--clients", "5", "--quiet", "--out", str(out),
                 "--set", "epochs=1", "--set", "hidden_channels=4"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategy"] == "pfedgat" and summary["rounds"] == 2
    assert 0.0 <= summary["test"] <= 1.0
    # The allocation matrix is exported as the collaboration graph: 5 rows summing to 1.
    lines = (out / "collaboration.csv").read_text().strip().splitlines()
    rows = torch.tensor([[float(v) for v in line.split(",")] for line in lines[1:]])
    assert rows.shape == (5, 5)
    torch.testing.assert_close(rows.sum(dim=1), torch.ones(5, dtype=rows.dtype))


def test_held_out_clients_get_personalized_models():
    ctx = dataclasses.replace(_context(), held_out=torch.tensor([3]))
    for evaluate in ("personalized", "trained"):
        strategy = PFedGAT(hidden_channels=3, heads=2, evaluate=evaluate)
        strategy.setup(context_copy(ctx))
        for rnd in (1, 2):
            _fake_round(strategy, rnd, torch.arange(3), seed=rnd)
        theta_tilde = strategy.collaboration_graph() @ strategy.theta
        params = strategy.personalized_params(torch.tensor([1, 3]))
        torch.testing.assert_close(params[1], theta_tilde[3])
        expected = theta_tilde[1] if evaluate == "personalized" else strategy.theta[1]
        torch.testing.assert_close(params[0], expected)
    assert strategy.personalized_params(torch.tensor([0, 1])) is None
