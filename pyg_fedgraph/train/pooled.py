r"""One model trained on every client's training data pooled: the centralized
baseline of a federation."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.train.config import LocalConfig

__all__ = ["train_pooled"]

#: Rows evaluated per forward pass.
_EVAL_ROWS = 65536


def train_pooled(model: torch.nn.Module, dataset: FederatedDataset, local: LocalConfig, *,
                 split: str = "test", generator: torch.Generator | None = None) -> Tensor:
    r"""Trains ``model`` in place on the training samples of all clients
    pooled into one data set, as a central learner holding everyone's data
    would, and returns each client's primary metric on ``split`` (accuracy
    for classification, MSE for regression): what one global model can
    reach on the federation, the ceiling of FedAvg.

    With the :math:`M = \sum_i n_i` pooled training samples
    :math:`(\mathbf{x}_s, y_s)`, step :math:`t` of the optimizer minimises

    .. math::
        L_t(\theta) = \frac{1}{|B_t|} \sum_{s \in B_t}
        \ell\big(f_\theta(\mathbf{x}_s), y_s\big),

    with :math:`\ell` the dataset's per-sample loss and :math:`B_t` all
    :math:`M` samples (``local.full_batch``) or the next ``batch_size`` of a
    random order of them, drawn again at every pass. Client :math:`i` then
    reports

    .. math::
        m_i = \frac{\sum_{s} w_{is}\, \mu\big(f_\theta(\mathbf{x}_{is}),
        y_{is}\big)}{\sum_s w_{is}}

    over its samples of ``split``, :math:`\mu` the primary metric and
    :math:`w_{is}` the split's evaluation weights
    (:class:`~pyg_fedgraph.data.ClientSplit`'s ``weight``; 1 without them),
    as the simulator evaluates a client.

    Args:
        model (torch.nn.Module): the model, trained in place on the device of
            its parameters.
        dataset (FederatedDataset): a federation of tensor inputs.
        local (LocalConfig): the optimizer: ``optimizer`` (``"sgd"`` with
            ``lr``, ``momentum``, ``nesterov``, ``weight_decay``; ``"adam"``
            with ``lr``, ``beta1``, ``beta2``, ``eps``, ``weight_decay``),
            ``full_batch`` or ``batch_size``, the number of steps (``steps``;
            else ``epochs`` passes over the pooled samples, which with
            ``full_batch`` are steps) and the learning-rate schedule
            (``warmup``, ``lr_decay_to``) over the whole training. One
            optimizer runs throughout (``keep_optimizer_state`` has no
            effect).
        split (str, optional): the split to evaluate. (default: :obj:`"test"`)
        generator (torch.Generator, optional): draws the order of the
            samples (not used with ``full_batch``). (default: :obj:`None`,
            torch's global generator)

    Returns:
        Each client's primary metric on ``split``, float64, NaN for a client
        without samples there.

    Shapes:
        - **input:** the splits' ``x`` :math:`(N, n_{max}, *F)`, ``y``
          :math:`(N, n_{max}, *T)`, ``counts`` :math:`(N,)`
        - **output:** :math:`(N,)`

    Raises:
        ValueError: one line, for a dataset of graphs, an unknown split, no
            training sample, or a model without parameters.
    """
    if dataset.input_kind != "tensor":
        raise ValueError(f"train_pooled pools samples of tensor inputs; dataset "
                         f"{dataset.name!r} gives {dataset.input_kind} inputs")
    if split not in dataset.splits:
        raise ValueError(f"unknown split {split!r}; dataset {dataset.name!r} has "
                         f"{', '.join(dataset.splits)}")
    params = list(model.parameters())
    if not params:
        raise ValueError("the model has no parameters to train")
    device = params[0].device
    train = dataset.splits["train"]
    mask = train.sample_mask()
    x, y = train.x[mask].to(device), train.y[mask].to(device)      # (M, *F), (M, *T)
    m = x.size(0)
    if m == 0:
        raise ValueError(f"dataset {dataset.name!r} has no training sample to pool")
    per_pass = 1 if local.full_batch else math.ceil(m / local.batch_size)
    total = local.steps if local.steps is not None else int(local.epochs or 0) * per_pass
    optimizer: torch.optim.Optimizer
    if local.optimizer == "adam":
        optimizer = torch.optim.Adam(params, lr=local.lr, betas=(local.beta1, local.beta2),
                                     eps=local.eps, weight_decay=local.weight_decay)
    else:
        optimizer = torch.optim.SGD(params, lr=local.lr, momentum=local.momentum,
                                    nesterov=local.nesterov, weight_decay=local.weight_decay)
    factors = local.lr_factors(total)
    objective = dataset.objective
    order = torch.arange(m)
    model.train()
    for t in range(total):
        if local.full_batch:
            xb, yb = x, y
        else:
            k = t % per_pass
            if k == 0:
                order = torch.randperm(m, generator=generator)
            index = order[k * local.batch_size:(k + 1) * local.batch_size].to(device)
            xb, yb = x[index], y[index]
        if local.scheduled:
            for group in optimizer.param_groups:
                group["lr"] = local.lr * factors[t]
        optimizer.zero_grad()
        objective.loss(model(xb), yb).mean().backward()
        optimizer.step()
    model.eval()

    ev = dataset.splits[split]
    n, n_max = ev.counts.numel(), ev.x.size(1)
    flat_x = ev.x.reshape(n * n_max, *ev.x.shape[2:])
    flat_y = ev.y.reshape(n * n_max, *ev.y.shape[2:])
    metric = objective.all_metrics()[objective.primary]
    with torch.no_grad():
        values = torch.cat([
            metric(model(flat_x[i:i + _EVAL_ROWS].to(device)),
                   flat_y[i:i + _EVAL_ROWS].to(device)).double().cpu()
            for i in range(0, n * n_max, _EVAL_ROWS)]).view(n, n_max)
    weight = ev.sample_mask().cpu().double()
    if ev.weight is not None:
        weight = weight * ev.weight.cpu().double()
    total_weight = weight.sum(1)
    return torch.where(total_weight > 0, (values * weight).sum(1) / total_weight.clamp(min=1e-30),
                       torch.nan)
