r"""GNN client models: what they compute, padding, and batched training
equal to the per-client loop for every registered graph model."""
import pytest
import torch
import torch.nn.functional as F
from small_client_graphs import client_graph, toy_graph_federation
from torch.func import functional_call, vmap
from torch_geometric.nn import GCNConv

from pyg_fedgraph.models import MODELS, build_model
from pyg_fedgraph.models.gnn import GAT, GCN, GraphSAGE
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.trainer import ClientTrainer

GRAPH_MODELS = sorted(n for n, spec in MODELS.items() if spec.inputs == "graph")
SMALL = {"hidden_channels": 8}


def test_the_graph_models_are_registered():
    assert {"gcn", "sage", "gat"} <= set(GRAPH_MODELS)


def test_gcn_is_pygs_gcnconv_stack_with_a_linear_classifier():
    torch.manual_seed(0)
    g = client_graph(10, 16)
    ours = GCN(5, 3, hidden_channels=8)
    ref = [GCNConv(5, 8), GCNConv(8, 8)]  # PyG's defaults: self loops, normalization
    for conv, mine in zip(ref, ours.convs, strict=True):
        conv.lin.weight.data.copy_(mine.lin.weight)
        conv.bias.data.copy_(mine.bias)
    h = F.relu(ref[1](F.relu(ref[0](g.x, g.edge_index)), g.edge_index))
    expected = ours.classifier(h)
    assert torch.allclose(ours(g.x, g.edge_index), expected, atol=1e-5)
    assert torch.allclose(ours(g.x, g.edge_index, index=torch.tensor([3, 1])),
                          expected[[3, 1]], atol=1e-5)
    # FED-PUB's client: two GCNConv of 128, then the linear head.
    fedpub = build_model("gcn", (1433,), 7)
    assert [c.out_channels for c in fedpub.convs] == [128, 128]
    assert isinstance(fedpub.classifier, torch.nn.Linear)


@pytest.mark.parametrize("name", GRAPH_MODELS)
def test_padded_and_batched_outputs_equal_each_clients_own_graph(name):
    torch.manual_seed(0)
    data, graphs = toy_graph_federation()
    model = build_model(name, data.input_shape, 3, **SMALL).eval()
    cg = data.graphs
    params = {k: v.detach() for k, v in model.named_parameters()}

    def one(x, ei, w):
        return functional_call(model, params, (x, ei, w))

    batched = vmap(one)(cg.x, cg.edge_index, cg.edge_weight)  # (N, V + 1, C)
    for i, g in enumerate(graphs):
        n = g.num_nodes
        alone = model(g.x, *data_edges(g))
        assert torch.allclose(batched[i, :n], alone, atol=1e-5), i


def data_edges(g):
    from pyg_fedgraph.data.graph_dataset import gcn_edge_weight
    return gcn_edge_weight(g.edge_index, g.num_nodes)


@pytest.mark.parametrize("name", GRAPH_MODELS)
@pytest.mark.parametrize("local", [
    {"optimizer": "adam", "lr": 0.01, "full_batch": True, "epochs": 3},
    {"lr": 0.05, "momentum": 0.9, "batch_size": 3, "epochs": 2},
], ids=["full-batch-adam", "minibatch-sgd"])
def test_batched_training_equals_the_per_client_loop(name, local):
    data, _ = toy_graph_federation()
    torch.manual_seed(0)
    model = build_model(name, data.input_shape, 3, **SMALL)
    cfg = LocalConfig(weight_decay=1e-3, **local)
    clients = torch.tensor([2, 0, 3, 1])
    gen = torch.Generator().manual_seed(1)
    out = {}
    for key, kwargs in {"vmap": {"execution": "vmap"}, "loop": {"execution": "loop"},
                        "per-client": {"parallel": False}}.items():
        trainer = ClientTrainer(model, data, config=cfg, **kwargs)
        params = trainer.layout.flatten(model).repeat(4, 1)
        params = params + 0.05 * torch.randn(params.shape, generator=gen.manual_seed(1))
        out[key] = trainer.train(clients, params, trainer.initial_buffers(4),
                                 generator=torch.Generator().manual_seed(0))
    for key in ("loop", "per-client"):
        assert torch.allclose(out["vmap"].params, out[key].params, atol=1e-5, rtol=0), key
        assert torch.allclose(out["vmap"].loss, out[key].loss, atol=1e-5), key
    assert not torch.allclose(out["vmap"].params, params)


def test_full_batch_steps_follow_the_mean_loss_over_each_clients_training_nodes():
    data, graphs = toy_graph_federation()
    torch.manual_seed(0)
    model = build_model("gcn", data.input_shape, 3, **SMALL)
    cfg = LocalConfig(lr=0.1, full_batch=True, epochs=1)
    trainer = ClientTrainer(model, data, config=cfg)
    params = trainer.layout.flatten(model).repeat(4, 1)
    got = trainer.train(torch.arange(4), params, trainer.initial_buffers(4))
    assert got.steps.tolist() == [1, 1, 1, 1]
    for i, g in enumerate(graphs):  # one SGD step by hand, with torch's autograd
        m = build_model("gcn", data.input_shape, 3, **SMALL)
        m.load_state_dict(model.state_dict())
        mask = g.train_mask
        loss = F.cross_entropy(m(g.x, g.edge_index)[mask], g.y[mask])
        loss.backward()
        with torch.no_grad():
            expected = torch.cat([(p - 0.1 * p.grad).reshape(-1) for p in m.parameters()])
        assert torch.allclose(got.params[i], expected, atol=1e-5), i
        assert float(got.loss[i]) == pytest.approx(loss.item(), abs=1e-5)


def test_gat_width_must_be_a_multiple_of_heads():
    with pytest.raises(ValueError, match="hidden_channels=10 is not a multiple of heads=4"):
        GAT(5, 3, hidden_channels=10)
    assert GraphSAGE(5, 3).hidden_channels == 128
