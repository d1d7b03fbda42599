r"""Graph recovery per round: the callback, its columns in the history and the
run folder, its place in every experiment run, and resuming."""
from __future__ import annotations

import csv
import json
import types

import pytest
import torch

from pyg_fedgraph.cli import main
from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
from pyg_fedgraph.experiment.runner import Runner, StopSignal
from pyg_fedgraph.simulation import GroupRecoveryCallback, Simulator, strategy_clusters
from pyg_fedgraph.strategies import build_strategy
from pyg_fedgraph.utils.recovery import graph_recovery, partition_scores

PLANTED = {"data.num_nodes": 240}
KEYS = ["rand_index", "adjusted_rand_index"]


def planted(strategy: str, rounds: int = 2, **over) -> tuple[ExperimentConfig, Simulator]:
    cfg = ExperimentConfig(dataset="planted-graphs", strategy=strategy, clients=8,
                           rounds=rounds, overrides={**PLANTED, **over})
    return cfg, build_simulator(cfg)


def rows(sim: Simulator) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in sim.history.round_rows()]


class FakeClusters:
    r"""A strategy exposing clusters as CFL and IFCA do."""

    def __init__(self, members):
        self.members = members

    def clusters(self):
        return [torch.tensor(m, dtype=torch.long) for m in self.members]


class FakeGraph:
    name = "fake"

    def __init__(self, weight):
        self.weight = weight

    def collaboration_graph(self):
        return self.weight


def fake_sim(strategy, labels, trained=None):
    r"""What the callback reads of a simulator: its strategy, the dataset's
    ``client_labels`` and the clients that train (default: all)."""
    truth = None if labels is None else torch.tensor(labels)
    train = torch.tensor(trained) if trained is not None else torch.arange(len(labels or []))
    dataset = types.SimpleNamespace(name="fake", client_labels=truth)
    return types.SimpleNamespace(strategy=strategy, dataset=dataset, train_clients=train)


def test_strategy_clusters_reads_clusters_and_assignments():
    clients, cluster = strategy_clusters(FakeClusters([[3, 0], [], [1]]))
    assert clients.tolist() == [0, 1, 3] and cluster.tolist() == [0, 2, 0]
    cedar = types.SimpleNamespace(last_assignment=lambda: (torch.tensor([1, 2]),
                                                           torch.tensor([4, 4])))
    clients, cluster = strategy_clusters(cedar)
    assert clients.tolist() == [1, 2] and cluster.tolist() == [4, 4]
    assert strategy_clusters(FakeGraph(None)) is None


def test_the_callback_scores_clusters_and_graphs_over_trained_clients():
    labels = [0, 0, 1, 1, 1]
    # Clusters {0, 3}, {1}: clients 2 and 4 never placed, left out.
    record = types.SimpleNamespace(extra={})
    GroupRecoveryCallback()(fake_sim(FakeClusters([[0, 3], [1]]), labels), record)
    assert record.extra == partition_scores(torch.tensor([0, 1, 0]), torch.tensor([0, 0, 1]))
    # A graph whose trained clients 0-3 form two exact blocks; client 4, held out,
    # gives all its weight to group 0: scoring it would split its group.
    w = torch.zeros(5, 5)
    w[:2, :2] = w[2:4, 2:4] = 0.5
    w[4, :2] = 0.5
    sim = fake_sim(FakeGraph(w), labels, trained=[0, 1, 2, 3])
    assert GroupRecoveryCallback().scores(sim) == {"rand_index": 1.0,
                                                  "adjusted_rand_index": 1.0}
    everyone = GroupRecoveryCallback().scores(fake_sim(FakeGraph(w), labels))
    assert everyone == graph_recovery(w, torch.tensor(labels))
    assert everyone["adjusted_rand_index"] < 1.0
    # The components rule with a given k reads the same graph.
    assert GroupRecoveryCallback("components", k=1).scores(sim)["adjusted_rand_index"] == 1.0
    # No graph yet: nothing is recorded.
    record = types.SimpleNamespace(extra={})
    GroupRecoveryCallback()(fake_sim(FakeGraph(None), labels), record)
    assert record.extra == {}


def test_the_callback_refuses_what_it_cannot_score():
    with pytest.raises(ValueError, match="dataset 'fake' has no client_labels"):
        GroupRecoveryCallback().scores(fake_sim(FakeGraph(torch.eye(2)), None))
    with pytest.raises(ValueError, match=r"matrix of shape \(2, 2\) for 3 clients"):
        GroupRecoveryCallback().scores(fake_sim(FakeGraph(torch.eye(2)), [0, 1, 1]))
    with pytest.raises(ValueError, match="unknown reading rule 'louvain'"):
        GroupRecoveryCallback("louvain")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rule='components'"):
        GroupRecoveryCallback(k=2)
    assert repr(GroupRecoveryCallback("components", k=2)) == \
        "GroupRecoveryCallback(rule='components', k=2, seed=0)"


def test_runs_with_a_graph_or_clusters_get_the_columns_others_none():
    _, sim = planted("pfedgraph")
    assert GroupRecoveryCallback.applies(sim.dataset, sim.strategy)
    sim.run()
    last = sim.history.round_rows()[-1]
    expected = graph_recovery(sim.strategy.collaboration_graph(), sim.dataset.client_labels)
    assert {k: last[k] for k in KEYS} == expected
    assert all(set(KEYS) <= set(r) for r in sim.history.round_rows())
    assert {k: sim.summary()[k] for k in KEYS} == expected

    _, sim = planted("ifca", **{"num_clusters": 2})
    sim.run()
    clients, cluster = strategy_clusters(sim.strategy)
    assert {k: sim.history.round_rows()[-1][k] for k in KEYS} == \
        partition_scores(cluster, sim.dataset.client_labels[clients])

    for name in ("fedavg", "local"):
        _, sim = planted(name)
        assert not GroupRecoveryCallback.applies(sim.dataset, sim.strategy)
        sim.run()
        assert not set(KEYS) & set(sim.history.round_rows()[-1])
        assert not set(KEYS) & set(sim.summary())
    # Without known groups nothing is added either, nor with dominant classes for groups.
    data = types.SimpleNamespace(client_labels=None, info={})
    assert not GroupRecoveryCallback.applies(data, build_strategy("pfedgraph"))
    from pyg_fedgraph.datasets import digits
    dominant = digits(num_clients=6, partition="pathological")
    assert dominant.client_labels is not None
    assert dominant.info["client_labels"] == "dominant class"
    assert not GroupRecoveryCallback.applies(dominant, build_strategy("pfedgraph"))
    grouped = digits(num_clients=6, partition="group", num_groups=2)
    assert GroupRecoveryCallback.applies(grouped, build_strategy("pfedgraph"))


def test_a_resumed_run_has_the_columns_of_an_uninterrupted_one(tmp_path):
    _, full = planted("pfedgraph", rounds=3)
    full.run()
    cfg, sim = planted("pfedgraph", rounds=3)
    stop = StopSignal()

    def stop_after_one(sim, record):
        if record.round == 1:
            stop.request()

    first = Runner(sim, checkpoint=tmp_path / "ckpt.pt", settings=cfg.to_dict(),
                   callbacks=[stop_after_one], stop=stop)
    assert first.run().status == "stopped"
    _, again = planted("pfedgraph", rounds=3)
    runner = Runner(again, checkpoint=tmp_path / "ckpt.pt", settings=cfg.to_dict())
    assert runner.resume()
    assert again.round == 1 and set(KEYS) <= set(again.history.round_rows()[0])
    assert runner.run().status == "finished"
    assert rows(again) == rows(full)
    assert set(KEYS) <= set(rows(again)[-1])


@pytest.mark.slow
def test_the_run_folder_and_results_carry_the_scores(tmp_path, monkeypatch, capsys):
    args = ["run", "--dataset", "planted-graphs", "--clients", "8", "--set",
            "data.num_nodes=240", "--strategy", "pfedgraph,fedavg", "--rounds", "2", "--quiet"]
    assert main(args + ["--out", str(tmp_path / "full")]) == 0
    table = capsys.readouterr().out
    assert "| adjusted_rand_index |" in table.splitlines()[2]

    def history(folder):
        with open(folder / "history.csv", newline="") as f:
            return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(f)]

    full = tmp_path / "full"
    graph_rows = history(full / "pfedgraph")
    assert set(KEYS) <= set(graph_rows[0])
    assert not set(KEYS) & set(history(full / "fedavg")[0])
    summary = json.loads((full / "pfedgraph" / "summary.json").read_text())
    assert summary["adjusted_rand_index"] == float(graph_rows[-1]["adjusted_rand_index"])
    assert "adjusted_rand_index" not in json.loads((full / "fedavg" / "summary.json").read_text())
    results = {r["strategy"]: r for r in json.loads((full / "comparison.json").read_text())}
    assert results["pfedgraph"]["adjusted_rand_index"] == summary["adjusted_rand_index"]

    # Killed inside pfedgraph's second round, then resumed: the same files.
    real_step = Simulator.step

    def killed(self):
        if self.strategy.name == "pfedgraph" and self.round == 1:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(Simulator, "step", killed)
    out = tmp_path / "killed"
    assert main(args + ["--out", str(out), "--checkpoint-every", "1"]) == 130
    monkeypatch.undo()
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert history(out / "pfedgraph") == graph_rows
    assert json.loads((out / "pfedgraph" / "summary.json").read_text())[
        "adjusted_rand_index"] == summary["adjusted_rand_index"]
