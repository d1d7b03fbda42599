r"""Bi-partitioning of clients by their pairwise similarities (CFL, GCFL)."""
from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = ["LINKAGES", "bipartition", "min_cut"]

LinkageName = Literal["complete", "single", "min-cut"]
LINKAGES = ("complete", "single", "min-cut")


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
    complete linkage on :math:`-\alpha`). ``"min-cut"`` is GCFL's split
    (Xie et al., NeurIPS 2021): the minimum cut of the graph whose edge
    weights are the similarities, :func:`min_cut` (the similarities must
    then be non-negative). Ties go to the lowest indices, so the result is
    deterministic.

    The :math:`M - 2` merges are sequential by nature, hence the Python loop
    (each merge is vectorized over clusters); :math:`M` is the size of one
    cluster.

    Args:
        similarity (torch.Tensor): symmetric :math:`(M, M)`.
        linkage (str, optional): ``"complete"``, ``"single"`` or
            ``"min-cut"`` (default: ``"complete"``).

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
    if linkage == "min-cut":
        side, _ = min_cut(similarity)
        return side
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


def min_cut(weight: Tensor) -> tuple[Tensor, Tensor]:
    r"""The minimum cut of an undirected graph given by its weighted
    adjacency :math:`W \in \mathbb{R}_{\geq 0}^{M \times M}`, by the
    algorithm of `"A Simple Min-Cut Algorithm"
    <https://doi.org/10.1145/263867.263872>`_ (Stoer and Wagner, J. ACM
    1997), GCFL's split of a cluster (Xie et al., NeurIPS 2021, on the
    similarities of the clients' updates; the authors' code calls
    networkx's ``stoer_wagner``):

    .. math::
        \min_{\emptyset \neq c_1 \subsetneq V}\; \sum_{i \in c_1}
        \sum_{j \notin c_1} W_{ij} .

    Each of the :math:`M - 1` phases orders the remaining super-nodes by
    maximum adjacency to those already taken (the lowest index first, and
    on ties), the weight of the last one's edges to the others is a cut
    candidate, and the last two are merged. The phases and the order within
    a phase are sequential by nature, hence the Python loops (each step is
    vectorized over nodes); :math:`M` is the size of one cluster. The
    diagonal is ignored.

    Args:
        weight (torch.Tensor): symmetric, non-negative :math:`(M, M)`,
            :math:`M \geq 2`.

    Returns:
        A bool mask :math:`(M,)`, ``True`` for the side that does *not*
        contain node 0, and the cut's weight (a scalar).
    """
    if weight.dim() != 2 or weight.size(0) != weight.size(1):
        raise ValueError(f"weight must be square (M, M), got {tuple(weight.shape)}")
    m = weight.size(0)
    if m < 2:
        raise ValueError(f"min_cut needs at least 2 nodes, got {m}")
    w = weight.detach().to(torch.float64).clone()
    w.fill_diagonal_(0.0)
    if bool((w < 0).any()) or not bool(torch.isfinite(w).all()):
        raise ValueError("min_cut needs finite non-negative edge weights")
    member = torch.eye(m, dtype=torch.bool, device=w.device)  # super-node -> its nodes
    active = torch.ones(m, dtype=torch.bool, device=w.device)
    best_value, best = float("inf"), member[0]
    for _ in range(m - 1):
        taken = ~active
        first = int(active.nonzero()[0])
        taken[first] = True
        conn = w[first].clone()
        prev, last, value = first, first, 0.0
        for _ in range(int(active.sum()) - 1):
            free = conn.masked_fill(taken, float("-inf"))
            nxt = int(free.argmax())
            prev, last, value = last, nxt, float(conn[nxt])
            taken[nxt] = True
            conn += w[nxt]
        if value < best_value:
            best_value, best = value, member[last].clone()
        # Merge the last node of the phase into the one before it.
        w[prev] += w[last]
        w[:, prev] += w[:, last]
        w[prev, prev] = 0.0
        w[last] = 0.0
        w[:, last] = 0.0
        member[prev] |= member[last]
        active[last] = False
    side = best if not bool(best[0]) else ~best
    return side, torch.tensor(best_value, dtype=torch.float64)
