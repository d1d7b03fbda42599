"""Cached runs for the reproduction sections of ``claims.py``: the
library's :class:`~pyg_fedgraph.experiment.RecordCache` on this repository's
folders, and the tables the results files show of them.

Each finished run's outcome is a record,
``benchmarks/results/claims_runs/<key>.json`` (committed: the results files
are rebuilt from them in any later checkout, and a run is never lost with a
machine); a run in progress is checkpointed by the library's runner into
``runs/claims_cache/<key>.ckpt.pt`` after every round (untracked), so that
running the same configuration again continues where it stopped and ends
with the history an uninterrupted run gives. See
:mod:`pyg_fedgraph.experiment.records`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.experiment import ExperimentConfig, RecordCache
from pyg_fedgraph.experiment.records import config_key

__all__ = ["ROOT", "CACHE", "RECORDS", "USED", "CHECKPOINT_SECONDS", "config_key",
           "checkpoint_file", "checkpoint_round", "load_cached", "cached_run", "runs_table",
           "client_accuracies", "pooled_clients", "RUNS_HEADER", "RUNS_RULE"]

ROOT = Path(__file__).resolve().parent.parent
#: Checkpoints of runs in progress (untracked).
CACHE = ROOT / "runs" / "claims_cache"
#: Records of finished runs (tracked).
RECORDS = ROOT / "benchmarks" / "results" / "claims_runs"
#: Every record read or written by this process, by key (for the results files'
#: table of runs).
USED: dict[str, dict[str, Any]] = {}
#: Least seconds between two checkpoints of a run in progress (0: every round).
CHECKPOINT_SECONDS = 0.0


def _cache() -> RecordCache:
    cache = RecordCache(RECORDS, CACHE, checkpoint_seconds=CHECKPOINT_SECONDS)
    cache.used = USED
    return cache


def checkpoint_file(cfg: ExperimentConfig) -> Path:
    r"""Where a run of ``cfg`` in progress keeps its checkpoint."""
    return _cache().checkpoint_path(cfg)


def checkpoint_round(cfg: ExperimentConfig) -> int | None:
    r"""The round an interrupted run of ``cfg`` reached, or ``None``."""
    return _cache().checkpoint_round(cfg)


def load_cached(cfg: ExperimentConfig) -> dict[str, Any] | None:
    r"""The record of ``cfg``, or ``None``."""
    return _cache().load(cfg)


def cached_run(cfg: ExperimentConfig, *, refresh: bool = False,
               local_models_as: ExperimentConfig | None = None) -> dict[str, Any]:
    r"""The record of ``cfg``, run (or continued) first when there is none
    (see :meth:`RecordCache.run <pyg_fedgraph.experiment.RecordCache.run>`)."""
    return _cache().run(cfg, refresh=refresh, local_models_as=local_models_as)


#: The header of :func:`runs_table` (``claims.py`` joins tables of runs by it).
RUNS_HEADER = "| run | rounds | wall (s) | CPU (s) | load start / end | finished |"
#: The table's alignment row, below :data:`RUNS_HEADER`.
RUNS_RULE = "|---|---:|---:|---:|---|---|"


def runs_table() -> list[str]:
    r"""Markdown table of the runs in :data:`USED`: what ran, wall and CPU
    time, load average at its start and end, date."""
    rows = [RUNS_HEADER, RUNS_RULE]
    for _key, e in sorted(USED.items()):
        c = e["config"]
        what = " ".join(str(v) for v in (c["dataset"], c["strategy"], c.get("partition") or "",
                                         f"N={c['clients']}" if c.get("clients") else "",
                                         f"attack={c['attack']}" if c.get("attack") else "",
                                         " ".join(f"{k}={v}" for k, v in c["overrides"].items()
                                                  if k in ("alpha_rule", "hn_rule")))
                       if v)
        cpu = e.get("cpu_seconds")
        derived = " (inside the run " + e["derived_from"] + ")" if "derived_from" in e else ""
        rows.append(f"| {what}{derived} | {c['rounds']} | {e['seconds']:.0f} | "
                    f"{'-' if cpu is None else f'{cpu:.0f}'} | {e['load'][0]:.1f} / "
                    f"{e['load'][1]:.1f} | {e['date']} |")
    return rows


def client_accuracies(entry: dict[str, Any]) -> torch.Tensor:
    r"""The test value, in percent, of every client a run record's summary
    is over (its ``test_clients``, those not evaluated dropped), float64."""
    acc = torch.tensor(entry["test_clients"], dtype=torch.float64)
    return 100 * acc[~acc.isnan()]


def pooled_clients(entries: list[dict[str, Any]]) -> tuple[float, float]:
    r"""Mean and population standard deviation, in points, of the clients of
    all run records ``entries`` taken together."""
    acc = torch.cat([client_accuracies(e) for e in entries])
    return float(acc.mean()), float(acc.std(unbiased=False))


