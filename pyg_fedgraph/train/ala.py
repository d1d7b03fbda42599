r"""FedALA's adaptive local aggregation: where each client starts, learned on
its own data between the global model and its previous local model."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from pyg_fedgraph.train.jobs import ClientStart, StartJob, per_client, register_job
from pyg_fedgraph.train.rules import LocalProblem
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.utils.seeds import make_generators

__all__ = ["AdaptiveLocalAggregation", "ala_schedule"]


def ala_schedule(counts: Tensor, share: float, batch_size: int,
                 generators: Sequence[torch.Generator]) -> tuple[Tensor, Tensor]:
    r"""The batches of one epoch of FedALA's weight learning for :math:`S`
    clients: client :math:`i` draws a random subset of
    :math:`m_i = \max(1, \lfloor s\, n_i \rfloor)` of its :math:`n_i`
    training samples (none when :math:`n_i = 0`) from ``generators[i]`` and
    walks it in the same order every epoch, in :math:`\lceil m_i / B \rceil`
    batches of :math:`B` samples, the last filled up by wrapping around the
    subset (the library's rule for full batches, see
    :func:`~pyg_fedgraph.train.batch_schedule`).

    Returns:
        ``index`` :math:`(T, S, B)` (rows of the clients' training data) and
        ``active`` :math:`(T, S)` (bool).
    """
    counts = counts.to(torch.long)
    s = counts.numel()
    if len(generators) != s:
        raise ValueError(f"{len(generators)} generators given for {s} clients")
    sizes = [max(1, int(share * n)) if n > 0 else 0 for n in counts.tolist()]
    num_batches = [-(-m // batch_size) for m in sizes]
    steps = max(num_batches, default=0)
    index = torch.zeros(steps, s, batch_size, dtype=torch.long)
    active = torch.zeros(steps, s, dtype=torch.bool)
    for i, (n, m, gen) in enumerate(zip(counts.tolist(), sizes, generators, strict=True)):
        if m == 0:  # a loop over clients: one small draw each, as batch_schedule
            continue
        subset = torch.randperm(n, generator=gen)[:m]
        pos = torch.arange(num_batches[i] * batch_size) % m
        index[:num_batches[i], i] = subset[pos].view(num_batches[i], batch_size)
        active[:num_batches[i], i] = True
    return index, active


@register_job("adaptive-local-aggregation")
@dataclass
class AdaptiveLocalAggregation(StartJob):
    r"""The adaptive local aggregation (ALA) of FedALA, from the `"FedALA:
    Adaptive Local Aggregation for Personalized Federated Learning"
    <https://arxiv.org/abs/2212.01197>`_ paper (Zhang et al., AAAI 2023,
    Algorithm 1 lines 6-16, eq. (4)-(6)).

    Client :math:`i` starts from its previous local model :math:`\theta_i`
    and the global model :math:`\Theta` it receives: the lower layers are
    :math:`\Theta`'s, the top layers (flat indices from ``top`` on) mix the
    two element-wise,

    .. math::
        \hat{\theta}_i = \big[\Theta^{low};\;
        \theta_i^{top} + (\Theta^{top} - \theta_i^{top}) \odot W_i\big],

    with weights :math:`W_i \in [0, 1]^{P}` learned on a random share
    :math:`s` of the client's training data by projected gradient steps,
    batch after batch,

    .. math::
        W_i \leftarrow \mathrm{clip}_{[0, 1]}\big(W_i - \eta\,
        \nabla_{\hat{\theta}^{top}} \mathcal{L}(\hat{\theta}_i)
        \odot (\Theta^{top} - \theta_i^{top})\big).

    The first time a client aggregates (``started`` false) its weights
    learn until the standard deviation of its last ``num_pre_loss`` epoch
    losses (the loss of each epoch's last batch) falls below ``threshold``,
    for at most ``max_epochs`` epochs; later, one epoch per round. A client
    whose local model equals :math:`\Theta` (it has not trained yet) starts
    from :math:`\Theta` and keeps its weights, as the authors' code
    (``ALA.py``) skips the first round. The learned weights land on
    ``graph.ala_weights`` :math:`(S, P)`; the server keeps them (the
    clients keep no state of their own here).

    All clients learn at once: gradients come from the trainer's batched
    :class:`~pyg_fedgraph.train.LocalProblem` (training mode, the clients'
    buffers copied and discarded), and a client that has finished, or has
    no batch at a step, keeps its weights. The batches are those of
    :func:`ala_schedule`, drawn from ``(seed, "ala", draw_round, client)``.

    Args:
        global_params (torch.Tensor): :math:`\Theta` :math:`(D,)`.
        weights (torch.Tensor): each client's :math:`W_i` :math:`(S, P)`,
            :math:`P = D - \texttt{top}`.
        started (torch.Tensor): whether each client has passed its first
            aggregation :math:`(S,)` (bool).
        top (int): first flat index of the top layers.
        share (float, optional): :math:`s` (default: :obj:`0.8`)
        eta (float, optional): :math:`\eta` (default: :obj:`1.0`)
        threshold (float, optional): convergence threshold of the first
            aggregation (default: :obj:`0.01`)
        num_pre_loss (int, optional): epochs the threshold looks back on
            (default: :obj:`10`)
        max_epochs (int, optional): cap on the epochs of the first
            aggregation (default: :obj:`50`)
        draw_round (int, optional): the round the data share is drawn for
            (default: the round the job runs in)
    """
    output: ClassVar[str] = "ala_weights"
    global_params: Tensor
    weights: Tensor = per_client()
    started: Tensor = per_client()
    top: int = 0
    share: float = 0.8
    eta: float = 1.0
    threshold: float = 0.01
    num_pre_loss: int = 10
    max_epochs: int = 50
    draw_round: int | None = None

    def prepare(self, trainer: ClientTrainer, start: ClientStart, *, seed: int, rnd: int
                ) -> tuple[Tensor, dict[str, Tensor]]:
        if start.local is None:
            raise ValueError("adaptive local aggregation needs each client's own model "
                             "(ClientStart.local)")
        d = trainer.layout.num_params
        if self.global_params.shape != (d,) or not 0 <= self.top <= d:
            raise ValueError(f"global_params must be ({d},) and top in [0, {d}], got "
                             f"{tuple(self.global_params.shape)} and top={self.top}")
        if tuple(self.weights.shape) != (start.rows.numel(), d - self.top):
            raise ValueError(f"weights must be ({start.rows.numel()}, {d - self.top}), got "
                             f"{tuple(self.weights.shape)}")
        if trainer.parallel:
            return self._aggregate(trainer, start, seed, rnd)
        # The reference path: the same computation one client at a time.
        parts = [self._aggregate(trainer, _row(start, i), seed, rnd, i)
                 for i in range(start.rows.numel())]
        return (torch.cat([p[0] for p in parts]),
                {self.output: torch.cat([p[1][self.output] for p in parts])})

    def _aggregate(self, trainer: ClientTrainer, start: ClientStart, seed: int, rnd: int,
                   row: int | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        sel = slice(None) if row is None else slice(row, row + 1)
        # The weights are learned where the trainer's model is; results go back to
        # where the starting models were (a client table on the host, a Flower message).
        home = start.params.device
        params = start.params.to(trainer.device)
        weights = self.weights[sel].to(params).clone()
        started = self.started[sel].to(device=params.device, dtype=torch.bool)
        local = start.local.to(params) if start.local is not None else params
        glob = self.global_params.to(params).expand_as(local)
        top = self.top
        gap = glob[:, top:] - local[:, top:]
        skip = (local == glob).all(dim=1)

        def assemble(w: Tensor) -> Tensor:
            return torch.cat([glob[:, :top], local[:, top:] + gap * w], dim=1)

        counts = trainer.dataset.num_samples("train")[start.rows.to(torch.long)]
        draw = rnd if self.draw_round is None else self.draw_round
        gens = make_generators(seed, "ala", draw, ids=start.ids.tolist())
        index, active = ala_schedule(counts, self.share, trainer.config.batch_size, gens)
        running = (~skip & (counts.to(skip.device) > 0))
        if bool(running.any()):
            bufs = trainer._buffer_dict(start.buffers.to(trainer.device))  # a copy: discarded
            problem = trainer.problem(start.rows.to(torch.long), bufs, None)
            weights = self._learn(problem, assemble, weights, gap, started, running, index,
                                  active)
        params = torch.where(skip.unsqueeze(1), glob, assemble(weights))
        return params.to(home), {self.output: weights.to(home)}

    def _learn(self, problem: LocalProblem, assemble: Callable[[Tensor], Tensor],
               weights: Tensor, gap: Tensor, started: Tensor, running: Tensor, index: Tensor,
               active: Tensor) -> Tensor:
        r"""The weight learning of :math:`S` clients: one epoch for the
        started ones, up to convergence (or ``max_epochs``) for the others."""
        top = self.top
        s = weights.size(0)
        losses = weights.new_full((s, max(self.max_epochs, 1)), float("nan"))
        epochs = 1 if bool(started[running].all()) else max(self.max_epochs, 1)
        for epoch in range(epochs):  # a loop over epochs and steps, never over clients
            last = weights.new_full((s,), float("nan"))
            for t in range(index.size(0)):
                step = active[t].to(running.device) & running
                if not bool(step.any()):
                    continue
                grad, loss = problem.grad(assemble(weights), index[t])
                new = (weights - self.eta * grad[:, top:] * gap).clamp(0.0, 1.0)
                weights = torch.where(step.unsqueeze(1), new, weights)
                last = torch.where(step, loss.to(last), last)
            losses[:, epoch] = last
            done = started.clone()
            if epoch + 1 > self.num_pre_loss:
                window = losses[:, epoch + 1 - self.num_pre_loss:epoch + 1]
                done |= window.std(dim=1, unbiased=False) < self.threshold
            running = running & ~done
            if not bool(running.any()):
                break
        return weights


def _row(start: ClientStart, i: int) -> ClientStart:
    sel = slice(i, i + 1)
    return dataclasses.replace(start, rows=start.rows[sel], ids=start.ids[sel],
                               params=start.params[sel], buffers=start.buffers[sel],
                               local=None if start.local is None else start.local[sel])
