r"""Clients that hold graphs: node classification on each client's subgraph.

**How a client holds a graph.** Client :math:`i` holds one
:class:`~torch_geometric.data.Data`: node features :math:`X_i
\in \mathbb{R}^{|\mathcal{V}_i| \times F}`, its edges, node labels and
train / validation / test node masks. A :class:`GraphFederatedDataset`
keeps all clients' graphs padded to common sizes (:class:`ClientGraphs`) so
that their models run in one batched computation, exactly as clients that
hold images do:

* a *sample* is a node: split :math:`s` of client :math:`i` lists the ids of
  its :math:`s`-nodes (:class:`~pyg_fedgraph.data.ClientSplit` with node ids
  as inputs and their labels as targets), so mini-batches, sample counts,
  FedAvg's weights and class counts read as for any data set;
* :meth:`GraphFederatedDataset.batch` returns, for a mini-batch of nodes, the
  client's whole graph and the nodes' positions, ``(x, edge_index,
  edge_weight, index)``: a client model is called as ``model(x, edge_index,
  edge_weight, index)`` (PyG's argument order) and returns the outputs of the
  ``index`` nodes, having propagated over the client's whole subgraph (the
  full-batch training of FED-PUB when the batch holds all training nodes);
* edges carry a self loop on every node and GCN's symmetric normalization
  as ``edge_weight`` (:math:`\hat{D}^{-1/2} \hat{A} \hat{D}^{-1/2}`, computed
  once): PyG's ``GCNConv`` then runs with ``normalize=False`` and
  ``add_self_loops=False``, which :func:`torch.vmap` can batch (its own
  self-loop insertion indexes with a boolean mask, which it cannot).

Padding: every client's node rows end with one padding node of zeros (row
:math:`V`), and its edge list is padded with edges from that node to itself
of weight 0, so that padding never reaches a real node, whatever the layer
(sums, means, attention).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_fedgraph.data.federated_dataset import (
    SPLITS,
    ClientSplit,
    DatasetDefaults,
    FederatedDataset,
)

__all__ = ["ClientGraphs", "GraphFederatedDataset", "gcn_edge_weight"]


def gcn_edge_weight(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    r"""The edges with a self loop on every node (existing self loops are
    dropped first) and their GCN weights (Kipf and Welling, ICLR 2017)
    :math:`\hat{d}_u^{-1/2} \hat{d}_v^{-1/2}`, :math:`\hat{d}` the in-degrees
    counted with the self loops.

    Shapes:
        - **input:** :math:`(2, E)`
        - **output:** :math:`(2, E')`, :math:`(E')`
    """
    keep = edge_index[0] != edge_index[1]
    loops = torch.arange(num_nodes, dtype=edge_index.dtype).repeat(2, 1)
    ei = torch.cat([edge_index[:, keep], loops], dim=1)
    deg = torch.zeros(num_nodes).index_add_(0, ei[1], torch.ones(ei.size(1)))
    inv = deg.pow(-0.5)
    return ei, inv[ei[0]] * inv[ei[1]]


@dataclass
class ClientGraphs:
    r"""The graphs of :math:`N` clients, padded to common sizes.

    Args:
        x (torch.Tensor): node features :math:`(N, V + 1, F)`; rows past a
            client's nodes are zeros, row :math:`V` its padding node.
        edge_index (torch.Tensor): edges :math:`(N, 2, E)` with a self loop on
            every real node; padding edges join the padding node to itself.
        edge_weight (torch.Tensor): GCN's normalized weight of every edge
            :math:`(N, E)` (0 on padding).
        num_nodes (torch.Tensor): real nodes per client :math:`(N,)`.
        num_edges (torch.Tensor): real edges per client, self loops
            included :math:`(N,)`.
    """
    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor
    num_nodes: Tensor
    num_edges: Tensor

    @classmethod
    def from_data(cls, graphs: Sequence[Data]) -> ClientGraphs:
        r"""Pads the clients' graphs (each a :class:`Data` with ``x`` and
        ``edge_index``)."""
        if not graphs:
            raise ValueError("a federation needs at least one client graph")
        widths = {int(g.x.size(1)) for g in graphs}
        if len(widths) != 1:
            raise ValueError(f"client graphs have node features of widths {sorted(widths)}; "
                             f"pad them to one width first")
        edges = [gcn_edge_weight(g.edge_index.long(), g.num_nodes) for g in graphs]
        v = max(g.num_nodes for g in graphs)
        e = max(ei.size(1) for ei, _ in edges)
        n = len(graphs)
        x = graphs[0].x.new_zeros((n, v + 1, widths.pop()))
        edge_index = torch.full((n, 2, e), v, dtype=torch.long)
        edge_weight = torch.zeros(n, e)
        for i, (g, (ei, w)) in enumerate(zip(graphs, edges, strict=True)):
            x[i, :g.num_nodes] = g.x
            edge_index[i, :, :ei.size(1)] = ei
            edge_weight[i, :w.numel()] = w
        return cls(x.float(), edge_index, edge_weight,
                   torch.tensor([g.num_nodes for g in graphs], dtype=torch.long),
                   torch.tensor([ei.size(1) for ei, _ in edges], dtype=torch.long))

    def select(self, clients: Tensor) -> ClientGraphs:
        r"""The graphs of ``clients`` :math:`(S,)`."""
        return ClientGraphs(*self.inputs(clients), self.num_nodes[clients.cpu()],
                            self.num_edges[clients.cpu()])

    def inputs(self, clients: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        r"""``x``, ``edge_index`` and ``edge_weight`` of ``clients``
        :math:`(S,)`. When ``clients`` is every client in order (a batch of
        the whole federation, the usual one), these are the tensors
        themselves, not copies: copying ``x`` :math:`(N, V + 1, F)` costs
        about as much as a layer's product (CiteSeer over 50 clients:
        111 MB a batch). Callers must not write into them."""
        n = self.x.size(0)
        if clients.numel() == n and bool((clients == torch.arange(n, device=clients.device)).all()):
            return self.x, self.edge_index, self.edge_weight
        rows = clients.to(self.x.device)
        return self.x[rows], self.edge_index[rows], self.edge_weight[rows]

    def to(self, device: torch.device | str) -> ClientGraphs:
        return ClientGraphs(self.x.to(device), self.edge_index.to(device),
                            self.edge_weight.to(device), self.num_nodes, self.num_edges)


@dataclass
class GraphFederatedDataset(FederatedDataset):
    r"""A federation of clients that hold graphs (node classification; see
    the module docstring). ``splits[s]`` lists each client's :math:`s`-nodes;
    ``graphs`` holds the graphs themselves. The other arguments are those
    of :class:`~pyg_fedgraph.data.FederatedDataset`.

    Args:
        graphs (ClientGraphs): the clients' padded graphs.
    """
    graphs: ClientGraphs | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.graphs is None:
            raise ValueError("a GraphFederatedDataset needs the clients' graphs")
        if self.graphs.x.size(0) != self.num_clients:
            raise ValueError(f"{self.graphs.x.size(0)} client graphs for {self.num_clients} "
                             f"clients")

    @classmethod
    def from_clients(cls, name: str, clients: Sequence[Data], num_classes: int, *,
                     edge_index: Tensor | None = None, edge_weight: Tensor | None = None,
                     client_labels: Tensor | None = None, info: dict[str, Any] | None = None,
                     defaults: DatasetDefaults | None = None) -> GraphFederatedDataset:
        r"""The federation of ``clients``, one :class:`Data` each with ``x``,
        ``edge_index``, ``y`` and the boolean node masks ``train_mask``,
        ``val_mask``, ``test_mask``."""
        for i, g in enumerate(clients):
            missing = [k for k in ("x", "edge_index", "y", "train_mask", "val_mask",
                                   "test_mask") if getattr(g, k, None) is None]
            if missing:
                raise ValueError(f"client {i}'s graph has no {', '.join(missing)}")
        splits = {}
        for split in SPLITS:
            ids = [getattr(g, f"{split}_mask").nonzero().view(-1) for g in clients]
            splits[split] = ClientSplit.from_lists(ids, [g.y[i].long() for g, i
                                                         in zip(clients, ids, strict=True)])
        return cls(name, "classification", splits, num_classes, edge_index, edge_weight,
                   client_labels, dict(info or {}), defaults,
                   graphs=ClientGraphs.from_data(clients))

    @property
    def input_shape(self) -> tuple[int, ...]:
        r"""The node features of one node :math:`(F,)`."""
        assert self.graphs is not None
        return tuple(self.graphs.x.shape[2:])

    @property
    def input_kind(self) -> str:
        return "graph"

    @property
    def device(self) -> torch.device:
        assert self.graphs is not None
        return self.graphs.x.device

    def batch(self, split: str, index: Tensor, clients: Tensor | None = None
              ) -> tuple[Any, Tensor]:
        r"""The nodes at positions ``index`` :math:`(S, B)` of split ``split``
        of ``clients`` :math:`(S,)`, as the model's inputs ``(x, edge_index,
        edge_weight, nodes)`` of shapes :math:`(S, V + 1, F)`, :math:`(S, 2,
        E)`, :math:`(S, E)`, :math:`(S, B)` and their labels :math:`(S, B)`."""
        assert self.graphs is not None
        nodes, y = self.splits[split].gather(index, clients)
        x, edge_index, edge_weight = self.graphs.inputs(
            torch.arange(self.num_clients) if clients is None else clients)
        return (x, edge_index, edge_weight, nodes), y

    def to(self, device: torch.device | str) -> GraphFederatedDataset:
        device = torch.device(device)
        if self.device == device or (device.index is None and self.device.type == device.type):
            return self
        assert self.graphs is not None
        return dataclasses.replace(self, splits={s: sp.to(device)
                                                 for s, sp in self.splits.items()},
                                   graphs=self.graphs.to(device))

    def subset(self, clients: Tensor) -> GraphFederatedDataset:
        base = super().subset(clients)
        assert self.graphs is not None
        return GraphFederatedDataset(**{f.name: getattr(base, f.name)
                                        for f in dataclasses.fields(FederatedDataset)},
                                     graphs=self.graphs.select(clients))

    def __repr__(self) -> str:
        assert self.graphs is not None
        n = {s: int(sp.counts.sum()) for s, sp in self.splits.items()}
        return (f"{self.__class__.__name__}({self.name}, clients={self.num_clients}, "
                f"nodes={int(self.graphs.num_nodes.sum())}, nodes per split={n})")
