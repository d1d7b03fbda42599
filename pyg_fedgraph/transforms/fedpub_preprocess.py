r"""FED-PUB's preparation of a graph before it is partitioned."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform, LargestConnectedComponents, NormalizeFeatures

from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["FedPubPreprocess", "random_node_split"]


def random_node_split(num_nodes: int, train: float = 0.2, test: float = 0.4, seed: int = 0
                      ) -> tuple[Tensor, Tensor, Tensor]:
    r"""Train, validation and test masks of a uniformly random node split: a
    random permutation of the nodes, whose first :math:`\mathrm{round}(t
    |\mathcal{V}|)` are training nodes, the next :math:`\mathrm{round}(s
    |\mathcal{V}|)` test nodes and the rest validation nodes (FED-PUB's
    order; ``round`` as Python's, halves to even).

    Args:
        num_nodes (int): :math:`|\mathcal{V}|`.
        train (float, optional): :math:`t`. (default: :obj:`0.2`)
        test (float, optional): :math:`s`. (default: :obj:`0.4`)
        seed (int, optional): the seed of the permutation. (default: :obj:`0`)

    Returns:
        ``(train_mask, val_mask, test_mask)``, disjoint, covering every node.
    """
    if not (0 <= train and 0 <= test and train + test <= 1):
        raise ValueError(f"train ({train}) and test ({test}) must be shares in [0, 1] "
                         f"summing to at most 1")
    order = torch.randperm(num_nodes, generator=make_generator(seed, "node-split"))
    num_train, num_test = round(num_nodes * train), round(num_nodes * test)
    masks = []
    for index in (order[:num_train], order[num_train + num_test:],
                  order[num_train:num_train + num_test]):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[index] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]


class FedPubPreprocess(BaseTransform):
    r"""Prepares a graph as FED-PUB does before partitioning it (Baek et al.,
    `"Personalized Subgraph Federated Learning"
    <https://arxiv.org/abs/2206.10206>`_, ICML 2023): keeps its largest
    connected component, row-normalizes the features and draws a random
    20 / 40 / 40 train / validation / test split over the whole graph,
    replacing any split it had (Planetoid's public split included).

    .. math::
        \mathbf{x}_v \leftarrow \frac{\mathbf{x}_v - \min \mathbf{X}}
        {\max\big(1, \sum_f (x_{vf} - \min \mathbf{X})\big)}

    (PyG's :class:`~torch_geometric.transforms.NormalizeFeatures`, which
    FED-PUB uses; :math:`\min \mathbf{X} = 0` for Planetoid's non-negative
    features, so rows sum to one). The facts come from FED-PUB's released
    data generator (``JinheonBaek/FED-PUB``, ``data/generators/utils.py``,
    commit ``302980d``): ``Planetoid`` with the transform
    ``Compose([LargestConnectedComponents(), NormalizeFeatures()])``, then
    ``split_train`` with ``ratio_train = 0.2``, test share
    :math:`(1 - 0.2) / 2 = 0.4` and validation the rest, from one
    ``torch.randperm`` of all nodes (train first, then test, then
    validation), before METIS; the split is thus over the whole graph, and
    each client keeps the masks of its nodes. The permutation here comes
    from the library's seeded generator, not FED-PUB's global seed 1234, so
    the split follows FED-PUB's rule, not its exact draw. On Cora the largest
    component has 2,485 of the 2,708 nodes.

    Args:
        train (float, optional): the share of training nodes.
            (default: :obj:`0.2`)
        test (float, optional): the share of test nodes; validation gets
            the rest. (default: :obj:`0.4`)
        seed (int, optional): the seed of the split. (default: :obj:`0`)
        largest_component (bool, optional): keep only the largest connected
            component. (default: :obj:`True`)
        normalize_features (bool, optional): row-normalize ``x``.
            (default: :obj:`True`)
    """

    def __init__(self, train: float = 0.2, test: float = 0.4, seed: int = 0,
                 largest_component: bool = True, normalize_features: bool = True) -> None:
        if not (0 <= train and 0 <= test and train + test <= 1):
            raise ValueError(f"train ({train}) and test ({test}) must be shares in [0, 1] "
                             f"summing to at most 1")
        self.train = float(train)
        self.test = float(test)
        self.seed = seed
        self.largest_component = largest_component
        self.normalize_features = normalize_features

    def forward(self, data: Data) -> Data:
        if self.largest_component:
            # weak components, as FED-PUB's own transform (scipy's default)
            data = LargestConnectedComponents(connection="weak")(data)
        if self.normalize_features and getattr(data, "x", None) is not None:
            data = NormalizeFeatures()(data)
        data.train_mask, data.val_mask, data.test_mask = random_node_split(
            data.num_nodes, self.train, self.test, self.seed)
        return data

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(train={self.train}, test={self.test}, "
                f"seed={self.seed})")
