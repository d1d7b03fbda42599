r"""Seconds and memory of a call, measured the way the benchmarks of the
repository (``benchmarks/perf/``) measure them: wall-clock seconds with the
device's queued work waited for, and the process's resident memory from
``/proc`` (Linux).

On CUDA a call returns before its kernels have run; :func:`timed` waits for
the device before and after the call, so that the seconds are those of the
work and not of queueing it. Memory is read from ``/proc/self/status``
(``VmHWM``, the peak resident set size) rather than from
:func:`resource.getrusage`'s ``ru_maxrss``: Linux carries a parent's
high-water mark over ``exec`` into a child's ``ru_maxrss``, which makes every
child process report at least its parent's peak.
"""
from __future__ import annotations

import resource
import time
from collections.abc import Callable
from typing import TypeVar

import torch

__all__ = ["synchronize", "timed", "time_calls", "peak_rss", "current_rss"]

T = TypeVar("T")


def synchronize(device: torch.device | str | None) -> None:
    r"""Waits for the work queued on ``device`` (CUDA); nothing on the CPU or
    for ``None``."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], T], device: torch.device | str | None = None
          ) -> tuple[float, T]:
    r"""Wall-clock seconds and result of one call ``fn()``, the queued work of
    ``device`` waited for before and after (:func:`synchronize`).

    Args:
        fn (callable): the call, without arguments.
        device (torch.device or str, optional): the device whose work the
            call queues (default: :obj:`None`, nothing to wait for).
    """
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return time.perf_counter() - start, out


def time_calls(fn: Callable[[], T], repeats: int, device: torch.device | str | None = None
               ) -> tuple[list[float], T]:
    r"""One untimed call of ``fn`` (the warm-up: first-call costs such as
    allocation, compilation and caches stay out of the timings), then
    ``repeats`` timed calls (:func:`timed`). Returns the seconds of the
    timed calls and the warm-up's result (the value to compare with other
    ways of computing it).

    Args:
        fn (callable): the call, without arguments.
        repeats (int): timed calls, at least 1.
        device (torch.device or str, optional): as in :func:`timed`
            (default: :obj:`None`).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    out = fn()
    return [timed(fn, device)[0] for _ in range(repeats)], out


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss() -> int:
    r"""This process's peak resident set size in bytes (``VmHWM`` of
    ``/proc/self/status``; where that is missing, ``ru_maxrss``, which a child
    process inherits from its parent at ``exec``)."""
    peak = _status_bytes("VmHWM")
    if peak is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return peak


def current_rss() -> int:
    r"""This process's resident set size now, in bytes (``/proc/self/statm``;
    0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return 0
