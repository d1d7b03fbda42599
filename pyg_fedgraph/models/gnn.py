r"""Client models for clients that hold graphs (node classification), built
from PyG's layers and batched over clients like every client model.

Each takes a client's graph as
:class:`~pyg_fedgraph.data.GraphFederatedDataset` gives it, ``(x,
edge_index, edge_weight, index)``, propagates over the whole graph and
returns the outputs of the nodes ``index``. The edges already carry a self
loop on every node and GCN's normalization (``edge_weight``), so the layers
run without inserting self loops or normalizing, which
:func:`torch.vmap` can batch over clients; called without ``edge_weight``,
:class:`GCN` normalizes the edges itself (outside :func:`torch.vmap`).

All end with a :class:`torch.nn.Linear` classifier, the head FedRoD, FedRep
and kNN-Per read.
"""
from __future__ import annotations

from typing import Annotated

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from pyg_fedgraph.hparams import Range

__all__ = ["GCN", "GraphSAGE", "GAT"]


def _pick(out: Tensor, index: Tensor | None) -> Tensor:
    return out if index is None else out[index]


class _GNN(nn.Module):
    r"""The shared frame: ``num_layers`` message-passing layers of
    ``hidden_channels`` with ReLU (and dropout), then a linear classifier."""

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int,
                 num_layers: int, dropout: float) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.hidden_channels = hidden_channels
        self.num_layers = num_layers
        self.dropout = dropout
        self.convs = nn.ModuleList()
        self.classifier = nn.Linear(hidden_channels, out_channels)

    def _layers(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
                index: Tensor | None = None) -> Tensor:
        r"""Outputs :math:`(B, C)` of the nodes ``index`` :math:`(B,)` (all
        :math:`V` nodes when ``None``) of the graph ``x`` :math:`(V, F)`,
        ``edge_index`` :math:`(2, E)`, ``edge_weight`` :math:`(E,)`."""
        h = self._layers(x, edge_index, edge_weight)
        return self.classifier(_pick(h, index))

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()  # type: ignore[operator]
        self.classifier.reset_parameters()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"hidden_channels={self.hidden_channels}, num_layers={self.num_layers})")


class GCN(_GNN):
    r"""A graph convolutional network client (`"Semi-Supervised
    Classification with Graph Convolutional Networks"
    <https://arxiv.org/abs/1609.02907>`_, Kipf and Welling, ICLR 2017), as
    FED-PUB's clients (Baek et al., ICML 2023): ``num_layers``
    :class:`~torch_geometric.nn.conv.GCNConv` of ``hidden_channels`` with
    ReLU, then a linear classifier,

    .. math::
        H^{(l+1)} = \mathrm{ReLU}\big(\hat{D}^{-1/2} \hat{A} \hat{D}^{-1/2}
        H^{(l)} W^{(l)}\big), \qquad \hat{y} = H^{(L)} W + b,

    :math:`\hat{A}` the adjacency with self loops.

    Args:
        in_channels (int): node features :math:`F`.
        out_channels (int): classes :math:`C`.
        hidden_channels (int, optional): width (default: :obj:`128`, FED-PUB's).
        num_layers (int, optional): GCN layers :math:`L` (default: :obj:`2`).
        dropout (float, optional): dropout after every layer in training
            (default: :obj:`0.0`).

    Shapes:
        - **input:** node features :math:`(V, F)`, edges :math:`(2, E)`, edge
          weights :math:`(E)` (optional), node indices :math:`(B)` (optional)
        - **output:** :math:`(B, C)`
    """

    def __init__(self, in_channels: int, out_channels: int,
                 hidden_channels: Annotated[int, Range(ge=1)] = 128,
                 num_layers: Annotated[int, Range(ge=1)] = 2,
                 dropout: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0) -> None:
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout)
        for i in range(num_layers):
            self.convs.append(GCNConv(in_channels if i == 0 else hidden_channels,
                                      hidden_channels, normalize=False, add_self_loops=False))

    def _layers(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None) -> Tensor:
        if edge_weight is None:  # called by hand: normalize here (not under torch.vmap)
            from pyg_fedgraph.data.graph_dataset import gcn_edge_weight
            edge_index, edge_weight = gcn_edge_weight(edge_index.cpu(), x.size(0))
            edge_index, edge_weight = edge_index.to(x.device), edge_weight.to(x)
        h = x
        for conv in self.convs:
            h = F.dropout(F.relu(conv(h, edge_index, edge_weight)), self.dropout,
                          self.training)
        return h


class GraphSAGE(_GNN):
    r"""A GraphSAGE client (`"Inductive Representation Learning on Large
    Graphs" <https://arxiv.org/abs/1706.02216>`_, Hamilton et al., NeurIPS
    2017): ``num_layers`` :class:`~torch_geometric.nn.conv.SAGEConv` (mean
    aggregation) with ReLU, then a linear classifier,

    .. math::
        \mathbf{h}_v^{(l+1)} = \mathrm{ReLU}\Big(W_1 \mathbf{h}_v^{(l)} + W_2
        \tfrac{1}{|\mathcal{N}(v)|} \textstyle\sum_{u \in \mathcal{N}(v)}
        \mathbf{h}_u^{(l)}\Big).

    The neighbourhoods :math:`\mathcal{N}(v)` of a federation's graphs hold
    :math:`v` itself (their self loops).

    Args:
        in_channels (int): node features :math:`F`.
        out_channels (int): classes :math:`C`.
        hidden_channels (int, optional): width (default: :obj:`128`).
        num_layers (int, optional): layers (default: :obj:`2`).
        dropout (float, optional): dropout after every layer in training
            (default: :obj:`0.0`).

    Shapes:
        - **input:** as :class:`GCN` (edge weights are not used)
        - **output:** :math:`(B, C)`
    """

    def __init__(self, in_channels: int, out_channels: int,
                 hidden_channels: Annotated[int, Range(ge=1)] = 128,
                 num_layers: Annotated[int, Range(ge=1)] = 2,
                 dropout: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0) -> None:
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout)
        for i in range(num_layers):
            self.convs.append(SAGEConv(in_channels if i == 0 else hidden_channels,
                                       hidden_channels))

    def _layers(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None) -> Tensor:
        h = x
        for conv in self.convs:
            h = F.dropout(F.relu(conv(h, edge_index)), self.dropout, self.training)
        return h


class GAT(_GNN):
    r"""A graph attention network client (`"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_, Veličković et al., ICLR 2018):
    ``num_layers`` :class:`~torch_geometric.nn.conv.GATConv` of ``heads``
    heads (concatenated, ``hidden_channels`` in all) with ELU, then a
    linear classifier. Attention runs over the edges with their self loops.

    Args:
        in_channels (int): node features :math:`F`.
        out_channels (int): classes :math:`C`.
        hidden_channels (int, optional): width, a multiple of ``heads``
            (default: :obj:`64`).
        num_layers (int, optional): layers (default: :obj:`2`).
        heads (int, optional): attention heads (default: :obj:`4`).
        dropout (float, optional): dropout after every layer in training
            (default: :obj:`0.0`).

    Shapes:
        - **input:** as :class:`GCN` (edge weights are not used)
        - **output:** :math:`(B, C)`
    """

    def __init__(self, in_channels: int, out_channels: int,
                 hidden_channels: Annotated[int, Range(ge=1)] = 64,
                 num_layers: Annotated[int, Range(ge=1)] = 2,
                 heads: Annotated[int, Range(ge=1)] = 4,
                 dropout: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0) -> None:
        if hidden_channels % heads:
            raise ValueError(f"hidden_channels={hidden_channels} is not a multiple of "
                             f"heads={heads}")
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout)
        self.heads = heads
        for i in range(num_layers):
            self.convs.append(GATConv(in_channels if i == 0 else hidden_channels,
                                      hidden_channels // heads, heads=heads,
                                      add_self_loops=False))

    def _layers(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None) -> Tensor:
        h = x
        for conv in self.convs:
            h = F.dropout(F.elu(conv(h, edge_index)), self.dropout, self.training)
        return h
