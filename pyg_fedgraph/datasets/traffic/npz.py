r"""DCRNN's processed windows (``train.npz``, ``val.npz``, ``test.npz``) read
back into the speed series they were cut from.

DCRNN's ``generate_training_data.py`` (Li et al., ICLR 2018) slides a window
over the :math:`(T, N)` speed series with ``x_offsets`` :math:`-(T_x - 1) ..
0` and ``y_offsets`` :math:`1 .. T_y` and splits the :math:`W = T - T_x -
T_y + 1` windows chronologically into three consecutive runs, so window
:math:`k` (counted over the three files in order) holds

.. math::
    \mathbf{x}_k = \mathbf{S}_{k : k + T_x}, \qquad
    \mathbf{y}_k = \mathbf{S}_{k + T_x : k + T_x + T_y},

with :math:`\mathbf{S} \in \mathbb{R}^{T \times N \times C}` the series of
speed (channel 0) and time of day (channel 1, a fraction of a day). The
series is therefore recoverable: its first :math:`W` steps are the first
step of every window, the rest the last window. :func:`read_dcrnn_npz`
rebuilds it, checks that every window of every file equals its slice, and
dates the steps from the time-of-day channel and the day the series starts,
so that the library can cut its own windows (any length) from it.
"""
from __future__ import annotations

import logging
import re
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pyg_fedgraph.datasets.traffic.io import PathLike, SpeedTable
from pyg_fedgraph.utils.errors import one_line

__all__ = ["SPLIT_FILES", "read_sensor_ids", "find_sensor_ids", "find_npz_folders",
           "read_dcrnn_npz", "concat_tables"]

log = logging.getLogger(__name__)

#: The three files DCRNN writes, in time order.
SPLIT_FILES = ("train.npz", "val.npz", "test.npz")

_EXPECTED = ("DCRNN's generate_training_data.py output: train.npz, val.npz and test.npz with "
             "numeric arrays x, y (windows, steps, sensors, channels), x_offsets and y_offsets")
#: Windows compared at once when checking a file against the series (bounds memory).
_CHUNK = 2048


def read_sensor_ids(path: PathLike) -> list[str]:
    r"""Sensor ids from a text file, separated by commas, spaces or newlines
    (DCRNN's ``graph_sensor_ids.txt``, or one id per line)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read sensor ids from {path} ({one_line(err)})") from None
    ids = [s for s in re.split(r"[,\s]+", text) if s]
    if not ids:
        raise ValueError(f"{path} holds no sensor ids (expected ids separated by commas or "
                         f"newlines)")
    return ids


def find_sensor_ids(folder: PathLike) -> Path | None:
    r"""The file naming the sensors of the npz files in ``folder``, in their
    column order: ``folder/sensor_ids.txt``, else (the layout of the DCRNN
    fork whose per-highway PEMS-BAY folders are ``PEMS-BAY/I280`` ...)
    ``sensor_graph/device_ids_<number in the folder's name>.txt`` beside the
    folder or beside its parent; :obj:`None` if there is none."""
    folder = Path(folder)
    own = folder / "sensor_ids.txt"
    if own.is_file():
        return own
    number = re.search(r"(\d+)$", folder.name)
    if number is None:
        return None
    for base in (folder.parent, folder.parent.parent):
        candidate = base / "sensor_graph" / f"device_ids_{number.group(1)}.txt"
        if candidate.is_file():
            return candidate
    return None


def _has_splits(folder: Path) -> bool:
    return all((folder / f).is_file() for f in SPLIT_FILES)


def _same_name(a: str, b: str) -> bool:
    return a.lower().replace("_", "-") == b.lower().replace("_", "-")


def find_npz_folders(root: PathLike, name: str) -> list[Path]:
    r"""The folders of DCRNN npz files for dataset ``name`` (e.g.
    ``"METR-LA"``) under ``root``: ``root`` itself if it holds the three
    files; else a folder named ``name`` (any case, ``-`` or ``_``) in
    ``root`` or one level deeper, searched the same way; else the
    sub-folders of ``root`` that hold the three files, in name order (one
    group of sensors each, e.g. PEMS-BAY's highways), read as one federation.
    Returns an empty list when there is none.

    Raises:
        ValueError: if two folders named ``name`` are equally near.
    """
    root = Path(root)
    if _has_splits(root):
        return [root]
    if not root.is_dir():
        return []
    subdirs = sorted(p for p in root.iterdir() if p.is_dir())
    for level in (subdirs, sorted(q for p in subdirs for q in p.iterdir() if q.is_dir())):
        named = [p for p in level if _same_name(p.name, name)]
        if len(named) > 1:
            raise ValueError(f"several folders named {name} under {root}: "
                             f"{', '.join(str(p) for p in named)}; give one of them as root")
        found = find_npz_folders(named[0], name) if named else []
        if found:
            return found
    return [p for p in subdirs if _has_splits(p)]


# ------------------------------------------------------------------ reading


def _load(path: Path, keys: Sequence[str]) -> dict[str, np.ndarray]:
    r"""Arrays ``keys`` of the archive ``path``, read without unpickling."""
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not an .npz archive")
        with archive:
            missing = [k for k in keys if k not in archive.files]
            if missing:
                raise ValueError(f"no array {', '.join(missing)} (it holds "
                                 f"{', '.join(archive.files) or 'nothing'})")
            arrays = {k: archive[k] for k in keys}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise ValueError(f"{path}: cannot read it ({one_line(err)}); expected "
                         f"{_EXPECTED}") from None
    for k, a in arrays.items():
        if a.dtype.kind not in "fiu":
            raise ValueError(f"{path}: array {k} holds {a.dtype} values, not numbers; "
                             f"expected {_EXPECTED}")
    return arrays


def _offsets(path: Path, arrays: dict[str, np.ndarray]) -> tuple[int, int]:
    x, y = arrays["x"], arrays["y"]
    if x.ndim != 4 or y.ndim != 4 or x.shape[0] != y.shape[0] or x.shape[2:] != y.shape[2:] \
            or x.shape[0] < 1:
        raise ValueError(f"{path}: x {x.shape} and y {y.shape} are not windows of one series "
                         f"(expected (windows, steps, sensors, channels), the same windows, "
                         f"sensors and channels in both)")
    t_in, t_out = x.shape[1], y.shape[1]
    x_off, y_off = arrays["x_offsets"].ravel(), arrays["y_offsets"].ravel()
    if not (np.array_equal(x_off, np.arange(-t_in + 1, 1))
            and np.array_equal(y_off, np.arange(1, t_out + 1))):
        raise ValueError(f"{path}: x_offsets {x_off.tolist()} and y_offsets {y_off.tolist()} "
                         f"are not consecutive steps -{t_in - 1}..0 and 1..{t_out}; only "
                         f"windows of consecutive steps can be read back into a series")
    return t_in, t_out


def _what(channel: int) -> str:
    return {0: "speed", 1: "time of day"}.get(channel, f"channel {channel}")


def _source(t: int, counts: Sequence[int], t_in: int) -> str:
    r"""Where the rebuilt series' step ``t`` was read: the first input step
    of window ``t``, or a step of the very last window."""
    total = sum(counts)
    if t < total:
        for name, count in zip(SPLIT_FILES, counts, strict=True):
            if t < count:
                return f"{name} x of window {t}, step 0"
            t -= count
    last = t - (total - 1)
    where = f"x of window {counts[-1] - 1}, step {last}" if last < t_in else \
        f"y of window {counts[-1] - 1}, step {last - t_in}"
    return f"{SPLIT_FILES[-1]} {where}"


def _check_windows(path: Path, name: str, given: np.ndarray, series: np.ndarray, first: int,
                   ids: Sequence[str], counts: Sequence[int], t_in: int) -> None:
    r"""``given[k]`` must equal ``series[first + k : first + k + steps]``;
    the first difference names both windows that disagree."""
    count, steps = given.shape[:2]
    view = np.lib.stride_tricks.as_strided(
        series[first:], shape=(count, steps) + series.shape[1:],
        strides=(series.strides[0],) + series.strides, writeable=False)
    for start in range(0, count, _CHUNK):
        a, b = view[start:start + _CHUNK], given[start:start + _CHUNK]
        if np.array_equal(a, b, equal_nan=True):
            continue
        bad = np.argwhere(~((a == b) | (np.isnan(a) & np.isnan(b))))[0]
        window, step, sensor, channel = (start + int(bad[0]),) + tuple(int(i) for i in bad[1:])
        t = first + window + step
        raise ValueError(
            f"{path}: the windows are not slices of one series: {name} of window {window}, "
            f"step {step} has {given[window, step, sensor, channel]:g} as the "
            f"{_what(channel)} of sensor {ids[sensor]} at series step {t}, "
            f"{_source(t, counts, t_in)} has {series[t, sensor, channel]:g}; one of them was "
            f"changed (a corrupted or edited file), or the splits are not consecutive")


def _timestamps(folder: Path, tod: np.ndarray | None, num_steps: int, start: Any,
                step_minutes: float) -> np.ndarray:
    r"""``datetime64[ns]`` stamps of the series' steps."""
    start64 = np.datetime64(start, "ns")
    day = start64.astype("datetime64[D]").astype("datetime64[ns]")
    if tod is None:
        step = np.timedelta64(int(round(step_minutes * 60e9)), "ns")
        log.info("%s: no time-of-day channel; assuming regular %g-minute steps from %s",
                 folder, step_minutes, start64)
        return start64 + step * np.arange(num_steps)
    if not bool(((tod >= 0) & (tod < 1)).all()):
        raise ValueError(f"{folder}: channel 1 is not a time of day (values outside [0, 1))")
    seconds = np.rint(tod * 86400).astype(np.int64)
    delta = np.diff(seconds) % 86400
    if delta.size:
        values, counts = np.unique(delta[delta > 0], return_counts=True)
        if values.size == 0:
            raise ValueError(f"{folder}: the time of day never advances")
        unit = int(values[np.argmax(counts)])
        bad = np.flatnonzero((delta == 0) | (delta % unit != 0))
        if bad.size:
            t = int(bad[0])
            raise ValueError(f"{folder}: the time of day goes from {tod[t]:.6f} to "
                             f"{tod[t + 1]:.6f} between steps {t} and {t + 1}, not a whole "
                             f"number of {unit // 60}-minute steps forward")
        gaps = np.flatnonzero(delta != unit)
        for t in gaps[:5]:
            log.info("%s: %d missing time steps after step %d (the series has a gap)",
                     folder, delta[t] // unit - 1, int(t))
    else:
        delta = np.zeros(0, dtype=np.int64)
    first = day + np.timedelta64(int(seconds[0]), "s")
    if start64 != day and start64 != first:
        raise ValueError(f"{folder}: the series starts at {str(first)[11:16]} by its "
                         f"time-of-day channel, not at {str(start64)[11:16]} as given by start")
    offsets = np.concatenate([[0], np.cumsum(delta)]).astype(np.int64)
    stamps = first + offsets.astype("timedelta64[s]").astype("timedelta64[ns]")
    # The channel DCRNN wrote is (stamp - midnight) / one day: recomputed, it must agree.
    again = (stamps - stamps.astype("datetime64[D]")) / np.timedelta64(1, "D")
    if not np.allclose(again, tod, rtol=0, atol=1e-6):
        t = int(np.argmax(np.abs(again - tod)))
        raise ValueError(f"{folder}: the time of day at step {t} ({tod[t]:.6f}) does not "
                         f"follow from the steps before it")
    return stamps


def _unique_columns(values: np.ndarray, ids: list[str], where: str
                    ) -> tuple[np.ndarray, list[str]]:
    r"""Drops repeated sensor columns whose readings are identical (kept
    once, where they first appear); refuses repeated ids with different
    readings. ``values``: :math:`(T, N, ...)`."""
    first: dict[str, int] = {}
    keep = []
    for j, s in enumerate(ids):
        if s not in first:
            first[s] = j
            keep.append(j)
            continue
        i = first[s]
        if not np.array_equal(values[:, i], values[:, j], equal_nan=True):
            differ = int(np.count_nonzero(np.any(values[:, i] != values[:, j],
                                                 axis=tuple(range(1, values.ndim - 1)))))
            raise ValueError(f"{where}: sensor {s} appears twice (columns {i} and {j}) with "
                             f"different readings at {differ} time steps; remove one of them")
        log.info("%s: sensor %s appears twice (columns %d and %d) with identical readings; "
                 "keeping column %d", where, s, i, j, i)
    if len(keep) == len(ids):
        return values, ids
    return values[:, keep], [ids[j] for j in keep]


def _no_ids(folder: Path) -> str:
    return (f"{folder}: no sensor ids for the npz files; write them in "
            f"{folder / 'sensor_ids.txt'} (comma separated, in the files' column order) or "
            f"pass sensor_ids")


def read_dcrnn_npz(folder: PathLike, start: Any, *, sensor_ids: Sequence[str] | None = None,
                   full_graph_ids: Sequence[str] | None = None,
                   step_minutes: float = 5.0) -> SpeedTable:
    r"""The speed series behind DCRNN's ``train.npz``, ``val.npz`` and
    ``test.npz`` in ``folder`` (see the module docstring), any input and
    output length, read with ``numpy.load(allow_pickle=False)``.

    The three files must be consecutive windows of one series: every window
    of every file is compared with its slice of the rebuilt series, and the
    first difference is reported in one line (file, window, step, sensor).
    The steps are dated from the time-of-day channel (channel 1), so a gap
    in the recording (PEMS-BAY's 12 missing steps after 2017-03-12 01:55)
    shows in the time stamps as it does in the speed file, and from the day
    ``start``. A sensor id listed twice with identical readings (I280's
    400823 in the per-highway PEMS-BAY files) is kept once and logged; with
    different readings it is refused.

    Args:
        folder (str or Path): the folder holding the three files.
        start (str or numpy.datetime64): the day of the first step
            (``"2012-03-01"`` for METR-LA, ``"2017-01-01"`` for PEMS-BAY); a
            time given with it must agree with the time-of-day channel.
        sensor_ids (list of str, optional): the sensors' ids in column order
            (default: read from :func:`find_sensor_ids`).
        full_graph_ids (list of str, optional): the ids of the dataset's full
            road graph, taken as the columns' ids (with a warning) when
            there is no id file and the files have exactly as many sensors:
            DCRNN writes its npz files in the speed file's column order,
            which is the graph's (default: :obj:`None`)
        step_minutes (float, optional): the step of a series without a
            time-of-day channel (default: :obj:`5.0`)

    Returns:
        A :class:`SpeedTable` of the speeds (channel 0) with ``info`` saying
        where they come from and how the files were windowed.
    """
    folder = Path(folder)
    missing = [f for f in SPLIT_FILES if not (folder / f).is_file()]
    if missing:
        raise ValueError(f"{folder}: no {', '.join(missing)}; expected {_EXPECTED}")
    ids: list[str] | None = None
    if sensor_ids is not None:
        ids = [str(s) for s in sensor_ids]
    else:
        id_file = find_sensor_ids(folder)
        if id_file is not None:
            ids = read_sensor_ids(id_file)
        elif full_graph_ids is None:
            raise ValueError(_no_ids(folder))

    # Pass 1: the first step of every window, and the whole last window.
    firsts: list[np.ndarray] = []
    counts: list[int] = []
    shapes: list[tuple[int, ...]] = []
    tail = np.zeros(0)
    for name in SPLIT_FILES:
        path = folder / name
        arrays = _load(path, ("x", "y", "x_offsets", "y_offsets"))
        t_in, t_out = _offsets(path, arrays)
        x = arrays["x"]
        shapes.append((t_in, t_out) + x.shape[2:])
        if shapes[-1] != shapes[0]:
            raise ValueError(f"{path}: windows of {t_in} + {t_out} steps, {x.shape[2]} "
                             f"sensors and {x.shape[3]} channels, but "
                             f"{folder / SPLIT_FILES[0]} has {shapes[0][0]} + {shapes[0][1]}, "
                             f"{shapes[0][2]} and {shapes[0][3]}")
        firsts.append(x[:, 0].astype(np.float64))
        counts.append(x.shape[0])
        if name == SPLIT_FILES[-1]:
            tail = np.concatenate([x[-1, 1:], arrays["y"][-1]]).astype(np.float64)
        del arrays, x
    t_in, t_out, num_sensors, channels = shapes[0]
    if ids is None:
        if full_graph_ids is None or len(full_graph_ids) != num_sensors:
            raise ValueError(_no_ids(folder))
        log.warning("%s: no sensor ids beside the npz files; taking their %d columns to be "
                    "the full road graph's sensors in its order", folder, num_sensors)
        ids = [str(s) for s in full_graph_ids]
    if len(ids) != num_sensors:
        raise ValueError(f"{folder}: {len(ids)} sensor ids for {num_sensors} sensor columns "
                         f"in the npz files")
    series = np.concatenate(firsts + [tail])
    del firsts

    # Pass 2: every window must be its slice of the series.
    offset = 0
    for name, count in zip(SPLIT_FILES, counts, strict=True):
        path = folder / name
        arrays = _load(path, ("x", "y"))
        _check_windows(path, "x", arrays["x"], series, offset, ids, counts, t_in)
        _check_windows(path, "y", arrays["y"], series, offset + t_in, ids, counts, t_in)
        offset += count
        del arrays

    tod = None
    if channels >= 2:
        tod = series[:, 0, 1]
        other = np.flatnonzero(~np.all(series[:, :, 1] == tod[:, None], axis=0))
        if other.size:
            raise ValueError(f"{folder}: sensor {ids[int(other[0])]} has another time of day "
                             f"(channel 1) than sensor {ids[0]}; channel 1 must be the time "
                             f"of day of the step, the same for every sensor")
    stamps = _timestamps(folder, tod, series.shape[0], start, step_minutes)
    speed, ids = _unique_columns(series[:, :, 0], ids, str(folder))
    log.info("%s: %d steps of %d sensors rebuilt from %s windows of %d + %d steps",
             folder, speed.shape[0], len(ids), " / ".join(map(str, counts)), t_in, t_out)
    return SpeedTable(stamps, speed, ids, {
        "source": f"DCRNN npz files in {folder}",
        "npz_windows": {"input_steps": t_in, "output_steps": t_out,
                        "counts": dict(zip(("train", "val", "test"), counts, strict=True))}})


def concat_tables(tables: Sequence[SpeedTable], names: Sequence[str]) -> SpeedTable:
    r"""The sensors of several tables over the same time steps side by side
    (e.g. PEMS-BAY's highway groups as one federation), in order; a sensor
    in two tables with identical readings is kept once (logged).

    Args:
        tables (list of SpeedTable): tables with equal time stamps.
        names (list of str): a name for each, used in messages and in
            ``info["groups"]`` (group name -> its sensor ids).
    """
    if not tables:
        raise ValueError("no tables to join")
    base = tables[0]
    for table, name in zip(tables[1:], names[1:], strict=True):
        if not np.array_equal(table.timestamps, base.timestamps):
            raise ValueError(f"{name} covers other time steps ({table.timestamps.size} from "
                             f"{table.timestamps[0]}) than {names[0]} "
                             f"({base.timestamps.size} from {base.timestamps[0]}); sensor "
                             f"groups joined into one federation must share their time steps")
    speed = np.concatenate([t.speed for t in tables], axis=1)
    ids = [s for t in tables for s in t.sensor_ids]
    speed, ids = _unique_columns(speed, ids, " + ".join(names))
    info = dict(base.info)
    info["groups"] = {n: list(t.sensor_ids) for t, n in zip(tables, names, strict=True)}
    return SpeedTable(base.timestamps, speed, ids, info)
