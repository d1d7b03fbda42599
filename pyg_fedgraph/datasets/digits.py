r"""The scikit-learn handwritten digits, dealt to clients (works offline)."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.partition import (
    PartitionName,
    build_federated_dataset,
    partition_labels,
    with_dominant_labels,
)
from pyg_fedgraph.datasets.registry import register_dataset

__all__ = ["digits"]


@register_dataset("digits")
def digits(num_clients: int = 10, partition: PartitionName = "pathological",
           classes_per_client: int = 2, beta: float = 0.5, seed: int = 0,
           fractions: Sequence[float] = (0.7, 0.1, 0.2), image: bool = False,
           min_size: int = 10, num_groups: int = 5, iid_share: float = 0.2) -> FederatedDataset:
    r"""The UCI optical handwritten digits shipped with scikit-learn
    (:func:`sklearn.datasets.load_digits`: 1,797 images of :math:`8 \times 8`
    pixels, 10 classes), partitioned over clients.

    Pixels (integers 0..16) are scaled to :math:`[0, 1]`:

    .. math::
        \mathbf{x} = \mathbf{p} / 16 .

    The whole set is partitioned (see :mod:`pyg_fedgraph.data.partition`),
    then each client's share is split into train / val / test (FedAGHN: 7:1:2).

    Args:
        num_clients (int, optional): clients :math:`N`. (default: :obj:`10`)
        partition (str, optional): ``"pathological"``, ``"iid"``,
            ``"dirichlet"`` or ``"group"``. (default: :obj:`"pathological"`)
        classes_per_client (int, optional): classes per client for
            ``"pathological"``. (default: :obj:`2`)
        beta (float, optional): Dirichlet concentration. (default: :obj:`0.5`)
        seed (int, optional): seed of the partition and the splits. (default: :obj:`0`)
        fractions (tuple, optional): per-client ``(train, val, test)`` shares.
            (default: :obj:`(0.7, 0.1, 0.2)`)
        image (bool, optional): inputs as images :math:`(1, 8, 8)` instead of
            flat vectors :math:`(64,)`. (default: :obj:`False`)
        min_size (int, optional): fewest samples per client for
            ``"dirichlet"``. (default: :obj:`10`)
        num_groups (int, optional): groups for ``"group"``. (default: :obj:`5`)
        iid_share (float, optional): IID share for ``"group"``. (default: :obj:`0.2`)

    Returns:
        A classification :class:`~pyg_fedgraph.data.FederatedDataset` with 10
        classes and float32 inputs. ``client_labels`` is each client's dominant
        training class, or its group for ``partition="group"``.
    """
    from sklearn.datasets import load_digits

    raw = load_digits()
    x = torch.as_tensor(raw.data, dtype=torch.float32) / 16.0
    if image:
        x = x.view(-1, 1, 8, 8)
    y = torch.as_tensor(raw.target, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    parts, group = partition_labels(y, num_clients, partition, generator=generator,
                                    classes_per_client=classes_per_client, beta=beta,
                                    min_size=min_size, num_groups=num_groups,
                                    iid_share=iid_share)
    dataset = build_federated_dataset(
        "digits", x, y, parts, task="classification", num_classes=10, fractions=fractions,
        generator=generator, client_labels=group,
        info={"synthetic": False, "partition": partition,
              "source": "sklearn.datasets.load_digits (UCI)"})
    return dataset if group is not None else with_dominant_labels(dataset)
