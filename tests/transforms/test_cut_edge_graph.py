"""The prior client graph of cut edges and the partition report, against direct
counts."""
import itertools

import pytest
import torch
from small_graphs import random_graph, ring_of_cliques

from pyg_fedgraph.transforms import (
    OverlappingPartition,
    RandomNodePartition,
    client_subgraphs,
    cut_edge_graph,
    partition_report,
)
from pyg_fedgraph.typing import WITH_PYMETIS


def _undirected(data):
    return {(min(u, v), max(u, v)) for u, v in data.edge_index.t().tolist() if u != v}


def _brute_force_weights(data, clients):
    sets = [set(c.node_id.tolist()) for c in clients]
    weights = {}
    for i, j in itertools.permutations(range(len(clients)), 2):
        count = sum(1 for u, v in _undirected(data)
                    if (u in sets[i] and v in sets[j]) or (v in sets[i] and u in sets[j]))
        if count:
            weights[(i, j)] = count
    return weights


def _as_dict(edge_index, edge_weight):
    return {tuple(e): w for e, w in zip(edge_index.t().tolist(), edge_weight.tolist(),
                                        strict=True)}


def test_cut_edge_graph_equals_a_direct_count_for_disjoint_clients():
    data = random_graph(30, 70, seed=1)
    clients = RandomNodePartition(5, seed=2)(data)
    edge_index, edge_weight = cut_edge_graph(data, clients)
    assert edge_weight.dtype == torch.float32
    assert _as_dict(edge_index, edge_weight) == _brute_force_weights(data, clients)
    # Disjoint: the weights are the cut edges, each counted at both of its clients.
    owner = torch.empty(30, dtype=torch.long)
    for i, client in enumerate(clients):
        owner[client.node_id] = i
    cut = sum(1 for u, v in _undirected(data) if owner[u] != owner[v])
    assert edge_weight.sum() == 2 * cut


def test_cut_edge_graph_equals_a_direct_count_for_overlapping_clients():
    data = random_graph(25, 60, seed=3)
    gen = torch.Generator().manual_seed(0)
    node_sets = [torch.randperm(25, generator=gen)[:12] for _ in range(4)]
    clients = client_subgraphs(data, node_sets)
    edge_index, edge_weight = cut_edge_graph(data, clients)
    assert _as_dict(edge_index, edge_weight) == _brute_force_weights(data, clients)


@pytest.mark.skipif(not WITH_PYMETIS, reason="pymetis (extra 'metis') is not installed")
def test_cut_edge_graph_of_a_ring_of_cliques():
    data = ring_of_cliques(4, 6)
    from pyg_fedgraph.transforms import MetisPartition

    clients = MetisPartition(4)(data)
    edge_index, edge_weight = cut_edge_graph(data, clients)
    clique = [int(c.node_id[0]) // 6 for c in clients]
    linked = {(clique[i], clique[j]) for i, j in edge_index.t().tolist()}
    assert linked == {(c, (c + d) % 4) for c in range(4) for d in (1, 3)}
    assert (edge_weight == 1).all()
    # Overlapping halves of one clique: linked by the edges among their nodes.
    clients = OverlappingPartition(4, clients_per_part=2)(ring_of_cliques(2, 6))
    edge_index, edge_weight = cut_edge_graph(data, clients)
    assert _as_dict(edge_index, edge_weight) == _brute_force_weights(data, clients)


def test_partition_report_equals_direct_counts():
    data = random_graph(30, 70, seed=4)
    gen = torch.Generator().manual_seed(1)
    clients = client_subgraphs(data, [torch.randperm(30, generator=gen)[:n]
                                      for n in (10, 14, 3)], groups=[0, 0, 1])
    rows = partition_report(data, clients)
    edges = _undirected(data)
    for i, (row, client) in enumerate(zip(rows, clients, strict=True)):
        ids = set(client.node_id.tolist())
        assert row["client"] == i and row["group"] == [0, 0, 1][i]
        assert row["nodes"] == len(ids)
        assert row["edges"] == sum(1 for u, v in edges if u in ids and v in ids)
        assert row["edges_cut"] == sum(1 for u, v in edges if (u in ids) != (v in ids))
        assert row["labels"] == [sum(1 for v in ids if data.y[v] == c) for c in range(4)]
        for split in ("train", "val", "test"):
            assert row[split] == int(data[f"{split}_mask"][client.node_id].sum())


def test_clients_without_node_ids_are_refused():
    data = random_graph(10, 20)
    with pytest.raises(ValueError, match="client 0 has no node_id"):
        cut_edge_graph(data, [data])
