r"""Clustering of client parameter vectors.

Agreement between two clusterings is scored with scikit-learn's
:func:`~sklearn.metrics.rand_score` and
:func:`~sklearn.metrics.adjusted_rand_score`.
"""
from __future__ import annotations

import logging

import torch
from torch import Tensor

__all__ = ["kmeans"]

log = logging.getLogger(__name__)


def kmeans(x: Tensor, num_clusters: int, *, generator: torch.Generator, max_iter: int = 100,
           tol: float = 1e-6) -> tuple[Tensor, Tensor]:
    r"""Euclidean k-means with k-means++ seeding, the client clustering step of
    "Rethinking Personalized Federated Learning with Clustering-based Dynamic
    Graph Propagation" (Wang et al., FedCEDAR, Eq. 1).

    Minimizes over assignments :math:`\delta` and centres :math:`c`

    .. math::
        J = \sum_{k=1}^{K} \sum_{b=1}^{S} \delta_{b}^{k}\,
        \lVert c_k - x_b \rVert^2

    by Lloyd iterations started from a k-means++ draw (Arthur and
    Vassilvitskii, 2007): the first centre is a uniform draw, each further one
    is drawn with probability proportional to the squared distance to the
    nearest centre already chosen.

    Conventions:

    * If fewer points than clusters are given (:math:`S < K`, e.g. few sampled
      clients), :math:`K' = \min(K, S)` clusters are returned.
    * Every returned cluster is non-empty and its centre is exactly the mean
      of the points assigned to it. A cluster that an assignment step leaves
      empty takes the point farthest from its own centre among the clusters
      holding more than one point (so no other cluster is emptied).
    * Duplicate points are allowed: when all remaining squared distances are
      zero, k-means++ draws the next seed uniformly among the points not yet
      chosen instead of dividing by zero. Duplicate centres may then result.
    * Distances use :math:`\lVert a\rVert^2 - 2 a^\top b + \lVert b\rVert^2`
      on mean-centred data (centring keeps precision when all vectors share a
      large common part, as client models do); no :math:`(S, K, D)` tensor is
      built.
    * Iterations stop when the assignment no longer changes or the summed
      squared centre shift is at most ``tol`` times the mean per-coordinate
      variance of ``x`` (the relative criterion of scikit-learn).

    The result is a deterministic function of ``x`` and the generator state.
    Random draws are made on the generator's device, so a CPU generator can
    serve GPU data.

    Args:
        x (torch.Tensor): points, one row per client.
        num_clusters (int): requested number of clusters :math:`K \geq 1`.
        generator (torch.Generator): source of randomness for the seeding.
        max_iter (int, optional): maximum number of Lloyd iterations
            (default: :obj:`100`).
        tol (float, optional): relative tolerance on the centre shift
            (default: :obj:`1e-6`).

    Shapes:
        - **input:** :math:`(S, D)`
        - **output:** centres :math:`(K', D)` and assignment :math:`(S,)`
          (``long``, values in :math:`[0, K')`).
    """
    if not isinstance(x, Tensor) or x.dim() != 2:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a (num_points, num_features) tensor, got {shape}")
    if x.size(0) == 0:
        raise ValueError("x has no rows: k-means needs at least one point")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating point tensor, got {x.dtype}")
    if isinstance(num_clusters, bool) or not isinstance(num_clusters, int) or num_clusters < 1:
        raise ValueError(f"num_clusters must be a positive int, got {num_clusters!r}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if max_iter < 1:
        raise ValueError(f"max_iter must be at least 1, got {max_iter}")
    if tol < 0:
        raise ValueError(f"tol must be non-negative, got {tol}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x contains NaN or infinite values; k-means needs finite points")

    s = x.size(0)
    k = min(num_clusters, s)
    if k < num_clusters:
        log.debug("kmeans: %d clusters requested for %d points, using %d", num_clusters, s, k)

    mean = x.mean(dim=0, keepdim=True)
    xc = x - mean
    sq_norm = (xc * xc).sum(dim=1)
    threshold = tol * float(xc.var(dim=0, unbiased=False).mean()) if s > 1 else 0.0

    centres = xc[_kmeans_pp(xc, sq_norm, k, generator)]
    assignment = torch.full((s,), -1, dtype=torch.long, device=x.device)
    for _ in range(max_iter):
        dist = _sq_dist(xc, sq_norm, centres)
        new_assignment = dist.argmin(dim=1)
        _fill_empty(new_assignment, dist, k)
        new_centres = _cluster_means(xc, new_assignment, k)
        shift = float(((new_centres - centres) ** 2).sum())
        unchanged = bool(torch.equal(new_assignment, assignment))
        centres, assignment = new_centres, new_assignment
        if unchanged or shift <= threshold:
            break
    return centres + mean, assignment


def _sq_dist(x: Tensor, sq_norm: Tensor, centres: Tensor) -> Tensor:
    # (S, K) squared distances; clamp the round-off of the expansion at zero.
    d = sq_norm.unsqueeze(1) - 2.0 * (x @ centres.t()) + (centres * centres).sum(1).unsqueeze(0)
    return d.clamp_min_(0.0)


def _kmeans_pp(x: Tensor, sq_norm: Tensor, k: int, generator: torch.Generator) -> Tensor:
    s = x.size(0)
    gdev = generator.device
    chosen = [int(torch.randint(s, (1,), generator=generator, device=gdev))]
    closest = _sq_dist(x, sq_norm, x[chosen[0]].unsqueeze(0)).squeeze(1)
    for _ in range(1, k):
        weights = closest.to(device=gdev, dtype=torch.float64)
        if float(weights.sum()) > 0:
            nxt = int(torch.multinomial(weights, 1, generator=generator))
        else:
            # Every point coincides with a chosen centre: pick a fresh index uniformly.
            free = torch.ones(s, dtype=torch.bool, device=gdev)
            free[chosen] = False
            candidates = free.nonzero().view(-1)
            pick = torch.randint(candidates.numel(), (1,), generator=generator, device=gdev)
            nxt = int(candidates[pick])
        chosen.append(nxt)
        d_new = _sq_dist(x, sq_norm, x[nxt].unsqueeze(0)).squeeze(1)
        closest = torch.minimum(closest, d_new)
    return torch.tensor(chosen, dtype=torch.long, device=x.device)


def _fill_empty(assignment: Tensor, dist: Tensor, k: int) -> None:
    # Loops over empty clusters (at most K - 1 of them), never over clients.
    counts = torch.bincount(assignment, minlength=k)
    empty = (counts == 0).nonzero().view(-1).tolist()
    if not empty:
        return
    own = dist.gather(1, assignment.unsqueeze(1)).squeeze(1)
    for c in empty:
        movable = counts[assignment] > 1
        score = own.masked_fill(~movable, -1.0)
        p = int(score.argmax())
        counts[assignment[p]] -= 1
        counts[c] += 1
        assignment[p] = c
        own[p] = 0.0


def _cluster_means(x: Tensor, assignment: Tensor, k: int) -> Tensor:
    sums = x.new_zeros(k, x.size(1)).index_add_(0, assignment, x)
    counts = torch.bincount(assignment, minlength=k).to(x.dtype).clamp_min_(1.0)
    return sums / counts.unsqueeze(1)
