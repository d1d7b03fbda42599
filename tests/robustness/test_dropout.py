import csv
import math

import pytest
import torch
from robustness_helpers import tiny_simulator, two_group_dataset

from pyg_fedgraph.cli import main
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES
from pyg_fedgraph.strategies.fedavg import FedAvg, Local
from pyg_fedgraph.train.config import LocalConfig

CFG = LocalConfig(lr=0.1, batch_size=4, steps=2)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_survives_half_dropout(name):
    sim = tiny_simulator(name, rounds=10, dropout=0.5)
    sim.run()
    assert sim.round == 10 and len(sim.history) == 10
    dropped = [r.extra["num_dropped"] for r in sim.history.records]
    assert sum(dropped) > 0 and all(d <= r.num_sampled for d, r in
                                    zip(dropped, sim.history.records, strict=True))
    assert not math.isnan(sim.history.mean("test")[-1])
    assert bool(torch.isfinite(sim.local_params).all())


class Spy(FedAvg):
    def __init__(self):
        super().__init__()
        self.seen = []

    def aggregate_train(self, rnd, graph):
        self.seen.append(graph.client_id.clone())
        super().aggregate_train(rnd, graph)


class LocalSpy(Local):
    def __init__(self):
        super().__init__()
        self.seen = []

    def aggregate_train(self, rnd, graph):
        self.seen.append(graph.client_id.clone())


def simulate(strategy, rounds=4, **kwargs):
    torch.manual_seed(0)
    return Simulator(two_group_dataset(), MLP(2, 8, 2), strategy, rounds=rounds, local=CFG,
                     **kwargs)


def test_dropped_clients_keep_their_model_and_are_not_aggregated():
    sim = simulate(LocalSpy(), dropout=0.5)
    for rnd in range(1, 5):
        before = sim.local_params.clone()
        record = sim.step()
        seen = sim.strategy.seen[-1] if len(sim.strategy.seen) == rnd else torch.empty(0)
        dropped = [c for c in range(6) if c not in seen.tolist()]
        assert record.extra["num_dropped"] == len(dropped)
        assert torch.equal(sim.local_params[dropped], before[dropped])
        changed = (sim.local_params[seen] != before[seen]).any(1)
        assert bool(changed.all())


def test_dropout_is_reproducible_and_varies_by_round():
    a, b = simulate(Spy(), rounds=6, dropout=0.5), simulate(Spy(), rounds=6, dropout=0.5)
    a.run()
    b.run()
    assert [s.tolist() for s in a.strategy.seen] == [s.tolist() for s in b.strategy.seen]
    assert a.history == b.history
    assert len({tuple(s.tolist()) for s in a.strategy.seen}) > 1


def test_no_dropout_changes_nothing():
    a, b = simulate(FedAvg()), simulate(FedAvg(), dropout=0.0)
    a.run()
    b.run()
    assert a.history == b.history
    assert all(r.extra["num_dropped"] == 0 for r in a.history.records)


def test_everyone_dropped_skips_aggregation_but_evaluates(monkeypatch):
    sim = simulate(Spy(), rounds=3, dropout=0.5)
    monkeypatch.setattr(sim, "_survivors", lambda rnd, n: torch.zeros(0, dtype=torch.long))
    init = sim.local_params.clone()
    sim.run()
    assert sim.strategy.seen == []
    assert len(sim.history) == 3
    assert [r.extra["num_dropped"] for r in sim.history.records] == [6, 6, 6]
    assert all(math.isnan(r.train_loss) for r in sim.history.records)
    assert torch.equal(sim.local_params, init)
    assert not math.isnan(sim.history.mean("test")[-1])


def test_dropout_must_be_a_probability_below_1():
    # The check the command line makes (one declaration): 1.0 would train nobody.
    for value in (1.5, 1.0, -0.1):
        with pytest.raises(ValueError, match=f"dropout must be .*, got {value}"):
            simulate(FedAvg(), dropout=value)


def test_cli_dropout(tmp_path):
    code = main(["run", "--dataset", "fl60", "--clients", "6", "--strategy", "fedavg",
                 "--rounds", "3", "--quiet", "--set", "steps=2",
                 "--set", "data.samples_per_client=20", "--dropout", "0.5",
                 "--out", str(tmp_path)])
    assert code == 0
    with open(tmp_path / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and sum(int(r["num_dropped"]) for r in rows) > 0
