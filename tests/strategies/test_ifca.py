"""IFCA and its ChooseModel start job."""
import pytest
import torch
from strategy_toys import two_group_dataset

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.nn import cluster_mean
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import IFCA, STRATEGIES, FedAvg, build_strategy
from pyg_fedgraph.train import ClientTrainer, LocalConfig
from pyg_fedgraph.train.jobs import ChooseModel, ClientStart

LOCAL = LocalConfig(lr=0.2, batch_size=8, epochs=2)


def _simulator(strategy, data=None, rounds=4, seed=0):
    torch.manual_seed(seed)
    return Simulator(data or two_group_dataset(), MLP(2, 8, 2, num_layers=2), strategy,
                     rounds=rounds, local=LOCAL, seed=seed)


def test_cluster_mean_by_hand():
    x = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 4.0]])
    means, total = cluster_mean(x, torch.tensor([0, 0, 2]), 3, torch.tensor([1.0, 3.0, 2.0]))
    torch.testing.assert_close(means, torch.tensor([[2.5, 1.5], [0.0, 0.0], [5.0, 4.0]]))
    torch.testing.assert_close(total, torch.tensor([4.0, 0.0, 2.0]))
    with pytest.raises(ValueError, match=r"cluster ids must lie in \[0, 2\)"):
        cluster_mean(x, torch.tensor([0, 1, 2]), 2)


def test_choose_model_takes_each_clients_lowest_loss_candidate():
    data = two_group_dataset()
    model = torch.nn.Linear(2, 2)
    trainer = ClientTrainer(model, data, config=LOCAL)
    layout = trainer.layout
    # Candidate 0 labels x_0 > 0 as class 1 (clients 0, 1), candidate 1 the opposite.
    good = torch.nn.Linear(2, 2)
    with torch.no_grad():
        good.weight.copy_(torch.tensor([[-5.0, 0.0], [5.0, 0.0]]))
        good.bias.zero_()
    a = layout.flatten(good)
    candidates = torch.stack([a, -a])
    everyone = torch.arange(4)
    start = ClientStart(everyone, everyone, candidates[[1, 1, 1, 1]],
                        torch.zeros(4, 0))
    params, out = ChooseModel(candidates).prepare(trainer, start, seed=0, rnd=1)
    assert out["choice"].tolist() == [0, 0, 1, 1]
    torch.testing.assert_close(params, candidates[[0, 0, 1, 1]])
    # One client at a time chooses the same (batched == loop over clients).
    for i in range(4):
        one = ClientStart(everyone[i:i + 1], everyone[i:i + 1], params[i:i + 1],
                          torch.zeros(1, 0))
        assert int(ChooseModel(candidates).prepare(trainer, one, seed=0, rnd=1)[1]["choice"]) \
            == int(out["choice"][i])


def test_one_cluster_is_fedavg():
    ifca = _simulator(IFCA(num_clusters=1))
    fedavg = _simulator(FedAvg())
    ifca.run(), fedavg.run()
    torch.testing.assert_close(ifca.strategy.cluster_params[0], fedavg.strategy.global_params,
                               atol=1e-6, rtol=0)
    for split in ("val", "test"):
        assert ifca.history.mean(split) == pytest.approx(fedavg.history.mean(split), abs=1e-6)


def test_two_clusters_separate_the_two_label_maps():
    # IFCA depends on its initialization (one cluster may take everyone): over
    # four seeds at least three must find the two groups exactly.
    found = []
    for seed in range(4):
        sim = _simulator(IFCA(num_clusters=2), rounds=6, seed=seed)
        sim.run()
        found.append({tuple(c.tolist()) for c in sim.strategy.clusters()} == {(0, 1), (2, 3)})
    assert sum(found) >= 3
    sim = _simulator(IFCA(num_clusters=2), rounds=6, seed=found.index(True))
    sim.run()
    # Each client is evaluated with its group's model: IFCA beats one shared model.
    fedavg = _simulator(FedAvg(), rounds=6, seed=found.index(True))
    fedavg.run()
    assert sim.summary()["test"] > fedavg.summary()["test"] + 0.2
    w = sim.strategy.collaboration_graph()
    assert torch.equal(w > 0, torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1],
                                            [0, 0, 1, 1]], dtype=torch.bool))
    torch.testing.assert_close(w.sum(1), torch.ones(4, dtype=w.dtype))


def test_initial_cluster_models_and_options():
    assert STRATEGIES["ifca"] is IFCA
    s = build_strategy("ifca", num_clusters=3, init_scale=0.5)
    assert s.hparams() == {"num_clusters": 3, "init_scale": 0.5, "weighted": True}
    assert IFCA().hparams()["init_scale"] == 0.1
    sim = _simulator(s, rounds=1)
    models = sim.strategy.cluster_params
    layout = ParamLayout.from_module(sim.trainer.model)
    init = layout.flatten(sim.trainer.model)
    torch.testing.assert_close(models[0], sim.engine.ctx.init_params)
    assert not torch.allclose(models[1], models[2]) and init.shape == models[1].shape
    with pytest.raises(ValueError, match="num_clusters must be >= 1, got 0"):
        IFCA(num_clusters=0)
