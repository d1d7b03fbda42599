r"""Bi-partitioning of clients by their pairwise similarities (CFL)."""
from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = ["LINKAGES", "bipartition"]

LinkageName = Literal["complete", "single"]
LINKAGES = ("complete", "single")


def bipartition(similarity: Tensor, linkage: LinkageName = "complete") -> Tensor:
    r"""Splits :math:`M \geq 2` clients into two groups by agglomerative
    clustering of their pairwise similarities, the bi-partitioning step of
    `"Clustered Federated Learning: Model-Agnostic Distributed Multitask
    Optimization Under Privacy Constraints"
    <https://arxiv.org/abs/1910.01991>`_ (Sattler et al., 2020).

    Starting from singletons, the two most similar clusters are merged until
    two remain. The similarity of two clusters :math:`c, c'` is

    .. math::
        s(c, c') = \min_{i \in c, j \in c'} \alpha_{ij} \;\;(\text{complete})
        \qquad\text{or}\qquad
        \max_{i \in c, j \in c'} \alpha_{ij} \;\;(\text{single}).

    ``"single"`` returns the paper's optimal bi-partition (Algorithm 1),
    :math:`\arg\min_{c_1 \cup c_2 = c} \max_{i \in c_1, j \in c_2}
    \alpha_{ij}` (merging by decreasing similarity builds a maximum spanning
    tree; its weakest edge is the cut). ``"complete"`` is what the authors'
    public code runs (scikit-learn's ``AgglomerativeClustering`` with
    complete linkage on :math:`-\alpha`). Ties go to the lowest indices, so
    the result is deterministic.

    The :math:`M - 2` merges are sequential by nature, hence the Python loop
    (each merge is vectorized over clusters); :math:`M` is the size of one
    cluster.

    Args:
        similarity (torch.Tensor): symmetric :math:`(M, M)`.
        linkage (str, optional): ``"complete"`` or ``"single"``
            (default: ``"complete"``).

    Returns:
        A bool mask :math:`(M,)`: ``True`` for the group that does *not*
        contain client 0.
    """
    if linkage not in LINKAGES:
        raise ValueError(f"linkage must be one of {LINKAGES}, got {linkage!r}")
    if similarity.dim() != 2 or similarity.size(0) != similarity.size(1):
        raise ValueError(f"similarity must be square (M, M), got {tuple(similarity.shape)}")
    m = similarity.size(0)
    if m < 2:
        raise ValueError(f"bipartition needs at least 2 clients, got {m}")
    sim = similarity.detach().to(torch.float64).clone()
    sim.fill_diagonal_(float("-inf"))
    active = torch.ones(m, dtype=torch.bool, device=sim.device)
    label = torch.arange(m, device=sim.device)
    combine = torch.minimum if linkage == "complete" else torch.maximum
    for _ in range(m - 2):
        pair_ok = active.unsqueeze(0) & active.unsqueeze(1)
        flat = int(sim.masked_fill(~pair_ok, float("-inf")).argmax())
        a, b = divmod(flat, m)
        i, j = min(a, b), max(a, b)
        merged = combine(sim[i], sim[j])
        sim[i, :] = merged
        sim[:, i] = merged
        sim[i, i] = float("-inf")
        active[j] = False
        label[label == j] = i  # a cluster is named by its smallest member
    return label != 0
