r"""Devices, chunked client parallelism, execution per model family, and scale (issue 17).

Every row is measured side by side in one run; the script asserts nothing.

(a) **chunk**: the papers' simple CNN on random 28x28 inputs, local training
    of ``--chunk-clients`` clients with ``parallel_clients`` = 1, 3 and all
    (``execution="vmap"``, the batched computation that chunking bounds):
    seconds, peak memory, and the largest parameter difference to the
    all-at-once run. Memory on CUDA: ``torch.cuda.max_memory_allocated``
    during training minus what was allocated before. On the CPU every row
    runs in its own process and reports how far training raised the
    process's peak resident set size (``VmHWM``; the high-water mark is
    first lifted to the current usage, so set-up temporaries do not hide it)
    and the process's whole peak: what the operating system had to give,
    allocator caching included, not torch's live tensors.
(b) **execution**: per device, every candidate of
    :data:`pyg_fedgraph.train.execution.EXECUTION_TABLE` timed side by side
    (alternating, median of ``--repeats``): ``vmap`` and ``loop`` (the two
    executions of :class:`~pyg_fedgraph.train.ClientTrainer`) and the
    reference per-client loop with :class:`torch.optim.SGD`
    (``parallel=False``, the way PFLlib and FL-bench train), with the
    execution ``execution="auto"`` picks. CPU cases: 60 FL-60 MLP clients (one
    epoch), 10 simple-CNN clients (batch 64, 28x28, random data), 20 GRU
    forecasters (hidden 100, synthetic windows). On CUDA also 100 simple-CNN
    clients (the goal: batched at least 10x faster than the reference loop).
(c) **scale**: FL-60 with N = 1,000 and 10,000 clients, sample fraction 0.1,
    the sparse ``graph="knn"`` prior graph, FedAvg and pFedGraph, on the CPU
    with the client table on the host: each in its own process; seconds per
    round (rounds include the evaluation of every client) and the process's
    peak resident set size (``VmHWM``: see :mod:`pyg_fedgraph.utils.timing`
    for why not ``ru_maxrss``).
(d) **report**: in the same processes, the seconds of
    :func:`~pyg_fedgraph.simulation.report.write_run` (the files the command
    line writes: config, history, clients, summary, learning curve, the
    collaboration matrix files and pictures) against the seconds of the rounds.
(e) **GPU goals** (CUDA only): one METR-LA round's local training (207 GRU
    clients, hidden 100, one local epoch of the full training split, batch 64)
    on CUDA against one CPU thread. METR-LA's speeds are not on these machines:
    the data are synthetic speeds of the real shape (34,272 steps) on the real
    road graph (:func:`~pyg_fedgraph.datasets.metr_la` without ``metr-la.h5``),
    or the real ones when ``--metr-la-root`` holds them. The CPU side trains
    ``--metr-cpu-steps`` steps and is scaled to the epoch's steps (said so).
(f) **deterministic** (CUDA only): seconds per round of FedAvg, pFedGAT and
    pFedGraph (digits, simple CNN, 20 clients) with and without torch's
    deterministic algorithms (``--deterministic``), and whether two runs of
    each end at the same parameters bit for bit.

``--gpu-checks`` runs instead the checks only a GPU can make, as one short run
for a lent GPU session (``results/gpu_checks.md``): the METR-LA epoch of row
(e) eager and through ``torch.compile(mode="reduce-overhead")``, and GNN
clients on CUDA (GCN and GAT on ``planted-graphs``: ``vmap``, ``loop`` and the
per-client reference loop, side by side). It keeps its record after each case,
so that a run cut short keeps what it measured.

Each results file is rebuilt from its measurements, kept as one line of
``perf_records.jsonl`` beside it (``--report-only``: nothing is measured); its
"### Reading" blocks are written by hand and kept.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/perf/devices.py           # writes results/devices.md
    OMP_NUM_THREADS=1 python benchmarks/perf/devices.py --quick   # small, prints only
    python benchmarks/perf/devices.py --device cpu cuda            # both, on a GPU machine
    python benchmarks/perf/devices.py --device cuda --compile reduce-overhead
    python benchmarks/perf/devices.py --gpu-checks --out benchmarks/results/gpu_checks_h100.md
    python benchmarks/perf/devices.py --report-only [--gpu-checks] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import torch

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.datasets import synthetic_windows
from pyg_fedgraph.experiment.reporting import (
    RECORDS_NAME,
    machine_lines,
    measured_report,
    write_measured,
)
from pyg_fedgraph.models import MLP, GRUForecaster, SimpleCNN
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.execution import (
    EXECUTION_TABLE,
    CompileMode,
    choose_execution,
    model_family,
)
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.utils.timing import current_rss, peak_rss, synchronize, timed

SCRIPT = "benchmarks/perf/devices.py"
RESULTS = Path(__file__).resolve().parents[1] / "results"
NO_GPU = ("not measured: the machine of this run has no CUDA device (rows of one H100: "
          "`devices_h100.md`)")


# ------------------------------------------------------------------ data
def random_images(num_clients: int, samples: int, size: int = 28, classes: int = 10,
                  seed: int = 0) -> FederatedDataset:
    r"""Random 1x``size``x``size`` images and labels, ``samples`` per client
    (the shape of (Fashion-)MNIST; the values are random)."""
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for split, count in (("train", samples), ("val", 16), ("test", 16)):
        x = torch.randn(num_clients, count, 1, size, size, generator=gen)
        y = torch.randint(classes, (num_clients, count), generator=gen)
        splits[split] = ClientSplit(x, y, torch.full((num_clients,), count, dtype=torch.long))
    return FederatedDataset("random-28x28", "classification", splits, num_classes=classes,
                            info={"synthetic": True})


@dataclass
class Case:
    name: str
    make_model: Callable[[], torch.nn.Module]
    make_data: Callable[[], FederatedDataset]
    config: LocalConfig
    note: str


def cnn_case(clients: int, steps: int) -> Case:
    return Case(f"simple CNN, {clients} clients", lambda: SimpleCNN(1, 10, 28),
                lambda: random_images(clients, 128),
                LocalConfig(lr=0.01, momentum=0.9, batch_size=64, epochs=None, steps=steps),
                f"SimpleCNN(1, 10, 28); random 1x28x28 inputs; {steps} local steps of batch 64")


def cases(device: torch.device, quick: bool, goals: bool) -> list[Case]:
    from pyg_fedgraph.datasets import load_dataset
    out = [
        Case("FL-60 MLP, 60 clients", lambda: MLP(2, 16, 2, num_layers=3),
             lambda: load_dataset("fl60", num_clients=60),
             LocalConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=1),
             "MLP(2, 16, 2, 3 layers); FL-60 data; 1 local epoch of batch 16"),
        cnn_case(10, 1 if quick else 3),
        Case(f"GRU, {8 if quick else 20} clients",
             lambda: GRUForecaster(in_channels=2, hidden_channels=100, out_steps=12),
             lambda: synthetic_windows(8 if quick else 20, 256),
             LocalConfig(lr=0.01, momentum=0.9, batch_size=64, epochs=None,
                         steps=2 if quick else 3),
             "GRUForecaster(2, 100); synthetic (12, 2) windows; "
             f"{2 if quick else 3} local steps of batch 64"),
    ]
    if goals:
        out.append(cnn_case(20 if quick else 100, 2 if quick else 5))
    return out


# ------------------------------------------------------------ timing helpers
def train_once(trainer: ClientTrainer, params: torch.Tensor, parallel: bool = True,
               seed: int = 0, config: LocalConfig | None = None
               ) -> tuple[float, torch.Tensor]:
    r"""Seconds and parameters of one local training of all clients of
    ``params`` (``config``: instead of the trainer's)."""
    clients = torch.arange(params.size(0))
    gen = torch.Generator().manual_seed(seed)  # the same batch schedule for every path
    trainer.parallel = parallel
    seconds, out = timed(lambda: trainer.train(clients, params, generator=gen, config=config),
                         trainer.device)
    return seconds, out.params


# ------------------------------------------------------------ (b) execution
def execution_rows(device: torch.device, quick: bool, repeats: int,
                   goals: bool, compile: bool | CompileMode = False) -> list[dict[str, Any]]:
    rows = []
    for case in cases(device, quick, goals):
        torch.manual_seed(0)
        model = case.make_model()
        data = case.make_data()
        trainers = {ex: ClientTrainer(model, data, config=case.config, device=device,
                                      execution=ex) for ex in ("vmap", "loop")}
        n = data.num_clients
        params = trainers["vmap"].layout.flatten(model).to(device).repeat(n, 1)
        paths = {"vmap": (trainers["vmap"], True), "loop": (trainers["loop"], True),
                 "reference": (trainers["loop"], False)}
        compile_s = None
        finals = {}  # the parameters each path ends at, from its untimed warm-up
        if compile:  # the vmap execution through torch.compile; its warm-up compiles
            paths["compiled"] = (ClientTrainer(model, data, config=case.config, device=device,
                                               execution="vmap", compile=compile), True)
            compile_s, finals["compiled"] = train_once(paths["compiled"][0], params)
        finals.update({k: train_once(tr, params, par)[1] for k, (tr, par) in paths.items()
                       if k not in finals})
        times: dict[str, list[float]] = {k: [] for k in paths}
        for _ in range(repeats):
            for k, (tr, par) in paths.items():
                times[k].append(train_once(tr, params, par)[0])
        med = {k: statistics.median(v) for k, v in times.items()}
        diff = max(float((finals[k] - finals["reference"]).abs().max()) for k in ("vmap", "loop"))
        auto = choose_execution(trainers["vmap"].model, device, "auto")
        fastest = min(("vmap", "loop"), key=lambda k: med[k])
        rows.append({"device": str(device), "case": case.name, "family": model_family(model),
                     "vmap s": med["vmap"], "loop s": med["loop"], "reference s":
                     med["reference"], "loop / vmap": med["loop"] / med["vmap"],
                     "reference / vmap": med["reference"] / med["vmap"],
                     "reference / auto": med["reference"] / med[auto], "auto": auto,
                     "fastest": fastest, "max diff": diff, "note": case.note,
                     "compiled s": med.get("compiled"), "compile s": compile_s,
                     "compile mode": compile or None,
                     "vmap / compiled": (med["vmap"] / med["compiled"] if "compiled" in med
                                         else None),
                     "compiled diff": (float((finals["compiled"] - finals["reference"]).abs()
                                             .max()) if "compiled" in finals else None),
                     "spread": {k: (min(v), max(v)) for k, v in times.items()}})
        print(f"[execution] {device} {case.name}: vmap {med['vmap']:.3g} s, loop "
              f"{med['loop']:.3g} s, reference {med['reference']:.3g} s, auto={auto}, "
              f"max diff {diff:.1e}", flush=True)
    return rows


# ---------------------------------------------------------------- (a) chunk
def chunk_measure(device: torch.device, clients: int, steps: int, chunk: int | None,
                  save: Path | None) -> dict[str, Any]:
    r"""One chunk row in this process: seconds (the second of two identical
    trainings) and the memory one of them raised (on the CPU the first; on
    CUDA the second, timed one, after the first allocated the libraries'
    workspaces)."""
    case = cnn_case(clients, steps)
    torch.manual_seed(0)
    model = case.make_model()
    trainer = ClientTrainer(model, case.make_data(), config=case.config, device=device,
                            parallel_clients=chunk, execution="vmap")
    params = trainer.layout.flatten(model).to(device).repeat(clients, 1)
    if device.type == "cuda":
        # One untimed training first: the process's first one also allocates cuBLAS's and
        # cuDNN's workspaces, which would be charged to whichever chunk size runs first.
        train_once(trainer, params)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        seconds, out = train_once(trainer, params)
        extra = torch.cuda.max_memory_allocated(device) - before
    else:
        # ru_maxrss is a high-water mark that set-up temporaries may have raised:
        # lift the current usage up to it, so that what training adds shows.
        ballast = torch.ones(max(peak_rss() - current_rss(), 0) // 4 + 1)
        before = peak_rss()
        _, out = train_once(trainer, params)
        extra = peak_rss() - before
        del ballast
        seconds, _ = train_once(trainer, params)
    if save is not None:
        torch.save(out.cpu(), save)
    return {"seconds": seconds, "extra_bytes": extra, "D": trainer.layout.num_params,
            "peak_bytes": peak_rss()}


def _child(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    r"""Runs ``kind`` in a fresh process and returns its JSON line."""
    proc = subprocess.run([sys.executable, __file__, "--child", kind, json.dumps(args)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def chunk_rows(device: torch.device, clients: int, steps: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        finals = {}
        for chunk in (1, 3, None):
            label = "all" if chunk is None else str(chunk)
            save = Path(tmp) / f"params_{label}.pt"
            if device.type == "cuda":
                res = chunk_measure(device, clients, steps, chunk, save)
                res["peak_bytes"] = None
            else:
                res = _child("chunk", {"device": str(device), "clients": clients,
                                       "steps": steps, "chunk": chunk, "save": str(save)})
            rows.append({"device": str(device), "parallel_clients": label, "clients": clients,
                         "seconds": res.get("seconds"), "extra MiB": _mib(res.get("extra_bytes")),
                         "process peak MiB": _mib(res.get("peak_bytes")),
                         "error": res.get("error", "")})
            if save.exists():
                finals[label] = torch.load(save)
            print(f"[chunk] {device} parallel_clients={label}: {res}", flush=True)
        for row in rows:
            p = finals.get(row["parallel_clients"])
            row["max diff"] = (float((p - finals["all"]).abs().max())
                               if p is not None and "all" in finals else None)
    return rows


# ------------------------------------------------------------ (c, d) scale
def scale_measure(strategy: str, clients: int, rounds: int, write: bool) -> dict[str, Any]:
    from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
    from pyg_fedgraph.simulation.report import write_run

    t0 = time.perf_counter()
    cfg = ExperimentConfig(dataset="fl60", strategy=strategy, clients=clients, device="cpu",
                           overrides={"sample_fraction": 0.1, "data.graph": "knn",
                                      "state_device": "cpu"})
    sim = build_simulator(cfg)
    build = time.perf_counter() - t0
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        sim.step()
        times.append(time.perf_counter() - t0)
    out: dict[str, Any] = {"build_s": build, "round_s": times, "D": sim.layout.num_params,
                           "sampled": int(round(0.1 * clients))}
    if write:
        summary = {"strategy": strategy, "dataset": "fl60", **sim.summary(),
                   "seconds": sum(times), "num_clients": clients}
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            write_run(Path(tmp), sim.history, cfg.to_dict(), summary,
                      collaboration=sim.strategy.collaboration_graph(),
                      groups=sim.dataset.client_labels, prior_edge_index=sim.dataset.edge_index)
            out["write_s"] = time.perf_counter() - t0
            out["files"] = sorted(p.name for p in Path(tmp).iterdir())
    out["peak_bytes"] = peak_rss()
    return out


def scale_rows(sizes: list[int], rounds: int) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        for strategy in ("fedavg", "pfedgraph"):
            res = _child("scale", {"strategy": strategy, "clients": n, "rounds": rounds,
                                   "write": True})
            r = res.get("round_s", [])
            row = {"N": n, "strategy": strategy, "sampled": res.get("sampled"),
                   "build s": res.get("build_s"), "s/round": statistics.mean(r) if r else None,
                   "round range": (min(r), max(r)) if r else None, "rounds": len(r),
                   "write s": res.get("write_s"), "peak MiB": _mib(res.get("peak_bytes")),
                   "files": ", ".join(res.get("files", [])), "error": res.get("error", "")}
            if r and res.get("write_s") is not None:
                row["write / rounds"] = res["write_s"] / sum(r)
                row["write / round"] = res["write_s"] / statistics.mean(r)
            rows.append(row)
            print(f"[scale] N={n} {strategy}: {res}", flush=True)
    return rows


# ------------------------------------------------------------ (e) METR-LA
def metr_la_rows(device: torch.device, quick: bool, cpu_steps: int,
                 root: str | None, compile: bool | CompileMode = False
                 ) -> list[dict[str, Any]]:
    from pyg_fedgraph.datasets import load_dataset
    data = load_dataset("metr-la", root=root, synthetic_steps=2016 if quick else 34272)
    synthetic = bool(data.info.get("synthetic"))
    torch.manual_seed(0)
    model = GRUForecaster(in_channels=data.input_shape[-1], hidden_channels=100, out_steps=12)
    epoch = LocalConfig(lr=0.1, batch_size=64, epochs=1)
    n = data.num_clients
    windows = int(data.num_samples("train").max())
    epoch_steps = -(-windows // epoch.batch_size)
    gpu = ClientTrainer(model, data, config=epoch, device=device)
    params = gpu.layout.flatten(model).repeat(n, 1)
    train_once(ClientTrainer(model, data, config=LocalConfig(lr=0.1, batch_size=64, epochs=None,
                                                             steps=2), device=device),
               params.to(device))  # warm-up
    gpu_s, _ = train_once(gpu, params.to(device))
    compiled_s = compile_s = None
    if compile:  # the same epoch through torch.compile, after a 2-step warm-up that compiles
        comp = ClientTrainer(model, data, config=epoch, device=device, execution="vmap",
                             compile=compile)
        t0 = time.perf_counter()
        comp.train(torch.arange(n), params.to(device), generator=torch.Generator().manual_seed(1),
                   config=LocalConfig(lr=0.1, batch_size=64, epochs=None, steps=2))
        synchronize(device)
        compile_s = time.perf_counter() - t0
        compiled_s, _ = train_once(comp, params.to(device))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        part = LocalConfig(lr=0.1, batch_size=64, epochs=None, steps=cpu_steps)
        cpu = ClientTrainer(model, data, config=part, device="cpu")
        train_once(ClientTrainer(model, data, config=LocalConfig(lr=0.1, batch_size=64,
                                                                 epochs=None, steps=1),
                                 device="cpu"), params)  # warm-up
        cpu_part, _ = train_once(cpu, params)
    finally:
        torch.set_num_threads(threads)
    cpu_s = cpu_part / cpu_steps * epoch_steps
    print(f"[metr-la] {device}: {gpu_s:.3g} s; one CPU thread {cpu_part:.3g} s for "
          f"{cpu_steps} steps -> {cpu_s:.3g} s for {epoch_steps}", flush=True)
    return [{"device": str(device), "clients": n, "windows": windows,
             "epoch steps": epoch_steps, "device s": gpu_s, "cpu 1-thread s": cpu_s,
             "cpu steps measured": cpu_steps, "speed-up": cpu_s / gpu_s,
             "compiled s": compiled_s, "compile s": compile_s, "compile mode": compile or None,
             "parallel_clients": gpu.parallel_clients, "execution": gpu.execution,
             "data": "synthetic speeds on the real road graph" if synthetic
             else "recorded speeds"}]


# ------------------------------------------------------- (f) deterministic
#: Strategies of the deterministic rows: FedAvg (local training and a weighted mean),
#: pFedGAT (GATConv's scatter softmax over clients), pFedGraph (the QP's batched projection).
DETERMINISTIC_STRATEGIES = ("fedavg", "pfedgat", "pfedgraph")


def deterministic_rows(device: torch.device, quick: bool) -> list[dict[str, Any]]:
    r"""Seconds per round with and without torch's deterministic algorithms
    (``--deterministic``), and whether two runs of each end at the same
    parameters bit for bit. Digits, the simple CNN, 20 clients; the rounds
    after the first of the second run are timed."""
    from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
    from pyg_fedgraph.utils.device import deterministic_algorithms

    rounds = 2 if quick else 6
    rows = []
    for strategy in DETERMINISTIC_STRATEGIES:
        row: dict[str, Any] = {"device": str(device), "strategy": strategy, "rounds": rounds}
        for det in (False, True):
            finals, per_round = [], []
            with deterministic_algorithms(det):
                for _ in range(2):
                    cfg = ExperimentConfig(dataset="digits", strategy=strategy, clients=20,
                                           rounds=rounds, seed=0, device=str(device),
                                           overrides={"model": "cnn", "steps": 10})
                    sim = build_simulator(cfg)
                    times = []
                    for _ in range(rounds):
                        synchronize(device)
                        t0 = time.perf_counter()
                        sim.step()
                        synchronize(device)
                        times.append(time.perf_counter() - t0)
                    finals.append(sim.local_params.cpu())
                    per_round = times[1:]
            key = "deterministic" if det else "default"
            row[f"{key} s/round"] = statistics.mean(per_round)
            row[f"{key} repeat diff"] = float((finals[0] - finals[1]).abs().max())
        row["cost"] = row["deterministic s/round"] / row["default s/round"]
        rows.append(row)
        print(f"[deterministic] {device} {strategy}: {row}", flush=True)
    return rows


# ------------------------------------------------- --gpu-checks: GNN clients
#: (clients, nodes, node features) of the GNN cases of ``--gpu-checks``.
GNN_CASES = ((100, 4000, 16), (400, 16000, 64))


def gnn_rows(device: torch.device) -> list[dict[str, Any]]:
    r"""GCN and GAT clients on ``planted-graphs``: seconds of one local
    training (5 full-batch Adam steps) of all clients with the ``vmap`` and
    ``loop`` executions and the per-client reference loop, median of 3 after
    a warm-up, and the largest parameter difference of each to ``vmap``."""
    from pyg_fedgraph.datasets import planted_graphs
    from pyg_fedgraph.models import build_model

    rows = []
    for n, nodes, feats in GNN_CASES:
        data = planted_graphs(num_clients=n, num_nodes=nodes, num_features=feats)
        torch.manual_seed(0)
        for name in ("gcn", "gat"):
            classes = data.num_classes or 0  # planted_graphs always has classes
            model = build_model(name, data.input_shape, classes, hidden_channels=64)
            cfg = LocalConfig(optimizer="adam", lr=0.01, full_batch=True, epochs=5)
            row: dict[str, Any] = {"clients": n, "nodes": nodes, "features": feats,
                                   "model": name}
            ref = None
            for key, kw in (("vmap", {"execution": "vmap"}), ("loop", {"execution": "loop"}),
                            ("reference", {"parallel": False})):
                trainer = ClientTrainer(model, data, config=cfg, device=device, **kw)
                params = trainer.layout.flatten(model).repeat(n, 1).to(device)
                buffers = trainer.initial_buffers(n).to(device)
                clients = torch.arange(n)

                def train(trainer: ClientTrainer = trainer, params: torch.Tensor = params,
                          buffers: torch.Tensor = buffers, clients: torch.Tensor = clients
                          ) -> torch.Tensor:
                    return trainer.train(clients, params, buffers).params

                train()  # warm-up
                runs = [timed(train, device) for _ in range(3)]
                row[key + " s"] = sorted(sec for sec, _ in runs)[1]
                result = runs[-1][1]
                if ref is None:
                    ref = result
                else:
                    row[key + " max diff"] = float((result - ref).abs().max())
            row["auto"] = ClientTrainer(model, data, config=cfg, device=device).execution
            for key in ("loop", "reference"):
                row[f"{key} / vmap"] = row[f"{key} s"] / row["vmap s"]
            rows.append(row)
            print(row, flush=True)
    return rows


def measure_gpu_checks(save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    r"""The record of ``--gpu-checks``, handed to ``save`` after each part."""
    device = torch.device("cuda")
    record: dict[str, Any] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    seconds, record["metr_la"] = timed(lambda: metr_la_rows(device, False, 3, None,
                                                            compile="reduce-overhead"))
    record["metr_seconds"] = seconds
    for row in record["metr_la"]:
        best = min(row["device s"], row["compiled s"] or float("inf"))
        row.update({"compiled speed-up": row["cpu 1-thread s"] / row["compiled s"],
                    "best s": best, "goal met": best < 5 and row["cpu 1-thread s"] / best >= 50})
    save(record)
    record["gnn"] = gnn_rows(device)
    save(record)
    return record


def gpu_checks_report(record: dict[str, Any]) -> str:
    r"""The markdown of a ``--gpu-checks`` record (``results/gpu_checks_h100.md``)."""
    lines = ["# GPU checks", "",
             f"`{record['command']}` on one {record['gpu']} (torch {record['torch']}), "
             "one CPU thread for the CPU side (`OMP_NUM_THREADS=1`).", "",
             "## METR-LA round goal (207 GRU clients, one local epoch)", "",
             "Row (e) of `devices.py`: local training of all 207 clients for one epoch of the "
             "training split (375 steps of batch 64, GRU hidden 100, synthetic speeds on the "
             "real road graph), eager and through `torch.compile(mode=\"reduce-overhead\")` "
             "(the step recorded as a CUDA graph); the CPU side trains 3 steps on one thread, "
             "scaled to the epoch. Goal: under 5 s on one H100, at least 50x one CPU thread.",
             "", "| eager s | compiled s | compile s (once) | cpu 1-thread s | eager speed-up "
             "| compiled speed-up | goal |", "|---|---|---|---|---|---|---|"]
    for r in record.get("metr_la", []):
        lines.append(f"| {r['device s']:.2f} | {r['compiled s']:.2f} | {r['compile s']:.1f} | "
                     f"{r['cpu 1-thread s']:.0f} | {r['speed-up']:.0f}x | "
                     f"{r['compiled speed-up']:.0f}x | "
                     f"{'met' if r['goal met'] else 'not met'} ({r['best s']:.2f} s) |")
    lines += ["", "## GNN clients on CUDA", "",
              "`planted-graphs` (one graph of `nodes` nodes split over the clients), 5 local "
              "full-batch Adam steps, hidden width 64; seconds of one local training of all "
              "clients, median of 3 after a warm-up. `reference`: the per-client loop with "
              "`torch.optim.Adam` (`parallel=False`). \"max diff\": max |parameter "
              "difference| to vmap: on CUDA PyG's scatter sums messages with atomic adds, in "
              "a different order each run, and Adam's normalized steps enlarge the "
              "difference.", "",
              "| clients | nodes | features | model | vmap s | loop s | reference s | "
              "loop / vmap | reference / vmap | max diff (loop, reference) | auto |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in record.get("gnn", []):
        lines.append(f"| {r['clients']} | {r['nodes']} | {r['features']} | {r['model']} | "
                     f"{r['vmap s']:.3f} | {r['loop s']:.2f} | {r['reference s']:.2f} | "
                     f"{r['loop / vmap']:.0f}x | {r['reference / vmap']:.0f}x | "
                     f"{r['loop max diff']:.1e}, {r['reference max diff']:.1e} | {r['auto']} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ output
def _mib(b: float | None) -> float | None:
    return None if b is None else b / 2 ** 20


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else (f"{v:.1e}" if 0 < abs(v) < 1e-3 else f"{v:.3g}")
    if isinstance(v, (tuple, list)):
        return "-".join(fmt(x) for x in v)
    return str(v)


def table(rows: list[dict[str, Any]], cols: list[str]) -> list[str]:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return lines


def available_devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def measure(args: argparse.Namespace, command: str) -> dict[str, Any]:
    r"""The record of one run of sections (a)-(f) with the options ``args``."""
    start = time.perf_counter()
    load_start = os.getloadavg()[0]
    devices = [torch.device(d) for d in (args.device or available_devices())]
    repeats = 1 if args.quick else args.repeats
    sizes = args.scale if args.scale is not None else ([1000] if args.quick else [1000, 10000])
    rounds = 2 if args.quick else args.scale_rounds
    cuda = [d for d in devices if d.type == "cuda"]
    goal_devices = cuda or ([torch.device("cpu")] if args.goals_on_cpu else [])
    if cuda:  # cuBLAS reads it when it starts; deterministic algorithms need it (rows f)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    chunk: list[dict[str, Any]] = []
    execution: list[dict[str, Any]] = []
    metr: list[dict[str, Any]] = []
    determ: list[dict[str, Any]] = []
    for device in devices:
        clients = args.chunk_clients or (12 if device.type == "cpu" else 100)
        chunk += chunk_rows(device, 6 if args.quick else clients, 2 if args.quick else 3)
    for device in devices:
        execution += execution_rows(device, args.quick, repeats,
                                    goals=device.type != "cpu" or args.goals_on_cpu,
                                    compile=args.compile)
    for device in goal_devices:
        metr += metr_la_rows(device, args.quick, args.metr_cpu_steps, args.metr_la_root,
                             compile=args.compile)
        determ += deterministic_rows(device, args.quick)
    scale = scale_rows(sizes, rounds)
    gpu = bool(cuda)
    machine = [*machine_lines(load_start), f"- total time: {time.perf_counter() - start:.0f} s",
               f"- GPU: {'CUDA ' + torch.cuda.get_device_name() if gpu else NO_GPU}"]
    return {"command": command, "gpu": gpu, "chunk": chunk, "execution": execution,
            "scale": scale, "metr": metr, "determ": determ,
            "execution_table": ", ".join(f"{f}/{d}: {e}"
                                         for (f, d), e in EXECUTION_TABLE.items()),
            "machine": machine}


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (N = 1,000 only, 2 rounds), 1 repeat; prints only "
                             "unless --out")
    parser.add_argument("--device", nargs="+", default=None,
                        help="devices for the execution and chunk rows (default: cpu, and "
                             "cuda when available)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per path")
    parser.add_argument("--chunk-clients", type=int, default=None,
                        help="clients of the chunk rows (default: 12 on the CPU, 100 on CUDA)")
    parser.add_argument("--scale", type=int, nargs="*", default=None,
                        help="FL-60 sizes of the scale rows (default: 1000 10000)")
    parser.add_argument("--scale-rounds", type=int, default=4)
    parser.add_argument("--metr-cpu-steps", type=int, default=5,
                        help="local steps the one-thread CPU side of the METR-LA row trains")
    parser.add_argument("--metr-la-root", default=None,
                        help="folder with the real metr-la.h5 (default: synthetic speeds)")
    parser.add_argument("--goals-on-cpu", action="store_true",
                        help="also run the GPU-only rows on the CPU (checks the script)")
    parser.add_argument("--compile", nargs="?", const=True, default=False, metavar="MODE",
                        help="also time the vmap execution through torch.compile (rows b, e); "
                             "MODE is torch.compile's mode (e.g. reduce-overhead: CUDA "
                             "graphs on a GPU; default: torch's default)")
    parser.add_argument("--gpu-checks", action="store_true",
                        help="instead of (a)-(f): the METR-LA epoch with reduce-overhead and "
                             "GNN clients on CUDA (default output: results/gpu_checks.md)")
    parser.add_argument("--report-only", action="store_true",
                        help=f"rebuild the results file from its record in {RECORDS_NAME} "
                             "beside it, measuring nothing")
    parser.add_argument("--out", type=Path, default=None,
                        help="markdown output (default: results/devices.md unless --quick); "
                             f"the record goes to {RECORDS_NAME} in the same folder")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.compile is not True and args.compile is not False \
            and args.compile not in get_args(CompileMode):
        parser.error(f"--compile: unknown mode {args.compile!r}; choose one of "
                     + ", ".join(get_args(CompileMode)))
    if args.child:
        kind, payload = args.child[0], json.loads(args.child[1])
        if kind == "chunk":
            save = payload["save"]
            res = chunk_measure(torch.device(payload["device"]), payload["clients"],
                                payload["steps"], payload["chunk"], Path(save) if save else None)
        else:
            res = scale_measure(**payload)
        print(json.dumps(res))
        return ""

    default = RESULTS / ("gpu_checks.md" if args.gpu_checks else "devices.md")
    out = args.out if args.out is not None else (None if args.quick else default)
    make = gpu_checks_report if args.gpu_checks else report
    command = " ".join([f"python {SCRIPT}", *argv])
    if args.report_only and out is None:
        parser.error("--report-only rebuilds a file: drop --quick or give --out")

    def save(record: dict[str, Any]) -> None:
        write_measured(out, {"command": command, **record}, script=SCRIPT)

    def measured() -> dict[str, Any]:
        if "cuda" in (args.device or []) and not torch.cuda.is_available():
            parser.error("--device cuda: this machine has no CUDA device")
        if args.gpu_checks:
            if not torch.cuda.is_available():
                parser.error("--gpu-checks: this machine has no CUDA device")
            # written after each part by save, and once more (the same record) at the end
            return {"command": command, **measure_gpu_checks(save)}
        return measure(args, command)

    text = measured_report(out, make, None if args.report_only else measured, script=SCRIPT)
    print()
    print(text)
    return text


def report(record: dict[str, Any]) -> str:
    r"""The markdown of a record of sections (a)-(f) (``results/devices.md``)."""
    chunk, execution, scale, metr, determ = (record[k] for k in (
        "chunk", "execution", "scale", "metr", "determ"))
    gpu = record["gpu"]
    lines = ["# Devices: chunked training, execution per model family, scale", "",
             f"`{record['command']}`. Every row is measured in this one run; ratios compare paths "
             "measured side by side (alternating).", ""]
    lines += ["## (a) Chunked training: memory against the chunk size", "",
              "Simple CNN on random 28x28 inputs, `execution=\"vmap\"`, the same clients, "
              "start parameters and batch schedule for every chunk size. \"extra MiB\": on "
              "CUDA `torch.cuda.max_memory_allocated` during training minus what was "
              "allocated before (after one untimed training, so that cuBLAS and cuDNN "
              "workspaces count in no row); on the CPU, in a fresh process per row, how "
              "much training raised the process's peak resident set size (`VmHWM`, after "
              "lifting the high-water mark to the current usage): memory the OS gave the process, "
              "allocator caching included. \"process peak MiB\": the whole child process "
              "(Python, torch, data). \"seconds\": a second, identical training in the same "
              "process. \"max diff\": max |parameter difference| to `parallel_clients=all`.",
              ""]
    lines += table(chunk, ["device", "clients", "parallel_clients", "seconds", "extra MiB",
                           "process peak MiB", "max diff"])
    if not gpu:
        lines += ["", f"CUDA rows: {NO_GPU}."]
    lines += ["", "## (b) Execution per model family: vmap, loop and the reference loop", "",
              "Seconds of one local training of all the case's clients, median of the timed "
              "runs (paths alternate, one untimed warm-up each). `vmap` and `loop` are the "
              "two executions of `ClientTrainer` (all clients in one batched call); "
              "`reference` is the per-client loop with `torch.optim.SGD` "
              "(`parallel=False`), the way PFLlib and FL-bench train. \"loop / vmap\" > 1: "
              "vmap is faster. \"auto\": what `execution=\"auto\"` picks from "
              "`EXECUTION_TABLE` (" + record["execution_table"] + "); \"reference / auto\" "
              "> 1: what `auto` picks is faster than the reference loop; \"fastest\": the "
              "faster of vmap and loop in this run. \"max diff\": "
              "max |parameter difference| of vmap and loop to the reference.", ""]
    lines += table(execution, ["device", "case", "family", "vmap s", "loop s", "reference s",
                               "loop / vmap", "reference / vmap", "reference / auto", "auto",
                               "fastest",
                               "max diff"])
    if any(r.get("compiled s") is not None for r in execution):
        mode = next(r["compile mode"] for r in execution if r.get("compile mode"))
        lines += ["", "With `--compile`: the vmap execution through `torch.compile` "
                  f"(`ClientTrainer(compile={mode!r})`). \"compile s\": its first training, which "
                  "compiles; \"compiled s\": median of the timed runs, alternating with the "
                  "paths above; \"compiled diff\": max |parameter difference| to the "
                  "reference.", ""]
        lines += table(execution, ["device", "case", "vmap s", "compiled s", "vmap / compiled",
                                   "compile s", "compiled diff"])
    lines += [""] + [f"- {r['device']}, {r['case']}: {r['note']}; range over runs: " +
                     ", ".join(f"{k} {fmt(v)} s" for k, v in r["spread"].items())
                     for r in execution]
    if not gpu:
        lines += ["", f"CUDA rows (FL-60, CNN 10 and 100 clients, GRU; the goal: batched at "
                      f"least 10x faster than the reference loop for 100 simple-CNN clients): "
                      f"{NO_GPU}."]
    lines += ["", "## (c) Scale: FL-60 with 1,000 and 10,000 clients on the CPU", "",
              "Sample fraction 0.1, the sparse `graph=\"knn\"` prior graph (k = 10), "
              "`device=\"cpu\"`, `state_device=\"cpu\"` (the client table on the host), "
              "dataset defaults otherwise (MLP hidden 16, 2 local epochs of batch 16). Each "
              "row is one process: building the data and simulator (\"build s\"), then the "
              "rounds (each: sampling, local training, aggregation, evaluation of every "
              "client); \"s/round\" is their mean, with the range. \"peak MiB\": the "
              "process's peak resident set size (`VmHWM`, read by the process at its end; "
              "not `ru_maxrss`, which Linux carries over from the parent at `exec`), "
              "goal < 8 GB (8,192 MiB).", ""]
    lines += table(scale, ["N", "strategy", "sampled", "build s", "rounds", "s/round",
                           "round range", "peak MiB"])
    if not scale:
        lines += ["", "Not run in this run (`--scale` with no sizes)."]
    lines += ["", "## (d) Writing the run's files against the rounds", "",
              "`write_run` as the command line calls it, in the same processes after the "
              "rounds: config, history, clients, summary, learning curve, and for pFedGraph "
              "the collaboration matrix (`collaboration.npz`, `collaboration_topk.csv`; "
              "`collaboration.csv` only up to 200 clients) and its two pictures (aggregated "
              "into blocks at large N). \"write / rounds\": write seconds over the seconds "
              "of all the rounds measured; \"write / round\": over one mean round.", ""]
    lines += table(scale, ["N", "strategy", "rounds", "s/round", "write s", "write / rounds",
                           "write / round", "files"])
    lines += ["", "## (e) GPU goals: METR-LA round, 207 GRU clients", ""]
    if metr:
        lines += ["Local training of all clients for one epoch of the full training split "
                  "(batch 64, GRU hidden 100) on the device, against one CPU thread; the CPU "
                  "side trains \"cpu steps measured\" steps and is scaled to the epoch's "
                  "steps. Goal on one H100: under 5 s, at least 50x faster.", ""]
        lines += table(metr, ["device", "clients", "windows", "epoch steps", "device s",
                              "cpu 1-thread s", "cpu steps measured", "speed-up",
                              "parallel_clients", "execution", "data"])
        if any(r.get("compiled s") is not None for r in metr):
            mode = next(r["compile mode"] for r in metr if r.get("compile mode"))
            lines += ["", "With `--compile`: \"compiled s\", the same epoch through "
                      f"`torch.compile` (`compile={mode!r}`), after a 2-step warm-up that "
                      "compiles (\"compile s\")."]
            lines += [""] + table(metr, ["device", "device s", "compiled s", "compile s"])
    else:
        lines += [f"METR-LA round on CUDA vs one CPU thread: {NO_GPU}. The script runs it "
                  "when CUDA is available."]
    lines += ["", "## (f) What `--deterministic` costs", ""]
    if determ:
        lines += ["Digits, the simple CNN (`--set model=cnn`), 20 clients, 10 local steps per "
                  "round, with and without torch's deterministic algorithms "
                  "(`torch.use_deterministic_algorithms`, what `--deterministic` sets; "
                  "`CUBLAS_WORKSPACE_CONFIG=:4096:8` for both). Two runs of each; \"s/round\": "
                  "the mean of the second run's rounds after its first; \"repeat diff\": max "
                  "|difference| of the two runs' final parameters (0: bit for bit the same). "
                  "\"cost\": deterministic s/round over default s/round.", ""]
        lines += table(determ, ["device", "strategy", "rounds", "default s/round",
                                "deterministic s/round", "cost", "default repeat diff",
                                "deterministic repeat diff"])
    else:
        lines += [f"Deterministic algorithms on CUDA against the default: {NO_GPU}. On the "
                  "CPU torch's kernels are deterministic already."]
    errors = [r for r in chunk + scale if r.get("error")]
    if errors:
        lines += ["", "Errors:"] + [f"- {r}" for r in errors]
    lines += ["", "## Machine", "", *record["machine"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
