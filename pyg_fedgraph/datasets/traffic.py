r"""Traffic-speed forecasting on METR-LA and PEMS-BAY, one road sensor per client.

The files are those published with DCRNN (Li et al., "Diffusion Convolutional
Recurrent Neural Network: Data-Driven Traffic Forecasting", ICLR 2018):

* speeds ``metr-la.h5`` / ``pems-bay.h5``: a pandas DataFrame stored with
  ``DataFrame.to_hdf(path, key="df")``, a DatetimeIndex at 5-minute steps, one
  column per sensor id, speeds in mph, ``0`` for a missing reading (read
  into a :class:`SpeedTable`);
* sensor graphs ``adj_mx.pkl`` / ``adj_mx_bay.pkl``: a pickle of
  ``[sensor_ids, sensor_id_to_index, adj_mx]``, ``adj_mx`` a thresholded
  Gaussian kernel of road distances, diagonal 1.

Panacea (Chen et al., Sec. V) treats every sensor as a client and the road
graph as the prior client graph. :class:`TrafficDataset` builds each client's
sliding windows on the fly from the :math:`(T, N)` series, so the heavily
overlapping windows are never copied (see :meth:`TrafficDataset.batch`).
:func:`synthetic_traffic` generates clearly labelled synthetic speeds on a
real road graph for offline runs.

**Security.** No file handed to these loaders can run code. The graph
pickle is read with a restricted unpickler that only builds lists, dicts,
strings, numbers and numpy arrays (:func:`load_sensor_graph`). The speed
file is read with h5py, numeric datasets only (:func:`read_speed_h5`): pandas
and PyTables are never used to read it, because they unpickle object columns
and node attributes, so that a crafted ``.h5`` file would run code when
opened with ``pandas.read_hdf``. Malformed files of either kind raise a
one-line :class:`ValueError` naming the file.
"""
from __future__ import annotations

import hashlib
import importlib
import io
import logging
import pickle
import re
import shutil
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import numpy as np
import torch
from torch import Tensor

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.train.objective import Objective
from pyg_fedgraph.train.traffic_metrics import pack_targets, traffic_objective
from pyg_fedgraph.typing import WITH_H5PY, WITH_PANDAS, require

if TYPE_CHECKING:  # pandas is optional: only DataFrame conversions need it
    import pandas

__all__ = [
    "TrafficDataset",
    "METRLA",
    "PEMSBAY",
    "RemoteFile",
    "synthetic_traffic",
    "load_sensor_graph",
    "adjacency_to_edges",
    "read_speed_h5",
    "SpeedTable",
    "dcrnn_split_sizes",
    "verify_sha256",
    "download_file",
    "metr_la",
    "pems_bay",
]

log = logging.getLogger(__name__)

Normalization = Literal["global", "sensor"]
PathLike = str | Path
Fetch = Callable[[str, Path], None]

# --------------------------------------------------------------------------- files


def _one_line(err: BaseException) -> str:
    # Library errors end up as one line on the CLI; some h5py / pickle messages span several.
    return " ".join(str(err).split()) or type(err).__name__


@dataclass(frozen=True)
class RemoteFile:
    r"""A published file: its name in ``root``, a direct URL and its sha256
    (:obj:`None` when no stable URL / checksum is known to this package)."""
    name: str
    url: str | None
    sha256: str | None


_DCRNN_GRAPHS = ("https://raw.githubusercontent.com/liyaguang/DCRNN/"
                 "602afd9d767d3aa1c9b3eac51710d6aeee12c227/data/sensor_graph/")


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


def _numpy_global(module: str, name: str) -> Callable[[], Any]:
    def resolve() -> Any:
        try:  # numpy >= 2 names its core numpy._core
            return getattr(importlib.import_module(f"numpy._core.{module}"), name)
        except ImportError:  # pragma: no cover - numpy 1.x
            return getattr(importlib.import_module(f"numpy.core.{module}"), name)
    return resolve


def _codecs_encode() -> Callable[..., Any]:
    import codecs
    return codecs.encode


class _RefusedPickle(ValueError):
    r"""The graph pickle asked for something outside the allow-list."""


class _GraphUnpickler(pickle.Unpickler):
    r"""Builds only lists, dicts, strings, numbers and numpy arrays. The only
    globals it resolves are those numpy needs to rebuild an array
    (``_reconstruct``, ``ndarray``, ``dtype``; ``_frombuffer`` for pickle
    protocol 5) and ``_codecs.encode``, with which Python 3 writes ``bytes``
    in protocols 2 and 3."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _numpy_global("multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"): _numpy_global("multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"): _numpy_global("numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"): _numpy_global("numeric", "_frombuffer"),
        ("numpy", "ndarray"): lambda: np.ndarray,
        ("numpy", "dtype"): lambda: np.dtype,
        ("_codecs", "encode"): _codecs_encode,
    }

    def __init__(self, file: io.BufferedIOBase, source: str) -> None:
        super().__init__(file, encoding="latin1")  # DCRNN's pickles come from Python 2
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        make = self._ALLOWED.get((module, name))
        if make is None:
            raise _RefusedPickle(
                f"refusing to unpickle {self.source}: it asks for the Python object "
                f"{module}.{name}, but a sensor-graph pickle may only hold lists, dicts, "
                f"strings and numpy arrays; the file is corrupted or malicious (do not "
                f"open it with plain pickle)")
        return make()

    def persistent_load(self, pid: Any) -> Any:
        raise _RefusedPickle(f"refusing to unpickle {self.source}: persistent ids are not "
                             f"allowed")


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
    if not path.is_file():
        raise ValueError(f"{path} not found: expected a DCRNN sensor-graph pickle there")
    try:
        with open(path, "rb") as f:
            obj = _GraphUnpickler(f, str(path)).load()
    except _RefusedPickle:
        raise
    except Exception as err:  # garbage fails in many ways, all meaning the same
        raise ValueError(f"{path} is not a sensor-graph pickle ({type(err).__name__}: "
                         f"{_one_line(err)}); expected DCRNN's adj_mx.pkl, a pickle of "
                         f"[sensor_ids, sensor_id_to_index, adj_mx]") from None
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
    mask = a != 0
    if not self_loops:
        mask.fill_diagonal_(False)
    edge_index = mask.nonzero().t().contiguous()
    return edge_index, a[edge_index[0], edge_index[1]]


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
            self.fail(f"cannot read attribute {name!r} of {node.name!r} ({_one_line(err)})")
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
            self.fail(f"cannot read attribute {name!r} of {node.name!r} ({_one_line(err)})")
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
            self.fail(f"cannot read {ds.name!r} ({_one_line(err)})")

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
        blocks, filled = [], np.zeros(len(columns), dtype=bool)
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
        raise ValueError(f"{path} not found: expected DCRNN's speed file there")
    try:
        h5 = h5py.File(path, "r")
    except OSError as err:
        raise ValueError(f"{path} is not an HDF5 file ({_one_line(err)}); expected DCRNN's "
                         f"speed file, a pandas DataFrame saved with DataFrame.to_hdf(path, "
                         f"key={key!r})") from None
    with h5:
        return _FixedFrameReader(h5, path, key).frame()


def dcrnn_split_sizes(num_windows: int, fractions: Sequence[float] = (0.7, 0.1, 0.2)
                      ) -> tuple[int, int, int]:
    r"""Chronological split of ``num_windows`` windows as DCRNN's
    ``generate_training_data.py`` does it: ``test = round(0.2 W)``,
    ``train = round(0.7 W)``, ``val`` the rest (Python's ``round``).
    METR-LA: 34,249 windows -> 23,974 / 3,425 / 6,850, Panacea's Table I."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6:
        raise ValueError(f"fractions must be three non-negative shares summing to 1, "
                         f"got {tuple(fractions)}")
    num_test = round(num_windows * fractions[2])
    num_train = round(num_windows * fractions[0])
    return num_train, num_windows - num_train - num_test, num_test


# ------------------------------------------------------------------ dataset


class TrafficDataset(FederatedDataset):
    r"""Traffic-speed forecasting with one client per road sensor (Panacea,
    Chen et al., Sec. V; windows and splits as in DCRNN, Li et al. 2018).

    From a speed series :math:`\mathbf{V} \in \mathbb{R}^{T \times N}` (mph,
    0 = missing) the :math:`W = T - T_{in} - T_{out} + 1` windows
    :math:`k = 0, \ldots, W - 1` of sensor :math:`i` are

    .. math::
        \mathbf{x}_{ik} = \big[(V_{k+t,i} - \mu_i) / \sigma_i,\;
        \tau_{k+t}\big]_{t=0}^{T_{in}-1} \in \mathbb{R}^{T_{in} \times 2},
        \qquad
        \mathbf{y}_{ik} = \big[V_{k+T_{in}+h,i}\big]_{h=0}^{T_{out}-1},

    with :math:`\tau` the time of day in :math:`[0, 1)`. The windows are split
    chronologically 70 / 10 / 20 (:func:`dcrnn_split_sizes`). :math:`\mu,
    \sigma` are z-score statistics of the non-missing readings under the
    training windows' inputs (time steps :math:`0 .. W_{train} + T_{in} - 2`):
    one pair for all sensors (``normalization="global"``, DCRNN's
    ``StandardScaler`` and the CNFGNN / Panacea setup; in a federation the
    sums behind them are the only statistics clients share) or one per sensor
    (``"sensor"``, purely local; a sensor without training readings takes the
    global mean, one whose readings do not vary the global std). DCRNN
    computes them with the zeros included; they are left out here. A missing
    input reading stays :math:`(0 - \mu) / \sigma`, as in DCRNN's data.

    **Storage.** ``splits[s].x`` :math:`(N, W_s, T_{in}, 2)` and
    ``splits[s].y`` :math:`(N, W_s, T_{out})` (raw mph, DCRNN's ``x`` and
    ``y``) are zero-copy strided views of the series: they overlap in
    memory, so never modify them in place. :meth:`batch` gathers the
    requested windows and returns the targets *packed* with their mask
    weights and normalization constants, :math:`(S, B, 4, T_{out})`, the
    layout :func:`~pyg_fedgraph.train.traffic_metrics.traffic_objective`
    reads (:attr:`objective`), so that the masked metrics come out in mph.

    Args:
        name (str): dataset name.
        speed (torch.Tensor or numpy.ndarray): speeds :math:`(T, N)` in mph,
            ``0`` (or NaN) for missing readings.
        timestamps (numpy.ndarray): :math:`(T,)` ``datetime64`` stamps,
            strictly increasing (5-minute steps for the real data).
        sensor_ids (list of str, optional): one id per column (default:
            ``"0" .. "N-1"``).
        edge_index (torch.Tensor, optional): prior client graph :math:`(2, E)`.
        edge_weight (torch.Tensor, optional): its weights :math:`(E,)`.
        input_steps (int, optional): :math:`T_{in}` (default: :obj:`12`)
        output_steps (int, optional): :math:`T_{out}` (default: :obj:`12`)
        fractions (tuple, optional): train / val / test shares of the windows
            (default: :obj:`(0.7, 0.1, 0.2)`)
        normalization (str, optional): ``"global"`` or ``"sensor"``
            (default: :obj:`"global"`)
        horizons (tuple, optional): steps reported by :attr:`objective`
            (those beyond ``output_steps`` are dropped)
            (default: :obj:`(3, 6, 12)`)
        mean (torch.Tensor, optional): fixed :math:`\mu` :math:`(N,)`
            instead of the training statistics (used by :meth:`subset`).
        std (torch.Tensor, optional): fixed :math:`\sigma` :math:`(N,)`.
        info (dict, optional): free-form facts; ``info["synthetic"]`` says
            whether the speeds are synthetic (default: :obj:`False`).

    Shapes:
        - **batch input:** :math:`(S, B, T_{in}, 2)`.
        - **batch target:** :math:`(S, B, 4, T_{out})` (target mph, weight,
          :math:`\mu`, :math:`\sigma`).
    """

    def __init__(self, name: str, speed: Tensor | np.ndarray, timestamps: np.ndarray, *,
                 sensor_ids: Sequence[str] | None = None,
                 edge_index: Tensor | None = None, edge_weight: Tensor | None = None,
                 input_steps: int = 12, output_steps: int = 12,
                 fractions: Sequence[float] = (0.7, 0.1, 0.2),
                 normalization: Normalization = "global",
                 horizons: Sequence[int] = (3, 6, 12),
                 mean: Tensor | None = None, std: Tensor | None = None,
                 info: dict | None = None) -> None:
        if normalization not in ("global", "sensor"):
            raise ValueError(f"normalization must be 'global' or 'sensor', got "
                             f"{normalization!r}")
        if input_steps < 1 or output_steps < 1:
            raise ValueError(f"input_steps and output_steps must be positive, got "
                             f"{input_steps} and {output_steps}")
        v = torch.as_tensor(np.asarray(speed), dtype=torch.float32).clone()
        if v.dim() != 2:
            raise ValueError(f"speed must be a (T, N) series, got shape {tuple(v.shape)}")
        # Row-major storage: the windows below are strided views that assume it
        # (pandas hands out column-major arrays).
        v = torch.nan_to_num(v, nan=0.0).contiguous()
        if bool((v < 0).any()) or not bool(torch.isfinite(v).all()):
            raise ValueError("speeds must be finite and non-negative (0 marks a missing reading)")
        num_steps, n = v.shape
        ts = np.asarray(timestamps).astype("datetime64[ns]")
        if ts.shape != (num_steps,):
            raise ValueError(f"{ts.shape[0] if ts.ndim else 0} timestamps for {num_steps} "
                             f"time steps")
        step = np.diff(ts)
        if step.size and not bool((step > np.timedelta64(0, "ns")).all()):
            raise ValueError("timestamps must be strictly increasing")
        if step.size and not bool((step == step[0]).all()):
            log.warning("%s: time steps are not evenly spaced; windows assume a regular series",
                        name)
        ids = [str(i) for i in range(n)] if sensor_ids is None else [str(s) for s in sensor_ids]
        if len(ids) != n:
            raise ValueError(f"{len(ids)} sensor ids for {n} speed columns")

        num_windows = num_steps - input_steps - output_steps + 1
        sizes = dcrnn_split_sizes(max(num_windows, 0), fractions)
        if min(sizes) < 1:
            raise ValueError(f"{num_steps} time steps give {max(num_windows, 0)} windows of "
                             f"{input_steps} + {output_steps} steps, split {sizes}: every "
                             f"split needs at least one window; use a longer series")
        starts = (0, sizes[0], sizes[0] + sizes[1])
        self.speed = v
        self.timestamps = ts
        self.time_of_day = torch.as_tensor(
            (ts - ts.astype("datetime64[D]")) / np.timedelta64(1, "D"), dtype=torch.float32)
        self.sensor_ids = ids
        self.input_steps = input_steps
        self.output_steps = output_steps
        self.fractions = tuple(float(f) for f in fractions)
        self.normalization = normalization
        self.horizons = tuple(h for h in horizons if h <= output_steps)
        self.split_windows = {s: (starts[k], sizes[k])
                              for k, s in enumerate(("train", "val", "test"))}

        valid = v > 0
        span = slice(0, sizes[0] + input_steps - 1)  # inputs of the training windows
        if mean is None or std is None:
            mean, std = self._statistics(v[span], valid[span], normalization)
        self.mean = torch.as_tensor(mean, dtype=torch.float32).reshape(n).clone()
        self.std = torch.as_tensor(std, dtype=torch.float32).reshape(n).clone()
        if not bool((self.std > 0).all()):
            raise ValueError("normalization std must be positive for every sensor")

        # (T, N, 2) features; windows are strided views into it.
        self.features = torch.stack([(v - self.mean) / self.std,
                                     self.time_of_day.unsqueeze(1).expand(num_steps, n)],
                                    dim=-1).contiguous()
        # Share of valid targets per split, sensor and horizon, from cumulative counts.
        cum = torch.cat([torch.zeros(1, n), valid.to(torch.float64).cumsum(0)])
        splits, self.valid_fraction = {}, {}
        for s, (start, count) in self.split_windows.items():
            first = start + input_steps + torch.arange(output_steps)  # target time, window 0
            hits = cum[first + count] - cum[first]                   # (T_out, N)
            self.valid_fraction[s] = (hits / count).t().to(torch.float32).contiguous()
            x = self.features.as_strided((n, count, input_steps, 2), (2, 2 * n, 2 * n, 1),
                                         start * 2 * n)
            y = v.as_strided((n, count, output_steps), (1, n, n), (start + input_steps) * n)
            splits[s] = ClientSplit(x, y, torch.full((n,), count, dtype=torch.long))
        merged = {"synthetic": False, **(info or {})}
        super().__init__(name=name, task="regression", splits=splits, edge_index=edge_index,
                         edge_weight=edge_weight, info=merged)

    @staticmethod
    def _statistics(v: Tensor, valid: Tensor, normalization: str) -> tuple[Tensor, Tensor]:
        n = v.size(1)
        count = valid.sum().clamp(min=1)
        g_mean = (v * valid).sum() / count
        g_std = (((v - g_mean) * valid).pow(2).sum() / count).sqrt()
        if not float(g_std) > 0:
            g_std = torch.tensor(1.0)
        if normalization == "global":
            return g_mean.expand(n), g_std.expand(n)
        c = valid.sum(0)
        mean = (v * valid).sum(0) / c.clamp(min=1)
        std = (((v - mean) * valid).pow(2).sum(0) / c.clamp(min=1)).sqrt()
        # A sensor without training readings takes the global mean, one whose
        # readings do not vary (fewer than two, or constant) the global std.
        return (torch.where(c > 0, mean, g_mean),
                torch.where((c > 1) & (std > 1e-6), std, g_std))

    # ------------------------------------------------------------ construction
    @classmethod
    def from_table(cls, table: SpeedTable, name: str = "traffic", *,
                   adj: np.ndarray | Tensor | None = None,
                   sensor_ids: Sequence[str] | None = None, **kwargs: Any) -> TrafficDataset:
        r"""A dataset from a :class:`SpeedTable` (:func:`read_speed_h5`,
        :func:`synthetic_traffic`); columns are put in ``sensor_ids`` order,
        ``adj`` (:math:`(N, N)`, same order) becomes the prior graph (see
        :func:`adjacency_to_edges`). A synthetic table (``table.info``) marks
        the dataset synthetic. Further keyword arguments go to
        :class:`TrafficDataset`."""
        if sensor_ids is not None:
            table = table.select(sensor_ids)
        ids = table.sensor_ids
        if adj is not None:
            if tuple(np.shape(adj)) != (len(ids), len(ids)):
                raise ValueError(f"adjacency of shape {tuple(np.shape(adj))} for {len(ids)} "
                                 f"sensors")
            kwargs["edge_index"], kwargs["edge_weight"] = adjacency_to_edges(adj)
        info = dict(kwargs.pop("info", None) or {})
        if table.info.get("synthetic"):
            info.setdefault("synthetic", True)
            info.setdefault("source", table.info.get("source", "synthetic speeds"))
        return cls._plain(name, table.speed, table.timestamps, sensor_ids=ids, info=info,
                          **kwargs)

    @classmethod
    def from_dataframe(cls, df: pandas.DataFrame, name: str = "traffic", *,
                       adj: np.ndarray | Tensor | None = None,
                       sensor_ids: Sequence[str] | None = None, **kwargs: Any
                       ) -> TrafficDataset:
        r"""A dataset from a DCRNN-format DataFrame (DatetimeIndex, one column
        per sensor, mph, 0 = missing), as :meth:`from_table` (needs pandas;
        ``df.attrs["synthetic"]`` marks the dataset synthetic)."""
        return cls.from_table(SpeedTable.from_dataframe(df), name, adj=adj,
                              sensor_ids=sensor_ids, **kwargs)

    @classmethod
    def _plain(cls, *args: Any, **kwargs: Any) -> TrafficDataset:
        # Subclasses (METRLA, PEMSBAY) have file-reading constructors.
        obj = TrafficDataset.__new__(TrafficDataset)
        TrafficDataset.__init__(obj, *args, **kwargs)
        return obj

    # ------------------------------------------------------------ data access
    @property
    def objective(self) -> Objective:
        r"""The masked traffic objective matching :meth:`batch`'s targets."""
        return traffic_objective(horizons=self.horizons)

    def batch(self, split: str, index: Tensor, clients: Tensor | None = None
              ) -> tuple[Tensor, Tensor]:
        r"""Windows ``index[s, b]`` (0-based within ``split``) of sensors
        ``clients[s]``: inputs :math:`(S, B, T_{in}, 2)` and packed targets
        :math:`(S, B, 4, T_{out})`. The weight row is
        :math:`m / p_h`, :math:`m` the valid-target mask and :math:`p_h` the
        sensor's share of valid targets at that horizon in ``split`` (NaN
        when it has none)."""
        x, target = self.splits[split].gather(index, clients)
        rows = torch.arange(self.num_clients) if clients is None else clients.to(torch.long)
        share = self.valid_fraction[split][rows].unsqueeze(1)            # (S, 1, T_out)
        weight = (target > 0).to(target.dtype) / share                   # 0 / 0 = NaN
        mean = self.mean[rows].view(-1, 1, 1)
        std = self.std[rows].view(-1, 1, 1)
        return x, pack_targets(target, weight, mean, std)

    def subset(self, clients: Tensor) -> TrafficDataset:
        r"""The sensors ``clients`` only (prior graph restricted and
        relabelled, normalization statistics kept)."""
        from torch_geometric.utils import subgraph
        clients = torch.as_tensor(clients, dtype=torch.long)
        ei, ew = self.edge_index, self.edge_weight
        if ei is not None:
            ei, ew = subgraph(clients, ei, ew, relabel_nodes=True, num_nodes=self.num_clients)
        return TrafficDataset._plain(
            self.name, self.speed[:, clients], self.timestamps,
            sensor_ids=[self.sensor_ids[i] for i in clients.tolist()], edge_index=ei,
            edge_weight=ew, input_steps=self.input_steps, output_steps=self.output_steps,
            fractions=self.fractions, normalization=self.normalization,
            horizons=self.horizons, mean=self.mean[clients], std=self.std[clients],
            info=dict(self.info))

    def __repr__(self) -> str:
        kind = "synthetic speeds" if self.info.get("synthetic") else "recorded speeds"
        sizes = "/".join(str(c) for _, c in self.split_windows.values())
        return (f"{type(self).__name__}({self.name}, sensors={self.num_clients}, "
                f"steps={self.speed.size(0)}, windows={sizes}, {kind})")


class _DCRNNDataset(TrafficDataset):
    r"""A DCRNN dataset read from ``root`` (see :class:`METRLA`)."""

    NAME = ""
    SPEED_FILE = ""
    GRAPH_FILE = ""
    RESOURCES: tuple[RemoteFile, ...] = ()
    SOURCE = ""

    def __init__(self, root: PathLike, download: bool = False, *,
                 normalization: Normalization = "global", input_steps: int = 12,
                 output_steps: int = 12, fractions: Sequence[float] = (0.7, 0.1, 0.2),
                 horizons: Sequence[int] = (3, 6, 12),
                 urls: Mapping[str, str] | None = None,
                 checksums: Mapping[str, str] | None = None,
                 fetch: Fetch | None = None) -> None:
        self.root = Path(root)
        self._ensure_files(download, dict(urls or {}), dict(checksums or {}), fetch)
        ids, adj = load_sensor_graph(self.root / self.GRAPH_FILE)
        table = read_speed_h5(self.root / self.SPEED_FILE).select(ids)
        edge_index, edge_weight = adjacency_to_edges(adj)
        super().__init__(self.NAME, table.speed, table.timestamps, sensor_ids=ids,
                         edge_index=edge_index, edge_weight=edge_weight, input_steps=input_steps,
                         output_steps=output_steps, fractions=fractions,
                         normalization=normalization, horizons=horizons,
                         info={"synthetic": False, "source": self.SOURCE,
                               "root": str(self.root)})

    @classmethod
    def resource(cls, name: str) -> RemoteFile:
        for r in cls.RESOURCES:
            if r.name == name:
                return r
        raise KeyError(name)

    def _ensure_files(self, download: bool, urls: dict[str, str], checksums: dict[str, str],
                      fetch: Fetch | None) -> None:
        for res in self.RESOURCES:
            path = self.root / res.name
            if path.exists():
                continue
            if not download:
                raise ValueError(f"{path} not found: put the DCRNN file {res.name} in {self.root} "
                                 f"or pass download=True")
            url, sha = urls.get(res.name, res.url), checksums.get(res.name, res.sha256)
            if url is None:
                raise ValueError(
                    f"no direct public URL of {res.name} is known to pyg_fedgraph: DCRNN "
                    f"shares it through the Google Drive / Baidu links of its README "
                    f"(github.com/liyaguang/DCRNN); save it as {path}, or pass "
                    f"urls={{{res.name!r}: URL}} and checksums={{{res.name!r}: SHA256}}")
            if sha is None:
                raise ValueError(f"no sha256 of {res.name} is known to pyg_fedgraph; pass "
                                 f"checksums={{{res.name!r}: SHA256}} to download it from {url}")
            download_file(url, path, sha, fetch)


class METRLA(_DCRNNDataset):
    r"""METR-LA from the `"Diffusion Convolutional Recurrent Neural Network:
    Data-Driven Traffic Forecasting" <https://arxiv.org/abs/1707.01926>`_
    paper (Li et al., ICLR 2018): 207 loop detectors in Los Angeles, speeds
    every 5 minutes from March 1 to June 27, 2012 (34,272 steps), one client
    per sensor as in Panacea (Chen et al., Table I: 23,974 / 3,425 / 6,850
    windows per client).

    Reads ``metr-la.h5`` and ``adj_mx.pkl`` from ``root`` and builds a
    :class:`TrafficDataset` (all its options apply); the road graph becomes
    the directed prior client graph (:func:`adjacency_to_edges`).
    ``download=True`` fetches missing files and checks their sha256: the
    graph from DCRNN's repository at a pinned commit; the speeds have no
    stable direct link (DCRNN shares them on Google Drive), so their URL and
    checksum must be passed in ``urls`` / ``checksums``.

    .. math::
        N = 207, \quad T = 34{,}272, \quad W = T - 23

    Args:
        root (str or Path): folder holding (or receiving) the files.
        download (bool, optional): fetch missing files (default: :obj:`False`)
        normalization (str, optional): ``"global"`` or ``"sensor"`` z-score
            (default: :obj:`"global"`)
        input_steps (int, optional): input window (default: :obj:`12`)
        output_steps (int, optional): forecast window (default: :obj:`12`)
        fractions (tuple, optional): train / val / test shares
            (default: :obj:`(0.7, 0.1, 0.2)`)
        horizons (tuple, optional): reported horizons (default: :obj:`(3, 6, 12)`)
        urls (dict, optional): file name -> URL overriding :attr:`RESOURCES`.
        checksums (dict, optional): file name -> sha256 overriding them.
        fetch (callable, optional): ``fetch(url, dest)`` downloader
            (default: :mod:`urllib.request`).
    """
    NAME = "metr-la"
    SPEED_FILE = "metr-la.h5"
    GRAPH_FILE = "adj_mx.pkl"
    SOURCE = "METR-LA (DCRNN, Li et al. 2018)"
    RESOURCES = (
        RemoteFile("adj_mx.pkl", _DCRNN_GRAPHS + "adj_mx.pkl",
                   "a35687c6e15aa228dc45027b0ed2a0ea0f4ec78f573deb992c595092d12f61b3"),
        RemoteFile("metr-la.h5", None, None),
    )


class PEMSBAY(_DCRNNDataset):
    r"""PEMS-BAY from the `"Diffusion Convolutional Recurrent Neural Network:
    Data-Driven Traffic Forecasting" <https://arxiv.org/abs/1707.01926>`_
    paper (Li et al., ICLR 2018): 325 sensors in the Bay Area, speeds every 5
    minutes from January 1 to June 30, 2017 (52,116 steps), one client per
    sensor (Panacea, Table I: 36,465 / 5,209 / 10,419 windows per client).
    Reads ``pems-bay.h5`` and ``adj_mx_bay.pkl``; options as :class:`METRLA`.
    """
    NAME = "pems-bay"
    SPEED_FILE = "pems-bay.h5"
    GRAPH_FILE = "adj_mx_bay.pkl"
    SOURCE = "PEMS-BAY (DCRNN, Li et al. 2018)"
    RESOURCES = (
        RemoteFile("adj_mx_bay.pkl", _DCRNN_GRAPHS + "adj_mx_bay.pkl",
                   "116275f5704d0d492018e14c047f7ae5004385b450aa907f88424055a4a97370"),
        RemoteFile("pems-bay.h5", None, None),
    )


# ---------------------------------------------------------------- synthetic


def _dense_adjacency(graph: Any) -> np.ndarray:
    if hasattr(graph, "edge_index"):
        n = int(graph.num_nodes)
        adj = np.zeros((n, n), dtype=np.float64)
        ei = graph.edge_index.cpu().numpy()
        w = getattr(graph, "edge_weight", None)
        adj[ei[0], ei[1]] = 1.0 if w is None else w.detach().cpu().numpy()
    else:
        adj = np.asarray(graph.detach().cpu() if isinstance(graph, Tensor) else graph,
                         dtype=np.float64)
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise ValueError(f"the road graph must be an (N, N) adjacency or an object with "
                         f"edge_index / num_nodes, got shape {adj.shape}")
    if (adj < 0).any():
        raise ValueError("road-graph weights must be non-negative")
    adj = adj.copy()
    np.fill_diagonal(adj, 0.0)
    return adj


def synthetic_traffic(graph: Any, num_steps: int = 4032, seed: int = 0, *,
                      sensor_ids: Sequence[str] | None = None, start: str = "2012-03-01",
                      missing_rate: float = 0.05, noise: float = 1.5,
                      incident_rate: float = 1.0 / 864) -> SpeedTable:
    r"""Synthetic 5-minute speeds (mph) on a road graph, in DCRNN's format.
    **The speeds are synthetic**: the returned table says so in
    ``table.info["synthetic"]``, and datasets built from it carry
    ``info["synthetic"] = True``.

    Sensor :math:`i` has a free-flow speed :math:`v_i`, a morning and an
    evening rush hour (amplitudes :math:`a_i, b_i`, peak hours, widths) and a
    weekend factor :math:`\omega_i`; these attributes are random fields
    smoothed over the graph, so neighbouring sensors behave alike. Its
    congestion level is

    .. math::
        c_{ti} = \min\Big(0.85,\;
        \rho_{d(t),i}\, \kappa_{ti} \big(a_i\, g_{am}(t) + b_i\, g_{pm}(t)\big)
        + s_{ti}\Big),
        \quad \kappa_{ti} = \omega_i \text{ on weekends, else } 1,

    with Gaussian daily bumps :math:`g`, a day-to-day intensity
    :math:`\rho_{d,i}` (also smooth over the graph) and incident shocks that
    spread upstream along the road graph and decay,

    .. math::
        \mathbf{s}_{t+1} = 0.97\,\big(0.7\,\mathbf{s}_t + 0.3\,
        \mathbf{P}\mathbf{s}_t\big) + \boldsymbol{\epsilon}_{t+1},
        \quad P_{ij} = \frac{A_{ij}}{\sum_k A_{ik}},

    (a jam at :math:`j` reaches the sensors :math:`i` with a road
    :math:`i \to j`; incidents start at rate ``incident_rate`` per sensor
    and step with size :math:`U(0.3, 0.6)`). The speed is
    :math:`v_i (1 - c_{ti})` plus AR(1) noise (coefficient 0.7, standard
    deviation ``noise``), clipped to :math:`[3, 80]`. Missing readings
    (zeros) are isolated drop-outs and outage blocks (mean 3 hours),
    about ``missing_rate`` of the readings in all.

    Args:
        graph (array, torch.Tensor or Data): road graph as a dense
            :math:`(N, N)` adjacency (``adj[i, j]`` for the road
            :math:`i \to j`, as in DCRNN's ``adj_mx``) or an object with
            ``edge_index``, ``num_nodes`` and optional ``edge_weight``.
        num_steps (int, optional): time steps :math:`T` (default: :obj:`4032`,
            two weeks)
        seed (int, optional): seed of every random draw (default: :obj:`0`)
        sensor_ids (list of str, optional): column names (default:
            ``"0" .. "N-1"``).
        start (str, optional): first time stamp (default: :obj:`"2012-03-01"`)
        missing_rate (float, optional): target share of missing readings
            (default: :obj:`0.05`)
        noise (float, optional): noise standard deviation in mph
            (default: :obj:`1.5`)
        incident_rate (float, optional): incidents per sensor and step
            (default: one per sensor every 3 days)

    Returns:
        A :class:`SpeedTable`: :math:`(T,)` time stamps 5 minutes apart,
        float32 speeds :math:`(T, N)`, the sensor ids and
        ``info = {"synthetic": True, "source": ..., "seed": seed}``
        (:meth:`SpeedTable.to_dataframe` gives DCRNN's DataFrame).
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be positive, got {num_steps}")
    if not 0.0 <= missing_rate < 1.0:
        raise ValueError(f"missing_rate must be in [0, 1), got {missing_rate}")
    adj = _dense_adjacency(graph)
    n = adj.shape[0]
    ids = [str(i) for i in range(n)] if sensor_ids is None else [str(s) for s in sensor_ids]
    if len(ids) != n:
        raise ValueError(f"{len(ids)} sensor ids for a graph of {n} sensors")
    rng = np.random.default_rng(seed)

    # Symmetric random-walk smoother: sensor attributes vary smoothly along roads.
    sym = adj + adj.T + np.eye(n)
    smoother = sym / sym.sum(1, keepdims=True)

    def field(size: tuple[int, ...] = ()) -> np.ndarray:
        z = rng.standard_normal(size + (n,))
        for _ in range(8):
            z = z @ smoother.T
        z = z - z.mean(-1, keepdims=True)
        return z / np.maximum(z.std(-1, keepdims=True), 1e-12)

    free = np.clip(63.0 + 4.0 * field(), 50.0, 72.0)
    am_amp = np.clip(0.30 + 0.15 * field(), 0.0, 0.7)
    pm_amp = np.clip(0.35 + 0.15 * field(), 0.0, 0.7)
    am_peak, pm_peak = 7.75 + 0.5 * field(), 17.5 + 0.6 * field()
    am_width = np.clip(1.0 + 0.2 * field(), 0.5, None)
    pm_width = np.clip(1.5 + 0.3 * field(), 0.7, None)
    weekend = np.clip(0.25 + 0.1 * field(), 0.0, 0.6)

    ts = np.datetime64(start, "ns") + np.arange(num_steps) * np.timedelta64(5, "m")
    day = ts.astype("datetime64[D]")
    hour = (ts - day) / np.timedelta64(1, "h")
    day_number = (day - day[0]).astype(np.int64)
    is_weekend = (day.astype(np.int64) + 3) % 7 >= 5          # 1970-01-01 was a Thursday
    intensity = np.clip(1.0 + 0.15 * field((int(day_number[-1]) + 1,)), 0.5, 1.5)

    def bump(peak: np.ndarray, width: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * ((hour[:, None] - peak[None]) / width[None]) ** 2)

    congestion = am_amp * bump(am_peak, am_width) + pm_amp * bump(pm_peak, pm_width)
    congestion *= np.where(is_weekend[:, None], weekend[None], 1.0) * intensity[day_number]

    out_degree = adj.sum(1, keepdims=True)
    upstream = np.divide(adj, out_degree, out=np.zeros_like(adj), where=out_degree > 0)
    starts = rng.random((num_steps, n)) < incident_rate
    sizes = rng.uniform(0.3, 0.6, (num_steps, n)) * starts
    white = rng.standard_normal((num_steps, n)) * noise * np.sqrt(1.0 - 0.7 ** 2)
    shock, ar = np.zeros(n), rng.standard_normal(n) * noise
    shocks, ars = np.empty((num_steps, n)), np.empty((num_steps, n))
    for t in range(num_steps):  # a recursion in time: each step needs the previous one
        shock = 0.97 * (0.7 * shock + 0.3 * (upstream @ shock)) + sizes[t]
        ar = 0.7 * ar + white[t]
        shocks[t], ars[t] = shock, ar
    level = np.minimum(congestion + shocks, 0.85)
    speed = np.clip(free[None] * (1.0 - level) + ars, 3.0, 80.0)

    missing = rng.random((num_steps, n)) < 0.3 * missing_rate
    mean_len = 36
    for i in range(n):  # a handful of outage blocks per sensor
        for _ in range(rng.poisson(0.7 * missing_rate * num_steps / mean_len)):
            s = int(rng.integers(0, num_steps))
            missing[s:s + int(rng.geometric(1.0 / mean_len)), i] = True
    speed[missing] = 0.0

    return SpeedTable(ts, speed, ids, {
        "synthetic": True, "seed": seed,
        "source": "pyg_fedgraph.datasets.traffic.synthetic_traffic (synthetic speeds on a "
                  "road graph)"})


# ---------------------------------------------------------------- registry


def _traffic_builder(cls: type[_DCRNNDataset], root: PathLike | None,
                     graph_path: PathLike | None, synthetic_steps: int, seed: int,
                     download: bool, **kwargs: Any) -> TrafficDataset:
    if root is not None and (download or (Path(root) / cls.SPEED_FILE).exists()):
        return cls(root, download=download, **kwargs)
    where = graph_path if graph_path is not None else root
    if where is None:
        raise ValueError(f"{cls.NAME} needs its sensor graph: pass graph_path=DIR holding "
                         f"{cls.GRAPH_FILE} (synthetic speeds on the real road graph), or "
                         f"root=DIR holding {cls.SPEED_FILE} and {cls.GRAPH_FILE}")
    graph_file = Path(where)
    if graph_file.is_dir():
        graph_file = graph_file / cls.GRAPH_FILE
    if not graph_file.exists():
        raise ValueError(f"{graph_file} not found: {cls.NAME} needs DCRNN's {cls.GRAPH_FILE}")
    ids, adj = load_sensor_graph(graph_file)
    table = synthetic_traffic(adj, num_steps=synthetic_steps, seed=seed, sensor_ids=ids,
                              start="2017-01-01" if cls is PEMSBAY else "2012-03-01")
    log.warning("%s: no %s given; using SYNTHETIC speeds on the real road graph (%d steps)",
                cls.NAME, cls.SPEED_FILE, synthetic_steps)
    return TrafficDataset.from_table(
        table, cls.NAME, adj=adj, sensor_ids=ids,
        info={"synthetic": True, "graph": str(graph_file),
              "source": f"synthetic speeds (synthetic_traffic, seed {seed}) on the "
                        f"{cls.SOURCE} road graph"}, **kwargs)


@register_dataset("metr-la")
def metr_la(root: PathLike | None = None, graph_path: PathLike | None = None,
            synthetic_steps: int = 4032, seed: int = 0, download: bool = False,
            normalization: Normalization = "global", input_steps: int = 12,
            output_steps: int = 12) -> TrafficDataset:
    r"""METR-LA, one client per sensor: :class:`METRLA` when ``root`` holds
    ``metr-la.h5`` (or ``download=True``); otherwise **synthetic** speeds
    (:func:`synthetic_traffic`, ``synthetic_steps`` steps, ``seed``) on the
    real road graph read from ``graph_path`` (a folder with ``adj_mx.pkl``
    or the file; default: ``root``).

    Args:
        root (str, optional): folder with ``metr-la.h5`` and ``adj_mx.pkl``.
        graph_path (str, optional): where ``adj_mx.pkl`` is for synthetic speeds.
        synthetic_steps (int, optional): length of the synthetic series
            (default: :obj:`4032`, two weeks)
        seed (int, optional): seed of the synthetic speeds (default: :obj:`0`)
        download (bool, optional): see :class:`METRLA` (default: :obj:`False`)
        normalization (str, optional): ``"global"`` or ``"sensor"``
            (default: :obj:`"global"`)
        input_steps (int, optional): input window (default: :obj:`12`)
        output_steps (int, optional): forecast window (default: :obj:`12`)
    """
    return _traffic_builder(METRLA, root, graph_path, synthetic_steps, seed, download,
                            normalization=normalization, input_steps=input_steps,
                            output_steps=output_steps)


@register_dataset("pems-bay")
def pems_bay(root: PathLike | None = None, graph_path: PathLike | None = None,
             synthetic_steps: int = 4032, seed: int = 0, download: bool = False,
             normalization: Normalization = "global", input_steps: int = 12,
             output_steps: int = 12) -> TrafficDataset:
    r"""PEMS-BAY, one client per sensor: :class:`PEMSBAY` when ``root`` holds
    ``pems-bay.h5`` (or ``download=True``); otherwise **synthetic** speeds on
    the real road graph from ``graph_path`` (``adj_mx_bay.pkl``). Arguments
    as :func:`metr_la`."""
    return _traffic_builder(PEMSBAY, root, graph_path, synthetic_steps, seed, download,
                            normalization=normalization, input_steps=input_steps,
                            output_steps=output_steps)
