r"""The operators of ``pyg_fedgraph.nn`` read like PyG's: every ``MessagePassing``
subclass reaches ``propagate`` for an edge list and defines ``message`` or
``message_and_aggregate``; the server operators, whose node features are whole
models, go to their own ``message_and_aggregate`` (no (E, D) message tensor),
and every operator that takes a graph takes it as ``forward(x, edge_index, ...)``."""
import importlib
import inspect
import pkgutil

import pytest
import torch
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import to_torch_csr_tensor

import pyg_fedgraph.nn
from pyg_fedgraph.nn import (
    AGHNConv,
    ClusterGraphPropagation,
    GraphAggregation,
    MaskedGCNConv,
)
from pyg_fedgraph.utils.graph import complete_graph

N, D = 5, 7
PTR = torch.tensor([0, 3, 7])
# A sparse graph (4 < N^2 / 4 edges: the CSR product) and the complete one
# (the dense product of the same matrix): both arrive through propagate.
SPARSE = torch.tensor([[0, 1, 3, 4], [1, 2, 2, 0]])
COMPLETE = complete_graph(N)


def _x(seed=0):
    return torch.randn(N, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _weights(edge_index, columns, seed=1):
    return torch.rand(edge_index.size(1), columns, dtype=torch.float64,
                      generator=torch.Generator().manual_seed(seed)).squeeze(1)


# How to call each MessagePassing subclass with an edge list: (module, edge_index) -> output.
CALLS = {
    "GraphAggregation": lambda ei: GraphAggregation()(_x(), ei, _weights(ei, 1)),
    "GraphAggregation (per layer)": lambda ei: GraphAggregation()(
        _x(), ei, _weights(ei, 2), layer_ptr=PTR),
    "AGHNConv": lambda ei: AGHNConv(N, 2).double()(_x(), ei, delta=_x(2), layer_ptr=PTR),
    "ClusterGraphPropagation": lambda ei: ClusterGraphPropagation(num_steps=2)(
        _x(), ei, _weights(ei, 1)),
    "MaskedGCNConv": lambda ei: _masked_gcn()(_x(), ei, _weights(ei, 1)),
}
# Layers of the clients' models: their node features are a graph's, (E, F)
# messages are what PyG's GCNConv builds for an edge_index and what torch.vmap
# batches over clients; a sparse adjacency goes to message_and_aggregate.
EDGE_WISE = {"MaskedGCNConv"}


def _masked_gcn():
    torch.manual_seed(0)
    return MaskedGCNConv(D, D).double()


def _nn_classes():
    classes = {}
    for info in pkgutil.iter_modules(pyg_fedgraph.nn.__path__):
        module = importlib.import_module(f"pyg_fedgraph.nn.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == module.__name__:
                classes[obj.__name__] = obj
    return classes


def test_every_message_passing_subclass_is_covered():
    found = {name for name, cls in _nn_classes().items() if issubclass(cls, MessagePassing)}
    assert found == {name.split(" ")[0] for name in CALLS}, \
        "a new MessagePassing subclass needs an entry in CALLS"


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("graph", ["sparse", "complete"])
def test_edge_lists_reach_propagate_and_the_fused_aggregation(name, graph, monkeypatch):
    cls = _nn_classes()[name.split(" ")[0]]
    assert cls.message is not MessagePassing.message \
        or cls.message_and_aggregate is not MessagePassing.message_and_aggregate
    seen = _record_hooks(cls, monkeypatch)
    out = CALLS[name](SPARSE if graph == "sparse" else COMPLETE)
    assert out.shape == (N, D) and torch.isfinite(out).all()
    steps = 2 if cls is ClusterGraphPropagation else 1
    if name in EDGE_WISE:
        assert seen == ["message", "propagate"]
        return
    assert cls.message_and_aggregate is not MessagePassing.message_and_aggregate
    # Fused: message_and_aggregate inside propagate, never the (E, D) message().
    assert seen == ["message_and_aggregate", "propagate"] * steps


def _record_hooks(cls, monkeypatch):
    seen = []
    real_init = cls.__init__

    def init(self, *args, **kwargs):  # register the hooks on every instance built
        real_init(self, *args, **kwargs)
        self.register_propagate_forward_hook(lambda *a: seen.append("propagate"))
        self.register_message_and_aggregate_forward_hook(
            lambda *a: seen.append("message_and_aggregate"))
        self.register_message_forward_hook(lambda *a: seen.append("message"))

    monkeypatch.setattr(cls, "__init__", init)
    return seen


@pytest.mark.parametrize("graph", ["sparse", "complete"])
def test_masked_gcn_conv_takes_a_sparse_adjacency_too(graph, monkeypatch):
    # PyG's two input forms agree: edge_index with edge_weight (message()) and
    # the transposed sparse adjacency holding the weights (message_and_aggregate()).
    ei = SPARSE if graph == "sparse" else COMPLETE
    ew = _weights(ei, 1)
    expected = _masked_gcn()(_x(), ei, ew)
    seen = _record_hooks(MaskedGCNConv, monkeypatch)
    for adj_t in (to_torch_csr_tensor(ei.flip(0), ew, size=(N, N)),
                  torch.sparse_coo_tensor(ei.flip(0), ew, (N, N))):
        torch.testing.assert_close(_masked_gcn()(_x(), adj_t), expected, atol=1e-12, rtol=0)
    assert seen == ["message_and_aggregate", "propagate"] * 2
    # Without weights every edge counts once.
    torch.testing.assert_close(_masked_gcn()(_x(), ei),
                               _masked_gcn()(_x(), ei, torch.ones(ei.size(1),
                                                                  dtype=torch.float64)))


def test_the_edge_wise_message_form_agrees_with_the_fused_one():
    # PyG's two input forms: a plain edge_index runs message() and aggregate(),
    # forward's CSR adjacency runs message_and_aggregate().
    x = _x()
    for ei in (SPARSE, COMPLETE):
        agg = GraphAggregation()
        ew = _weights(ei, 1)
        torch.testing.assert_close(agg.propagate(ei, x=x, edge_weight=ew, layer_ptr=None),
                                   agg(x, ei, ew), atol=1e-12, rtol=0)
        ew2 = _weights(ei, 2)
        torch.testing.assert_close(agg.propagate(ei, x=x, edge_weight=ew2, layer_ptr=PTR),
                                   agg(x, ei, ew2, layer_ptr=PTR), atol=1e-12, rtol=0)
        prop = ClusterGraphPropagation(num_steps=2)
        once = prop.propagate(ei, x=x, edge_weight=ew)
        torch.testing.assert_close(prop.propagate(ei, x=once, edge_weight=ew), prop(x, ei, ew),
                                   atol=1e-12, rtol=0)
    # A user's own CSR or COO adjacency holding the weights, without edge_weight.
    for ei in (SPARSE, COMPLETE):
        ew = _weights(ei, 1).requires_grad_()
        expected = GraphAggregation()(x, ei, ew)
        (grad,) = torch.autograd.grad(expected.sum(), ew)
        for adj in (to_torch_csr_tensor(ei.flip(0), ew, size=(N, N)),
                    torch.sparse_coo_tensor(ei.flip(0), ew, (N, N))):
            out = agg.propagate(adj, x=x, edge_weight=None, layer_ptr=None)
            torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
            torch.testing.assert_close(torch.autograd.grad(out.sum(), ew)[0], grad,
                                       atol=1e-12, rtol=0)
    # AGHNConv: its attention weights (with the self loops) as edge weights.
    conv = AGHNConv(N, 2).double()
    out, alpha = conv(x, SPARSE, delta=_x(2), layer_ptr=PTR, return_attention_weights=True)
    tgt, src = alpha.sum(0).nonzero(as_tuple=True)
    edge_index = torch.stack([src, tgt])
    edge_weight = alpha[:, tgt, src].t()  # (E, L)
    assert edge_index.size(1) == SPARSE.size(1) + N
    torch.testing.assert_close(conv.propagate(edge_index, x=x, edge_weight=edge_weight,
                                              layer_ptr=PTR), out.detach(), atol=1e-12, rtol=0)


# Operators that take a graph but no node features: Panacea's hypernetwork
# generates every client's parameters from its own embeddings, so the graph is
# its whole input.
NO_FEATURES = {"GCNHypernetwork"}


def test_operators_take_x_then_edge_index():
    takes_edges = {}
    for name in pyg_fedgraph.nn.__all__:
        obj = getattr(pyg_fedgraph.nn, name)
        if inspect.isclass(obj) and issubclass(obj, torch.nn.Module):
            params = list(inspect.signature(obj.forward).parameters)[1:]
            if "edge_index" in params:
                takes_edges[name] = params
    assert {"GraphAggregation", "AGHNConv", "ClusterGraphPropagation", "ClientGAT",
            "AllocationLogits", "KHopPropagation"} <= set(takes_edges)
    for name, params in takes_edges.items():
        if name not in NO_FEATURES:
            assert params[:2] == ["x", "edge_index"], (name, params)


def test_aghn_conv_old_argument_order_gets_one_clear_error():
    conv = AGHNConv(N, 2)
    x, delta = torch.randn(N, D), torch.randn(N, D)
    with pytest.raises(TypeError, match=r"the arguments are \(x, edge_index, delta, "
                       r"layer_ptr\); pass delta= and layer_ptr= by name$"):
        conv(x, delta, PTR)
    with pytest.raises(ValueError, match=r"pass layer_ptr: this AGHNConv has 2 layers"):
        conv(x, delta=delta)
    # One layer needs no pointer.
    one = AGHNConv(N, 1)
    torch.testing.assert_close(one(x, delta=delta), one(x, delta=delta,
                                                        layer_ptr=torch.tensor([0, D])))
