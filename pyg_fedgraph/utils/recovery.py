r"""Graph recovery: client groups read from a collaboration matrix, scored
against known groups with the Rand index and the adjusted Rand index; and
the weight a matrix puts inside and across known groups (FedAGHN's Self /
Similar / Other, pFedGAT's within / between classes)."""
from __future__ import annotations

import warnings
from typing import Literal

import torch
from torch import Tensor

__all__ = ["ReadingRule", "READING_RULES", "RECOVERY_KEYS", "read_groups", "partition_scores",
           "graph_recovery", "relation_weights", "allocation_stats"]

#: How groups are read from a collaboration matrix (see :func:`read_groups`).
ReadingRule = Literal["spectral", "components"]
READING_RULES: tuple[str, ...] = ("spectral", "components")
#: The scores :func:`partition_scores` returns, by name: the entries a round's
#: ``record.extra`` (so ``history.csv``) and a run's summary carry.
RECOVERY_KEYS: tuple[str, ...] = ("rand_index", "adjusted_rand_index")


def _check_matrix(weight: Tensor) -> Tensor:
    if not isinstance(weight, Tensor) or weight.dim() != 2 or weight.size(0) != weight.size(1):
        shape = tuple(weight.shape) if isinstance(weight, Tensor) else type(weight).__name__
        raise ValueError(f"a collaboration matrix must be a square (N, N) tensor, got {shape}")
    if weight.size(0) == 0:
        raise ValueError("the collaboration matrix has no clients")
    if not bool(torch.isfinite(weight).all()):
        raise ValueError("the collaboration matrix holds NaN or infinite weights")
    return weight.detach().to("cpu", torch.float64)


def _check_labels(labels: Tensor, what: str) -> Tensor:
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.is_floating_point() \
            or labels.is_complex() or labels.dtype == torch.bool:
        kind = (f"{labels.dtype} tensor of shape {tuple(labels.shape)}"
                if isinstance(labels, Tensor) else type(labels).__name__)
        raise ValueError(f"{what} must be a 1-D integer tensor, one label per client, got a "
                         f"{kind}")
    return labels.detach().cpu().long()


def read_groups(weight: Tensor, num_groups: int, *, rule: ReadingRule = "spectral",
                k: int | None = None, seed: int = 0) -> Tensor:
    r"""The client groups a collaboration matrix :math:`W` shows (row
    :math:`i` = weights client :math:`i` gives), by one of two reading rules.

    * ``"spectral"`` (default): scikit-learn's
      :class:`~sklearn.cluster.SpectralClustering` with
      ``affinity="precomputed"``, ``n_clusters=num_groups`` and
      ``random_state=seed`` on the symmetrized non-negative matrix

      .. math::
          A = \tfrac{1}{2}\big(|W| + |W|^\top\big), \qquad A_{ii} = 0,

      (the diagonal, a client's weight on itself, says nothing about whom
      it groups with). A graph that falls apart into components is normal
      here (a block-diagonal :math:`W`); scikit-learn's warning about it is
      silenced.
    * ``"components"``: the connected components of the undirected graph
      that links each client :math:`i` to the :math:`k` clients
      :math:`j \neq i` of largest :math:`|W_{ij}|` (zero weights are no
      links; ties go to the lower index); :math:`k` defaults to the mean
      group size minus one, :math:`\mathrm{round}(N / G) - 1`. The number
      of groups found is not fixed: one weak link joins two groups.

    Args:
        weight (torch.Tensor): the collaboration matrix :math:`W`.
        num_groups (int): the number of groups :math:`G`, :math:`1 \le G
            \le N` (spectral: the clusters to find; components: sets the
            default :math:`k`).
        rule (str, optional): ``"spectral"`` or ``"components"``
            (default: ``"spectral"``).
        k (int, optional): links kept per client by ``"components"``,
            :math:`0 \le k < N` (default: :obj:`None`, the mean group size
            minus one).
        seed (int, optional): ``random_state`` of the spectral clustering
            (default: :obj:`0`).

    Shapes:
        - **input:** ``weight`` :math:`(N, N)`
        - **output:** group ids :math:`(N,)` (long, CPU), values in
          :math:`[0, G')`, numbered as the rule returns them.
    """
    a = _check_matrix(weight).abs()
    n = a.size(0)
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) \
            or not 1 <= num_groups <= n:
        raise ValueError(f"num_groups must be an int in [1, {n}] for {n} clients, got "
                         f"{num_groups!r}")
    if rule == "spectral":
        if k is not None:
            raise ValueError("k is the links per client of rule='components'; the spectral "
                             "rule takes num_groups only")
        if num_groups == 1:
            return torch.zeros(n, dtype=torch.long)
        from sklearn.cluster import SpectralClustering

        affinity = (a + a.T) / 2
        affinity.fill_diagonal_(0.0)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Graph is not fully connected")
            labels = SpectralClustering(n_clusters=num_groups, affinity="precomputed",
                                        random_state=seed).fit_predict(affinity.numpy())
        return torch.as_tensor(labels, dtype=torch.long)
    if rule == "components":
        if k is None:
            k = max(round(n / num_groups) - 1, 0)
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < n:
            raise ValueError(f"k must be an int in [0, {n - 1}] for {n} clients, got {k!r}")
        import numpy as np
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        a.fill_diagonal_(-1.0)  # never one's own neighbour
        # A stable descending sort: among equal weights the lower index comes first.
        top = torch.sort(a, dim=1, descending=True, stable=True).indices[:, :k]
        rows = torch.arange(n).repeat_interleave(k)
        cols = top.reshape(-1)
        keep = a[rows, cols] > 0
        src, dst = rows[keep].numpy(), cols[keep].numpy()
        graph = coo_matrix((np.ones(src.size), (src, dst)), shape=(n, n))
        _, labels = connected_components(graph, directed=False)
        return torch.as_tensor(labels, dtype=torch.long)
    raise ValueError(f"unknown reading rule {rule!r}; choose one of {READING_RULES}")


def partition_scores(labels: Tensor, groups: Tensor) -> dict[str, float]:
    r"""The agreement of two groupings of the same clients: scikit-learn's
    Rand index :func:`~sklearn.metrics.rand_score` (the share of client
    pairs that both put together or both apart) and adjusted Rand index
    :func:`~sklearn.metrics.adjusted_rand_score` (Hubert and Arabie, 1985:
    :math:`0` in expectation for a random grouping of the same sizes,
    :math:`1` for a perfect one)

    .. math::
        \mathrm{RI} = \frac{a + b}{\binom{N}{2}}, \qquad
        \mathrm{ARI} = \frac{\mathrm{RI} - \mathbb{E}[\mathrm{RI}]}
        {\max \mathrm{RI} - \mathbb{E}[\mathrm{RI}]},

    with :math:`a` the pairs together in both and :math:`b` the pairs
    apart in both. Both are symmetric and blind to how groups are numbered;
    for fewer than two clients both are :math:`1` (scikit-learn's convention).

    Args:
        labels (torch.Tensor): one grouping, e.g. read from a graph.
        groups (torch.Tensor): the other, e.g. the true groups.

    Shapes:
        - **input:** ``labels``, ``groups`` :math:`(N,)`, integers
        - **output:** ``{"rand_index": float, "adjusted_rand_index": float}``
    """
    from sklearn.metrics import adjusted_rand_score, rand_score

    pred, truth = _check_labels(labels, "labels"), _check_labels(groups, "groups")
    if pred.numel() != truth.numel():
        raise ValueError(f"labels name {pred.numel()} clients, groups {truth.numel()}")
    return {"rand_index": float(rand_score(truth.numpy(), pred.numpy())),
            "adjusted_rand_index": float(adjusted_rand_score(truth.numpy(), pred.numpy()))}


def graph_recovery(weight: Tensor, groups: Tensor, *, rule: ReadingRule = "spectral",
                   k: int | None = None, seed: int = 0) -> dict[str, float]:
    r"""How well a collaboration matrix recovers known client groups: the
    groups :func:`read_groups` reads from ``weight`` with the true number of
    groups (``rule``, ``k``, ``seed`` as there), scored against ``groups``
    with :func:`partition_scores`.

    Args:
        weight (torch.Tensor): the collaboration matrix :math:`W` (row
            :math:`i` = weights client :math:`i` gives).
        groups (torch.Tensor): each client's true group.
        rule (str, optional): ``"spectral"`` or ``"components"``
            (default: ``"spectral"``).
        k (int, optional): links per client of ``"components"``
            (default: :obj:`None`, the mean group size minus one).
        seed (int, optional): seed of the spectral clustering
            (default: :obj:`0`).

    Shapes:
        - **input:** ``weight`` :math:`(N, N)`, ``groups`` :math:`(N,)`
        - **output:** ``{"rand_index": float, "adjusted_rand_index": float}``
    """
    truth = _check_labels(groups, "groups")
    w = _check_matrix(weight)
    if w.size(0) != truth.numel():
        raise ValueError(f"the collaboration matrix is {tuple(w.shape)} but groups names "
                         f"{truth.numel()} clients")
    num_groups = int(truth.unique().numel())
    return partition_scores(read_groups(w, num_groups, rule=rule, k=k, seed=seed), truth)


def _check_square(weight: Tensor) -> None:
    if not isinstance(weight, Tensor) or weight.dim() != 2 or weight.size(0) != weight.size(1):
        shape = tuple(weight.shape) if isinstance(weight, Tensor) else type(weight).__name__
        raise ValueError(f"a collaboration matrix must be a square (N, N) tensor, got {shape}")


def relation_weights(weight: Tensor, groups: Tensor) -> tuple[float, float, float]:
    r"""The mean weight a client gives itself, a client of its own group and a
    client of another group (FedAGHN's Table 9, "Self / Similar / Other"):

    .. math::
        \text{Self} = \frac{1}{N} \sum_i W_{ii}, \quad
        \text{Similar} = \frac{1}{N} \sum_i \frac{\sum_{j \ne i, g_j = g_i} W_{ij}}
        {\max(1, |\{j \ne i : g_j = g_i\}|)}, \quad
        \text{Other} = \frac{1}{N} \sum_i \frac{\sum_{g_j \ne g_i} W_{ij}}
        {|\{j : g_j \ne g_i\}|}

    computed in ``weight``'s dtype.

    Args:
        weight (torch.Tensor): the collaboration matrix :math:`W` (row
            :math:`i` = the weights client :math:`i` gives).
        groups (torch.Tensor): each client's group :math:`g`; at least two
            groups.

    Shapes:
        - **input:** ``weight`` :math:`(N, N)`, ``groups`` :math:`(N,)`
        - **output:** ``(self, similar, other)``
    """
    _check_square(weight)
    group = _check_labels(groups, "groups").to(weight.device)
    n = group.numel()
    if weight.size(0) != n:
        raise ValueError(f"the collaboration matrix is {tuple(weight.shape)} but groups names "
                         f"{n} clients")
    if int(group.unique().numel()) < 2:
        raise ValueError("relation weights need at least two groups (every client's 'Other' "
                         "would be empty)")
    eye = torch.eye(n, dtype=torch.bool, device=weight.device)
    same = (group.unsqueeze(0) == group.unsqueeze(1)) & ~eye
    other = group.unsqueeze(0) != group.unsqueeze(1)
    self_w = weight.diagonal().mean()
    similar = ((weight * same).sum(1) / same.sum(1).clamp_min(1)).mean()
    different = ((weight * other).sum(1) / other.sum(1)).mean()
    return float(self_w), float(similar), float(different)


def allocation_stats(weight: Tensor, label_counts: Tensor) -> dict[str, float]:
    r"""Where a collaboration matrix puts its weight relative to the classes
    clients share (pFedGAT's Figure 3 reading): two clients *share* when
    their label counts overlap, :math:`(H H^\top)_{ij} > 0`.

    Returns ``same`` (mean over clients of the total weight given to clients
    sharing a class, itself included), ``chance`` (the share of sharing
    pairs: ``same`` under uniform weights), ``within`` / ``between`` (the
    mean off-diagonal weight between sharing / non-sharing pairs, NaN where
    there is no such pair), ``self`` (mean diagonal) and ``dev`` (mean
    absolute deviation from the uniform :math:`1/N`).

    Args:
        weight (torch.Tensor): the collaboration matrix :math:`W`.
        label_counts (torch.Tensor): samples of each class per client
            :math:`H` (e.g. :func:`pyg_fedgraph.train.rules.class_counts`).

    Shapes:
        - **input:** ``weight`` :math:`(N, N)`, ``label_counts`` :math:`(N, C)`
        - **output:** a dict of six floats
    """
    _check_square(weight)
    n = weight.size(0)
    if label_counts.dim() != 2 or label_counts.size(0) != n:
        raise ValueError(f"label_counts must be (N, C) = ({n}, C), got "
                         f"{tuple(label_counts.shape)}")
    hist = label_counts.to(weight.device, weight.dtype)
    share = (hist @ hist.t()) > 0
    off = ~torch.eye(n, dtype=torch.bool, device=weight.device)
    return {
        "same": float((weight * share).sum(dim=1).mean()),
        "chance": float(share.float().mean()),
        "within": float(weight[share & off].mean()) if (share & off).any() else float("nan"),
        "between": float(weight[~share].mean()) if (~share).any() else float("nan"),
        "self": float(weight.diagonal().mean()),
        "dev": float((weight - 1.0 / n).abs().mean()),
    }
