"""GRU encoder-decoder forecaster (CNFGNN's node-level model, Panacea's traffic client model)."""
from __future__ import annotations

from typing import Annotated, cast

import torch
from torch import Tensor, nn

from pyg_fedgraph.hparams import Range
from pyg_fedgraph.models.gru import GRUCell

__all__ = ["GRUSeq2Seq"]


class GRUSeq2Seq(nn.Module):
    r"""The GRU encoder-decoder forecaster of the `"Cross-Node Federated Graph
    Neural Network for Spatio-Temporal Data Modeling"
    <https://arxiv.org/abs/2106.05223>`_ paper (Meng et al., KDD 2021,
    ``GRUSeq2Seq`` of its code), the traffic client model of the
    `"Graph-Relational Federated Learning: Enhanced Personalization and
    Robustness"` paper (Panacea; Lin, Lan, He and Li, Sec. IV-A: "a 1-layer
    GRU with hidden dimension 100", "63K parameters").

    An encoder GRU reads the :math:`T` input steps :math:`\mathbf{x}_t =
    [v_t, \tau_t]` (normalized speed, time of day) from a zero state; a
    decoder GRU starts from the encoder's last state and the last input,
    and forecasts one step at a time, feeding back its own forecast with
    the time of day of the step it forecasts:

    .. math::
        \mathbf{h}_t &= \mathrm{GRU}_{enc}(\mathbf{x}_t, \mathbf{h}_{t-1}),
            \quad \mathbf{h}_0 = \mathbf{0}, \quad \mathbf{s}_0 = \mathbf{h}_T,
            \quad \mathbf{u}_1 = \mathbf{x}_T \\
        \mathbf{s}_k &= \mathrm{GRU}_{dec}(\mathbf{u}_k, \mathbf{s}_{k-1}),
            \quad \hat{v}_{T+k} = \mathbf{w}^\top \mathbf{s}_k + b,
            \quad \mathbf{u}_{k+1} = [\hat{v}_{T+k},\; \tau_T + k / D \bmod 1]

    for :math:`k = 1, \ldots, K` (``out_steps``), :math:`D` steps per day
    (``steps_per_day``). Both GRUs stack ``num_layers`` :class:`GRUCell`
    layers, the decoder's layer :math:`l` starting from the encoder's layer
    :math:`l`; the linear head reads the top layer and outputs the speed
    only. Input channels beyond the second are fed to the decoder at their
    last observed value.

    What is reproduced from CNFGNN's code: the architecture (encoder and
    decoder ``nn.GRU`` of the same size, decoder input ``[speed, time of
    day]``, first decoder input the last observed step, head
    ``Linear(hidden, 1)``), and its autoregressive decoding, which CNFGNN
    uses at evaluation and, with ``--use_curriculum_learning``, in training
    after the ground-truth feeding probability
    :math:`c / (c + e^{n / c})` (:math:`n` batches seen) has decayed; with
    ``cl_decay_steps`` :math:`c = 1` (its FedAvg runs) that is after the
    first few batches. Not reproduced: that scheduled sampling of ground
    truth (and the teacher forcing of its other option), since a client
    model here sees only its inputs, never the targets. With the defaults
    the model has

    .. math::
        2 \cdot 3H(C + H + 2) + H + 1 = 62{,}501

    parameters (:math:`C = 2`, :math:`H = 100`), the "63K" of Panacea and
    CNFGNN; ``hidden_channels=200, num_layers=2`` gives CNFGNN's 727K
    (727,401).

    The recurrences are Python loops over :class:`GRUCell` (plain linear
    gates) so that all clients train at once under :func:`torch.func.vmap`,
    as for :class:`~pyg_fedgraph.models.GRUForecaster`.

    Args:
        in_channels (int, optional): features per input step :math:`C`;
            channel 0 is the normalized speed, channel 1 (if any) the time of
            day in :math:`[0, 1)` (default: :obj:`2`)
        hidden_channels (int, optional): hidden size :math:`H` of both GRUs
            (default: :obj:`100`)
        out_steps (int, optional): forecast steps :math:`K` (default: :obj:`12`)
        num_layers (int, optional): GRU layers of the encoder and of the
            decoder (default: :obj:`1`)
        steps_per_day (int, optional): time steps per day :math:`D`, by
            which the time of day advances (default: :obj:`288`, five-minute
            steps)

    Shapes:
        - **input:** :math:`(B, T, C)`.
        - **output:** :math:`(B, K)`, normalized speeds.
    """

    def __init__(self, in_channels: Annotated[int, Range(ge=1)] = 2,
                 hidden_channels: Annotated[int, Range(ge=1)] = 100,
                 out_steps: Annotated[int, Range(ge=1)] = 12,
                 num_layers: Annotated[int, Range(ge=1)] = 1,
                 steps_per_day: Annotated[int, Range(ge=1)] = 288) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("hidden_channels", hidden_channels),
                            ("out_steps", out_steps), ("num_layers", num_layers),
                            ("steps_per_day", steps_per_day)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.out_steps = out_steps
        self.num_layers = num_layers
        self.steps_per_day = steps_per_day
        self.encoder = nn.ModuleList(
            GRUCell(in_channels if layer == 0 else hidden_channels, hidden_channels)
            for layer in range(num_layers))
        self.decoder = nn.ModuleList(
            GRUCell(in_channels if layer == 0 else hidden_channels, hidden_channels)
            for layer in range(num_layers))
        self.head = nn.Linear(hidden_channels, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module (GRU weights
        :math:`\mathcal{U}(-1/\sqrt{H}, 1/\sqrt{H})` as in
        :class:`torch.nn.GRU`, the head as :class:`torch.nn.Linear`)."""
        for cell in [*self.encoder, *self.decoder]:
            cast(GRUCell, cell).reset_parameters()
        self.head.reset_parameters()

    @staticmethod
    def _step(cells: nn.ModuleList, inp: Tensor, hs: list[Tensor]) -> list[Tensor]:
        out = []
        for layer, cell in enumerate(cells):
            inp = cell(inp, hs[layer])
            out.append(inp)
        return out

    def forward(self, x: Tensor) -> Tensor:
        r"""Forecasts the next ``out_steps`` normalized speeds.

        Args:
            x (torch.Tensor): input sequences :math:`(B, T, C)`.
        """
        if x.dim() != 3 or x.size(-1) != self.in_channels or x.size(1) < 1:
            raise ValueError(f"{type(self).__name__} expects sequences of shape "
                             f"(B, T, {self.in_channels}), got {tuple(x.shape)}")
        hs = [x.new_zeros(x.size(0), self.hidden_channels) for _ in self.encoder]
        for t in range(x.size(1)):
            hs = self._step(self.encoder, x[:, t], hs)
        last = x[:, -1]
        inp = last
        outs = []
        for k in range(1, self.out_steps + 1):
            hs = self._step(self.decoder, inp, hs)
            speed = self.head(hs[-1])                                   # (B, 1)
            outs.append(speed)
            if self.in_channels == 1:
                inp = speed
            else:
                time = torch.remainder(last[:, 1:2] + k / self.steps_per_day, 1.0)
                inp = torch.cat([speed, time, last[:, 2:]], dim=-1)
        return torch.cat(outs, dim=-1)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.in_channels}, {self.hidden_channels}, "
                f"out_steps={self.out_steps}, num_layers={self.num_layers})")
