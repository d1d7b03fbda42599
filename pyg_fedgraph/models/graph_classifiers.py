r"""Client models for clients that hold sets of graphs (graph
classification), built from PyG's layers and batched over clients like
every client model.

Each takes a step's graphs of one client as
:class:`~pyg_fedgraph.data.GraphSetFederatedDataset` gives them, ``(x,
edge_index, batch, graph_size, class_mask)``: the disjoint union of the
graphs (padded), the graph slot of every node, the nodes of every graph and
the client's classes; it returns one row of class scores per graph. All
share GCFL's frame (Xie et al., NeurIPS 2021, the GIN of its code): an input
layer ``pre``, ``num_layers`` message-passing layers ``convs`` with ReLU and
dropout, a global pooling over each graph's nodes
(:func:`~pyg_fedgraph.nn.functional.global_pool`), a hidden layer ``post``
with ReLU and dropout, and a linear classifier ``classifier``:

.. math::
    \hat{\mathbf{y}}_G = W_c\, \mathrm{ReLU}\Big(W_p\,
    \mathrm{pool}_{v \in G}\, \mathbf{h}_v^{(L)} + \mathbf{b}_p\Big) +
    \mathbf{b}_c, \qquad \mathbf{h}_v^{(0)} = W_0 \mathbf{x}_v + \mathbf{b}_0 .

Classes a client does not have (``class_mask`` false) get the lowest float
as their score, so they take no probability in the cross-entropy and are
never predicted.

**What is shared.** With ``share="body"`` (the default, GCFL's protocol:
its server holds the GIN layers only, in every setting) the model declares
``pre``, ``post`` and ``classifier`` as
:attr:`private_parameters`: they stay on each client
(:mod:`pyg_fedgraph.train.private`), and only the message-passing body
``convs`` is federated. Across datasets this is what makes one model shape
fit all clients: the input layer reads features zero-padded to the widest
dataset, the head has the most classes of any dataset. ``share="all"``
federates the whole model (for strategies that need whole models, FedRep,
FedRoD, IFCA, FedALA).
"""
from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, GINConv

from pyg_fedgraph.hparams import Range
from pyg_fedgraph.nn.functional import global_pool
from pyg_fedgraph.typing import PoolName

__all__ = ["GIN", "GCNPool", "ShareName", "gcn_self_loop_weights"]

#: What a graph classifier federates: its message-passing body only, or all.
ShareName = Literal["body", "all"]
#: The layers a graph classifier keeps private with ``share="body"``.
_IO_LAYERS = ("pre", "post", "classifier")


def gcn_self_loop_weights(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    r"""The edges with one self loop appended per node and their GCN weights
    :math:`\hat{d}_u^{-1/2} a_{uv} \hat{d}_v^{-1/2}` (Kipf and Welling, ICLR
    2017), computed with fixed sizes so that :func:`torch.vmap` can batch
    it: existing self loops (padding edges among them) get weight 0 instead
    of being removed, and :math:`\hat{d}_v` counts the in-edges of weight 1
    and the appended loop.

    Shapes:
        - **input:** :math:`(2, E)`
        - **output:** :math:`(2, E + V)`, :math:`(E + V)`
    """
    loops = torch.arange(num_nodes, device=edge_index.device)
    ei = torch.cat([edge_index, loops.unsqueeze(0).expand(2, -1)], dim=1)
    real = (edge_index[0] != edge_index[1]).to(torch.get_default_dtype())
    weight = torch.cat([real, real.new_ones(num_nodes)])
    deg = weight.new_zeros(num_nodes).index_add(0, ei[1], weight)
    inv = deg.pow(-0.5)
    return ei, inv[ei[0]] * weight * inv[ei[1]]


class _GraphClassifier(nn.Module):
    r"""GCFL's frame (see the module docstring)."""

    #: The family :func:`~pyg_fedgraph.train.execution.choose_execution`
    #: looks up: one disjoint union of a client's graphs per step, measured
    #: apart from clients that hold one graph
    #: (``benchmarks/results/graph_classification_batching.md``).
    execution_family = "graph-set"

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int,
                 num_layers: int, dropout: float, pool: PoolName, share: ShareName) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if pool not in ("sum", "mean"):
            raise ValueError(f"pool must be 'sum' or 'mean', got {pool!r}")
        if share not in ("body", "all"):
            raise ValueError(f"share must be 'body' or 'all', got {share!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.hidden_channels = hidden_channels
        self.num_layers = num_layers
        self.dropout = dropout
        self.pool = pool
        self.share = share
        #: The parameter prefixes that stay on each client
        #: (:mod:`pyg_fedgraph.train.private`).
        self.private_parameters: tuple[str, ...] = _IO_LAYERS if share == "body" else ()
        self.pre = nn.Linear(in_channels, hidden_channels)
        self.convs = nn.ModuleList()
        self.post = nn.Linear(hidden_channels, hidden_channels)
        self.classifier = nn.Linear(hidden_channels, out_channels)

    def _layers(self, h: Tensor, edge_index: Tensor, last_activation: bool = True) -> Tensor:
        raise NotImplementedError

    def _activate(self, h: Tensor) -> Tensor:
        return F.dropout(F.relu(h), self.dropout, self.training)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor,
                graph_size: Tensor | None = None, class_mask: Tensor | None = None) -> Tensor:
        r"""Class scores :math:`(B, C)` of the graphs of ``batch``.

        Args:
            x (torch.Tensor): node features :math:`(V, F)`.
            edge_index (torch.Tensor): edges :math:`(2, E)`.
            batch (torch.Tensor): graph slot of every node :math:`(V,)`
                (slot :math:`B` for padding nodes).
            graph_size (torch.Tensor, optional): nodes of every graph
                :math:`(B,)` (default: counted from ``batch``, outside
                :func:`torch.vmap` only).
            class_mask (torch.Tensor, optional): the client's classes
                :math:`(C,)`, bool (default: all).
        """
        h = self._layers(self.pre(x), edge_index)
        g = self._activate(self.post(global_pool(h, batch, graph_size, self.pool)))
        out = self.classifier(g)
        if class_mask is not None:
            out = out.masked_fill(~class_mask.to(torch.bool), torch.finfo(out.dtype).min)
        return out

    def embed(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None,
              graph_size: Tensor | None = None, class_mask: Tensor | None = None) -> Tensor:
        r"""Node embeddings :math:`(V, H)`: the output of the last
        message-passing layer *before* its activation, the representation
        FED-PUB's functional embedding averages (as
        :meth:`~pyg_fedgraph.models.GCN.embed`; see
        :class:`~pyg_fedgraph.train.FunctionalEmbedding`). ``batch``,
        ``graph_size`` and ``class_mask`` are accepted, as :meth:`forward`
        takes them, and not used."""
        return self._layers(self.pre(x), edge_index, last_activation=False)

    def reset_parameters(self) -> None:
        self.pre.reset_parameters()
        for conv in self.convs:
            conv.reset_parameters()  # type: ignore[operator]
        self.post.reset_parameters()
        self.classifier.reset_parameters()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"hidden_channels={self.hidden_channels}, num_layers={self.num_layers}, "
                f"pool={self.pool}, share={self.share})")


class GIN(_GraphClassifier):
    r"""A graph isomorphism network client (`"How Powerful are Graph Neural
    Networks?" <https://arxiv.org/abs/1810.00826>`_, Xu et al., ICLR 2019),
    as GCFL's clients (`"Federated Graph Classification over Non-IID Graphs"
    <https://arxiv.org/abs/2106.13423>`_, Xie et al., NeurIPS 2021): an
    input layer, ``num_layers`` :class:`~torch_geometric.nn.conv.GINConv`
    (:math:`\epsilon = 0`, each with a two-layer MLP), ReLU and dropout after
    each, sum pooling, a hidden layer and a linear classifier (see the
    module docstring),

    .. math::
        \mathbf{h}_v^{(l+1)} = \mathrm{ReLU}\Big(\mathrm{MLP}^{(l)}\Big(
        \mathbf{h}_v^{(l)} + \sum_{u \in \mathcal{N}(v)} \mathbf{h}_u^{(l)}
        \Big)\Big).

    GCFL's settings are the defaults: 3 layers of 64, dropout 0.5, sum
    pooling, only the GIN layers federated.

    Args:
        in_channels (int): node features :math:`F`.
        out_channels (int): classes :math:`C`.
        hidden_channels (int, optional): width (default: :obj:`64`).
        num_layers (int, optional): GIN layers :math:`L` (default: :obj:`3`).
        dropout (float, optional): dropout after every GIN layer and the
            hidden layer, in training (default: :obj:`0.5`).
        pool (str, optional): ``"sum"`` or ``"mean"`` (default: ``"sum"``).
        share (str, optional): ``"body"`` (``pre``, ``post`` and
            ``classifier`` private) or ``"all"`` (default: ``"body"``).

    Shapes:
        - **input:** node features :math:`(V, F)`, edges :math:`(2, E)`,
          graph slots :math:`(V)`, graph sizes :math:`(B)` (optional),
          class mask :math:`(C)` (optional)
        - **output:** :math:`(B, C)`
    """

    def __init__(self, in_channels: int, out_channels: int,
                 hidden_channels: Annotated[int, Range(ge=1)] = 64,
                 num_layers: Annotated[int, Range(ge=1)] = 3,
                 dropout: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.5,
                 pool: PoolName = "sum", share: ShareName = "body") -> None:
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout, pool,
                         share)
        for _ in range(num_layers):
            self.convs.append(GINConv(nn.Sequential(
                nn.Linear(hidden_channels, hidden_channels), nn.ReLU(),
                nn.Linear(hidden_channels, hidden_channels))))

    def _layers(self, h: Tensor, edge_index: Tensor, last_activation: bool = True) -> Tensor:
        for k, conv in enumerate(self.convs):
            h = conv(h, edge_index)
            if last_activation or k < len(self.convs) - 1:
                h = self._activate(h)
        return h


class GCNPool(_GraphClassifier):
    r"""A graph convolutional network with global pooling (`"Semi-Supervised
    Classification with Graph Convolutional Networks"
    <https://arxiv.org/abs/1609.02907>`_, Kipf and Welling, ICLR 2017) in
    GCFL's frame (see the module docstring): an input layer, ``num_layers``
    :class:`~torch_geometric.nn.conv.GCNConv` with ReLU and dropout, mean
    pooling, a hidden layer and a linear classifier,

    .. math::
        H^{(l+1)} = \mathrm{ReLU}\big(\hat{D}^{-1/2} \hat{A} \hat{D}^{-1/2}
        H^{(l)} W^{(l)}\big),

    :math:`\hat{A}` the adjacency with one self loop per node
    (:func:`gcn_self_loop_weights`, computed in the forward pass with fixed
    sizes, so that the layers run under :func:`torch.vmap`).

    Args:
        in_channels (int): node features :math:`F`.
        out_channels (int): classes :math:`C`.
        hidden_channels (int, optional): width (default: :obj:`64`).
        num_layers (int, optional): GCN layers :math:`L` (default: :obj:`3`).
        dropout (float, optional): dropout after every GCN layer and the
            hidden layer, in training (default: :obj:`0.5`).
        pool (str, optional): ``"sum"`` or ``"mean"`` (default: ``"mean"``).
        share (str, optional): ``"body"`` or ``"all"``, as :class:`GIN`
            (default: ``"body"``).

    Shapes:
        - **input:** as :class:`GIN`
        - **output:** :math:`(B, C)`
    """

    def __init__(self, in_channels: int, out_channels: int,
                 hidden_channels: Annotated[int, Range(ge=1)] = 64,
                 num_layers: Annotated[int, Range(ge=1)] = 3,
                 dropout: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.5,
                 pool: PoolName = "mean", share: ShareName = "body") -> None:
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout, pool,
                         share)
        for _ in range(num_layers):
            self.convs.append(GCNConv(hidden_channels, hidden_channels, normalize=False,
                                      add_self_loops=False))

    def _layers(self, h: Tensor, edge_index: Tensor, last_activation: bool = True) -> Tensor:
        ei, weight = gcn_self_loop_weights(edge_index, h.size(0))
        weight = weight.to(h.dtype)
        for k, conv in enumerate(self.convs):
            h = conv(h, ei, weight)
            if last_activation or k < len(self.convs) - 1:
                h = self._activate(h)
        return h
