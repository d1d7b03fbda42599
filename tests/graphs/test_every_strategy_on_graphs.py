r"""Every registered strategy runs on subgraph FL: GCN clients on the
synthetic planted-community federation, batched training equal to the
per-client reference loop (torch's own optimizers, one client at a time)."""
import math

import pytest
import torch

from pyg_fedgraph.datasets import planted_graphs
from pyg_fedgraph.models import build_model
from pyg_fedgraph.simulation import Simulator
from pyg_fedgraph.strategies import STRATEGIES, build_strategy
from pyg_fedgraph.train import LocalConfig

# Small settings for a 2-round run of 8 clients (a strategy missing here runs
# with its defaults).
KWARGS = {
    "pfedgat": {"heads": 2, "hidden_channels": 4},
    "panacea": {"embedding_dim": 4, "hidden_channels": 8, "server_steps": 2},
    "pfedhn": {"embedding_dim": 4, "hidden_channels": 8},
    "pfedla": {"embedding_dim": 4, "hidden_channels": 8},
    "fedcedar": {"num_clusters": 2},
    "ifca": {"num_clusters": 2},
    "cfl": {"warmup_rounds": 1, "eps1": 10.0, "eps2": 0.0},
    "gcfl": {"warmup_rounds": 1, "eps1": 10.0, "eps2": 0.0},
    "gcfl-plus": {"warmup_rounds": 1, "eps1": 10.0, "eps2": 0.0, "seq_length": 1},
    "pfedme": {"inner_steps": 2},
}
LOCAL = LocalConfig(lr=0.05, momentum=0.9, full_batch=True, epochs=2)


@pytest.fixture(scope="module")
def federation():
    return planted_graphs(num_clients=8, num_nodes=240, num_features=8)


def run(name, data, **kwargs):
    torch.manual_seed(0)
    model = build_model("gcn", data.input_shape, data.num_classes, hidden_channels=8)
    sim = Simulator(data, model, build_strategy(name, **KWARGS.get(name, {})), rounds=2,
                    local=LOCAL, sample_fraction=1.0, **kwargs)
    sim.run()
    return sim


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_trains_gcn_clients_batched_as_the_loop_does(name, federation):
    batched = run(name, federation)
    looped = run(name, federation, parallel=False)
    assert len(batched.history) == 2
    init = batched.trainer.layout.flatten(batched.trainer.model)
    assert not torch.allclose(batched.local_params, init.expand_as(batched.local_params))
    torch.testing.assert_close(batched.local_params, looped.local_params, rtol=0, atol=1e-4)
    for x, y in zip(batched.history.records, looped.history.records, strict=True):
        acc = x.test["accuracy"]
        assert bool(((acc >= 0) & (acc <= 1)).all())
        torch.testing.assert_close(acc, y.test["accuracy"], rtol=0, atol=1e-4)
    assert math.isfinite(batched.summary()["test"])
