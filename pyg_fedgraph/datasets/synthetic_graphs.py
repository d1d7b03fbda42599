r"""A synthetic graph with planted communities whose best models differ, for
tests and benchmarks of subgraph federated learning that need no data."""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from pyg_fedgraph.transforms.community_partition import CommunityPartition
from pyg_fedgraph.transforms.fedpub_preprocess import random_node_split
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["contextual_sbm", "planted_graph_federation"]


def _uniform_in(start: Tensor, size: Tensor, gen: torch.Generator) -> Tensor:
    r"""One position drawn uniformly in each block ``[start, start + size)``."""
    return start + (torch.rand(start.shape, generator=gen) * size).long().clamp(max=size - 1)


def contextual_sbm(num_nodes: int = 600, num_communities: int = 4, num_classes: int = 4,
                   num_features: int = 16, separation: float = 1.0, avg_degree: float = 8.0,
                   intra_community: float = 0.9, homophily: float = 0.8,
                   mean_norm: float = 2.0, noise: float = 1.0, train: float = 0.5,
                   test: float = 0.25, seed: int = 0) -> Data:
    r"""A contextual stochastic block model (Deshpande et al., `"Contextual
    Stochastic Block Models" <https://arxiv.org/abs/1807.09596>`_, NeurIPS
    2018: block-structured edges, Gaussian features given the label) with
    :math:`K` planted communities whose label distributions and
    class-conditional feature means move apart as ``separation``
    :math:`s \in [0, 1]` grows, so that different models are best for
    different communities at :math:`s = 1` and one model serves all at
    :math:`s = 0`.

    Node :math:`v` lies in community :math:`k_v = \lfloor v K / n \rfloor`
    (consecutive blocks of near-equal size). Its label is drawn from

    .. math::
        p_k(c) = \frac{1 - s}{C} + s\, \frac{\mathbb{1}[(c - k) \bmod C <
        \lceil C/2 \rceil]}{\lceil C/2 \rceil},

    uniform at :math:`s = 0`, half of the classes (a different half for
    neighbouring communities) at :math:`s = 1`. Its features are

    .. math::
        \mathbf{x}_v = \boldsymbol{\mu}_{k_v, y_v} + \sigma\,
        \boldsymbol{\varepsilon}_v, \quad
        \boldsymbol{\mu}_{k,c} = \sqrt{1 - s}\, \mathbf{a}_c + \sqrt{s}\,
        \mathbf{b}_{k,c}, \quad \mathbf{a}_c, \mathbf{b}_{k,c} \sim
        \mathcal{N}\Big(\mathbf{0}, \tfrac{\rho^2}{F} \mathbf{I}\Big), \quad
        \boldsymbol{\varepsilon}_v \sim \mathcal{N}(\mathbf{0}, \mathbf{I}),

    so class means are shared at :math:`s = 0`, independent across
    communities at :math:`s = 1` (expected cosine :math:`1 - s` between
    the means of one class in two communities), with expected norm
    :math:`\rho` throughout. Edges: :math:`m = \mathrm{round}(n d / 2)`
    draws, each from a uniform node :math:`u` to a node of its community
    (probability :math:`q`; then of its own label with probability
    :math:`h`, otherwise any) or of another community (probability
    :math:`1 - q`), uniform within the chosen block; self loops and
    duplicates are removed and edges made undirected, so the expected
    degree is slightly below :math:`d`. The graph is thus community-
    structured at every :math:`s`; only features and labels tell
    communities apart.

    The defaults (stated in the signature: :math:`n = 600, K = 4, C = 4, F =
    16, s = 1, d = 8, q = 0.9, h = 0.8, \rho = 2, \sigma = 1`, split 50 / 25
    / 25) make a graph that builds in milliseconds; every draw comes from
    generators seeded by ``seed``.

    Args:
        num_nodes (int, optional): :math:`n`. (default: :obj:`600`)
        num_communities (int, optional): :math:`K`. (default: :obj:`4`)
        num_classes (int, optional): :math:`C`. (default: :obj:`4`)
        num_features (int, optional): :math:`F`. (default: :obj:`16`)
        separation (float, optional): :math:`s \in [0, 1]`.
            (default: :obj:`1.0`)
        avg_degree (float, optional): :math:`d`. (default: :obj:`8.0`)
        intra_community (float, optional): :math:`q`, the share of edge
            draws inside a community. (default: :obj:`0.9`)
        homophily (float, optional): :math:`h`, the share of a community's
            edge draws that go to a node of the same label.
            (default: :obj:`0.8`)
        mean_norm (float, optional): :math:`\rho`. (default: :obj:`2.0`)
        noise (float, optional): :math:`\sigma`. (default: :obj:`1.0`)
        train (float, optional): the share of training nodes.
            (default: :obj:`0.5`)
        test (float, optional): the share of test nodes; validation gets the
            rest (:func:`~pyg_fedgraph.transforms.random_node_split`).
            (default: :obj:`0.25`)
        seed (int, optional): the seed. (default: :obj:`0`)

    Returns:
        ``Data(x, edge_index, y, community, train_mask, val_mask,
        test_mask)``.

    Shapes:
        - **x:** :math:`(n, F)`; **y**, **community**, masks: :math:`(n,)`
        - **edge_index:** :math:`(2, |\mathcal{E}|)`, both directions
    """
    if num_communities < 1 or num_nodes < num_communities or num_classes < 2:
        raise ValueError(f"need num_classes >= 2 and num_nodes ({num_nodes}) >= "
                         f"num_communities ({num_communities}) >= 1")
    for name, value in [("separation", separation), ("intra_community", intra_community),
                        ("homophily", homophily)]:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    if avg_degree < 0 or mean_norm < 0 or noise < 0:
        raise ValueError("avg_degree, mean_norm and noise must be non-negative")
    n, K, C, F, s = num_nodes, num_communities, num_classes, num_features, float(separation)

    community = torch.arange(n) * K // n
    half = math.ceil(C / 2)
    favoured = ((torch.arange(C)[None, :] - torch.arange(K)[:, None]) % C < half).double()
    probs = (1 - s) / C + s * favoured / half  # (K, C)
    y = torch.multinomial(probs[community], 1, generator=make_generator(
        seed, "synthetic-graph", 0)).squeeze(1)

    gen = make_generator(seed, "synthetic-graph", 1)
    scale = mean_norm / math.sqrt(F)
    shared = torch.randn(C, F, generator=gen) * scale
    own = torch.randn(K, C, F, generator=gen) * scale
    means = math.sqrt(1 - s) * shared[None] + math.sqrt(s) * own  # (K, C, F)
    x = means[community, y] + noise * torch.randn(n, F, generator=make_generator(
        seed, "synthetic-graph", 2))

    edge_index = _block_edges(community, y, K, C, round(n * avg_degree / 2),
                              intra_community, homophily,
                              make_generator(seed, "synthetic-graph", 3))
    train_mask, val_mask, test_mask = random_node_split(n, train, test, seed)
    return Data(x=x, edge_index=edge_index, y=y, community=community,
                train_mask=train_mask, val_mask=val_mask, test_mask=test_mask)


def _block_edges(community: Tensor, y: Tensor, K: int, C: int, num_draws: int,
                 intra: float, homophily: float, gen: torch.Generator) -> Tensor:
    n = community.numel()
    # Nodes ordered by (community, label): blocks of communities and of cells.
    cell = community * C + y
    by_cell = torch.argsort(cell, stable=True)
    cell_size = torch.bincount(cell, minlength=K * C)
    cell_start = torch.cumsum(cell_size, 0) - cell_size
    comm_size = torch.bincount(community, minlength=K)
    comm_start = torch.cumsum(comm_size, 0) - comm_size  # nodes are ordered by community

    u = torch.randint(n, (num_draws,), generator=gen)
    kind = torch.rand(num_draws, generator=gen)
    same_label = kind < intra * homophily
    same_comm = (kind >= intra * homophily) & (kind < intra)
    k = community[u]
    v = torch.empty_like(u)
    v[same_label] = by_cell[_uniform_in(cell_start[cell[u[same_label]]],
                                        cell_size[cell[u[same_label]]], gen)]
    v[same_comm] = _uniform_in(comm_start[k[same_comm]], comm_size[k[same_comm]], gen)
    other = ~(same_label | same_comm)
    if K > 1:  # a uniform node outside the community: skip over its block
        r = _uniform_in(torch.zeros_like(u[other]), n - comm_size[k[other]], gen)
        v[other] = r + (r >= comm_start[k[other]]) * comm_size[k[other]]
    else:
        v[other] = u[other]  # no other community: dropped as self loops
    edge_index, _ = remove_self_loops(torch.stack([u, v]))
    return to_undirected(edge_index, num_nodes=n)


def planted_graph_federation(num_clients: int = 20, separation: float = 1.0, seed: int = 0,
                             **kwargs: Any) -> tuple[Data, list[Data]]:
    r"""A :func:`contextual_sbm` graph split so that each client lies within
    one community (:class:`~pyg_fedgraph.transforms.CommunityPartition`:
    ``num_clients / K`` clients per community, disjoint random node sets),
    each client's ``group`` being its community: the true client groups.

    Args:
        num_clients (int, optional): the number of clients, a multiple of
            the number of communities. (default: :obj:`20`)
        separation (float, optional): :math:`s` of :func:`contextual_sbm`.
            (default: :obj:`1.0`)
        seed (int, optional): the seed of the graph and of the split.
            (default: :obj:`0`)
        **kwargs: the other arguments of :func:`contextual_sbm`.

    Returns:
        ``(graph, clients)``.
    """
    data = contextual_sbm(separation=separation, seed=seed, **kwargs)
    return data, CommunityPartition(num_clients, seed=seed)(data)
