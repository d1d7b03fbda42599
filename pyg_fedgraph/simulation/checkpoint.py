r"""Crash-safe checkpoints of a whole simulated run.

A checkpoint is :meth:`Simulator.state_dict()
<pyg_fedgraph.simulation.Simulator.state_dict>` (plus whatever the caller adds,
such as the run's settings) saved with :func:`torch.save`. It holds only
tensors, dicts, lists, numbers, strings and :obj:`None`, so it loads with
``torch.load(..., weights_only=True)``: opening a checkpoint never runs
arbitrary pickled code.

Writes are atomic: the bytes go to a temporary file in the same directory,
which is flushed and ``fsync``-ed, then renamed over the previous checkpoint
with :func:`os.replace`. A crash (or a kill) at any point leaves either the
previous checkpoint or the new one, never a truncated file.

These functions are the only file writes of the simulation package; the
simulator itself never writes (the CLI calls them for ``--checkpoint-every``
and ``--resume``).
"""
from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

import torch

__all__ = ["CHECKPOINT_NAME", "checkpoint_path", "save_checkpoint", "load_checkpoint",
           "remove_partial_writes"]

log = logging.getLogger(__name__)

#: File name of a run's checkpoint inside its output directory.
CHECKPOINT_NAME = "checkpoint.pt"

PathLike = Union[str, "os.PathLike[str]"]


def checkpoint_path(path: PathLike) -> Path:
    r"""``path`` itself if it names a file (or ends in ``.pt``), else
    ``path / checkpoint.pt``."""
    p = Path(path)
    if p.suffix == ".pt" or p.is_file():
        return p
    return p / CHECKPOINT_NAME


def save_checkpoint(state: Mapping[str, Any], path: PathLike) -> Path:
    r"""Atomically writes ``state`` to ``path`` (a file, or a directory that
    then holds :data:`CHECKPOINT_NAME`) and returns the file written.

    The directory is created if needed. On any failure (including
    :class:`KeyboardInterrupt`) the temporary file is removed, the previous
    checkpoint is left untouched, and the error propagates.
    """
    target = checkpoint_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                    dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(dict(state), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(target.parent)
    log.info("checkpoint of round %s written to %s", state.get("round"), target)
    return target


def load_checkpoint(path: PathLike) -> dict[str, Any]:
    r"""Loads a checkpoint written by :func:`save_checkpoint` (``path`` is
    the file or its directory) with ``weights_only=True``, on the CPU."""
    target = checkpoint_path(path)
    if not target.is_file():
        raise FileNotFoundError(f"no checkpoint at {target}; write one with "
                                f"--checkpoint-every K (or save_checkpoint)")
    try:
        return torch.load(target, map_location="cpu", weights_only=True)
    except Exception as err:  # unpickling errors come in several types
        # torch's own message advises weights_only=False, i.e. running the file's code: not here.
        raise ValueError(f"{target} is not a pyg-fedgraph checkpoint: it is damaged, truncated "
                         f"or holds objects other than tensors and plain data "
                         f"({type(err).__name__}); it was not loaded") from None


def remove_partial_writes(path: PathLike) -> list[Path]:
    r"""Deletes the temporary files that :func:`save_checkpoint` leaves when
    the process is killed mid-write (``.checkpoint.pt.*.tmp`` beside the
    checkpoint of ``path``) and returns them. Safe: a finished write never
    leaves one, and the checkpoint itself is untouched."""
    target = checkpoint_path(path)
    removed = []
    for tmp in sorted(target.parent.glob(f".{target.name}.*.tmp")):
        try:
            tmp.unlink()
            removed.append(tmp)
        except FileNotFoundError:
            pass
    if removed:
        log.info("removed %d partial checkpoint write(s) in %s", len(removed), target.parent)
    return removed


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not every platform can open a directory.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
