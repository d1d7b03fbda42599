r"""Small sets of graphs for the tests of clients that hold sets of graphs:
in memory, and written as tiny datasets in the TUDataset text format."""
from pathlib import Path

import torch
from torch_geometric.data import Data

from pyg_fedgraph.data.graph_set_dataset import GraphSetFederatedDataset


def random_graph(gen, num_nodes, num_edges, num_features, label):
    r"""A random undirected graph without self loops (both directions of
    every edge), features in [0.5, 1.5)."""
    ei = torch.randint(num_nodes, (2, num_edges), generator=gen)
    ei = ei[:, ei[0] != ei[1]]
    return Data(x=torch.rand(num_nodes, num_features, generator=gen) + 0.5,
                edge_index=torch.cat([ei, ei.flip(0)], 1), y=torch.tensor([label]),
                num_nodes=num_nodes)


def toy_clients(num_clients=4, num_features=4, num_classes=3, sizes=(6, 2, 3), seed=0):
    r"""``(train, val, test)`` graphs of every client: client ``i`` has
    ``sizes`` graphs plus ``i`` more training graphs of 3 to 8 nodes and the
    classes ``0 .. k_i - 1``, ``k_i = 2 + i % (num_classes - 1)``; returns
    the clients and the class mask."""
    gen = torch.Generator().manual_seed(seed)
    clients, counts = [], []
    for i in range(num_clients):
        k = 2 + i % (num_classes - 1)
        counts.append(k)
        parts = []
        for j, count in enumerate(sizes):
            parts.append([random_graph(gen, int(torch.randint(3, 9, (1,), generator=gen)),
                                       int(torch.randint(2, 12, (1,), generator=gen)),
                                       num_features, int(torch.randint(k, (1,), generator=gen)))
                          for _ in range(count + (i if j == 0 else 0))])
        clients.append(parts)
    mask = torch.arange(num_classes).unsqueeze(0) < torch.tensor(counts).unsqueeze(1)
    return clients, mask


def toy_graph_sets(num_clients=4, num_features=4, num_classes=3, seed=0, **kwargs):
    r"""A :class:`GraphSetFederatedDataset` of :func:`toy_clients` and the
    clients' graphs."""
    clients, mask = toy_clients(num_clients, num_features, num_classes, seed=seed, **kwargs)
    data = GraphSetFederatedDataset.from_clients("toy-graph-sets", clients, num_classes,
                                                 class_mask=mask, client_labels=mask.sum(1))
    return data, clients


def write_tu_dataset(folder, name, num_graphs=40, num_node_labels=3, num_classes=2, seed=0,
                     nodes=(4, 10)):
    r"""A random dataset of ``num_graphs`` graphs in the TUDataset text
    format under ``folder`` (labels balanced over the classes, node labels
    ``1..num_node_labels``, graph labels ``1..num_classes``); returns the
    folder."""
    gen = torch.Generator().manual_seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    edges, indicator, node_labels, first = [], [], [], 1
    for g in range(num_graphs):
        n = int(torch.randint(nodes[0], nodes[1], (1,), generator=gen))
        for v in range(n - 1):  # a path, plus a few random chords
            edges += [(first + v, first + v + 1), (first + v + 1, first + v)]
        for _ in range(n // 3):
            a, b = torch.randint(n, (2,), generator=gen).tolist()
            if a != b:
                edges += [(first + a, first + b), (first + b, first + a)]
        indicator += [g + 1] * n
        node_labels += torch.randint(1, num_node_labels + 1, (n,), generator=gen).tolist()
        first += n
    labels = [1 + g % num_classes for g in range(num_graphs)]
    files = {"A": [f"{a}, {b}" for a, b in edges], "graph_indicator": indicator,
             "graph_labels": labels, "node_labels": node_labels}
    for part, lines in files.items():
        (folder / f"{name}_{part}.txt").write_text("\n".join(map(str, lines)) + "\n")
    return folder


def write_tu_group(folder):
    r"""Three tiny datasets of different widths and classes (``TOYA``: 3
    node labels, 2 classes; ``TOYB``: 5 and 3; ``TOYC``: 2 and 2)."""
    write_tu_dataset(folder, "TOYA", 40, 3, 2, seed=1)
    write_tu_dataset(folder, "TOYB", 45, 5, 3, seed=2)
    write_tu_dataset(folder, "TOYC", 40, 2, 2, seed=3)
    return Path(folder)
