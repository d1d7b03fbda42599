r"""Client graphs as ``edge_index`` tensors."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["complete_graph"]


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
