r"""Local update rules: what one local step does, for :math:`S` clients at once.

A :class:`LocalRule` maps the clients' parameters :math:`\Theta \in
\mathbb{R}^{S \times D}` and its own per-client state to new parameters,
given a :class:`LocalProblem`, which evaluates every client's mini-batch
objective

.. math::
    f_i(\theta; \mathcal{B}) = \frac{1}{|\mathcal{B}|}\sum_{(x, y) \in
    \mathcal{B}} \ell(h_\theta(x), y) + r_i(\theta)

(loss plus the strategy's :class:`~pyg_fedgraph.train.Regularizer`) and its
gradient and Hessian-vector products for all clients in one batched call
(:func:`torch.vmap` over :mod:`torch.func`). Rules are written on whole
:math:`(S, D)` tensors, so they stay batched over clients; the trainer keeps
inactive clients (those whose schedule has no batch at this step) unchanged.

:class:`SGD` (with momentum, weight decay and an optional parameter mask) is
the default and reproduces :class:`torch.optim.SGD`. Rules of other methods
(pFedMe's inner problem, Per-FedAvg's two-batch meta step) take more than one
gradient, or more than one batch, per step.

Rules travel to Flower clients by name, like regularizers: a rule is a
dataclass registered with :func:`register_rule`, whose fields are scalars or
tensors shared by all clients.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar

import torch
from torch import Tensor

if TYPE_CHECKING:
    from pyg_fedgraph.train.engine import LocalConfig

__all__ = ["LocalProblem", "LocalRule", "SGD", "RULES", "register_rule"]

#: Every rule class a client may rebuild by name (see :func:`register_rule`).
RULES: dict[str, type[LocalRule]] = {}
R = TypeVar("R", bound="type[LocalRule]")


def register_rule(name: str) -> Callable[[R], R]:
    r"""Registers a :class:`LocalRule` dataclass under ``name`` (its ``kind``),
    so that plans using it can be sent to Flower clients, which rebuild it
    from the name and its fields (code is never sent)."""
    def wrap(cls: R) -> R:
        if name in RULES and RULES[name] is not cls:
            raise ValueError(f"local rule {name!r} is already registered by {RULES[name]}")
        cls.kind = name
        RULES[name] = cls
        return cls
    return wrap


class LocalProblem:
    r"""The local objectives of :math:`S` clients during one training.

    Built by :class:`~pyg_fedgraph.train.ClientTrainer`; rules call it.

    Args:
        grad (callable): ``grad(theta, batch) -> (g, loss)``: gradients
            :math:`(S, D)` of every client's objective on its rows ``batch``
            :math:`(S, B)`, and the objective values :math:`(S,)`.
        hvp (callable): ``hvp(theta, batch, v) -> Hv``: Hessian-vector
            products :math:`(S, D)`.
    """

    def __init__(self, grad: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
                 hvp: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
        self._grad = grad
        self._hvp = hvp

    def grad(self, theta: Tensor, batch: Tensor) -> tuple[Tensor, Tensor]:
        r"""Gradients :math:`\nabla f_i(\theta_i; \mathcal{B}_i)` :math:`(S, D)`
        and values :math:`(S,)` on the batch rows ``batch`` :math:`(S, B)`."""
        return self._grad(theta, batch)

    def hvp(self, theta: Tensor, batch: Tensor, vector: Tensor) -> Tensor:
        r"""Hessian-vector products :math:`\nabla^2 f_i(\theta_i; \mathcal{B}_i)
        v_i` :math:`(S, D)`."""
        return self._hvp(theta, batch, vector)


class LocalRule:
    r"""Base class of local update rules (see the module docstring).

    Subclasses are dataclasses registered with :func:`register_rule`.

    Attributes:
        batches_per_step (int): mini-batches one step consumes (Per-FedAvg
            takes two or three); a step is taken by a client only when all of
            them exist in its schedule.
    """
    kind: ClassVar[str] = ""
    batches_per_step: ClassVar[int] = 1

    def init_state(self, theta: Tensor, config: LocalConfig) -> dict[str, Tensor]:
        r"""Per-client state :math:`(S, \ldots)` before the first step."""
        return {}

    def step(self, problem: LocalProblem, theta: Tensor, state: dict[str, Tensor],
             batches: list[Tensor], config: LocalConfig
             ) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        r"""One local step: new parameters :math:`(S, D)`, new state, and the
        step's loss :math:`(S,)` (reported as the training loss)."""
        raise NotImplementedError

    def finish(self, theta: Tensor, state: dict[str, Tensor]
               ) -> tuple[Tensor, dict[str, Tensor]]:
        r"""The parameters the clients upload :math:`(S, D)` and extra
        per-client outputs (e.g. pFedMe's personalized models), after the
        last step."""
        return theta, {}

    def to(self, device: torch.device) -> LocalRule:
        r"""The rule with its tensor fields (shared by all clients, e.g. a
        parameter mask) on ``device``; itself when it holds none."""
        if not dataclasses.is_dataclass(self):
            return self
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), Tensor)}
        return dataclasses.replace(self, **moved) if moved else self


@register_rule("sgd")
@dataclass
class SGD(LocalRule):
    r"""Stochastic gradient descent, as :class:`torch.optim.SGD`:

    .. math::
        g \leftarrow \nabla f_i(\theta) + \lambda_{wd}\,\theta, \quad
        b \leftarrow \mu b + g \;(b = g \text{ at the first step}), \quad
        \theta \leftarrow \theta - \eta\, (b \odot m)

    with learning rate :math:`\eta`, momentum :math:`\mu` and weight decay
    :math:`\lambda_{wd}` from the :class:`~pyg_fedgraph.train.LocalConfig`,
    and an optional mask :math:`m` of the parameters that train (FedRep's
    head and body phases); masked-out parameters do not move.

    Args:
        mask (torch.Tensor, optional): :math:`(D,)` bool, ``True`` for the
            parameters that train (default: all).
    """
    mask: Tensor | None = None

    def init_state(self, theta: Tensor, config: LocalConfig) -> dict[str, Tensor]:
        if not config.momentum:
            return {}
        return {"momentum": torch.zeros_like(theta),
                "started": torch.zeros(theta.size(0), dtype=torch.bool, device=theta.device)}

    def step(self, problem: LocalProblem, theta: Tensor, state: dict[str, Tensor],
             batches: list[Tensor], config: LocalConfig
             ) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        g, loss = problem.grad(theta, batches[0])
        if config.weight_decay:
            g = g + config.weight_decay * theta
        if config.momentum:
            started = state["started"].unsqueeze(1)
            g = torch.where(started, config.momentum * state["momentum"] + g, g)
            state = {"momentum": g, "started": torch.ones_like(state["started"])}
        if self.mask is not None:
            g = g * self.mask.to(g.dtype)
        return theta - config.lr * g, state, loss
