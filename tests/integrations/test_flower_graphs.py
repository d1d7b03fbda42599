r"""Clients that hold graphs under Flower: a node holds its client's graph,
representative strategies agree with the simulator, and a private part of
the model never leaves the node."""
import pytest
import torch

pytest.importorskip("flwr")

from test_flower import LocalGrid, one_thread, task_identity  # noqa: E402,F401 (fixtures)

from pyg_fedgraph.datasets import planted_graphs  # noqa: E402
from pyg_fedgraph.integrations.flower import GraphStrategy, make_client_app  # noqa: E402
from pyg_fedgraph.models import build_model  # noqa: E402
from pyg_fedgraph.simulation import Simulator  # noqa: E402
from pyg_fedgraph.strategies import build_strategy  # noqa: E402
from pyg_fedgraph.train import LocalConfig  # noqa: E402

# SGD: Adam's normalized steps turn float-rounding differences of near-zero
# gradients into visible ones; Adam's kept state is compared with FedAvg below.
LOCAL = LocalConfig(lr=0.1, momentum=0.9, full_batch=True, epochs=2)
ADAM = LocalConfig(optimizer="adam", lr=0.01, full_batch=True, epochs=2,
                   keep_optimizer_state=True)
KWARGS = {"pfedgat": {"heads": 2, "hidden_channels": 4, "feedback": "gradient"},
          "ditto": {"lam": 1.0}}


@pytest.fixture(scope="module")
def data():
    return planted_graphs(num_clients=6, num_groups=3, num_nodes=180, num_features=8)


def gcn(data):
    torch.manual_seed(0)
    return build_model("gcn", data.input_shape, data.num_classes, hidden_channels=8)


def masked_gcn(data):
    torch.manual_seed(0)
    return build_model("masked-gcn", data.input_shape, data.num_classes, hidden_channels=8,
                       l1=0.01)


def both(name, data, rounds=3, private=None, local=LOCAL, model=gcn):
    app = make_client_app(model(data), data, local=local, private=private)
    gs = GraphStrategy.from_dataset(build_strategy(name, **KWARGS.get(name, {})), model(data),
                                    data, local=local, fraction_train=1.0, private=private)
    grid = LocalGrid(app, data.num_clients)
    grid.replies = []

    def recorded(message, context):
        reply = app(message, context)
        grid.replies.append(reply)
        return reply

    grid.app = recorded
    gs.start(grid, num_rounds=rounds)
    sim = Simulator(data, model(data), build_strategy(name, **KWARGS.get(name, {})),
                    rounds=rounds, local=local, seed=0, sample_fraction=1.0, private=private)
    sim.run()
    assert gs.dropped == []
    return gs, grid, sim


def test_a_node_holds_its_clients_graph(data):
    one = data.subset(torch.tensor([4]))
    assert torch.equal(one.graphs.x[0], data.graphs.x[4])
    assert torch.equal(one.splits["train"].counts, data.splits["train"].counts[[4]])


@pytest.mark.parametrize("name,local", [("fedavg", ADAM), ("fedavg", LOCAL), ("pfedgraph", LOCAL),
                                        ("ditto", LOCAL), ("fedaghn", LOCAL),
                                        ("pfedgat", LOCAL)],
                         ids=["fedavg-adam", "fedavg", "pfedgraph", "ditto", "fedaghn",
                              "pfedgat"])
def test_graph_clients_under_flower_match_the_simulator(name, local, data):
    gs, _, sim = both(name, data, local=local)
    expected = sim.strategy.personalized_params(torch.arange(data.num_clients))
    expected = sim.local_params if expected is None else expected
    torch.testing.assert_close(gs.personalized_params(), expected, rtol=0, atol=1e-5)
    acc = torch.tensor([gs.evaluate_metrics[3][i]["test-accuracy"]
                        for i in range(data.num_clients)])
    torch.testing.assert_close(acc, sim.history.records[-1].test["accuracy"], rtol=0,
                               atol=1e-6)


@pytest.mark.parametrize("name", ["pfedgraph", "ditto"])
def test_a_private_head_never_leaves_the_node(name, data):
    gs, grid, sim = both(name, data, private="classifier")
    # Nothing sent either way names a private parameter.
    messages = [m.content for m in grid.sent + grid.replies]
    assert len(grid.replies) == len(grid.sent) > 0
    names = set()
    for content in messages:
        for record in content.array_records.values():
            names.update(record.keys())
    assert "convs.0.lin.weight" in names  # models did travel ...
    assert not any(k.startswith("classifier") for k in names)  # ... without their heads
    shared = sim.private.num_shared
    assert gs.layout.num_params == shared
    assert gs.engine.table.params.shape == (data.num_clients, shared)
    torch.testing.assert_close(gs.engine.table.params, sim.engine.table.params, rtol=0,
                               atol=1e-5)
    # Each node keeps its whole model, with its own private part: the simulator's.
    for context in grid.contexts.values():
        pid = int(context.node_config["partition-id"])
        kept = torch.from_numpy(context.state["pyg-fedgraph"]["params"].numpy().copy())
        torch.testing.assert_close(kept, sim.local_params[pid], rtol=0, atol=1e-5)
    heads = sim.local_params[:, sim.private.private_index]
    assert torch.cdist(heads, heads).add(torch.eye(data.num_clients)).min() > 0
    acc = torch.tensor([gs.evaluate_metrics[3][i]["test-accuracy"]
                        for i in range(data.num_clients)])
    torch.testing.assert_close(acc, sim.history.records[-1].test["accuracy"], rtol=0,
                               atol=1e-6)


def test_server_and_strategy_refuse_a_private_part_they_cannot_keep(data):
    with pytest.raises(ValueError, match="strategy 'fedrep' works on whole models"):
        GraphStrategy.from_dataset(build_strategy("fedrep"), gcn(data), data,
                                   private="classifier")


def test_fedpub_under_flower_matches_the_simulator_and_keeps_the_masks_home(data):
    # FED-PUB's client: masked GCN, masks private (declared by the model), L1 on them,
    # functional embeddings computed by the nodes, the proximal term rebuilt on them.
    gs, grid, sim = both("fedpub", data, rounds=2, model=masked_gcn)
    assert sim.private is not None and sim.private.private_names == [
        "convs.0.mask", "convs.1.mask", "classifier.mask"]
    names = set()
    for message in grid.sent + grid.replies:
        for record in message.content.array_records.values():
            names.update(record.keys())
    assert "convs.0.weight" in names and not any("mask" in k for k in names)
    assert gs.layout.num_params == sim.private.num_shared
    for key in ("personal_params", "weights", "embeddings", "global_params"):
        torch.testing.assert_close(getattr(gs.strategy, key), getattr(sim.strategy, key),
                                   rtol=0, atol=1e-5)
    for context in grid.contexts.values():
        pid = int(context.node_config["partition-id"])
        kept = torch.from_numpy(context.state["pyg-fedgraph"]["params"].numpy().copy())
        torch.testing.assert_close(kept, sim.local_params[pid], rtol=0, atol=1e-5)
    acc = torch.tensor([gs.evaluate_metrics[2][i]["test-accuracy"]
                        for i in range(data.num_clients)])
    torch.testing.assert_close(acc, sim.history.records[-1].test["accuracy"], rtol=0,
                               atol=1e-6)
