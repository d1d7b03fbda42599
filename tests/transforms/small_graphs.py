r"""Small graphs for the partition tests, with features, labels and masks."""
import torch
from torch_geometric.data import Data


def with_node_data(edge_index, num_nodes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    masks = torch.randint(3, (num_nodes,), generator=gen)
    return Data(x=torch.randn(num_nodes, 3, generator=gen), edge_index=edge_index,
                y=torch.randint(4, (num_nodes,), generator=gen), train_mask=masks == 0,
                val_mask=masks == 1, test_mask=masks == 2, num_nodes=num_nodes)


def ring_of_cliques(num_cliques, size, seed=0):
    r"""``num_cliques`` cliques of ``size`` nodes (clique ``c`` holds nodes
    ``c * size ...``), clique ``c`` linked to clique ``c + 1`` (mod) by the
    single edge ``(c * size, (c + 1) * size + 1)``."""
    edges = []
    for c in range(num_cliques):
        base = c * size
        edges += [(base + i, base + j) for i in range(size) for j in range(i + 1, size)]
        if num_cliques > 1:
            edges.append((base, ((c + 1) % num_cliques) * size + 1))
    edge_index = torch.tensor(edges).t()
    return with_node_data(torch.cat([edge_index, edge_index.flip(0)], 1),
                          num_cliques * size, seed)


def random_graph(num_nodes, num_edges, seed=0):
    r"""Random edges listed in one direction only, with a self loop and a
    duplicate (which partitions must ignore)."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(num_nodes, (2, num_edges), generator=gen)
    edge_index = torch.cat([edge_index, torch.tensor([[0, 1], [0, 2]]),
                            edge_index[:, :1].flip(0)], 1)
    return with_node_data(edge_index, num_nodes, seed)
