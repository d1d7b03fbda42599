r"""Error text for the command line, which reports a library error as one line."""
from __future__ import annotations

__all__ = ["one_line"]


def one_line(err: BaseException) -> str:
    r"""The message of ``err`` on one line (some h5py and pickle messages span
    several), or its type's name when it has none."""
    return " ".join(str(err).split()) or type(err).__name__
