"""Convolutional client models for image classification."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["SimpleCNN", "CNNBN"]

ImageSize = int | tuple[int, int]


def _pair(image_size: ImageSize) -> tuple[int, int]:
    if isinstance(image_size, int):
        return image_size, image_size
    size = tuple(int(s) for s in image_size)
    if len(size) != 2:
        raise ValueError(f"image_size must be an int or a (height, width) pair, "
                         f"got {image_size!r}")
    return size


def _check_size(name: str, size: tuple[int, int], num_pools: int) -> tuple[int, int]:
    r"""Spatial size after ``num_pools`` 2x2 max-poolings (floor), checked to stay >= 1."""
    factor = 2**num_pools
    if min(size) < factor:
        raise ValueError(f"{name} halves the image {num_pools} times, so it needs images of "
                         f"at least {factor}x{factor} pixels, got {size[0]}x{size[1]}; "
                         f"use fewer conv blocks or a larger image")
    return size[0] // factor, size[1] // factor


class _ImageModel(Protocol):
    in_channels: int
    image_size: tuple[int, int]


def _as_images(module: _ImageModel, x: Tensor) -> Tensor:
    r"""Accepts :math:`(B, C, H, W)`, :math:`(B, H, W)` (one channel) or flat
    :math:`(B, C \cdot H \cdot W)` inputs and returns :math:`(B, C, H, W)`."""
    c, (h, w) = module.in_channels, module.image_size
    if x.dim() == 2 and x.size(1) == c * h * w:
        return x.reshape(x.size(0), c, h, w)
    if x.dim() == 3 and c == 1 and tuple(x.shape[1:]) == (h, w):
        return x.unsqueeze(1)
    if x.dim() == 4 and tuple(x.shape[1:]) == (c, h, w):
        return x
    raise ValueError(f"{type(module).__name__} expects images of shape (B, {c}, {h}, {w}) "
                     f"(or flattened (B, {c * h * w})), got {tuple(x.shape)}")


class SimpleCNN(nn.Module):
    r"""The "simple CNN" with three convolutional and three fully-connected
    layers used as client model by pFedGraph, from the "Personalized
    Federated Learning with Inferred Collaboration Graphs" paper (Ye et al.,
    ICML 2023), and by pFedGAT, from the "Personalized Federated Learning via
    Learning Dynamic Graphs" paper (Zhou et al.).

    Each convolution (:math:`3 \times 3`, padding 1, so the spatial size is
    kept) is followed by a ReLU and a :math:`2 \times 2` max-pooling; the
    flattened features go through two hidden fully-connected layers:

    .. math::
        \mathbf{h} &= \mathrm{vec}\left(\mathrm{Block}_3 \circ \mathrm{Block}_2
            \circ \mathrm{Block}_1(\mathbf{x})\right), \quad
            \mathrm{Block}_k(\mathbf{z}) = \mathrm{MaxPool}\left(
            \mathrm{ReLU}(\mathbf{W}_k \star \mathbf{z} + \mathbf{b}_k)\right) \\
        \mathbf{y} &= \mathrm{fc}_3\left(\mathrm{ReLU}\left(\mathrm{fc}_2\left(
            \mathrm{ReLU}(\mathrm{fc}_1(\mathbf{h}))\right)\right)\right)

    Both papers (pFedGraph Sec. 4.1, pFedGAT Sec. 4.1) only say "a simple
    CNN network with 3 convolutional layers and 3 fully-connected layers",
    citing MOON (Li et al., 2021), and give no widths. The fully-connected
    widths (120, 84) follow MOON's simple CNN; the kernel size and channel
    widths are this implementation's choice. Note that pFedGraph's released
    code (``SimpleCNN`` in ``pytorch/model.py``) has only two convolutions,
    :math:`5 \times 5` without padding, with 6 and 16 channels (MOON's
    network), before the same 120-84 fully-connected layers; this class
    follows the papers' text. With padding and flooring poolings the
    flattened size is ``channels[-1] * (H // 8) * (W // 8)``, so the model
    runs on 8x8 (digits), 28x28 (MNIST) and 32x32 (CIFAR) images alike.

    Args:
        in_channels (int): number of image channels :math:`C`.
        num_classes (int): number of output classes.
        image_size (int or tuple): image height and width (one int for square
            images), at least 8.
        channels (tuple of int, optional): output channels of the three
            convolutions (default: :obj:`(16, 32, 64)`).
        fc_channels (tuple of int, optional): widths of the two hidden
            fully-connected layers (default: :obj:`(120, 84)`).

    Shapes:
        - **input:** :math:`(B, C, H, W)`; :math:`(B, H, W)` when :math:`C = 1`
          and flat :math:`(B, C H W)` are reshaped.
        - **output:** logits :math:`(B, \text{num\_classes})`.
    """

    def __init__(self, in_channels: int, num_classes: int, image_size: ImageSize,
                 channels: Sequence[int] = (16, 32, 64),
                 fc_channels: Sequence[int] = (120, 84)) -> None:
        super().__init__()
        if len(channels) != 3:
            raise ValueError(f"SimpleCNN has 3 convolutions, got {len(channels)} "
                             f"channel widths {tuple(channels)}")
        if len(fc_channels) != 2:
            raise ValueError(f"SimpleCNN has 2 hidden fully-connected layers, got "
                             f"{len(fc_channels)} widths {tuple(fc_channels)}")
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.image_size = _pair(image_size)
        self.channels = tuple(int(c) for c in channels)
        self.fc_channels = tuple(int(c) for c in fc_channels)
        out_h, out_w = _check_size(type(self).__name__, self.image_size, num_pools=3)

        c1, c2, c3 = self.channels
        self.conv1 = nn.Conv2d(in_channels, c1, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2d(c2, c3, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(c3 * out_h * out_w, self.fc_channels[0])
        self.fc2 = nn.Linear(self.fc_channels[0], self.fc_channels[1])
        self.fc3 = nn.Linear(self.fc_channels[1], num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        for layer in (self.conv1, self.conv2, self.conv3, self.fc1, self.fc2, self.fc3):
            layer.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        r"""Classifies a batch of images.

        Args:
            x (torch.Tensor): images :math:`(B, C, H, W)`.
        """
        x = _as_images(self, x)
        for conv in (self.conv1, self.conv2, self.conv3):
            x = F.max_pool2d(F.relu(conv(x)), kernel_size=2)
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)

    def __repr__(self) -> str:
        h, w = self.image_size
        return (f"{type(self).__name__}({self.in_channels}, {self.num_classes}, "
                f"image_size=({h}, {w}))")


class CNNBN(nn.Module):
    r"""The 4-layer CNN with Batch Normalization used as client model by
    FedAGHN, from the "FedAGHN: Personalized Federated Learning with
    Attentive Graph HyperNetworks" paper.

    Three convolution blocks (:math:`3 \times 3` convolution with padding 1,
    BatchNorm, ReLU, :math:`2 \times 2` max-pooling) and a linear head, i.e.
    four weight layers:

    .. math::
        \mathrm{Block}_k(\mathbf{z}) &= \mathrm{MaxPool}\left(\mathrm{ReLU}\left(
            \mathrm{BN}_k(\mathbf{W}_k \star \mathbf{z} + \mathbf{b}_k)\right)\right) \\
        \mathbf{y} &= \mathbf{W}_{\mathrm{fc}}\, \mathrm{vec}\left(
            \mathrm{Block}_3 \circ \mathrm{Block}_2 \circ \mathrm{Block}_1(\mathbf{x})
            \right) + \mathbf{b}_{\mathrm{fc}}

    The paper (Sec. 4.1) uses "the 4-layer CNN architecture with Batch
    Normalization (BN) layers similar to that done in past research studies
    Ma et al. (2022)" on CIFAR-10/100 and gives no widths; reading "4-layer"
    as three conv blocks plus the linear head, and the channel widths, are
    this implementation's choices. The flattened size is
    ``channels[-1] * (H // 2^L) * (W // 2^L)`` for ``L = len(channels)``
    blocks, so the default runs on 8x8, 28x28 and 32x32 images.

    In training mode the BatchNorm running statistics (buffers
    ``bn{k}.running_mean``, ``bn{k}.running_var``, ``bn{k}.num_batches_tracked``)
    are updated in place, also when the buffers are stacked over clients and
    passed through :func:`torch.func.functional_call` under
    :func:`torch.func.vmap`.

    Args:
        in_channels (int): number of image channels :math:`C`.
        num_classes (int): number of output classes.
        image_size (int or tuple): image height and width (one int for square
            images), at least :math:`2^L`.
        channels (tuple of int, optional): output channels of the :math:`L`
            conv blocks (default: :obj:`(32, 64, 128)`).
        momentum (float, optional): BatchNorm running-statistics momentum
            (default: :obj:`0.1`).

    Shapes:
        - **input:** :math:`(B, C, H, W)`; :math:`(B, H, W)` when :math:`C = 1`
          and flat :math:`(B, C H W)` are reshaped.
        - **output:** logits :math:`(B, \text{num\_classes})`.
    """

    def __init__(self, in_channels: int, num_classes: int, image_size: ImageSize,
                 channels: Sequence[int] = (32, 64, 128), momentum: float = 0.1) -> None:
        super().__init__()
        if len(channels) < 1:
            raise ValueError("CNNBN needs at least one conv block, got channels=()")
        if not 0.0 < momentum <= 1.0:
            # momentum=None (cumulative average) reads num_batches_tracked as a
            # Python number, which fails under vmap.
            raise ValueError(f"momentum must be in (0, 1], got {momentum}")
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.image_size = _pair(image_size)
        self.channels = tuple(int(c) for c in channels)
        self.momentum = momentum
        out_h, out_w = _check_size(type(self).__name__, self.image_size,
                                   num_pools=len(self.channels))

        sizes = (in_channels,) + self.channels
        # Named conv{k}/bn{k} attributes (not a Sequential) so parameter names
        # stay readable in ParamLayout: "conv1.weight", "bn1.running_mean", ...
        for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True), start=1):
            setattr(self, f"conv{k}", nn.Conv2d(a, b, kernel_size=3, padding=1))
            setattr(self, f"bn{k}", nn.BatchNorm2d(b, momentum=momentum))
        self.fc = nn.Linear(self.channels[-1] * out_h * out_w, num_classes)
        self.reset_parameters()

    def _blocks(self):
        for k in range(1, len(self.channels) + 1):
            yield getattr(self, f"conv{k}"), getattr(self, f"bn{k}")

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters and the running statistics."""
        for conv, bn in self._blocks():
            conv.reset_parameters()
            bn.reset_parameters()
        self.fc.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        r"""Classifies a batch of images.

        Args:
            x (torch.Tensor): images :math:`(B, C, H, W)`.
        """
        x = _as_images(self, x)
        for conv, bn in self._blocks():
            x = F.max_pool2d(F.relu(bn(conv(x))), kernel_size=2)
        return self.fc(x.flatten(1))

    def __repr__(self) -> str:
        h, w = self.image_size
        return (f"{type(self).__name__}({self.in_channels}, {self.num_classes}, "
                f"image_size=({h}, {w}), channels={self.channels})")
