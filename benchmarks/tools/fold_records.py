"""Folds run records of the earlier format (one ``<key>.json`` file each) into the record
tables (``<table>.jsonl``) of their folder and deletes the files, with
:meth:`pyg_fedgraph.experiment.RecordCache.fold`: each file is deleted only once its record
reads back from its table equal to it. Running it again does nothing. With ``--take-from``,
first copies in the records another checkout's folder holds and this one lacks
(:meth:`~pyg_fedgraph.experiment.RecordCache.take`): the records of a worktree pinned for
long runs.

Usage (from the repository root; default: the folders of the reproduction scripts)::

    python benchmarks/tools/fold_records.py [FOLDER ...]
    python benchmarks/tools/fold_records.py FOLDER --take-from OTHER_FOLDER
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
    parser.add_argument("--take-from", type=Path, default=None, metavar="OTHER",
                        help="first copy in the records of OTHER (another checkout's record "
                             "folder) that FOLDER lacks; needs exactly one FOLDER")
    args = parser.parse_args(argv)
    if args.take_from is not None and len(args.folders) != 1:
        parser.error("--take-from needs exactly one FOLDER")
    for folder in args.folders:
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder")
        cache = RecordCache(folder, folder / "unused-checkpoints")
        if args.take_from is not None:
            if not args.take_from.is_dir():
                parser.error(f"{args.take_from} is not a folder")
            taken = cache.take(args.take_from)
            print(f"{folder}: {len(taken)} records taken from {args.take_from}")
        folded = cache.fold()
        tables = sorted(folder.glob("*.jsonl"))
        counts = ", ".join(f"{t.name} {sum(1 for _ in t.open())}" for t in tables)
        print(f"{folder}: {len(folded)} records folded or rewritten; tables: {counts or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
