import dataclasses
import json

import pytest
import torch

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.nn.hypernetwork import hypernetwork_update
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.panacea import Panacea, PFedHN
from pyg_fedgraph.strategies.registry import STRATEGIES, build_strategy
from pyg_fedgraph.train.config import LocalConfig

# Ring over 5 clients, both directions.
RING = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 0],
                     [1, 0, 2, 1, 3, 2, 4, 3, 0, 4]])
# Path 0-1-2-3-4.
PATH = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4],
                     [1, 0, 2, 1, 3, 2, 4, 3]])
SMALL = dict(embedding_dim=4, hidden_channels=8, num_gnn_layers=2, num_mlp_layers=2)


def _dataset(edge_index=RING, seed=0):
    r"""5 clients on a ring; clients 0-2 label by the sign of feature 0,
    clients 3-4 by the opposite sign."""
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for name, n in (("train", 16), ("val", 8), ("test", 8)):
        xs, ys = [], []
        for client in range(5):
            x = torch.randn(n, 2, generator=gen)
            y = (x[:, 0] > 0).long()
            xs.append(x)
            ys.append(y if client < 3 else 1 - y)
        splits[name] = ClientSplit.from_lists(xs, ys)
    return FederatedDataset("ring", "classification", splits, num_classes=2,
                            edge_index=edge_index,
                            edge_weight=None if edge_index is None
                            else torch.ones(edge_index.size(1)))


def _simulator(strategy, held_out=None, edge_index=RING, rounds=3):
    torch.manual_seed(0)
    model = MLP(2, 4, 2, num_layers=2)
    return Simulator(_dataset(edge_index), model, strategy, rounds=rounds,
                     local=LocalConfig(lr=0.1, batch_size=8, epochs=1), held_out=held_out,
                     sample_fraction=1.0)


def _context(edge_index=RING, seed=0, **fields):
    torch.manual_seed(seed)
    layout = ParamLayout.from_module(MLP(2, 3, 2, num_layers=2))
    return FederationContext(num_clients=5, layout=layout,
                             init_params=torch.zeros(layout.num_params),
                             num_samples=torch.ones(5, dtype=torch.long),
                             edge_index=edge_index, seed=seed, **fields)


def _result(start, clients, seed=1):
    gen = torch.Generator().manual_seed(seed)
    delta = 0.5 * torch.randn(start.shape, generator=gen)
    return FederationGraph(x=start + delta, delta=delta, client_id=clients)


def test_registered_and_hparams():
    assert STRATEGIES["panacea"] is Panacea and STRATEGIES["pfedhn"] is PFedHN
    strategy = build_strategy("panacea", lambda_d=0.01, server_steps=5)
    assert strategy.hparams()["lambda_d"] == 0.01
    assert strategy.hparams()["server_steps"] == 5
    assert strategy.needs_prior_graph
    assert str(strategy).startswith("Panacea(embedding_dim=100, hidden_channels=100")
    hn = build_strategy("pfedhn")
    assert not hn.needs_prior_graph
    assert "encoder" not in hn.hparams() and hn.hparams()["optimizer"] == "sgd"
    assert not Panacea(encoder="mlp", graph_generator=False).needs_prior_graph


def test_constructor_errors():
    with pytest.raises(ValueError, match="encoder: expected one of 'gcn', 'mlp'"):
        Panacea(encoder="gat")
    with pytest.raises(ValueError, match="optimizer: expected one of 'sgd', 'adam'"):
        Panacea(optimizer="rmsprop")
    with pytest.raises(ValueError, match="server_steps"):
        Panacea(server_steps=0)
    with pytest.raises(ValueError, match="local_steps"):
        Panacea(local_steps=0)
    with pytest.raises(ValueError, match="hn_lr must be > 0"):
        Panacea(hn_lr=0.0)
    with pytest.raises(ValueError, match="lambda_d"):
        Panacea(lambda_d=-1.0)
    with pytest.raises(ValueError, match="client_reduction"):
        Panacea(client_reduction="max")
    with pytest.raises(RuntimeError, match="setup"):
        Panacea().configure_train(1, torch.arange(2))


def test_panacea_without_prior_graph_raises():
    with pytest.raises(ValueError, match="needs a prior client graph"):
        Panacea(**SMALL).setup(_context(edge_index=None))
    with pytest.raises(ValueError, match="has no edges"):
        Panacea(**SMALL).setup(_context(edge_index=torch.empty(2, 0, dtype=torch.long)))
    # Without the GCN encoder and the generator the graph is not needed.
    Panacea(encoder="mlp", graph_generator=False, **SMALL).setup(_context(edge_index=None))
    PFedHN(**SMALL).setup(_context(edge_index=None))


def test_generated_models_differ_per_client():
    strategy = Panacea(**SMALL)
    strategy.setup(_context())
    plan = strategy.configure_train(1, torch.tensor([0, 2, 4]))
    assert plan.params.shape == (3, strategy.ctx.layout.num_params)
    assert plan.config is None
    assert not plan.params.requires_grad
    assert not torch.allclose(plan.params[0], plan.params[1])
    assert not torch.allclose(plan.params[1], plan.params[2])
    # personalized_params is the same generator, for any subset.
    assert torch.allclose(strategy.personalized_params(torch.arange(5))[[0, 2, 4]],
                          plan.params, atol=1e-6)


def test_first_server_step_is_the_negative_delta_rule():
    clients = torch.tensor([1, 3])
    strategy = Panacea(graph_generator=False, optimizer="sgd", hn_lr=0.05, server_steps=1,
                       **SMALL)
    strategy.setup(_context())
    ref = Panacea(graph_generator=False, optimizer="sgd", hn_lr=0.05, server_steps=1, **SMALL)
    ref.setup(_context())
    start = strategy.configure_train(1, clients).params
    graph = _result(start, clients)
    strategy.aggregate_train(1, graph)
    # By hand: one SGD step along -(dtheta/dpsi)^T delta, averaged over the 2 clients.
    theta = ref.hypernetwork(RING, clients=clients)
    hypernetwork_update(ref.hypernetwork, ref.server_optimizer, theta, graph.delta / 2)
    for a, b in zip(strategy.hypernetwork.parameters(), ref.hypernetwork.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    # "sum" averages nothing: twice the step for two clients.
    summed = Panacea(graph_generator=False, optimizer="sgd", hn_lr=0.05, server_steps=1,
                     client_reduction="sum", **SMALL)
    summed.setup(_context())
    summed.aggregate_train(1, graph)
    step_mean = strategy.hypernetwork.head.lins[-1].bias - summed.hypernetwork.head.lins[-1].bias
    assert step_mean.abs().sum() > 0


@pytest.mark.parametrize("kwargs", [dict(), dict(graph_generator=False, optimizer="sgd",
                                                 hn_lr=0.02)])
def test_update_moves_generated_models_towards_trained_models(kwargs):
    clients = torch.tensor([0, 3])
    strategy = Panacea(**{**SMALL, **kwargs})
    strategy.setup(_context())
    start = strategy.configure_train(1, clients).params
    graph = _result(start, clients)
    strategy.aggregate_train(1, graph)
    new = strategy.personalized_params(clients)
    before = (start - graph.x).norm(dim=1)
    after = (new - graph.x).norm(dim=1)
    assert torch.all(after < before)


def test_mse_steps_do_not_overshoot():
    # K_s steps regress on the fixed target theta^(0) + delta and land close to
    # it; re-applying the -delta rule K_s times keeps pushing and overshoots.
    clients = torch.tensor([2])
    strategy = Panacea(graph_generator=False, optimizer="sgd", hn_lr=0.03, server_steps=60,
                       **SMALL)
    strategy.setup(_context())
    start = strategy.configure_train(1, clients).params
    graph = _result(start, clients)
    strategy.aggregate_train(1, graph)
    gap = (strategy.personalized_params(clients) - graph.x).norm()
    assert gap < 0.05 * graph.delta.norm()

    ref = Panacea(graph_generator=False, optimizer="sgd", hn_lr=0.03, **SMALL)
    ref.setup(_context())
    for _ in range(60):
        theta = ref.hypernetwork(RING, clients=clients)
        hypernetwork_update(ref.hypernetwork, ref.server_optimizer, theta, graph.delta)
    gap_rule = (ref.personalized_params(clients) - graph.x).norm()
    assert not bool(gap_rule < graph.delta.norm())  # diverged (or NaN)


def test_pfedhn_ignores_the_graph():
    clients = torch.tensor([0, 4])
    outs = []
    for edge_index in (RING, PATH, None):
        strategy = PFedHN(**SMALL)
        strategy.setup(_context(edge_index=edge_index))
        assert strategy.hypernetwork.encoder == "mlp"
        assert strategy.hypernetwork.decoder_mlp is None
        start = strategy.configure_train(1, clients).params
        strategy.aggregate_train(1, _result(start, clients))
        outs.append(strategy.personalized_params(torch.arange(5)))
        assert strategy.collaboration_graph() is None
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    # Panacea's generated models do depend on the graph.
    ring, path = Panacea(**SMALL), Panacea(**SMALL)
    ring.setup(_context(edge_index=RING))
    path.setup(_context(edge_index=PATH))
    assert not torch.allclose(ring.personalized_params(torch.tensor([0])),
                              path.personalized_params(torch.tensor([0])))


def test_pfedhn_defaults_follow_the_paper():
    strategy = PFedHN()
    strategy.setup(_context())
    # pFedHN's code: embedding size 1 + N/4, SGD lr 0.01, momentum 0.9, wd 1e-3.
    assert strategy.hypernetwork.embedding.shape == (5, 1 + 5 // 4)
    group = strategy.server_optimizer.param_groups[0]
    assert isinstance(strategy.server_optimizer, torch.optim.SGD)
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.01, 0.9, 1e-3)
    # Embeddings are never decayed (held-out rows must stay put).
    assert strategy.server_optimizer.param_groups[1]["weight_decay"] == 0.0


def test_held_out_embeddings_never_train():
    strategy = Panacea(hn_weight_decay=0.1, **SMALL)
    sim = _simulator(strategy, held_out=torch.tensor([3]))
    hn = strategy.hypernetwork
    assert hn.held_out.tolist() == [False, False, False, True, False]
    emb = hn.embedding.detach().clone()
    novel_before = strategy.personalized_params(torch.tensor([3]))
    sim.run()
    assert torch.equal(hn.embedding[3], emb[3])
    assert not torch.allclose(hn.embedding[[0, 1, 2, 4]], emb[[0, 1, 2, 4]])
    # The novel client's model follows its trained neighbours through the GCN.
    assert not torch.allclose(strategy.personalized_params(torch.tensor([3])), novel_before)
    assert "test_novel" in sim.summary()


def test_state_dict_round_trip_reproduces_next_models():
    strategy = Panacea(**SMALL)
    sim = _simulator(strategy, rounds=2)
    sim.run()
    state = {k: v.clone() if torch.is_tensor(v) else v
             for k, v in strategy.state_dict().items()}
    assert "_extra_state" in state and "hypernetwork.embedding" in state

    restored = Panacea(**SMALL)
    restored.setup(strategy.ctx)
    restored.load_state_dict(state)
    clients = torch.tensor([0, 1, 4])
    a = strategy.configure_train(3, clients).params
    b = restored.configure_train(3, clients).params
    assert torch.equal(a, b)
    # Same optimizer moments and negative-sampling stream: identical next round.
    graph = _result(a, clients)
    strategy.aggregate_train(3, graph)
    restored.aggregate_train(3, graph)
    assert torch.equal(strategy.personalized_params(torch.arange(5)),
                       restored.personalized_params(torch.arange(5)))

    with pytest.raises(RuntimeError, match="setup"):
        Panacea(**SMALL).set_extra_state(state["_extra_state"])


def test_local_steps_plan():
    base = LocalConfig(lr=0.3, batch_size=4, epochs=2)
    strategy = Panacea(local_steps=50, **SMALL)
    strategy.setup(_context(local=base))
    cfg = strategy.configure_train(1, torch.tensor([0])).config
    assert (cfg.steps, cfg.lr, cfg.batch_size) == (50, 0.3, 4)


def test_collaboration_graph_is_gcn_propagation():
    strategy = Panacea(**SMALL)
    strategy.setup(_context(edge_index=PATH))
    w = strategy.collaboration_graph()
    # Path: degrees with self loop 2, 3, 3, 3, 2.
    deg = torch.tensor([2.0, 3.0, 3.0, 3.0, 2.0])
    assert torch.allclose(w[0, 0], 1 / deg[0]) and torch.allclose(w[0, 2], torch.tensor(0.0))
    assert torch.allclose(w[1, 0], 1 / (deg[1] * deg[0]).sqrt())
    assert torch.allclose(w, w.t())


def test_client_embeddings_are_what_the_head_turns_into_the_models():
    everyone = torch.arange(5)
    for cls, graph in ((Panacea, RING), (Panacea, PATH), (PFedHN, RING), (PFedHN, None)):
        strategy = cls(**SMALL)
        strategy.setup(_context(edge_index=graph))
        z = strategy.client_embeddings()
        assert z.shape == (5, SMALL["hidden_channels"]) and not z.requires_grad
        assert torch.allclose(strategy.hypernetwork.generate(z),
                              strategy.personalized_params(everyone), atol=1e-6)
    ring, path, mlp = Panacea(**SMALL), Panacea(**SMALL), PFedHN(**SMALL)
    ring.setup(_context(edge_index=RING))
    path.setup(_context(edge_index=PATH))
    mlp.setup(_context(edge_index=RING))
    # The same initial embeddings (one seed): only the GCN encoder reads the graph.
    assert not torch.allclose(ring.client_embeddings(), path.client_embeddings())
    assert torch.equal(mlp.client_embeddings(), mlp.hypernetwork.embed())
    ring.ctx = dataclasses.replace(ring.ctx, edge_index=None)
    with pytest.raises(ValueError, match="GCN encoder needs the federation's prior client"):
        ring.client_embeddings()
    with pytest.raises(RuntimeError, match="setup"):
        Panacea(**SMALL).client_embeddings()


def test_cli_novel_clients_writes_test_novel(tmp_path):
    from pyg_fedgraph.cli import main
    out = tmp_path / "run"
    code = main(["run", "--dataset", "fl60", "--strategy", "panacea", "--rounds", "2",
                 "--novel-clients", "0.2", "--quiet", "--out", str(out),
                 "--set", "server_steps=2", "--set", "data.num_clients=10"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategy"] == "panacea"
    assert 0.0 <= summary["test_novel"] <= 1.0


def test_runs_do_not_depend_on_pythons_random_state():
    # PyG's negative_sampling draws from Python's `random` for large populations:
    # the strategy seeds it from its own stream (before, two processes differed).
    import random

    from pyg_fedgraph.experiment import ExperimentConfig, build_simulator

    cfg = ExperimentConfig(dataset="fl60", strategy="panacea", rounds=1, clients=12,
                           overrides={"steps": 2, "data.samples_per_client": 30})
    states = []
    for python_seed in (1, 2):
        random.seed(python_seed)
        sim = build_simulator(cfg)
        sim.run()
        states.append(sim.strategy.state_dict())
    for key, value in states[0].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, states[1][key]), key
