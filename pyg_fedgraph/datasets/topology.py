r"""Clients grouped by a known label topology (FedCEDAR's case study), and a
callback scoring a strategy's clustering against those groups."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.partition import build_federated_dataset
from pyg_fedgraph.datasets.mnist import read_mnist
from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.utils.recovery import partition_scores

__all__ = ["topology", "ring_topology", "topology_edges", "rand_index_callback",
           "TopologyBase", "TOPOLOGY_BASES"]

_NUM_CLASSES = 10  # digits, MNIST and Fashion-MNIST all have ten classes

#: The labelled images a topology is built on (see :func:`topology`).
TopologyBase = Literal["digits", "mnist", "fashion-mnist"]
TOPOLOGY_BASES = ("digits", "mnist", "fashion-mnist")


def ring_topology(num_groups: int) -> list[list[int]]:
    r"""The default label topology of :func:`topology`: a ring of groups in
    which group :math:`g` holds labels :math:`\{2g, 2g + 1, (2g + 2) \bmod 2G\}`,
    so neighbours on the ring share one label and every group has one label
    of its own.

    Args:
        num_groups (int): groups :math:`G`, :math:`1 \leq G \leq 5` (the ring
            uses :math:`2G` of the 10 digit classes).
    """
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or \
            not 1 <= num_groups <= _NUM_CLASSES // 2:
        raise ValueError(f"num_groups must be an int in [1, {_NUM_CLASSES // 2}] for the ring "
                         f"topology on {_NUM_CLASSES} classes, got {num_groups!r}; pass "
                         f"groups= to choose the label sets yourself")
    m = 2 * num_groups
    return [sorted({2 * g, 2 * g + 1, (2 * g + 2) % m}) for g in range(num_groups)]


def topology_edges(groups: Sequence[Sequence[int]]) -> list[list[int]]:
    r"""Pairs :math:`[a, b]` (:math:`a < b`) of groups that share a label:
    the edges of the topology graph (FedCEDAR, Fig. 2: "If there are common
    labels among a pair of nodes, an edge connects them")."""
    sets = [set(int(c) for c in g) for g in groups]
    return [[a, b] for a in range(len(sets)) for b in range(a + 1, len(sets))
            if sets[a] & sets[b]]


def _check_groups(groups: Sequence[Sequence[int]]) -> list[list[int]]:
    if isinstance(groups, (str, bytes)) or len(groups) == 0:
        raise ValueError(f"groups must be a non-empty list of label lists, got {groups!r}")
    out = []
    for g, labels in enumerate(groups):
        if isinstance(labels, (str, bytes, int)) or len(labels) == 0:
            raise ValueError(f"group {g} must be a non-empty list of labels, got {labels!r}")
        for c in labels:
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < _NUM_CLASSES:
                raise ValueError(f"group {g} holds label {c!r}; labels must be ints in "
                                 f"[0, {_NUM_CLASSES})")
        out.append(sorted(set(labels)))
    return out


def _base_samples(base: str, root: str | Path | None, download: bool, image: bool
                  ) -> tuple[Tensor, Tensor, str]:
    r"""The inputs (uint8 pixels for the IDX data sets, floats in
    :math:`[0, 1]` for digits), labels :math:`(S,)` and source of ``base``."""
    if base not in TOPOLOGY_BASES:
        raise ValueError(f"unknown base {base!r}; choose one of {TOPOLOGY_BASES}")
    if base == "digits":
        if root is not None or download:
            raise ValueError("root= and download= are for base='mnist' or 'fashion-mnist'; "
                             "base='digits' reads scikit-learn's bundled copy")
        from sklearn.datasets import load_digits

        raw = load_digits()
        x = torch.as_tensor(raw.data, dtype=torch.float32) / 16.0
        y = torch.as_tensor(raw.target, dtype=torch.long)
        return (x.view(-1, 1, 8, 8) if image else x), y, \
            "sklearn.datasets.load_digits (UCI)"
    arrays = read_mnist(root, "mnist" if base == "mnist" else "fashion-mnist",
                        download=download)
    x = torch.from_numpy(np.concatenate([arrays.train_images, arrays.test_images]))
    y = torch.from_numpy(np.concatenate([arrays.train_labels, arrays.test_labels]))
    x = x.unsqueeze(1) if image else x.flatten(1)
    return x, y, f"{base} IDX files in {arrays.folder} (official train and test sets pooled)"


@register_dataset("topology")
def topology(num_groups: int = 3, num_clients: int = 30,
             groups: Sequence[Sequence[int]] | None = None, seed: int = 0,
             fractions: Sequence[float] = (0.7, 0.1, 0.2), image: bool = False,
             base: TopologyBase = "digits", root: str | Path | None = None,
             download: bool = False, max_train_per_client: int | None = None
             ) -> FederatedDataset:
    r"""The structured data of FedCEDAR's case study from "Rethinking
    Personalized Federated Learning with Clustering-based Dynamic Graph
    Propagation" (Wang et al., Sec. 4.4, Fig. 2), built on the scikit-learn
    digits (the default: it works offline), on MNIST (the paper's) or on
    Fashion-MNIST read from their IDX files.

    Each node :math:`g` of a topology owns a set of labels :math:`L_g`, and
    two nodes are linked when they share a label. The :math:`N` clients are
    split into :math:`G` contiguous groups of sizes differing by at most one
    (the paper: 20 clients per node); every client of group :math:`g` sees
    only the labels :math:`L_g`. The samples of class :math:`c` are shuffled
    and dealt evenly to all clients whose group holds :math:`c`:

    .. math::
        \mathcal{D}_n \subseteq \{(x, y) : y \in L_{g(n)}\}, \qquad
        g(n) = \lfloor n G / N \rfloor .

    Classes held by no group are unused. ``client_labels`` is each client's
    group, the ground truth a clustering of the clients should recover
    (score it with :func:`rand_index_callback`). ``info["groups"]`` holds the
    label sets and ``info["topology_edges"]`` the node pairs sharing a label.
    With ``base="mnist"`` or ``"fashion-mnist"`` the official training and
    test sets are pooled (70,000 images; the paper does not say which MNIST
    images it dealt) and pixels are scaled to :math:`[0, 1]`, as
    :func:`~pyg_fedgraph.datasets.fashion_mnist` does. The data set carries
    no training protocol of its own: runs built by
    :mod:`pyg_fedgraph.experiment` default to the digits' small MLP unless
    they choose a model.

    Args:
        num_groups (int, optional): nodes :math:`G` of the default ring
            topology (:func:`ring_topology`); ignored when ``groups`` is
            given (default: :obj:`3`, the paper's Topology 1).
        num_clients (int, optional): clients :math:`N`, at least one per
            group (default: :obj:`30`).
        groups (list of lists, optional): the label set of each node, e.g.
            ``[[0, 1, 2], [2, 3, 4], [4, 5, 0]]`` (default: :obj:`None`, the
            ring).
        seed (int, optional): seed of the dealing and the splits
            (default: :obj:`0`).
        fractions (tuple, optional): per-client ``(train, val, test)`` shares
            (default: :obj:`(0.7, 0.1, 0.2)`).
        image (bool, optional): inputs as images (:math:`(1, 8, 8)` digits,
            :math:`(1, 28, 28)` MNIST-like) instead of flat vectors
            (:math:`(64,)`, :math:`(784,)`) (default: :obj:`False`).
        base (str, optional): the labelled images: ``"digits"``
            (scikit-learn's 1,797 :math:`8 \times 8` digits), ``"mnist"`` or
            ``"fashion-mnist"`` (:func:`~pyg_fedgraph.datasets.read_mnist`)
            (default: :obj:`"digits"`).
        root (str or Path, optional): the folder of the four IDX files of
            ``"mnist"`` or ``"fashion-mnist"`` (directly or in torchvision's
            layout); :obj:`None` looks in Debian's
            ``/usr/share/datasets/fashion-mnist`` for Fashion-MNIST
            (default: :obj:`None`).
        download (bool, optional): fetch missing IDX files into ``root``
            with their checksums (default: :obj:`False`).
        max_train_per_client (int, optional): most training samples a
            client keeps (a random subset of its training split; validation
            and test are not capped) (default: :obj:`None`, all).

    Raises:
        FileNotFoundError: if the IDX files of ``base`` are not found (the
            message says how to get them).
        ValueError: on an unknown ``base``, a bad topology, or ``root`` /
            ``download`` with ``base="digits"``.
    """
    groups = _check_groups(ring_topology(num_groups) if groups is None else groups)
    num_groups = len(groups)
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or \
            num_clients < num_groups:
        raise ValueError(f"num_clients must be an int >= the {num_groups} groups, "
                         f"got {num_clients!r}")
    x, y, source = _base_samples(base, root, download, image)

    group_of = torch.arange(num_clients) * num_groups // num_clients
    holds = torch.zeros(num_groups, _NUM_CLASSES, dtype=torch.bool)
    for g, labels in enumerate(groups):
        holds[g, labels] = True
    generator = torch.Generator().manual_seed(seed)
    owner = torch.full((y.numel(),), -1, dtype=torch.long)
    for c in range(_NUM_CLASSES):  # ten classes, never a loop over clients
        holders = holds[group_of, c].nonzero().view(-1)
        if holders.numel() == 0:
            continue
        index = (y == c).nonzero().view(-1)
        index = index[torch.randperm(index.numel(), generator=generator)]
        if index.numel() < holders.numel():
            raise ValueError(f"class {c} has {index.numel()} samples for {holders.numel()} "
                             f"clients; use fewer clients")
        sizes = torch.full((holders.numel(),), index.numel() // holders.numel(),
                           dtype=torch.long)
        sizes[:index.numel() % holders.numel()] += 1
        owner[index] = holders.repeat_interleave(sizes)
    used = (owner >= 0).nonzero().view(-1)
    order = used[torch.argsort(owner[used], stable=True)]
    parts = list(torch.split(order, torch.bincount(owner[used], minlength=num_clients).tolist()))
    dataset = build_federated_dataset(
        "topology", x, y, parts, task="classification", num_classes=_NUM_CLASSES,
        fractions=fractions, generator=generator, client_labels=group_of,
        max_train_per_client=max_train_per_client,
        info={"synthetic": False, "partition": "topology", "groups": groups,
              "topology_edges": topology_edges(groups), "base": base, "source": source})
    if x.dtype != torch.uint8:
        return dataset
    # Packed as uint8, scaled per split: peak memory stays near one float copy.
    return replace(dataset, splits={
        split: ClientSplit(sp.x.float().div_(255.0), sp.y, sp.counts, sp.weight)
        for split, sp in dataset.splits.items()})


def rand_index_callback(scores: list, *, adjusted: bool = False
                        ) -> Callable[[Any, Any], None]:
    r"""A :class:`~pyg_fedgraph.simulation.Simulator` callback scoring the
    strategy's latest clustering against the dataset's ``client_labels`` with
    the Rand index (FedCEDAR, Sec. 4.4, Fig. 3), over the clients clustered
    in that round: scikit-learn's :func:`~sklearn.metrics.rand_score`, or
    :func:`~sklearn.metrics.adjusted_rand_score` with ``adjusted=True``.

    After each evaluated round it appends
    ``{"round": t, "rand_index": score, "num_clustered": B}`` to ``scores``
    and sets ``record.extra["rand_index"]`` (a ``history.csv`` column). The
    strategy must have a ``last_assignment()`` method returning the clustered
    client ids and their clusters (e.g.
    :class:`~pyg_fedgraph.strategies.fedcedar.FedCEDAR`). The scores are
    :func:`~pyg_fedgraph.utils.partition_scores`; runs built by
    :mod:`pyg_fedgraph.experiment` record both with
    :class:`~pyg_fedgraph.simulation.recovery.GroupRecoveryCallback`, which also
    reads strategies that have only a collaboration graph.

    Args:
        scores (list): list the caller owns; one dict is appended per round.
        adjusted (bool, optional): score with the adjusted Rand index
            instead (default: :obj:`False`).
    """
    key = "adjusted_rand_index" if adjusted else "rand_index"

    def callback(simulator: Any, record: Any) -> None:
        strategy = simulator.strategy
        if not hasattr(strategy, "last_assignment"):
            raise TypeError(f"strategy {type(strategy).__name__} has no last_assignment(); "
                            f"the Rand index needs a clustering strategy such as fedcedar")
        truth = simulator.dataset.client_labels
        if truth is None:
            raise ValueError(f"dataset {simulator.dataset.name!r} has no client_labels to "
                             f"score the clustering against; use the 'topology' dataset")
        clients, assignment = strategy.last_assignment()
        score = partition_scores(assignment, truth.cpu()[clients.cpu()])[key]
        scores.append({"round": record.round, key: score, "num_clustered": clients.numel()})
        record.extra[key] = score

    return callback
