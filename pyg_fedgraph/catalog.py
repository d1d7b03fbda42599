r"""The names of everything the command line chooses by name, as an explicit
table: strategies, datasets and client models.

The registries (:data:`~pyg_fedgraph.strategies.STRATEGIES`,
:data:`~pyg_fedgraph.datasets.DATASETS`, :data:`~pyg_fedgraph.models.MODELS`)
are the source of truth; this table is what ``--help`` and the settings'
choices read without importing torch. A test checks that both agree, so a new
strategy, dataset or model is added to its registry (next to its definition)
and its name here.
"""
from __future__ import annotations

__all__ = ["STRATEGY_NAMES", "DATASET_NAMES", "MODEL_NAMES"]

#: Every registered strategy, sorted.
STRATEGY_NAMES: tuple[str, ...] = (
    "cfl", "ditto", "fedaghn", "fedala", "fedamp", "fedavg", "fedavg-ft", "fedcedar",
    "fedprox", "fedprox-ft", "fedpub", "fedrep", "fedrod", "gcfl", "gcfl-plus", "heurfedamp",
    "ifca", "knn-per", "local", "panacea", "per-fedavg", "pfedgat", "pfedgraph", "pfedhn",
    "pfedla", "pfedme", "sfl",
)
#: Every registered dataset (normalized names), sorted.
DATASET_NAMES: tuple[str, ...] = (
    "cifar10", "cifar100", "citeseer", "cora", "digits", "fashion-mnist", "fl60",
    "fl60-grda-file", "fl60-grda-file-graph", "fl60-grda-graph", "fl60-paper-inputs", "metr-la",
    "mnist", "pems-bay", "planted-graphs", "pubmed", "topology", "tu",
)
#: Every registered client model.
MODEL_NAMES: tuple[str, ...] = ("mlp", "cnn", "cnn-bn", "gru", "gru-seq2seq", "gcn", "sage",
                               "gat", "gin", "gcn-pool", "masked-gcn")
