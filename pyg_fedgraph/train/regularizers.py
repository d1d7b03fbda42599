r"""Extra terms of the clients' local objectives, declared as data.

.. math::
    \min_{\theta_i}\; F_i(\theta_i) + r(\theta_i;\, \rho_i)

A :class:`Regularizer` is a dataclass registered by name with
:func:`register_regularizer`, like local rules and client jobs: fields marked
:func:`per_client` hold one row per client (reference tensors
:math:`\rho_i`, :math:`(S, \ldots)`), the other fields are scalars shared by
all clients. :meth:`Regularizer.penalty` computes :math:`r` for one client;
the trainer vectorizes it over clients with :func:`torch.vmap`. Since it is
data, a Flower client rebuilds it from its name, its scalars and its rows:
code is never sent.

The per-client helpers :func:`per_client` and :func:`select_rows` serve every
piece of declared client work (plans, jobs, regularizers).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import torch
from torch import Tensor

from pyg_fedgraph.utils.registry import Registry

__all__ = ["Regularizer", "REGULARIZERS", "register_regularizer", "per_client", "select_rows",
           "ProximalTerm", "proximal_term"]

#: Every regularizer class a client may rebuild by name:
#: ``@register_regularizer("proximal")`` adds a :class:`Regularizer` dataclass
#: and sets its ``kind``.
REGULARIZERS: Registry[type[Regularizer]] = Registry("regularizer", attribute="kind")
register_regularizer = REGULARIZERS.register


def per_client(default: Any = dataclasses.MISSING) -> Any:
    r"""A dataclass field holding one row per client (a :math:`(S, \ldots)`
    tensor or a :class:`Regularizer`): restricted with :func:`select_rows`
    and sent row by row to Flower clients."""
    if default is dataclasses.MISSING:
        return field(metadata={"per_client": True})
    return field(default=default, metadata={"per_client": True})


def select_rows(obj: Any, rows: Tensor) -> Any:
    r"""A copy of the dataclass ``obj`` whose ``per_client`` fields keep only
    positions ``rows`` (declared work nested in its fields is restricted the
    same way)."""
    changes: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            continue
        if f.metadata.get("per_client"):
            changes[f.name] = value[rows] if isinstance(value, Tensor) else value.select(rows)
        elif dataclasses.is_dataclass(value) and callable(getattr(value, "select", None)):
            changes[f.name] = getattr(value, "select")(rows)  # noqa: B009 - mypy: any dataclass
        elif isinstance(value, tuple) and value and all(hasattr(v, "select") for v in value):
            changes[f.name] = tuple(v.select(rows) for v in value)
    return dataclasses.replace(obj, **changes)


class Regularizer:
    r"""Base class of the extra terms of the local objective (see the module
    docstring). Subclasses are dataclasses registered with
    :func:`register_regularizer` that implement :meth:`penalty`."""
    kind: ClassVar[str] = ""

    def penalty(self, theta: Tensor, *rows: Tensor) -> Tensor:
        r"""The term for one client: its flat parameters ``theta``
        :math:`(D,)` and its rows of the :attr:`refs` (without the client
        dimension); a scalar. Written for one client: the trainer maps it
        over clients with :func:`torch.vmap`."""
        raise NotImplementedError

    @property
    def refs(self) -> tuple[Tensor, ...]:
        r"""The per-client tensors, in field order, each :math:`(S, \ldots)`."""
        return tuple(getattr(self, f.name) for f in fields(self)  # type: ignore[arg-type]
                     if f.metadata.get("per_client") and getattr(self, f.name) is not None)

    def key(self) -> tuple[Any, ...]:
        r"""Equal for regularizers that compute the same function (the class
        and its scalar fields): strategies build a fresh one every round,
        which must find the trainer's compiled gradient."""
        return (type(self), *((f.name, getattr(self, f.name))
                              for f in fields(self)  # type: ignore[arg-type]
                              if not f.metadata.get("per_client")))

    def select(self, rows: Tensor) -> Regularizer:
        r"""The regularizer of the clients at positions ``rows``."""
        return select_rows(self, rows)

    def to(self, device: torch.device) -> Regularizer:
        r"""The regularizer with its per-client tensors on ``device``."""
        return dataclasses.replace(self, **{  # type: ignore[type-var]
            f.name: getattr(self, f.name).detach().to(device)
            for f in fields(self)  # type: ignore[arg-type]
            if f.metadata.get("per_client") and isinstance(getattr(self, f.name), Tensor)})


def proximal_term(theta: Tensor, reference: Tensor, coefficient: float) -> Tensor:
    r"""The proximal penalty :math:`\frac{c}{2}\|\theta - \rho\|_2^2` of one
    client (FedProx, Ditto).

    Args:
        theta (torch.Tensor): flat parameters :math:`(D,)`.
        reference (torch.Tensor): the model :math:`\rho` to stay close to :math:`(D,)`.
        coefficient (float): :math:`c`.
    """
    return 0.5 * coefficient * (theta - reference).pow(2).sum()


@register_regularizer("proximal")
@dataclass
class ProximalTerm(Regularizer):
    r"""The proximal penalty of FedProx (Li et al., MLSys 2020, eq. (2)),
    Ditto's personal objective and FedAMP's, for client :math:`i`:

    .. math::
        r(\theta) = \frac{c}{2} \lVert \theta - \rho_i \rVert_2^2

    Args:
        center (torch.Tensor): the models :math:`\rho_i` to stay close to
            :math:`(S, D)`.
        coefficient (float): :math:`c \geq 0`.
    """
    center: Tensor = per_client()
    coefficient: float = 0.0

    def penalty(self, theta: Tensor, *rows: Tensor) -> Tensor:
        return proximal_term(theta, rows[0], self.coefficient)
