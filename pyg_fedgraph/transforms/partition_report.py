r"""What each client of a graph partition holds."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch_geometric.data import Data

from pyg_fedgraph.transforms.cut_edge_graph import client_membership
from pyg_fedgraph.transforms.graph_partition import undirected_edges

__all__ = ["partition_report"]

_MASKS = ("train_mask", "val_mask", "test_mask")


def partition_report(data: Data, clients: Sequence[Data]) -> list[dict[str, Any]]:
    r"""One row per client of a partition of ``data``:

    - ``client``: its index; ``group``: its group (or :obj:`None`);
    - ``nodes``: :math:`|\mathcal{V}_i|`;
    - ``edges``: the undirected edges of the original graph with both ends in
      :math:`\mathcal{V}_i` (those the client holds);
    - ``edges_cut``: the undirected edges with exactly one end in
      :math:`\mathcal{V}_i` (those the partition took from it);
    - ``labels``: the number of its nodes of each class
      :math:`0, \ldots, C - 1` (:math:`C` from ``data.y``), where ``data``
      has labels;
    - ``train``, ``val``, ``test``: its nodes in each mask, where ``data``
      has the mask.

    Edges are counted on the original graph, from each client's ``node_id``
    (self loops and duplicates ignored), all clients at once.

    Args:
        data (Data): the original graph.
        clients (list of Data): the clients, each with ``node_id``.
    """
    member = client_membership(clients, data.num_nodes)
    u, v = undirected_edges(data.edge_index, data.num_nodes)
    ends_u, ends_v = member[:, u].long(), member[:, v].long()
    inside = (ends_u * ends_v).sum(dim=1)
    cut = ends_u.sum(dim=1) + ends_v.sum(dim=1) - 2 * inside
    memberf = member.float()
    columns: dict[str, torch.Tensor] = {}
    y = getattr(data, "y", None)
    if isinstance(y, torch.Tensor) and y.dim() == 1 and y.numel() == data.num_nodes:
        one_hot = torch.nn.functional.one_hot(y.long(), int(y.max()) + 1).float()
        columns["labels"] = (memberf @ one_hot).round().long()
    for mask in _MASKS:
        value = getattr(data, mask, None)
        if isinstance(value, torch.Tensor) and value.shape == (data.num_nodes,):
            columns[mask.removesuffix("_mask")] = (member & value.bool()).sum(dim=1)
    rows = []
    for i, client in enumerate(clients):
        row: dict[str, Any] = {"client": i, "group": getattr(client, "group", None),
                               "nodes": int(member[i].sum()), "edges": int(inside[i]),
                               "edges_cut": int(cut[i])}
        for key, value in columns.items():
            row[key] = value[i].tolist()
        rows.append(row)
    return rows
