r"""Every registered strategy runs on graph classification: GIN clients on a
federation across three tiny datasets (different feature widths and
classes), batched training equal to the per-client reference loop. Where a
strategy keeps the shared part only (all but four), the input layer and the
head stay private, as across datasets they must (GCFL's setting)."""
import dataclasses
import math

import pytest
import torch
from small_graph_sets import write_tu_group

from pyg_fedgraph.datasets import tu
from pyg_fedgraph.models import build_model
from pyg_fedgraph.simulation import Simulator
from pyg_fedgraph.strategies import STRATEGIES, build_strategy
from pyg_fedgraph.train import LocalConfig

# Small settings for a 2-round run of 6 clients (a strategy missing here runs with its
# defaults).
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
LOCAL = LocalConfig(lr=0.05, momentum=0.9, batch_size=8, epochs=1)
WHOLE = sorted(n for n, cls in STRATEGIES.items() if not cls.supports_private_parameters)


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = write_tu_group(tmp_path_factory.mktemp("tu"))
    data = tu("TOYA,TOYB,TOYC", root=str(root), clients_per_dataset=2)
    # A ring over the clients, for the strategies that need a prior graph.
    ring = torch.stack([torch.arange(6), (torch.arange(6) + 1) % 6])
    return data, dataclasses.replace(data, edge_index=torch.cat([ring, ring.flip(0)], 1))


def run(name, data, **kwargs):
    torch.manual_seed(0)
    model = build_model("gin", data.input_shape, data.num_classes, hidden_channels=8,
                        dropout=0.0, share="all" if name in WHOLE else "body")
    sim = Simulator(data, model, build_strategy(name, **KWARGS.get(name, {})), rounds=2,
                    local=LOCAL, sample_fraction=1.0, **kwargs)
    sim.run()
    return sim


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_trains_gin_clients_batched_as_the_loop_does(name, federation):
    data = federation[1] if STRATEGIES[name].needs_prior_graph else federation[0]
    batched = run(name, data)
    looped = run(name, data, parallel=False)
    assert len(batched.history) == 2
    if name not in WHOLE:  # the server holds the GIN layers only
        assert batched.private is not None
        assert batched.engine.layout.param_names == [
            n for n in batched.layout.param_names if n.startswith("convs.")]
    init = batched.trainer.layout.flatten(batched.trainer.model)
    assert not torch.allclose(batched.local_params, init.expand_as(batched.local_params))
    torch.testing.assert_close(batched.local_params, looped.local_params, rtol=0, atol=1e-4)
    for x, y in zip(batched.history.records, looped.history.records, strict=True):
        acc = x.test["accuracy"]
        assert bool(((acc >= 0) & (acc <= 1)).all())
        torch.testing.assert_close(acc, y.test["accuracy"], rtol=0, atol=1e-4)
    assert math.isfinite(batched.summary()["test"])
