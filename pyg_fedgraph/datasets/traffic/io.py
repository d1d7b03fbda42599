r"""Files of the traffic datasets: checksums and downloads, DCRNN's sensor-graph
pickle (read with an allow-list unpickler), the speed file (read with h5py,
never unpickled) and the conversion of a dense adjacency to ``edge_index``.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.resources
import io
import logging
import re
import shutil
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import torch
from torch import Tensor
from torch_geometric.utils import dense_to_sparse, remove_self_loops

from pyg_fedgraph.typing import WITH_H5PY, WITH_PANDAS, require
from pyg_fedgraph.utils.errors import one_line
from pyg_fedgraph.utils.safe_pickle import load_array_pickle

if TYPE_CHECKING:  # pandas is optional: only DataFrame conversions need it
    import pandas

__all__ = [
    "read_speed_csv",
    "RemoteFile",
    "verify_sha256",
    "download_file",
    "load_sensor_graph",
    "adjacency_to_edges",
    "SensorGraph",
    "bundled_sensor_graph",
    "restrict_adjacency",
    "SpeedTable",
    "read_speed_h5",
]

log = logging.getLogger(__name__)

PathLike = str | Path
Fetch = Callable[[str, Path], None]


@dataclass(frozen=True)
class RemoteFile:
    r"""A published file: its name in ``root``, a direct URL, its sha256 and
    its size in bytes (:obj:`None` when not known to this package)."""
    name: str
    url: str | None
    sha256: str | None
    size: int | None = None


def verify_sha256(path: PathLike, expected: str) -> str:
    r"""Checks that the file ``path`` has sha256 ``expected`` (hex, any
    case); returns the digest. Raises :class:`ValueError` on a mismatch."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if digest != expected.strip().lower():
        raise ValueError(f"sha256 of {path} is {digest}, expected {expected}: the file is "
                         f"corrupted or was tampered with; delete it and download it again")
    return digest


def _fetch_url(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=60) as response, open(dest, "wb") as f:
        shutil.copyfileobj(response, f)


def download_file(url: str, path: PathLike, sha256: str, fetch: Fetch | None = None
                  ) -> Path:
    r"""Downloads ``url`` to ``path`` and verifies its sha256 before the
    file takes its final name (a failed check leaves nothing behind).

    Args:
        url (str): where to get the file.
        path (str or Path): destination.
        sha256 (str): expected hex digest.
        fetch (callable, optional): ``fetch(url, dest)`` writing the bytes of
            ``url`` to the file ``dest`` (default: :mod:`urllib.request`).
    """
    if not sha256:
        raise ValueError(f"refusing to download {url} without a sha256 to verify it against")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    try:
        (fetch or _fetch_url)(url, part)
        verify_sha256(part, sha256)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    part.replace(path)
    log.info("downloaded %s to %s (sha256 verified)", url, path)
    return path


# ----------------------------------------------------------------- graph pickle


def load_sensor_graph(path: PathLike) -> tuple[list[str], np.ndarray]:
    r"""Reads a DCRNN sensor-graph pickle ``[sensor_ids, sensor_id_to_index,
    adj_mx]`` with a restricted unpickler and checks its structure.

    Args:
        path (str or Path): ``adj_mx.pkl``, ``adj_mx_bay.pkl`` or a file of
            the same format.

    Returns:
        The sensor ids (strings, in matrix order) and ``adj_mx``
        :math:`(N, N)` as float32.

    Raises:
        ValueError: if the pickle needs any other Python object (e.g. one
            that would call ``os.system``) or its content is malformed.
    """
    path = Path(path)
    obj = load_array_pickle(path, "a DCRNN sensor-graph pickle",
                            "DCRNN's adj_mx.pkl, a pickle of [sensor_ids, sensor_id_to_index, "
                            "adj_mx]")
    if not isinstance(obj, (list, tuple)) or len(obj) != 3:
        raise ValueError(f"{path}: expected a list [sensor_ids, sensor_id_to_index, adj_mx], "
                         f"got {type(obj).__name__}")
    ids, index, adj = obj
    if not isinstance(ids, list) or not all(isinstance(s, (str, int)) for s in ids):
        raise ValueError(f"{path}: sensor_ids must be a list of strings")
    ids = [str(s) for s in ids]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: sensor_ids contains duplicates")
    if not isinstance(index, dict) or {str(k): v for k, v in index.items()} != {
            s: i for i, s in enumerate(ids)}:
        raise ValueError(f"{path}: sensor_id_to_index does not map sensor_ids[i] to i")
    if not isinstance(adj, np.ndarray) or adj.dtype.kind != "f" or adj.shape != (len(ids),
                                                                                  len(ids)):
        raise ValueError(f"{path}: adj_mx must be a float array of shape ({len(ids)}, "
                         f"{len(ids)}), got {getattr(adj, 'dtype', type(adj))} "
                         f"{getattr(adj, 'shape', '')}")
    return ids, adj.astype(np.float32)


def adjacency_to_edges(adj: np.ndarray | Tensor, self_loops: bool = False
                       ) -> tuple[Tensor, Tensor]:
    r"""Directed ``edge_index`` :math:`(2, E)` and ``edge_weight`` :math:`(E,)`
    of the nonzero entries of a dense adjacency.

    DCRNN's ``gen_adj_mx.py`` fills ``adj_mx[i, j]`` from the road distance
    *from* sensor :math:`i` *to* sensor :math:`j` (checked here: rebuilding
    the PEMS-BAY kernel from ``distances_bay_2017.csv`` with rows as origins
    reproduces ``adj_mx_bay.pkl`` to :math:`10^{-7}`, with rows as
    destinations it does not). So the edge :math:`(i, j)` with weight
    ``adj[i, j]`` points from the upstream sensor to the downstream one, in
    the direction of traffic, which is also PyG's source-to-target order.

    Args:
        adj (numpy.ndarray or torch.Tensor): :math:`(N, N)`.
        self_loops (bool, optional): keep the diagonal (DCRNN's kernel puts
            1 there) (default: :obj:`False`)
    """
    a = torch.as_tensor(np.asarray(adj), dtype=torch.float32)
    if a.dim() != 2 or a.size(0) != a.size(1):
        raise ValueError(f"adjacency must be square (N, N), got {tuple(a.shape)}")
    edge_index, edge_weight = dense_to_sparse(a)
    if not self_loops:
        edge_index, edge_weight = remove_self_loops(edge_index, edge_weight)
    return edge_index.contiguous(), edge_weight


def restrict_adjacency(graph_ids: Sequence[str], adj: np.ndarray, sensor_ids: Sequence[str],
                       graph: str = "road graph") -> np.ndarray:
    r"""The rows and columns of ``adj`` (ordered as ``graph_ids``) for
    ``sensor_ids``, in that order: the road graph of a subset of its sensors.

    Args:
        graph_ids (list of str): the graph's sensor ids, in matrix order.
        adj (numpy.ndarray): its adjacency :math:`(N, N)`.
        sensor_ids (list of str): the sensors to keep, distinct.
        graph (str, optional): the graph's name in messages.

    Raises:
        ValueError: naming the ids that the graph lacks.
    """
    position = {str(s): i for i, s in enumerate(graph_ids)}
    ids = [str(s) for s in sensor_ids]
    missing = [s for s in ids if s not in position]
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10
                                           else "")
        raise ValueError(f"{len(missing)} of the {len(ids)} sensors are not in the {graph}: "
                         f"{shown}; check that the speed files belong to this dataset")
    if len(set(ids)) != len(ids):
        raise ValueError("the sensor ids to keep contain duplicates")
    index = np.array([position[s] for s in ids], dtype=np.int64)
    return np.asarray(adj)[np.ix_(index, index)]


# ------------------------------------------------------------- bundled graphs

#: Road graphs shipped in ``data/`` (see ``data/NOTICE``): file and sha256,
#: written by ``scripts/bundle_sensor_graphs.py``.
BUNDLED_GRAPHS: dict[str, tuple[str, str]] = {
    "metr-la": ("metr-la.npz",
                "ff31b61da6785ba9f5eb50b9bc99ef61cb894c3aa1932f45fbe0fe7302096e26"),
    "pems-bay": ("pems-bay.npz",
                 "2a57373051374470fc175072e1bc66d0b78da442803e21541619b173dace1bf1"),
}


@dataclass(frozen=True, eq=False)
class SensorGraph:
    r"""A road sensor graph as published with DCRNN (Li et al., ICLR 2018),
    loaded by :func:`bundled_sensor_graph`.

    ``edge_index`` and ``edge_weight`` hold every nonzero entry of DCRNN's
    ``adj_mx`` (a thresholded Gaussian kernel of the road distance from
    sensor :math:`i` to sensor :math:`j`), the diagonal included,

    .. math::
        A_{ij} = \exp\!\big(-(d_{ij} / \sigma)^2\big) \text{ if it is at least } 0.1,

    so that :meth:`to_dense` gives ``adj_mx`` back exactly.

    Args:
        name (str): ``"metr-la"`` or ``"pems-bay"``.
        sensor_ids (list of str): sensor ids in matrix order.
        location (torch.Tensor): latitude and longitude in degrees.
        edge_index (torch.Tensor): directed edges, source to target.
        edge_weight (torch.Tensor): float32 kernel weights.

    Shapes:
        - **location:** :math:`(N, 2)`.
        - **edge_index:** :math:`(2, E)`, self-loops included.
        - **edge_weight:** :math:`(E,)`.
    """
    name: str
    sensor_ids: list[str]
    location: Tensor
    edge_index: Tensor
    edge_weight: Tensor

    @property
    def num_nodes(self) -> int:
        return len(self.sensor_ids)

    def to_dense(self) -> np.ndarray:
        r"""DCRNN's ``adj_mx``: float32 :math:`(N, N)`, ``adj[i, j]`` the
        weight of the road :math:`i \to j`."""
        adj = np.zeros((self.num_nodes, self.num_nodes), dtype=np.float32)
        src, dst = self.edge_index.numpy()
        adj[src, dst] = self.edge_weight.numpy()
        return adj

    def subgraph(self, sensor_ids: Sequence[str]) -> SensorGraph:
        r"""The graph of the sensors ``sensor_ids``, in that order: the rows
        and columns of :meth:`to_dense` for them (see
        :func:`restrict_adjacency`), with their locations.

        Raises:
            ValueError: naming the ids that the graph lacks.
        """
        ids = [str(s) for s in sensor_ids]
        adj = restrict_adjacency(self.sensor_ids, self.to_dense(), ids,
                                 f"{self.name} road graph")
        position = {s: i for i, s in enumerate(self.sensor_ids)}
        index = torch.tensor([position[s] for s in ids], dtype=torch.long)
        edge_index, edge_weight = adjacency_to_edges(adj, self_loops=True)
        return SensorGraph(name=self.name, sensor_ids=ids, location=self.location[index],
                           edge_index=edge_index, edge_weight=edge_weight)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.name}, num_nodes={self.num_nodes}, "
                f"num_edges={self.edge_index.size(1)})")


def bundled_sensor_graph(name: str) -> SensorGraph:
    r"""The road graph of METR-LA (207 sensors) or PEMS-BAY (325) shipped
    with pyg_fedgraph, so that no download is needed: sensor ids, locations
    and DCRNN's weighted adjacency as an edge list. The file's sha256 is
    checked before it is parsed, and it is read with
    ``numpy.load(allow_pickle=False)``.

    Args:
        name (str): ``"metr-la"`` or ``"pems-bay"``.
    """
    if name not in BUNDLED_GRAPHS:
        raise ValueError(f"no bundled road graph {name!r}; known: "
                         f"{', '.join(sorted(BUNDLED_GRAPHS))}")
    file, expected = BUNDLED_GRAPHS[name]
    resource = importlib.resources.files(__package__).joinpath("data", file)
    where = f"{file} bundled with pyg_fedgraph"
    try:
        data = resource.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read the {where} ({one_line(err)}): the installation is "
                         f"incomplete; reinstall pyg-fedgraph") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise ValueError(f"the {where} has sha256 {digest}, expected {expected}: the "
                         f"installation is corrupted; reinstall pyg-fedgraph")
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    ids = [str(s) for s in arrays["sensor_ids"]]
    return SensorGraph(
        name=name, sensor_ids=ids,
        location=torch.from_numpy(arrays["location"]),
        edge_index=torch.from_numpy(np.stack([arrays["source"], arrays["target"]])).long(),
        edge_weight=torch.from_numpy(arrays["weight"]))


# ------------------------------------------------------------------ speed files


@dataclass(frozen=True, eq=False)
class SpeedTable:
    r"""Speeds of :math:`N` road sensors at :math:`T` time steps, the content
    of a DCRNN speed file (:func:`read_speed_h5`) or of
    :func:`synthetic_traffic`, held in plain numpy arrays.

    Args:
        timestamps (numpy.ndarray): :math:`(T,)` time stamps, converted to
            ``datetime64[ns]``.
        speed (numpy.ndarray): :math:`(T, N)` speeds in mph, ``0`` for a
            missing reading, converted to float32.
        sensor_ids (list of str): one id per column, distinct.
        info (dict, optional): free-form facts; ``info["synthetic"]`` marks
            synthetic speeds (default: :obj:`{}`).

    Shapes:
        - **timestamps:** :math:`(T,)`.
        - **speed:** :math:`(T, N)`.
    """
    timestamps: np.ndarray
    speed: np.ndarray
    sensor_ids: list[str]
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        speed = np.asarray(self.speed)
        if speed.dtype.kind not in "fiu":
            raise ValueError(f"speeds must be numeric, got dtype {speed.dtype}")
        if speed.ndim != 2:
            raise ValueError(f"speed must be a (T, N) series, got shape {speed.shape}")
        ts = np.asarray(self.timestamps)
        if ts.dtype.kind != "M":
            raise ValueError(f"timestamps must be datetime64, got dtype {ts.dtype}")
        if ts.shape != speed.shape[:1]:
            raise ValueError(f"{ts.size} timestamps for {speed.shape[0]} time steps")
        ids = [str(s) for s in self.sensor_ids]
        if len(ids) != speed.shape[1]:
            raise ValueError(f"{len(ids)} sensor ids for {speed.shape[1]} speed columns")
        if len(set(ids)) != len(ids):
            raise ValueError("the speed table has duplicate sensor columns")
        object.__setattr__(self, "timestamps", ts.astype("datetime64[ns]"))
        # Read-only arrays (pandas' copy-on-write views) are copied: torch warns on them.
        object.__setattr__(self, "speed",
                           speed.astype(np.float32, copy=not speed.flags.writeable))
        object.__setattr__(self, "sensor_ids", ids)
        object.__setattr__(self, "info", dict(self.info))

    def select(self, sensor_ids: Sequence[str]) -> SpeedTable:
        r"""The columns of ``sensor_ids``, in that order (e.g. the order of
        the road graph); raises :class:`ValueError` if one is missing."""
        ids = [str(s) for s in sensor_ids]
        position = {c: k for k, c in enumerate(self.sensor_ids)}
        missing = [s for s in ids if s not in position]
        if missing:
            raise ValueError(f"{len(missing)} sensors of the graph have no speed column, e.g. "
                             f"{missing[:5]}; the speed file and the graph do not match")
        return SpeedTable(self.timestamps, self.speed[:, [position[s] for s in ids]], ids,
                          self.info)

    @classmethod
    def from_dataframe(cls, df: pandas.DataFrame) -> SpeedTable:
        r"""A table from a DCRNN-format :class:`pandas.DataFrame` (a
        DatetimeIndex, one numeric column per sensor); ``df.attrs`` become
        :attr:`info`."""
        import pandas as pd  # the caller holds a DataFrame, so pandas is there

        if not isinstance(df.index, pd.DatetimeIndex):
            raise ValueError(f"speeds need a DatetimeIndex (5-minute steps), got "
                             f"{type(df.index).__name__}")
        values = df.to_numpy()
        if values.dtype.kind not in "fiu":
            raise ValueError(f"speeds must be numeric, got dtype {values.dtype}")
        return cls(np.asarray(df.index.values, dtype="datetime64[ns]"), values,
                   [str(c) for c in df.columns], dict(df.attrs))

    def to_dataframe(self) -> pandas.DataFrame:
        r"""The table as a :class:`pandas.DataFrame` in DCRNN's format, with
        :attr:`info` in ``df.attrs``. Needs pandas, which pyg_fedgraph does
        not install."""
        if not WITH_PANDAS:
            raise ImportError("SpeedTable.to_dataframe needs pandas: pip install pandas")
        import pandas as pd

        df = pd.DataFrame(self.speed, index=pd.DatetimeIndex(self.timestamps),
                          columns=list(self.sensor_ids))
        df.attrs.update(self.info)
        return df


class _FixedFrameReader:
    r"""Reads the numeric datasets of one DataFrame stored in pandas'
    ``fixed`` HDF5 format, through h5py only.

    pandas writes, in the group ``key``: ``axis0`` (column labels),
    ``axis1`` (the index: int64 time stamps, their unit in the ``kind``
    attribute), and per dtype block ``blockK_items`` (its labels) and
    ``blockK_values``, stored transposed as :math:`(T, n_K)` with the
    attribute ``transposed = 1``. Object columns, object labels and some
    attributes (``freq``, ``tz``, empty shapes) are pickles: they are never
    read, and the only attributes read are the short texts ``pandas_type``,
    ``kind``, ``value_type`` and the integers ``transposed``, ``nblocks``
    (h5py returns attribute values as raw bytes and numbers, it never
    unpickles).
    """

    def __init__(self, h5: Any, path: Path, key: str) -> None:
        import h5py

        self.h5py = h5py
        self.path = path
        self.key = key
        self.expected = (f"expected DCRNN's speed file, a pandas DataFrame saved with "
                         f"DataFrame.to_hdf(path, key={key!r}) in the default fixed format")
        self.group = self._node(h5, key, h5py.Group, "a group")

    def fail(self, what: str) -> NoReturn:
        raise ValueError(f"{self.path}: {what}; {self.expected}")

    def _node(self, parent: Any, name: str, kind: type, noun: str) -> Any:
        where = name if parent.name == "/" else f"{self.key}/{name}"
        link = parent.get(name, getlink=True)
        if link is None:
            self.fail(f"no {where!r} in the file")
        if not isinstance(link, self.h5py.HardLink):
            # Soft and external links (and below, virtual or external
            # storage) would make us read something else than this file.
            self.fail(f"{where!r} is a link ({type(link).__name__}), not data stored here")
        node = parent[name]
        if not isinstance(node, kind):
            self.fail(f"{where!r} is not {noun}")
        if isinstance(node, self.h5py.Dataset) and (node.is_virtual or node.external):
            self.fail(f"{where!r} keeps its data outside the file")
        return node

    def dataset(self, name: str) -> Any:
        ds = self._node(self.group, name, self.h5py.Dataset, "a dataset")
        if "shape" in ds.attrs:  # pandas' sentinel for an empty array (a pickled shape)
            self.fail(f"'{self.key}/{name}' is empty (no time steps or no sensors)")
        return ds

    def text(self, node: Any, name: str) -> str | None:
        if name not in node.attrs:
            return None
        try:
            value = node.attrs[name]
        except (OSError, TypeError, ValueError) as err:
            self.fail(f"cannot read attribute {name!r} of {node.name!r} ({one_line(err)})")
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, str):
            return value
        self.fail(f"attribute {name!r} of {node.name!r} is not text")

    def integer(self, node: Any, name: str) -> int | None:
        if name not in node.attrs:
            return None
        try:
            value = node.attrs[name]
        except (OSError, TypeError, ValueError) as err:
            self.fail(f"cannot read attribute {name!r} of {node.name!r} ({one_line(err)})")
        if isinstance(value, (int, np.integer, np.bool_)):
            return int(value)
        self.fail(f"attribute {name!r} of {node.name!r} is not an integer")

    def describe(self, ds: Any) -> str:
        h5t = self.h5py.h5t
        tid = ds.id.get_type()
        cls = tid.get_class()
        if cls == h5t.VLEN or (cls == h5t.STRING and tid.is_variable_str()):
            return ("variable-length data (pandas stores Python objects there as pickles, "
                    "which are never loaded)")
        names = {h5t.STRING: "strings", h5t.OPAQUE: "opaque bytes", h5t.COMPOUND: "records",
                 h5t.ENUM: "enumerated values", h5t.BITFIELD: "bit fields (booleans)",
                 h5t.REFERENCE: "references", h5t.ARRAY: "nested arrays",
                 h5t.TIME: "time values"}
        return names.get(cls, f"HDF5 type class {cls}")

    def read(self, ds: Any) -> np.ndarray:
        try:
            return ds[()]
        except (OSError, MemoryError, TypeError, ValueError) as err:
            self.fail(f"cannot read {ds.name!r} ({one_line(err)})")

    def numeric(self, ds: Any) -> bool:
        return ds.id.get_type().get_class() in (self.h5py.h5t.INTEGER, self.h5py.h5t.FLOAT)

    def labels(self, name: str) -> list[str]:
        ds = self.dataset(name)
        tid = ds.id.get_type()
        if ds.ndim != 1:
            self.fail(f"'{self.key}/{name}' has shape {ds.shape}, expected one label per column")
        if tid.get_class() == self.h5py.h5t.STRING and not tid.is_variable_str():
            try:
                return [bytes(v).decode("utf-8") for v in self.read(ds)]
            except UnicodeDecodeError:
                self.fail(f"the column labels '{self.key}/{name}' are not UTF-8 text")
        if tid.get_class() == self.h5py.h5t.INTEGER:
            return [str(int(v)) for v in self.read(ds)]
        self.fail(f"the column labels '{self.key}/{name}' are {self.describe(ds)}; expected "
                  f"fixed-width strings or integers")

    def index(self) -> np.ndarray:
        ds = self.dataset("axis1")
        kind = self.text(ds, "kind")
        unit = re.fullmatch(r"datetime64(?:\[(s|ms|us|ns)\])?", kind or "")
        if unit is None:
            self.fail(f"the index is {kind or 'of unknown kind'}, not a DatetimeIndex "
                      f"(time stamps at 5-minute steps)")
        if ds.ndim != 1 or not self.numeric(ds) or ds.dtype.kind not in "iu":
            self.fail(f"the time stamps '{self.key}/axis1' are {ds.dtype} {ds.shape}, "
                      f"expected int64 (T,)")
        # Older pandas wrote the kind "datetime64" without a unit: nanoseconds.
        values = self.read(ds).astype(np.int64)
        return values.view(f"datetime64[{unit.group(1) or 'ns'}]").astype("datetime64[ns]")

    def block(self, k: int, items: list[str]) -> Any:
        r"""The dataset of block ``k``, checked to hold plain numbers."""
        ds = self.dataset(f"block{k}_values")
        columns = f"columns {items[:3]}{' ...' if len(items) > 3 else ''}"
        value_type = self.text(ds, "value_type")
        if value_type is not None:  # pandas marks datetime, timedelta, period ... blocks
            self.fail(f"{columns} hold {value_type} values, not speeds")
        if not self.numeric(ds):
            self.fail(f"{columns} hold {self.describe(ds)}, not numbers")
        return ds

    def values(self, ds: Any, num_items: int, num_steps: int) -> np.ndarray:
        r"""A block's values as :math:`(T, n_K)`."""
        transposed = bool(self.integer(ds, "transposed"))
        shape = (num_steps, num_items) if transposed else (num_items, num_steps)
        if ds.shape != shape:
            self.fail(f"{ds.name!r} has shape {ds.shape}, expected {shape} for {num_steps} "
                      f"time steps and {num_items} columns")
        values = self.read(ds)
        return values if transposed else values.T

    def frame(self) -> SpeedTable:
        pandas_type = self.text(self.group, "pandas_type")
        if pandas_type == "frame_table":
            self.fail(f"{self.key!r} was saved with format='table', which is not read here "
                      f"(save it again with DataFrame.to_hdf(path, key={self.key!r}))")
        if pandas_type not in (None, "frame"):
            self.fail(f"{self.key!r} holds a pandas {pandas_type!r}, not a DataFrame")
        missing = [n for n in ("axis0", "axis1", "block0_items", "block0_values")
                   if n not in self.group]
        if missing:
            self.fail(f"{self.key!r} has no {', '.join(missing)} (unknown layout)")
        columns = self.labels("axis0")
        position = {c: j for j, c in enumerate(columns)}
        if len(position) != len(columns):
            self.fail("duplicate column labels")
        # Every block's labels and type are checked before any value is read.
        blocks: list[tuple[list[int], Any]] = []
        filled = np.zeros(len(columns), dtype=bool)
        while (f"block{len(blocks)}_items" in self.group
               or f"block{len(blocks)}_values" in self.group):
            k = len(blocks)
            items = self.labels(f"block{k}_items")
            unknown = [c for c in items if c not in position]
            if unknown:
                self.fail(f"block {k} has columns {unknown[:3]} that are not in axis0")
            cols = [position[c] for c in items]
            if len(set(cols)) != len(cols) or filled[cols].any():
                self.fail(f"block {k} repeats columns")
            filled[cols] = True
            blocks.append((cols, self.block(k, items)))
        nblocks = self.integer(self.group, "nblocks")
        if nblocks is not None and nblocks != len(blocks):
            self.fail(f"{nblocks} blocks announced, {len(blocks)} found")
        if not filled.all():
            empty = [columns[j] for j in np.flatnonzero(~filled)[:3]]
            self.fail(f"columns {empty} have no values")
        timestamps = self.index()
        speed = np.empty((timestamps.size, len(columns)), dtype=np.float32)
        for cols, ds in blocks:
            speed[:, cols] = self.values(ds, len(cols), timestamps.size)
        return SpeedTable(timestamps, speed, columns)


def read_speed_csv(path: PathLike, start: str, step_minutes: int = 5) -> SpeedTable:
    r"""Reads a speed table saved as CSV without time stamps: a header of
    sensor ids, then one row of speeds (mph) per step of ``step_minutes``
    from ``start`` on. This is T-GCN's ``los_speed.csv`` (lehaifeng/T-GCN,
    all 207 METR-LA sensors over the first week, 2,016 steps from
    2012-03-01, missing readings imputed, so none is ``0``).

    Only numbers are parsed (:func:`numpy.loadtxt`); a file with another
    layout, a non-numeric cell, a ragged row, a sensor named twice or a
    speed that is negative or not finite is refused with a one-line
    :class:`ValueError` naming the file.

    Args:
        path (str or Path): the CSV file.
        start (str): the time of the first row, e.g. ``"2012-03-01"``.
        step_minutes (int, optional): minutes between rows (default: :obj:`5`)

    Returns:
        A :class:`SpeedTable`: time stamps ``start + k * step``
        :math:`(T,)`, speeds float32 :math:`(T, N)` in the file's column
        order, the header's sensor ids.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} not found: expected a CSV of speeds there (a header of "
                         "sensor ids, one row per step), e.g. T-GCN's los_speed.csv")
    not_text = (f"{path} is not a text file (not UTF-8); expected a CSV of speeds (a header "
                "of sensor ids, one row per step)")
    try:
        with path.open(encoding="utf-8-sig") as f:  # a byte-order mark is not part of an id
            header = f.readline().strip()
    except UnicodeDecodeError:
        raise ValueError(not_text) from None
    ids = [c.strip() for c in header.split(",")]
    if not header or not all(ids):
        raise ValueError(f"{path}: the first line must name the sensors (comma-separated "
                         f"ids), got {header[:60]!r}")
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"{path}: the header names sensors more than once: {twice[:5]}")
    try:
        with warnings.catch_warnings():  # an empty table is refused below, in our words
            warnings.simplefilter("ignore", UserWarning)
            speed = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2,
                               encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(not_text) from None
    except ValueError as err:
        raise ValueError(f"{path}: not a table of numbers after the header ({one_line(err)}; "
                         "numpy counts rows from the first after the header, from 0)") from None
    if speed.shape[0] == 0:
        raise ValueError(f"{path}: no rows of speeds after the header")
    if speed.shape[1] != len(ids):
        raise ValueError(f"{path}: {speed.shape[1]} columns of speeds for {len(ids)} sensor "
                         "ids in the header")
    bad = ~np.isfinite(speed) | (speed < 0)
    if bad.any():
        row, col = (int(k) for k in np.argwhere(bad)[0])
        raise ValueError(f"{path}: {int(bad.sum())} speeds are not finite non-negative numbers, "
                         f"the first {speed[row, col]} of sensor {ids[col]} on line {row + 2}")
    step = np.timedelta64(step_minutes, "m")
    timestamps = np.datetime64(start, "ns") + step * np.arange(speed.shape[0])
    return SpeedTable(timestamps, speed, ids, {"source": str(path)})


def read_speed_h5(path: PathLike, key: str = "df") -> SpeedTable:
    r"""Reads a DCRNN speed file (``metr-la.h5``, ``pems-bay.h5``): a pandas
    DataFrame saved with ``DataFrame.to_hdf(path, key="df")`` (pandas'
    default ``fixed`` format), a DatetimeIndex, one numeric column per sensor.

    The file is read with h5py, numeric datasets only, and nothing in it is
    ever unpickled: pandas (through PyTables) unpickles object columns and
    several attributes when it reads such a file, so a crafted file could
    run code there. Object or string columns, object labels,
    ``format="table"`` files and any other layout are refused with a
    :class:`ValueError` naming the file.

    Args:
        path (str or Path): the speed file.
        key (str, optional): the DataFrame's key in the file (default: :obj:`"df"`)

    Returns:
        A :class:`SpeedTable`: time stamps ``datetime64[ns]`` :math:`(T,)`,
        speeds float32 :math:`(T, N)` in the file's column order, sensor ids
        as strings (integer labels are converted).
    """
    require(WITH_H5PY, "h5py", "traffic")
    import h5py

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} not found: expected DCRNN's speed file there (the Google "
                         "Drive / Baidu links of DCRNN's README, github.com/liyaguang/DCRNN)")
    try:
        h5 = h5py.File(path, "r")
    except OSError as err:
        raise ValueError(f"{path} is not an HDF5 file ({one_line(err)}); expected DCRNN's "
                         f"speed file, a pandas DataFrame saved with DataFrame.to_hdf(path, "
                         f"key={key!r})") from None
    with h5:
        return _FixedFrameReader(h5, path, key).frame()
