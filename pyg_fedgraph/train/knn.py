r"""kNN-Per's evaluation: the model's class probabilities mixed with a
nearest-neighbour vote over each client's own training embeddings."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from pyg_fedgraph.nn.knn import knn_vote
from pyg_fedgraph.train.jobs import Evaluator, register_job
from pyg_fedgraph.train.trainer import ClientTrainer, model_args

__all__ = ["KNNInterpolation", "output_layer", "embed"]

#: Elements of the largest intermediate tensor (distances, embeddings) the
#: evaluation builds at once; clients and queries are taken in chunks below it.
MAX_ELEMENTS = 1 << 24


def output_layer(model: nn.Module) -> nn.Linear:
    r"""The last :class:`torch.nn.Linear` registered in ``model``: its input
    is the embedding (the penultimate layer's output) kNN-Per stores. This is
    the output layer of the library's MLP, CNN and GRU models."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(f"kNN-Per embeds samples with the input of the model's output "
                         f"layer, a torch.nn.Linear; {type(model).__name__} has none")
    return linears[-1]


def embed(trainer: ClientTrainer, params: Tensor, buffers: dict[str, Tensor],
          x: Tensor) -> tuple[Tensor, Tensor]:
    r"""Model outputs :math:`(S, B, C)` and embeddings :math:`(S, B, E)` (the
    input of :func:`output_layer`) of the inputs ``x`` :math:`(S, B, \ldots)`
    of :math:`S` clients with parameters ``params`` :math:`(S, D)`, in one
    batched call."""
    model, layout = trainer.model, trainer.layout
    head = output_layer(model)

    def forward(theta: Tensor, b: dict[str, Tensor], xb: Tensor) -> tuple[Tensor, Tensor]:
        seen: list[Tensor] = []

        def keep(module: nn.Module, args: tuple[Any, ...]) -> None:
            seen.append(args[0])

        handle = head.register_forward_pre_hook(keep)
        try:
            out = functional_call(model, (layout.unflatten(theta), b), model_args(xb))
        finally:
            handle.remove()
        return out, seen[-1]

    return vmap(forward)(params, buffers, x)


@register_job("knn-interpolation")
@dataclass
class KNNInterpolation(Evaluator):
    r"""kNN-Per's prediction (Marfoq et al., ICML 2022, eq. (7)): the
    evaluated model's class probabilities mixed with the kernel-weighted vote
    (:func:`~pyg_fedgraph.nn.knn.knn_vote`) of the :math:`k` nearest samples
    of the client's own datastore,

    .. math::
        h_{i, \lambda}(x) = \lambda\, p_{kNN, i}(y \mid \phi(x))
        + (1 - \lambda)\, \mathrm{softmax}(f_\theta(x)),

    where the datastore holds the embeddings :math:`\phi(x_j)` (the input of
    the model's output layer, :func:`output_layer`) and labels of all the
    client's ``datastore`` samples, built with the model being evaluated
    (kNN-Per's Algorithm 1: the global model) and its buffers in evaluation
    mode. Metrics are the task's objective applied to :math:`\log h`, so the
    loss is the negative log-likelihood of the mixture and the accuracy that
    of its arg max; :math:`\lambda = 0` gives the model's own metrics. A
    client with an empty datastore is evaluated with the model alone (as the
    authors' code). Clients are processed all at once, in chunks of clients
    and queries that bound the largest intermediate tensor to
    :data:`MAX_ELEMENTS` entries.

    Args:
        lam (float, optional): :math:`\lambda \in [0, 1]` (default: :obj:`0.5`)
        k (int, optional): neighbours (default: :obj:`10`)
        scale (float, optional): kernel length scale :math:`\sigma`
            (default: :obj:`1.0`)
        datastore (str, optional): the split the datastore is built from
            (default: ``"train"``)
    """
    lam: float = 0.5
    k: int = 10
    scale: float = 1.0
    datastore: str = "train"

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.lam) <= 1.0:
            raise ValueError(f"lam must lie in [0, 1], got {self.lam}")
        if int(self.k) < 1 or float(self.scale) <= 0.0:
            raise ValueError(f"k must be >= 1 and scale > 0, got k={self.k}, "
                             f"scale={self.scale}")

    def evaluate(self, trainer: ClientTrainer, rows: Tensor, params: Tensor, buffers: Tensor,
                 splits: tuple[str, ...]) -> dict[str, dict[str, Tensor]]:
        rows = rows.to(torch.long)
        # Computed where the trainer's model is; the metrics go back to where the
        # parameters came from (a client table on the host, a Flower message).
        home = params.device
        params, buffers = params.to(trainer.device), buffers.to(trainer.device)
        trainer.model.eval()
        head = output_layer(trainer.model)
        store_counts = trainer.dataset.num_samples(self.datastore)[rows]
        sizes = [int(store_counts.max()) if rows.numel() else 0] + [
            int(trainer.dataset.num_samples(split)[rows].max()) if rows.numel() else 0
            for split in splits]
        per_client = max(1, max(sizes) * max(head.in_features, head.out_features, 1))
        step = max(1, MAX_ELEMENTS // per_client)
        parts = [self._evaluate_chunk(trainer, rows[a:a + step], params[a:a + step],
                                      buffers[a:a + step], splits)
                 for a in range(0, rows.numel(), step)]  # a loop over client chunks (memory)
        if not parts:
            return {split: {} for split in splits}
        return {split: {name: torch.cat([p[split][name] for p in parts]).to(home)
                        for name in parts[0][split]} for split in splits}

    def _evaluate_chunk(self, trainer: ClientTrainer, rows: Tensor, params: Tensor,
                        buffers: Tensor, splits: tuple[str, ...]
                        ) -> dict[str, dict[str, Tensor]]:
        bufs = trainer._buffer_dict(buffers)
        keys, labels, num_keys = self._datastore(trainer, rows, params, bufs)
        num_classes = output_layer(trainer.model).out_features
        store = nn.functional.one_hot(labels.to(torch.long), num_classes).to(params.dtype)
        fns = trainer.objective.all_metrics()
        out: dict[str, dict[str, Tensor]] = {}
        for split in splits:
            counts = trainer.dataset.num_samples(split)[rows]
            sums = {name: params.new_zeros(rows.numel()) for name in fns}
            n_max = int(counts.max()) if counts.numel() else 0
            chunk = max(1, MAX_ELEMENTS // max(1, rows.numel() * max(keys.size(1), 1)))
            for start in range(0, n_max, min(chunk, trainer.eval_batch_size)):
                pos = torch.arange(start, min(start + min(chunk, trainer.eval_batch_size),
                                              n_max), device=params.device)
                valid = pos.unsqueeze(0) < counts.to(params.device).unsqueeze(1)
                index = torch.where(valid, pos.unsqueeze(0), torch.zeros_like(pos).unsqueeze(0))
                xb, yb = trainer.dataset.batch(split, index, rows)
                logits, query = embed(trainer, params, bufs, xb)
                vote, has_keys = knn_vote(query, keys, store, num_keys, self.k, self.scale)
                mixed = self.mix(logits, vote, has_keys)
                for name, fn in fns.items():
                    sums[name] += (vmap(fn)(mixed, yb) * valid).sum(1)
            denom = counts.to(params.dtype).to(params.device)
            out[split] = {name: torch.where(counts.to(params.device) > 0,
                                            v / denom.clamp(min=1), torch.nan)
                          for name, v in sums.items()}
        return out

    def mix(self, logits: Tensor, vote: Tensor, has_keys: Tensor) -> Tensor:
        r""":math:`\log(\lambda\, p_{kNN} + (1 - \lambda)\, \mathrm{softmax}(z))`
        :math:`(S, M, C)` from the model's logits and the kNN vote, computed
        in log space (exactly :math:`\log\mathrm{softmax}(z)` for
        :math:`\lambda = 0`); clients without a datastore keep the model's."""
        log_model = logits.log_softmax(dim=-1)
        lam = torch.tensor(float(self.lam), dtype=logits.dtype, device=logits.device)
        mixed = torch.logaddexp(torch.log(lam) + torch.log(vote),
                                torch.log1p(-lam) + log_model)
        return torch.where(has_keys.view(-1, 1, 1), mixed, log_model)

    def _datastore(self, trainer: ClientTrainer, rows: Tensor, params: Tensor,
                   bufs: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        r"""Embeddings :math:`(S, K, E)`, labels :math:`(S, K)` and sizes
        :math:`(S,)` of the clients' ``datastore`` samples."""
        counts = trainer.dataset.num_samples(self.datastore)[rows]
        n_max = int(counts.max()) if counts.numel() else 0
        keys, labels = [], []
        for start in range(0, n_max, trainer.eval_batch_size):
            pos = torch.arange(start, min(start + trainer.eval_batch_size, n_max),
                               device=params.device)
            index = pos.unsqueeze(0).expand(rows.numel(), -1)
            index = torch.where(index < counts.to(params.device).unsqueeze(1), index,
                                torch.zeros_like(index))
            xb, yb = trainer.dataset.batch(self.datastore, index, rows)
            keys.append(embed(trainer, params, bufs, xb)[1])
            labels.append(yb)
        if not keys:
            dim = output_layer(trainer.model).in_features
            return (params.new_zeros(rows.numel(), 0, dim),
                    torch.zeros(rows.numel(), 0, dtype=torch.long, device=params.device), counts)
        return torch.cat(keys, dim=1), torch.cat(labels, dim=1), counts.to(params.device)
