r"""Small client graphs for the tests of clients that hold graphs."""
import torch
from torch_geometric.data import Data

from pyg_fedgraph.data.graph_dataset import GraphFederatedDataset


def client_graph(num_nodes, num_edges, num_features=5, num_classes=3, seed=0):
    r"""A random graph (edges in both directions, one self loop and one
    duplicate edge) with node masks: about 40 / 30 / 30 percent."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(num_nodes, (2, num_edges), generator=gen)
    ei = torch.cat([ei, ei.flip(0), torch.tensor([[0], [0]]), ei[:, :1]], 1)
    r = torch.rand(num_nodes, generator=gen)
    return Data(x=torch.randn(num_nodes, num_features, generator=gen), edge_index=ei,
                y=torch.randint(num_classes, (num_nodes,), generator=gen),
                train_mask=r < 0.4, val_mask=(r >= 0.4) & (r < 0.7), test_mask=r >= 0.7,
                num_nodes=num_nodes)


def toy_graph_federation(sizes=((12, 20), (7, 9), (15, 30), (9, 14)), num_features=5,
                         num_classes=3, seed=0):
    graphs = [client_graph(v, e, num_features, num_classes, seed + i)
              for i, (v, e) in enumerate(sizes)]
    return GraphFederatedDataset.from_clients("toy-graphs", graphs, num_classes), graphs
