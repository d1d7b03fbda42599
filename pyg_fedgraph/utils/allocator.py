r"""Keeping freed memory in the process, so that large temporaries are reused
instead of being returned to the operating system and faulted in again.

PyTorch's CPU allocator does not cache: every CPU tensor's storage is a
``posix_memalign`` of the C library and goes back with ``free`` when the
tensor dies. glibc serves a request above its *mmap threshold* with a fresh
``mmap`` and gives it back with ``munmap``: the next tensor of that size
gets new pages from the kernel, and touching each 4 KiB page the first time
costs a page fault. The threshold starts at 128 KiB and rises by itself after
a freed mapping up to 32 MiB on 64-bit systems, but never beyond: blocks
larger than 32 MiB are mapped and unmapped on every use (``man 3 mallopt``,
``M_MMAP_THRESHOLD``). Batched clients make exactly such blocks: an
:math:`(S, D)` matrix of 50 clients of FED-PUB's GCN (:math:`D \approx
2 \cdot 10^5`) is 40 MB, and a round of local training creates and frees
several (gradients, optimizer temporaries, stacked parameters). On one CPU
thread the page faults were most of the gap between the batched round and a
per-client loop (``benchmarks/results/subgraph_speed.md``).

The cure is the application's choice, not the library's: allocators that
keep freed memory (jemalloc, TCMalloc) are what PyTorch's performance tuning
guide recommends on the CPU for the same reason ("Switch Memory allocator",
https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html), and
:func:`retain_freed_memory` gets the same effect from glibc itself. The
project's applications, the command line (``pyg-fedgraph run`` and ``tune``)
and the reproduction scripts under ``benchmarks/reproduce/``, call it at start
(:func:`keep_freed_memory_at_start`) unless ``PYG_FEDGRAPH_KEEP_MEMORY=0``;
importing the package never does.
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys

__all__ = ["retain_freed_memory", "keep_freed_memory_at_start", "KEEP_MEMORY_ENV"]

log = logging.getLogger(__name__)

#: The environment variable that, set to ``0``, stops the command line from
#: calling :func:`retain_freed_memory`.
KEEP_MEMORY_ENV = "PYG_FEDGRAPH_KEEP_MEMORY"

# mallopt's parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# mallopt takes a C int.
_INT_MAX = 2 ** 31 - 1


def retain_freed_memory(mmap_threshold: int = 1 << 30, trim_threshold: int = 1 << 30) -> bool:
    r"""Makes glibc's ``malloc`` keep freed memory for reuse: requests up to
    ``mmap_threshold`` bytes come from the heap instead of a fresh ``mmap``,
    and free memory at the top of the heap is returned to the operating
    system only beyond ``trim_threshold`` bytes (``mallopt`` with
    ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD``; see the module docstring
    for why).

    Process-wide, and best called once at the start of an application (the
    command line does; a script can, or set glibc's own
    ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` environment
    variables before Python starts). Calling it again sets the same values.
    It changes where memory comes from, never a computed value. The cost is
    memory: up to ``trim_threshold`` bytes of freed memory stay resident, and
    the heap fragments (PyTorch asks for 64-byte aligned blocks, which leaves
    a freed block a little too small for the next request of its own size
    until it merges with a free neighbour), so the process's peak resident
    memory grows. Measured (``benchmarks/results/subgraph_speed.md``, one
    thread): a FedAvg round of 50 Cora clients of FED-PUB's GCN takes 2.5x
    less CPU time at 10% more peak memory; 100 CiteSeer clients run 1.6-1.8x
    faster at 25-30% more (pFedGraph: 4.0 GB -> 5.2 GB); rounds of small
    models (the default job, FL-60, Fashion-MNIST's CNN) change by neither.

    Args:
        mmap_threshold (int, optional): bytes from which a request is
            ``mmap``\ ed (default: :obj:`1 << 30`, 1 GiB; glibc's default
            adapts between 128 KiB and 32 MiB).
        trim_threshold (int, optional): free bytes at the top of the heap
            that are kept (default: :obj:`1 << 30`, 1 GiB; glibc's default is
            twice the mmap threshold).

    Returns:
        :obj:`True` if glibc accepted both settings; :obj:`False` on other C
        libraries (macOS, Windows, musl), where nothing changes (logged at
        debug level). Under an ``LD_PRELOAD``\ ed jemalloc or TCMalloc, which
        already keep freed memory, glibc's settings do not reach ``malloc``.
    """
    for name, value in (("mmap_threshold", mmap_threshold), ("trim_threshold", trim_threshold)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _INT_MAX:
            raise ValueError(f"{name} must be a number of bytes in [1, {_INT_MAX}] (mallopt "
                             f"takes a C int), got {value!r}")
    if not sys.platform.startswith("linux"):
        log.debug("retain_freed_memory: not glibc (platform %s); allocator left as it is",
                  sys.platform)
        return False
    try:
        libc = ctypes.CDLL(None)  # the C library the process runs on
        version = libc.gnu_get_libc_version  # glibc's own: absent in musl
        mallopt = libc.mallopt
    except (OSError, AttributeError) as err:
        log.debug("retain_freed_memory: not glibc (%s); allocator left as it is", err)
        return False
    version.restype = ctypes.c_char_p
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = (mallopt(_M_MMAP_THRESHOLD, mmap_threshold) == 1
          and mallopt(_M_TRIM_THRESHOLD, trim_threshold) == 1)
    if ok:
        log.debug("retain_freed_memory: glibc %s keeps freed memory (mmap threshold %d B, "
                  "trim threshold %d B)", version().decode(), mmap_threshold, trim_threshold)
    else:
        log.debug("retain_freed_memory: glibc %s refused mallopt; allocator left as it is",
                  version().decode())
    return ok


def keep_freed_memory_at_start() -> bool:
    r"""What this project's applications (``pyg-fedgraph run`` and ``tune``,
    the reproduction scripts) call at their start: :func:`retain_freed_memory`
    with its defaults, unless the environment variable
    :data:`KEEP_MEMORY_ENV` (``PYG_FEDGRAPH_KEEP_MEMORY``) is ``0``.

    Returns:
        :obj:`True` if freed memory is now kept, :obj:`False` if the variable
        turned it off or the C library is not glibc.
    """
    if os.environ.get(KEEP_MEMORY_ENV, "1").strip() == "0":
        log.debug("%s=0: allocator left as it is", KEEP_MEMORY_ENV)
        return False
    return retain_freed_memory()
