r"""The TUDataset collection of graph classification benchmarks (Morris et al.,
"TUDataset: A collection of benchmark datasets for learning with graphs",
GRL+ workshop at ICML 2020), read from its text format with :mod:`numpy`.

A dataset ``NAME`` of :math:`G` graphs with :math:`N` nodes in all is a
folder of comma-separated text files, one row per line:

.. math::
    \underbrace{\texttt{NAME\_A.txt}}_{E \times 2:\ u, v \in 1..N}\quad
    \underbrace{\texttt{NAME\_graph\_indicator.txt}}_{N:\ g \in 1..G}\quad
    \underbrace{\texttt{NAME\_graph\_labels.txt}}_{G}

and optionally ``NAME_node_labels.txt`` (:math:`N` rows of integers),
``NAME_node_attributes.txt`` (:math:`N` rows of floats) and
``NAME_edge_labels.txt`` (one row per line of ``NAME_A.txt``). Nodes are
numbered from 1 across the whole dataset and listed graph by graph.

:func:`read_tu` turns them into one :class:`torch_geometric.data.Data` per
graph exactly as PyG's :class:`~torch_geometric.datasets.TUDataset` does
(tested on the same raw folder): node labels one-hot (each label column
shifted to start at 0, one column per value up to its maximum), continuous
node attributes placed before them when asked for, self-loops removed,
duplicate edges merged, edges sorted, graph labels mapped to
:math:`0..C-1` in sorted order. Nothing here unpickles or runs anything read
from a file; every malformed row is reported as one line naming the file and
the line.
"""
from __future__ import annotations

import difflib
import hashlib
import io
import logging
import re
import shutil
import urllib.request
import warnings
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_fedgraph.datasets.idx import Fetch

__all__ = ["TUGraphs", "read_tu", "download_tu", "check_tu_names", "known_tu_names", "TU_URL",
           "TU_SHA256", "GCFL_GROUPS"]

log = logging.getLogger(__name__)

#: Where PyG's :class:`~torch_geometric.datasets.TUDataset` downloads
#: ``<NAME>.zip`` from (its ``url`` attribute, PyG 2.8).
TU_URL = "https://www.chrsmrrs.com/graphkerneldatasets"

#: sha256 of the raw files of the datasets whose published copies were
#: checked (``../shared/data/README.md``: byte copies of PyG's ``raw/``
#: folders, i.e. of the collection's zip archives). A download of these
#: datasets is kept only if every file listed here matches.
TU_SHA256: dict[str, dict[str, str]] = {
    "AIDS": {
        "AIDS_A.txt": "9da8e3f787d1dbdc80a35f205707bd0bec0778261fb7e54355c061912f8d8380",
        "AIDS_edge_labels.txt":
            "47e3eac0bf8c6196af7d5532fba3d2c9b29014740d471bd4696149a5ef2bf7d7",
        "AIDS_graph_indicator.txt":
            "8a1ede4f84bcba1f5a7f49fe7e89cdc74466645b62175603710b80300fb68be4",
        "AIDS_graph_labels.txt":
            "da9c413b24b0a808b497a4567f57dce975d0eb9dc69c5db82aec6a172c88e28f",
        "AIDS_label_readme.txt":
            "9245ff0e944ff0ecb13cca6dcd274163d7ea529e36ebe49b61529fb85cb1f758",
        "AIDS_node_attributes.txt":
            "e47595d48fa329d84183fd68f8b4a6b327fd05690e3d335ffcdc6b7c110f081c",
        "AIDS_node_labels.txt":
            "d90cda6258c58f4c3facaa2e6a71e1b589da13f0162af59881400a3c8f0c514a",
    },
    "ENZYMES": {
        "ENZYMES_A.txt": "5553c84f8f562f3e199dfd27192174f485e85c44c1357661098668937a739cbf",
        "ENZYMES_graph_indicator.txt":
            "95ba0fa47eba6f02e6b754a215dc66d5b49de3f45f57a128514301a8d7ed5f46",
        "ENZYMES_graph_labels.txt":
            "04743e08967e61e65cdacbb90f8df6ee53742b3d2e7b84675b85ebac70506856",
        "ENZYMES_node_attributes.txt":
            "305a8fc3b12f79fb844ef3374d6a3c8ceeb4887dd4f86bbfe37932c4c5434e7b",
        "ENZYMES_node_labels.txt":
            "8263eb9b64efa231a5886343483ccfc0342f2407014763a8f738fd51c32ce770",
        "README.txt": "32d5fef501200221a2c0e1af3366797fa443ab8f490231c5fb4a8719e1df48cf",
    },
    "MUTAG": {
        "MUTAG_A.txt": "d9656ca7493f3445d737c711710bb36fd432dddd1c0ea32e1d4713c86ebd28e2",
        "MUTAG_edge_labels.txt":
            "4669ce755075ff86c3240709345745886400908fa637a49310459b9c267b3e56",
        "MUTAG_graph_indicator.txt":
            "7d520a4d6c7961c0cdeabe076d8fe27e795b6d373485c9a2b744987e560a2056",
        "MUTAG_graph_labels.txt":
            "a1518ea39ba3426bd42f57396b9c4baffe68e9adc718caeeab0119c6591a5f2c",
        "MUTAG_node_labels.txt":
            "678f429965490e84dd27713017538c995fc05d1621beac910848b600015ee863",
        "README.txt": "66de65e4826e112482ec680bbbdf7c0af56d826ce935c110786d130b79b76b06",
    },
    "PROTEINS": {
        "PROTEINS_A.txt": "4c4b33e272fc95cac6d27ed6d5d12b9a852c8610e91fff59f8f0dbdd5a20df67",
        "PROTEINS_graph_indicator.txt":
            "8d4ff1e852a5c28561e9bffb44cf9490bc552b13a3b6156dd12dc7f44e9afc4a",
        "PROTEINS_graph_labels.txt":
            "c0ef9810c440775252872318d0c8adc385588e14bc4c47a2c34aa96ee3c7cdcd",
        "PROTEINS_node_attributes.txt":
            "54eef829abb37e458a5fbf3a3c581e48e5810e220463c2cd951856b9ceb08f07",
        "PROTEINS_node_labels.txt":
            "f758e8ad3d6e3c026b50833d75f6f90735b94eb3345e4243707f495ca8afea8d",
        "README.txt": "e9c4ed2c9a4059ddfdc2eb7330ebecfc6c8d42dabd5ce2ee67f28aed0db49da7",
    },
}

#: The dataset groups of GCFL's cross-dataset setting (Xie et al., "Federated
#: Graph Classification over Non-IID Graphs", NeurIPS 2021, Sec. 6.1; the
#: lists of ``prepareData_multiDS`` in ``setupGC.py`` of the authors'
#: repository Oxfordblue7/GCFL, commit a6691ae), one client per dataset.
GCFL_GROUPS: dict[str, tuple[str, ...]] = {
    "molecules": ("MUTAG", "BZR", "COX2", "DHFR", "PTC_MR", "AIDS", "NCI1"),
    "small": ("MUTAG", "BZR", "COX2", "DHFR", "PTC_MR", "ENZYMES", "DD", "PROTEINS"),
    "biochem": ("MUTAG", "BZR", "COX2", "DHFR", "PTC_MR", "AIDS", "NCI1", "ENZYMES", "DD",
                "PROTEINS"),
    "mix": ("MUTAG", "BZR", "COX2", "DHFR", "PTC_MR", "AIDS", "NCI1", "ENZYMES", "DD",
            "PROTEINS", "COLLAB", "IMDB-BINARY", "IMDB-MULTI"),
}

_REQUIRED = ("A", "graph_indicator", "graph_labels")
# Names of the collection: letters, digits, '_', '-', '.', '(' and ')'; never a path.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.()\-]*")


def known_tu_names() -> tuple[str, ...]:
    r"""The dataset names this module knows without looking at any folder:
    those with checksums (:data:`TU_SHA256`) and those of GCFL's groups
    (:data:`GCFL_GROUPS`), sorted."""
    names = set(TU_SHA256)
    for group in GCFL_GROUPS.values():
        names.update(group)
    return tuple(sorted(names))


@dataclass(frozen=True, eq=False)
class TUGraphs:
    r"""The graphs of one TU dataset, as :func:`read_tu` returns them.

    Indexing and iteration give the :class:`~torch_geometric.data.Data`
    graphs (``x`` :math:`(|V|, F)` float, ``edge_index`` :math:`(2, |E|)`,
    ``y`` :math:`(1,)` long, and ``edge_attr`` when edge labels were asked
    for).

    Args:
        name (str): the dataset's name.
        graphs (tuple of Data): the graphs, in file order.
        y (torch.Tensor): every graph's class :math:`(G,)`, in
            :math:`0..C-1`.
        num_classes (int): :math:`C`, the number of distinct graph labels.
        num_node_attributes (int): continuous attribute columns at the start
            of ``x`` (0 unless ``use_node_attr=True`` and the file exists).
        num_node_labels (int): one-hot node-label columns after them.
        num_edge_labels (int): one-hot edge-label columns of ``edge_attr``
            (0 unless ``use_edge_labels=True`` and the file exists).
        folder (Path): the folder the files were read from.
    """
    name: str
    graphs: tuple[Data, ...]
    y: Tensor
    num_classes: int
    num_node_attributes: int
    num_node_labels: int
    num_edge_labels: int
    folder: Path

    @property
    def num_node_features(self) -> int:
        r"""Width :math:`F` of every graph's ``x``."""
        return self.num_node_attributes + self.num_node_labels

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, index: int) -> Data:
        return self.graphs[index]

    def __iter__(self) -> Iterator[Data]:
        return iter(self.graphs)

    def __repr__(self) -> str:
        return f"{self.name}({len(self.graphs)})"


# --------------------------------------------------------------------------- finding files
def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a TU dataset name (letters, digits, '_', '-', '.', "
                         f"'(' and ')' only)")


def _folders(name: str, root: Path) -> list[Path]:
    return [root, root / name, root / name / "raw"]


def _find_folder(name: str, root: Path) -> tuple[Path | None, str]:
    r"""The first of ``root``, ``root/NAME``, ``root/NAME/raw`` holding the
    required files; otherwise :obj:`None` and what the most complete one lacks."""
    best: tuple[int, str] = (-1, "")
    for folder in _folders(name, root):
        found = [part for part in _REQUIRED if (folder / f"{name}_{part}.txt").is_file()]
        if len(found) == len(_REQUIRED):
            return folder, ""
        if folder.is_dir() and found and len(found) > best[0]:
            lacking = ", ".join(f"{name}_{p}.txt" for p in _REQUIRED if p not in found)
            best = (len(found), f"{folder} lacks {lacking}")
    return None, best[1]


def _missing_message(name: str, root: Path, detail: str) -> str:
    where = ", ".join(str(f) for f in _folders(name, root))
    files = ", ".join(f"{name}_{p}.txt" for p in _REQUIRED)
    detail = f" ({detail})" if detail else ""
    if name not in known_tu_names():
        close = difflib.get_close_matches(name, known_tu_names(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return (f"unknown TU dataset {name!r}: no {files} in {where}{detail}; {hint}known "
                f"names: {', '.join(known_tu_names())}; any other name of the TU collection "
                f"works with its files in root or with download=True")
    return (f"no TU dataset {name} in {where}{detail}: it needs {files}; pass "
            f"download=True to fetch {TU_URL}/{name}.zip into {root / name / 'raw'}, or "
            f"unzip that archive into {root}")


def check_tu_names(names: Sequence[str], root: str | Path | None, *,
                   download: bool = False) -> None:
    r"""Checks that every dataset of ``names`` can be read, before any is
    read (a command line can then stop before loading anything).

    A name passes if its files are under ``root`` (as :func:`read_tu` looks
    for them), or if ``download=True`` and it is a valid name.

    Raises:
        ValueError: one line, for a name that is not known
            (:func:`known_tu_names`) and has no files under ``root``, with the
            closest known name.
        FileNotFoundError: one line, for a known name whose files are missing
            (saying how to get them).
    """
    for name in names:
        _check_name(name)
        if download or (root is not None and _find_folder(name, Path(root))[0] is not None):
            continue
        if name not in known_tu_names():
            close = difflib.get_close_matches(name, known_tu_names(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            where = f"no {name}_A.txt under {root}" if root is not None else "no root given"
            raise ValueError(f"unknown dataset {name!r}{hint}: {where}; known names: "
                             f"{', '.join(known_tu_names())}")
        if root is None:
            raise FileNotFoundError(f"reading {name} needs root=DIR, the folder holding its "
                                    f"files (or receiving them with download=True)")
        root_path = Path(root)
        raise FileNotFoundError(_missing_message(name, root_path,
                                                 _find_folder(name, root_path)[1]))


# --------------------------------------------------------------------------- parsing
def _read_rows(path: Path, *, integer: bool, columns: int | None = None) -> np.ndarray:
    r"""Rows of comma-separated numbers :math:`(L, k)`: every line must have
    ``columns`` fields (or as many as the first line). Trailing blank lines
    are ignored. Errors name the file and the (1-based) line."""
    data = path.read_bytes()
    lines = data.rstrip().count(b"\n") + 1 if data.strip() else 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            values = np.loadtxt(io.BytesIO(data), delimiter=",", comments=None, ndmin=2,
                                dtype=np.int64 if integer else np.float64)
        # loadtxt skips blank lines; one inside the file must not pass unnoticed.
        if values.shape[0] == lines > 0 and values.shape[1] == (columns or values.shape[1]):
            return values
    except (ValueError, OverflowError):
        pass
    return _check_rows(path, data, integer, columns)


def _check_rows(path: Path, data: bytes, integer: bool, columns: int | None) -> np.ndarray:
    r"""The slow reading of :func:`_read_rows` (only for files it refused):
    line by line, to report the first problem with its line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not a text file ({err}); replace it with the "
                         f"published one") from err
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ValueError(f"{path} is empty; replace it with the published one")
    widths = np.fromiter((line.count(",") + 1 for line in lines), dtype=np.int64,
                         count=len(lines))
    expected = int(widths[0]) if columns is None else columns
    bad = np.flatnonzero(widths != expected)
    if bad.size:
        i = int(bad[0])
        found = int(widths[i])
        reason = "as on line 1" if columns is None else "in this file's format"
        raise ValueError(f"{path}, line {i + 1}: {found} column{'s' * (found != 1)}, expected "
                         f"{expected} ({reason})")
    tokens = np.array(",".join(lines).split(","))
    return _parse_slowly(path, tokens, expected, integer).reshape(len(lines), expected)


def _parse_slowly(path: Path, tokens: np.ndarray, width: int, integer: bool) -> np.ndarray:
    r"""Token by token, to report the first one that is not a number (an
    integer of 64 bits for ``integer``: PyG parses these files with ``int``)
    with its line."""
    out = np.empty(tokens.size, dtype=np.int64 if integer else np.float64)
    for k, token in enumerate(tokens.tolist()):
        try:
            value = int(token) if integer else float(token)
            if integer and not -(2**63) <= value < 2**63:
                raise ValueError
        except ValueError:
            what = "a 64-bit integer" if integer else "a number"
            shown = repr(token.strip()) if token.strip() else "an empty field"
            raise ValueError(f"{path}, line {k // width + 1}: {shown} is not {what}") from None
        out[k] = value
    return out


def _check_count(path: Path, rows: int, expected: int, what: str) -> None:
    r"""One line per node (edge): ``what`` says where the count comes from."""
    if rows != expected:
        line = min(rows, expected) + 1
        problem = "is missing" if rows < expected else "is the first one too many"
        raise ValueError(f"{path} has {rows} lines but {what}: line {line} {problem}")


def _one_hot(labels: np.ndarray) -> np.ndarray:
    r"""PyG's encoding of integer label columns :math:`(L, k)`: each column
    shifted to start at 0 and one-hot with (max + 1) columns, concatenated."""
    blocks = []
    for column in labels.T:
        shifted = column - column.min()
        block = np.zeros((column.size, int(shifted.max()) + 1), dtype=np.float32)
        block[np.arange(column.size), shifted] = 1.0
        blocks.append(block)
    return np.concatenate(blocks, axis=1)


def _read_folder(name: str, folder: Path, use_node_attr: bool,
                 use_edge_labels: bool) -> TUGraphs:
    def path(part: str) -> Path:
        return folder / f"{name}_{part}.txt"

    label_rows = _read_rows(path("graph_labels"), integer=True)
    if label_rows.shape[1] != 1:
        raise ValueError(f"{path('graph_labels')}, line 1: {label_rows.shape[1]} columns, "
                         f"expected 1 (one class label per graph)")
    num_graphs = label_rows.shape[0]
    indicator = _read_rows(path("graph_indicator"), integer=True, columns=1)[:, 0]
    num_nodes = indicator.size
    out_of_range = np.flatnonzero((indicator < 1) | (indicator > num_graphs))
    if out_of_range.size:
        i = int(out_of_range[0])
        raise ValueError(f"{path('graph_indicator')}, line {i + 1}: graph {int(indicator[i])} "
                         f"out of range 1..{num_graphs} ({path('graph_labels').name} labels "
                         f"{num_graphs} graphs)")
    going_back = np.flatnonzero(np.diff(indicator) < 0)
    if going_back.size:
        i = int(going_back[0]) + 1
        raise ValueError(f"{path('graph_indicator')}, line {i + 1}: graph {int(indicator[i])} "
                         f"after graph {int(indicator[i - 1])}; nodes must be listed graph by "
                         f"graph")
    if int(indicator[-1]) != num_graphs:
        _check_count(path("graph_labels"), num_graphs, int(indicator[-1]),
                     f"{path('graph_indicator').name} has nodes for {int(indicator[-1])} graphs")
    batch = indicator - 1

    edges = _read_rows(path("A"), integer=True, columns=2) - 1
    bad = np.flatnonzero(((edges < 0) | (edges >= num_nodes)).any(axis=1))
    if bad.size:
        i = int(bad[0])
        node = int(edges[i][(edges[i] < 0) | (edges[i] >= num_nodes)][0]) + 1
        raise ValueError(f"{path('A')}, line {i + 1}: node {node} out of range 1..{num_nodes} "
                         f"({path('graph_indicator').name} lists {num_nodes} nodes)")
    crossing = np.flatnonzero(batch[edges[:, 0]] != batch[edges[:, 1]])
    if crossing.size:
        i = int(crossing[0])
        raise ValueError(f"{path('A')}, line {i + 1}: edge {edges[i, 0] + 1}, {edges[i, 1] + 1} "
                         f"joins graph {batch[edges[i, 0]] + 1} and graph "
                         f"{batch[edges[i, 1]] + 1}")

    blocks: list[np.ndarray] = []
    num_attributes = num_labels = 0
    if use_node_attr and path("node_attributes").is_file():
        attributes = _read_rows(path("node_attributes"), integer=False)
        _check_count(path("node_attributes"), attributes.shape[0], num_nodes,
                     f"{path('graph_indicator').name} lists {num_nodes} nodes")
        blocks.append(attributes.astype(np.float32))
        num_attributes = attributes.shape[1]
    if path("node_labels").is_file():
        node_labels = _read_rows(path("node_labels"), integer=True)
        _check_count(path("node_labels"), node_labels.shape[0], num_nodes,
                     f"{path('graph_indicator').name} lists {num_nodes} nodes")
        blocks.append(_one_hot(node_labels))
        num_labels = blocks[-1].shape[1]
    x = (np.concatenate(blocks, axis=1) if blocks
         else np.zeros((num_nodes, 0), dtype=np.float32))

    edge_attr = None
    num_edge_labels = 0
    if use_edge_labels and path("edge_labels").is_file():
        edge_labels = _read_rows(path("edge_labels"), integer=True)
        _check_count(path("edge_labels"), edge_labels.shape[0], edges.shape[0],
                     f"{path('A').name} lists {edges.shape[0]} edges")
        edge_attr = _one_hot(edge_labels)
        num_edge_labels = edge_attr.shape[1]

    # As PyG: drop self-loops, merge duplicates (their labels summed), sort by (row, col).
    keep = edges[:, 0] != edges[:, 1]
    key = edges[keep, 0] * num_nodes + edges[keep, 1]
    unique, inverse = np.unique(key, return_inverse=True)
    row, col = unique // num_nodes, unique % num_nodes
    if edge_attr is not None:
        merged = np.zeros((unique.size, edge_attr.shape[1]), dtype=np.float32)
        np.add.at(merged, inverse, edge_attr[keep])
        edge_attr = merged

    _, y = np.unique(label_rows[:, 0], return_inverse=True)
    node_counts = np.bincount(batch, minlength=num_graphs)
    start = np.concatenate([[0], np.cumsum(node_counts)[:-1]])
    edge_counts = np.bincount(batch[row], minlength=num_graphs)
    local = np.stack([row, col]) - start[batch[row]]

    xs = torch.from_numpy(x).split(node_counts.tolist())
    eis = torch.from_numpy(local).split(edge_counts.tolist(), dim=1)
    eas = (torch.from_numpy(edge_attr).split(edge_counts.tolist())
           if edge_attr is not None else None)
    ys = torch.from_numpy(y.astype(np.int64))
    graphs = []
    for g in range(num_graphs):
        data = Data(x=xs[g], edge_index=eis[g], y=ys[g:g + 1])
        if eas is not None:
            data.edge_attr = eas[g]
        graphs.append(data)
    log.info("read %s from %s: %d graphs, %d nodes, %d edges", name, folder, num_graphs,
             num_nodes, int(unique.size))
    return TUGraphs(name=name, graphs=tuple(graphs), y=ys, num_classes=int(y.max()) + 1,
                    num_node_attributes=num_attributes, num_node_labels=num_labels,
                    num_edge_labels=num_edge_labels, folder=folder)


# --------------------------------------------------------------------------- download
def _urlopen(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=120) as response, open(dest, "wb") as f:
        shutil.copyfileobj(response, f)


def _members(name: str, archive: bytes, url: str) -> dict[str, bytes]:
    r"""The dataset's files of the archive by base name (``NAME_*.txt`` and
    ``README.txt``, at its top level or in its ``NAME/`` folder); anything
    else is skipped, never written."""
    try:
        with zipfile.ZipFile(io.BytesIO(archive)) as zf:
            out = {}
            for info in zf.infolist():
                if info.is_dir():
                    continue
                parts = info.filename.split("/")
                base = parts[-1]
                ours = base == "README.txt" or (base.startswith(f"{name}_")
                                                and base.endswith(".txt"))
                if len(parts) > 2 or (len(parts) == 2 and parts[0] != name) or not (
                        ours and _NAME.fullmatch(base)):
                    log.warning("skipping %s of %s: not a file of %s", info.filename, url, name)
                    continue
                out[base] = zf.read(info)
            return out
    except zipfile.BadZipFile as err:
        raise ValueError(f"{url} is not a zip archive ({err})") from err


def download_tu(name: str, root: str | Path, *, fetch: Fetch | None = None,
                checksums: Mapping[str, str] | None = None) -> Path:
    r"""Downloads ``<TU_URL>/<NAME>.zip`` (the archive PyG's
    :class:`~torch_geometric.datasets.TUDataset` fetches) and keeps its files
    in ``<root>/<NAME>/raw/``, PyG's layout.

    Which files are kept:

    - with checksums (``checksums``, else :data:`TU_SHA256` for MUTAG,
      PROTEINS, ENZYMES and AIDS): every listed file must be in the archive
      with that sha256, or nothing is written; files of the archive that are
      not listed are skipped (logged);
    - without (any other name): there is nothing to compare with, so the
      files are kept only if :func:`read_tu` reads them without error (every
      count, range and column checked), and a warning logs the sha256 of
      each, to pin them with ``checksums=`` on the next machine.

    Files are checked in memory and written under a temporary name, then
    moved into place, so a failed download leaves nothing behind.

    Args:
        name (str): the dataset's name in the collection.
        root (str or Path): the folder receiving ``<NAME>/raw/``.
        fetch (callable, optional): ``fetch(url, dest)`` writing the bytes of
            ``url`` to the file ``dest``. (default: :mod:`urllib.request`)
        checksums (dict, optional): sha256 per file name, overriding
            :data:`TU_SHA256`. (default: :obj:`None`)

    Returns:
        The folder holding the files.

    Raises:
        ValueError: if the archive cannot be fetched, is not a zip, or fails
            its checks (one line saying which file and why).
    """
    _check_name(name)
    url = f"{TU_URL}/{name}.zip"
    raw = Path(root) / name / "raw"
    raw.parent.mkdir(parents=True, exist_ok=True)
    tmp = raw.parent / ".download"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        part = tmp / f"{name}.zip"
        try:
            (fetch or _urlopen)(url, part)
        except (OSError, HTTPException) as err:
            raise ValueError(f"could not download {url} ({err}); check the connection or "
                             f"unzip the archive into {raw} by hand") from err
        files = _members(name, part.read_bytes(), url)
        part.unlink()
        expected = dict(checksums) if checksums is not None else TU_SHA256.get(name)
        if expected:
            for file, sha in expected.items():
                if file not in files:
                    raise ValueError(f"{url} lacks {file}, whose sha256 is known: not the "
                                     f"published archive; nothing was kept")
                got = hashlib.sha256(files[file]).hexdigest()
                if got != sha:
                    raise ValueError(f"sha256 {got} of {file} in {url} is not the expected "
                                     f"{sha}; nothing was kept")
            for file in sorted(set(files) - set(expected)):
                log.warning("skipping %s of %s: no checksum to verify it", file, url)
                del files[file]
        for file, content in files.items():
            (tmp / file).write_bytes(content)
        if not expected:
            # No checksum: keep only what reads cleanly, and show what was kept.
            _read_folder(name, tmp, use_node_attr=True, use_edge_labels=True)
            log.warning("%s has no known checksums; kept after reading it cleanly: %s", url,
                        ", ".join(f"{f} sha256={hashlib.sha256(c).hexdigest()}"
                                  for f, c in sorted(files.items())))
        raw.mkdir(exist_ok=True)
        for file in files:
            (tmp / file).replace(raw / file)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("downloaded %s into %s", url, raw)
    return raw


# --------------------------------------------------------------------------- reader
def read_tu(name: str, root: str | Path, *, download: bool = False,
            use_node_attr: bool = False, use_edge_labels: bool = False,
            fetch: Fetch | None = None) -> TUGraphs:
    r"""Reads a dataset of the TUDataset collection from its text files
    (Morris et al., 2020), as PyG's
    :class:`~torch_geometric.datasets.TUDataset` with the same flags does.

    Every graph gets node features

    .. math::
        \mathbf{x}_v = \big[\, \mathbf{a}_v \,\|\, \mathrm{onehot}(\ell_v) \,\big],

    the continuous attributes :math:`\mathbf{a}_v` only with
    ``use_node_attr=True`` (as PyG's flag), the one-hot node labels
    :math:`\ell_v` whenever the file exists; a dataset with neither has
    ``x`` of width 0. Edge labels become a one-hot ``edge_attr`` only with
    ``use_edge_labels=True`` (PyG always adds them). GCFL (Xie et al., 2021)
    reads its datasets with PyG's defaults, i.e. ``use_node_attr=False``.

    Files are looked for in ``root`` itself, then in ``<root>/<NAME>``, then
    in PyG's ``<root>/<NAME>/raw``.

    Args:
        name (str): the dataset's name, e.g. ``"MUTAG"``.
        root (str or Path): the folder holding the files (or receiving them).
        download (bool, optional): when no folder holds them, fetch them with
            :func:`download_tu` (checksums for MUTAG, PROTEINS, ENZYMES and
            AIDS; see there for other names). (default: :obj:`False`)
        use_node_attr (bool, optional): put the continuous node attributes,
            when present, before the one-hot labels. (default: :obj:`False`)
        use_edge_labels (bool, optional): one-hot edge labels as
            ``edge_attr``, when present. (default: :obj:`False`)
        fetch (callable, optional): ``fetch(url, dest)`` downloader for
            ``download=True``. (default: :mod:`urllib.request`)

    Raises:
        FileNotFoundError: if no folder holds the files (one line saying
            which files, where, and how to get them).
        ValueError: naming the file and line, for a malformed file (wrong
            column count, not a number, a graph or node id out of range, an
            edge joining two graphs, a row count that does not match).
    """
    _check_name(name)
    root = Path(root)
    folder, detail = _find_folder(name, root)
    if folder is None and download:
        folder = download_tu(name, root, fetch=fetch)
    if folder is None:
        raise FileNotFoundError(_missing_message(name, root, detail))
    return _read_folder(name, folder, use_node_attr, use_edge_labels)
