r"""Where a run computes: device names, precision, threads.

A run has two places (see :class:`~pyg_fedgraph.simulation.Simulator`):

* the **compute device**, where the clients' local training and evaluation
  run (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``; ``"auto"`` picks CUDA
  when it is available, else the CPU);
* the **state device**, where the client table, the clients' own models and
  the strategy live (by default the compute device; ``"cpu"`` keeps a
  federation whose :math:`N \times D` table exceeds device memory on the host
  and moves only the sampled clients to the device).

Random draws always come from CPU generators
(:mod:`pyg_fedgraph.utils.seeds`), whose state moves between machines, so a
run draws the same clients and batches on any device.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch

from pyg_fedgraph.typing import Precision

__all__ = ["DeviceName", "Precision", "PRECISIONS", "resolve_device", "available_devices",
           "autocast", "amp_dtype", "set_threads", "same_device"]

#: What a user may write for a device.
DeviceName = str
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "fp16")
_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    r"""The :class:`torch.device` named by ``device``, checked to exist.

    Args:
        device (str or torch.device, optional): ``"auto"`` (CUDA when
            available, else the CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``,
            ``"mps"``, or a :class:`torch.device`. ``None`` means ``"auto"``.

    Raises:
        ValueError: for a name torch does not know, or a device this machine
            does not have (one line saying what is there instead).
    """
    if device is None:
        device = "auto"
    if isinstance(device, torch.device):
        spec = str(device)
    elif isinstance(device, str):
        spec = device.strip().lower()
    else:
        raise ValueError(f"device must be a string or torch.device, got "
                         f"{type(device).__name__}")
    if spec == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}; use auto, cpu, cuda, cuda:N or mps"
                         ) from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "built without CUDA" if torch.version.cuda is None else "no GPU visible"
            raise ValueError(f"device {spec!r}: CUDA is not available on this machine "
                             f"(torch {torch.__version__}, {why}); use --device cpu")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"device {spec!r}: this machine has {count} CUDA device(s), "
                             f"cuda:0 to cuda:{count - 1}")
        return dev
    if dev.type == "mps":
        if not _mps_available():
            raise ValueError(f"device {spec!r}: Apple's MPS backend is not available on this "
                             f"machine; use --device cpu")
        return dev
    raise ValueError(f"device {spec!r}: pyg_fedgraph runs on cpu, cuda or mps")


def available_devices() -> list[torch.device]:
    r"""The devices this machine can run on: the CPU, then every CUDA device,
    then MPS (what the tests run on)."""
    out = [torch.device("cpu")]
    if torch.cuda.is_available():
        out += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    if _mps_available():
        out.append(torch.device("mps"))
    return out


def amp_dtype(precision: Precision) -> torch.dtype | None:
    r"""The autocast dtype of ``precision`` (``None`` for ``"fp32"``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return _AMP_DTYPES.get(precision)


def autocast(device: torch.device, precision: Precision
             ) -> torch.autocast | nullcontext[None]:
    r"""The autocast context of local training and evaluation: forward
    passes in ``precision`` (``bf16`` / ``fp16``) on ``device``, a no-op for
    ``fp32``. Parameters, gradients, optimizer state and aggregation stay in
    float32 (only the operations autocast lists run in low precision)."""
    dtype = amp_dtype(precision)
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def set_threads(threads: int | None) -> int:
    r"""Sets torch's intra-op threads (``None`` leaves torch's choice) and
    returns the number in use. On machines shared with other jobs, one
    thread is often much faster for the small operations of federated
    simulations (see ``benchmarks/results/devices.md``)."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def same_device(a: torch.device, b: torch.device) -> bool:
    r"""Whether two devices are the same (``cuda`` and ``cuda:0`` are, when
    the current CUDA device is 0)."""
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return (a.index if a.index is not None else current) == \
        (b.index if b.index is not None else current)


@contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[None]:
    r"""Within the block, torch uses deterministic algorithms only.

    On the CPU this changes nothing (its kernels are deterministic). On CUDA,
    scatter sums (GATConv's softmax and aggregation, for one) otherwise add
    in a different order each run: two identical pFedGAT runs ended 0.02
    apart after 6 rounds on an H100, and bit for bit the same with this
    (``benchmarks/results/devices_h100.md``, section f). CUDA's matrix
    products also need ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` set before cuBLAS
    starts (the command line sets it for ``--deterministic``)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(enabled)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
