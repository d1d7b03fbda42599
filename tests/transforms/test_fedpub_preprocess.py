"""FED-PUB's preparation: largest component, row-normalized features, a random
20 / 40 / 40 node split."""
from pathlib import Path

import networkx as nx
import pytest
import torch
from torch_geometric.data import Data

from pyg_fedgraph.transforms import FedPubPreprocess, random_node_split, undirected_edges

# ../shared/data next to the project root (one level further up from a git worktree).
PLANETOID = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[2].parents
                  if (p / "shared" / "data").is_dir()), Path("../shared/data")) / "planetoid"


def test_random_node_split_sizes_by_hand():
    for n, sizes in [(10, (2, 4, 4)), (7, (1, 3, 3)), (5, (1, 2, 2))]:
        # round(1.4) = 1, round(2.8) = 3 and validation the rest; round(2.0) = 2 ...
        train, val, test = random_node_split(n, 0.2, 0.4, seed=3)
        assert (int(train.sum()), int(val.sum()), int(test.sum())) == sizes
        assert torch.equal(train.long() + val.long() + test.long(), torch.ones(n, dtype=torch.long))
    first = random_node_split(50, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(first, random_node_split(50, seed=1),
                                                  strict=True))
    assert not torch.equal(first[0], random_node_split(50, seed=2)[0])
    with pytest.raises(ValueError, match="summing to at most 1"):
        random_node_split(10, 0.7, 0.4)


def test_keeps_the_largest_component_normalizes_rows_and_splits():
    # Components {0..4} (a path) and {5, 6, 7} (a triangle).
    edge_index = torch.tensor([[0, 1, 2, 3, 5, 6, 7], [1, 2, 3, 4, 6, 7, 5]])
    edge_index = torch.cat([edge_index, edge_index.flip(0)], 1)
    x = torch.arange(24, dtype=torch.float).view(8, 3)
    data = Data(x=x, edge_index=edge_index, y=torch.arange(8),
                train_mask=torch.ones(8, dtype=torch.bool))
    out = FedPubPreprocess(seed=0)(data)
    assert out.num_nodes == 5 and torch.equal(out.y, torch.arange(5))
    assert torch.allclose(out.x.sum(dim=1), torch.ones(5))
    assert torch.allclose(out.x[1], torch.tensor([3.0, 4.0, 5.0]) / 12)  # min(x) = 0
    assert (int(out.train_mask.sum()), int(out.val_mask.sum()), int(out.test_mask.sum())) == (
        1, 2, 2)
    assert torch.equal(data.x, x)  # the input is not changed
    assert str(FedPubPreprocess()) == "FedPubPreprocess(train=0.2, test=0.4, seed=0)"


@pytest.mark.real_data
@pytest.mark.skipif(not (PLANETOID / "ind.cora.x").is_file(),
                    reason="../shared/data/planetoid not present")
def test_cora_keeps_its_largest_component_of_2485_nodes():
    from pyg_fedgraph.datasets import read_planetoid

    data = read_planetoid("cora", PLANETOID)
    graph = nx.Graph(undirected_edges(data.edge_index, data.num_nodes).t().tolist())
    graph.add_nodes_from(range(data.num_nodes))
    largest = max(nx.connected_components(graph), key=len)
    out = FedPubPreprocess()(data)
    assert out.num_nodes == len(largest) == 2485
    assert (int(out.train_mask.sum()), int(out.test_mask.sum())) == (round(2485 * 0.2),
                                                                   round(2485 * 0.4))
