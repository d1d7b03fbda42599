r"""Malicious clients: model poisoning and data poisoning.

Two of the papers make robustness a headline claim and attack their
federations in two ways:

* **model poisoning**, where a malicious client uploads arbitrary parameters
  instead of its trained model: pFedGraph (Ye et al., ICML 2023, Sec. 4.1 and
  Tables 3/4) shuffles the parameters, sets them all to one value (1.0), flips
  their sign, or draws them from :math:`\mathcal{N}(0, 1)`; Panacea (Lin et
  al., Sec. IV-D) uploads the scaled negative update :math:`-\lambda g`
  (:math:`\lambda = 0.5`) of Fang et al.'s local model poisoning;
* **data poisoning**, where a malicious client trains honestly on corrupted
  data: Panacea's label flipping (Sec. IV-A, "the malicious clients randomly
  flip the labels of their local data samples") and its *Blended* backdoor
  (Sec. IV-D, Chen et al. 2017: a trigger blended into 50% of the training
  images with ratio :math:`\alpha = 0.2`, relabelled as class 1).

The functions below are pure (tensors in, tensors out, vectorized over the
clients' rows); :class:`Attack` bundles one attack with its settings and is
what :class:`~pyg_fedgraph.simulation.Simulator` and the CLI
(``--attack TYPE --attack-ratio R``) use.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.typing import AttackName

__all__ = ["ATTACKS", "MODEL_ATTACKS", "DATA_ATTACKS", "Attack", "shuffle_params",
           "same_value_params", "sign_flip_params", "gaussian_params", "scaled_negative_params",
           "flip_labels", "blend_trigger", "default_trigger", "triggered_test_split"]

log = logging.getLogger(__name__)

#: Attacks on the uploaded parameters (applied every round, after local training).
MODEL_ATTACKS = ("shuffle", "same-value", "sign-flip", "gaussian", "scaled-negative")
#: Attacks on the training data (applied once, when the run is set up).
DATA_ATTACKS = ("label-flip", "backdoor")
#: Every attack name accepted by :class:`Attack` and the CLI's ``--attack``.
ATTACKS = MODEL_ATTACKS + DATA_ATTACKS
FlipMode = Literal["random", "reverse"]
_FLIP_MODES = ("random", "reverse")

# The fixed seed of the default trigger: the attacker's pattern does not depend
# on the run's seed (it is chosen once, like the paper's hello-kitty image).
_TRIGGER_SEED = 20171215


# ------------------------------------------------------------ model poisoning
def shuffle_params(x: Tensor, *, generator: torch.Generator | None = None,
                   segment_ptr: Tensor | None = None) -> Tensor:
    r"""pFedGraph's *parameter shuffling*: every client's flat parameter
    vector is randomly permuted, independently per client (the authors' code
    permutes the whole flattened model); ``segment_ptr`` restricts the
    permutation to segments, e.g. to each parameter tensor.

    Args:
        x (torch.Tensor): uploaded parameters :math:`(S, D)`.
        generator (torch.Generator, optional): source of the permutations.
        segment_ptr (torch.Tensor, optional): boundaries of the segments to
            shuffle within, :math:`(K + 1,)` from :math:`0` to :math:`D`
            (default: one segment spanning all of :math:`D`, as pFedGraph).

    Shapes:
        - **input:** :math:`(S, D)`
        - **output:** :math:`(S, D)`
    """
    s, d = x.shape
    if segment_ptr is None:
        segment_ptr = torch.tensor([0, d])
    segment_ptr = segment_ptr.to(torch.long)
    if int(segment_ptr[0]) != 0 or int(segment_ptr[-1]) != d:
        raise ValueError(f"segment_ptr must run from 0 to {d}, got {segment_ptr.tolist()}")
    segment_ptr = segment_ptr.cpu()
    segment = torch.repeat_interleave(torch.arange(segment_ptr.numel() - 1),
                                      segment_ptr[1:] - segment_ptr[:-1])
    # Sorting random keys offset by the segment id permutes within segments only.
    # The draws come from a CPU generator (the same on any device), then move.
    keys = torch.rand(s, d, generator=generator, dtype=torch.float64) + segment.double()
    return x.gather(1, keys.argsort(dim=1).to(x.device))


def same_value_params(x: Tensor, value: float = 1.0) -> Tensor:
    r"""pFedGraph's *same-value* poisoning: every parameter is set to ``value``
    (the paper uses 1.0).

    .. math::
        \theta_i' = c\, \mathbf{1}

    Args:
        x (torch.Tensor): uploaded parameters :math:`(S, D)`.
        value (float, optional): the constant :math:`c` (default: :obj:`1.0`).
    """
    return torch.full_like(x, float(value))


def sign_flip_params(x: Tensor) -> Tensor:
    r"""pFedGraph's *sign flipping*: :math:`\theta_i' = -\theta_i`.

    Args:
        x (torch.Tensor): uploaded parameters :math:`(S, D)`.
    """
    return -x


def gaussian_params(x: Tensor, std: float = 1.0, *,
                    generator: torch.Generator | None = None) -> Tensor:
    r"""pFedGraph's *Gaussian* poisoning: every parameter is drawn from
    :math:`\mathcal{N}(0, \sigma^2)` (the paper uses :math:`\sigma = 1`).

    Args:
        x (torch.Tensor): uploaded parameters :math:`(S, D)` (only its shape
            and dtype are used).
        std (float, optional): :math:`\sigma` (default: :obj:`1.0`).
        generator (torch.Generator, optional): source of the draws.
    """
    return torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device) * float(std)


def scaled_negative_params(x: Tensor, start: Tensor, scale: float = 0.5) -> Tensor:
    r"""Panacea's model poisoning (Sec. IV-D, after Fang et al., USENIX
    Security 2020): the client uploads the scaled negative of its update,
    :math:`g' = -\lambda g` with :math:`\lambda = 0.5`.

    .. math::
        \theta_i' = \theta_i^{start} - \lambda\, (\theta_i - \theta_i^{start})

    Args:
        x (torch.Tensor): trained parameters :math:`(S, D)`.
        start (torch.Tensor): the parameters the clients started from
            :math:`(S, D)`.
        scale (float, optional): :math:`\lambda` (default: :obj:`0.5`).
    """
    if start.shape != x.shape:
        raise ValueError(f"start has shape {tuple(start.shape)}, x has {tuple(x.shape)}")
    return start - float(scale) * (x - start)


# ------------------------------------------------------------- data poisoning
def flip_labels(y: Tensor, num_classes: int, mode: FlipMode = "random", *,
                generator: torch.Generator | None = None) -> Tensor:
    r"""Label flipping: ``"random"`` replaces every label by a uniformly drawn
    *other* class (Panacea's "randomly flip the labels"); ``"reverse"`` maps
    class :math:`k` to :math:`C - 1 - k`.

    Args:
        y (torch.Tensor): integer class labels of any shape.
        num_classes (int): :math:`C \geq 2`.
        mode (str, optional): ``"random"`` or ``"reverse"`` (default:
            ``"random"``).
        generator (torch.Generator, optional): source of the random labels.
    """
    if num_classes < 2:
        raise ValueError(f"label flipping needs at least 2 classes, got {num_classes}")
    if mode not in _FLIP_MODES:
        raise ValueError(f"mode must be one of {_FLIP_MODES}, got {mode!r}")
    if mode == "reverse":
        return (num_classes - 1 - y).to(y.dtype)
    # An offset in [1, C) added modulo C never gives back the true class.
    offset = torch.randint(1, num_classes, y.shape, generator=generator).to(y.device)
    return ((y.long() + offset) % num_classes).to(y.dtype)


def default_trigger(shape: Sequence[int], low: float = 0.0, high: float = 1.0) -> Tensor:
    r"""A fixed random-noise pattern of the input shape, uniform in
    ``[low, high]``: the random-noise key pattern of the Blended attack (Chen
    et al., 2017), standing in for Panacea's hello-kitty image, which does not
    fit arbitrary inputs."""
    gen = torch.Generator().manual_seed(_TRIGGER_SEED)
    return low + (high - low) * torch.rand(tuple(shape), generator=gen)


def blend_trigger(x: Tensor, trigger: Tensor, blend: float = 0.2) -> Tensor:
    r"""The *Blended* backdoor (Chen et al., 2017; Panacea Sec. IV-D):

    .. math::
        \mathbf{x}' = \alpha\, \mathbf{t} + (1 - \alpha)\, \mathbf{x}

    Args:
        x (torch.Tensor): inputs :math:`(*, *F)`.
        trigger (torch.Tensor): the pattern :math:`\mathbf{t}` :math:`(*F)`.
        blend (float, optional): :math:`\alpha` (default: :obj:`0.2`).
    """
    if not 0.0 <= blend <= 1.0:
        raise ValueError(f"blend must be in [0, 1], got {blend}")
    return blend * trigger.to(device=x.device, dtype=x.dtype) + (1.0 - blend) * x


def _value_range(split: ClientSplit) -> tuple[float, float]:
    real = split.x[split.sample_mask()]
    if real.numel() == 0:
        return 0.0, 1.0
    return float(real.min()), float(real.max())


def triggered_test_split(dataset: FederatedDataset, trigger: Tensor, target: int = 1,
                         blend: float = 0.2, split: str = "test") -> ClientSplit:
    r"""The samples of ``split`` whose label is not ``target``, with the
    trigger blended in and relabelled ``target``: the accuracy of a model on
    it is the backdoor's attack success rate (ASR, Panacea Table V)."""
    sp = dataset.splits[split]
    keep = (sp.sample_mask() & (sp.y != target)).cpu()
    xs = [blend_trigger(sp.x[i].cpu()[keep[i]], trigger, blend)
          for i in range(sp.counts.numel())]
    ys = [torch.full((int(keep[i].sum()),), target, dtype=sp.y.dtype)
          for i in range(sp.counts.numel())]
    return ClientSplit.from_lists(xs, ys)


# --------------------------------------------------------------------- Attack
class Attack:
    r"""One attack by a fraction of the clients, as in pFedGraph (Sec. 4.1,
    :math:`r K` malicious clients of :math:`K`, :math:`r = 0.4` in Table 3)
    and Panacea (Sec. IV-D).

    * Model poisoning (``shuffle``, ``same-value``, ``sign-flip``,
      ``gaussian``, ``scaled-negative``): the malicious clients train
      honestly, then upload poisoned parameters (:meth:`poison_params`),
      every round they are sampled.
    * Data poisoning (``label-flip``, ``backdoor``): their training split is
      corrupted once, when the run is set up (:meth:`poison_dataset`); they
      upload what they train.

    Metrics are reported over the benign clients (as the papers do).

    Args:
        kind (str): one of :data:`ATTACKS`.
        ratio (float, optional): share :math:`r` of the (training) clients
            that are malicious; :math:`\max(1, \mathrm{round}(r K))` clients
            when :math:`r > 0` (default: :obj:`0.4`, pFedGraph Table 3).
        value (float, optional): the constant of ``same-value``
            (default: :obj:`1.0`, pFedGraph).
        std (float, optional): the standard deviation of ``gaussian``
            (default: :obj:`1.0`, pFedGraph).
        scale (float, optional): :math:`\lambda` of ``scaled-negative``
            (default: :obj:`0.5`, Panacea Sec. IV-D).
        flip (str, optional): ``"random"`` or ``"reverse"`` label flipping
            (default: ``"random"``, Panacea).
        target (int, optional): the backdoor's target class
            (default: :obj:`1`, Panacea).
        fraction (float, optional): share of a malicious client's training
            samples that carry the backdoor (default: :obj:`0.5`, Panacea).
        blend (float, optional): blending ratio :math:`\alpha` of the
            backdoor (default: :obj:`0.2`, Panacea).
        trigger (torch.Tensor, optional): the backdoor pattern, of the input
            shape (default: :func:`default_trigger` over the data's range).
    """

    def __init__(self, kind: AttackName, ratio: float = 0.4, *, value: float = 1.0,
                 std: float = 1.0, scale: float = 0.5, flip: FlipMode = "random",
                 target: int = 1, fraction: float = 0.5, blend: float = 0.2,
                 trigger: Tensor | None = None) -> None:
        if kind not in ATTACKS:
            raise ValueError(f"unknown attack {kind!r}; choose one of {list(ATTACKS)}")
        if isinstance(ratio, bool) or not 0.0 <= float(ratio) <= 1.0:
            raise ValueError(f"the attack ratio must be a share of clients in [0, 1], "
                             f"got {ratio!r}")
        if flip not in _FLIP_MODES:
            raise ValueError(f"flip must be one of {_FLIP_MODES}, got {flip!r}")
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if not 0.0 <= blend <= 1.0:
            raise ValueError(f"blend must be in [0, 1], got {blend}")
        if std < 0:
            raise ValueError(f"std must be >= 0, got {std}")
        self.kind = kind
        self.ratio = float(ratio)
        self.value = float(value)
        self.std = float(std)
        self.scale = float(scale)
        self.flip = flip
        self.target = int(target)
        self.fraction = float(fraction)
        self.blend = float(blend)
        self.trigger = trigger

    @property
    def poisons_model(self) -> bool:
        r""":obj:`True` for attacks on the uploaded parameters."""
        return self.kind in MODEL_ATTACKS

    @property
    def poisons_data(self) -> bool:
        r""":obj:`True` for attacks on the training data."""
        return self.kind in DATA_ATTACKS

    def hparams(self) -> dict:
        return {"kind": self.kind, "ratio": self.ratio, "value": self.value, "std": self.std,
                "scale": self.scale, "flip": self.flip, "target": self.target,
                "fraction": self.fraction, "blend": self.blend}

    # ---------------------------------------------------------------- who
    def select(self, candidates: Tensor, generator: torch.Generator) -> Tensor:
        r"""The malicious clients: a uniformly random subset of
        ``candidates`` of size :math:`\max(1, \mathrm{round}(r K))` (none when
        :math:`r = 0`), sorted."""
        n = candidates.numel()
        if self.ratio == 0.0 or n == 0:
            return candidates.new_zeros(0)
        k = min(n, max(1, int(round(self.ratio * n))))
        pick = torch.randperm(n, generator=generator)[:k]
        return candidates[pick].sort().values

    # ------------------------------------------------------------ what
    def poison_params(self, x: Tensor, start: Tensor, *,
                      generator: torch.Generator | None = None,
                      segment_ptr: Tensor | None = None) -> Tensor:
        r"""The parameters the malicious clients upload instead of their
        trained ones ``x`` :math:`(S, D)`, which started from ``start``
        :math:`(S, D)`; ``segment_ptr`` bounds the parameter tensors for
        ``shuffle``. Data attacks return ``x`` unchanged."""
        if self.kind == "shuffle":
            return shuffle_params(x, generator=generator, segment_ptr=segment_ptr)
        if self.kind == "same-value":
            return same_value_params(x, self.value)
        if self.kind == "sign-flip":
            return sign_flip_params(x)
        if self.kind == "gaussian":
            return gaussian_params(x, self.std, generator=generator)
        if self.kind == "scaled-negative":
            return scaled_negative_params(x, start, self.scale)
        return x

    def trigger_for(self, dataset: FederatedDataset) -> Tensor:
        r"""The backdoor pattern for ``dataset``'s inputs (``trigger`` if
        given, else :func:`default_trigger` over the training inputs' range)."""
        if self.trigger is not None:
            if tuple(self.trigger.shape) != dataset.input_shape:
                raise ValueError(f"the trigger has shape {tuple(self.trigger.shape)}, the "
                                 f"inputs have {dataset.input_shape}")
            return self.trigger
        low, high = _value_range(dataset.splits["train"])
        return default_trigger(dataset.input_shape, low, high)

    def poison_dataset(self, dataset: FederatedDataset, malicious: Tensor,
                       generator: torch.Generator) -> FederatedDataset:
        r"""A copy of ``dataset`` whose training split is corrupted for the
        ``malicious`` clients (validation and test splits are left clean).
        Model attacks return ``dataset`` itself."""
        if not self.poisons_data or malicious.numel() == 0:
            return dataset
        if dataset.task != "classification" or dataset.num_classes is None:
            raise ValueError(f"the {self.kind!r} attack corrupts class labels and needs a "
                             f"classification dataset; {dataset.name!r} is a "
                             f"{dataset.task} task: use a model attack "
                             f"({', '.join(MODEL_ATTACKS)})")
        train = dataset.splits["train"]
        if train.y.dim() != 2:
            raise ValueError(f"the {self.kind!r} attack needs one class label per sample, "
                             f"got targets of shape {tuple(train.y.shape)}")
        real = train.sample_mask()
        bad = torch.zeros(train.counts.numel(), dtype=torch.bool, device=real.device)
        bad[malicious] = True
        x, y = train.x.clone(), train.y.clone()
        if self.kind == "label-flip":
            rows = real & bad.unsqueeze(1)
            y[rows] = flip_labels(y[rows], dataset.num_classes, self.flip, generator=generator)
        else:
            if not 0 <= self.target < dataset.num_classes:
                raise ValueError(f"the backdoor target class {self.target} is not among the "
                                 f"{dataset.num_classes} classes")
            # A random `fraction` of each malicious client's real rows carries the trigger.
            keys = torch.rand(real.shape, generator=generator).to(real.device)
            keys[~(real & bad.unsqueeze(1))] = 2.0
            order = keys.argsort(dim=1).argsort(dim=1)  # rank of each row within its client
            quota = (train.counts.to(device=real.device, dtype=torch.float64)
                     * self.fraction).round().long()
            rows = (order < quota.unsqueeze(1)) & real & bad.unsqueeze(1)
            x[rows] = blend_trigger(x[rows], self.trigger_for(dataset), self.blend)
            y[rows] = self.target
        splits = {**dataset.splits, "train": ClientSplit(x, y, train.counts.clone())}
        log.info("%s attack: corrupted the training data of clients %s", self.kind,
                 malicious.tolist())
        return dataclasses.replace(dataset, splits=splits,
                                   info={**dataset.info, "attack": self.kind})

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.kind!r}, ratio={self.ratio})"
