"""Kernel-weighted k-nearest-neighbour vote over per-client datastores."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["knn_vote"]


def knn_vote(query: Tensor, keys: Tensor, values: Tensor, num_keys: Tensor, k: int,
             scale: float = 1.0) -> tuple[Tensor, Tensor]:
    r"""The kernel-weighted vote of each query's :math:`k` nearest keys, for
    :math:`S` clients at once, each over its own datastore: the local kNN
    model of kNN-Per, from the `"Personalized Federated Learning through
    Local Memorization" <https://arxiv.org/abs/2111.09360>`_ paper (Marfoq
    et al., ICML 2022, eq. (6)):

    .. math::
        p_i(q) = \frac{\sum_{j \in \mathcal{N}_k(q)} w_j\, v_j}
                      {\sum_{j \in \mathcal{N}_k(q)} w_j}, \qquad
        w_j = \exp\Big(-\frac{\lVert q - \kappa_j \rVert_2^2}{E\, \sigma}\Big),

    where :math:`\mathcal{N}_k(q)` are the :math:`k` keys :math:`\kappa_j` of
    client :math:`i`'s datastore closest to :math:`q` in Euclidean distance
    and :math:`E` is the embedding size. The kernel with the squared distance
    divided by :math:`E \sigma` is the authors' code (``client.py``,
    ``gather_knn_outputs``: FAISS ``IndexFlatL2`` distances, length scale
    :math:`\sigma = 1`). With one-hot labels as values :math:`v_j` the vote is
    the kNN class distribution :math:`p_{kNN}(y \mid q)`. The weights are
    normalized as a softmax of :math:`-\lVert q - \kappa_j\rVert^2/(E\sigma)`
    over the neighbours, which is the same ratio computed without underflow
    (the authors' ratio is 0/0 when every neighbour is far). A datastore
    with fewer than :math:`k` keys votes with all of them.

    Args:
        query (torch.Tensor): query embeddings :math:`(S, M, E)`.
        keys (torch.Tensor): datastore embeddings :math:`(S, K, E)`; rows past
            ``num_keys[i]`` are padding.
        values (torch.Tensor): what each key votes for :math:`(S, K, C)`.
        num_keys (torch.Tensor): valid keys per client :math:`(S,)`.
        k (int): neighbours :math:`k \ge 1`.
        scale (float, optional): length scale :math:`\sigma > 0` (default: :obj:`1.0`)

    Returns:
        The votes :math:`(S, M, C)` (zero for a client with an empty
        datastore) and which clients have a datastore :math:`(S,)` (bool).
    """
    if query.dim() != 3 or keys.dim() != 3 or query.size(-1) != keys.size(-1) \
            or query.size(0) != keys.size(0):
        raise ValueError(f"query (S, M, E) and keys (S, K, E) must match in S and E, got "
                         f"{tuple(query.shape)} and {tuple(keys.shape)}")
    s, num, dim = keys.shape
    if values.dim() != 3 or tuple(values.shape[:2]) != (s, num):
        raise ValueError(f"values must be (S, K, C) = ({s}, {num}, C), got "
                         f"{tuple(values.shape)}")
    if num_keys.shape != (s,):
        raise ValueError(f"num_keys must hold one count per client ({s}), got "
                         f"{tuple(num_keys.shape)}")
    if int(k) < 1 or scale <= 0:
        raise ValueError(f"k must be >= 1 and scale > 0, got k={k}, scale={scale}")
    has_keys = num_keys > 0
    out = values.new_zeros(s, query.size(1), values.size(-1))
    if num == 0 or query.size(1) == 0:
        return out, has_keys
    dist2 = torch.cdist(query, keys).pow(2)  # (S, M, K)
    valid = torch.arange(num, device=keys.device).unsqueeze(0) < num_keys.unsqueeze(1)
    dist2 = dist2.masked_fill(~valid.unsqueeze(1), float("inf"))
    dist2, index = dist2.topk(min(int(k), num), dim=-1, largest=False)  # (S, M, k)
    logits = -dist2 / (dim * scale)
    # Clients without keys have only -inf logits: give them finite ones, drop them after.
    logits = torch.where(has_keys.view(s, 1, 1), logits, logits.new_zeros(()))
    weight = logits.softmax(dim=-1)  # padding neighbours (inf distance) get weight 0
    m, kk = index.shape[1:]
    votes = values.gather(1, index.reshape(s, m * kk, 1).expand(-1, -1, values.size(-1)))
    out = (weight.unsqueeze(-1) * votes.view(s, m, kk, -1)).sum(dim=2)
    return torch.where(has_keys.view(s, 1, 1), out, out.new_zeros(())), has_keys
