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
were (``run_main``)."""
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
