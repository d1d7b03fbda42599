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

A section that needs more of a run than its record's summary (weights after
every round, statistics of the final graph, a score per round) keeps a study
record of it, ``claims_runs/<key>-<study>.json`` (:func:`study_run`): the
same settings, summary, timing, torch version, device and CPU instruction
set, and the figures the section reads.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.experiment import ExperimentConfig, RecordCache
from pyg_fedgraph.experiment.records import config_key
from pyg_fedgraph.experiment.runner import plain_settings

__all__ = ["ROOT", "CACHE", "RECORDS", "USED", "CHECKPOINT_SECONDS", "config_key",
           "checkpoint_file", "checkpoint_round", "load_cached", "cached_run", "runs_table",
           "client_accuracies", "pooled_clients", "RUNS_HEADER", "RUNS_RULE", "study_key",
           "load_study", "study_run", "made_with"]

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


def study_key(cfg: ExperimentConfig, study: str) -> str:
    r"""The key of the record of study ``study`` of a run of ``cfg``:
    :func:`config_key` and the study's name (never a plain run's key)."""
    return f"{config_key(cfg)}-{study}"


def load_study(cfg: ExperimentConfig, study: str) -> dict[str, Any] | None:
    r"""The record of study ``study`` of ``cfg`` (see :func:`study_run`), or
    ``None`` when it has none (or the file under its key holds other
    settings)."""
    key = study_key(cfg, study)
    path = RECORDS / f"{key}.json"
    if not path.is_file():
        return None
    entry = json.loads(path.read_text())
    if entry.get("study") != study or entry.get("config") != plain_settings(cfg.to_dict()):
        return None
    USED[key] = entry
    return entry


def study_run(cfg: ExperimentConfig, study: str,
              measure: Callable[[], tuple[Any, dict[str, Any]]], *,
              refresh: bool = False) -> dict[str, Any]:
    r"""The record of study ``study`` of ``cfg``: read back when it exists
    (unless ``refresh``), else measured and stored.

    A study is a run whose section needs more than a run record's summary
    (weights per round, statistics of the final graph, a score per round):
    ``measure()`` trains the run of ``cfg`` its own way and returns the
    simulator and the figures the section reads (plain JSON values). Its
    record, ``claims_runs/<config key>-<study>.json``, holds them with the
    settings, the simulator's summary, timing, machine load, torch version,
    device and CPU instruction set, as a run record does; it is returned as
    read back from the file, so that a section built from it reads the same
    with or without the run. Studies are short (seconds to minutes): no checkpoint."""
    if not refresh:
        entry = load_study(cfg, study)
        if entry is not None:
            return entry
    load_start = os.getloadavg()[0]
    t0, cpu0 = time.perf_counter(), time.process_time()
    sim, figures = measure()
    entry = {
        "config": plain_settings(cfg.to_dict()),
        "study": study,
        "summary": sim.summary(),
        **figures,
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - cpu0,
        "load": [load_start, os.getloadavg()[0]],
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": str(sim.device),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    RECORDS.mkdir(parents=True, exist_ok=True)
    path = RECORDS / f"{study_key(cfg, study)}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry, default=float, sort_keys=True) + "\n")
    tmp.replace(path)
    found = load_study(cfg, study)
    if found is None:  # the settings do not survive JSON: a bug, not a user error
        raise RuntimeError(f"the record {path} does not read back as the settings of {study}")
    return found


def made_with(entries: list[dict[str, Any] | None]) -> str:
    r"""Which torch version(s), device(s) and, on the CPU, vector instruction
    set(s) made these records, e.g. ``"torch 2.13.0+cpu on cpu (AVX512)"``
    (with the count of each where they differ; ``"no records"`` without any)."""
    found: dict[str, int] = {}
    for e in entries:
        if e is not None:
            what = f"torch {e.get('torch', 'unrecorded')} on {e.get('device', 'unrecorded')}"
            if e.get("cpu_capability") and e.get("device") == "cpu":
                what += f" ({e['cpu_capability']})"
            found[what] = found.get(what, 0) + 1
    if len(found) <= 1:
        return next(iter(found), "no records")
    return ", ".join(f"{what} ({n} runs)" for what, n in sorted(found.items()))


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
        derived += f" (study: {e['study']})" if "study" in e else ""
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


