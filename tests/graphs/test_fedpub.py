r"""FED-PUB: the weights from embeddings by hand, the server step, the masked
client model (its L1 term, its masks kept on the client), the functional
embedding job, and pFedGraph's functional-embedding similarity."""
import math

import pytest
import torch
import torch.nn.functional as F
from small_client_graphs import toy_graph_federation
from small_graph_sets import toy_graph_sets

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.graph_dataset import gcn_edge_weight
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.datasets import planted_graphs
from pyg_fedgraph.models import GCN, MaskedGCN, build_model
from pyg_fedgraph.nn import MaskedGCNConv, MaskedLinear, pairwise_cosine, pruned_mask
from pyg_fedgraph.simulation import Simulator
from pyg_fedgraph.strategies import FederationContext, FedPUB, build_strategy
from pyg_fedgraph.strategies.fedpub import similarity_weights
from pyg_fedgraph.train import LocalConfig
from pyg_fedgraph.train.embedding import functional_embeddings, proxy_graph, proxy_inputs
from pyg_fedgraph.train.jobs import ClientStart, FunctionalEmbedding, TrainPlan, run_plan
from pyg_fedgraph.train.regularizers import ProximalTerm
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.utils.device import available_devices
from pyg_fedgraph.utils.graph import random_partition_graph

ADAM = LocalConfig(optimizer="adam", lr=0.01, full_batch=True, epochs=1,
                   keep_optimizer_state=True)


@pytest.fixture(scope="module")
def federation():
    return planted_graphs(num_clients=8, num_nodes=240, num_features=8)


# ------------------------------------------------------------ the weights
def test_weights_from_given_embeddings_by_hand():
    emb = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    got = similarity_weights(emb, scale=3.0)
    c = 1 / math.sqrt(2)
    cos = [[1.0, c, 0.0], [c, 1.0, c], [0.0, c, 1.0]]
    for i, row in enumerate(cos):
        e = [math.exp(3.0 * v) for v in row]
        expected = torch.tensor([v / sum(e) for v in e], dtype=torch.float64)
        torch.testing.assert_close(got[i], expected)
    # Scale 0: uniform; a large scale: each client keeps (nearly) itself.
    torch.testing.assert_close(similarity_weights(emb, 0.0),
                               torch.full((3, 3), 1 / 3, dtype=torch.float64))
    assert similarity_weights(emb, 200.0).diagonal().min() > 0.99
    with pytest.raises(ValueError, match="scale must be non-negative"):
        similarity_weights(emb, -1.0)


def context(n=3, d=4, seed=5):
    from pyg_fedgraph.data.layout import ParamLayout
    layout = ParamLayout.from_module(torch.nn.Linear(3, 1))
    assert layout.num_params == d
    return FederationContext(num_clients=n, layout=layout, init_params=torch.zeros(d),
                             num_samples=torch.tensor([10, 20, 30, 40][:n]), seed=seed)


def test_the_server_step_by_hand():
    strategy = FedPUB(scale=2.0, l2=0.05)
    strategy.setup(context(n=4))
    plan = strategy.configure_train(1, torch.tensor([0, 2, 3]))
    # Round 1: everyone starts from the (global) initial model, without the L2 term.
    assert torch.equal(plan.params, torch.zeros(3, 4)) and plan.regularizer is None
    (job,) = plan.jobs
    assert isinstance(job, FunctionalEmbedding) and job.seed == 5
    assert (job.num_graphs, job.nodes_per_graph, job.p_in) == (5, 100, 0.1)
    x = torch.tensor([[1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 3.0, 3.0]])
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.1], [-1.0, 1.0]])
    graph = FederationGraph(x=x, client_id=torch.tensor([0, 2, 3]),
                            num_samples=torch.tensor([10, 30, 40]), embedding=emb)
    strategy.aggregate_train(1, graph)
    alpha = torch.softmax(2.0 * pairwise_cosine(emb.double()), dim=1)
    torch.testing.assert_close(strategy.personal_params[[0, 2, 3]], (alpha @ x.double()).float())
    # The global model is the round's uniform mean (the code's effective weights).
    torch.testing.assert_close(strategy.global_params, x.mean(0))
    assert strategy.personalized.tolist() == [True, False, True, True]
    graph_w = strategy.collaboration_graph()
    torch.testing.assert_close(graph_w[[0, 2, 3]][:, [0, 2, 3]], alpha)
    assert graph_w[[0, 2, 3], 1].abs().max() == 0 and graph_w[1].tolist() == [0.25] * 4
    # Round 2: client 1 never trained and gets the global model; the others their own.
    plan = strategy.configure_train(2, torch.tensor([1, 3]))
    torch.testing.assert_close(plan.params[0], x.mean(0))
    torch.testing.assert_close(plan.params[1], strategy.personal_params[3])
    assert isinstance(plan.regularizer, ProximalTerm)
    assert plan.regularizer.coefficient == pytest.approx(0.1)  # lambda_2 ||.||^2 = (2 l2)/2 ||.||^2
    torch.testing.assert_close(plan.regularizer.center, plan.params)
    assert strategy.personalized_params(torch.arange(4)) is None
    strategy.evaluate = "personalized"
    torch.testing.assert_close(strategy.personalized_params(torch.tensor([1, 2])),
                               torch.stack([x.mean(0), strategy.personal_params[2]]))


def test_the_server_needs_the_embeddings():
    strategy = FedPUB()
    strategy.setup(context())
    graph = FederationGraph(x=torch.zeros(2, 4), client_id=torch.tensor([0, 1]),
                            num_samples=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="needs the clients' functional embeddings"):
        strategy.aggregate_train(1, graph)


def test_state_round_trips_with_the_embeddings():
    a = FedPUB()
    a.setup(context())
    graph = FederationGraph(x=torch.randn(3, 4), client_id=torch.arange(3),
                            num_samples=torch.tensor([1, 1, 1]), embedding=torch.randn(3, 6))
    a.aggregate_train(1, graph)
    b = FedPUB()
    b.setup(context())
    b.load_state_dict(a.state_dict())
    for key, value in a.state_dict().items():
        assert torch.equal(b.state_dict()[key], value), key
    assert b.embeddings.shape == (3, 6)


# ----------------------------------------------------- the masked client model
def test_masked_layers_by_hand():
    torch.manual_seed(0)
    lin = MaskedLinear(3, 2)
    assert torch.equal(lin.mask, torch.ones(2, 3))
    x = torch.randn(4, 3)
    torch.testing.assert_close(lin(x), x @ lin.weight.t() + lin.bias)
    with torch.no_grad():
        lin.mask.copy_(torch.tensor([[0.5, 1e-4, -2.0], [1.0, 1.0, -5e-4]]))
    kept = torch.tensor([[0.5, 0.0, -2.0], [1.0, 1.0, 0.0]])
    # Training uses the mask as it is; evaluation prunes |m| < 1e-3 (FED-PUB's rule).
    torch.testing.assert_close(lin(x), x @ (lin.weight * lin.mask).t() + lin.bias)
    lin.eval()
    torch.testing.assert_close(lin(x), x @ (lin.weight * kept).t() + lin.bias)
    assert torch.equal(pruned_mask(lin.mask, 0.0, False), lin.mask)
    assert str(lin) == "MaskedLinear(3, 2, mask_init='ones')"
    xavier = MaskedLinear(3, 2, mask_init="xavier")
    assert not torch.equal(xavier.mask, torch.ones(2, 3))
    with pytest.raises(ValueError, match="mask_init must be 'ones' or 'xavier'"):
        MaskedGCNConv(3, 2, mask_init="zeros")


def test_masked_gcn_with_unit_masks_computes_what_gcn_computes():
    torch.manual_seed(0)
    data, graphs = toy_graph_federation()
    plain = GCN(data.input_shape[0], 3, hidden_channels=8)
    masked = MaskedGCN(data.input_shape[0], 3, hidden_channels=8)
    with torch.no_grad():
        for mine, theirs in zip(masked.convs, plain.convs, strict=True):
            mine.weight.copy_(theirs.lin.weight)
            mine.bias.copy_(theirs.bias)
        masked.classifier.weight.copy_(plain.classifier.weight)
        masked.classifier.bias.copy_(plain.classifier.bias)
    g = graphs[0]
    ei, w = gcn_edge_weight(g.edge_index, g.num_nodes)
    torch.testing.assert_close(masked(g.x, ei, w), plain(g.x, ei, w))
    torch.testing.assert_close(masked.embed(g.x, ei, w), plain.embed(g.x, ei, w))
    # embed is the last layer before its ReLU.
    h = F.relu(plain.convs[0](g.x, ei, w))
    torch.testing.assert_close(plain.embed(g.x, ei, w), plain.convs[1](h, ei, w))
    assert masked.private_parameters == ("convs.0.mask", "convs.1.mask", "classifier.mask")
    # Built by name, with its options.
    built = build_model("masked-gcn", (5,), 3, hidden_channels=4, l1=0.2)
    assert isinstance(built, MaskedGCN) and built.l1 == 0.2


def test_the_l1_term_by_hand():
    model = MaskedGCN(5, 3, hidden_channels=4, l1=0.5)
    params = dict(model.named_parameters())
    entries = 5 * 4 + 4 * 4 + 4 * 3
    assert model.local_penalty(params).item() == pytest.approx(0.5 * entries)
    params["classifier.mask"] = -2 * torch.ones(3, 4)
    assert model.local_penalty(params).item() == pytest.approx(0.5 * (entries - 12 + 24))


@pytest.mark.parametrize("parallel", [True, False], ids=["batched", "per-client loop"])
def test_the_l1_term_shrinks_the_masks(federation, parallel):
    # Adam moves a coordinate by at most about lr per step: 4 rounds of 5 steps of 0.05
    # can take a mask from 1 to 0.
    local = LocalConfig(optimizer="adam", lr=0.05, full_batch=True, epochs=5,
                        keep_optimizer_state=True)

    def masks_after(l1):
        torch.manual_seed(0)
        model = build_model("masked-gcn", federation.input_shape, federation.num_classes,
                            hidden_channels=8, l1=l1)
        sim = Simulator(federation, model, build_strategy("fedpub"), rounds=4,
                        local=local, parallel=parallel)
        sim.run()
        return sim.local_params[:, sim.private.private_index]

    free, sparse = masks_after(0.0), masks_after(0.05)
    assert sparse.abs().sum() < 0.5 * free.abs().sum()
    # The masks' magnitudes shrink coordinate by coordinate, and many get pruned at
    # evaluation (|m| < 1e-3 counts as zero) or close to it.
    assert (sparse.abs() < free.abs()).float().mean() > 0.95
    assert (sparse.abs() < 0.1).float().mean() > 0.5
    assert (free.abs() < 0.1).float().mean() < 0.01


def test_the_l2_term_holds_the_clients_near_the_model_they_received(federation):
    # 3 local steps: the proximal gradient is zero at the first (the start is the
    # received model), so it acts from the second on, on the shared coordinates.
    local = LocalConfig(optimizer="adam", lr=0.01, full_batch=True, epochs=3)

    def moves(l2):
        torch.manual_seed(0)
        model = build_model("masked-gcn", federation.input_shape, federation.num_classes,
                            hidden_channels=8)
        sim = Simulator(federation, model, build_strategy("fedpub", l2=l2), rounds=2,
                        local=local)
        seen = []
        aggregate = sim.engine.aggregate_train

        def spy(rnd, clients, uploaded, started, outputs=None, loss=None):
            seen.append((uploaded - started).norm(dim=1))
            return aggregate(rnd, clients, uploaded, started, outputs, loss)

        sim.engine.aggregate_train = spy
        sim.run()
        return seen

    free, held = moves(0.0), moves(100.0)
    torch.testing.assert_close(free[0], held[0])  # round 1: no L2 term (FED-PUB's client)
    assert bool((held[1] < 0.9 * free[1]).all())


def test_the_masked_model_trains_batched_as_the_per_client_loop():
    data, _ = toy_graph_federation()
    torch.manual_seed(0)
    model = build_model("masked-gcn", data.input_shape, 3, hidden_channels=8, l1=0.1)
    cfg = LocalConfig(optimizer="adam", lr=0.01, full_batch=True, epochs=3,
                      weight_decay=1e-6)
    clients = torch.tensor([2, 0, 3, 1])
    gen = torch.Generator().manual_seed(1)
    out = {}
    for key, kwargs in {"vmap": {"execution": "vmap"}, "loop": {"execution": "loop"},
                        "per-client": {"parallel": False}}.items():
        trainer = ClientTrainer(model, data, config=cfg, **kwargs)
        params = trainer.layout.flatten(model).repeat(4, 1)
        params = params + 0.05 * torch.randn(params.shape, generator=gen.manual_seed(1))
        out[key] = trainer.train(clients, params, trainer.initial_buffers(4))
    for key in ("loop", "per-client"):
        torch.testing.assert_close(out["vmap"].params, out[key].params, rtol=0, atol=1e-5)
        torch.testing.assert_close(out["vmap"].loss, out[key].loss, rtol=0, atol=1e-5)


def test_masks_are_never_uploaded(federation):
    torch.manual_seed(0)
    model = build_model("masked-gcn", federation.input_shape, federation.num_classes,
                        hidden_channels=8, l1=0.01)
    sim = Simulator(federation, model, build_strategy("fedpub"), rounds=2, local=ADAM)
    uploads = []
    aggregate = sim.engine.aggregate_train

    def spy(rnd, clients, uploaded, started, outputs=None, loss=None):
        uploads.append((uploaded.clone(), {k: v.clone() for k, v in (outputs or {}).items()}))
        return aggregate(rnd, clients, uploaded, started, outputs, loss)

    sim.engine.aggregate_train = spy
    sim.run()
    shared = sim.private.num_shared
    layout = sim.trainer.layout
    assert len(uploads) == 2
    for params, outputs in uploads:
        assert params.size(1) == shared < layout.num_params
        assert set(outputs) == {"embedding"} and outputs["embedding"].shape == (8, 8)
    assert sim.strategy.personal_params.size(1) == shared
    assert all("mask" not in name for name in sim.engine.layout.param_names)
    # The clients' masks did train, each its own way.
    masks = sim.local_params[:, sim.private.private_index]
    assert torch.cdist(masks, masks).add(torch.eye(8)).min() > 0


# ------------------------------------------------------ the embedding job
def test_the_proxy_graph():
    a = random_partition_graph([4, 3], 1.0, generator=torch.Generator().manual_seed(0))
    # p_in = 1, p_out = 0: two cliques, both directions, no self loop.
    assert a.size(1) == 2 * (6 + 3)
    assert bool(((a[0] < 4) == (a[1] < 4)).all()) and bool((a[0] != a[1]).all())
    x, ei, w = proxy_graph(6, num_graphs=5, nodes_per_graph=100, p_in=0.1, seed=3)
    x2, ei2, w2 = proxy_graph(6, num_graphs=5, nodes_per_graph=100, p_in=0.1, seed=3)
    assert torch.equal(x, x2) and torch.equal(ei, ei2) and torch.equal(w, w2)
    assert x.shape == (500, 6) and not torch.equal(x, proxy_graph(6, seed=4)[0])
    blocks = ei // 100
    assert bool((blocks[0] == blocks[1]).all())  # no edge between blocks
    # Expected degree p_in * 99 = 9.9 (plus the self loop GCN adds).
    assert 8.5 < (ei.size(1) - 500) / 500 < 11.5
    with pytest.raises(ValueError, match="p_in and p_out must be probabilities"):
        random_partition_graph([2], 1.5)


def test_the_embedding_is_the_mean_node_embedding_on_the_proxy(federation):
    torch.manual_seed(0)
    model = build_model("gcn", federation.input_shape, federation.num_classes, hidden_channels=8)
    trainer = ClientTrainer(model, federation, config=ADAM)
    layout = trainer.layout
    params = layout.flatten(model).repeat(3, 1) + 0.1 * torch.randn(3, layout.num_params)
    inputs = proxy_inputs(federation, seed=7)
    got = functional_embeddings(trainer.model, layout, params, torch.zeros(3, 0), inputs)
    looped = functional_embeddings(trainer.model, layout, params, torch.zeros(3, 0), inputs,
                                   batched=False)
    torch.testing.assert_close(got, looped, rtol=0, atol=1e-5)
    for i in range(3):
        one = build_model("gcn", federation.input_shape, federation.num_classes,
                          hidden_channels=8)
        layout.load_into(one, params[i])
        torch.testing.assert_close(got[i], one.embed(*inputs).mean(0), rtol=0, atol=1e-5)


def test_clients_that_hold_sets_of_graphs_get_the_proxy_as_a_batch_of_graphs():
    data, _ = toy_graph_sets(num_clients=3, num_features=4)
    x, edge_index, batch, size = proxy_inputs(data, num_graphs=3, nodes_per_graph=20, seed=5)
    px, pei, _ = proxy_graph(4, num_graphs=3, nodes_per_graph=20, seed=5)
    # The same features and blocks, without the self loops GCN's weights add.
    assert torch.equal(x, px) and torch.equal(edge_index, pei[:, pei[0] != pei[1]])
    assert batch.tolist() == [0] * 20 + [1] * 20 + [2] * 20 and size.tolist() == [20] * 3
    torch.manual_seed(0)
    model = build_model("gin", data.input_shape, data.num_classes, hidden_channels=8)
    trainer = ClientTrainer(model, data, config=ADAM)
    layout = trainer.layout
    params = layout.flatten(model).repeat(3, 1) + 0.1 * torch.randn(3, layout.num_params)
    inputs = (x, edge_index, batch, size)
    buffers = layout.flatten_buffers(model).repeat(3, 1)  # GINConv's epsilon
    got = functional_embeddings(trainer.model, layout, params, buffers, inputs)
    for i in range(3):
        one = build_model("gin", data.input_shape, data.num_classes, hidden_channels=8)
        layout.load_into(one, params[i])
        one.eval()
        torch.testing.assert_close(got[i], one.embed(*inputs).mean(0), rtol=0, atol=1e-5)


def test_the_job_runs_on_the_trained_model(federation):
    torch.manual_seed(0)
    model = build_model("gcn", federation.input_shape, federation.num_classes, hidden_channels=8)
    trainer = ClientTrainer(model, federation, config=ADAM)
    clients = torch.tensor([1, 4])
    start = trainer.layout.flatten(model).repeat(2, 1)
    job = FunctionalEmbedding(seed=2)
    result = run_plan(trainer, TrainPlan(params=start, jobs=(job,)),
                      ClientStart(clients, clients, start, torch.zeros(2, 0)), seed=0, rnd=1)
    assert not torch.allclose(result.params, start)
    expected = functional_embeddings(trainer.model, trainer.layout, result.params,
                                     torch.zeros(2, 0), proxy_inputs(federation, seed=2))
    torch.testing.assert_close(result.outputs["embedding"], expected)


# ------------------------------------------- pFedGraph over functional embeddings
def test_pfedgraph_can_compare_clients_by_functional_embeddings(federation):
    torch.manual_seed(0)
    model = build_model("gcn", federation.input_shape, federation.num_classes, hidden_channels=8)
    strategy = build_strategy("pfedgraph", similarity="embedding", threshold=None)
    sim = Simulator(federation, model, strategy, rounds=2, local=ADAM, seed=3)
    sim.run()
    # The embeddings the server holds are those of the clients' latest models ...
    expected = functional_embeddings(sim.trainer.model, sim.trainer.layout, sim.local_params,
                                     sim.local_buffers, proxy_inputs(federation, seed=3))
    torch.testing.assert_close(strategy.embeddings, expected, rtol=0, atol=1e-5)
    # ... and the similarity the QP saw is their cosine, not that of the updates.
    torch.testing.assert_close(strategy.last_similarity(),
                               pairwise_cosine(expected).double(), rtol=0, atol=1e-5)
    updates = build_strategy("pfedgraph", threshold=None)
    Simulator(federation, model, updates, rounds=2, local=ADAM, seed=3).run()
    assert not torch.allclose(updates.last_similarity(), strategy.last_similarity(), atol=1e-2)
    # It resumes with its embeddings.
    again = build_strategy("pfedgraph", similarity="embedding", threshold=None)
    again.setup(strategy.ctx)
    again.load_state_dict(strategy.state_dict())
    torch.testing.assert_close(again.last_similarity(), strategy.last_similarity())


def test_layout_param_names_of_the_masked_model_split_as_declared():
    model = MaskedGCN(5, 3, hidden_channels=4)
    layout = ParamLayout.from_module(model)
    from pyg_fedgraph.train.private import PrivateParameters, private_prefixes
    priv = PrivateParameters(layout, private_prefixes(model))
    assert priv.private_names == ["convs.0.mask", "convs.1.mask", "classifier.mask"]
    assert priv.num_shared == layout.num_params - (20 + 16 + 12)


@pytest.mark.parametrize("device", available_devices()[1:] or [torch.device("cpu")],
                         ids=str)
@pytest.mark.parametrize("name,model_name,kwargs", [
    ("fedpub", "masked-gcn", {}),
    ("pfedgraph", "gcn", {"similarity": "embedding", "threshold": None}),
])
def test_runs_on_every_device_as_on_the_cpu(federation, device, name, model_name, kwargs):
    # Where a GPU is, training and the server's state live there (or the state on the
    # host): the results are the CPU's up to float rounding.
    def run(**where):
        torch.manual_seed(0)
        model = build_model(model_name, federation.input_shape, federation.num_classes,
                            hidden_channels=8)
        sim = Simulator(federation, model, build_strategy(name, **kwargs), rounds=2,
                        local=ADAM, **where)
        sim.run()
        return sim

    cpu = run()
    for where in ({"device": device}, {"device": device, "state_device": "cpu"}):
        other = run(**where)
        # Adam's normalized steps can turn a rounding difference of a near-zero gradient
        # into a step-sized one: on an H100 one of 1,440 values moved 1.007e-4 (2026-11-26).
        torch.testing.assert_close(other.local_params.cpu(), cpu.local_params, rtol=0,
                                   atol=1e-3)
        torch.testing.assert_close(other.strategy.collaboration_graph().cpu(),
                                   cpu.strategy.collaboration_graph(), rtol=0, atol=1e-4)
