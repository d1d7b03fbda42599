"""Shared by the benchmark scripts: the machine description and writing a result table."""
from __future__ import annotations

import datetime as dt
import os
import platform
from pathlib import Path

import torch


def machine(load_start: float) -> list[str]:
    r"""Markdown bullet lines: date, platform, CPUs and threads, versions, and
    the load average at the start (``load_start``) and at the end of the run."""
    load = os.getloadavg()
    return [
        f"- date: {dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- platform: {platform.platform()} ({platform.machine()}, "
        f"{platform.processor() or 'n/a'})",
        f"- CPUs: {os.cpu_count()}; torch threads: {torch.get_num_threads()} "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})",
        f"- python {platform.python_version()}, torch {torch.__version__}",
        f"- 1-minute load average: {load_start:.1f} at the start, {load[0]:.1f} at the end "
        f"(5/15 min: {load[1]:.1f}, {load[2]:.1f})",
    ]


def emit(text: str, out: Path | None) -> None:
    r"""Prints ``text`` and, if ``out`` is given, writes it there."""
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"written to {out}")
