r"""Image classification benchmarks dealt to clients: CIFAR-10 and CIFAR-100
through :mod:`torchvision` (optional extra ``vision``), and the shared
partition / split / scaling step of every image data set (also used by
:mod:`pyg_fedgraph.datasets.mnist`)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from pyg_fedgraph.data.federated_dataset import ClientSplit, DatasetDefaults, FederatedDataset
from pyg_fedgraph.data.partition import (
    Pairing,
    PartitionName,
    build_federated_dataset,
    partition_labels,
    with_dominant_labels,
)
from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.typing import WITH_TORCHVISION, require

__all__ = ["cifar10", "cifar100", "federate_images", "IMAGE_DEFAULTS", "TestSet", "TEST_SETS",
           "label_weighted_test_split"]

#: Where the clients' test metric comes from (see :func:`federate_images`).
TestSet = Literal["client", "global-weighted"]
TEST_SETS = ("client", "global-weighted")
#: pFedGraph's code: 80% of each client's share trains, 20% validates.
_GLOBAL_FRACTIONS = (0.8, 0.2, 0.0)
_CLIENT_FRACTIONS = (0.7, 0.1, 0.2)


def _load(kind: str, root: str | Path, download: bool) -> tuple[Tensor, Tensor, int]:
    r"""Pools the official train and test sets of ``kind`` into uint8 images
    :math:`(S, C, H, W)` and long labels :math:`(S,)`, training set first,
    and returns the size of the training set too."""
    require(WITH_TORCHVISION, "torchvision", "vision")
    import torchvision.datasets as tvd

    cls = {"cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100}[kind]
    xs, ys = [], []
    for train in (True, False):
        data = cls(str(root), train=train, download=download)
        # CIFAR stores (S, H, W, C).
        xs.append(torch.as_tensor(np.asarray(data.data), dtype=torch.uint8).permute(0, 3, 1, 2))
        ys.append(torch.as_tensor(np.asarray(data.targets), dtype=torch.long))
    return torch.cat(xs).contiguous(), torch.cat(ys), int(ys[0].numel())


#: The papers' protocol for image data (pFedGraph, Sec. 4.1 and Appendix C.1:
#: the simple CNN of MOON, SGD with lr 0.01, momentum 0.9, weight decay 1e-5,
#: batch 64, tau = 200 local iterations, 50 rounds; pFedGAT, Sec. 4.1, has the
#: same CNN, lr, batch and rounds with 5 local epochs).
IMAGE_DEFAULTS = DatasetDefaults(
    model="cnn",
    local={"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5, "batch_size": 64, "steps": 200},
    rounds=50)


def federate_images(name: str, x: Tensor, y: Tensor, num_classes: int, *, num_clients: int,
                    partition: PartitionName, classes_per_client: int, beta: float, seed: int,
                    fractions: Sequence[float] | None, min_size: int, num_groups: int,
                    iid_share: float, pairing: Pairing = "random",
                    max_train_per_client: int | None = None,
                    max_val_per_client: int | None = None,
                    max_test_per_client: int | None = None, source: str = "",
                    test_set: TestSet = "client", num_official_train: int | None = None,
                    defaults: DatasetDefaults | None = IMAGE_DEFAULTS) -> FederatedDataset:
    r"""Partitions uint8 images :math:`(S, C, H, W)` with labels :math:`(S,)`
    over clients, splits each client's share and scales pixels to
    :math:`[0, 1]` (the options are those of the builders below).

    With ``test_set="global-weighted"`` the first ``num_official_train``
    samples (the official training set) are partitioned and split into
    train / val only, and every client is tested on the official test set
    (the remaining samples), each sample weighted by its class's share in the
    client's data (:func:`label_weighted_test_split`)."""
    if test_set not in TEST_SETS:
        raise ValueError(f"unknown test_set {test_set!r}; choose one of {TEST_SETS}")
    generator = torch.Generator().manual_seed(seed)
    test_x = test_y = None
    if test_set == "global-weighted":
        if num_official_train is None or not 0 < num_official_train < y.numel():
            raise ValueError(f"test_set='global-weighted' needs num_official_train, the number "
                             f"of leading samples forming the official training set (in "
                             f"(0, {y.numel()})), got {num_official_train!r}")
        fractions = _GLOBAL_FRACTIONS if fractions is None else tuple(fractions)
        if len(fractions) != 3 or fractions[2] != 0:
            raise ValueError(f"test_set='global-weighted' tests on the official test set, so "
                             f"fractions must give no share to a client test split, e.g. "
                             f"(0.8, 0.2, 0.0) as pFedGraph's code; got {fractions}")
        if max_test_per_client is not None and (isinstance(max_test_per_client, bool) or not
                                                isinstance(max_test_per_client, int)
                                                or max_test_per_client < 1):
            raise ValueError(f"max_test_per_client must be a positive integer or None, "
                             f"got {max_test_per_client!r}")
        x, test_x = x[:num_official_train], x[num_official_train:]
        y, test_y = y[:num_official_train], y[num_official_train:]
    elif fractions is None:
        fractions = _CLIENT_FRACTIONS
    parts, group = partition_labels(y, num_clients, partition, generator=generator,
                                    classes_per_client=classes_per_client, beta=beta,
                                    min_size=min_size, num_groups=num_groups,
                                    iid_share=iid_share, pairing=pairing)
    info = {"synthetic": False, "partition": partition, "source": source, "test_set": test_set}
    if partition == "pathological":
        info["pairing"] = pairing
    # Pack as uint8 and convert per split: peak memory stays near one float copy.
    dataset = build_federated_dataset(
        name, x, y, parts, task="classification", num_classes=num_classes, fractions=fractions,
        generator=generator, client_labels=group, info=info,
        max_train_per_client=max_train_per_client, max_val_per_client=max_val_per_client,
        max_test_per_client=None if test_set == "global-weighted" else max_test_per_client,
        defaults=defaults)
    splits = dict(dataset.splits)
    if test_set == "global-weighted":
        assert test_x is not None and test_y is not None
        counts = torch.stack([torch.bincount(y[p], minlength=num_classes) for p in parts])
        splits["test"] = label_weighted_test_split(test_x, test_y, counts,
                                                   max_per_client=max_test_per_client,
                                                   generator=generator)
    splits = {split: ClientSplit(sp.x.float().div_(255.0), sp.y, sp.counts, sp.weight)
              for split, sp in splits.items()}
    dataset = replace(dataset, splits=splits)
    return dataset if group is not None else with_dominant_labels(dataset)


def label_weighted_test_split(x: Tensor, y: Tensor, class_counts: Tensor, *,
                              max_per_client: int | None = None,
                              generator: torch.Generator | None = None) -> ClientSplit:
    r"""Every client's test split on one shared test set, weighted by the
    client's label distribution, as pFedGraph's released code measures
    personalized accuracy (``compute_local_test_accuracy`` in its
    ``test.py``: per-class correct counts on the global test set, weighted by
    the client's class shares :math:`d_{ic}`):

    .. math::
        \mathrm{acc}_i = \frac{\sum_{s} d_{i, y_s}\, [\hat{y}_i(x_s) = y_s]}
        {\sum_{s} d_{i, y_s}}, \qquad
        d_{ic} = \frac{n_{ic}}{\sum_{c'} n_{ic'}} ,

    with :math:`n_{ic}` the client's samples of class :math:`c` (its whole
    share, as in the code). Client :math:`i` gets the test samples of the
    classes it holds (the others weigh 0) with weights :math:`d_{i, y_s}`
    (:attr:`ClientSplit.weight`); ``max_per_client`` keeps a random subset of
    them, which turns the exact weighted accuracy into an estimate of it.

    Args:
        x (torch.Tensor): test inputs :math:`(T, *F)`.
        y (torch.Tensor): test labels :math:`(T,)`.
        class_counts (torch.Tensor): :math:`n_{ic}` :math:`(N, C)`.
        max_per_client (int, optional): most test rows per client.
            (default: :obj:`None`, all)
        generator (torch.Generator, optional): draws the subsets.
    """
    if class_counts.dim() != 2 or bool((class_counts.sum(1) == 0).any()):
        raise ValueError("class_counts must be (num_clients, num_classes) with at least one "
                         "sample per client")
    if y.numel() and int(y.max()) >= class_counts.size(1):
        raise ValueError(f"test labels reach {int(y.max())} but class_counts has "
                         f"{class_counts.size(1)} classes")
    share = class_counts.double() / class_counts.sum(1, keepdim=True).double()  # (N, C)
    xs, ys, ws = [], [], []
    for i in range(class_counts.size(0)):  # one-off data preparation
        rows = (share[i, y] > 0).nonzero().view(-1)
        if max_per_client is not None and rows.numel() > max_per_client:
            pick = torch.randperm(rows.numel(), generator=generator)[:max_per_client]
            rows = rows[pick.sort().values]
        xs.append(x[rows])
        ys.append(y[rows])
        ws.append(share[i, y[rows]].float())
    return ClientSplit.from_lists(xs, ys, ws)


def _federate(kind: str, root: str | Path, num_classes: int, num_clients: int,
              partition: PartitionName, classes_per_client: int, beta: float, seed: int,
              fractions: Sequence[float] | None, download: bool, min_size: int,
              num_groups: int, iid_share: float, **options) -> FederatedDataset:
    x, y, num_train = _load(kind, root, download)
    return federate_images(kind, x, y, num_classes, num_clients=num_clients,
                           partition=partition, classes_per_client=classes_per_client,
                           beta=beta, seed=seed, fractions=fractions, min_size=min_size,
                           num_groups=num_groups, iid_share=iid_share,
                           source=f"torchvision {kind}", num_official_train=num_train,
                           **options)


IMAGE_ARGS_DOC = r"""
    With ``test_set="client"`` (default) the official train and test sets are
    pooled and the pool is partitioned (see :mod:`pyg_fedgraph.data.partition`);
    each client's share is then split into train / val / test (FedAGHN, Sec.
    4.2: 7:1:2 after distributing the whole data set), and the caps, if any,
    subsample each split. With ``test_set="global-weighted"`` (pFedGraph's
    released code) only the official training set is partitioned, each share
    is split into train / val (default 80 / 20), and every client is tested
    on the official test set with each sample weighted by its class's share
    in the client's data (:func:`~pyg_fedgraph.datasets.vision.label_weighted_test_split`):
    the expected value is the same as with a client test split drawn from
    the client's distribution, with far less sampling noise for small clients.
    {pixels}

    The data set carries its papers' protocol in ``defaults``
    (:data:`~pyg_fedgraph.datasets.vision.IMAGE_DEFAULTS`: the simple CNN
    ``"cnn"``, SGD with lr 0.01, momentum 0.9, weight decay :math:`10^{{-5}}`,
    batch 64, 200 local steps, 50 rounds; pFedGraph, Sec. 4.1 and Appendix
    C.1), which :func:`~pyg_fedgraph.experiment.build_simulator` applies;
    the simulator reports the test metric at the round of best mean
    validation metric.

    Args:
        root (str or Path{root_optional}): {root}
        num_clients (int, optional): clients :math:`N`. (default: :obj:`10`)
        partition (str, optional): ``"pathological"``, ``"iid"``,
            ``"dirichlet"`` or ``"group"``. (default: :obj:`"pathological"`)
        classes_per_client (int, optional): classes per client for
            ``"pathological"``. (default: :obj:`{cpc}`)
        beta (float, optional): Dirichlet concentration. (default: :obj:`0.5`)
        seed (int, optional): seed of the partition and the splits. (default: :obj:`0`)
        fractions (tuple, optional): per-client ``(train, val, test)`` shares;
            the test share must be 0 with ``test_set="global-weighted"``.
            (default: :obj:`None`: :obj:`(0.7, 0.1, 0.2)`, or
            :obj:`(0.8, 0.2, 0.0)` with ``test_set="global-weighted"``)
        download (bool, optional): {download} (default: :obj:`False`)
        min_size (int, optional): fewest samples per client for
            ``"dirichlet"``. (default: :obj:`10`)
        num_groups (int, optional): groups for ``"group"``. (default: :obj:`5`)
        iid_share (float, optional): IID share for ``"group"``. (default: :obj:`0.2`)
        pairing (str, optional): ``"random"`` class sets for
            ``"pathological"``, or ``"fixed"`` blocks of consecutive classes
            as in pFedGraph's code (clients :math:`i` and :math:`i + C/c`
            share classes). (default: :obj:`"random"`)
        max_train_per_client (int, optional): cap on each client's training
            samples (pFedGraph, Appendix C.1.3: 3072). (default: :obj:`None`)
        max_val_per_client (int, optional): cap on each client's validation
            samples. (default: :obj:`None`)
        max_test_per_client (int, optional): cap on each client's test
            samples (a random subset of the official test set with
            ``test_set="global-weighted"``). (default: :obj:`None`)
        test_set (str, optional): ``"client"`` (each client's own test
            split) or ``"global-weighted"`` (the official test set weighted by
            the client's label distribution, as pFedGraph's code).
            (default: :obj:`"client"`){extra_args}

    Returns:
        A classification :class:`~pyg_fedgraph.data.FederatedDataset` with
        float32 inputs :math:`{shape}`. ``client_labels`` is each client's
        dominant training class, or its group for ``partition="group"``.

    Raises:
{raises}
"""

_TORCHVISION_RAISES = """        ImportError: if torchvision is not installed
            (``pip install 'pyg-fedgraph[vision]'``).
        RuntimeError: from torchvision, if the files are missing and
            ``download=False``."""
_TORCHVISION_PIXELS = r"""Pixels are scaled to :math:`[0, 1]`:

    .. math::
        \mathbf{{x}} = \mathbf{{p}} / 255 ."""


@register_dataset("cifar10")
def cifar10(root: str | Path, num_clients: int = 10,
            partition: PartitionName = "pathological", classes_per_client: int = 2,
            beta: float = 0.5, seed: int = 0, fractions: Sequence[float] | None = None,
            download: bool = False, min_size: int = 10, num_groups: int = 5,
            iid_share: float = 0.2, pairing: Pairing = "random",
            max_train_per_client: int | None = None, max_val_per_client: int | None = None,
            max_test_per_client: int | None = None,
            test_set: TestSet = "client") -> FederatedDataset:
    return _federate("cifar10", root, 10, num_clients, partition, classes_per_client, beta,
                     seed, fractions, download, min_size, num_groups, iid_share,
                     pairing=pairing, max_train_per_client=max_train_per_client,
                     max_val_per_client=max_val_per_client,
                     max_test_per_client=max_test_per_client, test_set=test_set)


@register_dataset("cifar100")
def cifar100(root: str | Path, num_clients: int = 10,
             partition: PartitionName = "pathological", classes_per_client: int = 20,
             beta: float = 0.5, seed: int = 0, fractions: Sequence[float] | None = None,
             download: bool = False, min_size: int = 10, num_groups: int = 5,
             iid_share: float = 0.2, pairing: Pairing = "random",
             max_train_per_client: int | None = None, max_val_per_client: int | None = None,
             max_test_per_client: int | None = None,
             test_set: TestSet = "client") -> FederatedDataset:
    return _federate("cifar100", root, 100, num_clients, partition, classes_per_client, beta,
                     seed, fractions, download, min_size, num_groups, iid_share,
                     pairing=pairing, max_train_per_client=max_train_per_client,
                     max_val_per_client=max_val_per_client,
                     max_test_per_client=max_test_per_client, test_set=test_set)


def _torchvision_doc(title: str, cpc: str, shape: str) -> str:
    return title + IMAGE_ARGS_DOC.format(
        pixels=_TORCHVISION_PIXELS.format(), root_optional="",
        root="folder holding (or receiving) the torchvision files.",
        cpc=cpc, download="let torchvision download missing files.", extra_args="",
        shape=shape, raises=_TORCHVISION_RAISES)


cifar10.__doc__ = _torchvision_doc(r"""The CIFAR-10 data set (Krizhevsky, 2009; 60,000 colour
    :math:`32 \times 32` images, 10 classes), dealt to clients.
""", "2", "(3, 32, 32)")
cifar100.__doc__ = _torchvision_doc(r"""The CIFAR-100 data set (Krizhevsky, 2009; 60,000 colour
    :math:`32 \times 32` images, 100 classes), dealt to clients (pathological
    default: 20 classes per client, as in FedAGHN).
""", "20", "(3, 32, 32)")
