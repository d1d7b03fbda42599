r"""Masked traffic-forecasting loss and metrics (MAE / RMSE / MAPE in mph per
horizon, normalized MSE), written as per-sample functions for
:class:`~pyg_fedgraph.data.objective.Objective`.

**Packed targets.** A per-sample function sees only the model output and the
targets of one client, never the client id, yet masked metrics in mph need
the missing-reading mask and the client's normalization constants. Traffic
datasets (:class:`~pyg_fedgraph.datasets.traffic.TrafficDataset`) therefore
hand out targets packed as :math:`(B, 4, H)` rows

=========== ==========================================================
row         content
=========== ==========================================================
``TARGET``  the future speeds in mph, :math:`0` where the reading is missing
``WEIGHT``  :math:`m_{bh} / p_h`: the mask :math:`m_{bh} \in \{0, 1\}`
            divided by the client's share :math:`p_h` of valid targets at
            horizon :math:`h` in this split (NaN where :math:`p_h = 0`)
``MEAN``    the z-score mean :math:`\mu` of the client's speeds
``STD``     the z-score standard deviation :math:`\sigma`
=========== ==========================================================

while the model predicts normalized speeds :math:`\hat{z}_{bh}`, so that
:math:`\hat{v}_{bh} = \sigma \hat{z}_{bh} + \mu` in mph. Averaging the
per-sample value :math:`w_{bh} |\hat{v}_{bh} - v_{bh}|` over the client's
:math:`n` samples (what the engine does) gives exactly the masked mean over
the valid targets,

.. math::
    \frac{1}{n} \sum_b \frac{m_{bh}}{p_h} |\hat{v}_{bh} - v_{bh}|
    = \frac{\sum_b m_{bh} |\hat{v}_{bh} - v_{bh}|}{\sum_b m_{bh}},
    \quad p_h = \frac{1}{n} \sum_b m_{bh},

the rescaled-mask trick of DCRNN's ``masked_mae`` (Li et al., ICLR 2018),
with the mask mean taken over the client's whole split instead of a batch.

**RMSE.** A root of a mean is not a mean of per-sample values, so the
objective reports ``mse@h`` in mph² and :func:`add_rmse` derives
``rmse@h`` :math:`= \sqrt{\texttt{mse@h}}` per client from evaluated
metrics.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Literal

import torch
from torch import Tensor

from pyg_fedgraph.data.objective import Objective, PerSample

__all__ = ["TARGET", "WEIGHT", "MEAN", "STD", "NUM_TARGET_ROWS", "pack_targets",
           "traffic_objective", "add_rmse", "masked_normalized_error"]

#: Row indices of packed traffic targets :math:`(B, 4, H)`.
TARGET, WEIGHT, MEAN, STD = 0, 1, 2, 3
NUM_TARGET_ROWS = 4


def pack_targets(target: Tensor, weight: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    r"""Stacks the four target rows (each broadcastable to ``target``'s
    shape :math:`(\ldots, H)`) into :math:`(\ldots, 4, H)`."""
    rows = torch.broadcast_tensors(target, weight, mean, std)
    return torch.stack(rows, dim=-2)


def _rows(out: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    if y.dim() < 2 or y.size(-2) != NUM_TARGET_ROWS or y.size(-1) != out.size(-1):
        raise ValueError(f"traffic targets must be packed as (B, {NUM_TARGET_ROWS}, H) with "
                         f"H = {out.size(-1)} forecast steps, got {tuple(y.shape)}; build "
                         f"them with pack_targets or TrafficDataset.batch")
    y = y.to(out.dtype)
    return y[..., TARGET, :], y[..., WEIGHT, :], y[..., MEAN, :], y[..., STD, :]


def masked_normalized_error(out: Tensor, y: Tensor, power: int = 2) -> Tensor:
    r"""Training loss: masked mean over horizons of :math:`|\hat{z} - z|^p`
    in normalized units, :math:`z = (v - \mu) / \sigma`. Missing targets and
    horizons without any valid target in the split contribute zero (their
    weight is replaced by 0 before multiplying, so no NaN reaches a
    gradient). Returns :math:`(B,)`."""
    target, weight, mean, std = _rows(out, y)
    err = (out - (target - mean) / std).abs().pow(power)
    return (torch.nan_to_num(weight, nan=0.0) * err).mean(-1)


def _mse_norm(out: Tensor, y: Tensor) -> Tensor:
    # Reported metric: mean over the horizons that have valid targets in the split.
    target, weight, mean, std = _rows(out, y)
    return torch.nanmean(weight * (out - (target - mean) / std).pow(2), dim=-1)


def _mph_error(out: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    target, weight, mean, std = _rows(out, y)
    return out * std + mean - target, weight, target


def _mae(out: Tensor, y: Tensor) -> Tensor:
    err, weight, _ = _mph_error(out, y)
    return torch.nanmean(weight * err.abs(), dim=-1)


def _horizon(out: Tensor, y: Tensor, step: int, kind: str) -> Tensor:
    err, weight, target = _mph_error(out, y)
    e, w, v = err[..., step - 1], weight[..., step - 1], target[..., step - 1]
    if kind == "mae":
        return w * e.abs()
    if kind == "mse":
        return w * e.pow(2)
    # MAPE in percent; a missing target (v = 0) has weight 0.
    return 100.0 * w * e.abs() / torch.where(v > 0, v, torch.ones_like(v))


def traffic_objective(horizons: Sequence[int] = (3, 6, 12),
                      loss: Literal["mse", "mae"] = "mse") -> Objective:
    r"""Masked traffic-forecasting objective on packed targets (see the
    module docstring), as used on METR-LA and PEMS-BAY by DCRNN (Li et al.,
    ICLR 2018) and by Panacea (Lin et al., Sec. IV-A, which reports the MSE on
    normalized targets, :math:`\times 10^{-3}`).

    .. math::
        \texttt{mse\_norm} = \frac{1}{|\mathcal{H}|} \sum_{h \in \mathcal{H}}
        \frac{\sum_b m_{bh} (\hat{z}_{bh} - z_{bh})^2}{\sum_b m_{bh}},
        \qquad
        \texttt{mae@h} = \frac{\sum_b m_{bh} |\hat{v}_{bh} - v_{bh}|}
        {\sum_b m_{bh}}

    with :math:`\mathcal{H}` the horizons that have valid targets (all of
    them but for dead sensors); it equals the masked MSE over all valid
    targets whenever every horizon has the same number of them.

    Metrics: ``mse_norm`` (primary, lower is better), ``mae`` (all
    horizons, mph) and, for every :math:`h` in ``horizons``, ``mae@h``
    (mph), ``mse@h`` (mph², see :func:`add_rmse`) and ``mape@h`` (percent).
    Horizon :math:`h` is the :math:`h`-th predicted step, i.e. :math:`5h`
    minutes ahead (3, 6, 12 = 15, 30, 60 minutes). A client whose split has
    no valid target at a horizon reports NaN there (left out of the means
    over clients).

    Args:
        horizons (sequence of int, optional): 1-based forecast steps to report
            (default: :obj:`(3, 6, 12)`)
        loss (str, optional): ``"mse"`` (masked MSE on normalized speeds,
            Panacea's measure) or ``"mae"`` (masked MAE on normalized speeds,
            DCRNN's training loss up to the factor :math:`\sigma`)
            (default: :obj:`"mse"`)
    """
    if loss not in ("mse", "mae"):
        raise ValueError(f"loss must be 'mse' or 'mae', got {loss!r}")
    steps = [int(h) for h in horizons]
    if any(h < 1 for h in steps) or len(set(steps)) != len(steps):
        raise ValueError(f"horizons must be distinct 1-based steps, got {list(horizons)}")
    metrics: dict[str, PerSample] = {"mse_norm": _mse_norm, "mae": _mae}
    for h in steps:
        for kind in ("mae", "mse", "mape"):
            metrics[f"{kind}@{h}"] = partial(_horizon, step=h, kind=kind)
    return Objective(loss=partial(masked_normalized_error, power=2 if loss == "mse" else 1),
                     metrics=metrics, primary="mse_norm", higher_is_better=False)


def add_rmse(metrics: Mapping[str, Tensor]) -> dict[str, Tensor]:
    r"""Returns ``metrics`` with ``rmse@h`` :math:`= \sqrt{\texttt{mse@h}}`
    added for every ``mse@h`` (per client: apply it to per-client values,
    then average over clients, as for the other metrics)."""
    out = dict(metrics)
    for name, value in metrics.items():
        if name.startswith("mse@"):
            out["rmse@" + name[4:]] = torch.as_tensor(value).sqrt()
    return out
