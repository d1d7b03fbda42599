"""Tests of the Flower integration (GraphStrategy, GraphClient, the wire protocol).

Most tests route messages through an in-process Grid (no Ray, milliseconds);
one module-scoped fixture runs a real Flower simulation (Ray backend, CPU) of
FedAvg, pFedGraph and a round with malformed replies.
"""
import dataclasses
import importlib
import io
import math
import sys

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("flwr", reason="the Flower integration needs the 'flower' extra")

from flwr.app import Array, ConfigRecord, Context, Error, Message, RecordDict
from flwr.serverapp import Grid

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.federation import ClientTable
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.integrations.flower import GraphStrategy, make_client_app
from pyg_fedgraph.integrations.flower import protocol as P
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.jobs import TrainPlan
from pyg_fedgraph.train.regularizers import (
    REGULARIZERS,
    ProximalTerm,
    Regularizer,
    per_client,
    register_regularizer,
)
from pyg_fedgraph.utils.seeds import make_generator

NUM_CLIENTS = 5
# Full-batch local steps (batch = the 8 training samples of every client): the
# batch order then only changes float summation order, so clients trained by
# Flower and by the simulator agree to rounding.
LOCAL = LocalConfig(lr=0.2, batch_size=8, epochs=2)


def tiny_dataset(num_clients: int = NUM_CLIENTS, seed: int = 0) -> FederatedDataset:
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for split, m in (("train", 8), ("val", 4), ("test", 4)):
        xs, ys = [], []
        for i in range(num_clients):
            angle = 2 * math.pi * (i // 2) / num_clients  # pairs of similar clients
            mu = 2.0 * torch.tensor([math.cos(angle), math.sin(angle)])
            y = torch.arange(m) % 2
            xs.append(torch.randn(m, 2, generator=gen) + torch.where(y[:, None] == 1, mu, -mu))
            ys.append(y)
        splits[split] = ClientSplit.from_lists(xs, ys)
    ring = torch.arange(num_clients)
    edge_index = torch.cat([torch.stack([ring, (ring + 1) % num_clients]),
                            torch.stack([(ring + 1) % num_clients, ring])], dim=1)
    return FederatedDataset("tiny", "classification", splits, num_classes=2,
                            edge_index=edge_index, edge_weight=torch.ones(edge_index.size(1)))


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 6), nn.ReLU(), nn.Linear(6, 2))


class LocalGrid(Grid):
    """A Grid that delivers messages to ClientApps in this process, with
    random 64-bit node ids (as Flower's) and one Context per node."""

    def __init__(self, app, num_nodes: int, seed: int = 1, partition_ids=None):
        gen = np.random.default_rng(seed)
        ids = [int(v) for v in gen.integers(1, 2**63 - 1, size=num_nodes)]
        pids = list(range(num_nodes)) if partition_ids is None else partition_ids
        self.app = app
        self.contexts = {nid: Context(run_id=1, node_id=nid,
                                      node_config={"partition-id": pid,
                                                   "num-partitions": num_nodes},
                                      state=RecordDict(), run_config={})
                         for nid, pid in zip(ids, pids, strict=True)}
        self.sent = []

    def set_run(self, run):
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type,
                       group_id=group_id)

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            self.sent.append(msg)
            try:
                replies.append(self.app(msg, self.contexts[msg.metadata.dst_node_id]))
            except Exception as err:  # Flower turns ClientApp exceptions into error replies
                replies.append(Message(Error(code=1, reason=str(err)), reply_to=msg))
        return replies


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Tiny models: thread start-up costs more than it saves on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    # Flower stamps messages with the identity of the running task; outside a
    # Flower process (LocalGrid) there is none, so give this one a fixed one.
    from flwr.supercore.task_identity import TaskIdentity
    for attr in ("_task_id", "_run_id", "_node_id"):
        if getattr(TaskIdentity, attr) is None:
            monkeypatch.setattr(TaskIdentity, attr, 1)


def run_local(strategy, rounds=3, *, dataset=None, mods=None, grid_seed=1, **kwargs):
    data = dataset or tiny_dataset()
    app = make_client_app(tiny_model(), data, local=LOCAL, mods=mods)
    gs = GraphStrategy.from_dataset(strategy, tiny_model(), data, local=LOCAL, **kwargs)
    grid = LocalGrid(app, data.num_clients, seed=grid_seed)
    gs.start(grid, num_rounds=rounds)
    return gs, grid


def run_simulator(strategy, rounds=3, dataset=None, sample_fraction=None):
    sim = Simulator(dataset or tiny_dataset(), tiny_model(), strategy, rounds=rounds,
                    local=LOCAL, seed=0, sample_fraction=sample_fraction)
    sim.run()
    return sim


# ------------------------------------------------------------------- imports
def test_missing_flwr_raises_import_error_naming_the_extra(monkeypatch):
    import pyg_fedgraph.typing as typing_flags
    for name in [m for m in sys.modules if m.startswith("pyg_fedgraph.integrations.flower")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(typing_flags, "WITH_FLWR", False)
    with pytest.raises(ImportError, match=r"pip install 'pyg-fedgraph\[flower\]'"):
        importlib.import_module("pyg_fedgraph.integrations.flower")


def test_integrations_package_imports_flower_lazily():
    import pyg_fedgraph.integrations as integrations
    assert integrations.flower.GraphStrategy is GraphStrategy
    with pytest.raises(AttributeError, match="no attribute 'ray'"):
        _ = integrations.ray


# ------------------------------------------------------------------ protocol
def test_params_record_round_trip_is_exact_and_named_by_layout():
    model = tiny_model()
    layout = ParamLayout.from_module(model)
    flat = layout.flatten(model)
    record = P.params_to_record(layout, flat)
    assert list(record.keys()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert record["0.weight"].shape == (6, 2)
    assert torch.equal(P.record_to_params(layout, record), flat)
    assert P.check_params_record(layout, record) is None


@pytest.mark.parametrize("corrupt, reason", [
    (lambda r: r.pop("2.bias"), r"sent 3 arrays, the model has 4 \(missing \['2.bias'\]"),
    (lambda r: r.__setitem__("extra", Array(np.zeros(1, np.float32))), r"sent 5 arrays"),
    (lambda r: r.__setitem__("0.bias", Array(np.zeros(7, np.float32))),
     r"'0.bias' has shape \(7,\), the model has \(6,\)"),
    (lambda r: r.__setitem__("0.bias", Array(np.zeros(6, np.float64))),
     r"'0.bias' has dtype float64, the model uses float32"),
    (lambda r: r.__setitem__("0.bias", Array(np.full(6, np.nan, np.float32))),
     r"'0.bias' holds non-finite values"),
    (lambda r: r.__setitem__("2.bias", Array(np.array([1.0, np.inf], np.float32))),
     r"'2.bias' holds non-finite values"),
])
def test_check_params_record_names_what_is_wrong(corrupt, reason):
    layout = ParamLayout.from_module(tiny_model())
    record = P.params_to_record(layout, layout.flatten(tiny_model()))
    corrupt(record)
    assert P.check_params_record(layout, record) is not None
    assert __import__("re").search(reason, P.check_params_record(layout, record))


def _through_the_wire(plan: TrainPlan, d: int) -> TrainPlan:
    r"""Client 1's part of ``plan``, encoded and decoded as a Flower client does."""
    layout = ParamLayout.from_module(tiny_model())
    assert layout.num_params == d
    text, arrays = P.encode_plan(plan, 1, layout)
    return P.decode_plan(text, arrays, layout)


@pytest.mark.parametrize("name, kwargs, personal, kind", [
    ("pfedgraph", {"lam": 0.3}, False, "pfedgraph-cosine"),
    ("fedprox", {"mu": 0.5}, False, "proximal"),
    ("ditto", {"lam": 2.0}, True, "proximal"),
    ("fedamp", {}, False, "weighted-proximal"),
    ("heurfedamp", {}, False, "weighted-proximal"),
    ("sfl", {"global_lam": 0.5}, False, "sfl"),
])
def test_strategy_regularizers_are_rebuilt_exactly(name, kwargs, personal, kind):
    # Prepare: a strategy after one aggregation, so that its regularizer is active.
    data = tiny_dataset()
    sim = run_simulator(build_strategy(name, **kwargs), rounds=1, dataset=data)
    plan = sim.strategy.configure_train(2, torch.arange(NUM_CLIENTS))
    d = sim.layout.num_params
    # Execute: the plan through the wire format (declared data, no code)
    got_plan = _through_the_wire(plan, d)
    # Assert: the same class and scalars, client 1's rows, the same value
    reg = plan.jobs[0].regularizer if personal else plan.regularizer
    got = got_plan.jobs[0].regularizer if personal else got_plan.regularizer
    assert type(got) is type(reg) and got.kind == kind and got.key() == reg.key()
    theta = torch.linspace(-1.0, 1.0, d)
    want = float(reg.penalty(theta, *(r[1] for r in reg.refs)))
    assert want != 0.0
    assert float(got.penalty(theta, *(r[0] for r in got.refs))) == pytest.approx(want, rel=1e-6)


@dataclasses.dataclass
class _ScaledDot(Regularizer):
    reference: torch.Tensor = per_client()
    scale: float = 1.0

    def penalty(self, theta, *rows):
        return self.scale * (theta * rows[0]).sum()


def test_unregistered_regularizer_is_refused_and_registered_one_is_sent(monkeypatch):
    layout = ParamLayout.from_module(tiny_model())
    d = layout.num_params
    plan = TrainPlan(regularizer=_ScaledDot(torch.ones(2, d), scale=2.0))
    with pytest.raises(ValueError, match="cannot be sent to Flower clients: register it"):
        P.encode_plan(plan, 0, layout)
    # Registered (on the server and the clients), it travels by name and fields.
    monkeypatch.setattr(REGULARIZERS, "_entries", dict(REGULARIZERS._entries))
    register_regularizer("test-scaled-dot")(_ScaledDot)
    text, arrays = P.encode_plan(plan, 0, layout)
    assert '"g": "test-scaled-dot"' in text and "scale" in text
    rebuilt = P.decode_plan(text, arrays, layout).regularizer
    assert isinstance(rebuilt, _ScaledDot) and rebuilt.scale == 2.0
    assert float(rebuilt.penalty(torch.full((d,), 0.5), rebuilt.refs[0][0])) == d
    with pytest.raises(ValueError, match="already taken"):
        register_regularizer("test-scaled-dot")(ProximalTerm)
    # A name the client does not know is refused with one line.
    monkeypatch.setattr(REGULARIZERS, "_entries", {})
    with pytest.raises(ValueError, match="unknown regularizer 'test-scaled-dot'"):
        P.decode_plan(text, arrays, layout)


# ---------------------------------------------- GraphStrategy on a local grid
def test_fedavg_on_flower_matches_the_simulator():
    gs, grid = run_local(build_strategy("fedavg"))
    sim = run_simulator(build_strategy("fedavg"))
    assert gs.rounds_done == 3
    assert torch.allclose(gs.strategy.global_params, sim.strategy.global_params, atol=1e-6)
    # Per-client metrics are kept, for every client and round.
    assert sorted(gs.evaluate_metrics) == [1, 2, 3]
    assert sorted(gs.evaluate_metrics[3]) == list(range(NUM_CLIENTS))
    acc = torch.tensor([gs.evaluate_metrics[3][i]["test-accuracy"] for i in range(NUM_CLIENTS)])
    assert torch.equal(acc, sim.history.records[-1].test["accuracy"])
    assert sorted(gs.train_metrics[3]) == list(range(NUM_CLIENTS))
    # Node ids are random; partition ids are what the server used.
    assert set(gs.node_to_partition.values()) == set(range(NUM_CLIENTS))
    assert set(gs.node_to_partition) == set(grid.contexts)


def _received(grid, kind="train"):
    """(round, partition) -> starting model each client received."""
    layout = ParamLayout.from_module(tiny_model())
    out = {}
    for msg in grid.sent:
        if msg.metadata.message_type == kind and P.PARAMS in msg.content:
            cfg = msg.content[P.CONFIG]
            out[(cfg["round"], cfg[P.PARTITION_ID])] = P.record_to_params(
                layout, msg.content[P.PARAMS])
    return out


def _fresh_context(ctx):
    """``ctx`` with a new client table holding the initial model (round 0)."""
    return dataclasses.replace(ctx, clients=ClientTable(ctx.init_params, ctx.num_clients))


def _replay_round(strategy, rnd, graph):
    """What the round engine does with a round's accepted uploads."""
    strategy.aggregate_train(rnd, graph)
    strategy.ctx.table.update(graph.client_id, graph.x)


def test_pfedgraph_sends_each_client_its_own_model_and_matches_the_simulator():
    graphs = []
    gs, grid = run_local(build_strategy("pfedgraph"),
                         on_round_end=lambda g, rnd: graphs.append(g.last_graph))
    sim = run_simulator(build_strategy("pfedgraph"))
    received = _received(grid)
    # Each client received its own row of the strategy's personalized models.
    replay = build_strategy("pfedgraph")
    replay.setup(_fresh_context(gs.strategy.ctx))
    for rnd, graph in enumerate(graphs, start=1):
        plan = replay.configure_train(rnd, torch.arange(NUM_CLIENTS))
        for pid in range(NUM_CLIENTS):
            assert torch.equal(received[(rnd, pid)], plan.params[pid])
        _replay_round(replay, rnd, graph)
    later = torch.stack([received[(3, pid)] for pid in range(NUM_CLIENTS)])
    assert torch.pdist(later).min() > 0
    # The same updates give the same collaboration graph (exactly) ...
    assert torch.allclose(replay.collaboration_graph(), gs.strategy.collaboration_graph(),
                          atol=1e-6)
    # ... and Flower's run matches the in-process simulator's on the same seed.
    assert torch.allclose(gs.strategy.collaboration_graph(), sim.strategy.collaboration_graph(),
                          atol=1e-6)
    assert not torch.allclose(gs.strategy.collaboration_graph(),
                              torch.full((5, 5), 0.2, dtype=torch.float64), atol=1e-2)
    assert torch.allclose(gs.personalized_params(), sim.personalized_models()[0], atol=1e-5)


# Small settings of every registered strategy for the parity test below; a
# strategy missing here fails the test (adding one means adding its line).
PARITY_KWARGS = {
    "local": {},                                  # clients continue from their own models
    "fedavg": {},
    "fedavg-ft": {"finetune_epochs": 1},          # fine-tuning before evaluation
    "fedprox": {"mu": 0.5},                       # regularizer rebuilt on the client
    "fedprox-ft": {"mu": 0.5, "finetune_epochs": 1},
    "fedpub": {"scale": 3.0, "l2": 0.01},         # an embedding job on the trained model
    "ditto": {"lam": 1.0},                        # a second (personal) client job
    "fedamp": {},                                 # no starting model: the client sends its update
    "pfedgat": {"feedback": "gradient", "heads": 2, "hidden_channels": 4},  # gradient job
    "fedaghn": {},                                # deltas of personalized starts
    "sfl": {"lam": 0.3},                          # prior graph restricted to the sampled clients
    "panacea": {"embedding_dim": 4, "hidden_channels": 8, "server_steps": 2},
    "pfedhn": {"embedding_dim": 4, "hidden_channels": 8},
    "fedcedar": {"num_clusters": 2},
    "cfl": {"warmup_rounds": 1, "eps1": 10.0, "eps2": 0.0},  # splits after round 1
    "gcfl": {"warmup_rounds": 1, "eps1": 10.0, "eps2": 0.0},  # ... by a minimum cut
    "gcfl-plus": {"warmup_rounds": 1, "eps1": 10.0, "eps2": 0.0,  # ... once 2 update norms
                  "seq_length": 2},                             # per client are recorded
    "pfedgraph": {},
    "ifca": {"num_clusters": 2},                  # a start job: clients choose their model
    "per-fedavg": {"alpha": 0.05, "variant": "hf"},  # a 3-batch rule, one-step fine-tuning
    "pfedme": {"inner_steps": 2, "lam": 2.0},     # a rule with an extra output (personal_x)
    "fedrep": {"head_epochs": 1},                 # a start job training the client's own head
    "fedrod": {},                                 # a rule using the client's class counts
    "heurfedamp": {},                             # the heuristic FedAMP (pFedGraph's "FedAMP")
    "knn-per": {"k": 3},                          # an evaluator job: the kNN vote on the client
    "fedala": {"max_start_epochs": 3},            # a start job with per-client weights
    "pfedla": {"embedding_dim": 4, "hidden_channels": 8},  # per-client hypernetworks
}


def test_parity_table_covers_the_registry():
    assert sorted(PARITY_KWARGS) == sorted(STRATEGIES)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_on_flower_matches_the_simulator(name):
    # Both sample everyone (the comparison is of the rounds, not of sampling).
    gs, _ = run_local(build_strategy(name, **PARITY_KWARGS[name]), fraction_train=1.0)
    sim = run_simulator(build_strategy(name, **PARITY_KWARGS[name]), sample_fraction=1.0)
    assert gs.dropped == []
    expected = sim.strategy.personalized_params(torch.arange(NUM_CLIENTS))
    expected = sim.local_params if expected is None else expected
    assert torch.allclose(gs.personalized_params(), expected, atol=1e-6)
    acc = torch.tensor([gs.evaluate_metrics[3][i]["test-accuracy"] for i in range(NUM_CLIENTS)])
    assert torch.equal(acc, sim.history.records[-1].test["accuracy"])
    # The engine's history is the same protocol in both.
    assert gs.history.summary()["best_round"] == sim.summary()["best_round"]


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_checkpoint_kept_by_the_round_end_hook_restores_its_round(name):
    # The hook keeps state_dict() after round 1 while the run goes on to round 3.
    kept = {}
    gs, _ = run_local(build_strategy(name, **PARITY_KWARGS[name]), fraction_train=1.0,
                      on_round_end=lambda g, rnd: kept.setdefault(rnd, g.state_dict()))
    assert sorted(kept) == [1, 2, 3] and kept[1]["engine"]["round"] == 1
    data = tiny_dataset()
    resumed = GraphStrategy.from_dataset(build_strategy(name, **PARITY_KWARGS[name]),
                                         tiny_model(), data, local=LOCAL, fraction_train=1.0)
    # Through a file, as a deployment's checkpoint: it loads without unpickling code.
    buffer = io.BytesIO()
    torch.save(kept[1], buffer)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    resumed.start(LocalGrid(make_client_app(tiny_model(), data, local=LOCAL), NUM_CLIENTS,
                            seed=7), num_rounds=2)
    assert resumed.rounds_done == 3
    assert torch.allclose(resumed.personalized_params(), gs.personalized_params(), atol=1e-6)
    assert resumed.history == gs.history


@pytest.mark.parametrize("batch_size", [3, 8])
def test_mini_batches_agree_with_the_simulator(batch_size):
    # Each client draws its batches from (seed, "batches", round, client) wherever
    # it trains, so mini-batch training agrees too, not only full batches.
    local = LocalConfig(lr=0.2, batch_size=batch_size, epochs=2)
    data = tiny_dataset()
    gs = GraphStrategy.from_dataset(build_strategy("fedavg"), tiny_model(), data, local=local)
    gs.start(LocalGrid(make_client_app(tiny_model(), data, local=local), NUM_CLIENTS),
             num_rounds=2)
    sim = Simulator(data, tiny_model(), build_strategy("fedavg"), rounds=2, local=local,
                    seed=0)
    sim.run()
    assert torch.allclose(gs.strategy.global_params, sim.strategy.global_params, atol=1e-6)


def test_adam_state_stays_on_the_nodes_and_matches_the_simulator():
    # FED-PUB's clients keep one Adam optimizer for the whole federation: each node keeps
    # its moments in its own Context (never uploaded), as the simulator keeps them per client.
    local = LocalConfig(optimizer="adam", lr=0.05, batch_size=8, epochs=2,
                        keep_optimizer_state=True)
    data = tiny_dataset()
    gs = GraphStrategy.from_dataset(build_strategy("fedavg"), tiny_model(), data, local=local)
    grid = LocalGrid(make_client_app(tiny_model(), data, local=local), NUM_CLIENTS)
    gs.start(grid, num_rounds=3)
    sim = Simulator(data, tiny_model(), build_strategy("fedavg"), rounds=3, local=local, seed=0)
    sim.run()
    assert torch.allclose(gs.strategy.global_params, sim.strategy.global_params, atol=1e-6)
    for context in grid.contexts.values():
        kept = context.state["pyg-fedgraph"]
        assert float(kept["optimizer.step"].numpy()) == 6.0  # 2 epochs of 1 batch, 3 rounds
    sent = {k for m in grid.sent for k in m.content.array_records}
    assert not any(k.startswith("optimizer") for k in sent)


def test_local_settings_of_the_plan_reach_the_clients():
    # Panacea runs K_c local steps (TrainPlan.config) instead of the clients' epochs.
    gs, grid = run_local(build_strategy("panacea", embedding_dim=4, hidden_channels=8,
                                        server_steps=1, local_steps=3), rounds=1)
    train = [m for m in grid.sent if m.metadata.message_type == "train"]
    layout = ParamLayout.from_module(tiny_model())
    plans = [P.decode_plan(m.content[P.CONFIG][P.PLAN], m.content, layout) for m in train]
    assert plans and all(plan.config.steps == 3 for plan in plans)
    assert {m["steps"] for m in gs.train_metrics[1].values()} == {3.0}
    # Otherwise the server's settings (1 epoch), or, without them, the clients' own (2 epochs).
    data = tiny_dataset()
    for local, steps in ((LocalConfig(lr=0.2, batch_size=8, epochs=1), 1.0), (None, 2.0)):
        gs = GraphStrategy.from_dataset(build_strategy("fedavg"), tiny_model(), data,
                                        local=local)
        gs.start(LocalGrid(make_client_app(tiny_model(), data, local=LOCAL), NUM_CLIENTS),
                 num_rounds=1)
        assert {m["steps"] for m in gs.train_metrics[1].values()} == {steps}


@pytest.mark.parametrize("local", [
    LocalConfig(lr=0.2),
    LocalConfig(lr=0.4, momentum=0.9, nesterov=True, weight_decay=5e-4, epochs=None, steps=50,
                warmup=0.1, lr_decay_to=0.0025)], ids=["plain", "nesterov-schedule"])
def test_local_config_travels_through_a_config_record(local):
    sent = P.local_config_to_dict(local)
    assert P.local_config_from_record(dict(ConfigRecord(sent))) == local
    # Nesterov and the schedule travel only when set (clients without them still read
    # the configurations of runs that do not use them).
    assert ({"local.nesterov", "local.warmup", "local.lr_decay_to"} <= set(sent)) == (
        local.nesterov)
    assert local.nesterov or not {"local.nesterov", "local.warmup"} & set(sent)


def test_partial_participation_samples_like_the_simulator():
    from pyg_fedgraph.engine import sample_clients
    gs, _ = run_local(build_strategy("fedavg"), fraction_train=0.6)
    # The engine's sampler: the stream (seed, "sample", round), seed 0.
    expected = [sample_clients(torch.arange(NUM_CLIENTS), 0.6,
                               make_generator(0, "sample", rnd)).tolist() for rnd in (1, 2, 3)]
    assert [sorted(gs.train_metrics[r]) for r in (1, 2, 3)] == expected
    assert all(len(ids) == 3 for ids in expected)
    # Every client is still evaluated.
    assert sorted(gs.evaluate_metrics[3]) == list(range(NUM_CLIENTS))


@pytest.mark.parametrize("kind, reason", [
    ("nan", r"non-finite"),
    ("shape", r"has shape \(7,\), the model has \(6,\)"),
    ("count", r"sent 3 arrays, the model has 4"),
    ("dtype", r"dtype float64"),
    ("norm", r"absurd norm: update norm 2.449e\+07 exceeds max_norm 1e\+06"),
    ("unknown-partition", r"unknown partition id 99"),
    ("other-partition", r"claims partition 0, node \d+ is partition 2"),
    ("error", r"the client reported an error"),
    # Records of the wrong kind, and a metric of the wrong type, are dropped too.
    ("record-kind", r"trained model: expected an ArrayRecord, got ConfigRecord"),
    ("loss-type", r"the train loss \(train-loss\) is not a number: \[1.0, 2.0\]"),
])
def test_malformed_reply_is_dropped_and_the_round_completes(kind, reason):
    def corrupt_partition_2(message, context, call_next):
        reply = call_next(message, context)
        if context.node_config["partition-id"] != 2 or message.metadata.message_type != "train":
            return reply
        if kind == "error":
            raise RuntimeError("out of memory")
        params = reply.content[P.PARAMS]
        if kind == "nan":
            params["0.bias"] = Array(np.full(6, np.nan, np.float32))
        elif kind == "shape":
            params["0.bias"] = Array(np.zeros(7, np.float32))
        elif kind == "count":
            params.pop("2.bias")
        elif kind == "norm":  # finite, but an update no training produces
            params["0.bias"] = Array(params["0.bias"].numpy() + np.float32(1e7))
        elif kind == "dtype":
            params["0.bias"] = Array(params["0.bias"].numpy().astype(np.float64))
        elif kind == "unknown-partition":
            reply.content[P.METRICS][P.PARTITION_ID] = 99
        elif kind == "other-partition":
            reply.content[P.METRICS][P.PARTITION_ID] = 0
        elif kind == "record-kind":  # keyed like a single tensor, but not an ArrayRecord
            reply.content[P.PARAMS] = ConfigRecord({"0": 1})
        elif kind == "loss-type":
            reply.content[P.METRICS][P.TRAIN_LOSS] = [1.0, 2.0]
        return reply

    graphs = []
    gs, _ = run_local(build_strategy("fedavg"), rounds=2, mods=[corrupt_partition_2],
                      on_round_end=lambda g, rnd: graphs.append(g.last_graph))
    assert gs.rounds_done == 2
    assert [g.client_id.tolist() for g in graphs] == [[0, 1, 3, 4], [0, 1, 3, 4]]
    assert [(d.round, d.stage) for d in gs.dropped] == [(1, "train"), (2, "train")]
    assert all(__import__("re").search(reason, d.reason) for d in gs.dropped)
    # FedAvg of the four valid clients, weighted by their sample counts (all 8).
    assert torch.allclose(gs.strategy.global_params, graphs[-1].x.mean(0), atol=1e-6)
    assert sorted(gs.train_metrics[2]) == [0, 1, 3, 4]


def test_duplicate_and_missing_partition_ids_are_dropped_at_discovery(caplog):
    data = tiny_dataset()
    app = make_client_app(tiny_model(), data, local=LOCAL)
    grid = LocalGrid(app, 6, partition_ids=[0, 1, 2, 3, 4, 4])
    gs = GraphStrategy.from_dataset(build_strategy("fedavg"), tiny_model(), data,
                                    min_available_nodes=6)
    with caplog.at_level("WARNING"):
        gs.start(grid, num_rounds=1)
    assert len(gs.node_to_partition) == 5 and gs.rounds_done == 1
    assert len(gs.dropped) == 1 and "already served by node" in gs.dropped[0].reason
    assert "dropped the reply" in caplog.text


def test_a_restarted_node_keeps_its_partition_and_its_model():
    data = tiny_dataset()
    grid = LocalGrid(make_client_app(tiny_model(), data, local=LOCAL), NUM_CLIENTS)

    def restart_partition_3(gs, rnd):
        # A SuperNode restarts: new node id, no local state.
        if rnd == 1:
            old = next(n for n, c in grid.contexts.items() if c.node_config["partition-id"] == 3)
            config = grid.contexts.pop(old).node_config
            grid.contexts[12345] = Context(run_id=1, node_id=12345, node_config=config,
                                           state=RecordDict(), run_config={})

    gs = GraphStrategy.from_dataset(build_strategy("local"), tiny_model(), data, local=LOCAL,
                                    on_round_end=restart_partition_3)
    gs.start(grid, num_rounds=2)
    straight, _ = run_local(build_strategy("local"), rounds=2)
    assert gs.node_to_partition[12345] == 3 and len(gs.node_to_partition) == NUM_CLIENTS
    assert gs.dropped == []
    # Local training continues from the model the server last received from partition 3.
    assert torch.equal(gs.personalized_params(), straight.personalized_params())


def test_state_dict_resumes_on_new_nodes_exactly():
    straight, _ = run_local(build_strategy("pfedgraph"), rounds=3)
    first, _ = run_local(build_strategy("pfedgraph"), rounds=2)
    state = first.state_dict()
    data = tiny_dataset()
    resumed = GraphStrategy.from_dataset(build_strategy("pfedgraph"), tiny_model(), data,
                                         local=LOCAL)
    resumed.load_state_dict(state)
    # A new run: new random node ids, clients without any stored state.
    grid = LocalGrid(make_client_app(tiny_model(), data, local=LOCAL), NUM_CLIENTS, seed=7)
    resumed.start(grid, num_rounds=1)
    assert resumed.rounds_done == 3
    assert torch.equal(resumed.strategy.collaboration_graph(),
                       straight.strategy.collaboration_graph())
    assert torch.equal(resumed.personalized_params(), straight.personalized_params())
    assert resumed.evaluate_metrics[3] == straight.evaluate_metrics[3]


def test_graph_strategy_checks_its_arguments():
    data = tiny_dataset()
    with pytest.raises(TypeError, match="pyg_fedgraph Strategy"):
        GraphStrategy(object(), tiny_model(), 5)
    with pytest.raises(ValueError, match="num_samples has 4 entries for 5 clients"):
        GraphStrategy(build_strategy("fedavg"), tiny_model(), 5, num_samples=torch.ones(4))
    with pytest.raises(ValueError, match=r"fraction_train must be in \[0, 1\]"):
        GraphStrategy.from_dataset(build_strategy("fedavg"), tiny_model(), data,
                                   fraction_train=1.5)
    gs = GraphStrategy.from_dataset(build_strategy("fedavg"), tiny_model(), data)
    with pytest.raises(RuntimeError, match="nothing to save before the first round"):
        gs.state_dict()
    assert str(gs) == "GraphStrategy(fedavg, clients=5, rounds_done=0)"


# ------------------------------------------------- Flower simulation (Ray)
def _flower_mods(directory: str) -> list:
    # Nested so that Ray pickles it by value into the client processes.
    def record_and_corrupt(message, context, call_next):
        import os

        import numpy as np
        from flwr.app import Array

        from pyg_fedgraph.integrations.flower import protocol as P
        config = message.content[P.CONFIG]
        pid = int(context.node_config["partition-id"])
        if message.metadata.message_type == "train" and P.PARAMS in message.content:
            received = np.concatenate([a.numpy().reshape(-1)
                                       for a in message.content[P.PARAMS].values()])
            np.save(os.path.join(directory, f"{config['session']}-{config['round']}-{pid}.npy"),
                    received)
        reply = call_next(message, context)
        if message.metadata.message_type == "train" and config.get("session") == "corrupt":
            params = reply.content[P.PARAMS]
            if pid == 1:
                params["0.bias"] = Array(np.full(6, np.nan, np.float32))
            elif pid == 2:
                params["2.weight"] = Array(np.zeros((3, 6), np.float32))
        return reply
    return [record_and_corrupt]


@pytest.fixture(scope="module")
def flower_simulation(tmp_path_factory):
    """One Flower simulation (Ray backend, CPU, 5 nodes) running three
    GraphStrategy sessions one after the other: FedAvg and pFedGraph for 3
    rounds, and FedAvg for 2 rounds with two clients sending malformed models."""
    pytest.importorskip("ray", reason="Flower's simulation needs flwr[simulation]")
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    directory = tmp_path_factory.mktemp("received")
    data = tiny_dataset()
    client_app = make_client_app(tiny_model(), data, local=LOCAL,
                                 mods=_flower_mods(str(directory)))
    server_app = ServerApp()
    results = {}

    @server_app.main()
    def main(grid, context):
        for session, name, rounds in (("fedavg", "fedavg", 3), ("pfedgraph", "pfedgraph", 3),
                                      ("corrupt", "fedavg", 2)):
            graphs = []
            gs = GraphStrategy.from_dataset(
                build_strategy(name), tiny_model(), data, local=LOCAL,
                on_round_end=lambda g, rnd, graphs=graphs: graphs.append(g.last_graph))
            gs.start(grid, num_rounds=rounds, train_config=ConfigRecord({"session": session}))
            results[session] = (gs, graphs)

    run_simulation(server_app, client_app, num_supernodes=NUM_CLIENTS,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": 2}})
    return results, directory


def _check_received_and_replay(gs, graphs, directory, session, name):
    """Each client received its own row of the strategy's models, and the
    wrapped strategy fed the same updates in-process ends in the same state."""
    replay = build_strategy(name)
    replay.setup(_fresh_context(gs.strategy.ctx))
    received = {}
    for rnd, graph in enumerate(graphs, start=1):
        plan = replay.configure_train(rnd, torch.arange(NUM_CLIENTS))
        for pid in range(NUM_CLIENTS):
            got = torch.from_numpy(np.load(directory / f"{session}-{rnd}-{pid}.npy"))
            assert torch.equal(got, plan.params[pid])
            received[(rnd, pid)] = got
        _replay_round(replay, rnd, graph)
    return replay, received


@pytest.mark.slow
def test_flower_simulation_runs_fedavg_like_the_simulator(flower_simulation):
    results, directory = flower_simulation
    gs, graphs = results["fedavg"]
    assert gs.rounds_done == 3 and gs.dropped == []
    assert [g.client_id.tolist() for g in graphs] == [list(range(NUM_CLIENTS))] * 3
    replay, _ = _check_received_and_replay(gs, graphs, directory, "fedavg", "fedavg")
    assert torch.allclose(replay.global_params, gs.strategy.global_params, atol=1e-6)
    sim = run_simulator(build_strategy("fedavg"))
    assert torch.allclose(gs.strategy.global_params, sim.strategy.global_params, atol=1e-6)
    acc = torch.tensor([gs.evaluate_metrics[3][i]["test-accuracy"] for i in range(NUM_CLIENTS)])
    assert torch.equal(acc, sim.history.records[-1].test["accuracy"])


@pytest.mark.slow
def test_flower_simulation_runs_pfedgraph_like_the_simulator(flower_simulation):
    if "pfedgraph" not in STRATEGIES:
        pytest.skip("strategy 'pfedgraph' is not available")
    results, directory = flower_simulation
    gs, graphs = results["pfedgraph"]
    assert gs.rounds_done == 3 and gs.dropped == []
    replay, received = _check_received_and_replay(gs, graphs, directory, "pfedgraph",
                                                  "pfedgraph")
    # Personalized: after the first aggregation no two clients start alike.
    later = torch.stack([received[(3, pid)] for pid in range(NUM_CLIENTS)])
    assert torch.pdist(later).min() > 0
    # Same client updates -> same collaboration graph ...
    assert torch.allclose(replay.collaboration_graph(), gs.strategy.collaboration_graph(),
                          atol=1e-6)
    # ... and the same graph as the in-process simulator on the same seed.
    sim = run_simulator(build_strategy("pfedgraph"))
    assert torch.allclose(gs.strategy.collaboration_graph(), sim.strategy.collaboration_graph(),
                          atol=1e-6)
    assert torch.allclose(gs.personalized_params(), sim.local_params, atol=1e-6)


@pytest.mark.slow
def test_flower_simulation_drops_malformed_replies(flower_simulation):
    results, _ = flower_simulation
    gs, graphs = results["corrupt"]
    assert gs.rounds_done == 2
    assert [g.client_id.tolist() for g in graphs] == [[0, 3, 4], [0, 3, 4]]
    reasons = {(d.round, d.partition_id): d.reason for d in gs.dropped}
    assert sorted(reasons) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert "non-finite" in reasons[(1, 1)]
    assert "has shape (3, 6), the model has (2, 6)" in reasons[(2, 2)]
    assert torch.allclose(gs.strategy.global_params, graphs[-1].x.mean(0), atol=1e-6)
    assert sorted(gs.evaluate_metrics[2]) == list(range(NUM_CLIENTS))
