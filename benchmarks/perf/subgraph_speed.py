r"""Clients that hold graphs: one round of GCN clients against a per-client PyG loop, the
allocator setting, and memory at 100 CiteSeer clients (issue 33's goals).

Every row is measured side by side in one run; the script asserts nothing. One CPU
thread. The C allocator setting (:func:`pyg_fedgraph.utils.retain_freed_memory`, what
``pyg-fedgraph run`` applies unless ``PYG_FEDGRAPH_KEEP_MEMORY=0``) is process-wide, so
every row runs in a fresh process per setting ("default": glibc as it comes; "kept":
the setting applied at the process's start), the two settings alternating.

(a) **speed**: one communication round of FedAvg over all clients, one local epoch of
    full-batch training (FED-PUB's protocol: Adam lr 0.01, weight decay 1e-6, each
    client keeping its Adam state), FED-PUB's GCN (two ``GCNConv`` of 128 and a linear
    classifier), at 10 Cora METIS clients, 50 Cora overlapping clients and 100 clients
    of the synthetic ``planted-graphs`` federation (3,000 nodes, 30 per client).
    "library": one :meth:`Simulator.step() <pyg_fedgraph.simulation.Simulator.step>`
    (sampling, batched local training, update checks, FedAvg aggregation, the client
    table; no evaluation) with ``execution="vmap"`` and ``"loop"``. "PyG loop": what
    OpenFGL and FederatedScope do, written here: one model per client with PyG's layers
    at their defaults (``GCNConv`` inserts self loops and normalizes at every call), one
    :class:`torch.optim.Adam` per client kept across rounds, the server's parameters
    copied into each client's model, one full-batch step, and FedAvg of the clients'
    parameters weighted by training nodes. Both start from the same parameters; "max
    diff" is the largest difference of the clients' parameters after the first round.
(b) **models**: GraphSAGE (``SAGEConv``, mean, 128) and GAT (``GATConv``, 4 heads of
    16) at 50 Cora overlapping clients, the same paths. The PyG loop's ``SAGEConv``
    gets the edges with a self loop on every node (the library's graphs carry them;
    ``SAGEConv`` adds none), its ``GATConv`` adds them itself.
(c) **allocator on other rounds**: seconds per round of the default job (digits, 40
    clients, pFedGraph, MLP, evaluation every round), of Fashion-MNIST at the extreme
    level (``configs/pfedgraph_fmnist_extreme.yaml``: 5 clients, the simple CNN,
    pFedGraph; 20 local steps instead of 200, no evaluation) and of FL-60 (60 MLP
    clients, pFedGraph, evaluation every round), with and without the setting.
(d) **memory**: 100 CiteSeer clients (overlapping), the dataset's protocol (FED-PUB's
    GCN and local training), FedAvg and pFedGraph for a few rounds (evaluation every
    round), each in its own process: the process's peak resident set size (``VmHWM``,
    :func:`pyg_fedgraph.utils.timing.peak_rss`), goal < 4 GB.

The results file is rebuilt from the measurements, kept as one line of
``perf_records.jsonl`` beside it (``--report-only``: nothing is measured); its
"### Reading" blocks are written by hand and kept.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/perf/subgraph_speed.py           # results/subgraph_speed.md
    OMP_NUM_THREADS=1 python benchmarks/perf/subgraph_speed.py --quick   # small, prints only
    python benchmarks/perf/subgraph_speed.py --report-only   # the markdown again from the record
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from pyg_fedgraph.data.graph_dataset import GraphFederatedDataset
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.experiment.reporting import (
    RECORDS_NAME,
    machine_lines,
    measured_report,
)
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.execution import EXECUTION_TABLE, choose_execution
from pyg_fedgraph.utils.timing import peak_rss

SCRIPT = "benchmarks/perf/subgraph_speed.py"
HERE = Path(__file__).resolve().parents[1]
RESULTS = HERE / "results" / "subgraph_speed.md"
PLANETOID = HERE.parent.parent / "shared" / "data" / "planetoid"
FMNIST = Path("/usr/share/datasets/fashion-mnist")
SETTINGS = ("default", "kept")
#: FED-PUB's local protocol (the Planetoid datasets' defaults).
FEDPUB = LocalConfig(optimizer="adam", lr=0.01, weight_decay=1e-6, full_batch=True, epochs=1,
                     keep_optimizer_state=True)
#: The client models of the rows: registry name, options, the PyG layer of the loop.
MODELS: dict[str, tuple[dict[str, int], Callable[[int, int, dict[str, int]], nn.Module]]] = {
    "gcn": ({"hidden_channels": 128, "num_layers": 2},
            lambda i, o, kw: GCNConv(i, o)),
    "sage": ({"hidden_channels": 128, "num_layers": 2},
             lambda i, o, kw: SAGEConv(i, o)),
    "gat": ({"hidden_channels": 64, "num_layers": 2, "heads": 4},
            lambda i, o, kw: GATConv(i, o // kw["heads"], heads=kw["heads"])),
}


# ------------------------------------------------------------------ data
def make_case(case: str, root: Path, quick: bool) -> GraphFederatedDataset:
    from pyg_fedgraph.datasets import cora, planted_graphs
    if case == "cora-metis-10":
        return cora(root=str(root), num_clients=10, partition="metis")
    if case == "cora-overlapping-50":
        return cora(root=str(root), num_clients=50, partition="overlapping")
    if case == "planted-100":
        return planted_graphs(num_clients=20 if quick else 100, num_nodes=600 if quick else 3000)
    raise ValueError(f"unknown case {case!r}")


CASE_TEXT = {"cora-metis-10": "Cora, METIS, 10 clients",
             "cora-overlapping-50": "Cora, overlapping, 50 clients",
             "planted-100": "planted-graphs, 100 clients"}


# ---------------------------------------------------------- the PyG loop
class LoopGNN(nn.Module):
    r"""A client model as the per-client libraries write it: PyG's layers at their
    defaults, called with the client's ``(x, edge_index)``; the parameter names are
    the library's models', so the same initial state loads into both."""

    def __init__(self, model: str, in_channels: int, out_channels: int,
                 kwargs: dict[str, int]) -> None:
        super().__init__()
        hidden, layers = kwargs["hidden_channels"], kwargs["num_layers"]
        make = MODELS[model][1]
        self.act = F.elu if model == "gat" else F.relu
        self.convs = nn.ModuleList([make(in_channels if i == 0 else hidden, hidden, kwargs)
                                    for i in range(layers)])
        self.classifier = nn.Linear(hidden, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for conv in self.convs:
            x = self.act(conv(x, edge_index))
        return self.classifier(x)


class PerClientLoop:
    r"""FedAvg over per-client PyG models, one client after another (OpenFGL's
    ``FedAvgClient``/``FedAvgServer`` pattern): each client's model and Adam persist
    across rounds; a round copies the server's parameters into each sampled client's
    model, takes its local step, and sums the clients' parameters weighted by their
    training nodes."""

    def __init__(self, data: GraphFederatedDataset, model: str, init: dict[str, Tensor],
                 local: LocalConfig) -> None:
        assert data.graphs is not None and data.num_classes is not None
        kwargs = MODELS[model][0]
        g = data.graphs
        train = data.splits["train"]
        self.clients = []
        for i in range(data.num_clients):
            v, e = int(g.num_nodes[i]), int(g.num_edges[i])
            edges = g.edge_index[i, :, :e]
            if model != "sage":  # GCNConv and GATConv insert the self loops themselves
                edges = edges[:, edges[0] != edges[1]]
            n = int(train.counts[i])
            m = LoopGNN(model, int(g.x.size(2)), data.num_classes, kwargs)
            m.load_state_dict(init)
            opt = torch.optim.Adam(m.parameters(), lr=local.lr, weight_decay=local.weight_decay)
            self.clients.append((m, opt, g.x[i, :v].clone(), edges.clone(),
                                 train.x[i, :n].clone(), train.y[i, :n].clone()))
        counts = train.counts.to(torch.float)
        self.weights = (counts / counts.sum()).tolist()
        self.server = [p.detach().clone() for p in self.clients[0][0].parameters()]
        self.clock = Clock()

    def round(self) -> None:
        clock, tick = self.clock, time.process_time
        t0 = tick()
        for m, opt, x, edge_index, nodes, y in self.clients:
            with torch.no_grad():
                for p, s in zip(m.parameters(), self.server, strict=True):
                    p.copy_(s)
            m.train()
            opt.zero_grad()
            t1 = tick()
            loss = F.cross_entropy(m(x, edge_index)[nodes], y)
            loss.backward()
            t2 = tick()
            opt.step()
            clock.add("gradients", t2 - t1)
        clock.add("training", tick() - t0)
        with torch.no_grad():
            for k, s in enumerate(self.server):
                for j, (m, *_rest) in enumerate(self.clients):
                    p = list(m.parameters())[k]
                    if j == 0:
                        s.copy_(self.weights[j] * p)
                    else:
                        s.add_(self.weights[j] * p)
        clock.add("round", tick() - t0)

    def local_params(self, layout: ParamLayout) -> Tensor:
        return torch.stack([layout.flatten(m) for m, *_rest in self.clients])


# ------------------------------------------------------------ children
def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    r"""CPU seconds of this process (user and system: page faults count) and wall
    seconds of ``fn()``. On one thread the CPU seconds are what an idle machine's
    wall clock would show; on a shared machine they leave out the time spent
    waiting for a core."""
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def _start(keep: bool) -> None:
    torch.set_num_threads(1)
    if keep:
        from pyg_fedgraph.utils import retain_freed_memory
        if not retain_freed_memory():
            raise RuntimeError("retain_freed_memory() was refused (not glibc?)")


class Clock:
    r"""CPU seconds spent in named parts of a round, summed over rounds."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, part: str, seconds: float) -> None:
        self.seconds[part] = self.seconds.get(part, 0.0) + seconds

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            c0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(part, time.process_time() - c0)
        return timed

    def per_round(self, rounds: int) -> dict[str, float]:
        return {k: v / rounds for k, v in self.seconds.items()}


def _instrument(sim: Any) -> Clock:
    r"""Times a simulator's local training (:meth:`ClientTrainer.train`) and,
    within it, the clients' batched gradients (forward and backward passes), by
    wrapping the methods of this simulator's own trainer."""
    clock = Clock()
    trainer = sim.trainer
    problem = trainer.problem

    def timed_problem(*args: Any, **kwargs: Any) -> Any:
        out = problem(*args, **kwargs)
        out._grad = clock.wrap("gradients", out._grad)
        return out

    trainer.problem = timed_problem
    trainer.train = clock.wrap("training", trainer.train)
    sim.step = clock.wrap("round", sim.step)
    return clock


def speed_child(case: str, model: str, keep: bool, repeats: int, root: str,
                quick: bool) -> dict[str, Any]:
    r"""One case in this process: library (vmap, loop) and the PyG loop, one untimed
    round each, then ``repeats`` timed rounds of each, alternating."""
    from pyg_fedgraph.models.registry import build_model
    from pyg_fedgraph.simulation import Simulator
    from pyg_fedgraph.strategies import build_strategy
    _start(keep)
    data = make_case(case, Path(root), quick)
    assert data.num_classes is not None and data.graphs is not None
    kwargs = MODELS[model][0]
    torch.manual_seed(0)
    net = build_model(model, data.input_shape, data.num_classes, **kwargs)
    sims = {ex: Simulator(data, net, build_strategy("fedavg"), rounds=10 ** 6, local=FEDPUB,
                          eval_every=10 ** 6, execution=ex, seed=0) for ex in ("vmap", "loop")}
    loop = PerClientLoop(data, model, net.state_dict(), FEDPUB)
    clocks = {ex: _instrument(sim) for ex, sim in sims.items()}
    paths: dict[str, Callable[[], object]] = {"library vmap": sims["vmap"].step,
                                              "library loop": sims["loop"].step,
                                              "PyG loop": loop.round}
    for fn in paths.values():  # the first round of each, from the same parameters
        fn()
    for clock in (*clocks.values(), loop.clock):  # count the timed rounds only
        clock.seconds.clear()
    layout = sims["vmap"].layout
    ref = loop.local_params(layout)
    diff = max(float((sims[ex].local_params - ref).abs().max()) for ex in sims)
    times: dict[str, list[float]] = {k: [] for k in paths}
    walls: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(repeats):
        for k, fn in paths.items():
            cpu, wall = _timed(fn)
            times[k].append(cpu)
            walls[k].append(wall)
    parts = {"library vmap": clocks["vmap"].per_round(repeats),
             "library loop": clocks["loop"].per_round(repeats),
             "PyG loop": loop.clock.per_round(repeats)}
    return {"times": times, "wall": walls, "max diff": diff, "parts": parts, "peak": peak_rss(),
            "D": layout.num_params,
            "clients": data.num_clients, "V": int(data.graphs.num_nodes.max()),
            "E": int(data.graphs.num_edges.max()),
            "auto": choose_execution(net, torch.device("cpu"))}


def _job_config(job: str, quick: bool) -> Any:
    from pyg_fedgraph.cli.parser import DEFAULT_JOB
    from pyg_fedgraph.experiment import ExperimentConfig
    if job == "default job":
        return ExperimentConfig(dataset=DEFAULT_JOB["dataset"], strategy="pfedgraph",
                                partition=DEFAULT_JOB["partition"],
                                clients=DEFAULT_JOB["clients"], rounds=100, seed=0,
                                overrides={"data." + k.split(".", 1)[1]: v for k, v in
                                           DEFAULT_JOB["set"].items()})
    if job == "fashion-mnist":
        return ExperimentConfig(
            dataset="fashion-mnist", strategy="pfedgraph", partition="pathological",
            clients=5, rounds=100, seed=0,
            overrides={"steps": 2 if quick else 20, "alpha_rule": "paper", "eval_every": 1000,
                       "data.pairing": "fixed", "data.test_set": "global-weighted",
                       "data.max_train_per_client": 3072, "data.max_val_per_client": 768})
    if job == "fl60":
        return ExperimentConfig(dataset="fl60", strategy="pfedgraph", rounds=100, seed=0)
    raise ValueError(f"unknown job {job!r}")


def round_child(job: str, keep: bool, repeats: int, quick: bool) -> dict[str, Any]:
    r"""Seconds of ``repeats`` rounds of a job after one untimed round."""
    from pyg_fedgraph.experiment import build_simulator
    _start(keep)
    sim = build_simulator(_job_config(job, quick))
    sim.step()
    times, walls = [], []
    for _ in range(repeats):
        cpu, wall = _timed(sim.step)
        times.append(cpu)
        walls.append(wall)
    return {"times": times, "wall": walls, "peak": peak_rss(), "clients": sim.dataset.num_clients,
            "D": sim.layout.num_params, "execution": sim.execution}


def memory_child(strategy: str, keep: bool, rounds: int, root: str,
                 quick: bool) -> dict[str, Any]:
    r"""100 CiteSeer clients (overlapping), the dataset's protocol: building and
    ``rounds`` rounds, every round evaluated."""
    from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
    _start(keep)
    t0 = time.perf_counter()
    cfg = (ExperimentConfig(dataset="planted-graphs", strategy=strategy, clients=20,
                            rounds=rounds, seed=0) if quick else
           ExperimentConfig(dataset="citeseer", strategy=strategy, clients=100,
                            partition="overlapping", rounds=rounds, seed=0,
                            overrides={"data.root": root}))
    sim = build_simulator(cfg)
    build = time.perf_counter() - t0
    times, walls = [], []
    for _ in range(rounds):
        cpu, wall = _timed(sim.step)
        times.append(cpu)
        walls.append(wall)
    return {"build s": build, "times": times, "wall": walls, "peak": peak_rss(),
            "clients": sim.dataset.num_clients, "D": sim.layout.num_params,
            "test": sim.history.mean("test")[-1] if len(sim.history) else None}


def _child(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    r"""Runs ``kind`` in a fresh process and returns its JSON line."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, __file__, "--child", kind, json.dumps(args)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _alternate(kind: str, args: dict[str, Any], alternations: int
               ) -> dict[str, list[dict[str, Any]]]:
    r"""``kind`` in fresh processes, the two settings alternating (the order
    swapped every alternation): the results per setting."""
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in SETTINGS}
    for a in range(alternations):
        for setting in (SETTINGS if a % 2 == 0 else SETTINGS[::-1]):
            res = _child(kind, {**args, "keep": setting == "kept"})
            brief = {k: v for k, v in res.items() if k not in ("times", "wall", "parts")}
            print(f"[{kind}] {args} {setting}: {json.dumps(brief)}", flush=True)
            out[setting].append(res)
    return out


def _merge(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    r"""The runs of one setting: times pooled (median), the largest peak."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return {"error": results[0]["error"]} if results else None
    out = dict(ok[0])
    if isinstance(ok[0]["times"], dict):
        for key in ("times", "wall"):
            out[key] = {k: [t for r in ok for t in r[key][k]] for k in ok[0][key]}
        out["median"] = {k: statistics.median(v) for k, v in out["times"].items()}
        out["wall median"] = {k: statistics.median(v) for k, v in out["wall"].items()}
        out["max diff"] = max(r["max diff"] for r in ok)
        out["parts"] = {path: {part: statistics.mean(r["parts"][path][part] for r in ok)
                               for part in ok[0]["parts"][path]} for path in ok[0]["parts"]}
    else:
        for key in ("times", "wall"):
            out[key] = [t for r in ok for t in r[key]]
        out["median"] = statistics.median(out["times"])
        out["wall median"] = statistics.median(out["wall"])
    out["peak"] = max(r["peak"] for r in ok)
    return out


# ------------------------------------------------------------------ rows
def _parts(prefix: str, parts: dict[str, float]) -> dict[str, float]:
    r"""A round's CPU seconds as gradients (forward and backward passes of all
    clients), the rest of local training (the update rule, copies) and the rest
    of the round (sampling, uploads, checks, aggregation, the client table)."""
    return {f"{prefix} grad": parts["gradients"],
            f"{prefix} update": parts["training"] - parts["gradients"],
            f"{prefix} server": parts["round"] - parts["training"]}


def speed_rows(cases: list[tuple[str, str]], root: Path, repeats: int, alternations: int,
               quick: bool) -> list[dict[str, Any]]:
    rows = []
    for case, model in cases:
        runs = _alternate("speed", {"case": case, "model": model, "repeats": repeats,
                                    "root": str(root), "quick": quick}, alternations)
        for setting in SETTINGS:
            res = _merge(runs[setting])
            if res is None:
                continue
            row: dict[str, Any] = {"case": CASE_TEXT[case], "model": model,
                                   "allocator": setting}
            if "clients" in res:  # --quick runs smaller federations
                row["case"] = row["case"].rsplit(",", 1)[0] + f", {res['clients']} clients"
            if "error" in res:
                rows.append({**row, "error": res["error"]})
                continue
            med = res["median"]
            auto = "library " + res["auto"]
            row.update({"clients": res["clients"], "D": res["D"], "V": res["V"], "E": res["E"],
                        "vmap s": med["library vmap"], "loop s": med["library loop"],
                        "PyG s": med["PyG loop"], "auto": res["auto"],
                        "PyG / auto": med["PyG loop"] / med[auto],
                        "wall PyG / auto": res["wall median"]["PyG loop"]
                        / res["wall median"][auto],
                        "PyG / vmap": med["PyG loop"] / med["library vmap"],
                        "PyG / loop": med["PyG loop"] / med["library loop"],
                        "loop / vmap": med["library loop"] / med["library vmap"],
                        **_parts("lib", res["parts"][auto]),
                        **_parts("PyG", res["parts"]["PyG loop"]),
                        "max diff": res["max diff"], "peak MiB": res["peak"] / 2 ** 20,
                        "runs": len(res["times"]["PyG loop"])})
            rows.append(row)
    # the allocator's effect on each path: default over kept
    for row in rows:
        twin = next((r for r in rows if r is not row and r["case"] == row["case"]
                     and r["model"] == row["model"] and r["allocator"] == "kept"), None)
        if row["allocator"] == "default" and twin is not None and "error" not in row \
                and "error" not in twin:
            for col in ("vmap s", "loop s", "PyG s"):
                twin[f"{col.split()[0]} gain"] = row[col] / twin[col]
    return rows


def round_rows(jobs: list[str], repeats: int, alternations: int, quick: bool
               ) -> list[dict[str, Any]]:
    rows = []
    for job in jobs:
        runs = _alternate("round", {"job": job, "repeats": repeats, "quick": quick},
                          alternations)
        merged = {s: _merge(runs[s]) for s in SETTINGS}
        for setting in SETTINGS:
            res = merged[setting]
            if res is None:
                continue
            row: dict[str, Any] = {"job": job, "allocator": setting}
            if "error" in res:
                rows.append({**row, "error": res["error"]})
                continue
            row.update({"clients": res["clients"], "D": res["D"], "execution": res["execution"],
                        "s/round": res["median"], "wall s/round": res["wall median"],
                        "round range": (min(res["times"]),
                                                                  max(res["times"])),
                        "peak MiB": res["peak"] / 2 ** 20, "runs": len(res["times"])})
            base = merged["default"]
            if setting == "kept" and base is not None and "error" not in base:
                row["default / kept"] = base["median"] / res["median"]
                row["peak change MiB"] = (res["peak"] - base["peak"]) / 2 ** 20
            rows.append(row)
    return rows


def memory_rows(strategies: list[str], rounds: int, root: Path, quick: bool
                ) -> list[dict[str, Any]]:
    rows = []
    for strategy in strategies:
        runs = _alternate("memory", {"strategy": strategy, "rounds": rounds, "root": str(root),
                                     "quick": quick}, 1)
        for setting in SETTINGS:
            res = runs[setting][0]
            row: dict[str, Any] = {"strategy": strategy, "allocator": setting}
            if "error" in res:
                rows.append({**row, "error": res["error"]})
                continue
            row.update({"clients": res["clients"], "D": res["D"], "build s": res["build s"],
                        "rounds": len(res["times"]), "s/round": statistics.mean(res["times"]),
                        "peak MiB": res["peak"] / 2 ** 20,
                        "under 4 GB": "yes" if res["peak"] < 4 * 2 ** 30 else "NO",
                        "test": res["test"]})
            rows.append(row)
    return rows


# ---------------------------------------------------------------- output
def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.1e}" if 0 < abs(v) < 1e-3 else f"{v:.3g}"
    if isinstance(v, (tuple, list)):
        return "-".join(fmt(x) for x in v)
    return str(v)


def table(rows: list[dict[str, Any]], cols: list[str]) -> list[str]:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows
              if "error" not in r]
    errors = [r for r in rows if "error" in r]
    return lines + ([""] + [f"- not measured: {r}" for r in errors] if errors else [])


def goals(record: dict[str, Any]) -> list[str]:
    r"""Issue 33's goals, read off the rows: the library (``auto``) against the
    PyG loop with the command line's allocator setting, and the memory rows."""
    out = []
    for row in record["speed"]:
        if row.get("allocator") != "kept" or "error" in row:
            continue
        target = 1.0 if row["clients"] <= 10 else 3.0
        met = "met" if row["PyG / auto"] >= target else "not met"
        out.append(f"- {row['case']}: the library takes {fmt(row[row['auto'] + ' s'])} s, "
                   f"the PyG loop {fmt(row['PyG s'])} s: PyG / library = "
                   f"**{row['PyG / auto']:.2f}** (goal >= {target:g}: {met}).")
    data = "planted-graphs" if "--quick" in record["cmd"] else "CiteSeer"
    for row in record["memory"]:
        if "error" not in row:
            out.append(f"- {row['clients']} {data} clients, {row['strategy']}, allocator "
                       f"{row['allocator']}: "
                       f"peak **{row['peak MiB']:,.0f} MiB** (goal < 4,096 MiB: "
                       f"{'met' if row['under 4 GB'] == 'yes' else 'not met'}).")
    return out


def report(record: dict[str, Any]) -> list[str]:
    r"""The markdown of a run's record (``results/subgraph_speed.md``)."""
    speed, models, rounds, memory = (record[k] for k in ("speed", "models", "rounds",
                                                          "memory"))
    cmd, repeats, alternations = record["cmd"], record["repeats"], record["alternations"]
    lines = ["# Clients that hold graphs: a round against a per-client PyG loop, the "
             "allocator setting, memory", "",
             f"`{cmd}`. One CPU thread. Every row is measured in this run; each (case, "
             "allocator setting) runs in fresh processes, the two settings alternating "
             f"({alternations} process(es) per setting), and within a process the paths "
             f"alternate round by round ({repeats} timed rounds each after one untimed). "
             "Seconds are CPU seconds of the measuring process (user and system, "
             "`time.process_time`; one thread, so what an idle machine's wall clock would "
             "show, page faults included), medians over all timed rounds of a setting: the "
             "machine was shared with other jobs (see Machine), and wall time would add the "
             "waits for a core (\"wall PyG / auto\" gives the wall-clock ratio). "
             "\"default\": glibc's "
             "allocator as it comes; \"kept\": `retain_freed_memory()` (mmap and trim "
             "thresholds 1 GiB) at the process's start, what `pyg-fedgraph run` and `tune` "
             "apply unless `PYG_FEDGRAPH_KEEP_MEMORY=0`. The figures are kept in "
             f"`{RECORDS_NAME}`; `--report-only` rewrites this file from them.", "",
             "## Goals (issue 33)", "", *goals(record), ""]
    lines += ["## (a) One round of FED-PUB's GCN clients: the library against a per-client "
              "PyG loop", "",
              "One FedAvg round over all clients, one local epoch of full-batch Adam (lr "
              "0.01, weight decay 1e-6, state kept per client), GCN 2x128 + linear. "
              "\"vmap s\" / \"loop s\": one `Simulator.step()` (sampling, batched local "
              "training, update checks, FedAvg, the client table; no evaluation) with "
              "`execution=\"vmap\"` / `\"loop\"`; \"auto\": what `execution=\"auto\"` picks "
              "for a GNN on the CPU (`EXECUTION_TABLE`). \"PyG s\": the per-client loop "
              "(OpenFGL's and FederatedScope's pattern: a model per client with PyG's "
              "`GCNConv` at its defaults, a `torch.optim.Adam` per client, FedAvg of the "
              "parameters). \"PyG / auto\" > 1: the library is faster (goal: >= 1 at 10 Cora "
              "clients, >= 3 at 50+). \"vmap gain\" etc.: default seconds over kept seconds "
              "of the same path. \"max diff\": largest difference of the clients' parameters "
              "after the first round, library against the loop. V, E: nodes and edges "
              "(self loops included) of the largest client graph; D: parameters. \"peak "
              "MiB\": the process's `VmHWM` (data, three federations' state, Python and "
              "torch).", ""]
    cols = ["case", "allocator", "clients", "D", "V", "E", "vmap s", "loop s", "PyG s",
            "auto", "PyG / auto", "wall PyG / auto", "PyG / vmap", "PyG / loop", "vmap gain",
            "loop gain", "PyG gain", "max diff", "peak MiB"]
    lines += table(speed, cols)
    lines += ["", "Where a round's CPU seconds go (same runs, mean per round): \"grad\", the "
              "forward and backward passes of all clients (the library's batched gradient; "
              "the loop's `loss.backward()` and forward); \"update\", the rest of local "
              "training (the update rule, copies; the loop's `Adam.step()` and the download "
              "of the server's parameters); \"server\", the rest of the round (the "
              "library: sampling, the clients' rows of the client table and optimizer state, "
              "the upload checks, FedAvg, writing the table back; the loop: the weighted "
              "sum). The library's columns are for the execution `auto` picks.", ""]
    lines += table(speed + models, ["case", "model", "allocator", "lib grad", "lib update",
                                    "lib server", "PyG grad", "PyG update", "PyG server"])
    lines += ["", "## (b) GraphSAGE and GAT", "",
              "The same paths at 50 Cora overlapping clients (one process per setting): "
              "GraphSAGE (`SAGEConv`, mean "
              "aggregation, 2x128; the loop's `SAGEConv` gets the edges with self loops, as "
              "the library's graphs hold them) and GAT (`GATConv`, 2 layers of 4 heads x 16, "
              "ELU; the loop's layer inserts the self loops).", ""]
    lines += table(models, ["case", "model", "allocator", "D", "vmap s", "loop s", "PyG s",
                            "auto", "PyG / auto", "PyG / vmap", "PyG / loop", "vmap gain",
                            "PyG gain", "max diff", "peak MiB"])
    lines += ["", "## Execution of the gnn family on the CPU", "",
              "\"loop / vmap\" > 1: the vmap execution is faster. `EXECUTION_TABLE` entries "
              "in this run: " + ", ".join(record["table"]) + ".", ""]
    lines += table(speed + models, ["case", "model", "allocator", "vmap s", "loop s",
                                    "loop / vmap"])
    lines += ["", "CUDA was not measured (no GPU in this run); `(\"gnn\", \"cuda\")` has no "
              "entry and takes the default, vmap.", "",
              "## (c) The allocator setting on other rounds", "",
              "Seconds per round (median over the timed rounds of both processes of a "
              "setting) and the process's `VmHWM`. The default job: `pyg-fedgraph run`'s "
              "data (digits, group partition, 40 clients, 50/20/30 split) with pFedGraph, "
              "its MLP, every round evaluated. Fashion-MNIST: "
              "`configs/pfedgraph_fmnist_extreme.yaml` (5 clients, pathological, the simple "
              "CNN, pFedGraph) with 20 local steps per round instead of 200 and no "
              "evaluation. FL-60: 60 MLP clients, pFedGraph, every round evaluated. "
              "\"default / kept\" > 1: the setting makes the round faster; \"peak change "
              "MiB\": kept minus default.", ""]
    lines += table(rounds, ["job", "allocator", "clients", "D", "execution", "s/round",
                            "round range", "default / kept", "peak MiB", "peak change MiB",
                            "runs"])
    lines += ["", "## (d) Memory: 100 CiteSeer clients", "",
              "`citeseer(root, num_clients=100, partition=\"overlapping\")` with the "
              "dataset's protocol (FED-PUB's GCN 2x128, full-batch Adam with its state kept "
              "per client, one local epoch), every round evaluated, each row one process "
              "(building the data and simulator, then the rounds). \"peak MiB\": the "
              "process's `VmHWM`, goal < 4 GB (4,096 MiB).", ""]
    lines += table(memory, ["strategy", "allocator", "clients", "D", "build s", "rounds",
                            "s/round", "peak MiB", "under 4 GB"])
    lines += ["", "## Machine", "", *record["machine"],
              f"- total time: {record['seconds']:.0f} s of wall time, "
              f"{record['cpu seconds']:.0f} s of CPU time in the measuring processes (the "
              f"machine was shared: wall time includes waiting for a core; every figure above "
              f"is CPU time)"]
    return lines


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (planted-graphs only, 1 process per setting); "
                             "prints only")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed rounds per path and process (default: 5; --quick 1)")
    parser.add_argument("--alternations", type=int, default=None,
                        help="processes per setting (default: 2; --quick 1)")
    parser.add_argument("--root", type=Path, default=PLANETOID,
                        help="Planetoid's raw files (ind.cora.*, ind.citeseer.*)")
    parser.add_argument("--only", default="speed,models,rounds,memory",
                        help="comma list of sections: speed,models,rounds,memory")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"markdown output (default: {RESULTS} unless --quick); the "
                             f"record goes to {RECORDS_NAME} in the same folder")
    parser.add_argument("--report-only", action="store_true",
                        help=f"rewrite the markdown from the run's record in {RECORDS_NAME} "
                             "beside it, measuring nothing")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.report_only:
        text = measured_report(args.out or RESULTS, markdown, None, script=SCRIPT)
        print(text)
        return text
    if args.child:
        kind, payload = args.child[0], json.loads(args.child[1])
        kinds: dict[str, Callable[..., dict[str, Any]]] = {
            "speed": speed_child, "round": round_child, "memory": memory_child}
        fn = kinds[kind]
        print(json.dumps(fn(**payload)))
        return ""

    out = args.out if args.out is not None else (None if args.quick else RESULTS)
    text = measured_report(out, markdown, lambda: measure(args, argv, parser), script=SCRIPT)
    print()
    print(text)
    return text


def markdown(record: dict[str, Any]) -> str:
    r"""The results file of ``record`` (:func:`report`'s lines)."""
    return "\n".join(report(record)) + "\n"


def measure(args: argparse.Namespace, argv: list[str], parser: argparse.ArgumentParser
            ) -> dict[str, Any]:
    r"""The record of one run with the options ``args`` (``argv`` as given)."""
    start = time.perf_counter()
    load_start = os.getloadavg()[0]
    q = args.quick
    repeats = args.repeats or (1 if q else 5)
    alternations = args.alternations or (1 if q else 2)
    sections = set(args.only.split(","))
    planetoid = (args.root / "ind.cora.x").exists() and (args.root / "ind.citeseer.x").exists()
    if not planetoid and not q:
        parser.error(f"no Planetoid files in {args.root}: give their folder with --root")
    big = ["cora-metis-10", "cora-overlapping-50", "planted-100"]
    cases = [(c, "gcn") for c in (["planted-100"] if q else big)]
    other = "planted-100" if q else "cora-overlapping-50"
    speed = speed_rows(cases, args.root, repeats, alternations, q) if "speed" in sections \
        else []
    models = (speed_rows([(other, "sage"), (other, "gat")], args.root, repeats,
                         max(1, alternations // 2), q) if "models" in sections else [])
    jobs = ["default job", "fl60"] + (["fashion-mnist"] if FMNIST.exists() else [])
    rounds = (round_rows(jobs, 2 if q else 4, alternations, q) if "rounds" in sections
              else [])
    memory = (memory_rows(["fedavg", "pfedgraph"], 2 if q else 3, args.root, q)
              if "memory" in sections else [])
    children = os.times()
    return {"cmd": " ".join([f"python {SCRIPT}", *argv]),
            "repeats": repeats, "alternations": alternations,
            "speed": speed, "models": models, "rounds": rounds, "memory": memory,
            "table": [f"{f}/{d}: {e}" for (f, d), e in EXECUTION_TABLE.items()],
            "machine": machine_lines(load_start), "seconds": time.perf_counter() - start,
            "cpu seconds": children.children_user + children.children_system}


if __name__ == "__main__":
    main()
