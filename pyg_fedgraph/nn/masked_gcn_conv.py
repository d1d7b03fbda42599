r"""A graph convolution whose weight is multiplied by a learnable mask (FED-PUB)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.inits import glorot
from torch_geometric.typing import Adj, OptTensor
from torch_geometric.utils import spmm, to_torch_csr_tensor

from pyg_fedgraph.nn.masked_linear import MaskInit, pruned_mask, reset_mask

__all__ = ["MaskedGCNConv"]


class MaskedGCNConv(MessagePassing):
    r"""The graph convolution of `"Semi-Supervised Classification with Graph
    Convolutional Networks" <https://arxiv.org/abs/1609.02907>`_ with a
    learnable elementwise mask on its weight, the layer of FED-PUB's
    clients (`"Personalized Subgraph Federated Learning"
    <https://arxiv.org/abs/2206.10206>`_, Baek et al., ICML 2023, Sec. 4,
    personalized sparse masks):

    .. math::
        X' = \hat{D}^{-1/2} \hat{A} \hat{D}^{-1/2} X (W \odot \tilde{M})^\top
        + \mathbf{b},

    :math:`\tilde{M}` the mask, pruned at evaluation
    (:func:`~pyg_fedgraph.nn.masked_linear.pruned_mask`). As the federation's
    :class:`~torch_geometric.nn.conv.GCNConv` with ``normalize=False``, it
    takes the normalized edge weights :math:`\hat{d}_u^{-1/2}
    \hat{d}_v^{-1/2}` with the self loops already in ``edge_index``
    (:func:`~pyg_fedgraph.data.gcn_edge_weight`), which lets
    :func:`torch.vmap` batch it over clients. The weight is Glorot-initialized
    and the bias zero, as :class:`~torch_geometric.nn.conv.GCNConv`'s. As
    there, an ``edge_index`` runs the edge-wise :meth:`message` (what
    :func:`torch.vmap` batches) and a sparse adjacency holding the weights
    runs :meth:`message_and_aggregate`, one sparse product.

    Args:
        in_channels (int): input features :math:`F_{in}`.
        out_channels (int): output features :math:`F_{out}`.
        mask_init (str, optional): ``"ones"`` or ``"xavier"`` (default:
            ``"ones"``, the setting of FED-PUB's scripts,
            ``--laye-mask-one``).
        prune_threshold (float, optional): masks of smaller magnitude are
            zero at evaluation; :obj:`0` never prunes (default: :obj:`1e-3`).

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\mathcal{E}|)` or a sparse adjacency
          :math:`(|\mathcal{V}|, |\mathcal{V}|)`, optional edge weights
          :math:`(|\mathcal{E}|)` (ones when omitted)
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`
    """

    def __init__(self, in_channels: int, out_channels: int, mask_init: MaskInit = "ones",
                 prune_threshold: float = 1e-3) -> None:
        super().__init__(aggr="add")
        if mask_init not in ("ones", "xavier"):
            raise ValueError(f"mask_init must be 'ones' or 'xavier', got {mask_init!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.mask_init = mask_init
        self.prune_threshold = prune_threshold
        self.weight = torch.nn.Parameter(torch.empty(out_channels, in_channels))
        self.mask = torch.nn.Parameter(torch.empty(out_channels, in_channels))
        self.bias = torch.nn.Parameter(torch.empty(out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        glorot(self.weight)
        torch.nn.init.zeros_(self.bias)
        reset_mask(self.mask, self.mask_init)

    def forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None) -> Tensor:
        mask = pruned_mask(self.mask, self.prune_threshold, self.training)
        h = x @ (self.weight * mask).t()
        return self.propagate(edge_index, x=h, edge_weight=edge_weight) + self.bias

    def message(self, x_j: Tensor, edge_weight: OptTensor) -> Tensor:
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

    def message_and_aggregate(self, adj_t: Adj, x: Tensor) -> Tensor:
        if isinstance(adj_t, Tensor) and adj_t.layout == torch.sparse_coo:
            # propagate() flags a COO input as coalesced in place (PyG's
            # to_edge_index), sorted or not: sort it into CSR from its raw entries.
            adj_t = to_torch_csr_tensor(adj_t._indices(), adj_t._values(),
                                        size=(adj_t.size(0), adj_t.size(1)))
        return spmm(adj_t, x, reduce=self.aggr)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"mask_init={self.mask_init!r})")
