"""Per-client data, stored so that all clients can be batched at once."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from pyg_fedgraph.data.objective import Objective, objective_for

__all__ = ["FederatedDataset", "ClientSplit", "DatasetDefaults", "Task", "SPLITS"]

Task = Literal["classification", "regression"]
SPLITS = ("train", "val", "test")


@dataclass
class ClientSplit:
    r"""One split (train, val or test) of every client, padded to a common length.

    Args:
        x (torch.Tensor): inputs :math:`(N, n_{max}, *F)`; rows past a client's
            count are padding and never read.
        y (torch.Tensor): targets :math:`(N, n_{max}, *T)`.
        counts (torch.Tensor): samples per client :math:`(N,)`.
        weight (torch.Tensor, optional): non-negative weight of every row
            :math:`(N, n_{max})` for evaluation: a client's metric is then
            :math:`\sum_s w_s m_s / \sum_s w_s` over its samples instead of
            the plain mean (e.g. the label-weighted global test set of
            pFedGraph's code, see :func:`~pyg_fedgraph.datasets.vision.federate_images`).
            Training ignores it. (default: :obj:`None`, equal weights)
    """
    x: Tensor
    y: Tensor
    counts: Tensor
    weight: Tensor | None = None

    def __post_init__(self) -> None:
        if self.x.size(0) != self.counts.numel() or self.y.size(0) != self.counts.numel():
            raise ValueError(f"x, y and counts disagree on the number of clients: "
                             f"{self.x.size(0)}, {self.y.size(0)}, {self.counts.numel()}")
        if self.x.size(1) != self.y.size(1):
            raise ValueError(f"x holds {self.x.size(1)} rows per client, y {self.y.size(1)}")
        if self.counts.numel() and int(self.counts.max()) > self.x.size(1):
            raise ValueError(f"a client claims {int(self.counts.max())} samples but only "
                             f"{self.x.size(1)} rows are stored")
        if self.weight is not None:
            if tuple(self.weight.shape) != tuple(self.x.shape[:2]):
                raise ValueError(f"weight has shape {tuple(self.weight.shape)}, expected "
                                 f"{tuple(self.x.shape[:2])}: one weight per stored row")
            if bool((self.weight < 0).any()) or not bool(torch.isfinite(self.weight).all()):
                raise ValueError("weight must be finite and non-negative")

    def sample_mask(self) -> Tensor:
        r"""Which stored rows hold samples :math:`(N, n_{max})` (the others are
        padding), on the device of :attr:`x`."""
        rows = torch.arange(self.x.size(1), device=self.x.device)
        return rows.unsqueeze(0) < self.counts.to(self.x.device).unsqueeze(1)

    @classmethod
    def from_lists(cls, xs: Sequence[Tensor], ys: Sequence[Tensor],
                   weights: Sequence[Tensor] | None = None) -> ClientSplit:
        r"""Pads per-client tensors ``xs[i]`` :math:`(n_i, *F)`, ``ys[i]``
        :math:`(n_i, *T)` and, optionally, evaluation weights ``weights[i]``
        :math:`(n_i,)` (padding rows get weight 0)."""
        if len(xs) != len(ys) or (weights is not None and len(weights) != len(xs)):
            raise ValueError(f"{len(xs)} input tensors but {len(ys)} target tensors"
                             + ("" if weights is None else f" and {len(weights)} weights"))
        if not xs:
            raise ValueError("from_lists needs at least one client")
        for i, (a, b) in enumerate(zip(xs, ys, strict=True)):
            if a.size(0) != b.size(0) or (weights is not None
                                          and weights[i].numel() != a.size(0)):
                raise ValueError(f"client {i}: {a.size(0)} inputs but {b.size(0)} targets"
                                 + ("" if weights is None
                                    else f" and {weights[i].numel()} weights"))
        counts = torch.tensor([a.size(0) for a in xs], dtype=torch.long)
        n_max = max(int(counts.max()), 1)
        x = xs[0].new_zeros((len(xs), n_max, *xs[0].shape[1:]))
        y = ys[0].new_zeros((len(ys), n_max, *ys[0].shape[1:]))
        w = None if weights is None else torch.zeros(len(xs), n_max)
        for i, (a, b) in enumerate(zip(xs, ys, strict=True)):
            x[i, :a.size(0)] = a
            y[i, :b.size(0)] = b
            if w is not None and weights is not None:
                w[i, :a.size(0)] = weights[i].view(-1)
        return cls(x, y, counts, w)

    def gather(self, index: Tensor, clients: Tensor | None = None) -> tuple[Tensor, Tensor]:
        r"""Rows ``index`` :math:`(S, B)` of clients ``clients`` :math:`(S,)`
        (all clients when ``None``). Returns :math:`(S, B, *F)` and :math:`(S, B, *T)`
        on the split's device (the indices may live anywhere)."""
        device = self.x.device
        rows = (torch.arange(self.x.size(0), device=device) if clients is None
                else clients.to(device))
        index = index.to(device)
        return self.x[rows.unsqueeze(1), index], self.y[rows.unsqueeze(1), index]

    def gather_weight(self, index: Tensor, clients: Tensor | None = None) -> Tensor | None:
        r"""The evaluation weights of the rows :meth:`gather` returns
        :math:`(S, B)` on the split's device, or :obj:`None` when the split
        has none."""
        if self.weight is None:
            return None
        device = self.weight.device
        rows = (torch.arange(self.x.size(0), device=device) if clients is None
                else clients.to(device))
        return self.weight[rows.unsqueeze(1), index.to(device)]

    def to(self, device: torch.device | str) -> ClientSplit:
        r"""The split with inputs, targets and evaluation weights on ``device``
        (counts stay on the CPU: batch schedules are drawn there)."""
        return ClientSplit(self.x.to(device), self.y.to(device), self.counts,
                           None if self.weight is None else self.weight.to(device))


@dataclass(frozen=True)
class DatasetDefaults:
    r"""The client model and training protocol a data set is meant to be run
    with (usually its papers' settings), carried by the data set itself so
    that a renamed or hand-built data set keeps them.

    Args:
        model (str): a name of :data:`pyg_fedgraph.models.MODEL_NAMES`
            (e.g. ``"cnn"``).
        model_kwargs (dict, optional): keyword arguments of that model.
            (default: :obj:`{}`)
        local (dict, optional): keyword arguments of
            :class:`~pyg_fedgraph.train.LocalConfig` (``lr``, ``momentum``,
            ``weight_decay``, ``batch_size``, ``epochs`` or ``steps``).
            (default: :obj:`{}`)
        rounds (int, optional): communication rounds. (default: :obj:`30`)
    """
    model: str
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    local: dict[str, Any] = field(default_factory=dict)
    rounds: int = 30

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"DatasetDefaults needs at least one round, got rounds={self.rounds}")


@dataclass
class FederatedDataset:
    r"""All clients' train / val / test data plus an optional prior client graph.

    Strategies and the simulator only talk to data through this object, so a
    dataset that cannot be held padded in memory (long traffic series) can
    subclass it and override :meth:`batch` and :meth:`num_samples`.

    Args:
        name (str): dataset name (used in logs and summaries).
        task (str): ``"classification"`` or ``"regression"``.
        splits (dict): ``{"train": ClientSplit, "val": ..., "test": ...}``.
        num_classes (int, optional): classes, for classification.
        edge_index (torch.Tensor, optional): prior client graph :math:`(2, E)`.
        edge_weight (torch.Tensor, optional): its weights :math:`(E,)`.
        client_labels (torch.Tensor, optional): a ground-truth group per client
            (dominant class, topology id), used for plots and case studies.
        info (dict): free-form facts about the data (e.g. ``{"synthetic": True}``).
        defaults (DatasetDefaults, optional): the model and training protocol
            to run this data with; read by
            :func:`~pyg_fedgraph.experiment.build_simulator`.
    """
    name: str
    task: Task
    splits: dict[str, ClientSplit]
    num_classes: int | None = None
    edge_index: Tensor | None = None
    edge_weight: Tensor | None = None
    client_labels: Tensor | None = None
    info: dict = field(default_factory=dict)
    defaults: DatasetDefaults | None = None

    def __post_init__(self) -> None:
        if self.task not in ("classification", "regression"):
            raise ValueError(f"task must be 'classification' or 'regression', got {self.task!r}")
        missing = [s for s in SPLITS if s not in self.splits]
        if missing:
            raise ValueError(f"missing splits {missing}; a FederatedDataset needs {SPLITS}")
        sizes = {s: sp.counts.numel() for s, sp in self.splits.items()}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"splits disagree on the number of clients: {sizes}")
        if self.task == "classification" and self.num_classes is None:
            raise ValueError("a classification dataset needs num_classes")

    @property
    def num_clients(self) -> int:
        return int(self.splits["train"].counts.numel())

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.splits["train"].x.shape[2:])

    @property
    def input_kind(self) -> str:
        r"""What a client model takes: ``"tensor"`` (a batch of samples) or
        ``"graph"`` (a client's graph and the nodes to predict,
        :class:`~pyg_fedgraph.data.GraphFederatedDataset`)."""
        return "tensor"

    @property
    def objective(self) -> Objective:
        r"""The loss and metrics of this dataset's task, the one place every
        entry point (simulator, Flower client, tuning) takes them from.
        Datasets with a loss of their own override it (the traffic datasets'
        masked loss)."""
        return objective_for(self.task)

    def num_samples(self, split: str = "train") -> Tensor:
        r"""Samples per client in ``split``, shape :math:`(N,)`."""
        return self.splits[split].counts

    def batch(self, split: str, index: Tensor, clients: Tensor | None = None
              ) -> tuple[Tensor, Tensor]:
        r"""Stacked mini-batches: sample ``index[s, b]`` of client ``clients[s]``.

        Args:
            split (str): ``"train"``, ``"val"`` or ``"test"``.
            index (torch.Tensor): :math:`(S, B)` row indices (padding rows may be
                any valid index; the caller masks them).
            clients (torch.Tensor, optional): :math:`(S,)` client ids (default: all).
        """
        return self.splits[split].gather(index, clients)

    def batch_weight(self, split: str, index: Tensor, clients: Tensor | None = None
                     ) -> Tensor | None:
        r"""Evaluation weights :math:`(S, B)` of the rows :meth:`batch`
        returns, or :obj:`None` when ``split`` weighs all samples equally
        (see :class:`ClientSplit`)."""
        return self.splits[split].gather_weight(index, clients)

    @property
    def device(self) -> torch.device:
        r"""Where the samples are (:meth:`to` moves them)."""
        return self.splits["train"].x.device

    def to(self, device: torch.device | str) -> FederatedDataset:
        r"""A copy whose samples live on ``device`` (moved once, so that
        training reads its batches there); the same object when they already
        do. Sample counts, the prior graph and the metadata stay where they
        are (the round engine places what it computes with)."""
        device = torch.device(device)
        if self.device == device or (device.index is None and self.device.type == device.type):
            return self
        return dataclasses.replace(self, splits={s: sp.to(device)
                                                 for s, sp in self.splits.items()})

    def subset(self, clients: Tensor) -> FederatedDataset:
        r"""The dataset restricted to ``clients`` (prior graph restricted too)."""
        from torch_geometric.utils import subgraph
        splits = {s: ClientSplit(sp.x[clients.to(sp.x.device)], sp.y[clients.to(sp.x.device)],
                                 sp.counts[clients],
                                 None if sp.weight is None
                                 else sp.weight[clients.to(sp.weight.device)])
                  for s, sp in self.splits.items()}
        ei, ew = self.edge_index, self.edge_weight
        if ei is not None:
            ei, ew = subgraph(clients, ei, ew, relabel_nodes=True, num_nodes=self.num_clients)
        labels = None if self.client_labels is None else self.client_labels[clients]
        return FederatedDataset(self.name, self.task, splits, self.num_classes, ei, ew,
                                labels, dict(self.info), self.defaults)

    def __repr__(self) -> str:
        n = {s: int(sp.counts.sum()) for s, sp in self.splits.items()}
        return (f"{self.__class__.__name__}({self.name}, clients={self.num_clients}, "
                f"task={self.task}, samples={n})")
