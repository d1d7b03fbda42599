"""Cached runs for the reproduction sections of ``claims.py``.

A reproduction run on real data takes minutes to an hour on one core, so each
run's outcome is kept in ``runs/claims_cache/<key>.json`` (``runs/`` is not
tracked by git) together with its configuration, timing and machine load. A
section can then be filled by several processes (``--no-write``) and its
results file assembled afterwards from the cache; a cached entry is reused
only when its configuration is identical.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "runs" / "claims_cache"


def config_key(cfg: ExperimentConfig) -> str:
    r"""A short stable name of a configuration (strategy, data, hash)."""
    text = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    return f"{cfg.dataset}-{cfg.strategy}-{cfg.partition}-{cfg.clients}-{digest}"


def load_cached(cfg: ExperimentConfig) -> dict[str, Any] | None:
    path = CACHE / f"{config_key(cfg)}.json"
    if not path.exists():
        return None
    entry = json.loads(path.read_text())
    if entry.get("config") != json.loads(json.dumps(cfg.to_dict(), default=str)):
        return None
    return entry


def cached_run(cfg: ExperimentConfig, *, refresh: bool = False, log=print) -> dict[str, Any]:
    r"""Runs ``cfg`` (or returns its cached outcome): the simulator's summary
    (``test`` at the best mean-validation round and ``test_per_client_best``),
    the mean validation / test per round, the final collaboration graph when
    the strategy has one, wall time and load average."""
    if not refresh:
        entry = load_cached(cfg)
        if entry is not None:
            return entry
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    sim = build_simulator(cfg, progress=False)
    sim.run()
    seconds = time.perf_counter() - t0
    graph_fn = getattr(sim.strategy, "collaboration_graph", None)
    graph = graph_fn() if callable(graph_fn) else None
    entry = {
        "config": json.loads(json.dumps(cfg.to_dict(), default=str)),
        "summary": sim.summary(),
        "val": sim.history.mean("val"),
        "test": sim.history.mean("test"),
        "graph": None if graph is None else graph.float().tolist(),
        "seconds": seconds,
        "load": [load_start, os.getloadavg()[0]],
        "torch_threads": torch.get_num_threads(),
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{config_key(cfg)}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry, default=float))
    tmp.replace(path)
    s = entry["summary"]
    log(f"[run] {cfg.strategy} {cfg.partition} N={cfg.clients}: test {s['test']:.4f} "
        f"per-client-best {s['test_per_client_best']:.4f} ({seconds:.0f} s)", flush=True)
    return entry
