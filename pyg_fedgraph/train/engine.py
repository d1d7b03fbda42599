"""Client-parallel local training and evaluation.

All sampled clients train in one batched computation: their flat parameters
are stacked into an :math:`(S, D)` matrix and the per-client loss gradient is
evaluated with ``torch.vmap(torch.func.grad(...))`` over
:func:`torch.func.functional_call`. A plain per-client loop with
:class:`torch.optim.SGD` is kept as the reference implementation
(``parallel=False``); both consume the same mini-batch schedule, so they give
the same parameters up to float rounding.
"""
from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.hparams import Range, Search, schema
from pyg_fedgraph.train.objective import Objective
from pyg_fedgraph.train.rules import SGD, LocalProblem, LocalRule, class_counts

__all__ = ["LocalConfig", "LOCAL_SCHEMA", "Regularizer", "TrainResult", "ClientTrainer",
           "batch_schedule"]

log = logging.getLogger(__name__)


@dataclass
class LocalConfig:
    r"""Local training hyper-parameters (SGD, as in all five papers).

    Args:
        lr (float): learning rate (default: ``0.01``).
        momentum (float): SGD momentum (default: ``0.0``).
        weight_decay (float): L2 penalty added to the gradient (default: ``0.0``).
        batch_size (int): mini-batch size (default: ``64``).
        epochs (int, optional): local epochs over each client's data
            (default: ``5``); ignored when ``steps`` is set.
        steps (int, optional): a fixed number of local steps per client, each
            on a fresh random mini-batch (default: ``None``).
    """
    lr: Annotated[float, Range(gt=0.0),
                  Search(1e-3, 1e-1, log=True,
                         note="Panacea's grid {0.001, ..., 0.1} (Sec. IV-A)")] = 0.01
    momentum: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0
    weight_decay: Annotated[float, Range(ge=0.0)] = 0.0
    batch_size: Annotated[int, Range(ge=1)] = 64
    epochs: Annotated[int | None, Range(ge=0)] = 5
    steps: Annotated[int | None, Range(ge=0)] = None

    def __post_init__(self) -> None:
        for name, hp in LOCAL_SCHEMA.items():
            setattr(self, name, hp.check(getattr(self, name)))
        if self.steps is None and self.epochs is None:
            raise ValueError("set epochs >= 0 or steps >= 0")


#: The declared hyper-parameters of :class:`LocalConfig`.
LOCAL_SCHEMA = schema(LocalConfig)


class Regularizer:
    r"""An extra term of each client's local objective.

    .. math::
        \min_{\theta_i}\; F_i(\theta_i) + r(\theta_i, \rho_i^{(1)}, \ldots)

    ``fn`` receives one client's flat parameters :math:`(D,)` and that
    client's rows of ``refs``; it is vectorized over clients with
    :func:`torch.vmap`, so write it for a single client. Strategies build
    these (FedProx's proximal term, pFedGraph's cosine term).

    Args:
        fn (callable): ``fn(theta, *refs_i) -> scalar``.
        *refs (torch.Tensor): per-client tensors :math:`(S, \ldots)`.
    """

    def __init__(self, fn: Callable[..., Tensor], *refs: Tensor) -> None:
        self.fn = fn
        self.refs = tuple(r.detach() for r in refs)

    def select(self, rows: Tensor) -> Regularizer:
        return Regularizer(self.fn, *(r[rows] for r in self.refs))


@dataclass
class TrainResult:
    r"""Output of local training for :math:`S` clients.

    Attributes:
        params (torch.Tensor): trained flat parameters :math:`(S, D)`.
        buffers (torch.Tensor): trained flat buffers :math:`(S, B)`.
        loss (torch.Tensor): mean training loss over each client's steps :math:`(S,)`.
        steps (torch.Tensor): local steps each client took :math:`(S,)`.
    """
    params: Tensor
    buffers: Tensor
    loss: Tensor
    steps: Tensor
    extra: dict = field(default_factory=dict)


Generators = torch.Generator | Sequence[torch.Generator] | None


def _client_generators(generator: Generators, s: int) -> list[torch.Generator | None]:
    if generator is None or isinstance(generator, torch.Generator):
        return [generator] * s
    gens: list[torch.Generator | None] = list(generator)
    if len(gens) != s:
        raise ValueError(f"{len(gens)} generators given for {s} clients; pass one per client "
                         f"(or a single generator for all)")
    return gens


def batch_schedule(counts: Tensor, batch_size: int, *, epochs: int | None = None,
                   steps: int | None = None, generator: Generators = None
                   ) -> tuple[Tensor, Tensor]:
    r"""The mini-batches every client visits, as one index tensor.

    Epoch mode: each epoch, client :math:`i` walks a fresh permutation of its
    :math:`n_i` samples in :math:`\lceil n_i / B \rceil` batches; the last
    batch of an epoch (and every batch of a client with :math:`n_i < B`) is
    filled up by wrapping around the permutation, so every batch holds
    exactly :math:`B` real samples (no padding enters a loss or BatchNorm).
    Clients with fewer batches wait (inactive) for the others. Steps mode:
    every step draws a fresh random batch (without replacement within it).

    Client :math:`i`'s permutations are drawn from ``generator[i]`` alone and
    depend only on :math:`n_i`, so a client gets the same batches whether it
    trains alone (a Flower node) or batched with others (the simulator). This
    is one small draw per client (a loop over clients, cheap next to
    training); a single generator is drawn from client after client.

    Args:
        counts (torch.Tensor): samples per client :math:`(S,)`.
        batch_size (int): :math:`B`.
        epochs (int, optional): epoch mode.
        steps (int, optional): steps mode (wins over ``epochs``).
        generator (torch.Generator or list, optional): one generator per
            client, or one for all.

    Returns:
        ``index`` :math:`(T, S, B)` and ``active`` :math:`(T, S)` (bool).
    """
    counts = counts.to(torch.long)
    s = counts.numel()
    n_max = int(counts.max()) if s else 0
    empty = (torch.zeros(0, s, batch_size, dtype=torch.long), torch.zeros(0, s, dtype=torch.bool))
    if s == 0 or n_max == 0:
        return empty
    gens = _client_generators(generator, s)
    rounds = steps if steps is not None else epochs
    if rounds is None:
        raise ValueError("batch_schedule needs epochs or steps")
    if rounds == 0:
        return empty
    # perm[i, r, :n_i]: client i's r-th permutation of range(n_i).
    perm = torch.zeros(s, rounds, n_max, dtype=torch.long)
    for i, (n, gen) in enumerate(zip(counts.tolist(), gens, strict=True)):
        if n:
            perm[i, :, :n] = torch.rand(rounds, n, generator=gen).argsort(dim=1)
    safe = counts.clamp(min=1)

    def wrap(r: int, length: int) -> Tensor:  # (S, length), cycling over n_i entries
        pos = torch.arange(length).unsqueeze(0) % safe.unsqueeze(1)
        return perm[:, r].gather(1, pos)

    if steps is not None:
        idx = torch.stack([wrap(r, batch_size) for r in range(steps)])
        active = (counts > 0).unsqueeze(0).expand(steps, s).clone()
        return idx, active
    per_epoch = -(-n_max // batch_size)
    n_batches = -(-counts // batch_size)  # (S,)
    idxs: list[Tensor] = []
    acts: list[Tensor] = []
    for r in range(rounds):
        # The last batch of client i restarts at the beginning of its permutation
        # so that it is full: positions past n_i wrap around.
        flat = wrap(r, per_epoch * batch_size)
        idxs.append(flat.view(s, per_epoch, batch_size).transpose(0, 1))
        acts.append(torch.arange(per_epoch).unsqueeze(1) < n_batches.unsqueeze(0))
    return torch.cat(idxs), torch.cat(acts)


class ClientTrainer:
    r"""Trains and evaluates many clients of one model architecture at once.

    Args:
        model (torch.nn.Module): the client architecture (its values are not
            used: parameters come from the flat matrices passed in).
        dataset (FederatedDataset): all clients' data.
        objective (Objective, optional): loss and metrics (default: the
            dataset's :attr:`~pyg_fedgraph.data.FederatedDataset.objective`).
        config (LocalConfig, optional): local SGD settings.
        eval_batch_size (int, optional): rows per client evaluated at once
            (default: ``1024``).
    """

    def __init__(self, model: nn.Module, dataset: FederatedDataset,
                 objective: Objective | None = None, config: LocalConfig | None = None,
                 eval_batch_size: int = 1024) -> None:
        self.model = copy.deepcopy(model)
        self.layout = ParamLayout.from_module(self.model)
        self.dataset = dataset
        self.objective = objective or dataset.objective
        self.config = config or LocalConfig()
        self.eval_batch_size = eval_batch_size
        # Integer buffers (BatchNorm's num_batches_tracked) are bookkeeping, not
        # federated state: fresh zeros are passed so functional_call can mutate them.
        self._int_buffers = {n: b for n, b in self.model.named_buffers()
                             if not b.is_floating_point()}

    # ------------------------------------------------------------- helpers
    def _buffer_dict(self, buffers: Tensor) -> dict[str, Tensor]:
        out = {k: v.clone() for k, v in self.layout.unflatten_buffers(buffers).items()}
        s = buffers.size(0)
        out.update({k: torch.zeros(s, *v.shape, dtype=v.dtype)
                    for k, v in self._int_buffers.items()})
        return out

    def _flat_buffers(self, d: dict[str, Tensor], s: int) -> Tensor:
        if not self.layout.buffers:
            return torch.zeros(s, 0)
        return torch.cat([d[e.name].reshape(s, -1).to(torch.get_default_dtype())
                          for e in self.layout.buffers], dim=1)

    def _check(self, clients: Tensor, params: Tensor, buffers: Tensor | None) -> Tensor:
        s = clients.numel()
        if params.dim() != 2 or params.size(0) != s or params.size(1) != self.layout.num_params:
            raise ValueError(f"params must be ({s}, {self.layout.num_params}) for {s} clients, "
                             f"got {tuple(params.shape)}")
        if buffers is None:
            buffers = self.layout.flatten_buffers(self.model).unsqueeze(0).repeat(s, 1) \
                if self.layout.num_buffers else params.new_zeros(s, 0)
        if tuple(buffers.shape) != (s, self.layout.num_buffers):
            raise ValueError(f"buffers must be ({s}, {self.layout.num_buffers}), "
                             f"got {tuple(buffers.shape)}")
        return buffers

    def initial_buffers(self, num_clients: int) -> Tensor:
        r"""The template model's buffers repeated for ``num_clients`` clients."""
        return self.layout.flatten_buffers(self.model).unsqueeze(0).repeat(num_clients, 1) \
            if self.layout.num_buffers else torch.zeros(num_clients, 0)

    def _client_loss(self, theta: Tensor, buffers: dict[str, Tensor], xb: Tensor, yb: Tensor,
                     reg_fn: Callable[..., Tensor] | None, *refs: Tensor) -> Tensor:
        out = functional_call(self.model, (self.layout.unflatten(theta), buffers), (xb,))
        loss = self.objective.loss(out, yb).mean()
        if reg_fn is not None:
            loss = loss + reg_fn(theta, *refs)
        return loss

    # ---------------------------------------------------------------- train
    def train(self, clients: Tensor, params: Tensor, buffers: Tensor | None = None, *,
              regularizer: Regularizer | None = None, config: LocalConfig | None = None,
              rule: LocalRule | None = None, generator: Generators = None,
              parallel: bool = True) -> TrainResult:
        r"""Local training of clients ``clients`` starting from ``params``.

        Args:
            clients (torch.Tensor): client ids :math:`(S,)`.
            params (torch.Tensor): starting flat parameters :math:`(S, D)`.
            buffers (torch.Tensor, optional): flat buffers :math:`(S, B)`.
            regularizer (Regularizer, optional): extra loss term per client.
            config (LocalConfig, optional): overrides the trainer's config.
            rule (LocalRule, optional): the local update rule (default:
                :class:`~pyg_fedgraph.train.SGD`).
            generator (torch.Generator or list, optional): source of the batch
                order, one per client or one for all (see :func:`batch_schedule`).
            parallel (bool, optional): batched ``vmap`` path (default) or the
                per-client reference loop.
        """
        cfg = config or self.config
        rule = rule or SGD()
        clients = clients.to(torch.long)
        buffers = self._check(clients, params, buffers)
        if regularizer is not None and any(r.size(0) != clients.numel() for r in regularizer.refs):
            raise ValueError("every regularizer reference needs one row per trained client")
        counts = self.dataset.num_samples("train")[clients]
        index, active = batch_schedule(counts, cfg.batch_size, epochs=cfg.epochs,
                                       steps=cfg.steps, generator=generator)
        theta, buffers = params.detach().clone(), buffers.detach().clone()
        if parallel:
            return self._train_parallel(clients, theta, buffers, index, active, regularizer,
                                        cfg, rule)
        if type(rule) is SGD and rule.mask is None:
            return self._train_loop(clients, theta, buffers, index, active, regularizer, cfg)
        # Other rules have no torch.optim twin: run the batched code one client at a time.
        parts = [self._train_parallel(clients[i:i + 1], theta[i:i + 1], buffers[i:i + 1],
                                      index[:, i:i + 1], active[:, i:i + 1],
                                      None if regularizer is None
                                      else regularizer.select(torch.tensor([i])), cfg, rule)
                 for i in range(clients.numel())]
        return TrainResult(torch.cat([p.params for p in parts]),
                           torch.cat([p.buffers for p in parts]),
                           torch.cat([p.loss for p in parts]), torch.cat([p.steps for p in parts]),
                           {k: torch.cat([p.extra[k] for p in parts]) for k in parts[0].extra})

    def problem(self, clients: Tensor, bufs: dict[str, Tensor],
                regularizer: Regularizer | None, split: str = "train") -> LocalProblem:
        r"""The clients' mini-batch objectives on ``split`` as a
        :class:`~pyg_fedgraph.train.LocalProblem` (BatchNorm statistics in
        ``bufs`` are updated in place by every forward in training mode)."""
        reg_fn = regularizer.fn if regularizer is not None else None
        refs = regularizer.refs if regularizer is not None else ()
        in_dims = (0, 0, 0, 0, None) + (0,) * len(refs)
        value_and_grad = vmap(grad_and_value(self._client_loss), in_dims=in_dims,
                              randomness="different")

        def grad(theta: Tensor, batch: Tensor) -> tuple[Tensor, Tensor]:
            xb, yb = self.dataset.batch(split, batch, clients)
            g, loss = value_and_grad(theta, bufs, xb, yb, reg_fn, *refs)
            return g, loss.detach()

        def one_hvp(theta: Tensor, b: dict[str, Tensor], xb: Tensor, yb: Tensor,
                    v: Tensor, *r: Tensor) -> Tensor:
            def g(t: Tensor) -> Tensor:
                return torch.func.grad(self._client_loss)(t, b, xb, yb, reg_fn, *r)
            return torch.func.jvp(g, (theta,), (v,))[1]

        batched_hvp = vmap(one_hvp, in_dims=(0, 0, 0, 0, 0) + (0,) * len(refs),
                           randomness="different")

        def hvp(theta: Tensor, batch: Tensor, vector: Tensor) -> Tensor:
            xb, yb = self.dataset.batch(split, batch, clients)
            return batched_hvp(theta, bufs, xb, yb, vector, *refs)

        counts = (functools.partial(class_counts, self.dataset, clients, split)
                  if self.dataset.task == "classification" else None)
        return LocalProblem(grad, hvp, counts)

    def _train_parallel(self, clients: Tensor, theta: Tensor, buffers: Tensor, index: Tensor,
                        active: Tensor, reg: Regularizer | None, cfg: LocalConfig,
                        rule: LocalRule) -> TrainResult:
        s = clients.numel()
        self.model.train()
        bufs = self._buffer_dict(buffers)
        problem = self.problem(clients, bufs, reg)
        state = rule.init_state(theta, cfg)
        loss_sum = theta.new_zeros(s)
        k = rule.batches_per_step
        num_steps = index.size(0) // k
        steps = theta.new_zeros(s, dtype=torch.long)
        for t in range(num_steps):
            # A client steps only when its schedule holds all k batches of the step.
            act = active[t * k:(t + 1) * k].all(dim=0)
            if not bool(act.any()):
                continue
            old = {name: v.clone() for name, v in bufs.items()} if bufs else {}
            new, new_state, loss = rule.step(problem, theta, state,
                                             list(index[t * k:(t + 1) * k].unbind(0)), cfg)
            theta = torch.where(act.unsqueeze(1), new, theta)
            state = {name: _keep_inactive(act, v, state.get(name)) for name, v in new_state.items()}
            loss_sum += torch.where(act, loss, loss_sum.new_zeros(()))
            steps += act.to(steps.dtype)
            for name in bufs:  # inactive clients keep their BatchNorm statistics
                bufs[name] = _keep_inactive(act, bufs[name], old[name])
        params, extra = rule.finish(theta, state)
        return TrainResult(params, self._flat_buffers(bufs, s),
                           loss_sum / steps.clamp(min=1), steps, extra)

    def _train_loop(self, clients: Tensor, theta: Tensor, buffers: Tensor, index: Tensor,
                    active: Tensor, reg: Regularizer | None, cfg: LocalConfig) -> TrainResult:
        s = clients.numel()
        out_p, out_b, losses = [], [], []
        for i in range(s):  # reference implementation: deliberately one client at a time
            model = copy.deepcopy(self.model)
            self.layout.load_into(model, theta[i], buffers[i])
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                  weight_decay=cfg.weight_decay)
            total = 0.0
            for t in range(index.size(0)):
                if not bool(active[t, i]):
                    continue
                xb, yb = self.dataset.batch("train", index[t, i:i + 1], clients[i:i + 1])
                opt.zero_grad()
                loss = self.objective.loss(model(xb[0]), yb[0]).mean()
                if reg is not None:
                    flat = torch.cat([p.reshape(-1) for p in model.parameters()])
                    loss = loss + reg.fn(flat, *(r[i] for r in reg.refs))
                loss.backward()
                opt.step()
                total += float(loss.detach())
            out_p.append(self.layout.flatten(model))
            out_b.append(self.layout.flatten_buffers(model) if self.layout.num_buffers
                         else theta.new_zeros(0))
            losses.append(total)
        steps = active.sum(0)
        return TrainResult(torch.stack(out_p), torch.stack(out_b),
                           torch.tensor(losses, dtype=theta.dtype) / steps.clamp(min=1), steps)

    # ------------------------------------------------------------- evaluate
    @torch.no_grad()
    def evaluate(self, clients: Tensor, params: Tensor, buffers: Tensor | None = None,
                 split: str = "test") -> dict[str, Tensor]:
        r"""Per-client metrics on ``split``: ``{name: (S,)}`` (NaN for a client
        with no samples in that split)."""
        clients = clients.to(torch.long)
        buffers = self._check(clients, params, buffers)
        self.model.eval()
        bufs = self._buffer_dict(buffers)
        counts = self.dataset.num_samples(split)[clients]
        fns = self.objective.all_metrics()
        sums = {k: params.new_zeros(clients.numel()) for k in fns}
        n_max = int(counts.max()) if counts.numel() else 0

        def forward(theta: Tensor, b: dict[str, Tensor], xb: Tensor) -> Tensor:
            return functional_call(self.model, (self.layout.unflatten(theta), b), (xb,))

        fwd = vmap(forward)
        for start in range(0, n_max, self.eval_batch_size):
            pos = torch.arange(start, min(start + self.eval_batch_size, n_max))
            valid = pos.unsqueeze(0) < counts.unsqueeze(1)  # (S, b)
            index = torch.where(valid, pos.unsqueeze(0), torch.zeros_like(pos).unsqueeze(0))
            xb, yb = self.dataset.batch(split, index, clients)
            out = fwd(params, bufs, xb)
            for k, fn in fns.items():
                vals = vmap(fn)(out, yb)
                sums[k] += (vals * valid).sum(1)
        denom = counts.to(params.dtype)
        return {k: torch.where(counts > 0, v / denom.clamp(min=1), torch.nan)
                for k, v in sums.items()}

    def loss_gradient(self, clients: Tensor, params: Tensor, buffers: Tensor | None = None,
                      split: str = "val") -> tuple[Tensor, Tensor]:
        r"""Gradient of each client's mean loss on ``split`` at its own
        parameters, :math:`g_i = \nabla_{\theta} L_i(\theta_i)` :math:`(S, D)`,
        and the losses :math:`(S,)`. Used for pFedGAT's exact feedback."""
        clients = clients.to(torch.long)
        buffers = self._check(clients, params, buffers)
        self.model.eval()
        bufs = self._buffer_dict(buffers)
        counts = self.dataset.num_samples(split)[clients]
        n_max = int(counts.max()) if counts.numel() else 0
        pos = torch.arange(n_max)
        valid = pos.unsqueeze(0) < counts.unsqueeze(1)
        index = torch.where(valid, pos.unsqueeze(0), torch.zeros_like(pos).unsqueeze(0))
        xb, yb = self.dataset.batch(split, index, clients)
        w = valid.to(params.dtype) / counts.clamp(min=1).to(params.dtype).unsqueeze(1)

        def loss_fn(theta: Tensor, b: dict[str, Tensor], x: Tensor, y: Tensor,
                    wi: Tensor) -> Tensor:
            out = functional_call(self.model, (self.layout.unflatten(theta), b), (x,))
            return (self.objective.loss(out, y) * wi).sum()

        g, loss = vmap(grad_and_value(loss_fn))(params, bufs, xb, yb, w)
        return g, loss

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({type(self.model).__name__}, "
                f"clients={self.dataset.num_clients}, D={self.layout.num_params})")


def _keep_inactive(active: Tensor, new: Tensor, old: Tensor | None) -> Tensor:
    r"""``new`` for active clients (rows), ``old`` for the others."""
    if old is None:
        return new
    return torch.where(active.view((-1,) + (1,) * (new.dim() - 1)), new, old)
