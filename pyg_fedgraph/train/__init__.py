r"""Client-side local training, batched over clients."""
from pyg_fedgraph.train.ala import AdaptiveLocalAggregation
from pyg_fedgraph.train.engine import (
    ClientTrainer,
    LocalConfig,
    Regularizer,
    TrainResult,
    batch_schedule,
)
from pyg_fedgraph.train.knn import KNNInterpolation
from pyg_fedgraph.train.objective import (
    Objective,
    classification_objective,
    objective_for,
    regression_objective,
)

__all__ = [
    "Objective",
    "classification_objective",
    "regression_objective",
    "objective_for",
    "ClientTrainer",
    "LocalConfig",
    "Regularizer",
    "TrainResult",
    "batch_schedule",
    "KNNInterpolation",
    "AdaptiveLocalAggregation",
]
