import logging
import math

import pytest
import torch
from robustness_helpers import two_group_dataset

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.engine.validation import check_dataset
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import build_strategy
from pyg_fedgraph.train.config import LocalConfig

LOGGER = "pyg_fedgraph.engine.validation"


def simulate(data, strategy="fedavg", local=None, **kwargs):
    torch.manual_seed(0)
    return Simulator(data, MLP(2, 8, data.num_classes), build_strategy(strategy), rounds=3,
                     local=local or LocalConfig(lr=0.1, batch_size=4, epochs=1), **kwargs)


@pytest.mark.parametrize("strategy", ["fedavg", "pfedgraph", "fedaghn", "local"])
def test_client_without_training_samples(caplog, strategy):
    data = two_group_dataset(train_counts=(8, 0, 8, 8))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        sim = simulate(data, strategy)
    assert "client(s) [1] have no training samples" in caplog.text
    deltas, aggregate = [], sim.strategy.aggregate_train

    def spy(rnd, graph):
        deltas.append(graph.delta[graph.client_id == 1])
        aggregate(rnd, graph)

    sim.strategy.aggregate_train = spy
    sim.run()
    assert len(deltas) == 3  # it takes part, with a zero update: it keeps what it is sent
    assert all(d.shape == (1, sim.layout.num_params) and not bool(d.any()) for d in deltas)
    assert not math.isnan(sim.history.mean("test")[-1])
    assert bool(torch.isfinite(sim.local_params).all())


def test_client_without_any_sample():
    data = two_group_dataset(train_counts=(8, 0, 8), test_count=6)
    for name in ("val", "test"):
        sp = data.splits[name]
        counts = sp.counts.clone()
        counts[1] = 0
        data.splits[name] = ClientSplit(sp.x, sp.y, counts)
    sim = simulate(data)
    sim.run()
    last = sim.history.records[-1]
    assert math.isnan(float(last.test["accuracy"][1]))  # nothing to evaluate on
    assert not math.isnan(sim.history.mean("test")[-1])  # left out of the mean
    assert math.isfinite(sim.summary()["test"])


def test_class_missing_everywhere(caplog):
    data = two_group_dataset(num_classes=4)  # labels 0 and 1 only
    with caplog.at_level(logging.INFO, logger=LOGGER):
        sim = simulate(data)
    assert "class(es) [2, 3] appear in no client's training data" in caplog.text
    sim.run()
    assert 0.0 <= sim.summary()["test"] <= 1.0


@pytest.mark.parametrize("local", [LocalConfig(lr=0.1, batch_size=16, epochs=2),
                                   LocalConfig(lr=0.1, batch_size=16, steps=3)])
def test_fewer_samples_than_a_batch(local):
    data = two_group_dataset(train_counts=(3, 1, 5, 2))
    sim = simulate(data, local=local)
    init = sim.local_params.clone()
    sim.run()
    assert bool((sim.local_params != init).any(1).all())  # every client trained
    assert not math.isnan(sim.history.mean("test")[-1])


def test_label_out_of_range_names_the_client():
    data = two_group_dataset(train_counts=(4, 4, 4, 4))
    data.splits["train"].y[3, 2] = 5
    with pytest.raises(ValueError, match=r"^client 3: class labels outside \[0, 2\) in its "
                                         r"train split"):
        simulate(data)
    # A bad value in a padding row is not data and is ignored.
    clean = two_group_dataset(train_counts=(4, 2))
    clean.splits["train"].y[1, 3] = 9
    check_dataset(clean)


def test_non_finite_inputs_name_the_client():
    data = two_group_dataset(train_counts=(4, 4, 4))
    data.splits["val"].x[1, 0, 0] = math.nan
    data.splits["val"].x[2, 1, 1] = math.inf
    with pytest.raises(ValueError, match=r"^clients 1, 2: non-finite \(NaN/Inf\) inputs in its "
                                         r"val split"):
        simulate(data)


def test_float_labels_must_be_integers():
    x = torch.randn(2, 3, 2)
    y = torch.tensor([[0.0, 1.0, 1.0], [0.5, 0.0, 1.0]])
    split = ClientSplit(x, y, torch.tensor([3, 3]))
    data = FederatedDataset("f", "classification", {"train": split, "val": split,
                                                    "test": split}, num_classes=2)
    with pytest.raises(ValueError, match="client 1: non-integer class labels"):
        check_dataset(data)
