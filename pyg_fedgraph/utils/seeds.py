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
    "graph-partition": "random node partitions and METIS seeds of a graph (no keys)",
    "overlapping-sample": "the nodes an overlapping client samples from its METIS part "
                          "(keys: part, client of the part)",
    "node-split": "a graph's random train / validation / test node split (no keys)",
    "synthetic-graph": "the draws of a synthetic graph with planted communities (keys: step)",
    "proxy-graph": "the random proxy graph and its node features of functional embeddings "
                   "(FED-PUB; keys: 0 edges, 1 features)",
    "graph-federation": "which graphs each client of a graph-level federation holds, and their "
                        "train / val / test split (keys: CRC-32 of the dataset's name)",
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
def _hash_consts(first: int, mult: int, count: int) -> tuple[int, ...]:
    r"""The ``count`` successive hash multipliers that start at ``first``:
    SeedSequence multiplies its hash constant by ``mult`` before each use."""
    out, const = [], first
    for _ in range(count):
        out.append(const)
        const = (const * mult) & _M32
    return tuple(out)


Word = int | np.ndarray  # one 32-bit word shared by all rows (an int) or one per row (uint32)


def _hashmix(value: Word, const_in: int, const_out: int) -> Word:
    if isinstance(value, int):
        v = ((value ^ const_in) * const_out) & _M32
        return v ^ (v >> 16)
    out: np.ndarray = (value ^ np.uint32(const_in)) * np.uint32(const_out)
    return out ^ (out >> _SHIFT)


def _mix(x: Word, y: Word) -> Word:
    if isinstance(x, int) and isinstance(y, int):
        r = (x * _MIX_L - y * _MIX_R) & _M32
        return r ^ (r >> 16)
    left = (x * _MIX_L) & _M32 if isinstance(x, int) else x * _MIX_L32
    right = (y * _MIX_R) & _M32 if isinstance(y, int) else y * _MIX_R32
    out: np.ndarray = np.subtract(left, right, dtype=np.uint32)
    return out ^ (out >> _SHIFT)


def _seed_sequence_state(columns: list[Word], rows: int) -> np.ndarray:
    r"""``SeedSequence(entropy).generate_state(2)`` for ``rows`` entropies
    given column by column, as :math:`(\text{rows}, 2)` uint32: numpy's
    arithmetic, with the columns that all rows share (the run's seed, the
    purpose, the round) computed once as Python ints and only the others
    (the client ids) as numpy columns."""
    width = len(columns)
    mixes = _POOL + _POOL * (_POOL - 1) + max(width - _POOL, 0) * _POOL
    consts = _hash_consts(_INIT_A, _MULT_A, mixes + 1)
    used = 0

    def hashmix(value: Word) -> Word:
        nonlocal used
        used += 1
        return _hashmix(value, consts[used - 1], consts[used])

    pool = [hashmix(columns[i] if i < width else 0) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = _mix(pool[dst], hashmix(pool[src]))
    for src in range(_POOL, width):
        for dst in range(_POOL):
            pool[dst] = _mix(pool[dst], hashmix(columns[src]))
    consts_b = _hash_consts(_INIT_B, _MULT_B, 3)
    out = []
    for i in range(2):
        value = _hashmix(pool[i], consts_b[i], consts_b[i + 1])
        out.append(np.broadcast_to(np.asarray(value, dtype=np.uint32), (rows,)))
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
    if not ids:
        return []
    low, high = min(ids), max(ids)
    if low < 0:
        raise ValueError(f"ids must be non-negative ints, got {low}")
    prefix: list[Word] = [w for v in head for w in _words(v)]
    if high <= _M32:  # the usual case: every id is one 32-bit word
        return _seeds_of(prefix, [np.array(ids, dtype=np.uint32)], len(ids))
    out = [0] * len(ids)
    by_width: dict[int, list[int]] = {}
    for pos, i in enumerate(ids):  # ids of 2**32 and more are read as several words
        by_width.setdefault(len(_words(i)), []).append(pos)
    for width, positions in by_width.items():
        tail = np.array([_words(ids[p]) for p in positions],
                        dtype=np.uint32).reshape(-1, width)
        for p, value in zip(positions, _seeds_of(prefix, list(tail.T), len(positions)),
                            strict=True):
            out[p] = value
    return out


def _seeds_of(prefix: list[Word], tail: list[np.ndarray], rows: int) -> list[int]:
    r"""The 63-bit seeds of ``rows`` entropies: the shared ``prefix`` words,
    then the per-row ``tail`` columns."""
    words = _seed_sequence_state([*prefix, *tail], rows).astype(np.uint64)
    seeds: list[int] = (((words[:, 0] << np.uint64(32)) | words[:, 1])
                        & np.uint64(_MASK)).tolist()
    return seeds


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
