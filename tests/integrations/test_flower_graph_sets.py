r"""Clients that hold sets of graphs across datasets, in the simulator and
under Flower: the input layer and the head of every client's GIN (its
private part, GCFL's setting) are never uploaded nor aggregated; only the
GIN layers travel, and both runs agree."""
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from test_flower import LocalGrid, one_thread, task_identity  # noqa: E402,F401 (fixtures)

from pyg_fedgraph.datasets import tu  # noqa: E402
from pyg_fedgraph.integrations.flower import GraphStrategy, make_client_app  # noqa: E402
from pyg_fedgraph.models import build_model  # noqa: E402
from pyg_fedgraph.simulation import Simulator  # noqa: E402
from pyg_fedgraph.strategies import build_strategy  # noqa: E402
from pyg_fedgraph.train import LocalConfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graphs"))
from small_graph_sets import write_tu_group  # noqa: E402

LOCAL = LocalConfig(lr=0.05, momentum=0.9, batch_size=8, epochs=1)
PRIVATE = ("pre.", "post.", "classifier.")
KWARGS = {"gcfl-plus": {"warmup_rounds": 1, "eps1": 10.0, "eps2": 0.0, "seq_length": 2}}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = write_tu_group(tmp_path_factory.mktemp("tu"))
    return tu("TOYA,TOYB,TOYC", root=str(root), clients_per_dataset=2)


def gin(data):
    torch.manual_seed(0)
    return build_model("gin", data.input_shape, data.num_classes, hidden_channels=8,
                       dropout=0.0)


def test_a_node_holds_its_own_graphs_only(data):
    one = data.subset(torch.tensor([4]))
    assert one.store.num_graphs == sum(int(data.num_samples(s)[4])
                                       for s in ("train", "val", "test"))
    index = torch.tensor([[0, 3, 1]])
    mine, _ = one.batch("train", index)
    theirs, _ = data.batch("train", index, torch.tensor([4]))
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))


def test_the_simulator_never_uploads_nor_aggregates_the_private_layers(data):
    sim = Simulator(data, gin(data), build_strategy("pfedgraph"), rounds=3, local=LOCAL,
                    sample_fraction=1.0)
    uploads = []
    aggregate = sim.engine.aggregate_train

    def spy(rnd, clients, params, start, outputs=None, loss=None):
        uploads.append((params.clone(), start.clone()))
        return aggregate(rnd, clients, params, start, outputs, loss)

    sim.engine.aggregate_train = spy
    sim.run()
    priv = sim.private
    assert priv is not None and priv.prefixes == ("pre", "post", "classifier")
    shared = [n for n in sim.layout.param_names if not n.startswith(PRIVATE)]
    assert sim.engine.layout.param_names == shared and all(n.startswith("convs.")
                                                           for n in shared)
    assert len(uploads) == 3
    for params, start in uploads:
        assert params.size(1) == start.size(1) == priv.num_shared
    # What each client uploaded is its own shared part, never a private value.
    assert torch.equal(uploads[-1][0], priv.share(sim.local_params))
    # Private layers trained on each client alone: none of them equals another's
    # (an average would make them equal within pFedGraph's neighbourhoods).
    private = sim.local_params[:, priv.private_index]
    init = sim.trainer.layout.flatten(sim.trainer.model)[priv.private_index]
    assert not torch.allclose(private, init.expand_as(private))
    assert torch.cdist(private, private).add(torch.eye(data.num_clients)).min() > 0
    # The collaboration graph was computed on the GIN layers only.
    assert sim.strategy.collaboration_graph().shape == (6, 6)


@pytest.mark.parametrize("name", ["fedavg", "pfedgraph", "gcfl-plus"])
def test_under_flower_the_private_layers_never_leave_the_node(name, data):
    app = make_client_app(gin(data), data, local=LOCAL)
    gs = GraphStrategy.from_dataset(build_strategy(name, **KWARGS.get(name, {})), gin(data),
                                    data, local=LOCAL, fraction_train=1.0)
    grid = LocalGrid(app, data.num_clients)
    replies = []

    def recorded(message, context):
        reply = app(message, context)
        replies.append(reply)
        return reply

    grid.app = recorded
    gs.start(grid, num_rounds=3)
    sim = Simulator(data, gin(data), build_strategy(name, **KWARGS.get(name, {})), rounds=3,
                    local=LOCAL, seed=0, sample_fraction=1.0)
    sim.run()
    assert gs.dropped == []
    names = set()
    for message in grid.sent + replies:
        for record in message.content.array_records.values():
            names.update(record.keys())
    assert "convs.0.nn.0.weight" in names  # the GIN layers travel ...
    assert not any(k.startswith(PRIVATE) for k in names)  # ... the others never
    assert gs.layout.num_params == sim.private.num_shared
    torch.testing.assert_close(gs.engine.table.params, sim.engine.table.params, rtol=0,
                               atol=1e-5)
    for context in grid.contexts.values():  # each node keeps its whole model
        pid = int(context.node_config["partition-id"])
        kept = torch.from_numpy(context.state["pyg-fedgraph"]["params"].numpy().copy())
        torch.testing.assert_close(kept, sim.local_params[pid], rtol=0, atol=1e-5)
    acc = torch.tensor([gs.evaluate_metrics[3][i]["test-accuracy"]
                        for i in range(data.num_clients)])
    torch.testing.assert_close(acc, sim.history.records[-1].test["accuracy"], rtol=0,
                               atol=1e-6)
