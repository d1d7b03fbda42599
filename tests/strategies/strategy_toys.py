"""Tiny federations shared by the strategy tests."""
import torch

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset


def two_group_dataset(n_per_split=(24, 8, 8), seed=0) -> FederatedDataset:
    r"""4 clients on 2-d points: clients 0, 1 label a point by the sign of its
    first feature, clients 2, 3 with the opposite label map (groups 0 and 1 in
    ``client_labels``)."""
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for name, n in zip(("train", "val", "test"), n_per_split, strict=True):
        xs, ys = [], []
        for client in range(4):
            x = torch.randn(n, 2, generator=gen)
            y = (x[:, 0] > 0).long()
            xs.append(x)
            ys.append(y if client < 2 else 1 - y)
        splits[name] = ClientSplit.from_lists(xs, ys)
    return FederatedDataset("two-groups", "classification", splits, num_classes=2,
                            client_labels=torch.tensor([0, 0, 1, 1]))
