import math

import pytest
import torch
from strategy_toys import aggregate, context_copy
from strategy_toys import two_group_dataset as _two_group_dataset
from torch import nn

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.nn.collaboration_qp import CollaborationQP, initial_collaboration_graph
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.pfedgraph import PFedGraph, cosine_regularizer
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig


class _Net(nn.Module):
    r"""Body (6 parameters, layer ``body``) and head (3 parameters, layer ``head``)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(2, 2)
        self.head = nn.Linear(2, 1)


def _ctx(n, init, num_samples=None, layout=None):
    layout = layout or ParamLayout.from_module(nn.Linear(init.numel() - 1, 1))
    if num_samples is None:
        num_samples = torch.ones(n, dtype=torch.long)
    return FederationContext(num_clients=n, layout=layout, init_params=init,
                             num_samples=torch.as_tensor(num_samples))


def _strategy(n, init, num_samples=None, layout=None, **kwargs):
    s = PFedGraph(**kwargs)
    s.setup(_ctx(n, init, num_samples, layout))
    return s


def _upload(s, rnd, clients, x):
    clients = torch.as_tensor(clients)
    ns = s.ctx.num_samples[clients]
    aggregate(s, rnd, FederationGraph(x=x, delta=x - s.theta_tilde[clients],
                                      num_samples=ns, client_id=clients))


def _cos(a, b):
    return float(a @ b / (a.norm() * b.norm()))


def _simulator(strategy, rounds=4, callbacks=()):
    torch.manual_seed(0)
    return Simulator(_two_group_dataset(), MLP(2, 8, 2, num_layers=2), strategy, rounds=rounds,
                     local=LocalConfig(lr=0.1, batch_size=8, epochs=3),
                     callbacks=callbacks)


# --------------------------------------------------------------------- basics
def test_registered_hparams_and_repr():
    assert STRATEGIES["pfedgraph"] is PFedGraph
    s = build_strategy("pfedgraph", lam=0.1, layers=["head"])
    assert s.hparams() == {"alpha": None, "alpha_rule": "paper", "lam": 0.1, "threshold": 0.9,
                           "layers": ["head"], "normalized_aggregate": True,
                           "solver": "projection", "evaluate": "local",
                           "similarity": "updates"}
    assert "lam=0.1" in str(s) and "CollaborationQP(alpha=0.08*N" in str(s)
    # Appendix C.1.4: alpha = 0.08 N, resolved for the whole federation at setup.
    s = _strategy(10, torch.zeros(3))
    assert s.qp.alpha == pytest.approx(0.8)
    assert _strategy(10, torch.zeros(3), alpha=2.0).qp.alpha == 2.0


@pytest.mark.parametrize("n", [5, 10, 20])
def test_alpha_rule_code_is_the_scripts_constant(n):
    # The authors' scripts: lambda = 0.8 on the quadratic term, i.e. alpha = 1 / 0.8 at any N.
    s = _strategy(n, torch.zeros(3), alpha_rule="code")
    assert s.qp.alpha == 1.25 and "alpha=1.25" in str(PFedGraph(alpha_rule="code"))
    assert _strategy(n, torch.zeros(3)).qp.alpha == pytest.approx(0.08 * n)
    assert _strategy(n, torch.zeros(3), alpha=0.5, alpha_rule="code").qp.alpha == 0.5
    # The code's QP, min 0.8 x'x + (-s - 1.6 p)'x on the simplex, has the same solution.
    cp = pytest.importorskip("cvxpy")
    sim = torch.eye(5, dtype=torch.float64)
    sim[0] = sim[:, 0] = torch.tensor([1.0, 0.3, -0.2, 0.95, 0.1], dtype=torch.float64)
    p = torch.full((5,), 0.2, dtype=torch.float64)
    ours = s.qp(sim, p)
    x = cp.Variable(5)
    cp.Problem(cp.Minimize(0.8 * cp.sum_squares(x) + (-sim[0].numpy() - 1.6 * p.numpy()) @ x),
               [x >= 0, cp.sum(x) == 1]).solve(solver="CLARABEL")
    assert torch.allclose(ours[0], torch.as_tensor(x.value), atol=1e-6)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"lam": -0.1}, ValueError, "lam must be >= 0, got -0.1"),
    ({"threshold": 1.5}, ValueError, "threshold must be <= 1, got 1.5"),
    ({"layers": 3}, ValueError, "layers: expected a string or a list or None, got 3"),
    ({"layers": []}, ValueError, "layers must be a module-name substring"),
    ({"normalized_aggregate": "yes"}, ValueError,
     "normalized_aggregate: expected true or false, got 'yes'"),
    ({"solver": "qp"}, ValueError, "solver: expected one of 'projection', 'cvxpy'"),
    ({"evaluate": "before"}, ValueError, "evaluate: expected one of 'local', 'aggregated'"),
    ({"alpha": -1.0}, ValueError, "alpha must be >= 0, got -1.0"),
])
def test_bad_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        PFedGraph(**kwargs)


def test_requires_setup_and_unknown_layer():
    with pytest.raises(RuntimeError, match="setup"):
        PFedGraph().configure_train(1, torch.arange(2))
    layout = ParamLayout.from_module(_Net())
    with pytest.raises(ValueError, match="no layer matches"):
        _strategy(2, torch.zeros(9), layout=layout, layers="fc")


def test_round_one_starts_from_init_without_regularizer():
    init = torch.tensor([0.5, -1.0, 2.0])
    s = _strategy(4, init)
    plan = s.configure_train(1, torch.tensor([0, 2, 3]))
    assert torch.equal(plan.params, init.expand(3, -1))
    assert plan.regularizer is None
    assert s.personalized_params(torch.arange(4)) is None
    assert s.last_edges() is None
    assert torch.equal(s.collaboration_graph(), initial_collaboration_graph(4, dtype=torch.float64))


# ------------------------------------------------------------- regularizer
def test_cosine_regularizer_hand_computed_and_paper_sign():
    theta = torch.tensor([1.0, 0.0, 0.0])
    ref = torch.tensor([2.0, 2.0, 0.0])
    assert float(cosine_regularizer(theta, ref, 0.5)) == pytest.approx(-0.5 / math.sqrt(2))
    assert float(cosine_regularizer(-ref, ref, 0.5)) == pytest.approx(0.5)
    assert float(cosine_regularizer(torch.zeros(3), ref, 0.5)) == 0.0  # no NaN
    # Paper's sign: a gradient step on the term moves theta towards the reference.
    th = theta.clone().requires_grad_()
    cosine_regularizer(th, ref, 0.5).backward()
    assert _cos(theta - 0.1 * th.grad, ref) > _cos(theta, ref)


@pytest.mark.parametrize("normalized", [True, False])
def test_plan_regularizer_is_minus_lam_cos_of_the_aggregate(normalized):
    lam = 0.3
    x = torch.tensor([[1.0, 2.0, 0.0], [3.0, -1.0, 1.0], [0.0, 1.0, 4.0]])
    s = _strategy(3, torch.zeros(3), num_samples=[1, 2, 3], lam=lam, alpha=1.0, threshold=None,
                  normalized_aggregate=normalized)
    _upload(s, 1, [0, 1, 2], x)
    w = s.collaboration_graph().float()
    plan = s.configure_train(2, torch.tensor([2, 0]))
    assert torch.allclose(plan.params, (w @ x)[[2, 0]], atol=1e-6)
    (refs,) = plan.regularizer.refs
    for row, i in enumerate([2, 0]):
        if normalized:
            expected = sum(w[i, j] * x[j] / x[j].norm() for j in range(3))
        else:
            expected = sum(w[i, j] * x[j] for j in range(3))
        assert torch.allclose(refs[row], expected, atol=1e-6)
        theta = torch.tensor([0.5, -0.2, 1.0])
        value = float(plan.regularizer.penalty(theta, refs[row]))
        assert value == pytest.approx(-lam * _cos(theta, expected), abs=1e-6)
    assert _strategy(3, torch.zeros(3), lam=0.0).configure_train(2, torch.arange(3)) \
        .regularizer is None


# --------------------------------------------------------------- the graph
def test_graph_rows_stochastic_with_partial_participation():
    gen = torch.Generator().manual_seed(0)
    init = torch.randn(4, generator=gen)
    s = _strategy(5, init, num_samples=[10, 20, 30, 40, 50])
    _upload(s, 1, [0, 2, 3], torch.randn(3, 4, generator=gen))
    w = s.collaboration_graph()
    assert (w >= 0).all()
    assert torch.allclose(w.sum(1), torch.ones(5, dtype=torch.float64), atol=1e-12)
    # Trained rows ignore the untrained clients; untrained rows keep the initial graph.
    assert torch.equal(w[[0, 2, 3]][:, [1, 4]], torch.zeros(3, 2, dtype=torch.float64))
    initial = initial_collaboration_graph(5, dtype=torch.float64)
    assert torch.equal(w[[1, 4]], initial[[1, 4]])
    _upload(s, 2, [1, 2], torch.randn(2, 4, generator=gen))
    w = s.collaboration_graph()
    assert torch.allclose(w.sum(1), torch.ones(5, dtype=torch.float64), atol=1e-12)
    assert torch.equal(w[:4, 4], torch.zeros(4, dtype=torch.float64))
    assert torch.equal(w[4], initial[4])
    assert torch.allclose(s.theta_tilde, w.float() @ s.ctx.table.params, atol=1e-6)
    # The same graph as edges j -> i.
    edge_index, edge_weight = s.last_edges()
    dense = torch.zeros(5, 5, dtype=torch.float64)
    dense[edge_index[1], edge_index[0]] = edge_weight
    assert torch.equal(dense, w) and (edge_weight > 0).all()


def test_identical_clients_get_their_model_back():
    x = torch.tensor([1.0, -2.0, 0.5])
    s = _strategy(4, torch.zeros(3), num_samples=[1, 2, 3, 4])
    _upload(s, 1, [0, 1, 2, 3], x.expand(4, -1).clone())
    # Every similarity is 1, so each row is p (FedAvg weights).
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    assert torch.allclose(s.collaboration_graph(), p.expand(4, -1), atol=1e-12)
    assert torch.allclose(s.theta_tilde, x.expand(4, -1), atol=1e-6)
    assert torch.allclose(s.theta_bar, (x / x.norm()).expand(4, -1), atol=1e-6)


def test_layer_selection_changes_the_similarity():
    layout = ParamLayout.from_module(_Net())  # body: coordinates 0..5, head: 6..8
    x = torch.zeros(2, 9)
    x[0, :6], x[1, :6] = 3.0, -3.0  # opposite bodies
    x[0, 6:], x[1, 6:] = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 6.0])
    graphs = {}
    for layers in (None, "head", ["body"]):
        s = _strategy(2, torch.zeros(9), layout=layout, layers=layers, alpha=1.0, threshold=None)
        _upload(s, 1, [0, 1], x)
        graphs[str(layers)] = (s.last_similarity(), s.collaboration_graph())
    assert graphs["None"][0][0, 1] < 0
    assert graphs["head"][0][0, 1] == pytest.approx(1.0)
    assert graphs["['body']"][0][0, 1] == pytest.approx(-1.0)
    # Same last layer only: the two clients are fully similar -> W = p.
    assert torch.allclose(graphs["head"][1], torch.full((2, 2), 0.5, dtype=torch.float64))
    # Dissimilar: each keeps more than half of its own weight.
    assert (graphs["None"][1].diagonal() > 0.5).all()


def test_two_opposite_groups_collaborate_within_group():
    sim = _simulator(PFedGraph(), rounds=4)
    sim.run()
    w = sim.strategy.collaboration_graph()
    group = torch.tensor([0, 0, 1, 1])
    same = (group.unsqueeze(0) == group.unsqueeze(1)).double()
    # alpha = 0.08 * 4: the uniform prior p = 1/4 caps the within-group share
    # well below 1, but every client must favour its own group.
    within = (w * same).sum(1)
    assert (within > 0.6).all(), w
    assert (w * same).masked_fill(same == 0, 1.0).amin(1).gt(
        (w * (1 - same)).amax(1)).all(), w


# ---------------------------------------------------------- state and solver
def test_state_is_the_client_table_and_the_next_round_reproduces():
    layout = ParamLayout.from_module(_Net())
    gen = torch.Generator().manual_seed(1)
    init = torch.randn(9, generator=gen)
    kwargs = dict(layers="head", num_samples=[3, 1, 2], layout=layout)
    a = _strategy(3, init, **kwargs)
    _upload(a, 1, [0, 1, 2], init + torch.randn(3, 9, generator=gen))
    _upload(a, 2, [0, 2], init + torch.randn(2, 9, generator=gen))
    # Graph and aggregates are functions of the engine's client table: no state of its own.
    assert dict(a.state_dict()) == {}
    b = PFedGraph(layers="head")
    b.setup(context_copy(a.ctx))
    clients = torch.tensor([1, 2])
    pa, pb = a.configure_train(3, clients), b.configure_train(3, clients)
    assert torch.equal(pa.params, pb.params)
    assert torch.equal(pa.regularizer.refs[0], pb.regularizer.refs[0])
    upload = init + torch.randn(2, 9, generator=gen)
    _upload(a, 3, clients, upload)
    _upload(b, 3, clients, upload)
    assert torch.equal(a.collaboration_graph(), b.collaboration_graph())
    assert torch.equal(a.theta_tilde, b.theta_tilde)


def test_resumed_simulation_continues_exactly():
    full = _simulator(PFedGraph(layers="lins.1"), rounds=3)
    full.run()
    first = _simulator(PFedGraph(layers="lins.1"), rounds=3)
    first.run(2)
    resumed = _simulator(PFedGraph(layers="lins.1"), rounds=3)
    resumed.load_state_dict(first.state_dict())
    resumed.run()
    assert torch.equal(full.strategy.collaboration_graph(), resumed.strategy.collaboration_graph())
    assert torch.equal(full.local_params, resumed.local_params)


def test_cvxpy_solver_gives_the_same_graph_in_a_run():
    pytest.importorskip("cvxpy")
    checked = []

    def compare(sim, record):
        s = sim.strategy
        p = s.ctx.num_samples.double() / s.ctx.num_samples.sum()
        reference = CollaborationQP(0.08 * 4)(s.last_similarity(), p)
        assert (s.collaboration_graph() - reference).abs().max() < 1e-6
        checked.append(record.round)

    sim = _simulator(PFedGraph(solver="cvxpy"), rounds=3, callbacks=(compare,))
    sim.run()
    assert checked == [1, 2, 3]


def test_evaluate_options():
    x = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    s = _strategy(2, torch.zeros(3), evaluate="aggregated")
    _upload(s, 1, [0, 1], x)
    assert torch.equal(s.personalized_params(torch.tensor([1])), s.theta_tilde[[1]])
    s = _strategy(2, torch.zeros(3))
    _upload(s, 1, [0, 1], x)
    assert s.personalized_params(torch.arange(2)) is None


def test_cli_options_reach_the_strategy():
    sim = build_simulator(ExperimentConfig(dataset="digits", strategy="pfedgraph", rounds=1,
                                           overrides={"layers": "lins.2", "lam": 0.05,
                                                      "steps": 2}))
    assert sim.strategy.layers == "lins.2" and sim.strategy.lam == 0.05
    mask = sim.strategy.similarity_mask
    assert int(mask.sum()) == sim.layout.layer_slice("lins.2").stop - \
        sim.layout.layer_slice("lins.2").start
    sim.run()
    assert sim.strategy.last_edges() is not None


def test_search_space_is_the_papers_lambda_range():
    optuna = pytest.importorskip("optuna")
    assert PFedGraph.search_space(optuna.trial.FixedTrial({"lam": 0.1})) == {"lam": 0.1}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    space = PFedGraph.search_space(trial)
    assert 1e-3 <= space["lam"] <= 1.0
    PFedGraph(**space)  # every sampled setting is a valid constructor call
