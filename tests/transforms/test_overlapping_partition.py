"""FED-PUB's overlapping setting: clients sample half of a shared METIS part."""
import pytest
import torch
from small_graphs import ring_of_cliques

from pyg_fedgraph.datasets import contextual_sbm
from pyg_fedgraph.transforms import OverlappingPartition, metis_parts
from pyg_fedgraph.typing import WITH_PYMETIS

pytestmark = pytest.mark.skipif(not WITH_PYMETIS,
                                reason="pymetis (extra 'metis') is not installed")


def test_clients_of_one_part_share_its_group_and_sample_half_of_it():
    data = ring_of_cliques(2, 10)
    clients = OverlappingPartition(6, clients_per_part=3)(data)
    assert [c.group for c in clients] == [0, 0, 0, 1, 1, 1]
    parts = metis_parts(data.edge_index, data.num_nodes, 2)
    for client in clients:
        assert client.num_nodes == 5  # floor(10 / 2)
        # every node from the client's own METIS part (here: its clique)
        assert (parts[client.node_id] == client.group).all()
        assert (client.node_id // 10 == client.node_id[0] // 10).all()
    # Clients of different groups share no node; those of one group sample independently.
    ids = [set(c.node_id.tolist()) for c in clients]
    assert all(not (ids[i] & ids[j]) for i in range(3) for j in range(3, 6))
    assert len({frozenset(s) for s in ids}) > 2
    assert str(OverlappingPartition(6, clients_per_part=3)) == (
        "OverlappingPartition(6, clients_per_part=3, sample_ratio=0.5, seed=0)")


def test_fedpub_sizes_and_determinism():
    data = contextual_sbm(num_nodes=400, seed=4)
    transform = OverlappingPartition(10, sample_ratio=0.5, seed=3)  # 2 parts, 5 clients each
    clients = transform(data)
    assert transform.num_parts == 2 and len(clients) == 10
    parts = metis_parts(data.edge_index, data.num_nodes, 2, seed=3)
    for client in clients:
        assert client.num_nodes == int((parts == client.group).sum()) // 2
    again = OverlappingPartition(10, sample_ratio=0.5, seed=3)(data)
    assert all(torch.equal(a.node_id, b.node_id) for a, b in zip(clients, again, strict=True))
    other = OverlappingPartition(10, sample_ratio=0.5, seed=4)(data)
    assert any(not torch.equal(a.node_id, b.node_id) for a, b in zip(clients, other,
                                                                      strict=True))


def test_errors_are_one_line():
    with pytest.raises(ValueError, match=r"num_clients \(12\) must be a multiple of "
                                         r"clients_per_part \(5\)"):
        OverlappingPartition(12)
    with pytest.raises(ValueError, match=r"sample_ratio must be in \(0, 1\], got 0.0"):
        OverlappingPartition(10, sample_ratio=0.0)
    with pytest.raises(ValueError, match="num_clients must be an int of at least 1"):
        OverlappingPartition(-5)
    # Parts of 3 nodes: 4 clients each is more than the part's nodes allow.
    with pytest.raises(ValueError, match=r"METIS part 0 has 3 nodes: too few for 4 "
                                         r"overlapping clients holding 50% of them each"):
        OverlappingPartition(8, clients_per_part=4)(ring_of_cliques(2, 3))
    # A sample of floor(0.2 * 3) = 0 nodes.
    with pytest.raises(ValueError, match="METIS part 0 has 3 nodes: too few for 2"):
        OverlappingPartition(4, clients_per_part=2, sample_ratio=0.2)(ring_of_cliques(2, 3))
