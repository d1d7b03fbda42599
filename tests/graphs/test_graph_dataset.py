r"""How a client holds a graph: padding, GCN weights, batches, subsets."""
import pytest
import torch
from small_client_graphs import client_graph, toy_graph_federation
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import to_dense_adj

from pyg_fedgraph.data.graph_dataset import ClientGraphs, GraphFederatedDataset, gcn_edge_weight


def dense(edge_index, weight, n):
    return to_dense_adj(edge_index, edge_attr=weight, max_num_nodes=n)[0]


def test_gcn_edge_weight_is_pygs_normalization_with_self_loops():
    g = client_graph(9, 14)  # holds a self loop on node 0 and a duplicate edge
    ei, w = gcn_edge_weight(g.edge_index, 9)
    ref_ei, ref_w = gcn_norm(g.edge_index, None, 9, add_self_loops=True)
    assert torch.allclose(dense(ei, w, 9), dense(ref_ei, ref_w, 9), atol=1e-6)
    # One self loop per node, by hand: node degrees count the loop once.
    assert int((ei[0] == ei[1]).sum()) == 9


def test_client_graphs_pad_with_one_isolated_node_of_zero_weight():
    _, graphs = toy_graph_federation()
    cg = ClientGraphs.from_data(graphs)
    v = max(g.num_nodes for g in graphs)
    assert cg.x.shape == (4, v + 1, 5)
    for i, g in enumerate(graphs):
        n, e = g.num_nodes, int(cg.num_edges[i])
        assert torch.equal(cg.x[i, :n], g.x) and not cg.x[i, n:].any()
        ei = cg.edge_index[i]
        assert int(ei[:, :e].max()) < n                      # real edges stay on real nodes
        assert (ei[:, e:] == v).all()                        # padding edges: V -> V
        assert not cg.edge_weight[i, e:].any()               # ... of weight 0
        ref_ei, ref_w = gcn_edge_weight(g.edge_index, n)
        assert torch.allclose(dense(ei[:, :e], cg.edge_weight[i, :e], n),
                              dense(ref_ei, ref_w, n))


def test_client_graphs_refuse_mixed_feature_widths():
    with pytest.raises(ValueError, match=r"widths \[4, 5\]"):
        ClientGraphs.from_data([client_graph(5, 4), client_graph(5, 4, num_features=4)])


def test_splits_list_each_clients_masked_nodes_and_their_labels():
    data, graphs = toy_graph_federation()
    assert data.input_kind == "graph" and data.input_shape == (5,)
    for split in ("train", "val", "test"):
        part = data.splits[split]
        for i, g in enumerate(graphs):
            ids = getattr(g, f"{split}_mask").nonzero().view(-1)
            n = int(part.counts[i])
            assert n == ids.numel()
            assert torch.equal(part.x[i, :n].long(), ids)
            assert torch.equal(part.y[i, :n].long(), g.y[ids])


def test_batch_gives_the_clients_graphs_and_the_positions_of_the_nodes():
    data, graphs = toy_graph_federation()
    clients = torch.tensor([2, 0])
    index = torch.tensor([[1, 0], [0, 2]])
    (x, ei, w, nodes), y = data.batch("train", index, clients)
    assert x.shape[0] == ei.shape[0] == w.shape[0] == 2
    for row, c in enumerate(clients.tolist()):
        ids = graphs[c].train_mask.nonzero().view(-1)
        assert torch.equal(nodes[row].long(), ids[index[row]])
        assert torch.equal(y[row].long(), graphs[c].y[ids[index[row]]])
        assert torch.equal(x[row], data.graphs.x[c])


@pytest.mark.parametrize("clients", [None, torch.arange(4), torch.tensor([0, 1, 2]),
                                     torch.tensor([1, 0, 2, 3])])
def test_a_batch_of_the_whole_federation_shares_the_graphs_others_copy_them(clients):
    data, _ = toy_graph_federation()
    g = data.graphs
    (x, ei, w, _), _ = data.batch("train", torch.zeros(4 if clients is None else len(clients), 1,
                                                       dtype=torch.long), clients)
    rows = torch.arange(4) if clients is None else clients
    assert torch.equal(x, g.x[rows]) and torch.equal(ei, g.edge_index[rows])
    assert torch.equal(w, g.edge_weight[rows])
    whole = clients is None or torch.equal(clients, torch.arange(4))
    # Every client in order: the padded tensors themselves, no copy of x (N, V + 1, F).
    assert (x.data_ptr() == g.x.data_ptr()) == whole
    assert (ei.data_ptr() == g.edge_index.data_ptr()) == whole

def test_subset_keeps_the_chosen_clients_graphs():
    data, graphs = toy_graph_federation()
    sub = data.subset(torch.tensor([3, 1]))
    assert isinstance(sub, GraphFederatedDataset) and sub.num_clients == 2
    assert torch.equal(sub.graphs.num_nodes, torch.tensor([9, 7]))
    assert torch.equal(sub.graphs.x[1, :7], graphs[1].x)
    assert torch.equal(sub.splits["train"].counts,
                       data.splits["train"].counts[torch.tensor([3, 1])])


def test_a_graph_without_masks_is_refused_naming_them():
    g = client_graph(6, 5)
    del g.val_mask, g.test_mask
    with pytest.raises(ValueError, match="client 1's graph has no val_mask, test_mask"):
        GraphFederatedDataset.from_clients("x", [client_graph(6, 5), g], 3)
