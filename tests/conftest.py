r"""Settings of the whole suite.

On a machine with CUDA the suite runs with torch's deterministic algorithms
(what ``--deterministic`` sets): many tests assert that a run repeats or
resumes bit for bit, which CUDA's default kernels (atomic scatter sums, cuDNN's
algorithm choice) do not promise. On the CPU nothing changes: its kernels are
deterministic already, and the suite runs as users run.

The fixtures of the tests of the benchmark scripts (``benchmarks/``) live here
too: a record cache in a temporary folder (``runs``), ``claims.py`` reading it
(``claims``), and a call of a script's
``main`` that leaves torch's thread count and the package's log level as they
were (``run_main``); and ``fragment_folder``, the traffic fragments of
``../shared`` or a skip naming the one missing, for the tests in any folder."""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

#: The benchmark scripts' folder.
BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
#: DCRNN's processed npz fragments in ../shared/data (one level further up from a worktree).
FRAGMENTS = next((p / "shared" / "data" for p in Path(__file__).resolve().parents
                  if (p / "shared" / "data").is_dir()),
                 Path("../shared/data")) / "traffic-fragments" / "dcrnn-pytorch-modified"
#: The PEMS-BAY fragment's five highway groups, each a folder of DCRNN's npz files.
PEMS_BAY_GROUPS = ("CA85", "CA87", "I280", "I680", "I880")

if torch.cuda.is_available():
    # cuBLAS reads it when it starts; deterministic matrix products need it.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)


@pytest.fixture
def runs(monkeypatch, tmp_path):
    r"""The benchmarks' record cache, its folders in ``tmp_path``; the scripts of
    ``benchmarks/reproduce`` and ``benchmarks/perf`` importable by name."""
    from pyg_fedgraph.experiment import RecordCache

    monkeypatch.syspath_prepend(str(BENCH / "reproduce"))
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    return RecordCache(tmp_path / "records", tmp_path / "cache")


@pytest.fixture
def claims(runs, monkeypatch):
    r"""``benchmarks/reproduce/claims.py`` as a module, its record cache
    :func:`runs` and no pending runs of the queue; forgotten afterwards."""
    import importlib
    import sys

    module = importlib.import_module("claims")
    monkeypatch.setattr(module, "PENDING", {})
    monkeypatch.setattr(module, "RUNS", runs)
    yield module
    sys.modules.pop("claims", None)


@pytest.fixture
def run_main() -> Callable[[Any, list[str]], Any]:
    r"""``run_main(module, argv)``: ``module.main(argv)`` (a benchmark script's),
    leaving torch's thread count and the package's log level as they were
    (the scripts' ``main`` sets both); returns what ``main`` returns."""

    def call(module: Any, argv: list[str]) -> Any:
        threads, level = torch.get_num_threads(), logging.getLogger("pyg_fedgraph").level
        try:
            return module.main(argv)
        finally:
            torch.set_num_threads(threads)
            logging.getLogger("pyg_fedgraph").setLevel(level)

    return call


@pytest.fixture
def fragment_folder() -> Callable[[str], Path]:
    r"""``fragment_folder("METR-LA")`` or ``("PEMS-BAY")``: that fragment's folder, or a
    skip naming the first file missing. A copy of ../shared may hold one dataset's fragment
    and not the other's, or only some of PEMS-BAY's groups (then its federation and its
    sigma are not the ones the tests expect)."""
    def folder_of(folder: str) -> Path:
        path = FRAGMENTS / folder
        parts = [path / g for g in PEMS_BAY_GROUPS] if folder == "PEMS-BAY" else [path]
        missing = [p for p in parts if not (p / "train.npz").exists()]
        if missing:
            pytest.skip(f"{missing[0]}/train.npz not present")
        return path
    return folder_of
