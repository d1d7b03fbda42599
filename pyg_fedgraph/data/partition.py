r"""Partitioners: how a centralized data set is dealt out to :math:`N` clients.

Every function here is pure: tensors in, index tensors out. All randomness
comes from the explicit ``generator`` argument (a :class:`torch.Generator`),
never from a global random state, so one seed reproduces one federation.

The heterogeneity settings follow the papers restated in ``SPEC.md``
("Data heterogeneity"): IID, pathological (:math:`c` classes per client,
McMahan et al., 2017), Dirichlet (:math:`q \sim \mathrm{Dir}_N(\beta)` per
class) and the grouped case study of FedAGHN (Song et al., Sec. 6.1).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from pyg_fedgraph.data.federated_dataset import (
    SPLITS,
    ClientSplit,
    DatasetDefaults,
    FederatedDataset,
    Task,
)
from pyg_fedgraph.typing import PartitionName

__all__ = [
    "iid_partition",
    "pathological_partition",
    "dirichlet_partition",
    "group_partition",
    "partition_labels",
    "split_client",
    "build_federated_dataset",
    "dominant_class",
    "with_dominant_labels",
    "PARTITIONS",
    "PartitionName",
    "PAIRINGS",
    "Pairing",
]

logger = logging.getLogger(__name__)

PARTITIONS = ("iid", "pathological", "dirichlet", "group")
Pairing = Literal["random", "fixed"]
PAIRINGS = ("random", "fixed")


# --------------------------------------------------------------------------- helpers
def _as_labels(labels: Tensor) -> Tensor:
    labels = torch.as_tensor(labels)
    if labels.dim() != 1:
        raise ValueError(f"labels must be a 1-D tensor of class ids, got shape "
                         f"{tuple(labels.shape)}")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"labels must hold integer class ids, got dtype {labels.dtype}")
    return labels.long()


def _check_num_clients(num_samples: int, num_clients: int) -> None:
    if num_clients < 1:
        raise ValueError(f"num_clients must be at least 1, got {num_clients}")
    if num_samples < num_clients:
        raise ValueError(f"cannot deal {num_samples} samples to {num_clients} clients: every "
                         f"client needs at least one sample; use fewer clients")


def _owner_to_parts(owner: Tensor, num_clients: int) -> list[Tensor]:
    r"""Turns ``owner[k]`` (client of sample ``k``, ``-1`` = unused) into
    sorted index tensors, one per client, without a loop over clients."""
    used = (owner >= 0).nonzero().view(-1)
    order = used[torch.argsort(owner[used], stable=True)]
    counts = torch.bincount(owner[used], minlength=num_clients)
    return list(torch.split(order, counts.tolist()))


def _check_nonempty(parts: Sequence[Tensor], hint: str) -> None:
    for i, part in enumerate(parts):
        if part.numel() == 0:
            raise ValueError(f"client {i} received no samples; {hint}")


def _numpy_rng(generator: torch.Generator) -> np.random.Generator:
    r"""A NumPy generator seeded from ``generator`` (for the Dirichlet draw,
    which :mod:`torch` cannot take a generator for)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return np.random.default_rng(seed)


def _deal_evenly(index: Tensor, clients: Tensor, owner: Tensor) -> None:
    r"""Writes into ``owner`` an (already shuffled) ``index`` cut into
    ``len(clients)`` pieces whose sizes differ by at most one."""
    sizes = torch.full((clients.numel(),), index.numel() // clients.numel(), dtype=torch.long)
    sizes[:index.numel() % clients.numel()] += 1
    owner[index] = clients.repeat_interleave(sizes)


# --------------------------------------------------------------------------- partitioners
def iid_partition(num_samples: int, num_clients: int, *, generator: torch.Generator,
                  balanced: bool = False) -> list[Tensor]:
    r"""IID partition: every client sees the same label distribution.

    By default (SPEC.md, "IID") each sample goes to a client drawn uniformly at
    random, so client sizes follow a multinomial law:

    .. math::
        k(s) \sim \mathcal{U}\{0, \dots, N - 1\} \quad \text{for every sample } s.

    With ``balanced=True`` the samples are shuffled and cut into :math:`N`
    pieces whose sizes differ by at most one.

    Args:
        num_samples (int): size of the centralized data set.
        num_clients (int): number of clients :math:`N`.
        generator (torch.Generator): source of randomness.
        balanced (bool, optional): equal-size random split instead of a uniform
            random client per sample. (default: :obj:`False`)

    Returns:
        A list of :math:`N` sorted index tensors, pairwise disjoint, covering
        ``range(num_samples)``.

    Raises:
        ValueError: if ``num_clients > num_samples`` or a client ends up empty
            (only possible with ``balanced=False`` and very few samples).
    """
    _check_num_clients(num_samples, num_clients)
    if balanced:
        owner = torch.empty(num_samples, dtype=torch.long)
        _deal_evenly(torch.randperm(num_samples, generator=generator), torch.arange(num_clients),
                     owner)
    else:
        owner = torch.randint(0, num_clients, (num_samples,), generator=generator)
    parts = _owner_to_parts(owner, num_clients)
    _check_nonempty(parts, "with so few samples per client use balanced=True or fewer clients")
    return parts


def _pathological_classes(num_classes: int, num_clients: int, classes_per_client: int,
                          generator: torch.Generator) -> Tensor:
    r"""Round-robin class assignment, shape :math:`(N, c)`.

    The :math:`N c` slots are filled with consecutive random permutations of
    the classes, client :math:`i` taking slots :math:`[ic, (i+1)c)`: every
    class is used :math:`\lfloor Nc/C \rfloor` or :math:`\lceil Nc/C \rceil`
    times. When a client's slots straddle two permutations, the classes it
    already holds are moved to the end of the new permutation, so each client
    holds :math:`c` distinct classes.
    """
    total = num_clients * classes_per_client
    slots: list[int] = []
    while len(slots) < total:
        perm = torch.randperm(num_classes, generator=generator).tolist()
        held = set(slots[len(slots) - len(slots) % classes_per_client:])
        slots.extend([k for k in perm if k not in held] + [k for k in perm if k in held])
    return torch.tensor(slots[:total], dtype=torch.long).view(num_clients, classes_per_client)


def _fixed_classes(num_classes: int, num_clients: int, classes_per_client: int) -> Tensor:
    r"""Fixed class blocks, shape :math:`(N, c)`: client :math:`i` holds
    classes :math:`c\,(i \bmod G) + j`, :math:`j < c`, with :math:`G = C / c`
    blocks (pFedGraph's released code, partition ``"noniid-skew"``)."""
    if num_classes % classes_per_client != 0:
        raise ValueError(f"pairing='fixed' cuts the {num_classes} classes into blocks of "
                         f"classes_per_client={classes_per_client}, which must divide "
                         f"{num_classes}; choose a divisor or pairing='random'")
    block = torch.arange(num_clients) % (num_classes // classes_per_client)
    return block.unsqueeze(1) * classes_per_client + torch.arange(classes_per_client)


def pathological_partition(labels: Tensor, num_clients: int, classes_per_client: int, *,
                           generator: torch.Generator, pairing: Pairing = "random"
                           ) -> list[Tensor]:
    r"""Pathological non-IID partition: each client holds exactly :math:`c`
    classes (McMahan et al., "Communication-Efficient Learning of Deep
    Networks from Decentralized Data", 2017; the pathological setting of
    pFedGraph and FedAGHN).

    With ``pairing="random"`` classes are dealt round-robin over random
    permutations so that every class is used (when :math:`Nc \ge C`) and
    class usage differs by at most one. With ``pairing="fixed"`` the classes
    are cut into :math:`G = C / c` consecutive blocks and client :math:`i`
    holds block :math:`i \bmod G`, as in pFedGraph's released code
    (partition ``"noniid-skew"``): with 10 classes, 2 per client and 10
    clients, clients :math:`i` and :math:`i + 5` both hold classes
    :math:`(2i, 2i + 1)`. Either way the samples of class :math:`k` are
    shuffled and split evenly among the :math:`m_k` clients holding it:

    .. math::
        |D_i| = \sum_{k \in \mathcal{C}_i} \frac{n_k}{m_k},
        \qquad |\mathcal{C}_i| = c.

    Args:
        labels (torch.Tensor): class id of every sample :math:`(S,)`.
        num_clients (int): number of clients :math:`N`.
        classes_per_client (int): classes per client :math:`c` (papers: 2 for
            10-class data, 20 for 100-class data).
        generator (torch.Generator): source of randomness.
        pairing (str, optional): ``"random"`` or ``"fixed"`` class sets (the
            ``"k"``-th class is the :math:`k`-th smallest label).
            (default: :obj:`"random"`)

    Returns:
        A list of :math:`N` sorted, pairwise disjoint index tensors. They cover
        all samples when every class is held (:math:`Nc \ge C` for
        ``"random"``, :math:`N \ge C / c` for ``"fixed"``); otherwise the
        classes no client holds are left out (a warning is logged).

    Raises:
        ValueError: if ``classes_per_client`` is not in :math:`[1, C]` (or,
            for ``"fixed"``, does not divide :math:`C`), there are more
            clients than samples, or a client ends up empty (a class with
            fewer samples than clients holding it).
    """
    labels = _as_labels(labels)
    _check_num_clients(labels.numel(), num_clients)
    classes, y = torch.unique(labels, return_inverse=True)
    num_classes = classes.numel()
    if not 1 <= classes_per_client <= num_classes:
        raise ValueError(f"classes_per_client={classes_per_client} but the labels hold "
                         f"{num_classes} classes; choose a value in [1, {num_classes}]")
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; choose one of {PAIRINGS}")
    if pairing == "fixed":
        held = _fixed_classes(num_classes, num_clients, classes_per_client)
    else:
        held = _pathological_classes(num_classes, num_clients, classes_per_client, generator)
    unused = num_classes - held.unique().numel()
    if unused:
        logger.warning("%d clients x %d classes each (pairing=%s) leave %d of the %d classes "
                       "unused; their samples are left out", num_clients, classes_per_client,
                       pairing, unused, num_classes)
    client_of_slot = torch.arange(num_clients).repeat_interleave(classes_per_client)
    owner = torch.full((labels.numel(),), -1, dtype=torch.long)
    # Loop over classes (not clients): this is one-off data preparation.
    for k in range(num_classes):
        holders = client_of_slot[held.view(-1) == k]
        if holders.numel() == 0:
            continue
        index = (y == k).nonzero().view(-1)
        _deal_evenly(index[torch.randperm(index.numel(), generator=generator)], holders, owner)
    parts = _owner_to_parts(owner, num_clients)
    _check_nonempty(parts, "its classes have fewer samples than clients holding them; "
                           "use fewer clients or more classes_per_client")
    return parts


def dirichlet_partition(labels: Tensor, num_clients: int, beta: float, *,
                        generator: torch.Generator, min_size: int = 10,
                        max_retries: int = 100) -> list[Tensor]:
    r"""Dirichlet label-skew partition ("practical" setting of FedAGHN and
    pFedGraph; Hsu et al., "Measuring the Effects of Non-Identical Data
    Distribution", 2019).

    For each class :math:`k` draw proportions over the clients and cut that
    class's shuffled samples accordingly:

    .. math::
        \mathbf{q}_k \sim \mathrm{Dir}_N(\beta), \qquad
        |D_i \cap \{y = k\}| \approx q_{k,i}\, n_k.

    Smaller :math:`\beta` means more heterogeneous clients (papers use
    :math:`\beta \in \{0.1, 0.3, 0.5\}`). The whole draw is repeated while
    some client gets fewer than ``min_size`` samples (as NIID-Bench does).

    Args:
        labels (torch.Tensor): class id of every sample :math:`(S,)`.
        num_clients (int): number of clients :math:`N`.
        beta (float): concentration :math:`\beta > 0`.
        generator (torch.Generator): source of randomness.
        min_size (int, optional): fewest samples a client may get.
            (default: :obj:`10`)
        max_retries (int, optional): draws tried before giving up.
            (default: :obj:`100`)

    Returns:
        A list of :math:`N` sorted index tensors, pairwise disjoint, covering
        all samples.

    Raises:
        ValueError: if ``beta <= 0``, ``min_size`` cannot be met even in
            principle, or no draw out of ``max_retries`` met it.
    """
    labels = _as_labels(labels)
    num_samples = labels.numel()
    _check_num_clients(num_samples, num_clients)
    if not beta > 0:
        raise ValueError(f"the Dirichlet concentration beta must be positive, got {beta}")
    if min_size < 1:
        raise ValueError(f"min_size must be at least 1 (no empty client), got {min_size}")
    if min_size * num_clients > num_samples:
        raise ValueError(f"{num_clients} clients x min_size={min_size} exceeds the "
                         f"{num_samples} samples; lower min_size or use fewer clients")
    if max_retries < 1:
        raise ValueError(f"max_retries must be at least 1, got {max_retries}")
    rng = _numpy_rng(generator)
    y = labels.numpy()
    by_class = [np.flatnonzero(y == k) for k in np.unique(y)]
    for _ in range(max_retries):
        owner = np.empty(num_samples, dtype=np.int64)
        for index in by_class:
            q = rng.dirichlet(np.full(num_clients, beta))
            cuts = np.round(np.cumsum(q) * index.size).astype(np.int64)
            cuts[-1] = index.size
            sizes = np.diff(cuts, prepend=0)
            owner[rng.permutation(index)] = np.repeat(np.arange(num_clients), sizes)
        sizes = np.bincount(owner, minlength=num_clients)
        if sizes.min() >= min_size:
            return _owner_to_parts(torch.from_numpy(owner), num_clients)
    raise ValueError(f"after {max_retries} Dirichlet draws (beta={beta}) client "
                     f"{int(sizes.argmin())} still got {int(sizes.min())} < min_size={min_size} "
                     f"samples; raise beta, lower min_size or use fewer clients")


def group_partition(labels: Tensor, num_clients: int, num_groups: int = 5,
                    iid_share: float = 0.2, *, generator: torch.Generator
                    ) -> tuple[list[Tensor], Tensor]:
    r"""Grouped partition of the FedAGHN case study (Song et al., Sec. 6.1,
    following Xu et al., 2023).

    A random :math:`1 - \text{iid\_share}` of the data (80% in the paper) is
    divided into ``num_groups`` groups by class; clients are divided into the
    same number of groups and each client group shares the data of its class
    group, so its clients have the same dominant classes. The remaining
    ``iid_share`` of the data is dealt to all clients IID:

    .. math::
        D_i = \underbrace{D^{dom}_{g(i)} / |\{j : g(j) = g(i)\}|}_{\text{dominant}}
        \;\cup\; \underbrace{D^{iid} / N}_{\text{shared}}.

    Groups are contiguous blocks: client :math:`i` is in group
    :math:`\lfloor i G / N \rfloor` and class :math:`k` (the :math:`k`-th
    smallest label) in class group :math:`\lfloor k G / C \rfloor`, so with
    :math:`C = 10, G = 5` group 0 owns classes 0 and 1. Within a group (and
    for the IID share) samples are shuffled and dealt in equal pieces.

    Args:
        labels (torch.Tensor): class id of every sample :math:`(S,)`.
        num_clients (int): number of clients :math:`N`.
        num_groups (int, optional): groups :math:`G`. (default: :obj:`5`)
        iid_share (float, optional): share of the data dealt IID, in
            :math:`[0, 1)`. (default: :obj:`0.2`)
        generator (torch.Generator): source of randomness.

    Returns:
        ``(parts, group)``: :math:`N` sorted, pairwise disjoint index tensors
        covering all samples, and the group of every client :math:`(N,)`.
    """
    labels = _as_labels(labels)
    num_samples = labels.numel()
    _check_num_clients(num_samples, num_clients)
    classes, y = torch.unique(labels, return_inverse=True)
    num_classes = classes.numel()
    if not 1 <= num_groups <= min(num_clients, num_classes):
        raise ValueError(f"num_groups={num_groups} must be in [1, min(num_clients, num_classes)]"
                         f" = [1, {min(num_clients, num_classes)}] ({num_clients} clients, "
                         f"{num_classes} classes): every group needs a client and a class of "
                         "its own; use fewer groups or more clients")
    if not 0.0 <= iid_share < 1.0:
        raise ValueError(f"iid_share must be in [0, 1), got {iid_share}")
    group = torch.arange(num_clients) * num_groups // num_clients
    class_group = torch.arange(num_classes) * num_groups // num_classes
    perm = torch.randperm(num_samples, generator=generator)
    num_iid = round(iid_share * num_samples)
    iid, dominant = perm[:num_iid], perm[num_iid:]
    owner = torch.empty(num_samples, dtype=torch.long)
    _deal_evenly(iid, torch.arange(num_clients), owner)
    dominant_group = class_group[y[dominant]]
    for g in range(num_groups):
        _deal_evenly(dominant[dominant_group == g], (group == g).nonzero().view(-1), owner)
    parts = _owner_to_parts(owner, num_clients)
    _check_nonempty(parts, "use fewer clients or a larger iid_share")
    return parts, group


def partition_labels(labels: Tensor, num_clients: int, partition: PartitionName, *,
                     generator: torch.Generator, classes_per_client: int = 2, beta: float = 0.5,
                     min_size: int = 10, num_groups: int = 5, iid_share: float = 0.2,
                     pairing: Pairing = "random") -> tuple[list[Tensor], Tensor | None]:
    r"""Dispatches to one of the partitioners by name.

    Args:
        labels (torch.Tensor): class id of every sample :math:`(S,)`.
        num_clients (int): number of clients :math:`N`.
        partition (str): ``"iid"``, ``"pathological"``, ``"dirichlet"`` or
            ``"group"``.
        generator (torch.Generator): source of randomness.
        classes_per_client (int, optional): for ``"pathological"``. (default: :obj:`2`)
        beta (float, optional): for ``"dirichlet"``. (default: :obj:`0.5`)
        min_size (int, optional): for ``"dirichlet"``. (default: :obj:`10`)
        num_groups (int, optional): for ``"group"``. (default: :obj:`5`)
        iid_share (float, optional): for ``"group"``. (default: :obj:`0.2`)
        pairing (str, optional): for ``"pathological"``: ``"random"`` or
            ``"fixed"`` class sets. (default: :obj:`"random"`)

    Returns:
        ``(parts, group)`` where ``group`` is the client group :math:`(N,)`
        for ``"group"`` and :obj:`None` otherwise.
    """
    labels = _as_labels(labels)
    if pairing != "random" and partition != "pathological":
        raise ValueError(f"pairing={pairing!r} applies to the pathological partition only, "
                         f"got partition={partition!r}; drop pairing or use 'pathological'")
    if partition == "iid":
        return iid_partition(labels.numel(), num_clients, generator=generator), None
    if partition == "pathological":
        return pathological_partition(labels, num_clients, classes_per_client,
                                      generator=generator, pairing=pairing), None
    if partition == "dirichlet":
        return dirichlet_partition(labels, num_clients, beta, generator=generator,
                                   min_size=min_size), None
    if partition == "group":
        return group_partition(labels, num_clients, num_groups, iid_share, generator=generator)
    raise ValueError(f"unknown partition {partition!r}; choose one of {PARTITIONS}")


# --------------------------------------------------------------------------- splits
def _check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    if len(fractions) != 3:
        raise ValueError(f"fractions must be (train, val, test), got {len(fractions)} values")
    if any(f < 0 for f in fractions):
        raise ValueError(f"fractions must be non-negative, got {tuple(fractions)}")
    total = float(sum(fractions))
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"fractions must sum to 1, got {tuple(fractions)} (sum {total:g})")
    if fractions[0] <= 0:
        raise ValueError(f"the train fraction must be positive, got {tuple(fractions)}")
    return (fractions[0] / total, fractions[1] / total, fractions[2] / total)


def _split_sizes(n: int, fractions: tuple[float, float, float]) -> list[int]:
    r"""Largest-remainder rounding of ``n * fractions``; then each split with a
    positive fraction gets at least one sample when ``n`` allows it."""
    raw = [f * n for f in fractions]
    sizes = [math.floor(r) for r in raw]
    by_remainder = sorted(range(3), key=lambda k: raw[k] - sizes[k], reverse=True)
    for k in by_remainder[:n - sum(sizes)]:
        sizes[k] += 1
    positive = [k for k in range(3) if fractions[k] > 0]
    if n >= len(positive):
        for k in positive:
            if sizes[k] == 0:
                sizes[max(range(3), key=lambda j: sizes[j])] -= 1
                sizes[k] += 1
    return sizes


def split_client(indices: Tensor, fractions: Sequence[float] = (0.7, 0.1, 0.2), *,
                 generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    r"""Random train / val / test split of one client's samples (FedAGHN:
    7:1:2 per client).

    Sizes are :math:`n f` rounded by largest remainder, so they sum to
    :math:`n`. A client with at least as many samples as there are positive
    fractions (3 for the default) gets at least one sample in each of those
    splits.

    Args:
        indices (torch.Tensor): the client's sample indices :math:`(n,)`.
        fractions (tuple, optional): ``(train, val, test)`` shares summing to 1;
            val or test may be 0. (default: :obj:`(0.7, 0.1, 0.2)`)
        generator (torch.Generator): source of randomness.

    Returns:
        ``(train, val, test)`` index tensors, disjoint, covering ``indices``.
    """
    fractions = _check_fractions(fractions)
    indices = torch.as_tensor(indices).view(-1)
    sizes = _split_sizes(indices.numel(), fractions)
    shuffled = indices[torch.randperm(indices.numel(), generator=generator)]
    train, val, test = torch.split(shuffled, sizes)
    return train, val, test


def dominant_class(split: ClientSplit, num_classes: int) -> Tensor:
    r"""Most frequent class of each client in ``split`` :math:`(N,)`;
    :obj:`-1` for a client with no sample in it (ties: the smallest class)."""
    y = split.y.long()
    if y.dim() != 2:
        raise ValueError(f"dominant_class needs scalar class targets (N, n_max), got shape "
                         f"{tuple(y.shape)}")
    valid = split.sample_mask().to(y.device)
    hist = torch.zeros(y.size(0), num_classes, dtype=torch.long, device=y.device)
    hist.scatter_add_(1, y, valid.long())
    out = hist.argmax(dim=1)
    out[split.counts == 0] = -1
    return out


def build_federated_dataset(name: str, x: Tensor, y: Tensor, partition: Sequence[Tensor], *,
                            task: Task = "classification", num_classes: int | None = None,
                            fractions: Sequence[float] = (0.7, 0.1, 0.2),
                            generator: torch.Generator, edge_index: Tensor | None = None,
                            edge_weight: Tensor | None = None,
                            client_labels: Tensor | None = None,
                            info: dict | None = None,
                            max_train_per_client: int | None = None,
                            max_val_per_client: int | None = None,
                            max_test_per_client: int | None = None,
                            defaults: DatasetDefaults | None = None) -> FederatedDataset:
    r"""Splits every client's samples with :func:`split_client` and packs the
    result into a :class:`~pyg_fedgraph.data.FederatedDataset`.

    The caps keep a random subset of each client's split after splitting
    (the first samples of the already shuffled split, so no extra random
    draw): a client whose split :math:`s` holds :math:`n_s` samples by
    ``fractions`` keeps :math:`\min(n_s, \text{cap}_s)` of them.
    pFedGraph (Appendix C.1.3) samples 3,072 training samples per client
    (``max_train_per_client=3072``).

    Args:
        name (str): dataset name.
        x (torch.Tensor): all inputs :math:`(S, *F)`.
        y (torch.Tensor): all targets :math:`(S, *T)`.
        partition (list of torch.Tensor): sample indices of each client.
        task (str, optional): ``"classification"`` or ``"regression"``.
            (default: :obj:`"classification"`)
        num_classes (int, optional): classes (required for classification).
        fractions (tuple, optional): per-client ``(train, val, test)`` shares.
            (default: :obj:`(0.7, 0.1, 0.2)`)
        generator (torch.Generator): source of randomness for the splits.
        edge_index (torch.Tensor, optional): prior client graph :math:`(2, E)`.
        edge_weight (torch.Tensor, optional): its weights :math:`(E,)`.
        client_labels (torch.Tensor, optional): ground-truth group per client.
        info (dict, optional): free-form facts about the data.
        max_train_per_client (int, optional): most training samples a client
            keeps; :obj:`None` keeps all. (default: :obj:`None`)
        max_val_per_client (int, optional): most validation samples a client
            keeps. (default: :obj:`None`)
        max_test_per_client (int, optional): most test samples a client keeps.
            (default: :obj:`None`)
        defaults (DatasetDefaults, optional): the model and training protocol
            the data set is meant to be run with. (default: :obj:`None`)

    Shapes:
        - **input:** x :math:`(S, *F)`, y :math:`(S, *T)`
        - **output:** each split holds x :math:`(N, n_{max}, *F)`,
          y :math:`(N, n_{max}, *T)`, counts :math:`(N,)`
    """
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    if x.size(0) != y.size(0):
        raise ValueError(f"x holds {x.size(0)} samples but y holds {y.size(0)}")
    if len(partition) == 0:
        raise ValueError("the partition is empty: it needs one index tensor per client")
    fractions = _check_fractions(fractions)
    caps = (max_train_per_client, max_val_per_client, max_test_per_client)
    for split, cap in zip(SPLITS, caps, strict=True):
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"max_{split}_per_client must be a positive integer or None, "
                             f"got {cap!r}")
    for i, part in enumerate(partition):
        if part.numel() == 0:
            raise ValueError(f"client {i} has no samples; every client needs at least one")
        if part.dtype.is_floating_point or part.dtype == torch.bool:
            raise TypeError(f"client {i}: indices must be integers, got dtype {part.dtype}")
        if int(part.min()) < 0 or int(part.max()) >= x.size(0):
            raise ValueError(f"client {i} has indices outside [0, {x.size(0)})")
    if client_labels is not None and client_labels.numel() != len(partition):
        raise ValueError(f"client_labels has {client_labels.numel()} entries for "
                         f"{len(partition)} clients")
    pieces = [split_client(part, fractions, generator=generator) for part in partition]
    splits = {}
    for s, split in enumerate(("train", "val", "test")):
        index = [piece[s][:caps[s]] for piece in pieces]
        splits[split] = ClientSplit.from_lists([x[i] for i in index], [y[i] for i in index])
    return FederatedDataset(name, task, splits, num_classes, edge_index, edge_weight,
                            client_labels, dict(info or {}), defaults)


def with_dominant_labels(dataset: FederatedDataset) -> FederatedDataset:
    r"""A copy of a classification ``dataset`` whose ``client_labels`` are each
    client's dominant training class (see :func:`dominant_class`), marked as
    such in ``info["client_labels"]`` (they are not true groups)."""
    if dataset.num_classes is None:
        raise ValueError("with_dominant_labels needs a classification dataset with num_classes")
    labels = dominant_class(dataset.splits["train"], dataset.num_classes)
    # Not true groups: said in info, so that group-recovery scores leave them alone.
    return replace(dataset, client_labels=labels,
                   info={**dataset.info, "client_labels": "dominant class"})
