"""Loss and metrics of a federated task, as per-sample functions."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch.nn.functional as F
from torch import Tensor

__all__ = ["Objective", "classification_objective", "regression_objective", "objective_for"]

PerSample = Callable[[Tensor, Tensor], Tensor]


@dataclass
class Objective:
    r"""What a client minimises and what is reported.

    All functions map a model output :math:`(B, *O)` and targets :math:`(B, *T)`
    to per-sample values :math:`(B,)`; the engine averages them over the
    valid samples of each client, which keeps them usable under
    :func:`torch.vmap` with padded batches.

    Args:
        loss (callable): per-sample training loss.
        metrics (dict): name -> per-sample metric.
        primary (str): the metric used to pick the best round.
        higher_is_better (bool): direction of ``primary``.
    """
    loss: PerSample
    metrics: dict[str, PerSample] = field(default_factory=dict)
    primary: str = "loss"
    higher_is_better: bool = False

    def __post_init__(self) -> None:
        if self.primary != "loss" and self.primary not in self.metrics:
            raise ValueError(f"primary metric {self.primary!r} is not among {list(self.metrics)}")

    def all_metrics(self) -> dict[str, PerSample]:
        return {"loss": self.loss, **self.metrics}


def _ce(out: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(out, y.long(), reduction="none")


def _acc(out: Tensor, y: Tensor) -> Tensor:
    return (out.argmax(-1) == y.long()).to(out.dtype)


def _sq(out: Tensor, y: Tensor) -> Tensor:
    d = (out - y.to(out.dtype)).pow(2)
    return d.reshape(d.size(0), -1).mean(-1)


def _abs(out: Tensor, y: Tensor) -> Tensor:
    d = (out - y.to(out.dtype)).abs()
    return d.reshape(d.size(0), -1).mean(-1)


def classification_objective() -> Objective:
    r"""Cross-entropy loss; accuracy (the papers' metric) picks the best round."""
    return Objective(loss=_ce, metrics={"accuracy": _acc}, primary="accuracy",
                     higher_is_better=True)


def regression_objective() -> Objective:
    r"""Mean squared error loss; MSE picks the best round, MAE is reported too."""
    return Objective(loss=_sq, metrics={"mse": _sq, "mae": _abs}, primary="mse",
                     higher_is_better=False)


def objective_for(task: Literal["classification", "regression"]) -> Objective:
    if task == "classification":
        return classification_objective()
    if task == "regression":
        return regression_objective()
    raise ValueError(f"unknown task {task!r}; expected 'classification' or 'regression'")
