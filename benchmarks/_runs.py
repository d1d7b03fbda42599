"""Cached runs for the reproduction sections of ``claims.py``.

A reproduction run on real data takes minutes to an hour on one core, so each
finished run's outcome is kept as a record,
``benchmarks/results/claims_runs/<key>.json``, together with its
configuration, timing and machine load. The records are committed (a few kB
each): the results files are rebuilt from them in any later checkout, and a
run is never lost with a machine (the first cache lived in the untracked
``runs/`` and went with the machine that made it). A section can be filled by
several processes (``--no-write``) and its results file assembled afterwards
from the records; a record is reused only when its configuration is identical.

A run in progress checkpoints the simulator's whole state
(:meth:`Simulator.state_dict`, written atomically with
:func:`~pyg_fedgraph.simulation.checkpoint.save_checkpoint`, as the CLI's
``--checkpoint-every`` does) into ``runs/claims_cache/<key>.ckpt.pt`` after every
round, at most once per :data:`CHECKPOINT_SECONDS` (checkpoints are large and
stay untracked). Running the same
configuration again, after a crash, a kill or a restart of the machine,
continues from that round and gives the history an uninterrupted run gives;
the checkpoint is removed once the finished entry is stored.
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

from pyg_fedgraph.engine import History, RoundRecord
from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
from pyg_fedgraph.simulation import checkpoint as ckpt_io
from pyg_fedgraph.train.jobs import ClientStart, evaluate_clients

ROOT = Path(__file__).resolve().parent.parent
#: Checkpoints of runs in progress (untracked).
CACHE = ROOT / "runs" / "claims_cache"
#: Records of finished runs (tracked).
RECORDS = ROOT / "benchmarks" / "results" / "claims_runs"
#: Every cached entry read or written by this process, by key (for the
#: results files' table of runs).
USED: dict[str, dict[str, Any]] = {}
#: Least seconds between two checkpoints of a run in progress (0: every round).
CHECKPOINT_SECONDS = 0.0


def config_key(cfg: ExperimentConfig) -> str:
    r"""A short stable name of a configuration (strategy, data, hash)."""
    text = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    return f"{cfg.dataset}-{cfg.strategy}-{cfg.partition}-{cfg.clients}-{digest}"


def checkpoint_file(cfg: ExperimentConfig) -> Path:
    r"""Where a run of ``cfg`` in progress keeps its checkpoint."""
    return CACHE / f"{config_key(cfg)}.ckpt.pt"


def checkpoint_round(cfg: ExperimentConfig) -> int | None:
    r"""The round an interrupted run of ``cfg`` reached (its checkpoint's),
    or ``None`` when there is no checkpoint of that configuration."""
    path = checkpoint_file(cfg)
    if not path.is_file():
        return None
    state = ckpt_io.load_checkpoint(path)
    if state.get("run", {}).get("config") != _plain(cfg):
        return None
    return int(state["round"])


def _plain(cfg: ExperimentConfig) -> dict[str, Any]:
    return json.loads(json.dumps(cfg.to_dict(), default=str))


def load_cached(cfg: ExperimentConfig) -> dict[str, Any] | None:
    path = RECORDS / f"{config_key(cfg)}.json"
    if not path.exists():
        return None
    entry = json.loads(path.read_text())
    if entry.get("config") != _plain(cfg):
        return None
    USED[config_key(cfg)] = entry
    return entry


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


def _clients_at_best(history: History) -> list[float]:
    if not len(history):
        return []
    values = history.records[history.best_index].test[history.metric]
    if history.eval_clients is not None:
        values = values[history.eval_clients]
    return [float(v) for v in values]


def _entry(cfg: ExperimentConfig, summary: dict, history: History, graph, seconds: float,
           load_start: float, **extra) -> dict[str, Any]:
    return {
        "config": _plain(cfg),
        "summary": summary,
        "val": history.mean("val"),
        "test": history.mean("test"),
        # The test value at the best mean-validation round of every client the
        # summary's mean is over (the benign ones under attack; NaN where one was not
        # evaluated): the spread across clients the papers report.
        "test_clients": _clients_at_best(history),
        "graph": None if graph is None else graph.float().tolist(),
        "seconds": seconds,
        "load": [load_start, os.getloadavg()[0]],
        "torch_threads": torch.get_num_threads(),
        # What ran it: results can move with the torch version and the device.
        "torch": torch.__version__,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        **extra,
    }


def _store(cfg: ExperimentConfig, entry: dict[str, Any]) -> None:
    RECORDS.mkdir(parents=True, exist_ok=True)
    path = RECORDS / f"{config_key(cfg)}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry, default=float, sort_keys=True) + "\n")
    tmp.replace(path)


def local_models_callback(history: History):
    r"""A simulator callback that also evaluates every client's own model
    after its last local training (``Simulator.local_params``) and records it
    in ``history``. During a FedAvg run this is, round for round, what
    ``FedAvgFT(finetune_from="local")`` evaluates: its training is FedAvg's
    (same plans, same per-client random streams), only its evaluation differs."""
    def callback(sim, record: RoundRecord) -> None:
        n = sim.dataset.num_clients
        everyone = torch.arange(n)
        start = ClientStart(everyone, everyone, sim.local_params, sim.local_buffers)
        metrics = evaluate_clients(sim.trainer, start, seed=sim.seed, rnd=sim.round,
                                   parallel=sim.parallel)
        history.append(RoundRecord(record.round, record.train_loss, metrics["val"],
                                   metrics["test"], record.seconds, record.num_sampled))
    return callback


def cached_run(cfg: ExperimentConfig, *, refresh: bool = False, log=print,
               local_models_as: ExperimentConfig | None = None) -> dict[str, Any]:
    r"""Runs ``cfg`` (or returns its cached outcome): the simulator's summary
    (``test`` at the best mean-validation round and ``test_per_client_best``),
    the mean validation / test per round, the final collaboration graph when
    the strategy has one, wall time and load average.

    With ``local_models_as`` (a FedAvg-FT configuration with
    ``finetune_from="local"`` identical to ``cfg`` but for the strategy), the
    same run also evaluates the clients' local models each round
    (:func:`local_models_callback`) and caches that history under
    ``local_models_as``."""
    if not refresh:
        entry = load_cached(cfg)
        if entry is not None and (local_models_as is None
                                  or load_cached(local_models_as) is not None):
            return entry
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    sim = build_simulator(cfg, progress=False)
    second = None
    if local_models_as is not None:
        second = History(sim.history.metric, sim.history.higher_is_better,
                         eval_clients=sim.history.eval_clients)
    # Time of the earlier parts of an interrupted run, when it resumes.
    before = {"seconds": 0.0, "cpu_seconds": 0.0}
    ckpt = checkpoint_file(cfg)
    ckpt_io.remove_partial_writes(ckpt)
    if not refresh and ckpt.is_file():
        state = ckpt_io.load_checkpoint(ckpt)
        run = state.get("run", {})
        if run.get("config") == _plain(cfg) and (second is None or "second" in run):
            sim.load_state_dict(state)
            if second is not None:
                second.load_state_dict(run["second"])
            before = {k: float(run[k]) for k in before}
            load_start = float(run.get("load_start", load_start))
            log(f"  resuming {cfg.strategy} at round {sim.round} of {sim.rounds} "
                f"({before['seconds']:.0f} s before)", flush=True)

    def progress(sim_, record: RoundRecord) -> None:
        log(f"  round {record.round}: val {sim_.history.mean('val')[-1]:.4f} test "
            f"{sim_.history.mean('test')[-1]:.4f} "
            f"({before['seconds'] + time.perf_counter() - t0:.0f} s)", flush=True)

    sim.callbacks.append(progress)
    if second is not None:
        sim.callbacks.append(local_models_callback(second))
    last_save = time.perf_counter()
    while sim.round < sim.rounds:
        sim.step()
        now = time.perf_counter()
        if sim.round < sim.rounds and now - last_save >= CHECKPOINT_SECONDS:
            run = {"config": _plain(cfg), "load_start": load_start,
                   "seconds": before["seconds"] + now - t0,
                   "cpu_seconds": before["cpu_seconds"] + time.process_time() - cpu0}
            if second is not None:
                run["second"] = second.state_dict()
            ckpt_io.save_checkpoint({**sim.state_dict(), "run": run}, ckpt)
            last_save = time.perf_counter()
    seconds = before["seconds"] + time.perf_counter() - t0
    cpu_seconds = before["cpu_seconds"] + time.process_time() - cpu0
    graph_fn = getattr(sim.strategy, "collaboration_graph", None)
    graph = graph_fn() if callable(graph_fn) else None
    extra: dict[str, Any] = {}
    conv = getattr(sim.strategy, "conv", None)
    if conv is not None and hasattr(conv, "self_weight"):  # FedAGHN: (mean q, # at 0, # all)
        q = conv.self_weight.detach()
        extra["final_self_weight"] = [float(q.mean()), int((q <= 0).sum()), q.numel()]
    extra["device"] = str(sim.device)
    entry = _entry(cfg, sim.summary(), sim.history, graph, seconds, load_start,
                   cpu_seconds=cpu_seconds, **extra)
    _store(cfg, entry)
    USED[config_key(cfg)] = entry
    if second is not None:
        summary = second.summary()
        summary["test_per_client_best"] = second.test_at_best(protocol="per-client-best")
        if sim.attack is not None:
            summary["test_benign"] = summary["test"]
        _store(local_models_as, _entry(
            local_models_as, summary, second, None, seconds, load_start,
            cpu_seconds=cpu_seconds, derived_from=config_key(cfg), device=str(sim.device),
            note="evaluated inside the FedAvg run (identical training), see "
                 "local_models_callback"))
    ckpt.unlink(missing_ok=True)
    s = entry["summary"]
    log(f"[run] {cfg.strategy} {cfg.partition} N={cfg.clients}: test {s['test']:.4f} "
        f"per-client-best {s['test_per_client_best']:.4f} ({seconds:.0f} s)", flush=True)
    return entry
