r"""Small functions over client tensors shared by the operators and strategies."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["COSINE_EPS", "pairwise_cosine", "sample_shares", "cluster_mean"]

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
