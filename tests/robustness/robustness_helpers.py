r"""Shared builders of the robustness tests (tiny federations)."""
import torch

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.experiment import ExperimentConfig, build_dataset, build_simulator
from pyg_fedgraph.strategies import STRATEGIES, strategy_kwargs

#: Small server modules, so that a 10-round run takes a second or two.
TINY_OPTIONS = {
    "panacea": {"embedding_dim": 8, "hidden_channels": 8, "server_steps": 2},
    "pfedhn": {"embedding_dim": 8, "hidden_channels": 8},
    "pfedgat": {"hidden_channels": 4, "heads": 2},
    "cfl": {"warmup_rounds": 3, "min_cluster_size": 2},
    "gcfl": {"warmup_rounds": 3, "min_cluster_size": 2},
    "gcfl-plus": {"warmup_rounds": 3, "min_cluster_size": 2, "seq_length": 2},
    "fedcedar": {"num_clusters": 2, "num_init": 2},
    "pfedla": {"embedding_dim": 8, "hidden_channels": 8},
}


def tiny_config(strategy: str, rounds: int = 10, clients: int = 6, **fields) -> ExperimentConfig:
    r"""fl60 with a few clients of 20 samples, 2 local steps per round."""
    known = strategy_kwargs(strategy) if strategy in STRATEGIES else set()
    options = {k: v for k, v in TINY_OPTIONS.get(strategy, {}).items() if k in known}
    return ExperimentConfig(dataset="fl60", strategy=strategy, rounds=rounds, clients=clients,
                            seed=0, overrides={"steps": 2, "data.samples_per_client": 20,
                                               **options}, **fields)


def tiny_simulator(strategy: str, **kwargs):
    cfg = tiny_config(strategy, **kwargs)
    data = build_dataset(cfg, {"samples_per_client": 20})
    return build_simulator(cfg, dataset=data)


def two_group_dataset(train_counts=(8, 8, 8, 8, 8, 8), num_classes: int = 2, seed: int = 0,
                      test_count: int = 6) -> FederatedDataset:
    r"""Clients label ``x_0 > 0`` as class 1, 2-D inputs."""
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for name, counts in (("train", train_counts), ("val", [test_count] * len(train_counts)),
                         ("test", [test_count] * len(train_counts))):
        xs, ys = [], []
        for k in counts:
            x = torch.randn(k, 2, generator=gen)
            x[:, 0] += x[:, 0].sign()
            xs.append(x)
            ys.append((x[:, 0] > 0).long())
        splits[name] = ClientSplit.from_lists(xs, ys)
    return FederatedDataset("two-groups", "classification", splits, num_classes=num_classes)
