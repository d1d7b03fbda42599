r"""Subgraph federations: Cora / CiteSeer / PubMed split over clients, the
synthetic planted-community federation, and their errors."""
import sys
from pathlib import Path

import pytest
import torch

from pyg_fedgraph.datasets import citeseer, cora, federate_graph, planted_graphs, pubmed
from pyg_fedgraph.datasets.registry import load_dataset
from pyg_fedgraph.transforms import cut_edge_graph
from pyg_fedgraph.typing import WITH_PYMETIS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datasets"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transforms"))
from planetoid_files import PLANETOID, make_planetoid, write_planetoid  # noqa: E402
from small_graphs import ring_of_cliques  # noqa: E402

needs_pymetis = pytest.mark.skipif(not WITH_PYMETIS,
                                   reason="pymetis (extra 'metis') is not installed")
needs_shared = pytest.mark.skipif(
    not (PLANETOID / "ind.cora.x").is_file(),
    reason="../shared/data/planetoid (Cora and CiteSeer raw files) not present")


def test_planted_graphs_clients_lie_in_one_community_which_is_their_group():
    data = planted_graphs(num_clients=8, num_groups=4, num_nodes=240)
    assert data.num_clients == 8 and data.input_kind == "graph"
    assert data.client_labels.tolist() == sorted(data.client_labels.tolist())
    assert torch.bincount(data.client_labels).tolist() == [2, 2, 2, 2]
    # Every node of the graph lies in exactly one client.
    assert int(data.graphs.num_nodes.sum()) == 240
    assert data.edge_index is not None and data.defaults.model == "gcn"
    with pytest.raises(ValueError, match="num_clients=10 must be a multiple of num_groups=4"):
        planted_graphs(num_clients=10)


def test_planted_graphs_are_deterministic_for_a_seed():
    a, b = planted_graphs(num_clients=4, seed=3), planted_graphs(num_clients=4, seed=3)
    assert torch.equal(a.graphs.x, b.graphs.x)
    assert torch.equal(a.graphs.edge_index, b.graphs.edge_index)
    assert not torch.equal(a.graphs.x, planted_graphs(num_clients=4, seed=4).graphs.x)


@pytest.mark.parametrize("partition", ["louvain", "random-nodes"]
                         + (["metis", "overlapping"] if WITH_PYMETIS else []))
def test_federate_graph_offers_the_cut_edge_graph_as_prior(partition):
    data = ring_of_cliques(6, 8)
    fed = federate_graph(data, "ring", 6 if partition != "overlapping" else 4, partition,
                         clients_per_part=2)
    assert fed.info["partition"] == partition
    # The prior graph is the cut-edge graph of the same clients (recomputed
    # here from the node ids the clients keep).
    from pyg_fedgraph.transforms import (
        LouvainPartition,
        MetisPartition,
        OverlappingPartition,
        RandomNodePartition,
    )
    split = {"metis": MetisPartition(6), "louvain": LouvainPartition(6),
             "random-nodes": RandomNodePartition(6),
             "overlapping": OverlappingPartition(4, clients_per_part=2)}[partition]
    ei, w = cut_edge_graph(data, split(data))
    assert torch.equal(fed.edge_index, ei) and torch.equal(fed.edge_weight, w)
    assert (fed.client_labels is not None) == (partition == "overlapping")
    # Sample counts are the clients' training nodes.
    assert int(fed.splits["train"].counts.sum()) > 0


def test_federate_graph_errors_are_one_line():
    data = ring_of_cliques(3, 4)
    with pytest.raises(ValueError, match="partition metis, overlapping, louvain, "
                                         "random-nodes; got 'kmeans'"):
        federate_graph(data, "ring", 3, "kmeans")
    with pytest.raises(ValueError, match=r"^\d+ of the 12 clients of the random-nodes split "
                                         r"hold no training node \([\d, ]+(, \.\.\.)?\); use "
                                         r"fewer clients$"):
        federate_graph(data, "ring", 12, "random-nodes")


@pytest.mark.parametrize("loader", [cora, citeseer, pubmed])
def test_without_a_folder_one_message_says_how_to_get_the_files(loader):
    with pytest.raises(FileNotFoundError) as err:
        loader()
    text = str(err.value)
    assert "\n" not in text and "--set data.root=DIR" in text and "data.download=true" in text


@needs_pymetis
def test_pubmed_reads_files_in_the_published_format(tmp_path):
    write_planetoid(tmp_path, "pubmed", make_planetoid(num_classes=3, num_features=6))
    fed = pubmed(root=str(tmp_path), num_clients=2)
    assert fed.num_clients == 2 and fed.num_classes == 3 and fed.input_shape == (6,)
    assert load_dataset("pubmed", root=str(tmp_path), num_clients=2).num_clients == 2


@needs_shared
@needs_pymetis
@pytest.mark.real_data
def test_cora_over_ten_metis_clients_covers_its_largest_component_once():
    fed = cora(root=str(PLANETOID), num_clients=10)
    assert fed.num_clients == 10 and fed.num_classes == 7 and fed.input_shape == (1433,)
    # FED-PUB keeps Cora's largest connected component: 2,485 nodes.
    assert int(fed.graphs.num_nodes.sum()) == 2485
    counts = {s: int(sp.counts.sum()) for s, sp in fed.splits.items()}
    assert counts == {"train": 497, "val": 994, "test": 994}
    assert fed.edge_index is not None and fed.edge_weight.sum() > 0
