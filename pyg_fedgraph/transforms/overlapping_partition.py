r"""FED-PUB's overlapping subgraphs: clients sample from shared METIS parts."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_fedgraph.transforms.graph_partition import GraphPartition
from pyg_fedgraph.transforms.metis_partition import nonempty_metis_parts
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["OverlappingPartition"]


class OverlappingPartition(GraphPartition):
    r"""The overlapping setting of FED-PUB (Baek et al., `"Personalized
    Subgraph Federated Learning" <https://arxiv.org/abs/2206.10206>`_, ICML
    2023): the graph is split into :math:`P = N / C` METIS parts
    (:func:`~pyg_fedgraph.transforms.metis_parts`), and each of the
    :math:`C` clients of part :math:`p` holds the subgraph induced by a
    uniform sample, without replacement, of
    :math:`\lfloor r\, |\mathcal{V}_p| \rfloor` of the part's nodes, drawn
    independently of the other clients:

    .. math::
        \mathcal{V}_{pC + c} \sim \mathrm{Uniform}\Big\{S \subseteq
        \mathcal{V}_p : |S| = \lfloor r\, |\mathcal{V}_p| \rfloor\Big\},
        \qquad c = 0, \ldots, C - 1.

    Clients of one part overlap and form a known group (their ``group`` is
    :math:`p`); clients of different parts share no node. The rule is that of
    FED-PUB's released generator (``JinheonBaek/FED-PUB``,
    ``data/generators/overlapping.py``, commit ``302980d``): METIS into 2, 6
    or 10 parts, 5 clients per part (10, 30 and 50 clients),
    ``random.sample(part, len(part) // 2)`` for each client, i.e.
    :math:`C = 5` and :math:`r = 1/2`, client :math:`pC + c` being the
    :math:`c`-th client of part :math:`p`; METIS is :math:`k`-way there
    (``metispy``'s default), hence ``recursive=False``. The samples here come
    from this library's seeded generators, not Python's :mod:`random`, so the
    node sets are FED-PUB's rule, not its exact draws.

    Args:
        num_clients (int): the number of clients :math:`N`, a multiple of
            ``clients_per_part``.
        clients_per_part (int, optional): :math:`C`. (default: :obj:`5`)
        sample_ratio (float, optional): :math:`r \in (0, 1]`, the share of a
            part's nodes each of its clients holds. (default: :obj:`0.5`)
        seed (int, optional): METIS's seed and the seed of the samples.
            (default: :obj:`0`)
        recursive (bool, optional): recursive bisection instead of
            :math:`k`-way METIS. (default: :obj:`False`)

    Raises:
        ValueError: one line, if ``num_clients`` is not a multiple of
            ``clients_per_part``, if METIS leaves a part empty, or if a part
            has fewer nodes than clients or too few for a sample of one node
            (more overlapping clients per part than its nodes allow).
        ImportError: naming the extra ``metis`` without :mod:`pymetis`.
    """

    def __init__(self, num_clients: int, clients_per_part: int = 5, sample_ratio: float = 0.5,
                 seed: int = 0, recursive: bool = False) -> None:
        super().__init__(num_clients, seed)
        if (isinstance(clients_per_part, bool) or not isinstance(clients_per_part, int)
                or clients_per_part < 1):
            raise ValueError(f"clients_per_part must be an int of at least 1, got "
                             f"{clients_per_part!r}")
        if num_clients % clients_per_part:
            raise ValueError(f"num_clients ({num_clients}) must be a multiple of "
                             f"clients_per_part ({clients_per_part}): every METIS part has "
                             f"the same number of clients")
        if not 0.0 < sample_ratio <= 1.0:
            raise ValueError(f"sample_ratio must be in (0, 1], got {sample_ratio}")
        self.clients_per_part = clients_per_part
        self.sample_ratio = float(sample_ratio)
        self.recursive = bool(recursive)

    @property
    def num_parts(self) -> int:
        r"""The number of METIS parts :math:`P = N / C`."""
        return self.num_clients // self.clients_per_part

    def _num_sets(self) -> int:
        return self.num_parts

    def node_sets(self, data: Data) -> tuple[list[Tensor], list[int]]:
        parts = nonempty_metis_parts(data, self.num_parts, self.seed, self.recursive)
        order = torch.argsort(parts, stable=True)
        members = torch.split(order, torch.bincount(parts, minlength=self.num_parts).tolist())
        sets, groups = [], []
        for p, nodes in enumerate(members):
            size = int(self.sample_ratio * len(nodes))
            if len(nodes) < self.clients_per_part or size < 1:
                raise ValueError(
                    f"METIS part {p} has {len(nodes)} nodes: too few for "
                    f"{self.clients_per_part} overlapping clients holding "
                    f"{100 * self.sample_ratio:g}% of them each (a part needs at least as many "
                    f"nodes as clients, and each client one node); use fewer clients "
                    f"per part, fewer parts or a larger sample_ratio")
            for c in range(self.clients_per_part):
                gen = make_generator(self.seed, "overlapping-sample", p, c)
                sets.append(nodes[torch.randperm(len(nodes), generator=gen)[:size]])
                groups.append(p)
        return sets, groups

    def _options(self) -> str:
        return (f"clients_per_part={self.clients_per_part}, "
                f"sample_ratio={self.sample_ratio}, seed={self.seed}"
                + (", recursive=True" if self.recursive else ""))
