"""The contextual SBM with planted communities: sizes, determinism, the
separation knob, and the federation with one community per client."""
import numpy as np
import pytest
import torch

from pyg_fedgraph.datasets import contextual_sbm, planted_graph_federation


def test_shapes_communities_and_determinism():
    data = contextual_sbm(num_nodes=402, num_communities=4, num_classes=3, num_features=5,
                          seed=7)
    assert data.x.shape == (402, 5) and data.y.max() < 3
    assert torch.bincount(data.community).tolist() == [101, 100, 101, 100]  # floor(4v / 402)
    assert torch.equal(data.community, data.community.sort().values)
    again = contextual_sbm(num_nodes=402, num_communities=4, num_classes=3, num_features=5,
                           seed=7)
    for key in data.keys():
        assert torch.equal(data[key], again[key]), key
    other = contextual_sbm(num_nodes=402, num_communities=4, num_classes=3, num_features=5,
                           seed=8)
    assert not torch.equal(data.x, other.x)
    assert not (data.edge_index[0] == data.edge_index[1]).any()
    assert (data.train_mask.long() + data.val_mask.long() + data.test_mask.long() == 1).all()


def test_edges_follow_the_blocks():
    data = contextual_sbm(num_nodes=1000, avg_degree=10, intra_community=0.9, homophily=0.8,
                          separation=0.0)
    row, col = data.edge_index
    intra = (data.community[row] == data.community[col]).float().mean()
    assert abs(float(intra) - 0.9) < 0.03
    same_label = ((data.y[row] == data.y[col]) & (data.community[row] == data.community[col]))
    # h of the community draws go to the same label, the rest to it by chance (1/C).
    expected = 0.9 * (0.8 + 0.2 / 4)
    assert abs(float(same_label.float().mean()) - expected) < 0.03
    assert 9.0 < data.num_edges / data.num_nodes <= 10.0  # duplicates removed


def test_labels_move_to_each_communitys_half_of_the_classes():
    mixed = contextual_sbm(num_nodes=800, num_classes=4, separation=0.0)
    apart = contextual_sbm(num_nodes=800, num_classes=4, separation=1.0)
    for k in range(4):
        favoured = {k % 4, (k + 1) % 4}
        labels = set(apart.y[apart.community == k].tolist())
        assert labels == favoured
        assert set(mixed.y[mixed.community == k].tolist()) == {0, 1, 2, 3}


def _accuracies(data):
    from sklearn.linear_model import LogisticRegression

    x, y = data.x.numpy(), data.y.numpy()
    train, test, community = data.train_mask.numpy(), data.test_mask.numpy(), \
        data.community.numpy()
    shared = LogisticRegression(max_iter=2000).fit(x[train], y[train])
    shared_acc = float((shared.predict(x[test]) == y[test]).mean())
    correct = 0
    for k in np.unique(community):
        here = community == k
        own = LogisticRegression(max_iter=2000).fit(x[train & here], y[train & here])
        correct += int((own.predict(x[test & here]) == y[test & here]).sum())
    return shared_acc, correct / int(test.sum())


def test_separation_makes_each_community_need_its_own_model():
    pytest.importorskip("sklearn")
    shared, own = _accuracies(contextual_sbm(num_nodes=800, separation=1.0))
    assert own > shared + 0.15  # one model per community clearly beats a shared one
    shared, own = _accuracies(contextual_sbm(num_nodes=800, separation=0.0))
    assert shared >= own - 0.02  # a shared model loses nothing (it sees 4x the data)


def test_planted_federation_puts_each_client_in_one_community():
    data, clients = planted_graph_federation(12, separation=0.5, seed=2, num_nodes=300,
                                             num_communities=3)
    assert len(clients) == 12
    assert [c.group for c in clients] == [k for k in range(3) for _ in range(4)]
    for client in clients:
        assert (data.community[client.node_id] == client.group).all()
    ids = torch.cat([c.node_id for c in clients]).sort().values
    assert torch.equal(ids, torch.arange(300))


def test_bad_parameters_are_one_line():
    with pytest.raises(ValueError, match="separation must be in \\[0, 1\\], got 1.5"):
        contextual_sbm(separation=1.5)
    with pytest.raises(ValueError, match="num_nodes \\(3\\) >= num_communities \\(4\\)"):
        contextual_sbm(num_nodes=3)
