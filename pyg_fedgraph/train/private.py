r"""Parameters that stay on the client: a declared private part of a
client's model.

Some methods keep part of every client's model to the client: FED-PUB's
personalized masks, FedRep- or GCFL-style local heads and input layers. The
model's flat parameter vector :math:`\theta_i \in \mathbb{R}^D` then splits
into a *shared* part :math:`\phi_i \in \mathbb{R}^{D_s}` and a *private* part
:math:`\pi_i \in \mathbb{R}^{D - D_s}`:

.. math::
    \theta_i = P_s^\top \phi_i + P_p^\top \pi_i,

with :math:`P_s`, :math:`P_p` the selections of the shared and private
coordinates. The server, its strategy and everything it stores see
:math:`\phi_i` only: the engine is built on the shared layout
(:attr:`PrivateParameters.shared_layout`), uploads hold :math:`\phi_i`,
similarities and collaboration graphs are computed on it. Each client keeps
its full :math:`\theta_i` (the simulator in its table of local models, a
Flower node in its own state) and, whenever the server sends shared
coordinates, completes them with its own private part
(:meth:`PrivateParameters.lift`). A regularizer the server sends acts on the
shared coordinates (:class:`OnSharedPart`); the private part trains with the
plain local loss.

A private part is declared by parameter-name prefixes: the model attribute
``private_parameters`` (a tuple of prefixes, e.g. ``("classifier",)``) or the
simulator's ``private`` setting (``--set private=classifier``).

Server rules that reach into the whole model cannot work on a shared part
alone and refuse a private part before training: FedRep and FedRoD (their
heads are the last layers the server sees), IFCA (clients choose among
whole cluster models), FedALA (it mixes whole local and global models).
Hypernetwork methods (pFedHN, pFedLA, Panacea) generate the shared part.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.train.jobs import (
    ClientResult,
    EvaluatePlan,
    PersonalTraining,
    TrainPlan,
)
from pyg_fedgraph.train.regularizers import Regularizer

__all__ = ["PrivateParameters", "OnSharedPart", "private_prefixes"]


def private_prefixes(model: nn.Module, private: str | Sequence[str] | None = None
                     ) -> tuple[str, ...]:
    r"""The declared private parameter prefixes: ``private`` (a sequence, or
    a comma-separated string) when given, else the model's
    ``private_parameters`` attribute, else none."""
    if private is None:
        private = getattr(model, "private_parameters", ())
    if isinstance(private, str):
        private = [p for p in (s.strip() for s in private.split(",")) if p]
    return tuple(private)


@dataclass
class OnSharedPart(Regularizer):
    r"""A regularizer the server sent, applied to the shared coordinates of
    the client's full parameters: :math:`r(P_s \theta;\, \rho_i)`. Built on
    the client from the one it received (never sent itself).

    Args:
        inner (Regularizer): the server's regularizer, on :math:`D_s` values.
        index (torch.Tensor): the shared coordinates :math:`(D_s,)`.
    """
    inner: Regularizer
    index: Tensor

    def penalty(self, theta: Tensor, *rows: Tensor) -> Tensor:
        return self.inner.penalty(theta[self.index], *rows)

    @property
    def refs(self) -> tuple[Tensor, ...]:
        return self.inner.refs

    def key(self) -> tuple[Any, ...]:
        return ("shared-part", int(self.index.numel()), self.inner.key())

    def select(self, rows: Tensor) -> OnSharedPart:
        return OnSharedPart(self.inner.select(rows), self.index)

    def to(self, device: torch.device) -> OnSharedPart:
        return OnSharedPart(self.inner.to(device), self.index.to(device))


class PrivateParameters:
    r"""The split of a model's flat parameters into a shared and a private
    part (see the module docstring).

    Args:
        layout (ParamLayout): the whole model's layout (:math:`D` values).
        prefixes (iterable of str): parameter-name prefixes of the private
            part (``"classifier"`` takes ``classifier.weight`` and
            ``classifier.bias``).

    Attributes:
        shared_index (torch.Tensor): the shared coordinates :math:`(D_s,)`.
        private_index (torch.Tensor): the private ones :math:`(D - D_s,)`.
        shared_layout (ParamLayout): the layout of the shared part (what the
            server sees).
    """

    def __init__(self, layout: ParamLayout, prefixes: Iterable[str]) -> None:
        self.prefixes = tuple(prefixes)
        self.layout = layout
        names = layout.param_names

        def private(name: str) -> bool:
            return any(name == p or name.startswith(p + ".") for p in self.prefixes)

        unmatched = [p for p in self.prefixes if not any(
            n == p or n.startswith(p + ".") for n in names)]
        if unmatched:
            raise ValueError(f"private parameters {unmatched} match no parameter of the model; "
                             f"its parameters are {', '.join(names)}")
        keep = [not private(n) for n in names]
        if not any(keep):
            raise ValueError("every parameter is private: a federation needs a shared part")
        sizes = [e.numel for e in layout.params]
        flags = torch.repeat_interleave(torch.tensor(keep), torch.tensor(sizes))
        self.shared_index = flags.nonzero().view(-1)
        self.private_index = (~flags).nonzero().view(-1)
        entries = [e for e, k in zip(layout.params, keep, strict=True) if k]
        layer_names, bounds, offset, current = [], [0], 0, None
        for e in entries:
            owner = e.name.rsplit(".", 1)[0] if "." in e.name else ""
            if owner != current:
                if current is not None:
                    bounds.append(offset)
                layer_names.append(owner)
                current = owner
            offset += e.numel
        bounds.append(offset)
        self.shared_layout = ParamLayout([(e.name, e.shape, e.dtype) for e in entries],
                                         [(e.name, e.shape, e.dtype) for e in layout.buffers],
                                         layer_names, torch.tensor(bounds))

    @property
    def num_shared(self) -> int:
        r""":math:`D_s`."""
        return int(self.shared_index.numel())

    @property
    def private_names(self) -> list[str]:
        r"""The private parameters' names."""
        shared = set(self.shared_layout.param_names)
        return [n for n in self.layout.param_names if n not in shared]

    # ------------------------------------------------------------- vectors
    def share(self, full: Tensor) -> Tensor:
        r"""The shared part :math:`(\ldots, D_s)` of full parameters
        :math:`(\ldots, D)`."""
        return full[..., self.shared_index.to(full.device)]

    def lift(self, shared: Tensor, full: Tensor) -> Tensor:
        r"""Full parameters :math:`(S, D)`: the shared coordinates from
        ``shared`` :math:`(S, D_s)`, the private ones from each client's own
        ``full`` :math:`(S, D)`."""
        if shared.size(-1) != self.num_shared:
            raise ValueError(f"{shared.size(-1)} shared values sent; the shared part of the "
                             f"model has {self.num_shared}")
        out = full.clone()
        out[..., self.shared_index.to(full.device)] = shared.to(out)
        return out

    # --------------------------------------------------------------- plans
    def check_plan(self, plan: TrainPlan | EvaluatePlan, who: str = "the strategy") -> None:
        r"""Refuses, with one line, work that needs whole models."""
        start = plan.start_job
        if start is not None:
            raise ValueError(f"{who} asks clients to choose their start ({start.kind}), which "
                             f"needs whole models; it cannot run with private parameters "
                             f"{list(self.prefixes)}")
        if isinstance(plan, TrainPlan):
            rule = plan.rule
            if rule is not None and any(isinstance(getattr(rule, f.name), Tensor)
                                        for f in dataclasses.fields(rule)):  # type: ignore[arg-type]
                raise ValueError(f"{who} sends the update rule {rule.kind!r} with "
                                 f"per-coordinate data, which needs whole models; it cannot "
                                 f"run with private parameters {list(self.prefixes)}")
            for job in plan.jobs:
                if not job.knows_private:
                    raise ValueError(f"{who} asks for the client job {job.kind!r}, which "
                                     f"does not know private parameters")

    def lift_plan(self, plan: TrainPlan, start: Tensor, local: Tensor
                  ) -> tuple[TrainPlan, Tensor]:
        r"""``plan`` (shared coordinates) for clients whose own models are
        ``local`` :math:`(S, D)`, and the full starting parameters: the
        plan's, completed with each client's private part, or ``start``
        :math:`(S, D)` when the plan sends none."""
        self.check_plan(plan)
        params = self.lift(plan.params, local) if plan.params is not None else start
        jobs = tuple(dataclasses.replace(job, params=self.lift(job.params, local),
                                         regularizer=self._regularizer(job.regularizer))
                     if isinstance(job, PersonalTraining) else job for job in plan.jobs)
        return dataclasses.replace(plan, params=params,
                                   regularizer=self._regularizer(plan.regularizer),
                                   jobs=jobs), params

    def lift_evaluate(self, plan: EvaluatePlan, local: Tensor) -> tuple[EvaluatePlan, Tensor]:
        r"""``plan`` and the full models it evaluates (see :meth:`lift_plan`)."""
        self.check_plan(plan)
        params = self.lift(plan.params, local) if plan.params is not None else local
        return dataclasses.replace(plan, params=params), params

    def share_result(self, result: ClientResult) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        r"""What the clients upload: the shared part of their trained
        parameters and of where they started, and their job outputs with
        every :math:`D`-vector reduced to its shared part."""
        d = self.layout.num_params
        outputs = {k: self.share(v) if v.dim() == 2 and v.size(1) == d else v
                   for k, v in result.outputs.items()}
        return self.share(result.params), self.share(result.start), outputs

    def _regularizer(self, reg: Regularizer | None) -> Regularizer | None:
        return None if reg is None else OnSharedPart(reg, self.shared_index)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(private={list(self.prefixes)}, "
                f"shared={self.num_shared} of {self.layout.num_params})")
