r"""Client-side local training, batched over clients.

Names are imported on first use (PEP 562), so that the declaration of local
training (:mod:`pyg_fedgraph.train.config`, which the command line's
``--help`` reads) loads without torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "ClientTrainer": "pyg_fedgraph.train.trainer",
    "TrainResult": "pyg_fedgraph.train.trainer",
    "batch_schedule": "pyg_fedgraph.train.trainer",
    "LocalConfig": "pyg_fedgraph.train.config",
    "Regularizer": "pyg_fedgraph.train.regularizers",
    "ProximalTerm": "pyg_fedgraph.train.regularizers",
    "register_regularizer": "pyg_fedgraph.train.regularizers",
    "SGD": "pyg_fedgraph.train.rules",
    "Adam": "pyg_fedgraph.train.rules",
    "KNNInterpolation": "pyg_fedgraph.train.knn",
    "AdaptiveLocalAggregation": "pyg_fedgraph.train.ala",
    "PrivateParameters": "pyg_fedgraph.train.private",
    "FunctionalEmbedding": "pyg_fedgraph.train.jobs",
    "functional_embeddings": "pyg_fedgraph.train.embedding",
    "proxy_graph": "pyg_fedgraph.train.embedding",
    "train_pooled": "pyg_fedgraph.train.pooled",
    # The objective lives with the data (pyg_fedgraph.data); kept here for imports
    # written against earlier versions.
    "Objective": "pyg_fedgraph.data.objective",
    "classification_objective": "pyg_fedgraph.data.objective",
    "regression_objective": "pyg_fedgraph.data.objective",
    "objective_for": "pyg_fedgraph.data.objective",
}

__all__ = ["ClientTrainer", "TrainResult", "batch_schedule", "LocalConfig", "Regularizer",
           "ProximalTerm", "register_regularizer", "SGD", "Adam", "KNNInterpolation",
           "AdaptiveLocalAggregation", "PrivateParameters", "FunctionalEmbedding",
           "functional_embeddings", "proxy_graph", "train_pooled", "Objective",
           "classification_objective", "regression_objective", "objective_for"]

if TYPE_CHECKING:
    from pyg_fedgraph.data.objective import (
        Objective,
        classification_objective,
        objective_for,
        regression_objective,
    )
    from pyg_fedgraph.train.ala import AdaptiveLocalAggregation
    from pyg_fedgraph.train.config import LocalConfig
    from pyg_fedgraph.train.embedding import functional_embeddings, proxy_graph
    from pyg_fedgraph.train.jobs import FunctionalEmbedding
    from pyg_fedgraph.train.knn import KNNInterpolation
    from pyg_fedgraph.train.pooled import train_pooled
    from pyg_fedgraph.train.private import PrivateParameters
    from pyg_fedgraph.train.regularizers import ProximalTerm, Regularizer, register_regularizer
    from pyg_fedgraph.train.rules import SGD, Adam
    from pyg_fedgraph.train.trainer import ClientTrainer, TrainResult, batch_schedule


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pyg_fedgraph.train' has no attribute {name!r}")
