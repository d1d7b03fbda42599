r"""One rule for every random stream of a run: a seed derived from
``(run seed, purpose, keys...)``.

Each random decision of a federated run (which clients are sampled in a
round, the batch order of client 7 in round 3, which clients are malicious,
the fine-tuning batches before an evaluation ...) draws from its own
:class:`torch.Generator`, seeded with

.. math::
    s = \mathrm{SeedSequence}(\text{seed}, \mathrm{id}(\text{purpose}),
    k_1, \ldots, k_m).\mathrm{generate\_state}(2)

(:class:`numpy.random.SeedSequence`, a hash designed for exactly this). The
purpose is a name such as ``"batches"``, turned into a number by CRC-32, so
streams of different purposes never coincide by construction (hand-written
arithmetic such as ``seed * 1_000_003 + round`` did: fine-tuning at round 9
met dropout at round 1). Streams need no saved state, switching one feature
on does not shift the others, and a client trained by a Flower node draws the
same batches as in the in-process simulator, because both derive them from
``(seed, "batches", round, client)``.
"""
from __future__ import annotations

import zlib

import numpy as np
import torch

__all__ = ["PURPOSES", "derive_seed", "make_generator"]

#: The purposes used by the library (others may be added by user code: any
#: string works; these are listed so that they are documented in one place).
PURPOSES: dict[str, str] = {
    "sample": "clients sampled in a round (keys: round)",
    "batches": "a client's mini-batch order in a round's main training (keys: round, client)",
    "personal": "batch order of a second, personal training (keys: round, client)",
    "finetune": "batch order of fine-tuning before an evaluation (keys: round, client)",
    "evaluate-sample": "clients evaluated in a round when only a share is (keys: round)",
    "dropout": "which sampled clients drop out of a round (keys: round)",
    "attack": "random values of model-poisoning attacks (keys: round)",
    "malicious": "which clients are malicious (no keys)",
    "data-attack": "data poisoning of the malicious clients (no keys)",
    "held-out": "which clients are held out as novel (no keys)",
    "model-init": "the initial weights of the client model (no keys)",
    "hypernetwork-init": "the initial weights of a server hypernetwork (no keys)",
    "negative-sampling": "Panacea's negative edges (keys: round, server step)",
    "kmeans": "FedCEDAR's k-means seeding (keys: round)",
    "ifca-init": "IFCA's initial cluster models (no keys)",
    "head": "batch order of FedRep's head training before the main one (keys: round, client)",
    "ala": "FedALA's share of a client's data for its aggregation weights (keys: round, client)",
    "pfedla-init": "the initial weights of pFedLA's hypernetworks (no keys)",
}

_MASK = (1 << 63) - 1


def _purpose_id(purpose: str) -> int:
    if not isinstance(purpose, str) or not purpose:
        raise ValueError(f"a seed purpose must be a non-empty string, got {purpose!r}")
    return zlib.crc32(purpose.encode("utf-8"))


def derive_seed(seed: int, purpose: str, *keys: int) -> int:
    r"""A 63-bit seed for the stream ``purpose`` of run ``seed`` at ``keys``.

    Args:
        seed (int): the run's seed (any non-negative int).
        purpose (str): what the stream is for (see :data:`PURPOSES`).
        *keys (int): non-negative ints that select one stream of that purpose,
            e.g. ``(round, client)``.

    Example::

        >>> derive_seed(0, "batches", 3, 7) != derive_seed(0, "finetune", 3, 7)
        True
    """
    entropy = [int(seed), _purpose_id(purpose), *(int(k) for k in keys)]
    if any(v < 0 for v in entropy):
        raise ValueError(f"seed and keys must be non-negative ints, got seed={seed}, "
                         f"keys={keys}")
    words = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return ((int(words[0]) << 32) | int(words[1])) & _MASK


def make_generator(seed: int, purpose: str, *keys: int) -> torch.Generator:
    r"""A CPU :class:`torch.Generator` seeded with :func:`derive_seed`. Random
    draws stay on CPU generators so that their state moves between machines
    and devices."""
    return torch.Generator().manual_seed(derive_seed(seed, purpose, *keys))
