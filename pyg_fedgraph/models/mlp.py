"""Multi-layer perceptron client model."""
from __future__ import annotations

from typing import cast

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["MLP"]


class MLP(nn.Module):
    r"""The multi-layer perceptron used as client model by Panacea, from the
    "Graph-Relational Federated Learning: Enhanced Personalization and
    Robustness" paper (Lin et al.).

    The input is flattened, then passed through :math:`K` linear layers with a
    ReLU (and dropout) between consecutive layers:

    .. math::
        \mathbf{h}^{(0)} &= \mathrm{vec}(\mathbf{x}) \\
        \mathbf{h}^{(k)} &= \mathrm{Dropout}\left(\mathrm{ReLU}\left(
            \mathbf{W}^{(k)} \mathbf{h}^{(k-1)} + \mathbf{b}^{(k)}\right)\right),
            \quad k = 1, \ldots, K - 1 \\
        \mathbf{y} &= \mathbf{W}^{(K)} \mathbf{h}^{(K-1)} + \mathbf{b}^{(K)}

    Panacea (Sec. IV-A) realizes the client model of its binary classification
    and regression tasks (FL-60, TPT-48) with "a 3-layer MLP [...] where the
    model's hidden dimension is 16", i.e. ``MLP(2, 16, 2)`` on FL-60.

    Dropout is only applied when ``dropout > 0``; note that a model with
    dropout needs ``torch.func.vmap(..., randomness="different")`` (or
    ``"same"``) when all clients are trained at once.

    Args:
        in_channels (int): number of input features after flattening.
        hidden_channels (int): width of every hidden layer.
        out_channels (int): number of outputs (classes or regression targets).
        num_layers (int, optional): number of linear layers :math:`K`
            (default: :obj:`3`).
        dropout (float, optional): dropout probability after each hidden
            activation (default: :obj:`0.0`).

    Shapes:
        - **input:** :math:`(B, *)` with :math:`\prod * =` ``in_channels``,
          e.g. :math:`(B, F)` or :math:`(B, C, H, W)`.
        - **output:** :math:`(B, \text{out\_channels})`.
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 3, dropout: float = 0.0) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.out_channels = out_channels
        self.num_layers = num_layers
        self.dropout = dropout

        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.lins = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        for lin in self.lins:
            cast(nn.Linear, lin).reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        r"""Runs the perceptron on a batch.

        Args:
            x (torch.Tensor): inputs :math:`(B, *)`.
        """
        x = x.flatten(1)
        if x.size(1) != self.in_channels:
            raise ValueError(f"{type(self).__name__} expects {self.in_channels} input "
                             f"features per sample, got {x.size(1)} after flattening")
        for i, lin in enumerate(self.lins):
            x = lin(x)
            if i < self.num_layers - 1:
                x = F.relu(x)
                if self.dropout > 0:
                    x = F.dropout(x, p=self.dropout, training=self.training)
        return x

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.in_channels}, {self.hidden_channels}, "
                f"{self.out_channels}, num_layers={self.num_layers})")
