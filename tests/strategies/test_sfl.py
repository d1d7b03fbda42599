import io
import json
import logging
import math

import pytest
import torch
from strategy_toys import aggregate, context_copy

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.fedavg import Local
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.strategies.sfl import SFL, SFL_AUTHORS_CODE, sfl_penalty
from pyg_fedgraph.train.config import LocalConfig


def _ctx(n, init, edge_index=None, edge_weight=None, held_out=()):
    layout = ParamLayout.from_module(torch.nn.Linear(init.numel() - 1, 1))
    return FederationContext(num_clients=n, layout=layout, init_params=init,
                             num_samples=torch.ones(n, dtype=torch.long),
                             edge_index=edge_index, edge_weight=edge_weight,
                             held_out=torch.tensor(held_out, dtype=torch.long))


def _upload(s, rnd, clients, x):
    clients = torch.as_tensor(clients)
    aggregate(s, rnd, FederationGraph(x=x, delta=torch.zeros_like(x), client_id=clients))


def _dataset(num_clients=4, edge_index=None, n=(12, 6, 6), seed=0):
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for name, count in zip(("train", "val", "test"), n, strict=True):
        xs, ys = [], []
        for c in range(num_clients):
            x = torch.randn(count, 3, generator=gen)
            y = (x[:, c % 3] > 0).long()
            xs.append(x)
            ys.append(y)
        splits[name] = ClientSplit.from_lists(xs, ys)
    return FederatedDataset("toy", "classification", splits, num_classes=2,
                            edge_index=edge_index)


def _simulator(strategy, dataset, held_out=None, rounds=2):
    torch.manual_seed(0)
    return Simulator(dataset, MLP(3, 4, 2, num_layers=2), strategy, rounds=rounds,
                     local=LocalConfig(lr=0.2, batch_size=4, epochs=1),
                     seed=3, held_out=held_out)


def test_registered_hparams_and_defaults():
    assert STRATEGIES["sfl"] is SFL
    s = build_strategy("sfl", num_hops=2, lam=0.1, normalization="row")
    assert s.hparams() == {"num_hops": 2, "lam": 0.1, "normalization": "row",
                           "start": "propagated", "global_lam": 0.0,
                           "missing_graph": "complete", "memory": "uploads",
                           "penalty": "squared"}
    assert "num_hops=2" in str(s) and "KHopPropagation(num_hops=2, normalization='row')" in str(s)
    # Authors' code: --layers 3 hops, regularizer coefficient 0.3.
    assert SFL().num_hops == 3 and SFL().lam == 0.3 and SFL().normalization == "sym"


@pytest.mark.parametrize("kwargs, match", [
    ({"num_hops": -1}, "num_hops must be >= 0, got -1"),
    ({"num_hops": 1.5}, "num_hops: expected an int >= 0, got 1.5"),
    ({"lam": -0.1}, "lam must be >= 0"),
    ({"global_lam": -1.0}, "global_lam must be >= 0"),
    ({"normalization": "left"}, "normalization: expected one of 'sym', 'row'"),
    ({"start": "zero"}, "start: expected one of 'propagated', 'local', 'global'"),
    ({"missing_graph": "knn"}, "missing_graph: expected one of 'complete', 'error'"),
    ({"memory": "stale"}, "memory: expected one of 'uploads', 'propagated'"),
    ({"penalty": "l1"}, "penalty: expected one of 'squared', 'distance'"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SFL(**kwargs)


def test_requires_setup():
    with pytest.raises(RuntimeError, match="setup"):
        SFL().configure_train(1, torch.arange(2))


def test_two_node_graph_mixes_by_the_normalized_adjacency():
    # Edge weight 3 between the two clients, self loops weight 1: degrees 4 and 4,
    # so A_hat = [[1/4, 3/4], [3/4, 1/4]] (sym and row agree on this regular graph).
    ei = torch.tensor([[0, 1], [1, 0]])
    v = torch.tensor([[1.0, 0.0, 2.0], [0.0, 4.0, -2.0]])
    for hops, mix in [(1, torch.tensor([[0.25, 0.75], [0.75, 0.25]])),
                      (2, torch.tensor([[10.0, 6.0], [6.0, 10.0]]) / 16)]:
        s = SFL(num_hops=hops, lam=0.0)
        s.setup(_ctx(2, torch.zeros(3), ei, torch.tensor([3.0, 3.0])))
        _upload(s, 1, [0, 1], v)
        expected = mix @ v
        assert torch.allclose(s.personalized_params(torch.arange(2)), expected)
        assert torch.allclose(s.configure_train(2, torch.tensor([1])).params, expected[1:])
        assert torch.allclose(s.collaboration_graph(), mix)


def test_directed_edge_symmetric_versus_row_normalization():
    # Only 0 -> 1. In-degrees with self loops: client 0: 1, client 1: 2.
    ei = torch.tensor([[0], [1]])
    v = torch.tensor([[2.0, 0.0], [0.0, 4.0]])
    sym = SFL(num_hops=1, lam=0.0)
    sym.setup(_ctx(2, torch.zeros(2), ei))
    _upload(sym, 1, [0, 1], v)
    u = sym.personalized_params(torch.arange(2))
    assert torch.allclose(u[0], v[0])
    assert torch.allclose(u[1], v[0] / math.sqrt(2) + v[1] / 2)  # GCN weights, row sum != 1
    row = SFL(num_hops=1, lam=0.0, normalization="row")
    row.setup(_ctx(2, torch.zeros(2), ei))
    _upload(row, 1, [0, 1], v)
    assert torch.allclose(row.personalized_params(torch.arange(2))[1], (v[0] + v[1]) / 2)


def test_a_symmetric_propagation_that_scales_models_is_warned_about(caplog):
    # The directed edge 0 -> 1 above: one hop's rows sum to 1 and 1/sqrt(2) + 1/2.
    ei = torch.tensor([[0], [1]])
    sym = SFL(num_hops=1, lam=0.0)
    with caplog.at_level(logging.WARNING, logger="pyg_fedgraph.strategies.sfl"):
        sym.setup(_ctx(2, torch.zeros(2), ei))
    assert torch.allclose(sym.row_sums(), torch.tensor([1.0, 1 / math.sqrt(2) + 0.5]))
    assert "sum to 1.00-1.21 on this graph" in caplog.text
    assert "normalization='row' keeps them averages" in caplog.text
    # Row normalization, and a regular graph under "sym" (two nodes, weight 3 each
    # way: rows 1/4 + 3/4), sum to one: nothing to warn about.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pyg_fedgraph.strategies.sfl"):
        row = SFL(num_hops=1, lam=0.0, normalization="row")
        row.setup(_ctx(2, torch.zeros(2), ei))
        regular = SFL(num_hops=3, lam=0.0)
        regular.setup(_ctx(2, torch.zeros(3), torch.tensor([[0, 1], [1, 0]]),
                           torch.tensor([3.0, 3.0])))
    assert torch.allclose(row.row_sums(), torch.ones(2))
    assert torch.allclose(regular.row_sums(), torch.ones(2))
    assert caplog.text == ""


def test_clients_without_a_model_send_nothing():
    # Path 0 - 1 - 2 and isolated 3; only 0 and 1 have uploaded.
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    init = torch.tensor([9.0, 9.0])
    s = SFL(num_hops=1, lam=0.0, normalization="row")
    s.setup(_ctx(4, init, ei))
    assert torch.equal(s.personalized_params(torch.arange(4)), init.expand(4, -1))
    assert s.collaboration_graph() is None
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    _upload(s, 1, [0, 1], v)
    u = s.personalized_params(torch.arange(4))
    assert torch.allclose(u[0], v.mean(0)) and torch.allclose(u[1], v.mean(0))
    assert torch.allclose(u[2], v[1])          # only its uploading neighbour counts
    assert torch.equal(u[3], init)             # nobody to receive from: initial model
    m = s.collaboration_graph()
    assert torch.allclose(m[2], torch.tensor([0.0, 1.0, 0.0, 0.0]))
    assert torch.equal(m[3], torch.zeros(4))


def test_empty_graph_without_regularizer_equals_local_training():
    # Self loops only: A_hat = I with weight 1/sqrt(1 * 1) = 1 exactly, so every
    # client starts from (and is evaluated with) its own last model, exactly as
    # Local; with lam = 0 no extra loss term exists, so both runs consume the same
    # batches and produce the same numbers bit for bit.
    empty = torch.empty(2, 0, dtype=torch.long)
    sfl = _simulator(SFL(lam=0.0), _dataset(edge_index=empty))
    local = _simulator(Local(), _dataset(edge_index=empty))
    assert sfl.strategy.configure_train(1, torch.arange(4)).regularizer is None
    h_sfl, h_local = sfl.run(), local.run()
    assert torch.equal(sfl.local_params, local.local_params)
    for a, b in zip(h_sfl.records, h_local.records, strict=True):
        assert torch.equal(a.test["accuracy"], b.test["accuracy"])
        assert torch.equal(a.val["accuracy"], b.val["accuracy"])
    assert torch.equal(sfl.strategy.personalized_params(torch.arange(4)), local.local_params)


def test_empty_graph_regularizer_pulls_towards_the_clients_own_model():
    empty = torch.empty(2, 0, dtype=torch.long)
    sim = _simulator(SFL(lam=5.0), _dataset(edge_index=empty), rounds=1)
    sim.run()
    plan = sim.strategy.configure_train(2, torch.arange(4))
    # Reference and start are the client's own last model.
    assert torch.equal(plan.params, sim.local_params)
    assert torch.equal(plan.regularizer.refs[0], sim.local_params)
    theta = torch.randn(sim.layout.num_params)
    value = plan.regularizer.penalty(theta, *(r[2] for r in plan.regularizer.refs))
    assert torch.allclose(value, 2.5 * (theta - sim.local_params[2]).pow(2).sum())
    # The term reaches local training: a round differs from Local's.
    local = _simulator(Local(), _dataset(edge_index=empty), rounds=1)
    local.run()
    assert not torch.allclose(sim.local_params, local.local_params)


def test_start_options_and_global_term():
    ei = torch.tensor([[0, 1], [1, 0]])
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [4.0, 4.0]])
    s = SFL(num_hops=1, lam=0.5, start="global", global_lam=2.0)
    s.setup(_ctx(3, torch.zeros(2), ei))
    _upload(s, 1, [0, 1, 2], v)
    u = s.personalized_params(torch.arange(3))
    w = u.mean(0)
    assert torch.allclose(s.global_model(), w)
    plan = s.configure_train(2, torch.tensor([0, 2]))
    assert torch.allclose(plan.params, w.expand(2, -1))
    ref_u, ref_w = plan.regularizer.refs
    assert torch.equal(ref_u, u[[0, 2]]) and torch.allclose(ref_w, w.expand(2, -1))
    theta = torch.tensor([1.0, -1.0])
    expected = 0.25 * (theta - u[0]).pow(2).sum() + 1.0 * (theta - w).pow(2).sum()
    assert torch.allclose(plan.regularizer.penalty(theta, ref_u[0], ref_w[0]), expected)
    assert torch.allclose(sfl_penalty(theta, u[0], w, lam=0.5, global_lam=2.0), expected)
    local = SFL(start="local")
    local.setup(_ctx(3, torch.zeros(2), ei))
    assert local.configure_train(1, torch.arange(3)).params is None


def test_held_out_client_gets_its_neighbours_propagation():
    # Client 3 never trains; its only neighbour is client 0.
    ei = torch.tensor([[0, 3, 0, 1], [3, 0, 1, 0]])
    sim = _simulator(SFL(num_hops=1, normalization="row"), _dataset(edge_index=ei),
                     held_out=torch.tensor([3]), rounds=1)
    sim.run()
    s = sim.strategy
    assert not bool(s.ctx.table.trained[3])
    assert torch.allclose(s.personalized_params(torch.tensor([3]))[0], sim.local_params[0])


def test_missing_graph_falls_back_to_complete_graph(caplog):
    s = SFL(num_hops=1)
    with caplog.at_level(logging.WARNING, logger="pyg_fedgraph.strategies.sfl"):
        s.setup(_ctx(4, torch.zeros(2)))
    assert "complete graph" in caplog.text
    v = torch.arange(8.0).view(4, 2)
    _upload(s, 1, [0, 1, 2, 3], v)
    assert torch.allclose(s.collaboration_graph(), torch.full((4, 4), 0.25))
    assert torch.allclose(s.personalized_params(torch.arange(4)), v.mean(0).expand(4, -1))
    with pytest.raises(ValueError, match="needs a prior client graph"):
        SFL(missing_graph="error").setup(_ctx(4, torch.zeros(2)))


def test_bad_prior_graph():
    with pytest.raises(ValueError, match="names client 5"):
        SFL().setup(_ctx(3, torch.zeros(2), torch.tensor([[0], [5]])))


def test_state_is_the_client_table():
    ei = torch.tensor([[0, 1, 2], [1, 2, 3]])
    sim = _simulator(SFL(), _dataset(edge_index=ei), held_out=torch.tensor([3]))
    sim.run()
    # V is the engine's client table and U is propagated from it: no state of its own.
    assert dict(sim.strategy.state_dict()) == {}
    assert torch.equal(sim.strategy.ctx.table.params[:3], sim.local_params[:3])
    fresh = SFL()
    fresh.setup(context_copy(sim.strategy.ctx))
    assert torch.equal(fresh.propagated, sim.strategy.propagated)
    a = sim.strategy.configure_train(3, torch.arange(3))
    b = fresh.configure_train(3, torch.arange(3))
    assert torch.equal(a.params, b.params) and torch.equal(a.regularizer.refs[0],
                                                           b.regularizer.refs[0])
    assert torch.equal(fresh.collaboration_graph(), sim.strategy.collaboration_graph())


@pytest.mark.parametrize("dataset", ["fl60", "digits"])
def test_cli_runs(tmp_path, dataset):
    from pyg_fedgraph.cli import main
    code = main(["run", "--dataset", dataset, "--strategy", "sfl", "--rounds", "2",
                 "--out", str(tmp_path), "--quiet", "--set", "steps=2"])
    assert code == 0
    summary = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert summary["strategy"] == "sfl" and 0.0 <= summary["test"] <= 1.0


def test_distance_penalty_is_the_codes_unsquared_pull():
    theta, u, w = torch.tensor([3.0, 4.0]), torch.zeros(2), torch.tensor([3.0, 0.0])
    # 0.5 * |(3, 4)| + 2 * |(0, 4)| = 2.5 + 8
    value = sfl_penalty(theta, u, w, lam=0.5, global_lam=2.0, penalty="distance")
    assert torch.allclose(value, torch.tensor(10.5))
    # Its gradient has length lam however close theta is, and is 0 at theta = u.
    g = torch.func.vmap(torch.func.grad(
        lambda t, r: sfl_penalty(t, r, lam=0.5, penalty="distance")))(
        torch.tensor([[1e-3, 0.0], [0.0, 0.0]]), torch.zeros(2, 2))
    assert torch.allclose(g, torch.tensor([[0.5, 0.0], [0.0, 0.0]]))
    s = SFL(lam=0.5, penalty="distance")
    s.setup(_ctx(2, torch.zeros(2), torch.tensor([[0, 1], [1, 0]])))
    plan = s.configure_train(1, torch.arange(2))
    ref = plan.regularizer.refs[0][0]
    assert torch.allclose(plan.regularizer.penalty(theta, ref), 0.5 * (theta - ref).norm())


def test_propagated_memory_smooths_stored_models_every_round():
    # Path 0 - 1 - 2, row normalization with self loops, one hop:
    # A_hat = [[1/2, 1/2, 0], [1/3, 1/3, 1/3], [0, 1/2, 1/2]]. The authors' code
    # stores the propagated models and propagates them again every round.
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    a = torch.tensor([[1 / 2, 1 / 2, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 2, 1 / 2]])
    v0, v2 = torch.tensor([6.0, 0.0]), torch.tensor([0.0, 12.0])
    s = SFL(num_hops=1, lam=0.0, normalization="row", memory="propagated")
    s.setup(_ctx(3, torch.zeros(2), ei))
    assert torch.equal(s.personalized_params(torch.arange(3)), torch.zeros(3, 2))
    assert torch.allclose(s.collaboration_graph(), a)
    _upload(s, 1, [0], v0.unsqueeze(0))
    s1 = a @ torch.stack([v0, torch.zeros(2), torch.zeros(2)])  # [v0/2, v0/3, 0]
    assert torch.allclose(s.personalized_params(torch.arange(3)), s1)
    _upload(s, 2, [2], v2.unsqueeze(0))
    s2 = a @ torch.stack([s1[0], s1[1], v2])
    assert torch.allclose(s.personalized_params(torch.arange(3)), s2)
    assert torch.allclose(s2[0], torch.tensor([2.5, 0.0]))  # (3 + 2) / 2: re-smoothed, unsampled
    assert torch.allclose(s.global_model(), s2.mean(0))  # read-out over all N clients
    # The default memory propagates the latest uploads of the uploading clients only.
    d = SFL(num_hops=1, lam=0.0, normalization="row")
    d.setup(_ctx(3, torch.zeros(2), ei))
    _upload(d, 1, [0], v0.unsqueeze(0))
    _upload(d, 2, [2], v2.unsqueeze(0))
    assert torch.allclose(d.personalized_params(torch.tensor([0]))[0], v0)


def test_authors_code_recipe_runs_and_resumes_exactly():
    ei = torch.tensor([[0, 1, 2, 1, 2, 3], [1, 2, 3, 0, 1, 2]])
    # The released code: stored-model memory, read-out start, row normalization and
    # no pull (its regularizer is computed from detached copies: no gradient).
    kw = {"memory": "propagated", "lam": 0.0, "start": "global", "normalization": "row"}
    assert kw == SFL_AUTHORS_CODE
    full = _simulator(SFL(**kw), _dataset(edge_index=ei), rounds=4)
    full.run()
    state = full.strategy.state_dict()
    assert set(state) == {"stored_params"} and state["stored_params"].shape == (
        4, full.layout.num_params)
    assert torch.equal(state["stored_params"], full.strategy.personalized_params(torch.arange(4)))
    first = _simulator(SFL(**kw), _dataset(edge_index=ei), rounds=4)
    first.run(2)
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    resumed = _simulator(SFL(**kw), _dataset(edge_index=ei), rounds=4)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    resumed.run()
    assert resumed.history == full.history
    assert torch.equal(resumed.strategy.stored_params, full.strategy.stored_params)
    # Not the default's run.
    default = _simulator(SFL(), _dataset(edge_index=ei), rounds=4)
    default.run()
    assert not torch.allclose(default.local_params, full.local_params)
