r"""Small functions over client tensors shared by the operators and strategies."""
from __future__ import annotations

import torch
from torch import Tensor

from pyg_fedgraph.typing import PoolName

__all__ = ["COSINE_EPS", "pairwise_cosine", "sample_shares", "cluster_mean", "dtw_distance",
           "pairwise_dtw", "global_pool"]

#: Norms below this count as zero in :func:`pairwise_cosine`.
COSINE_EPS = 1e-12


def pairwise_cosine(x: Tensor, y: Tensor | None = None, eps: float = COSINE_EPS) -> Tensor:
    r"""Pairwise cosine similarities of the rows of ``x`` (and ``y``).

    .. math::
        C_{ij} = \frac{\langle x_i, y_j \rangle}
        {\max(\lVert x_i \rVert, \epsilon)\, \max(\lVert y_j \rVert, \epsilon)}

    The one epsilon rule of the library: each row is divided by its norm
    clamped below at :math:`\epsilon`, so a zero row has similarity 0 with
    everything (itself included) instead of NaN, and rows of ordinary size
    are unaffected. Every strategy and operator that compares clients by
    cosine (pFedGraph, FedAGHN, FedAMP, CFL, FedCEDAR, pFedGAT's similarity
    term) calls this function.

    Args:
        x (torch.Tensor): :math:`(M, D)`.
        y (torch.Tensor, optional): :math:`(K, D)` (default: ``x``).
        eps (float, optional): :math:`\epsilon` (default: :data:`COSINE_EPS`).

    Shapes:
        - **output:** :math:`(M, K)`.
    """
    if x.dim() != 2 or (y is not None and (y.dim() != 2 or y.size(1) != x.size(1))):
        raise ValueError(f"pairwise_cosine needs (M, D) and (K, D) tensors, got "
                         f"{tuple(x.shape)} and {None if y is None else tuple(y.shape)}")
    ux = x / torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min(eps)
    uy = ux if y is None else y / torch.linalg.vector_norm(y, dim=1, keepdim=True).clamp_min(eps)
    return ux @ uy.t()


def sample_shares(num_samples: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    r"""Sample shares :math:`p_i = n_i / \sum_j n_j` :math:`(N,)`, uniform
    :math:`1/N` when every :math:`n_i = 0` (FedAvg's weights; the prior of
    pFedGraph's QP; CFL's cluster averages).

    Args:
        num_samples (torch.Tensor): :math:`n` :math:`(N,)`.
        dtype (torch.dtype, optional): of the result (default: the default
            floating-point type).
    """
    n = num_samples.to(dtype or torch.get_default_dtype())
    total = n.sum()
    if n.numel() == 0 or total <= 0:
        return torch.full_like(n, 1.0 / max(n.numel(), 1))
    return n / total


def cluster_mean(x: Tensor, cluster: Tensor, num_clusters: int,
                 weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
    r"""Weighted mean of the rows of ``x`` within each cluster (the server
    step of clustered methods: CFL's cluster updates, IFCA's cluster models).

    .. math::
        \bar{x}_k = \frac{\sum_{i:\, c_i = k} w_i\, x_i}{\sum_{i:\, c_i = k} w_i}

    One scatter over the rows (no loop over clients or clusters); a cluster
    without rows, or whose weights sum to zero, gets a zero row and weight 0.

    Args:
        x (torch.Tensor): :math:`(S, D)`.
        cluster (torch.Tensor): cluster of each row, in ``[0, num_clusters)`` :math:`(S,)`.
        num_clusters (int): :math:`K`.
        weight (torch.Tensor, optional): :math:`w` :math:`(S,)` (default: ones).

    Returns:
        The means :math:`(K, D)` and each cluster's total weight :math:`(K,)`.
    """
    if cluster.numel() != x.size(0):
        raise ValueError(f"{cluster.numel()} cluster ids for {x.size(0)} rows")
    if cluster.numel() and not 0 <= int(cluster.min()) <= int(cluster.max()) < num_clusters:
        raise ValueError(f"cluster ids must lie in [0, {num_clusters}), got "
                         f"[{int(cluster.min())}, {int(cluster.max())}]")
    w = x.new_ones(x.size(0)) if weight is None else weight.to(x.dtype)
    total = w.new_zeros(num_clusters).index_add_(0, cluster, w)
    sums = x.new_zeros(num_clusters, x.size(1)).index_add_(0, cluster, w.unsqueeze(1) * x)
    return sums / total.clamp(min=torch.finfo(x.dtype).tiny).unsqueeze(1), total


def _accumulated_cost(cost: Tensor, window: int | None) -> Tensor:
    r"""The dynamic program of DTW for a stack of cost matrices
    :math:`(P, T_1, T_2)`, returning :math:`A_{T_1 T_2}` of each :math:`(P,)`.
    It sweeps the :math:`T_1 + T_2 - 1` anti-diagonals, each at once for all
    cells and all pairs: a loop over time steps, never over sequences."""
    pairs, r, c = cost.shape
    acc = cost.new_full((pairs, r + 1, c + 1), float("inf"))
    acc[:, 0, 0] = 0.0
    for k in range(2, r + c + 1):
        i = torch.arange(max(1, k - c), min(r, k - 1) + 1, device=cost.device)
        j = k - i
        best = torch.minimum(torch.minimum(acc[:, i - 1, j - 1], acc[:, i - 1, j]),
                             acc[:, i, j - 1])
        value = cost[:, i - 1, j - 1] + best
        if window is not None:
            shift = j - i
            inside = (shift >= -(window + max(0, r - c))) & (shift <= window + max(0, c - r))
            value = torch.where(inside, value, torch.full_like(value, float("inf")))
        acc[:, i, j] = value
    return acc[:, r, c]


def _check_window(window: int | None) -> None:
    if window is not None and window < 0:
        raise ValueError(f"window must be a non-negative number of steps or None, got {window}")


def dtw_distance(a: Tensor, b: Tensor, window: int | None = None) -> Tensor:
    r"""Dynamic time warping distance of two sequences (the criterion of
    GCFL+, Xie et al., "Federated Graph Classification over Non-IID Graphs",
    NeurIPS 2021, Sec. 5.2; see :func:`pairwise_dtw`).

    .. math::
        \mathrm{DTW}(a, b) = \Big( \min_{\pi} \sum_{(i, j) \in \pi}
        (a_i - b_j)^2 \Big)^{1/2},

    the minimum over warping paths :math:`\pi` from :math:`(1, 1)` to
    :math:`(T_1, T_2)` with steps :math:`(1, 0)`, :math:`(0, 1)`,
    :math:`(1, 1)`, computed by

    .. math::
        A_{ij} = (a_i - b_j)^2 + \min(A_{i-1, j-1}, A_{i-1, j}, A_{i, j-1}),
        \qquad \mathrm{DTW} = \sqrt{A_{T_1 T_2}}:

    squared differences summed, then the square root, as ``dtaidistance``'s
    ``dtw.distance`` (which GCFL+'s code calls) defines it.

    Args:
        a (torch.Tensor): :math:`(T_1,)`.
        b (torch.Tensor): :math:`(T_2,)`.
        window (int, optional): Sakoe-Chiba band: only cells with
            :math:`-w - \max(0, T_1 - T_2) \le j - i \le w + \max(0, T_2 - T_1)`
            (for equal lengths :math:`|i - j| \le w`; ``dtaidistance``'s
            ``window`` is :math:`w + 1`); :obj:`None` for no band, as GCFL+.
            (default: :obj:`None`)

    Shapes:
        - **output:** :math:`()`.
    """
    if a.dim() != 1 or b.dim() != 1 or a.numel() == 0 or b.numel() == 0:
        raise ValueError(f"dtw_distance needs two non-empty 1-D sequences, got shapes "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    _check_window(window)
    cost = (a.unsqueeze(1) - b.to(a.dtype).unsqueeze(0)).pow(2).unsqueeze(0)
    return _accumulated_cost(cost, window)[0].sqrt()


def pairwise_dtw(x: Tensor, window: int | None = None) -> Tensor:
    r"""Dynamic time warping distances between all rows of ``x``, GCFL+'s
    distance matrix (Xie et al., NeurIPS 2021, Sec. 5.2, Eq. 8):

    .. math::
        \beta(p, q) = \mathrm{DTW}\big(Q_{p,:},\ Q_{q,:}\big),

    with :func:`dtw_distance` on each pair: symmetric, zero on the diagonal.
    In GCFL+ row :math:`p` of :math:`Q` is client :math:`p`'s sequence of
    its last :math:`d` gradient norms (:math:`\lVert \Delta\theta_p^t \rVert`
    in the paper; in the authors' code, Oxfordblue7/GCFL, the norm of the
    gradient of the shared GIN layers after the client's last local step, or
    of their update in the variant ``run_gcflplus_dWs``), :math:`d` = 5 for
    one dataset and 10 across datasets (their defaults), with no window and
    no normalization unless ``--standardize`` divides each row by its
    standard deviation first; a cluster meeting GCFL's criteria is then cut in
    two by a minimum cut of the similarity :math:`\max \beta - \beta`.

    The :math:`N(N-1)/2` pairs go through one dynamic program, vectorized over
    pairs (a loop over the :math:`2T - 1` anti-diagonals only).

    Args:
        x (torch.Tensor): :math:`N` sequences of length :math:`T`.
        window (int, optional): the band of :func:`dtw_distance`.
            (default: :obj:`None`)

    Shapes:
        - **input:** :math:`(N, T)`.
        - **output:** :math:`(N, N)`.
    """
    if x.dim() != 2 or x.size(1) == 0:
        raise ValueError(f"pairwise_dtw needs (N, T) sequences with T >= 1, got shape "
                         f"{tuple(x.shape)}")
    _check_window(window)
    n = x.size(0)
    row, col = torch.triu_indices(n, n, offset=1, device=x.device)
    cost = (x[row].unsqueeze(2) - x[col].unsqueeze(1)).pow(2)
    out = x.new_zeros(n, n)
    if row.numel():
        dist = _accumulated_cost(cost, window).sqrt()
        out[row, col] = dist
        out[col, row] = dist
    return out


def global_pool(x: Tensor, batch: Tensor, graph_size: Tensor | None = None,
                reduce: PoolName = "sum") -> Tensor:
    r"""The sum or mean of every graph's node representations (PyG's
    :func:`~torch_geometric.nn.global_add_pool` and
    :func:`~torch_geometric.nn.global_mean_pool`), with a fixed number of
    graphs so that :func:`torch.vmap` can batch it over clients:

    .. math::
        \mathbf{h}_b = \sum_{v:\, \text{batch}_v = b} \mathbf{x}_v
        \quad\text{or}\quad
        \mathbf{h}_b = \frac{1}{n_b} \sum_{v:\, \text{batch}_v = b} \mathbf{x}_v .

    The number of graphs :math:`B` is the length of ``graph_size``; nodes of
    slot :math:`B` are padding (:func:`~pyg_fedgraph.data.collate_graph_sets`)
    and are dropped. Without ``graph_size`` (a PyG
    :class:`~torch_geometric.data.Batch`, not under :func:`torch.vmap`)
    :math:`B` is ``batch.max() + 1`` and :math:`n_b` is counted.

    Args:
        x (torch.Tensor): node representations :math:`(V, F)`.
        batch (torch.Tensor): graph slot of every node :math:`(V,)`.
        graph_size (torch.Tensor, optional): nodes :math:`n_b` of every graph
            :math:`(B,)`. (default: :obj:`None`)
        reduce (str, optional): ``"sum"`` or ``"mean"``. (default: ``"sum"``)

    Shapes:
        - **input:** :math:`(V, F)`, :math:`(V,)`, :math:`(B,)`.
        - **output:** :math:`(B, F)`.
    """
    if reduce not in ("sum", "mean"):
        raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
    if graph_size is None:
        b = int(batch.max()) + 1 if batch.numel() else 0
        graph_size = torch.bincount(batch, minlength=b)[:b]
    b = graph_size.size(-1)
    out = x.new_zeros(b + 1, x.size(-1)).index_add(0, batch, x)[:b]
    if reduce == "mean":
        out = out / graph_size.clamp(min=1).unsqueeze(-1).to(out.dtype)
    return out
