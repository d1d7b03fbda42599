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


def aggregate(strategy, rnd, graph) -> None:
    r"""What the round engine does with a round's accepted uploads when a test
    drives a strategy by hand: the strategy aggregates them, then they are
    written to the client table (:class:`~pyg_fedgraph.engine.RoundEngine`)."""
    strategy.aggregate_train(rnd, graph)
    strategy.ctx.table.update(graph.client_id, graph.x)


def context_copy(ctx):
    r"""``ctx`` with a client table of its own (a copy), for a second strategy
    that must not share the first one's table."""
    import dataclasses

    from pyg_fedgraph.data.federation import ClientTable

    table = ClientTable(ctx.init_params, ctx.num_clients)
    table.load_state_dict(ctx.table.state_dict())
    return dataclasses.replace(ctx, clients=table)
