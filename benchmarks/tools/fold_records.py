"""Folds run records of the earlier format (one ``<key>.json`` file each) into the record
tables (``<table>.jsonl``) of their folder and deletes the files, with
:meth:`pyg_fedgraph.experiment.RecordCache.fold`: each file is deleted only once its record
reads back from its table equal to it. Running it again does nothing.

Usage (from the repository root; default: the folders of the reproduction scripts)::

    python benchmarks/tools/fold_records.py [FOLDER ...]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from pyg_fedgraph.experiment import RecordCache

RESULTS = Path(__file__).resolve().parents[1] / "results"
FOLDERS = (RESULTS / "claims_runs", RESULTS / "graph_classification_runs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, default=list(FOLDERS),
                        help="record folders (default: claims_runs and "
                             "graph_classification_runs)")
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder")
        cache = RecordCache(folder, folder / "unused-checkpoints")
        folded = cache.fold()
        tables = sorted(folder.glob("*.jsonl"))
        counts = ", ".join(f"{t.name} {sum(1 for _ in t.open())}" for t in tables)
        print(f"{folder}: {len(folded)} records folded or rewritten; tables: {counts or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
