r"""How a client holds a set of graphs: the store, the per-step padded
unions, batches, class masks and subsets."""
import pytest
import torch
from small_graph_sets import random_graph, toy_graph_sets
from torch_geometric.data import Batch, Data

from pyg_fedgraph.data import GraphSetFederatedDataset, GraphStore, collate_graph_sets


def three_graphs():
    g = torch.Generator().manual_seed(0)
    return [random_graph(g, 3, 4, 2, 0), random_graph(g, 5, 6, 2, 1),
            random_graph(g, 2, 1, 2, 1)]


def test_the_store_concatenates_nodes_and_edges_with_pointers():
    graphs = three_graphs()
    store = GraphStore.from_data(graphs)
    assert store.num_graphs == 3
    assert store.node_ptr.tolist() == [0, 3, 8, 10]
    assert store.num_nodes.tolist() == [3, 5, 2]
    assert store.num_edges.tolist() == [g.edge_index.size(1) for g in graphs]
    assert store.x.shape == (11, 2) and not store.x[-1].any()  # the padding row
    for i, g in enumerate(graphs):
        back = store.graph(i)
        assert torch.equal(back.x, g.x) and torch.equal(back.edge_index, g.edge_index)
    picked = store.select(torch.tensor([2, 0]))
    assert picked.num_nodes.tolist() == [2, 3]
    assert torch.equal(picked.graph(0).x, graphs[2].x)
    assert torch.equal(picked.graph(1).edge_index, graphs[0].edge_index)
    assert not picked.x[-1].any()


def test_the_store_refuses_what_it_cannot_hold():
    graphs = three_graphs()
    with pytest.raises(ValueError, match=r"widths \[2, 3\]"):
        GraphStore.from_data([graphs[0], Data(x=torch.zeros(2, 3),
                                              edge_index=torch.zeros(2, 0, dtype=torch.long))])
    with pytest.raises(ValueError, match="graph 0 has edges outside its 2 nodes"):
        GraphStore.from_data([Data(x=torch.zeros(2, 2), edge_index=torch.tensor([[0], [2]]))])
    with pytest.raises(ValueError, match="at least one graph"):
        GraphStore.from_data([])


def test_each_row_becomes_one_disjoint_union_padded_to_the_largest():
    graphs = three_graphs()
    store = GraphStore.from_data(graphs)
    ids = torch.tensor([[0, 1], [2, 2]])  # client 0: 3 + 5 nodes; client 1: graph 2 twice
    x, edge_index, slot, size = collate_graph_sets(store, ids)
    e = [g.edge_index.size(1) for g in graphs]
    v, m = 8 + 1, max(e[0] + e[1], 2 * e[2])
    assert x.shape == (2, v, 2) and edge_index.shape == (2, 2, m)
    assert size.tolist() == [[3, 5], [2, 2]]
    for s, row in enumerate(ids.tolist()):
        ref = Batch.from_data_list([graphs[g] for g in row])  # PyG's own disjoint union
        n, k = ref.num_nodes, ref.edge_index.size(1)
        assert torch.equal(x[s, :n], ref.x) and not x[s, n:].any()
        assert torch.equal(slot[s, :n], ref.batch) and (slot[s, n:] == 2).all()
        assert torch.equal(edge_index[s, :, :k], ref.edge_index)
        assert (edge_index[s, :, k:] == v - 1).all()  # padding edges: V - 1 -> V - 1
    assert (slot[:, -1] == 2).all()  # the last node is padding in every union


def test_batches_give_the_graphs_labels_and_class_masks():
    data, clients = toy_graph_sets()
    assert data.input_kind == "graph-set" and data.input_shape == (4,)
    assert data.num_samples("train").tolist() == [6, 7, 8, 9]
    index = torch.tensor([[0, 5], [1, 1], [6, 2]])
    picked = torch.tensor([3, 0, 2])
    (x, edge_index, slot, size, mask), y = data.batch("train", index, picked)
    assert mask.tolist() == data.class_mask[picked].tolist()
    for s, (client, row) in enumerate(zip(picked.tolist(), index.tolist(), strict=True)):
        graphs = [clients[client][0][i] for i in row]
        assert y[s].tolist() == [int(g.y) for g in graphs]
        ref = Batch.from_data_list(graphs)
        assert torch.equal(x[s, :ref.num_nodes], ref.x)
        assert torch.equal(edge_index[s, :, :ref.edge_index.size(1)], ref.edge_index)
        assert size[s].tolist() == [g.num_nodes for g in graphs]
    # The split lists graph ids and labels; labels stay inside each client's classes.
    test = data.splits["test"]
    for i, parts in enumerate(clients):
        assert test.y[i, :3].tolist() == [int(g.y) for g in parts[2]]
        assert bool(data.class_mask[i, test.y[i, :3]].all())


def test_a_subset_holds_only_its_clients_graphs_and_gives_the_same_batches():
    data, _ = toy_graph_sets()
    one = data.subset(torch.tensor([2]))
    assert one.num_clients == 1
    assert one.store.num_graphs == 8 + 2 + 3
    assert one.class_mask.tolist() == data.class_mask[[2]].tolist()
    index = torch.tensor([[4, 0, 7]])
    mine, y1 = one.batch("train", index)
    theirs, y2 = data.batch("train", index, torch.tensor([2]))
    assert torch.equal(y1, y2)
    for a, b in zip(mine, theirs, strict=True):
        assert torch.equal(a, b)


def test_the_dataset_refuses_bad_input():
    data, clients = toy_graph_sets()
    with pytest.raises(ValueError, match=r"class_mask has shape \(4, 2\), expected \(4, 3\)"):
        GraphSetFederatedDataset.from_clients("t", clients, 3,
                                              class_mask=torch.ones(4, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"client 0 gives 2 sets of graphs; give \(train, val, "
                                         r"test\)"):
        GraphSetFederatedDataset.from_clients("t", [clients[0][:2]], 3)
    unlabeled = Data(x=torch.ones(2, 4), edge_index=torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="a val graph of client 0 has no single label y"):
        GraphSetFederatedDataset.from_clients("t", [(clients[0][0], [unlabeled], [])], 3)
