r"""Client graphs as ``edge_index`` tensors."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["complete_graph", "random_partition_graph"]


def complete_graph(num_nodes: int, *, self_loops: bool = True,
                   device: torch.device | str | None = None) -> Tensor:
    r"""The complete directed graph on :math:`N` nodes: every edge
    :math:`j \rightarrow i` (PyG's source-to-target order,
    ``edge_index[:, e] = (j, i)``), self loops included unless
    ``self_loops=False``.

    Edges are ordered by target, then source: with self loops, edge
    :math:`iN + j` goes from :math:`j` to :math:`i`; without them the same
    order skips the :math:`N` diagonal edges. PyG has no such helper; every
    all-pairs client graph of the project (pFedGAT's, FedAGHN's, SFL's
    fallback) is built here.

    Args:
        num_nodes (int): :math:`N \geq 0`.
        self_loops (bool, optional): include the edges :math:`i \rightarrow i`
            (default: :obj:`True`).
        device (torch.device, optional): where to build it (default: CPU).

    Shapes:
        - **output:** ``edge_index`` :math:`(2, N^2)`, or :math:`(2, N(N-1))`
          without self loops.
    """
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 0:
        raise ValueError(f"num_nodes must be a non-negative int, got {num_nodes!r}")
    idx = torch.arange(num_nodes, device=device)
    edge_index = torch.stack([idx.repeat(num_nodes), idx.repeat_interleave(num_nodes)])
    if not self_loops:
        edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return edge_index


def random_partition_graph(sizes: list[int], p_in: float, p_out: float = 0.0, *,
                           generator: torch.Generator | None = None) -> Tensor:
    r"""A random partition graph (a stochastic block model with equal
    probabilities within and between blocks): nodes in consecutive blocks of
    ``sizes``, each unordered pair :math:`\{u, v\}`, :math:`u \neq v`, joined
    with probability :math:`p_{in}` inside a block and :math:`p_{out}`
    between blocks, independently; edges in both directions, no self loops.

    The model of :func:`networkx.random_partition_graph`, which FED-PUB's
    server draws its proxy graph from (``JinheonBaek/FED-PUB``,
    ``models/fedpub/server.py``); here every draw comes from ``generator``
    (one uniform value per pair of nodes, in the order of
    :func:`torch.triu_indices`), so the graph is the same wherever it is built
    from the same seed.

    Args:
        sizes (list of int): the block sizes.
        p_in (float): :math:`p_{in} \in [0, 1]`.
        p_out (float, optional): :math:`p_{out} \in [0, 1]` (default: :obj:`0.0`).
        generator (torch.Generator, optional): the source of the draws.

    Shapes:
        - **output:** ``edge_index`` :math:`(2, 2|\mathcal{E}|)`, on the CPU.
    """
    if not all(isinstance(k, int) and k >= 0 for k in sizes):
        raise ValueError(f"sizes must be non-negative ints, got {sizes!r}")
    if not (0.0 <= p_in <= 1.0 and 0.0 <= p_out <= 1.0):
        raise ValueError(f"p_in and p_out must be probabilities, got {p_in} and {p_out}")
    n = sum(sizes)
    block = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes, dtype=torch.long))
    u, v = torch.triu_indices(n, n, offset=1)
    prob = torch.where(block[u] == block[v], p_in, p_out)
    keep = torch.rand(u.numel(), generator=generator) < prob
    u, v = u[keep], v[keep]
    return torch.stack([torch.cat([u, v]), torch.cat([v, u])])
