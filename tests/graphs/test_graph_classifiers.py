r"""Graph classification client models: what they compute (against PyG's
own layers and pooling), padding, class masks, the declared private part,
and batched training equal to the per-client loop for every registered
graph-set model."""
import pytest
import torch
import torch.nn.functional as F
from small_graph_sets import random_graph, toy_graph_sets
from torch.func import functional_call, vmap
from torch_geometric.data import Batch
from torch_geometric.nn import GCNConv, GINConv, global_add_pool, global_mean_pool

from pyg_fedgraph.models import GIN, MODELS, GCNPool, build_model, model_options
from pyg_fedgraph.models.graph_classifiers import gcn_self_loop_weights
from pyg_fedgraph.nn.functional import global_pool
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.execution import EXECUTION_TABLE, choose_execution, model_family
from pyg_fedgraph.train.private import private_prefixes
from pyg_fedgraph.train.trainer import ClientTrainer

SET_MODELS = sorted(n for n, spec in MODELS.items() if spec.inputs == "graph-set")
SMALL = {"hidden_channels": 8, "dropout": 0.0}


def batch_of(n=4, seed=0, features=4):
    g = torch.Generator().manual_seed(seed)
    return Batch.from_data_list([random_graph(g, 3 + k, 5, features, k % 2) for k in range(n)])


def test_the_graph_set_models_are_registered():
    assert SET_MODELS == ["gcn-pool", "gin"]
    assert set(model_options("gin")) == {"hidden_channels", "num_layers", "dropout", "pool",
                                         "share"}


def test_global_pool_by_hand():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [9.0, 9.0]])
    batch = torch.tensor([0, 1, 1, 2])  # node 3: padding slot 2 of B = 2 graphs
    size = torch.tensor([1, 2])
    assert global_pool(x, batch, size).tolist() == [[1.0, 2.0], [8.0, 10.0]]
    assert global_pool(x, batch, size, "mean").tolist() == [[1.0, 2.0], [4.0, 5.0]]
    b = batch_of()
    assert torch.allclose(global_pool(b.x, b.batch), global_add_pool(b.x, b.batch))
    assert torch.allclose(global_pool(b.x, b.batch, reduce="mean"),
                          global_mean_pool(b.x, b.batch))


def test_gin_is_gcfls_gin_of_pygs_layers():
    torch.manual_seed(0)
    b = batch_of()
    ours = GIN(4, 3, hidden_channels=8, dropout=0.0)
    convs = [GINConv(conv.nn) for conv in ours.convs]  # the same MLPs, PyG's layer
    h = ours.pre(b.x)
    for conv in convs:
        h = F.relu(conv(h, b.edge_index))
    expected = ours.classifier(F.relu(ours.post(global_add_pool(h, b.batch))))
    assert torch.allclose(ours(b.x, b.edge_index, b.batch), expected, atol=1e-6)
    # GCFL's client: three GIN layers of 64, dropout 0.5, sum pooling.
    gcfl = build_model("gin", (7,), 2)
    assert len(gcfl.convs) == 3 and gcfl.hidden_channels == 64 and gcfl.dropout == 0.5
    assert gcfl.pool == "sum" and gcfl.pre.in_features == 7 and gcfl.classifier.out_features == 2


def test_gcn_pool_is_pygs_normalized_gcnconv_stack_with_mean_pooling():
    torch.manual_seed(0)
    b = batch_of()
    ours = GCNPool(4, 3, hidden_channels=8, dropout=0.0)
    h = ours.pre(b.x)
    for mine in ours.convs:
        ref = GCNConv(8, 8)  # PyG's defaults: self loops, symmetric normalization
        ref.lin.weight.data.copy_(mine.lin.weight)
        ref.bias.data.copy_(mine.bias)
        h = F.relu(ref(h, b.edge_index))
    expected = ours.classifier(F.relu(ours.post(global_mean_pool(h, b.batch))))
    assert torch.allclose(ours(b.x, b.edge_index, b.batch), expected, atol=1e-5)


@pytest.mark.parametrize("name", SET_MODELS)
def test_padded_batched_outputs_equal_each_clients_graphs_alone(name):
    torch.manual_seed(0)
    data, clients = toy_graph_sets()
    model = build_model(name, data.input_shape, 3, **SMALL).eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())
    index = torch.tensor([[0, 1, 2], [3, 3, 0], [5, 4, 1], [8, 2, 6]])
    inputs, _ = data.batch("train", index)
    batched = vmap(lambda *a: functional_call(model, (params, buffers), a))(*inputs)
    for i, row in enumerate(index.tolist()):
        alone = Batch.from_data_list([clients[i][0][k] for k in row])
        expected = model(alone.x, alone.edge_index, alone.batch, None, data.class_mask[i])
        assert torch.allclose(batched[i], expected, atol=1e-5), i


def test_absent_classes_take_no_probability_and_are_never_predicted():
    torch.manual_seed(0)
    b = batch_of(6)
    model = GIN(4, 3, hidden_channels=8, dropout=0.0)
    mask = torch.tensor([True, True, False])
    out = model(b.x, b.edge_index, b.batch, None, mask)
    free = model(b.x, b.edge_index, b.batch)
    assert torch.equal(out[:, :2], free[:, :2])
    assert (out.argmax(1) < 2).all()
    # The loss is the cross-entropy over the client's own two classes.
    y = torch.tensor([0, 1, 1, 0, 1, 0])
    assert torch.allclose(F.cross_entropy(out, y), F.cross_entropy(free[:, :2], y))
    out.sum().backward()  # finite gradients despite the lowest-float scores
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_the_input_layer_and_the_head_are_declared_private_unless_all_is_shared():
    gin = GIN(4, 3)
    assert private_prefixes(gin) == ("pre", "post", "classifier")
    assert private_prefixes(GIN(4, 3, share="all")) == ()
    assert private_prefixes(GCNPool(4, 3)) == ("pre", "post", "classifier")
    shared = [n for n, _ in gin.named_parameters()
              if not n.startswith(("pre", "post", "classifier"))]
    assert shared and all(n.startswith("convs.") for n in shared)
    with pytest.raises(ValueError, match="share must be 'body' or 'all', got 'head'"):
        GIN(4, 3, share="head")
    with pytest.raises(ValueError, match="pool must be 'sum' or 'mean', got 'max'"):
        GCNPool(4, 3, pool="max")
    assert str(GIN(4, 3)) == "GIN(4, 3, hidden_channels=64, num_layers=3, pool=sum, share=body)"


@pytest.mark.parametrize("name", SET_MODELS)
@pytest.mark.parametrize("local", [
    {"lr": 0.05, "momentum": 0.9, "batch_size": 3, "epochs": 2},
    {"optimizer": "adam", "lr": 0.01, "batch_size": 4, "epochs": 1},
], ids=["minibatch-sgd", "minibatch-adam"])
def test_batched_training_equals_the_per_client_loop(name, local):
    data, _ = toy_graph_sets()
    torch.manual_seed(0)
    model = build_model(name, data.input_shape, 3, **SMALL)
    cfg = LocalConfig(weight_decay=1e-3, **local)
    clients = torch.tensor([2, 0, 3, 1])
    out = {}
    for key, kwargs in {"vmap": {"execution": "vmap"}, "loop": {"execution": "loop"},
                        "per-client": {"parallel": False}}.items():
        trainer = ClientTrainer(model, data, config=cfg, **kwargs)
        params = trainer.layout.flatten(model).repeat(4, 1)
        params = params + 0.05 * torch.randn(params.shape,
                                             generator=torch.Generator().manual_seed(1))
        out[key] = trainer.train(clients, params, trainer.initial_buffers(4),
                                 generator=torch.Generator().manual_seed(0))
        metrics = trainer.evaluate(clients, out[key].params)
        assert bool(((metrics["accuracy"] >= 0) & (metrics["accuracy"] <= 1)).all())
    for key in ("loop", "per-client"):
        torch.testing.assert_close(out["vmap"].params, out[key].params, rtol=0, atol=1e-5)
        torch.testing.assert_close(out["vmap"].loss, out[key].loss, rtol=0, atol=1e-5)
    assert not torch.allclose(out["vmap"].params, params)


def test_one_sgd_step_follows_the_mean_loss_over_the_batch():
    data, clients = toy_graph_sets()
    torch.manual_seed(0)
    model = build_model("gin", data.input_shape, 3, **SMALL)
    trainer = ClientTrainer(model, data, config=LocalConfig(lr=0.1, batch_size=6, steps=1))
    params = trainer.layout.flatten(model).repeat(4, 1)
    got = trainer.train(torch.arange(4), params, trainer.initial_buffers(4),
                        generator=[10, 11, 12, 13])
    from pyg_fedgraph.train.trainer import batch_schedule
    index, _ = batch_schedule(data.num_samples("train"), 6, steps=1, generator=[10, 11, 12, 13])
    for i in range(4):  # one SGD step by hand, with torch's autograd on PyG's batch
        m = build_model("gin", data.input_shape, 3, **SMALL)
        m.load_state_dict(model.state_dict())
        graphs = [clients[i][0][k] for k in index[0, i].tolist()]
        b = Batch.from_data_list(graphs)
        loss = F.cross_entropy(m(b.x, b.edge_index, b.batch, None, data.class_mask[i]), b.y)
        loss.backward()
        with torch.no_grad():
            expected = torch.cat([(p - 0.1 * p.grad).reshape(-1) for p in m.parameters()])
        torch.testing.assert_close(got.params[i], expected, rtol=0, atol=1e-5)


def test_full_batches_train_gin_whose_only_buffers_are_constant():
    # GINConv keeps its epsilon as a buffer: full batches are refused only for running
    # statistics (BatchNorm), which their filler rows would skew.
    data, _ = toy_graph_sets()
    torch.manual_seed(0)
    model = build_model("gin", data.input_shape, 3, **SMALL)
    cfg = LocalConfig(lr=0.1, full_batch=True, epochs=2)
    out = {}
    for key, kwargs in {"vmap": {"execution": "vmap"}, "per-client": {"parallel": False}}.items():
        trainer = ClientTrainer(model, data, config=cfg, **kwargs)
        assert trainer.layout.num_buffers == 3  # the three epsilons
        params = trainer.layout.flatten(model).repeat(4, 1)
        out[key] = trainer.train(torch.arange(4), params, trainer.initial_buffers(4))
    torch.testing.assert_close(out["vmap"].params, out["per-client"].params, rtol=0, atol=1e-5)
    assert out["vmap"].steps.tolist() == [2, 2, 2, 2]
    bn = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
    split = ClientSplit.from_lists([torch.randn(3, 4), torch.randn(5, 4)],
                                   [torch.zeros(3).long(), torch.ones(5).long()])
    flat = FederatedDataset("bn", "classification", {"train": split, "val": split,
                                                     "test": split}, num_classes=3)
    trainer = ClientTrainer(bn, flat, config=cfg)
    with pytest.raises(ValueError, match="full_batch=True would count the filler rows"):
        trainer.train(torch.arange(2), trainer.layout.flatten(bn).repeat(2, 1))


@pytest.mark.parametrize("name", SET_MODELS)
def test_embed_is_the_last_message_passing_layer_before_its_activation(name):
    torch.manual_seed(0)
    b = batch_of()
    model = build_model(name, (4,), 3, **SMALL)
    ei, w = gcn_self_loop_weights(b.edge_index, b.num_nodes)
    edges = (b.edge_index,) if name == "gin" else (ei, w)
    h = model.pre(b.x)
    *first, last = model.convs
    for conv in first:
        h = F.relu(conv(h, *edges))
    h = last(h, *edges)
    torch.testing.assert_close(model.embed(b.x, b.edge_index, b.batch), h)
    # The forward pass is unchanged: ReLU after the last layer too.
    assert torch.allclose(model._layers(model.pre(b.x), b.edge_index), F.relu(h))


def test_graph_set_models_run_client_after_client_on_the_cpu():
    # benchmarks/results/graph_classification_batching.md: 12 GIN clients, one CPU
    # thread, vmap 0.41x and loop 0.89x the per-client loop; node-level GNNs keep theirs.
    cpu = torch.device("cpu")
    for name in SET_MODELS:
        model = build_model(name, (4,), 3, **SMALL)
        assert model_family(model) == "graph-set"
        assert choose_execution(model, cpu) == "loop"
        assert choose_execution(model, torch.device("cuda")) == "vmap"  # not measured
        assert choose_execution(model, cpu, "vmap") == "vmap"
    assert model_family(build_model("gcn", (4,), 3)) == "gnn"
    assert EXECUTION_TABLE[("gnn", "cpu")] == "vmap"
