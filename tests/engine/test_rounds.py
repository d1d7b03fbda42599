"""The round engine on its own, driven by hand as a transport would drive it."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.engine.rounds import RoundEngine, num_sampled, sample_clients, snapshot
from pyg_fedgraph.strategies.base import Strategy
from pyg_fedgraph.strategies.fedavg import FedAvg, FedAvgFT
from pyg_fedgraph.train.jobs import TrainPlan
from pyg_fedgraph.utils.seeds import make_generator

N = 4


def layout() -> ParamLayout:
    return ParamLayout.from_module(nn.Linear(2, 1))  # D = 3


def engine(strategy: Strategy | None = None, **kwargs) -> RoundEngine:
    ring = torch.arange(N)
    edge_index = torch.stack([ring, (ring + 1) % N])
    kwargs = {"edge_index": edge_index, "edge_weight": torch.ones(N), "rounds": 3, **kwargs}
    return RoundEngine(strategy or FedAvg(), layout=layout(), init_params=torch.zeros(3),
                       num_samples=torch.tensor([1, 2, 3, 4]), **kwargs)


def test_a_round_by_hand_is_fedavg_and_fills_the_table():
    eng = engine()
    sampled = eng.sample(1)
    assert torch.equal(sampled, torch.arange(N))  # FedAvg samples everyone
    plan = eng.configure_train(1, sampled)
    assert torch.equal(plan.params, torch.zeros(N, 3))
    uploads = torch.arange(12, dtype=torch.float).view(N, 3)
    update = eng.aggregate_train(1, sampled, uploads, plan.params, loss=torch.ones(N))
    assert update.num_accepted == N and update.loss == 1.0 and eng.round == 1
    # Weights 1:2:3:4 out of 10.
    want = (torch.tensor([1.0, 2.0, 3.0, 4.0]) / 10) @ uploads
    assert torch.allclose(eng.strategy.global_params, want)
    assert torch.equal(eng.table.params, uploads) and eng.accepted_total == N
    # The round's graph: the prior graph restricted to the clients that replied.
    assert torch.equal(update.graph.edge_index, torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]))



@pytest.mark.parametrize("strategy", [FedAvg(weighting="uniform"),
                                      FedAvgFT(finetune_from="local", weighting="uniform")])
def test_uniform_weighting_is_the_plain_mean_of_the_uploads(strategy):
    eng = engine(strategy)
    sampled = torch.tensor([0, 3])                  # sample counts 1 and 4
    plan = eng.configure_train(1, sampled)
    uploads = torch.tensor([[1.0, 2.0, 3.0], [5.0, 6.0, 7.0]])
    eng.aggregate_train(1, sampled, uploads, plan.params, loss=torch.ones(2))
    assert torch.allclose(eng.strategy.global_params, torch.tensor([3.0, 4.0, 5.0]))
    # The default weighs them 1:4: (1 + 4 * 5) / 5 = 4.2.
    eng = engine(FedAvg())
    eng.aggregate_train(1, sampled, uploads, eng.configure_train(1, sampled).params,
                        loss=torch.ones(2))
    assert torch.allclose(eng.strategy.global_params, torch.tensor([4.2, 5.2, 6.2]))


def test_an_unknown_weighting_is_refused():
    with pytest.raises(ValueError,
                       match="weighting: expected one of 'samples', 'uniform', got 'nodes'"):
        FedAvg(weighting="nodes")  # type: ignore[arg-type]

def test_a_bad_upload_is_left_out_of_the_graph_and_the_table():
    eng = engine()
    clients = torch.tensor([0, 1, 2])
    uploads = torch.ones(3, 3)
    uploads[1, 0] = math.nan
    update = eng.aggregate_train(1, clients, uploads, torch.zeros(3, 3))
    assert update.accepted.tolist() == [True, False, True]
    assert update.graph.client_id.tolist() == [0, 2]
    # Client 1's row keeps the initial model; the others took their uploads.
    assert torch.equal(eng.table.params[1], torch.zeros(3))
    assert torch.equal(eng.table.params[2], uploads[2])
    # No edge of the ring joins the two survivors.
    assert update.graph.edge_index.size(1) == 0


def test_a_round_without_any_accepted_update_only_advances(caplog):
    eng = engine()
    before = eng.strategy.global_params.clone()
    update = eng.aggregate_train(1, torch.tensor([0]), torch.full((1, 3), math.inf),
                                 torch.zeros(1, 3))
    assert update.graph is None and math.isnan(update.loss) and eng.round == 1
    assert torch.equal(eng.strategy.global_params, before) and eng.accepted_total == 0
    assert "no update was accepted" in caplog.text


def test_evaluation_rounds_and_the_summary():
    eng = engine(eval_every=2, rounds=3)
    assert [eng.should_evaluate(r) for r in (1, 2, 3)] == [False, True, True]
    for rnd, acc in ((2, [0.5, 1.0, 0.5, 1.0]), (3, [0.25, 0.25, 0.25, 0.25])):
        metrics = {"accuracy": torch.tensor(acc), "loss": torch.zeros(N)}
        eng.record(rnd, metrics, metrics)
    summary = eng.summary()
    assert summary["best_round"] == 2 and summary["test"] == pytest.approx(0.75)
    assert summary["test_final"] == pytest.approx(0.25)


def test_the_state_restores_on_a_new_engine_and_checks_it_belongs_there():
    eng = engine()
    eng.aggregate_train(1, torch.arange(N), torch.ones(N, 3), torch.zeros(N, 3))
    state = snapshot(eng.state_dict())
    other = engine()
    other.load_state_dict(state)
    assert other.round == 1 and torch.equal(other.table.params, eng.table.params)
    assert torch.equal(other.strategy.global_params, eng.strategy.global_params)
    with pytest.raises(ValueError, match="the saved run has seed=0 but this one has 1"):
        engine(seed=1).load_state_dict(state)


class WrongPlan(FedAvg):
    def configure_train(self, rnd, clients):
        return {"params": None}


class WrongShape(FedAvg):
    def configure_train(self, rnd, clients):
        return TrainPlan(params=torch.zeros(clients.numel(), 5))


def test_plans_are_checked():
    with pytest.raises(TypeError, match="configure_train returned dict, expected a TrainPlan"):
        engine(WrongPlan()).configure_train(1, torch.arange(N))
    with pytest.raises(ValueError, match=r"sent parameters of shape \(4, 5\) to 4 clients with 3"):
        engine(WrongShape()).configure_train(1, torch.arange(N))


def test_sampling_is_the_seeded_stream():
    eng = engine(sample_fraction=0.5, seed=3)
    assert eng.num_sampled == num_sampled(N, 0.5) == 2
    want = sample_clients(torch.arange(N), 0.5, make_generator(3, "sample", 7))
    assert torch.equal(eng.sample(7), want)
    held = engine(held_out=torch.tensor([1, 2]))
    assert set(held.sample(1).tolist()) == {0, 3}
