r"""The IDX file format of MNIST and Fashion-MNIST (LeCun et al.,
http://yann.lecun.com/exdb/mnist/): reading with :mod:`numpy` only,
finding the four files of a data set, and downloading them with checksums.

An IDX file is a big-endian header, then the data as unsigned bytes:

.. math::
    \underbrace{\texttt{00 00 08}\ d}_{\text{magic}}\;
    \underbrace{n_1 \cdots n_d}_{d \text{ uint32}}\;
    \underbrace{x_1 \cdots x_{n_1 \cdots n_d}}_{\text{uint8}},

so the magic number is 2051 for images (:math:`d = 3`: count, rows,
columns) and 2049 for labels (:math:`d = 1`). Files may be gzip-compressed
(recognized by content, not by name). Nothing here unpickles or runs
anything read from a file.
"""
from __future__ import annotations

import gzip
import hashlib
import logging
import math
import shutil
import urllib.request
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path

import numpy as np

__all__ = ["IDX_IMAGES", "IDX_LABELS", "IDXFile", "Fetch", "read_idx", "find_idx_files",
           "download_idx"]

log = logging.getLogger(__name__)

#: Magic number of an IDX file of unsigned-byte images (3 dimensions).
IDX_IMAGES = 2051
#: Magic number of an IDX file of unsigned-byte labels (1 dimension).
IDX_LABELS = 2049
_KIND = {IDX_IMAGES: "images", IDX_LABELS: "labels"}
_GZIP_MAGIC = b"\x1f\x8b"

#: ``fetch(url, dest)`` writes the bytes found at ``url`` to the file ``dest``.
Fetch = Callable[[str, Path], None]


@dataclass(frozen=True)
class IDXFile:
    r"""One published IDX file: its name without ``.gz``, the md5 of the
    published ``<name>.gz`` and the sha256 of the decompressed IDX bytes
    (independent of how the file was compressed)."""
    name: str
    md5: str
    sha256: str


def _contents(path: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] != _GZIP_MAGIC:
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"{path} is not a readable gzip file ({err}); it is truncated or "
                         f"corrupted: delete it and get it again") from err


def read_idx(path: str | Path, magic: int) -> np.ndarray:
    r"""Reads an IDX file of unsigned bytes (raw or gzip-compressed).

    Args:
        path (str or Path): the file.
        magic (int): the expected magic number: :data:`IDX_IMAGES` (2051)
            or :data:`IDX_LABELS` (2049).

    Returns:
        A writable ``uint8`` array shaped by the header: :math:`(n, R, C)`
        for images, :math:`(n,)` for labels.

    Raises:
        ValueError: naming the file, if it is not an IDX file with that magic
            number (another format, garbage bytes), or if its size does not
            match its header (truncated, trailing bytes).
    """
    if magic not in _KIND:
        raise ValueError(f"magic must be {IDX_IMAGES} (images) or {IDX_LABELS} (labels), "
                         f"got {magic}")
    path = Path(path)
    data = _contents(path)
    kind = _KIND[magic]
    found = int.from_bytes(data[:4], "big") if len(data) >= 4 else None
    if found != magic:
        what = (f"{len(data)} bytes only" if found is None
                else f"magic number {found:#010x}")
        raise ValueError(f"{path} is not an IDX {kind} file ({what}, expected {magic:#010x}); "
                         f"replace it with the published {path.name}")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path} is truncated: its {ndim}-dimensional IDX header needs "
                         f"{header} bytes but the file holds {len(data)}; get it again")
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = header + math.prod(dims)
    if len(data) != expected:
        problem = "is truncated" if len(data) < expected else "has trailing bytes"
        shape = " x ".join(str(d) for d in dims)
        raise ValueError(f"{path} {problem}: its header promises {shape} bytes of {kind} "
                         f"({expected} bytes in all) but it holds {len(data)}; get it again")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims).copy()


def find_idx_files(names: Sequence[str], folders: Sequence[str | Path]
                   ) -> tuple[dict[str, Path] | None, str]:
    r"""The first folder of ``folders`` holding every file of ``names``, each
    as ``<name>`` or ``<name>.gz`` (the uncompressed one preferred).

    Returns:
        ``(paths, missing)``: ``paths`` maps each name to its file, or is
        :obj:`None` when no folder holds them all; ``missing`` then says what
        the most complete folder lacks (an empty string otherwise).
    """
    best: tuple[int, str] = (-1, "")
    for folder in map(Path, folders):
        found: dict[str, Path] = {}
        for name in names:
            for candidate in (folder / name, folder / f"{name}.gz"):
                if candidate.is_file():
                    found[name] = candidate
                    break
        if len(found) == len(names):
            return found, ""
        if folder.is_dir() and len(found) > best[0]:
            lacking = ", ".join(f"{n}[.gz]" for n in names if n not in found)
            best = (len(found), f"{folder} lacks {lacking}")
    return None, best[1]


def _urlopen(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=60) as response, open(dest, "wb") as f:
        shutil.copyfileobj(response, f)


def _check_download(path: Path, file: IDXFile, url: str) -> None:
    data = path.read_bytes()
    md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
    if md5 != file.md5:
        raise ValueError(f"md5 {md5} of {url} is not the published {file.md5}")
    try:
        content = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"{url} is not a gzip file ({err})") from err
    sha256 = hashlib.sha256(content).hexdigest()
    if sha256 != file.sha256:
        raise ValueError(f"sha256 {sha256} of the IDX data in {url} is not the expected "
                         f"{file.sha256}")


def download_idx(root: str | Path, files: Sequence[IDXFile], mirrors: Sequence[str],
                 fetch: Fetch | None = None) -> dict[str, Path]:
    r"""Downloads ``<mirror><name>.gz`` into ``root`` for every file of
    ``files`` that ``root`` does not hold yet, trying the mirrors in order.

    A download keeps its final name only after both checks pass: the md5 of
    the archive (as published) and the sha256 of the decompressed IDX data;
    otherwise nothing is left behind and the next mirror is tried.

    Args:
        root (str or Path): the folder receiving the files (created if needed).
        files (list of IDXFile): the files and their checksums.
        mirrors (list of str): base URLs, each ending with ``/``.
        fetch (callable, optional): ``fetch(url, dest)`` writing the bytes of
            ``url`` to the file ``dest``. (default: :mod:`urllib.request`)

    Returns:
        The path of every file, by name.

    Raises:
        ValueError: if some file could not be fetched and verified from any
            mirror (the message lists what each mirror did).
    """
    if not mirrors:
        raise ValueError("download_idx needs at least one mirror URL")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    fetch = fetch or _urlopen
    out: dict[str, Path] = {}
    for file in files:
        dest = root / f"{file.name}.gz"
        if dest.is_file():
            out[file.name] = dest
            continue
        part = dest.with_name(dest.name + ".part")
        failures = []
        for base in mirrors:
            url = f"{base}{file.name}.gz"
            try:
                fetch(url, part)
                _check_download(part, file, url)
            except BaseException as err:
                part.unlink(missing_ok=True)
                if not isinstance(err, OSError | ValueError | HTTPException):
                    raise
                failures.append(f"{url}: {err}")
                continue
            part.replace(dest)
            log.info("downloaded %s to %s (md5 and sha256 verified)", url, dest)
            out[file.name] = dest
            break
        else:
            raise ValueError(f"could not download a verified {file.name}.gz into {root}: "
                             + "; ".join(failures))
    return out
