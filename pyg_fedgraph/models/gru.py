"""GRU forecaster for traffic speed, written with plain linear gates."""
from __future__ import annotations

import math
from typing import cast

import torch
from torch import Tensor, nn

__all__ = ["GRUCell", "GRUForecaster"]


class GRUCell(nn.Module):
    r"""A gated recurrent unit cell built from two :class:`~torch.nn.Linear`
    layers, from the "Learning Phrase Representations using RNN
    Encoder-Decoder for Statistical Machine Translation" paper (Cho et al.).

    It computes the same gates, in the same order :math:`(r, z, n)`, as
    :class:`torch.nn.GRU`:

    .. math::
        \mathbf{r} &= \sigma(\mathbf{W}_{ir}\mathbf{x} + \mathbf{b}_{ir}
            + \mathbf{W}_{hr}\mathbf{h} + \mathbf{b}_{hr}) \\
        \mathbf{z} &= \sigma(\mathbf{W}_{iz}\mathbf{x} + \mathbf{b}_{iz}
            + \mathbf{W}_{hz}\mathbf{h} + \mathbf{b}_{hz}) \\
        \mathbf{n} &= \tanh(\mathbf{W}_{in}\mathbf{x} + \mathbf{b}_{in}
            + \mathbf{r} \odot (\mathbf{W}_{hn}\mathbf{h} + \mathbf{b}_{hn})) \\
        \mathbf{h}' &= (1 - \mathbf{z}) \odot \mathbf{n} + \mathbf{z} \odot \mathbf{h}

    ``input_gates.weight`` stacks :math:`[\mathbf{W}_{ir}; \mathbf{W}_{iz};
    \mathbf{W}_{in}]` exactly like ``weight_ih_l{k}`` of :class:`torch.nn.GRU`
    (``hidden_gates`` likewise ``weight_hh_l{k}``), so weights copy over
    unchanged. Unlike the fused :class:`torch.nn.GRU` kernel, this cell is
    made of ordinary operators and therefore runs under
    :func:`torch.func.vmap` and :func:`torch.func.grad`.

    Args:
        in_channels (int): size of the input :math:`\mathbf{x}`.
        hidden_channels (int): size :math:`H` of the hidden state.

    Shapes:
        - **input:** :math:`\mathbf{x}` :math:`(B, \text{in\_channels})`,
          :math:`\mathbf{h}` :math:`(B, H)`.
        - **output:** :math:`\mathbf{h}'` :math:`(B, H)`.
    """

    def __init__(self, in_channels: int, hidden_channels: int) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.input_gates = nn.Linear(in_channels, 3 * hidden_channels)
        self.hidden_gates = nn.Linear(hidden_channels, 3 * hidden_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Uniform :math:`\mathcal{U}(-1/\sqrt{H}, 1/\sqrt{H})` initialization
        of all weights and biases, as in :class:`torch.nn.GRU`."""
        bound = 1.0 / math.sqrt(self.hidden_channels)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        r"""One recurrence step.

        Args:
            x (torch.Tensor): input :math:`(B, \text{in\_channels})`.
            h (torch.Tensor): previous hidden state :math:`(B, H)`.
        """
        x_r, x_z, x_n = self.input_gates(x).chunk(3, dim=-1)
        h_r, h_z, h_n = self.hidden_gates(h).chunk(3, dim=-1)
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        return (1 - z) * n + z * h

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.hidden_channels})"


class GRUForecaster(nn.Module):
    r"""A GRU traffic-speed forecaster with a linear multi-step head, a
    lighter stand-in for the client model of the "Graph-Relational Federated
    Learning: Enhanced Personalization and Robustness" paper (Panacea; Lin,
    Lan, He and Li), which is :class:`~pyg_fedgraph.models.GRUSeq2Seq`.

    A stack of :class:`GRUCell` layers reads the :math:`T` input steps
    (speed and time of day on METR-LA / PEMS-BAY) starting from a zero hidden
    state; a linear head maps the last hidden state of the top layer to the
    next ``out_steps`` values:

    .. math::
        \mathbf{h}^{(l)}_t &= \mathrm{GRU}^{(l)}\left(\mathbf{h}^{(l-1)}_t,
            \mathbf{h}^{(l)}_{t-1}\right), \quad \mathbf{h}^{(0)}_t = \mathbf{x}_t,
            \quad \mathbf{h}^{(l)}_0 = \mathbf{0} \\
        \hat{\mathbf{y}} &= \mathbf{W} \mathbf{h}^{(L)}_T + \mathbf{b}
            \in \mathbb{R}^{\text{out\_steps}}

    Panacea (Sec. IV-A) uses "a 1-layer GRU with hidden dimension 100", input
    12 steps, predicting the next 12. It reuses the model of Meng et al.
    (CNFGNN, KDD 2021), stated to have 63K parameters: CNFGNN's GRU
    encoder-decoder (:class:`~pyg_fedgraph.models.GRUSeq2Seq`, 62,501),
    whereas this one-GRU-plus-linear-head form has
    :math:`3(2 \cdot 100 + 100^2 + 2 \cdot 100) + 100 \cdot 12 + 12 = 32{,}412`
    parameters with the defaults and forecasts all steps at once.

    The recurrence is a Python loop over time steps with plain linear gates
    (not :class:`torch.nn.GRU`) because the fused GRU kernel has no
    :func:`torch.func.vmap` batching rule, and all clients are trained at once
    with ``vmap(grad(...))``. With the same weights it agrees with
    :class:`torch.nn.GRU` (``batch_first=True``) followed by the same head.

    Args:
        in_channels (int, optional): features per time step :math:`C`
            (default: :obj:`2`).
        hidden_channels (int, optional): hidden size :math:`H`
            (default: :obj:`100`).
        out_steps (int, optional): number of predicted future steps
            (default: :obj:`12`).
        num_layers (int, optional): number of stacked GRU layers :math:`L`
            (default: :obj:`1`).

    Shapes:
        - **input:** :math:`(B, T, C)`.
        - **output:** :math:`(B, \text{out\_steps})`.
    """

    def __init__(self, in_channels: int = 2, hidden_channels: int = 100,
                 out_steps: int = 12, num_layers: int = 1) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.out_steps = out_steps
        self.num_layers = num_layers
        self.cells = nn.ModuleList(
            GRUCell(in_channels if layer == 0 else hidden_channels, hidden_channels)
            for layer in range(num_layers))
        self.head = nn.Linear(hidden_channels, out_steps)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        for cell in self.cells:
            cast(GRUCell, cell).reset_parameters()
        self.head.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        r"""Forecasts the next ``out_steps`` values.

        Args:
            x (torch.Tensor): input sequences :math:`(B, T, C)`.
        """
        if x.dim() != 3 or x.size(-1) != self.in_channels:
            raise ValueError(f"{type(self).__name__} expects sequences of shape "
                             f"(B, T, {self.in_channels}), got {tuple(x.shape)}")
        hs = [x.new_zeros(x.size(0), self.hidden_channels) for _ in self.cells]
        for t in range(x.size(1)):
            inp = x[:, t]
            for layer, cell in enumerate(self.cells):
                hs[layer] = cell(inp, hs[layer])
                inp = hs[layer]
        return self.head(hs[-1])

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.in_channels}, {self.hidden_channels}, "
                f"out_steps={self.out_steps}, num_layers={self.num_layers})")
