r"""Image classification benchmarks (Fashion-MNIST, CIFAR-10, CIFAR-100)
dealt to clients, built on :mod:`torchvision` (optional extra ``vision``)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.partition import (
    PartitionName,
    build_federated_dataset,
    partition_labels,
    with_dominant_labels,
)
from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.typing import WITH_TORCHVISION, require

__all__ = ["fashion_mnist", "cifar10", "cifar100"]


def _load(kind: str, root: str | Path, download: bool) -> tuple[Tensor, Tensor]:
    r"""Pools the official train and test sets of ``kind`` into uint8 images
    :math:`(S, C, H, W)` and long labels :math:`(S,)`."""
    require(WITH_TORCHVISION, "torchvision", "vision")
    import torchvision.datasets as tvd

    cls = {"fashion-mnist": tvd.FashionMNIST, "cifar10": tvd.CIFAR10,
           "cifar100": tvd.CIFAR100}[kind]
    xs, ys = [], []
    for train in (True, False):
        data = cls(str(root), train=train, download=download)
        x = torch.as_tensor(np.asarray(data.data), dtype=torch.uint8)
        # FashionMNIST stores (S, H, W); CIFAR stores (S, H, W, C).
        xs.append(x.unsqueeze(1) if x.dim() == 3 else x.permute(0, 3, 1, 2))
        ys.append(torch.as_tensor(np.asarray(data.targets), dtype=torch.long))
    return torch.cat(xs).contiguous(), torch.cat(ys)


def _federate(kind: str, root: str | Path, num_classes: int, num_clients: int,
              partition: PartitionName, classes_per_client: int, beta: float, seed: int,
              fractions: Sequence[float], download: bool, min_size: int, num_groups: int,
              iid_share: float) -> FederatedDataset:
    x, y = _load(kind, root, download)
    generator = torch.Generator().manual_seed(seed)
    parts, group = partition_labels(y, num_clients, partition, generator=generator,
                                    classes_per_client=classes_per_client, beta=beta,
                                    min_size=min_size, num_groups=num_groups,
                                    iid_share=iid_share)
    # Pack as uint8 and convert per split: peak memory stays near one float copy.
    dataset = build_federated_dataset(
        kind, x, y, parts, task="classification", num_classes=num_classes, fractions=fractions,
        generator=generator, client_labels=group,
        info={"synthetic": False, "partition": partition, "source": f"torchvision {kind}"})
    splits = {name: ClientSplit(sp.x.float().div_(255.0), sp.y, sp.counts)
              for name, sp in dataset.splits.items()}
    dataset = replace(dataset, splits=splits)
    return dataset if group is not None else with_dominant_labels(dataset)


_ARGS_DOC = r"""
    The official train and test sets are pooled and the pool is partitioned
    (see :mod:`pyg_fedgraph.data.partition`); each client's share is then
    split into train / val / test (FedAGHN, Sec. 4.2: 7:1:2 after distributing
    the whole data set). Pixels are scaled to :math:`[0, 1]`:

    .. math::
        \mathbf{x} = \mathbf{p} / 255 .

    Args:
        root (str or Path): folder holding (or receiving) the torchvision files.
        num_clients (int, optional): clients :math:`N`. (default: :obj:`10`)
        partition (str, optional): ``"pathological"``, ``"iid"``,
            ``"dirichlet"`` or ``"group"``. (default: :obj:`"pathological"`)
        classes_per_client (int, optional): classes per client for
            ``"pathological"``. (default: :obj:`{cpc}`)
        beta (float, optional): Dirichlet concentration. (default: :obj:`0.5`)
        seed (int, optional): seed of the partition and the splits. (default: :obj:`0`)
        fractions (tuple, optional): per-client ``(train, val, test)`` shares.
            (default: :obj:`(0.7, 0.1, 0.2)`)
        download (bool, optional): let torchvision download missing files.
            (default: :obj:`False`)
        min_size (int, optional): fewest samples per client for
            ``"dirichlet"``. (default: :obj:`10`)
        num_groups (int, optional): groups for ``"group"``. (default: :obj:`5`)
        iid_share (float, optional): IID share for ``"group"``. (default: :obj:`0.2`)

    Returns:
        A classification :class:`~pyg_fedgraph.data.FederatedDataset` with
        float32 inputs :math:`{shape}`. ``client_labels`` is each client's
        dominant training class, or its group for ``partition="group"``.

    Raises:
        ImportError: if torchvision is not installed
            (``pip install 'pyg-fedgraph[vision]'``).
        RuntimeError: from torchvision, if the files are missing and
            ``download=False``.
"""


@register_dataset("fashion-mnist")
def fashion_mnist(root: str | Path, num_clients: int = 10,
                  partition: PartitionName = "pathological", classes_per_client: int = 2,
                  beta: float = 0.5, seed: int = 0,
                  fractions: Sequence[float] = (0.7, 0.1, 0.2), download: bool = False,
                  min_size: int = 10, num_groups: int = 5,
                  iid_share: float = 0.2) -> FederatedDataset:
    return _federate("fashion-mnist", root, 10, num_clients, partition, classes_per_client, beta,
                     seed, fractions, download, min_size, num_groups, iid_share)


@register_dataset("cifar10")
def cifar10(root: str | Path, num_clients: int = 10,
            partition: PartitionName = "pathological", classes_per_client: int = 2,
            beta: float = 0.5, seed: int = 0, fractions: Sequence[float] = (0.7, 0.1, 0.2),
            download: bool = False, min_size: int = 10, num_groups: int = 5,
            iid_share: float = 0.2) -> FederatedDataset:
    return _federate("cifar10", root, 10, num_clients, partition, classes_per_client, beta,
                     seed, fractions, download, min_size, num_groups, iid_share)


@register_dataset("cifar100")
def cifar100(root: str | Path, num_clients: int = 10,
             partition: PartitionName = "pathological", classes_per_client: int = 20,
             beta: float = 0.5, seed: int = 0, fractions: Sequence[float] = (0.7, 0.1, 0.2),
             download: bool = False, min_size: int = 10, num_groups: int = 5,
             iid_share: float = 0.2) -> FederatedDataset:
    return _federate("cifar100", root, 100, num_clients, partition, classes_per_client, beta,
                     seed, fractions, download, min_size, num_groups, iid_share)


fashion_mnist.__doc__ = (r"""The Fashion-MNIST data set (Xiao et al., 2017; 70,000 grey
    :math:`28 \times 28` images, 10 classes), dealt to clients.
""" + _ARGS_DOC.replace("{cpc}", "2").replace("{shape}", "(1, 28, 28)"))
cifar10.__doc__ = (r"""The CIFAR-10 data set (Krizhevsky, 2009; 60,000 colour
    :math:`32 \times 32` images, 10 classes), dealt to clients.
""" + _ARGS_DOC.replace("{cpc}", "2").replace("{shape}", "(3, 32, 32)"))
cifar100.__doc__ = (r"""The CIFAR-100 data set (Krizhevsky, 2009; 60,000 colour
    :math:`32 \times 32` images, 100 classes), dealt to clients (pathological
    default: 20 classes per client, as in FedAGHN).
""" + _ARGS_DOC.replace("{cpc}", "20").replace("{shape}", "(3, 32, 32)"))
