r"""Finished runs kept as records: the cache of long reproduction runs.

A reproduction run on real data takes minutes to hours, so each finished
run's outcome is kept as a record (``<records>/<key>.json``: its settings,
the summary, the mean validation and test metric per round, the clients'
test values, the final collaboration graph, timing, machine load, torch
version, device and the CPU's vector instruction set that torch's kernels
used). A record is reused only when its settings are
identical; its key is :func:`config_key`, a hash of
:meth:`ExperimentConfig.to_dict() <pyg_fedgraph.experiment.ExperimentConfig.to_dict>`
(settings added later leave that dict while at their defaults, so that keys
never move).

A run in progress is carried out by the :class:`~pyg_fedgraph.experiment.Runner`
with a checkpoint, ``<checkpoints>/<key>.ckpt.pt``, written after every round
(at most once per ``checkpoint_seconds``): running the same configuration
again, after a crash, a kill or a restart, continues from that round and
ends with the history an uninterrupted run gives. The checkpoint is the
runner's one format, so a checkpoint of ``pyg-fedgraph run`` resumes here and
the other way round. It is removed once the record is stored.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyg_fedgraph.experiment.runner import RoundProgress, Runner, plain_settings
from pyg_fedgraph.experiment.settings import ExperimentConfig

if TYPE_CHECKING:
    from pyg_fedgraph.engine.history import History, RoundRecord
    from pyg_fedgraph.simulation.simulator import Simulator

__all__ = ["RecordCache", "LocalModelsCallback", "config_key", "RECORD_FIELDS"]

log = logging.getLogger(__name__)

#: The fields of a record (``derived_from`` and ``note`` only in a record made
#: inside another run, ``novel_client_metrics`` only when clients are held out,
#: ``traces`` only with :meth:`RecordCache.run`'s ``traces``, ``final_self_weight``
#: and the like from
#: :meth:`Strategy.diagnostics <pyg_fedgraph.strategies.Strategy.diagnostics>`).
RECORD_FIELDS = ("config", "summary", "val", "test", "test_clients", "test_client_metrics",
                 "graph", "seconds", "cpu_seconds", "load", "torch_threads", "torch", "device",
                 "cpu_capability", "date")


def config_key(cfg: ExperimentConfig) -> str:
    r"""A short stable name of a configuration (dataset, strategy, partition,
    clients, and a hash of all its settings)."""
    text = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    return f"{cfg.dataset}-{cfg.strategy}-{cfg.partition}-{cfg.clients}-{digest}"


class LocalModelsCallback:
    r"""Evaluates every client's own model after its last local training
    (:attr:`Simulator.local_params`) each evaluated round, into a second
    :class:`~pyg_fedgraph.engine.History`. During a FedAvg run this is,
    round for round, what ``FedAvgFT(finetune_from="local")`` evaluates: its
    training is FedAvg's (same plans, same per-client random streams), only
    its evaluation differs, so one run yields both records. Its history is
    saved with the run's checkpoints (a :class:`~pyg_fedgraph.experiment.runner.
    StatefulCallback`)."""

    def __init__(self, history: History) -> None:
        self.history = history

    def __call__(self, sim: Simulator, record: RoundRecord) -> None:
        import torch

        from pyg_fedgraph.engine import RoundRecord
        from pyg_fedgraph.train.jobs import ClientStart, evaluate_clients

        everyone = torch.arange(sim.dataset.num_clients)
        start = ClientStart(everyone, everyone, sim.local_params, sim.local_buffers)
        metrics = evaluate_clients(sim.trainer, start, seed=sim.seed, rnd=sim.round)
        self.history.append(RoundRecord(record.round, record.train_loss, metrics["val"],
                                        metrics["test"], record.seconds, record.num_sampled))

    def state_dict(self) -> dict[str, Any]:
        return self.history.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.load_state_dict(state)


def _clients_at_best(history: History, metric: str | None = None,
                     at: History | None = None) -> list[float]:
    r"""The test values of ``metric`` (default: the primary one) at the best
    round of ``at`` (default: ``history``) of the clients ``history`` is
    over."""
    if not len(history):
        return []
    best = (at or history).best_index
    values = history.records[best].test[metric or history.metric]
    if history.eval_clients is not None:
        values = values[history.eval_clients]
    return [float(v) for v in values]


def _metrics_at_best(history: History, at: History | None = None) -> dict[str, list[float]]:
    r"""Every test metric of :func:`_clients_at_best`, by name."""
    if not len(history):
        return {}
    return {name: _clients_at_best(history, name, at)
            for name in history.records[0].test}


class RecordCache:
    r"""Records of finished runs in ``records`` and checkpoints of runs in
    progress in ``checkpoints`` (see the module docstring).

    Args:
        records (str or pathlib.Path): the folder of the records (tracked in
            a repository: a few kB each).
        checkpoints (str or pathlib.Path): the folder of the checkpoints
            (large; untracked).
        checkpoint_seconds (float, optional): least seconds between two
            checkpoints of a run (``0.0``: after every round) (default: ``0.0``).
        progress (RoundProgress, optional): the display of the runs
            (default: a line per evaluated round on standard error).
    """

    def __init__(self, records: str | Path, checkpoints: str | Path, *,
                 checkpoint_seconds: float = 0.0, progress: RoundProgress | None = None) -> None:
        self.records = Path(records)
        self.checkpoints = Path(checkpoints)
        self.checkpoint_seconds = checkpoint_seconds
        self.progress = progress or RoundProgress(terminal=False)
        #: Every record read or written by this cache, by key (for a table of runs).
        self.used: dict[str, dict[str, Any]] = {}

    def record_path(self, cfg: ExperimentConfig) -> Path:
        return self.records / f"{config_key(cfg)}.json"

    def checkpoint_path(self, cfg: ExperimentConfig) -> Path:
        r"""Where a run of ``cfg`` in progress keeps its checkpoint."""
        return self.checkpoints / f"{config_key(cfg)}.ckpt.pt"

    def load(self, cfg: ExperimentConfig) -> dict[str, Any] | None:
        r"""The record of ``cfg``, or ``None`` when it has none (or the file
        under its key holds other settings)."""
        path = self.record_path(cfg)
        if not path.exists():
            return None
        entry = json.loads(path.read_text())
        if entry.get("config") != plain_settings(cfg.to_dict()):
            return None
        self.used[config_key(cfg)] = entry
        return entry

    def checkpoint_round(self, cfg: ExperimentConfig) -> int | None:
        r"""The round an interrupted run of ``cfg`` reached (its checkpoint's),
        or ``None`` when there is no checkpoint of that configuration."""
        from pyg_fedgraph.simulation.checkpoint import load_checkpoint

        path = self.checkpoint_path(cfg)
        if not path.is_file():
            return None
        state = load_checkpoint(path)
        if plain_settings(state.get("run", {}).get("config", {})) != plain_settings(
                cfg.to_dict()):
            return None
        return int(state["round"])

    def _store(self, cfg: ExperimentConfig, entry: dict[str, Any]) -> None:
        self.records.mkdir(parents=True, exist_ok=True)
        path = self.record_path(cfg)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry, default=float, sort_keys=True) + "\n")
        tmp.replace(path)
        self.used[config_key(cfg)] = entry

    @staticmethod
    def _entry(cfg: ExperimentConfig, summary: dict, history: History, graph: Any,
               seconds: float, cpu_seconds: float, load_start: float, device: str,
               novel: History | None = None, **extra: Any) -> dict[str, Any]:
        import torch

        if novel is not None and len(novel):
            # The held-out clients at the round the summary reports (its test_novel).
            extra["novel_client_metrics"] = _metrics_at_best(novel, at=history)
        return {
            "config": plain_settings(cfg.to_dict()),
            "summary": summary,
            "val": history.mean("val"),
            "test": history.mean("test"),
            # The test value at the best mean-validation round of every client the
            # summary's mean is over (the benign ones under attack; NaN where one was
            # not evaluated): the spread across clients the papers report.
            "test_clients": _clients_at_best(history),
            # Every metric of those clients at that round (the primary one too), e.g.
            # a forecast's errors in mph per horizon beside its normalized MSE.
            "test_client_metrics": _metrics_at_best(history),
            "graph": None if graph is None else graph.float().tolist(),
            "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "load": [load_start, os.getloadavg()[0]],
            "torch_threads": torch.get_num_threads(),
            # What ran it: results can move with the torch version and the device, and on
            # the CPU with the vector instructions torch's kernels use (AVX2, AVX512, ...:
            # the same code and torch give other numbers on a CPU without AVX-512).
            "torch": torch.__version__,
            "device": device,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            **extra,
        }

    @staticmethod
    def study_key(cfg: ExperimentConfig, study: str) -> str:
        r"""The key of the record of study ``study`` of a run of ``cfg``:
        :func:`config_key` and the study's name (never a plain run's key)."""
        return f"{config_key(cfg)}-{study}"

    def load_study(self, cfg: ExperimentConfig, study: str) -> dict[str, Any] | None:
        r"""The record of study ``study`` of ``cfg`` (see :meth:`run_study`),
        or ``None`` when it has none (or the file under its key holds other
        settings)."""
        key = self.study_key(cfg, study)
        path = self.records / f"{key}.json"
        if not path.is_file():
            return None
        entry = json.loads(path.read_text())
        if entry.get("study") != study or entry.get("config") != plain_settings(cfg.to_dict()):
            return None
        self.used[key] = entry
        return entry

    def run_study(self, cfg: ExperimentConfig, study: str,
                  measure: Callable[[], tuple[Simulator, dict[str, Any]]], *,
                  refresh: bool = False) -> dict[str, Any]:
        r"""The record of study ``study`` of ``cfg``: read back when it
        exists (unless ``refresh``), else measured and stored.

        A study is a run whose reader needs more than a run record's summary
        (weights per round, statistics of the final graph, a score per round):
        ``measure()`` trains the run of ``cfg`` its own way and returns the
        simulator and the figures to keep (plain JSON values). The record
        holds them with the settings, the simulator's summary, timing,
        machine load, torch version, device and CPU instruction set, as a run
        record does; it is returned as read back, so that a reader sees the
        same with or without the run. Studies are short (seconds to
        minutes): no checkpoint."""
        import time

        import torch

        if not refresh:
            entry = self.load_study(cfg, study)
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
        self.records.mkdir(parents=True, exist_ok=True)
        path = self.records / f"{self.study_key(cfg, study)}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry, default=float, sort_keys=True) + "\n")
        tmp.replace(path)
        found = self.load_study(cfg, study)
        if found is None:  # the settings do not survive JSON: a bug, not a user error
            raise RuntimeError(f"the record {path} does not read back as the settings of "
                               f"{study}")
        return found

    def run(self, cfg: ExperimentConfig, *, refresh: bool = False,
            local_models_as: ExperimentConfig | None = None,
            traces: dict[str, Any] | None = None) -> dict[str, Any]:
        r"""The record of ``cfg``: read back when it exists (unless
        ``refresh``), else run (or continued from its checkpoint) and stored.

        With ``local_models_as`` (a FedAvg-FT configuration with
        ``finetune_from="local"`` identical to ``cfg`` but for the strategy),
        the same run also evaluates the clients' local models each round
        (:class:`LocalModelsCallback`) and stores that history as the record
        of ``local_models_as``. ``traces`` are further round callbacks with
        state (:class:`~pyg_fedgraph.experiment.runner.StatefulCallback`,
        kept by the checkpoints), such as a benchmark's per-round record of
        the clients' grouping: the record keeps each one's final
        ``state_dict()`` under ``traces[name]``."""
        from pyg_fedgraph.engine import History
        from pyg_fedgraph.experiment.build import build_simulator

        if not refresh:
            entry = self.load(cfg)
            if entry is not None and (local_models_as is None
                                      or self.load(local_models_as) is not None):
                return entry
        sim = build_simulator(cfg)
        callbacks: dict[str, Any] = dict(traces or {})
        second = None
        if local_models_as is not None:
            second = History(sim.history.metric, sim.history.higher_is_better,
                             eval_clients=sim.history.eval_clients)
            callbacks["local_models"] = LocalModelsCallback(second)
        checkpoint = self.checkpoint_path(cfg)
        runner = Runner(sim, name=f"{cfg.strategy} {cfg.partition or ''}".strip(),
                        checkpoint=checkpoint, checkpoint_seconds=self.checkpoint_seconds,
                        settings=cfg.to_dict(), progress=self.progress, callbacks=callbacks)
        if not refresh and runner.resume(strict=False):
            log.warning("resuming %s at round %d of %d (%.0f s before)", cfg.strategy,
                        sim.round, sim.rounds, runner.seconds_before)
        result = runner.run()
        if result.status != "finished":
            raise RuntimeError(f"the run of {config_key(cfg)} was stopped at round "
                               f"{result.round}; its checkpoint is {result.checkpoint}")
        device = str(sim.device)
        extra = dict(sim.strategy.diagnostics())
        if traces:
            extra["traces"] = {name: trace.state_dict() for name, trace in traces.items()}
        entry = self._entry(cfg, sim.summary(), sim.history, sim.strategy.collaboration_graph(),
                            result.seconds, result.cpu_seconds, result.load_start, device,
                            novel=sim.novel_history, **extra)
        self._store(cfg, entry)
        if second is not None and local_models_as is not None:
            summary = second.summary()
            summary["test_per_client_best"] = second.test_at_best(protocol="per-client-best")
            if sim.attack is not None:
                summary["test_benign"] = summary["test"]
            self._store(local_models_as, self._entry(
                local_models_as, summary, second, None, result.seconds, result.cpu_seconds,
                result.load_start, device, derived_from=config_key(cfg),
                note="evaluated inside the FedAvg run (identical training), see "
                     "LocalModelsCallback"))
        checkpoint.unlink(missing_ok=True)
        s = entry["summary"]
        log.warning("[run] %s %s N=%s: test %.4f per-client-best %.4f (%.0f s)", cfg.strategy,
                    cfg.partition, cfg.clients, s["test"], s["test_per_client_best"],
                    result.seconds)
        return entry
