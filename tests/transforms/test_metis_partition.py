"""METIS partitions (FED-PUB's disjoint setting) and what every partitioner's
clients carry."""
import pytest
import torch
from small_graphs import random_graph, ring_of_cliques

import pyg_fedgraph.transforms.metis_partition as metis_module
from pyg_fedgraph.datasets import contextual_sbm
from pyg_fedgraph.transforms import (
    CommunityPartition,
    LouvainPartition,
    MetisPartition,
    OverlappingPartition,
    RandomNodePartition,
    client_subgraphs,
    metis_parts,
    undirected_edges,
)
from pyg_fedgraph.typing import WITH_PYMETIS

needs_pymetis = pytest.mark.skipif(not WITH_PYMETIS,
                                   reason="pymetis (extra 'metis') is not installed")


def _edge_set(edge_index, num_nodes):
    return {tuple(e) for e in undirected_edges(edge_index, num_nodes).t().tolist()}


@needs_pymetis
def test_metis_finds_the_cliques_of_a_ring_of_cliques():
    data = ring_of_cliques(4, 6)
    clients = MetisPartition(4)(data)
    cliques = sorted(sorted(range(c * 6, c * 6 + 6)) for c in range(4))
    assert sorted(c.node_id.tolist() for c in clients) == cliques
    assert [c.group for c in clients] == [0, 1, 2, 3]
    assert all(c.edge_index.size(1) == 2 * 15 for c in clients)  # a whole clique each
    assert str(MetisPartition(4)) == "MetisPartition(4, seed=0)"
    assert str(MetisPartition(4, seed=3, recursive=True)) == (
        "MetisPartition(4, seed=3, recursive=True)")


@needs_pymetis
def test_a_metis_split_is_deterministic_for_a_seed():
    data = contextual_sbm(num_nodes=500, seed=1)
    first = metis_parts(data.edge_index, data.num_nodes, 7, seed=5)
    assert torch.equal(first, metis_parts(data.edge_index, data.num_nodes, 7, seed=5))
    clients = MetisPartition(7, seed=5)(data)
    again = MetisPartition(7, seed=5)(data)
    assert all(torch.equal(a.node_id, b.node_id) for a, b in zip(clients, again, strict=True))
    for client in clients:  # the clients are METIS's parts
        assert (first[client.node_id] == first[client.node_id[0]]).all()
    # Seeds reach METIS: some other seed gives other parts on this graph.
    assert any(not torch.equal(first, metis_parts(data.edge_index, data.num_nodes, 7, seed=s))
               for s in range(6, 12))
    # The CSR adjacency does not depend on how edges are listed.
    shuffled = data.edge_index[:, torch.randperm(data.num_edges,
                                                 generator=torch.Generator().manual_seed(0))]
    assert torch.equal(first, metis_parts(shuffled, data.num_nodes, 7, seed=5))


PARTITIONS = [pytest.param(lambda: MetisPartition(6), marks=needs_pymetis, id="metis"),
              pytest.param(lambda: LouvainPartition(3), id="louvain"),
              pytest.param(lambda: RandomNodePartition(6), id="random"),
              pytest.param(lambda: CommunityPartition(8), id="community")]


@pytest.mark.parametrize("make", PARTITIONS)
def test_disjoint_partitions_cover_every_node_exactly_once(make):
    data = contextual_sbm(num_nodes=240, seed=2)
    clients = make()(data)
    node_ids = torch.cat([c.node_id for c in clients])
    assert torch.equal(node_ids.sort().values, torch.arange(data.num_nodes))


@pytest.mark.parametrize("make", PARTITIONS + [pytest.param(
    lambda: OverlappingPartition(6, 3), marks=needs_pymetis, id="overlapping")])
def test_clients_carry_their_nodes_attributes_and_induced_edges(make):
    data = contextual_sbm(num_nodes=240, seed=3)
    edges = _edge_set(data.edge_index, data.num_nodes)
    for client in make()(data):
        ids = client.node_id
        assert torch.equal(ids, ids.unique())
        for key in ("x", "y", "community", "train_mask", "val_mask", "test_mask"):
            assert torch.equal(client[key], data[key][ids]), key
        assert client.num_nodes == len(ids)
        mapped = {tuple(sorted(e)) for e in ids[client.edge_index].t().tolist()}
        inside = {(u, v) for u, v in edges if u in set(ids.tolist()) and v in set(ids.tolist())}
        assert mapped == inside
        assert client.edge_index.size(1) == 2 * len(inside)


def test_client_subgraphs_of_given_node_sets():
    data = random_graph(10, 30)
    clients = client_subgraphs(data, [torch.tensor([3, 1, 1]), torch.tensor([9])], [7, 7])
    assert clients[0].node_id.tolist() == [1, 3] and clients[1].node_id.tolist() == [9]
    assert [c.group for c in clients] == [7, 7]
    with pytest.raises(ValueError, match="1 groups given for 2 clients"):
        client_subgraphs(data, [torch.tensor([1]), torch.tensor([2])], [0])


@needs_pymetis
def test_metis_errors_are_one_line():
    with pytest.raises(ValueError, match="num_clients must be an int of at least 1, got 0"):
        MetisPartition(0)
    with pytest.raises(ValueError, match="cannot split a graph of 24 nodes into 30 non-empty"):
        MetisPartition(30)(ring_of_cliques(4, 6))
    # METIS gives a ring of four 6-cliques four non-empty parts of the 16 asked for.
    with pytest.raises(ValueError) as err:
        MetisPartition(16)(ring_of_cliques(4, 6))
    assert str(err.value) == ("METIS left 12 of the 16 parts asked for empty on a graph of 24 "
                              "nodes and 64 edges: ask for fewer parts (clients)")


def test_without_pymetis_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(metis_module, "WITH_PYMETIS", False)
    with pytest.raises(ImportError, match=r"pip install 'pyg-fedgraph\[metis\]'"):
        MetisPartition(2)(ring_of_cliques(2, 4))
