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
and kNN-Per read (:class:`MaskedGCN`, FED-PUB's client, with a masked one).
:meth:`embed` gives the node embeddings before the classifier, which
FED-PUB's functional embedding averages.
"""
from __future__ import annotations

from typing import Annotated

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from pyg_fedgraph.hparams import Range
from pyg_fedgraph.nn.masked_gcn_conv import MaskedGCNConv
from pyg_fedgraph.nn.masked_linear import MaskedLinear, MaskInit

__all__ = ["GCN", "GraphSAGE", "GAT", "MaskedGCN"]


def _pick(out: Tensor, index: Tensor | None) -> Tensor:
    return out if index is None else out[index]


def _normalized(x: Tensor, edge_index: Tensor, edge_weight: Tensor | None
                ) -> tuple[Tensor, Tensor]:
    r"""The edges and their GCN weights: as given, or, called by hand without
    ``edge_weight``, with self loops and GCN's normalization computed here
    (not under :func:`torch.vmap`)."""
    if edge_weight is not None:
        return edge_index, edge_weight
    from pyg_fedgraph.data.graph_dataset import gcn_edge_weight
    ei, w = gcn_edge_weight(edge_index.cpu(), x.size(0))
    return ei.to(x.device), w.to(x)


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
        self.classifier: nn.Linear | MaskedLinear = nn.Linear(hidden_channels, out_channels)

    #: Whether the layers take GCN's normalized edge weights (GCN, FED-PUB's
    #: masked GCN); the others get the edges alone.
    gcn_weights = False

    def _layers(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None,
                last_activation: bool = True) -> Tensor:
        r"""The message-passing layers, each followed by the activation and
        dropout (the last one only with ``last_activation``)."""
        if self.gcn_weights:
            edge_index, edge_weight = _normalized(x, edge_index, edge_weight)
        h = x
        for i, conv in enumerate(self.convs):
            h = conv(h, edge_index, edge_weight) if self.gcn_weights else conv(h, edge_index)
            if last_activation or i < self.num_layers - 1:
                h = F.dropout(self.activation(h), self.dropout, self.training)
        return h

    def activation(self, h: Tensor) -> Tensor:
        r"""The activation after every layer: ReLU (GAT: ELU)."""
        return F.relu(h)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
                index: Tensor | None = None) -> Tensor:
        r"""Outputs :math:`(B, C)` of the nodes ``index`` :math:`(B,)` (all
        :math:`V` nodes when ``None``) of the graph ``x`` :math:`(V, F)`,
        ``edge_index`` :math:`(2, E)`, ``edge_weight`` :math:`(E,)`."""
        h = self._layers(x, edge_index, edge_weight)
        return self.classifier(_pick(h, index))

    def embed(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
              index: Tensor | None = None) -> Tensor:
        r"""Node embeddings :math:`(B, H)` before the classifier: the output
        of the last message-passing layer *before* its activation (and
        dropout), the representation FED-PUB's functional embedding averages
        (``JinheonBaek/FED-PUB``, ``models/nets.py``, ``is_proxy``); see
        :class:`~pyg_fedgraph.train.FunctionalEmbedding`."""
        return _pick(self._layers(x, edge_index, edge_weight, last_activation=False), index)

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

    gcn_weights = True

    def __init__(self, in_channels: int, out_channels: int,
                 hidden_channels: Annotated[int, Range(ge=1)] = 128,
                 num_layers: Annotated[int, Range(ge=1)] = 2,
                 dropout: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0) -> None:
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout)
        for i in range(num_layers):
            self.convs.append(GCNConv(in_channels if i == 0 else hidden_channels,
                                      hidden_channels, normalize=False, add_self_loops=False))



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

    def activation(self, h: Tensor) -> Tensor:
        return F.elu(h)

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



class MaskedGCN(_GNN):
    r"""FED-PUB's client model (`"Personalized Subgraph Federated Learning"
    <https://arxiv.org/abs/2206.10206>`_, Baek et al., ICML 2023, Sec. 4):
    :class:`GCN` whose every weight matrix :math:`W` is used through a
    personalized mask :math:`M` of its shape, learned by the client and never
    sent (:attr:`private_parameters`), under an L1 penalty that makes it
    sparse (:meth:`local_penalty`):

    .. math::
        \min_{\theta_i, M_i}\; \mathcal{L}(\mathcal{G}_i;\, \theta_i \odot M_i)
        + \lambda_1 \|M_i\|_1 ,

    the layers being :class:`~pyg_fedgraph.nn.MaskedGCNConv` and a
    :class:`~pyg_fedgraph.nn.MaskedLinear` classifier. Biases carry no mask
    (as in FED-PUB's ``models/layers.py``). At evaluation masks of magnitude
    below ``prune_threshold`` count as zero (FED-PUB's code prunes below its
    L1 coefficient, 1e-3). The L2 term of FED-PUB's local objective, towards the
    model the server sent, is the strategy's
    (:class:`~pyg_fedgraph.strategies.FedPUB`), on the shared coordinates.

    With masks at one (``mask_init="ones"``) and the same weights it computes
    what :class:`GCN` computes.

    Args:
        in_channels (int): node features :math:`F`.
        out_channels (int): classes :math:`C`.
        hidden_channels (int, optional): width (default: :obj:`128`).
        num_layers (int, optional): GCN layers :math:`L` (default: :obj:`2`).
        dropout (float, optional): dropout after every layer in training
            (default: :obj:`0.0`).
        l1 (float, optional): :math:`\lambda_1`, the weight of the masks' L1
            norm in the local loss. FED-PUB's code declares ``--l1 1e-3`` but
            adds the term from detached tensors, so it trains without it; the
            default does the same, which reproduces its results; with 1e-3
            acting, Cora's accuracy drops by 12 to 14 points (see
            :class:`~pyg_fedgraph.strategies.FedPUB`) (default: :obj:`0.0`).
        mask_init (str, optional): ``"ones"`` or ``"xavier"`` (default:
            ``"ones"``, FED-PUB's scripts: ``--laye-mask-one
            --clsf-mask-one``).
        prune_threshold (float, optional): masks of smaller magnitude are
            zero at evaluation (default: :obj:`1e-3`).

    Shapes:
        - **input:** as :class:`GCN`
        - **output:** :math:`(B, C)`
    """

    gcn_weights = True

    def __init__(self, in_channels: int, out_channels: int,
                 hidden_channels: Annotated[int, Range(ge=1)] = 128,
                 num_layers: Annotated[int, Range(ge=1)] = 2,
                 dropout: Annotated[float, Range(ge=0.0, lt=1.0)] = 0.0,
                 l1: Annotated[float, Range(ge=0.0)] = 0.0,
                 mask_init: MaskInit = "ones",
                 prune_threshold: Annotated[float, Range(ge=0.0)] = 1e-3) -> None:
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout)
        self.l1 = l1
        self.mask_init = mask_init
        self.prune_threshold = prune_threshold
        for i in range(num_layers):
            self.convs.append(MaskedGCNConv(in_channels if i == 0 else hidden_channels,
                                            hidden_channels, mask_init, prune_threshold))
        self.classifier = MaskedLinear(hidden_channels, out_channels, mask_init,
                                       prune_threshold)
        #: The masks stay on the client (:mod:`pyg_fedgraph.train.private`).
        self.private_parameters: tuple[str, ...] = tuple(
            name for name, _ in self.named_parameters() if name.rsplit(".", 1)[-1] == "mask")


    def local_penalty(self, params: dict[str, Tensor]) -> Tensor:
        r""":math:`\lambda_1 \sum_l \|M^{(l)}\|_1` of the named parameters
        ``params`` (the trainer adds it to every client's local loss; a pure
        function of ``params``, so it runs under :func:`torch.vmap`)."""
        masks = [params[name] for name in self.private_parameters]
        if self.l1 == 0:
            return masks[0].new_zeros(())
        return self.l1 * sum((m.abs().sum() for m in masks), masks[0].new_zeros(()))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"hidden_channels={self.hidden_channels}, num_layers={self.num_layers}, "
                f"l1={self.l1})")
