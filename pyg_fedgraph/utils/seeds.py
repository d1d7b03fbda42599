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

A round derives one stream per trained client; :func:`derive_seeds` computes
the same seeds as :func:`derive_seed` for a whole vector of clients at once
(SeedSequence's hash written over numpy arrays), so that deriving them costs
microseconds rather than a Python call per client.
"""
from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable

import numpy as np
import torch

__all__ = ["PURPOSES", "derive_seed", "derive_seeds", "make_generator", "make_generators"]

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
    entropy = _entropy(seed, purpose, keys)
    words = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return ((int(words[0]) << 32) | int(words[1])) & _MASK


def _entropy(seed: int, purpose: str, keys: Iterable[int]) -> list[int]:
    entropy = [int(seed), _purpose_id(purpose), *(int(k) for k in keys)]
    if any(v < 0 for v in entropy):
        raise ValueError(f"seed and keys must be non-negative ints, got seed={seed}, "
                         f"keys={tuple(keys)}")
    return entropy


# numpy.random.SeedSequence's constants (pool of 4 words, O'Neill's seed_seq_fe hash).
_POOL = 4
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_M32 = 0xFFFFFFFF
_MIX_L32, _MIX_R32, _SHIFT = np.uint32(_MIX_L), np.uint32(_MIX_R), np.uint32(16)


def _words(value: int) -> list[int]:
    r"""``value`` as SeedSequence reads an int: 32-bit words, least
    significant first (``0`` is one word)."""
    out = [value & _M32]
    value >>= 32
    while value:
        out.append(value & _M32)
        value >>= 32
    return out


@functools.lru_cache(maxsize=16)
def _hash_consts(first: int, mult: int, count: int) -> tuple[np.uint32, ...]:
    r"""The ``count`` successive hash multipliers that start at ``first``:
    SeedSequence multiplies its hash constant by ``mult`` before each use."""
    out, const = [], first
    for _ in range(count):
        out.append(np.uint32(const))
        const = (const * mult) & _M32
    return tuple(out)


def _seed_sequence_state(entropy: np.ndarray) -> np.ndarray:
    r"""``SeedSequence(row).generate_state(2)`` for every row of ``entropy``
    :math:`(M, W)` (uint32 words), as :math:`(M, 2)` uint32: the same
    arithmetic as numpy's, on columns instead of scalars."""
    width = entropy.shape[1]
    mixes = _POOL + _POOL * (_POOL - 1) + max(width - _POOL, 0) * _POOL
    consts_a = iter(_hash_consts(_INIT_A, _MULT_A, mixes + 1))
    const = next(consts_a)

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal const
        value = value ^ const
        const = next(consts_a)
        value = value * const
        return value ^ (value >> _SHIFT)

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        r: np.ndarray = np.subtract(x * _MIX_L32, y * _MIX_R32, dtype=np.uint32)
        return r ^ (r >> _SHIFT)

    zero = np.zeros(entropy.shape[0], dtype=np.uint32)
    pool = [hashmix(entropy[:, i] if i < width else zero) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(_POOL, width):
        for dst in range(_POOL):
            pool[dst] = mix(pool[dst], hashmix(entropy[:, src]))
    consts_b = _hash_consts(_INIT_B, _MULT_B, 3)
    out = []
    for i in range(2):
        value = (pool[i] ^ consts_b[i]) * consts_b[i + 1]
        out.append(value ^ (value >> _SHIFT))
    return np.stack(out, axis=1)


def derive_seeds(seed: int, purpose: str, *keys: int, ids: Iterable[int]) -> list[int]:
    r""":func:`derive_seed` ``(seed, purpose, *keys, i)`` for every ``i`` of
    ``ids`` (typically the ids of a round's clients), computed at once.

    Args:
        seed (int): the run's seed.
        purpose (str): what the streams are for (see :data:`PURPOSES`).
        *keys (int): the keys shared by all streams, e.g. ``(round,)``.
        ids (iterable of int): the last key, one stream each.

    Returns:
        one 63-bit seed per id, equal to ``derive_seed(seed, purpose, *keys, i)``.
    """
    ids = [int(i) for i in ids]
    head = _entropy(seed, purpose, keys)
    if any(i < 0 for i in ids):
        raise ValueError(f"ids must be non-negative ints, got {min(ids)}")
    prefix = np.array([w for v in head for w in _words(v)], dtype=np.uint32)
    out = [0] * len(ids)
    by_width: dict[int, list[int]] = {}
    for pos, i in enumerate(ids):  # ids of 2**32 and more are read as several words
        by_width.setdefault(1 if i <= _M32 else len(_words(i)), []).append(pos)
    for width, positions in by_width.items():
        tail = np.array([_words(ids[p]) for p in positions] if width > 1
                        else [ids[p] for p in positions], dtype=np.uint32).reshape(-1, width)
        entropy = np.concatenate([np.broadcast_to(prefix, (len(positions), prefix.size)), tail],
                                 axis=1)
        words = _seed_sequence_state(entropy).astype(np.uint64)
        seeds = ((words[:, 0] << np.uint64(32)) | words[:, 1]) & np.uint64(_MASK)
        for p, value in zip(positions, seeds.tolist(), strict=True):
            out[p] = int(value)
    return out


def make_generator(seed: int, purpose: str, *keys: int) -> torch.Generator:
    r"""A CPU :class:`torch.Generator` seeded with :func:`derive_seed`. Random
    draws stay on CPU generators so that their state moves between machines
    and devices."""
    return torch.Generator().manual_seed(derive_seed(seed, purpose, *keys))


def make_generators(seed: int, purpose: str, *keys: int, ids: Iterable[int]
                    ) -> list[torch.Generator]:
    r"""One :func:`make_generator` ``(seed, purpose, *keys, i)`` for each
    ``i`` of ``ids``, with the seeds derived at once (:func:`derive_seeds`)."""
    return [torch.Generator().manual_seed(s)
            for s in derive_seeds(seed, purpose, *keys, ids=ids)]
