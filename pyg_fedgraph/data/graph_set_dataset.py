r"""Clients that hold sets of graphs: graph classification on each client's
own small graphs (molecules, proteins).

**How a client holds a set of graphs.** Client :math:`i` holds graphs
:math:`\mathcal{G}_i = \{G_1, G_2, \ldots\}`, each with node features
:math:`X_g \in \mathbb{R}^{|\mathcal{V}_g| \times F}`, edges and one label.
A :class:`GraphSetFederatedDataset` keeps them so that all clients' models
run in one batched computation, as clients that hold images do:

* a *sample* is a graph: split :math:`s` of client :math:`i` lists the ids
  of its :math:`s`-graphs in a :class:`GraphStore` (a
  :class:`~pyg_fedgraph.data.ClientSplit` with graph ids as inputs and graph
  labels as targets), so mini-batches, sample counts, FedAvg's weights and
  class counts read as for any data set;
* the store keeps every graph once, all nodes in one feature matrix and all
  edges in one edge list (node ids counted within their graph), with
  pointers to where each graph's nodes and edges start (PyG's
  :class:`~torch_geometric.data.Batch` ``ptr``, CSR-like);
* :meth:`GraphSetFederatedDataset.batch` turns a step's graph ids
  :math:`(S, B)` into one disjoint union per client, the clients' unions
  padded to the largest of *this step* (:func:`collate_graph_sets`):
  node features :math:`(S, V, F)`, edges :math:`(S, 2, E)`, the graph slot
  of every node :math:`(S, V)` and the number of nodes of every graph
  :math:`(S, B)`, plus each client's class mask :math:`(S, C)`. A client
  model is called as ``model(x, edge_index, batch, graph_size,
  class_mask)`` (PyG's order) and returns one output row per graph.

Padding is per step and tight: :math:`V` is one more than the largest
union's nodes, :math:`E` the largest union's edges. Padding every graph to the
largest graph of a data set instead (620 nodes in PROTEINS, whose graphs have
39 on average) would multiply the work about sixteenfold. Padding nodes
(positions past a client's union, always including the last, :math:`V - 1`)
have zero features and graph slot :math:`B`, which pooling drops; padding
edges join node :math:`V - 1` to itself, so padding never reaches a real node
whatever the layer (sums, means, attention).

**Classes.** Clients may hold datasets with different numbers of classes
(the cross-dataset federations of GCFL, Xie et al., NeurIPS 2021): every
model has a head of ``num_classes`` outputs, the most of any dataset, and
``class_mask[i, c]`` says whether class :math:`c` exists for client
:math:`i`. The models of :mod:`pyg_fedgraph.models.graph_classifiers` set
the other outputs to the lowest float before the loss, so that they take no
probability in the cross-entropy nor the argmax of the accuracy.
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

__all__ = ["GraphStore", "GraphSetFederatedDataset", "collate_graph_sets"]


@dataclass
class GraphStore:
    r"""Many graphs kept in one place: their nodes and edges concatenated,
    with pointers (graph :math:`g` owns node rows
    ``node_ptr[g]:node_ptr[g+1]`` and edges ``edge_ptr[g]:edge_ptr[g+1]``).

    Args:
        x (torch.Tensor): node features of all graphs, then one row of zeros
            :math:`(|\mathcal{V}| + 1, F)` (what padding nodes read).
        edge_index (torch.Tensor): edges of all graphs :math:`(2,
            |\mathcal{E}|)`, node ids counted from 0 within each graph.
        node_ptr (torch.Tensor): :math:`(G + 1,)`.
        edge_ptr (torch.Tensor): :math:`(G + 1,)`.
    """
    x: Tensor
    edge_index: Tensor
    node_ptr: Tensor
    edge_ptr: Tensor

    def __post_init__(self) -> None:
        if self.node_ptr.numel() != self.edge_ptr.numel():
            raise ValueError(f"node_ptr and edge_ptr disagree on the number of graphs: "
                             f"{self.node_ptr.numel() - 1} and {self.edge_ptr.numel() - 1}")
        if int(self.node_ptr[-1]) + 1 != self.x.size(0):
            raise ValueError(f"x holds {self.x.size(0)} rows; the graphs have "
                             f"{int(self.node_ptr[-1])} nodes plus one padding row")
        if int(self.edge_ptr[-1]) != self.edge_index.size(1):
            raise ValueError(f"edge_index holds {self.edge_index.size(1)} edges; the pointers "
                             f"say {int(self.edge_ptr[-1])}")

    @classmethod
    def from_data(cls, graphs: Sequence[Data]) -> GraphStore:
        r"""The store of ``graphs`` (each a :class:`Data` with ``x`` and
        ``edge_index``), in order: graph :math:`g` of the list is id :math:`g`."""
        if not graphs:
            raise ValueError("a graph store needs at least one graph")
        widths = {int(g.x.size(1)) for g in graphs}
        if len(widths) != 1:
            raise ValueError(f"graphs have node features of widths {sorted(widths)}; pad them "
                             f"to one width first")
        for i, g in enumerate(graphs):
            if g.edge_index.numel() and (int(g.edge_index.min()) < 0
                                         or int(g.edge_index.max()) >= g.x.size(0)):
                raise ValueError(f"graph {i} has edges outside its {g.x.size(0)} nodes")
        nodes = torch.tensor([g.x.size(0) for g in graphs])
        edges = torch.tensor([g.edge_index.size(1) for g in graphs])
        x = torch.cat([*(g.x.float() for g in graphs), graphs[0].x.new_zeros(1, widths.pop())
                       .float()])
        return cls(x, torch.cat([g.edge_index.long() for g in graphs], dim=1),
                   torch.cat([nodes.new_zeros(1), nodes.cumsum(0)]),
                   torch.cat([edges.new_zeros(1), edges.cumsum(0)]))

    @property
    def num_graphs(self) -> int:
        return self.node_ptr.numel() - 1

    @property
    def num_nodes(self) -> Tensor:
        r"""Nodes of every graph :math:`(G,)`."""
        return self.node_ptr[1:] - self.node_ptr[:-1]

    @property
    def num_edges(self) -> Tensor:
        r"""Edges of every graph :math:`(G,)`."""
        return self.edge_ptr[1:] - self.edge_ptr[:-1]

    def graph(self, g: int) -> Data:
        r"""Graph ``g`` as a :class:`Data` (``x``, ``edge_index``)."""
        a, b = int(self.node_ptr[g]), int(self.node_ptr[g + 1])
        c, d = int(self.edge_ptr[g]), int(self.edge_ptr[g + 1])
        return Data(x=self.x[a:b], edge_index=self.edge_index[:, c:d], num_nodes=b - a)

    def select(self, graphs: Tensor) -> GraphStore:
        r"""The store of graphs ``graphs`` :math:`(K,)`, in that order (graph
        ``graphs[k]`` becomes id :math:`k`)."""
        graphs = graphs.to(self.node_ptr.device, torch.long)
        rows = _ranges(self.node_ptr[graphs], self.num_nodes[graphs])
        cols = _ranges(self.edge_ptr[graphs], self.num_edges[graphs])
        nodes, edges = self.num_nodes[graphs], self.num_edges[graphs]
        pad = torch.full((1,), self.x.size(0) - 1, dtype=torch.long)
        return GraphStore(self.x[torch.cat([rows, pad]).to(self.x.device)],
                          self.edge_index[:, cols.to(self.edge_index.device)],
                          torch.cat([nodes.new_zeros(1), nodes.cumsum(0)]),
                          torch.cat([edges.new_zeros(1), edges.cumsum(0)]))

    def to(self, device: torch.device | str) -> GraphStore:
        r"""The store with node features and edges on ``device`` (the
        pointers stay on the CPU, where batches are planned)."""
        return GraphStore(self.x.to(device), self.edge_index.to(device), self.node_ptr,
                          self.edge_ptr)


def _ranges(start: Tensor, length: Tensor) -> Tensor:
    r"""The concatenation of ``arange(start[k], start[k] + length[k])`` over
    :math:`k`, without a loop."""
    owner = torch.repeat_interleave(torch.arange(length.numel()), length)
    first = length.cumsum(0) - length
    return start[owner] + torch.arange(owner.numel()) - first[owner]


def collate_graph_sets(store: GraphStore, graphs: Tensor
                       ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""Each row of graph ids ``graphs`` :math:`(S, B)` as one disjoint
    union, the :math:`S` unions padded to common sizes (see the module
    docstring): client :math:`s`'s union holds its graphs' nodes one graph
    after the other,

    .. math::
        V = 1 + \max_s \sum_b |\mathcal{V}_{g_{sb}}|, \qquad
        E = \max\big(1, \max_s \sum_b |\mathcal{E}_{g_{sb}}|\big).

    Built with index arithmetic over all :math:`S B` graphs at once (no loop
    over clients or graphs). Graph ids may repeat (a batch filled up by
    wrapping around a client's graphs).

    Args:
        store (GraphStore): the graphs.
        graphs (torch.Tensor): ids into ``store`` :math:`(S, B)`.

    Returns:
        ``(x, edge_index, batch, graph_size)`` of shapes :math:`(S, V, F)`,
        :math:`(S, 2, E)`, :math:`(S, V)` (graph slot :math:`0..B-1` of every
        node, :math:`B` for padding) and :math:`(S, B)` (nodes of every
        graph), on the store's device.
    """
    device = store.x.device
    ids = graphs.to(torch.long).cpu()
    s, b = ids.shape
    flat = ids.reshape(-1)
    n = store.num_nodes[flat]                               # (S B,)
    e = store.num_edges[flat]
    node_off = (n.view(s, b).cumsum(1) - n.view(s, b)).reshape(-1)  # offset within the union
    edge_off = (e.view(s, b).cumsum(1) - e.view(s, b)).reshape(-1)
    v = int(n.view(s, b).sum(1).max()) + 1 if flat.numel() else 1
    m = max(int(e.view(s, b).sum(1).max()) if flat.numel() else 0, 1)
    # Every real node: its graph (row of the S B graphs), its place in the union, its row
    # in the store.
    owner = torch.repeat_interleave(torch.arange(s * b), n)
    within = torch.arange(owner.numel()) - (n.cumsum(0) - n)[owner]
    client, pos = owner // b, node_off[owner] + within
    rows = torch.full((s, v), store.x.size(0) - 1, dtype=torch.long)
    rows[client, pos] = store.node_ptr[flat][owner] + within
    slot = torch.full((s, v), b, dtype=torch.long)
    slot[client, pos] = owner % b
    # Every real edge: shifted by its graph's offset in the union.
    owner = torch.repeat_interleave(torch.arange(s * b), e)
    within = torch.arange(owner.numel()) - (e.cumsum(0) - e)[owner]
    source = (store.edge_ptr[flat][owner] + within).to(device)
    edge_index = torch.full((s, 2, m), v - 1, dtype=torch.long, device=device)
    edge_index[(owner // b).to(device), :, (edge_off[owner] + within).to(device)] = \
        store.edge_index[:, source].t() + node_off[owner].to(device).unsqueeze(1)
    return (store.x[rows.to(device)], edge_index, slot.to(device),
            n.view(s, b).to(device))


@dataclass
class GraphSetFederatedDataset(FederatedDataset):
    r"""A federation of clients that hold sets of graphs (graph
    classification; see the module docstring). ``splits[s]`` lists each
    client's :math:`s`-graphs by their ids in ``store``. The arguments
    before ``store`` are :class:`~pyg_fedgraph.data.FederatedDataset`'s.

    Args:
        store (GraphStore): every client's graphs.
        class_mask (torch.Tensor, optional): which classes exist for each
            client :math:`(N, C)`, bool (default: all).
    """
    store: GraphStore | None = None
    class_mask: Tensor | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.store is None:
            raise ValueError("a GraphSetFederatedDataset needs its graphs (store=)")
        if self.task != "classification" or self.num_classes is None:
            raise ValueError("a GraphSetFederatedDataset holds graph classification data")
        if self.class_mask is None:
            self.class_mask = torch.ones(self.num_clients, self.num_classes, dtype=torch.bool)
        if tuple(self.class_mask.shape) != (self.num_clients, self.num_classes):
            raise ValueError(f"class_mask has shape {tuple(self.class_mask.shape)}, expected "
                             f"({self.num_clients}, {self.num_classes}): one row per client, "
                             f"one column per class")
        for name, split in self.splits.items():
            ids = split.x[split.sample_mask()]
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.store.num_graphs):
                raise ValueError(f"the {name} split names graphs outside the store's "
                                 f"{self.store.num_graphs}")

    @classmethod
    def from_clients(cls, name: str, clients: Sequence[Sequence[Sequence[Data]]],
                     num_classes: int, *, class_mask: Tensor | None = None,
                     edge_index: Tensor | None = None, edge_weight: Tensor | None = None,
                     client_labels: Tensor | None = None, info: dict[str, Any] | None = None,
                     defaults: DatasetDefaults | None = None) -> GraphSetFederatedDataset:
        r"""The federation of ``clients``: ``clients[i]`` is client
        :math:`i`'s ``(train, val, test)`` graphs, each a :class:`Data` with
        ``x``, ``edge_index`` and its label ``y`` (one value)."""
        graphs: list[Data] = []
        ids: dict[str, list[Tensor]] = {s: [] for s in SPLITS}
        labels: dict[str, list[Tensor]] = {s: [] for s in SPLITS}
        for i, parts in enumerate(clients):
            if len(parts) != len(SPLITS):
                raise ValueError(f"client {i} gives {len(parts)} sets of graphs; give "
                                 f"(train, val, test)")
            for split, part in zip(SPLITS, parts, strict=True):
                for g in part:
                    if getattr(g, "y", None) is None or g.y.numel() != 1:
                        raise ValueError(f"a {split} graph of client {i} has no single label y")
                ids[split].append(torch.arange(len(graphs), len(graphs) + len(part)))
                labels[split].append(torch.tensor([int(g.y) for g in part], dtype=torch.long))
                graphs.extend(part)
        splits = {s: ClientSplit.from_lists(ids[s], labels[s]) for s in SPLITS}
        return cls(name, "classification", splits, num_classes, edge_index, edge_weight,
                   client_labels, dict(info or {}), defaults, store=GraphStore.from_data(graphs),
                   class_mask=class_mask)

    @property
    def input_shape(self) -> tuple[int, ...]:
        r"""The node features of one node :math:`(F,)`."""
        assert self.store is not None
        return (int(self.store.x.size(1)),)

    @property
    def input_kind(self) -> str:
        return "graph-set"

    @property
    def device(self) -> torch.device:
        assert self.store is not None
        return self.store.x.device

    def batch(self, split: str, index: Tensor, clients: Tensor | None = None
              ) -> tuple[Any, Tensor]:
        r"""The graphs at positions ``index`` :math:`(S, B)` of split
        ``split`` of ``clients`` :math:`(S,)`, as the model's inputs ``(x,
        edge_index, batch, graph_size, class_mask)`` (see
        :func:`collate_graph_sets`; the class mask :math:`(S, C)`), and
        their labels :math:`(S, B)`."""
        assert self.store is not None and self.class_mask is not None
        ids, y = self.splits[split].gather(index, clients)
        x, edge_index, slot, size = collate_graph_sets(self.store, ids)
        rows = (torch.arange(self.num_clients) if clients is None else clients).cpu()
        return (x, edge_index, slot, size, self.class_mask[rows].to(self.device)), y

    def to(self, device: torch.device | str) -> GraphSetFederatedDataset:
        device = torch.device(device)
        if self.device == device or (device.index is None and self.device.type == device.type):
            return self
        assert self.store is not None
        return dataclasses.replace(self, splits={s: sp.to(device)
                                                 for s, sp in self.splits.items()},
                                   store=self.store.to(device))

    def subset(self, clients: Tensor) -> GraphSetFederatedDataset:
        r"""The federation of ``clients`` only, holding only their graphs (a
        Flower node keeps its own)."""
        assert self.store is not None and self.class_mask is not None
        base = super().subset(clients)
        real = {s: sp.sample_mask().cpu() for s, sp in base.splits.items()}
        used = torch.cat([sp.x[real[s]].long().cpu() for s, sp in base.splits.items()])
        keep, _ = torch.unique(used, return_inverse=True)
        renumber = torch.full((self.store.num_graphs,), -1, dtype=torch.long)
        renumber[keep] = torch.arange(keep.numel())
        splits = {}
        for s, sp in base.splits.items():
            x = torch.where(real[s], renumber[sp.x.long().cpu().clamp(min=0)],
                            0).to(sp.x.device, sp.x.dtype)
            splits[s] = dataclasses.replace(sp, x=x)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(FederatedDataset)}
        fields["splits"] = splits
        return GraphSetFederatedDataset(**fields, store=self.store.select(keep),
                                        class_mask=self.class_mask[clients.cpu()])

    def __repr__(self) -> str:
        n = {s: int(sp.counts.sum()) for s, sp in self.splits.items()}
        return (f"{self.__class__.__name__}({self.name}, clients={self.num_clients}, "
                f"graphs per split={n})")
