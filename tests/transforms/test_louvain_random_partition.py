"""Louvain communities packed into clients, random node sets, and clients
within planted communities."""
import pytest
import torch
from small_graphs import random_graph, ring_of_cliques

from pyg_fedgraph.datasets import contextual_sbm
from pyg_fedgraph.transforms import (
    CommunityPartition,
    LouvainPartition,
    RandomNodePartition,
    pack_communities,
)


def test_pack_communities_largest_first_to_the_lightest_client():
    sizes = [3, 5, 1, 4, 3]
    starts = [0, 3, 8, 9, 13]
    communities = [torch.arange(s, s + n) for s, n in zip(starts, sizes, strict=True)]
    clients = pack_communities(communities, 2)
    # By hand: 5 -> c0; 4 -> c1; 3 (nodes 0..2) -> c1 (4 < 5); 3 (13..15) -> c0 (5 < 7);
    # 1 -> c1 (7 < 8).
    assert sorted(clients[0].tolist()) == list(range(3, 8)) + [13, 14, 15]
    assert sorted(clients[1].tolist()) == [0, 1, 2, 8, 9, 10, 11, 12]
    with pytest.raises(ValueError, match="5 communities cannot fill 6 clients"):
        pack_communities(communities, 6)


def test_louvain_keeps_cliques_whole():
    data = ring_of_cliques(4, 6)
    clients = LouvainPartition(2)(data)
    assert sorted(c.num_nodes for c in clients) == [12, 12]
    for client in clients:  # whole cliques
        cliques = client.node_id // 6
        assert all(int((cliques == c).sum()) in (0, 6) for c in range(4))
    again = LouvainPartition(2)(data)
    assert all(torch.equal(a.node_id, b.node_id) for a, b in zip(clients, again, strict=True))
    assert str(LouvainPartition(2)) == "LouvainPartition(2, resolution=1.0, seed=0)"
    with pytest.raises(ValueError, match="Louvain found 4 communities in a graph of 24 nodes, "
                                         "fewer than the 5 clients"):
        LouvainPartition(5)(data)


def test_random_node_partition_sizes_and_seeds():
    data = random_graph(23, 40)
    clients = RandomNodePartition(5, seed=1)(data)
    assert sorted(c.num_nodes for c in clients) == [4, 4, 5, 5, 5]
    again = RandomNodePartition(5, seed=1)(data)
    assert all(torch.equal(a.node_id, b.node_id) for a, b in zip(clients, again, strict=True))
    other = RandomNodePartition(5, seed=2)(data)
    assert any(not torch.equal(a.node_id, b.node_id) for a, b in zip(clients, other,
                                                                      strict=True))
    assert str(RandomNodePartition(5)) == "RandomNodePartition(5, seed=0)"
    with pytest.raises(ValueError, match="seed must be an int in"):
        RandomNodePartition(5, seed=-1)


def test_community_partition_puts_each_client_within_one_community():
    data = contextual_sbm(num_nodes=203, num_communities=4, seed=0)
    clients = CommunityPartition(12)(data)
    assert [c.group for c in clients] == [k for k in range(4) for _ in range(3)]
    for client in clients:
        assert (client.community == client.group).all()
    sizes = torch.bincount(data.community)
    for k in range(4):
        held = sorted(c.num_nodes for c in clients if c.group == k)
        assert sum(held) == sizes[k] and held[-1] - held[0] <= 1
    with pytest.raises(ValueError, match=r"num_clients \(10\) must be a multiple of the 4 "
                                         r"communities"):
        CommunityPartition(10)(data)
    with pytest.raises(ValueError, match="no node attribute 'block'"):
        CommunityPartition(4, attr="block")(data)
