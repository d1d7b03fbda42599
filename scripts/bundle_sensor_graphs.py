r"""Writes the road graphs that pyg_fedgraph ships, from DCRNN's published files.

Reads, from ``--shared`` (default ``../shared/data`` next to the project root),
the METR-LA and PEMS-BAY sensor-graph pickles (through pyg_fedgraph's
allow-list unpickler, so that nothing in them runs) and the sensor locations,
and writes ``pyg_fedgraph/datasets/traffic/data/{metr-la,pems-bay}.npz``:

* ``sensor_ids`` (N,) fixed-width unicode, in DCRNN's matrix order;
* ``location`` (N, 2) float64, latitude and longitude in degrees;
* ``source``, ``target`` (E,) int32 and ``weight`` (E,) float32: the nonzero
  entries ``adj_mx[source, target]``, diagonal included, in row-major order.

The archives are stored uncompressed with fixed member dates, so the same
input always gives the same bytes, and the sha256 printed at the end are the
ones ``pyg_fedgraph.datasets.traffic.io`` checks on load. ``--check`` compares
freshly built archives with the committed ones instead of writing.

Usage::

    python scripts/bundle_sensor_graphs.py [--shared ../shared/data] [--check]
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

from pyg_fedgraph.datasets.traffic import load_sensor_graph

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "pyg_fedgraph" / "datasets" / "traffic" / "data"
# ../shared/data next to the project root, or one level further up from a git worktree.
SHARED = next((p / "shared" / "data" for p in ROOT.parents if (p / "shared" / "data").is_dir()),
              ROOT.parent / "shared" / "data")

#: name -> (graph pickle, locations file, whether that file has a header and an index column)
SOURCES = {
    "metr-la": ("metr-la/adj_mx.pkl", "metr-la/graph_sensor_locations.csv", True),
    "pems-bay": ("pems-bay/adj_mx_bay.pkl", "pems-bay/graph_sensor_locations_bay.csv", False),
}


def read_locations(path: Path, with_header: bool) -> dict[str, tuple[float, float]]:
    r"""``sensor id -> (latitude, longitude)``: METR-LA's file is
    ``index,sensor_id,latitude,longitude`` with a header, PEMS-BAY's
    ``id,lat,lon`` without."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if with_header:
        rows = [row[1:] for row in rows[1:]]
    return {row[0]: (float(row[1]), float(row[2])) for row in rows if row}


def graph_arrays(name: str, shared: Path) -> dict[str, np.ndarray]:
    pickle_file, locations_file, with_header = SOURCES[name]
    ids, adj = load_sensor_graph(shared / pickle_file)
    where = read_locations(shared / locations_file, with_header)
    missing = [s for s in ids if s not in where]
    if missing or len(where) != len(ids):
        raise SystemExit(f"{locations_file} does not list the {len(ids)} sensors of "
                         f"{pickle_file} (missing {missing[:5]})")
    source, target = np.nonzero(adj)
    return {
        "sensor_ids": np.array(ids, dtype=f"<U{max(map(len, ids))}"),
        "location": np.array([where[s] for s in ids], dtype=np.float64),
        "source": source.astype(np.int32),
        "target": target.astype(np.int32),
        "weight": adj[source, target].astype(np.float32),
    }


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    r"""An ``.npz`` archive (readable by ``numpy.load(allow_pickle=False)``)
    whose bytes depend on the arrays only: no compression, fixed dates."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for key, value in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(value), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.create_system = 3                      # the same bytes on every platform
            info.external_attr = 0o644 << 16
            archive.writestr(info, member.getvalue())
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=SHARED,
                        help="folder with metr-la/ and pems-bay/ from DCRNN's data/sensor_graph")
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed files instead of writing them")
    args = parser.parse_args(argv)
    stale = []
    for name in SOURCES:
        data = npz_bytes(graph_arrays(name, args.shared))
        path = OUT / f"{name}.npz"
        if args.check:
            if not path.is_file() or path.read_bytes() != data:
                stale.append(str(path))
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        print(f"{path.relative_to(ROOT)}  {len(data)} bytes  sha256 "
              f"{hashlib.sha256(data).hexdigest()}")
    if stale:
        print(f"out of date: {stale}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
