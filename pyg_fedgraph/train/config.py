r"""The declaration of local training: :class:`LocalConfig`.

Kept free of torch (it is imported only inside the methods that compute with
tensors), so that the command line's ``--help`` and config-file schema, which
list these settings, load without it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pyg_fedgraph.hparams import Range, Search, schema

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["LocalConfig", "LOCAL_SCHEMA", "LOCAL_WHEN_SET", "OptimizerName"]

#: The local optimizers (:class:`LocalConfig`'s ``optimizer``).
OptimizerName = Literal["sgd", "adam"]


@dataclass
class LocalConfig:
    r"""Local training hyper-parameters: SGD (as in all five papers) or Adam.

    Args:
        lr (float): learning rate (default: ``0.01``).
        momentum (float): SGD momentum (default: ``0.0``).
        weight_decay (float): L2 penalty added to the gradient (default: ``0.0``).
        batch_size (int): mini-batch size (default: ``64``).
        epochs (int, optional): local epochs over each client's data
            (default: ``5``); ignored when ``steps`` is set.
        steps (int, optional): a fixed number of local steps per client, each
            on a fresh random mini-batch (default: ``None``).
        nesterov (bool): Nesterov momentum, as :class:`torch.optim.SGD`'s
            ``nesterov=True`` (needs ``momentum > 0``) (default: ``False``).
        warmup (float): share :math:`w \in [0, 1)` of each local run over
            which the learning rate rises linearly from 0 (default: ``0.0``).
        lr_decay_to (float, optional): after the warm-up, the learning rate
            falls linearly to ``lr_decay_to * lr`` at the run's last step;
            :obj:`None` keeps it at ``lr`` (default: ``None``).
        optimizer (str): ``"sgd"`` (:class:`~pyg_fedgraph.train.SGD`, as
            :class:`torch.optim.SGD`) or ``"adam"``
            (:class:`~pyg_fedgraph.train.Adam`, as :class:`torch.optim.Adam`)
            (default: ``"sgd"``).
        beta1, beta2 (float): Adam's decay rates of the first and second
            moment estimates (default: ``0.9``, ``0.999``).
        eps (float): Adam's :math:`\epsilon` (default: ``1e-8``).
        keep_optimizer_state (bool): each client keeps its optimizer state
            (SGD's momentum buffer, Adam's moments and step count) from one
            local run to its next, as a client that keeps one optimizer for the
            whole federation does (FED-PUB's clients); otherwise every local
            run starts with a fresh optimizer, as the five papers' clients do
            (default: :obj:`False`).
        full_batch (bool): every local step takes each client's whole training
            split (``batch_size`` is then not used; ``epochs`` counts steps),
            the loss the mean over its samples, as FED-PUB's clients train on
            their subgraphs (default: :obj:`False`).

    **Learning-rate schedule.** With ``warmup`` or ``lr_decay_to`` set, a
    client's local step :math:`t = 0, \ldots, T_i - 1` of its :math:`T_i`
    steps in a local run uses :math:`\eta_t = \eta\, m(u_t)` with
    :math:`u_t = (t + 1) / T_i` and the piecewise-linear factor

    .. math::
        m(u) = \begin{cases} u / w & u < w \\
        1 + (d - 1) \frac{u - w}{1 - w} & u \ge w \end{cases}

    (:math:`d` = ``lr_decay_to``, 1 when :obj:`None`): a triangular
    "one-cycle" schedule that restarts at every local run. The clock is each
    client's own (its steps, from its own sample count), so a client follows
    the same rates alone, among other clients and on a Flower node. SFL's
    released client optimizer (Chen et al., IJCAI 2022,
    dawenzi098/SFL-Structural-Federated-Learning, ``federated.py``: SGD with
    Nesterov momentum 0.9 and weight decay 5e-4, the rate rising linearly to
    0.4 over the first 5 of its :math:`E` local epochs and falling linearly to
    0.001 at the last) is ``lr=0.4, momentum=0.9, nesterov=True,
    weight_decay=5e-4, warmup=5/E, lr_decay_to=0.0025, epochs=E`` (its
    ``5e-4`` times the batch size on a loss summed over the batch, with the
    rate divided by the batch size, is weight decay 5e-4 on the mean loss).
    Fine-tuning with a rate of its own (:class:`~pyg_fedgraph.train.FineTune`
    with ``lr``) runs at that rate, plain.
    """
    lr: Annotated[float, Range(gt=0.0),
                  Search(1e-3, 1e-1, log=True,
                         note="Panacea's grid {0.001, ..., 0.1} (Sec. IV-A)")] = 0.01
    momentum: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0
    weight_decay: Annotated[float, Range(ge=0.0)] = 0.0
    batch_size: Annotated[int, Range(ge=1)] = 64
    epochs: Annotated[int | None, Range(ge=0)] = 5
    steps: Annotated[int | None, Range(ge=0)] = None
    nesterov: bool = False
    warmup: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0
    lr_decay_to: Annotated[float | None, Range(ge=0.0, le=1.0)] = None
    optimizer: OptimizerName = "sgd"
    beta1: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.9
    beta2: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.999
    eps: Annotated[float, Range(gt=0.0)] = 1e-8
    keep_optimizer_state: bool = False
    full_batch: bool = False

    def __post_init__(self) -> None:
        for name, hp in LOCAL_SCHEMA.items():
            setattr(self, name, hp.check(getattr(self, name)))
        if self.steps is None and self.epochs is None:
            raise ValueError("set epochs >= 0 or steps >= 0")
        if self.nesterov and not self.momentum:
            raise ValueError("nesterov=True needs momentum > 0 (as torch.optim.SGD)")
        if self.optimizer == "adam" and (self.momentum or self.nesterov):
            raise ValueError(f"momentum={self.momentum} and nesterov={self.nesterov} are SGD's; "
                             f"Adam's moments are set with beta1 and beta2")

    @property
    def scheduled(self) -> bool:
        r"""Whether the learning rate changes within a local run."""
        return bool(self.warmup) or self.lr_decay_to is not None

    def lr_factor(self, step: Tensor, total: Tensor) -> Tensor:
        r"""The factor :math:`m((t + 1) / T)` of the learning rate at step
        :math:`t` (``step``) of a local run of :math:`T` steps (``total``),
        elementwise in float64 (see the schedule above; 1 without one)."""
        import torch

        u = (step.to(torch.float64) + 1) / total.to(torch.float64).clamp(min=1)
        w = self.warmup
        d = 1.0 if self.lr_decay_to is None else self.lr_decay_to
        after = 1.0 + (d - 1.0) * (u - w) / (1.0 - w)
        return torch.where(u < w, u / w, after) if w else after

    def lr_factors(self, num_steps: int) -> list[float]:
        r"""The factor of the learning rate at each of the ``num_steps`` steps
        of a local run (all 1.0 without a schedule)."""
        if not self.scheduled:
            return [1.0] * num_steps
        import torch

        return self.lr_factor(torch.arange(num_steps), torch.tensor(num_steps)).tolist()

    def with_lr(self, lr: float | Tensor) -> LocalConfig:
        r"""A copy of this configuration with learning rate ``lr``, unchecked:
        inside a scheduled local run the rules get a per-client rate, an
        :math:`(S, 1)` tensor that broadcasts over the clients' rows (and may
        reach 0 at the run's end, which the ``lr > 0`` check refuses)."""
        out = copy.copy(self)
        out.lr = lr  # type: ignore[assignment]
        return out

    def optional_set(self) -> dict[str, Any]:
        r"""The fields of :data:`LOCAL_WHEN_SET` that differ from their
        defaults, by name."""
        return {k: getattr(self, k) for k in LOCAL_WHEN_SET
                if getattr(self, k) != LOCAL_SCHEMA[k].default}


#: The declared hyper-parameters of :class:`LocalConfig`.
LOCAL_SCHEMA = schema(LocalConfig)
#: Fields of :class:`LocalConfig` that run files and Flower records carry only
#: when set (:meth:`LocalConfig.optional_set`), so that those of runs without
#: them read as before, and older Flower clients still read them.
LOCAL_WHEN_SET = ("nesterov", "warmup", "lr_decay_to", "optimizer", "beta1", "beta2", "eps",
                  "keep_optimizer_state", "full_batch")
