r"""A linear layer whose weight is multiplied by a learnable mask (FED-PUB)."""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["MaskedLinear", "pruned_mask", "MaskInit"]

#: How a mask starts: all ones (the layer starts as the plain layer) or
#: Xavier-uniform values.
MaskInit = Literal["ones", "xavier"]


def pruned_mask(mask: Tensor, threshold: float, training: bool) -> Tensor:
    r"""The mask a layer applies: ``mask`` itself in training; at evaluation,
    with the entries of magnitude below ``threshold`` set to zero,

    .. math::
        \tilde{m}_{kl} = m_{kl}\, \mathbb{1}\big[|m_{kl}| \geq t\big].

    FED-PUB prunes its masks so at evaluation only
    (``JinheonBaek/FED-PUB``, ``models/layers.py``, ``prune``), with
    :math:`t` its L1 coefficient (1e-3). Written with :func:`torch.where`,
    so it runs under :func:`torch.vmap`."""
    if training or threshold <= 0:
        return mask
    return torch.where(mask.abs() < threshold, torch.zeros_like(mask), mask)


class MaskedLinear(torch.nn.Module):
    r"""A linear layer with a learnable elementwise mask on its weight, the
    classifier of FED-PUB's clients (`"Personalized Subgraph Federated
    Learning" <https://arxiv.org/abs/2206.10206>`_, Baek et al., ICML 2023,
    Sec. 4, personalized sparse masks):

    .. math::
        \mathbf{y} = \mathbf{x} (W \odot \tilde{M})^\top + \mathbf{b},

    with :math:`\tilde{M}` the mask, pruned at evaluation
    (:func:`pruned_mask`). The weight and bias are initialized as
    :class:`torch.nn.Linear`'s.

    Args:
        in_channels (int): input features.
        out_channels (int): output features.
        mask_init (str, optional): ``"ones"`` or ``"xavier"`` (default:
            ``"ones"``, the setting of FED-PUB's scripts,
            ``--clsf-mask-one``).
        prune_threshold (float, optional): :math:`t` of :func:`pruned_mask`;
            :obj:`0` never prunes (default: :obj:`1e-3`).

    Shapes:
        - **input:** :math:`(*, F_{in})`
        - **output:** :math:`(*, F_{out})`
    """

    def __init__(self, in_channels: int, out_channels: int, mask_init: MaskInit = "ones",
                 prune_threshold: float = 1e-3) -> None:
        super().__init__()
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
        plain = torch.nn.Linear(self.in_channels, self.out_channels)
        with torch.no_grad():
            self.weight.copy_(plain.weight)
            self.bias.copy_(plain.bias)
        reset_mask(self.mask, self.mask_init)

    def forward(self, x: Tensor) -> Tensor:
        mask = pruned_mask(self.mask, self.prune_threshold, self.training)
        return F.linear(x, self.weight * mask, self.bias)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"mask_init={self.mask_init!r})")


def reset_mask(mask: Tensor, mask_init: MaskInit) -> None:
    r"""Fills ``mask`` in place: ones, or Xavier-uniform values."""
    with torch.no_grad():
        if mask_init == "ones":
            mask.fill_(1.0)
        else:
            torch.nn.init.xavier_uniform_(mask)
