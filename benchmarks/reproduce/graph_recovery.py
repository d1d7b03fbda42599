r"""Graph recovery: how well the learned collaboration graph of pFedGraph (and
FedAGHN, pFedGAT) recovers the true client groups (issue 33, the ARI goal).

Two federations with known groups (``client_labels``):

* ``planted-graphs``: a contextual SBM with 4 planted communities, 20
  clients (5 per community, each inside one), 800 nodes, 16 features, seed 0,
  over a sweep of the community separation :math:`s` (0 is the control: the
  communities differ only in where their edges go, not in labels or
  features);
* Cora, overlapping split (FED-PUB's): 30 clients, 6 METIS parts of 5
  clients each sampling half of their part's nodes; the part is the group
  (needs ``--root``, the folder of the Planetoid files).

Each run uses its dataset's default protocol (``dataset.defaults``: on
``planted-graphs`` a GCN of width 32, Adam lr 0.01, full batch, one local
epoch per round, 30 rounds; on Cora FED-PUB's: GCN of width 128, Adam lr 0.01
with weight decay 1e-6 and per-client state, full batch, one epoch, 100
rounds), all clients every round, and the strategies' default
hyper-parameters. The groups are read from the final collaboration matrix
by :func:`~pyg_fedgraph.utils.read_groups` and scored with the
adjusted Rand index: spectral clustering with the true number of groups (the
default rule, recorded every round by
:class:`~pyg_fedgraph.simulation.recovery.GroupRecoveryCallback`) and the connected
components of each client's top-k links (k = group size - 1).

Each run is a study record (``graph-recovery``: the scores of its final
graph and its ARI every round) in ``benchmarks/results/claims_runs/``, the
cache of ``claims.py``: a run is trained only when its record is missing, and
with ``--cached-only`` never, so that the file rebuilds from the records
(listing what is missing with the command that makes it); the file's
hand-written ``### Reading`` blocks are kept.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/reproduce/graph_recovery.py   # runs what is missing
    OMP_NUM_THREADS=1 python benchmarks/reproduce/graph_recovery.py --cached-only
    OMP_NUM_THREADS=1 python benchmarks/reproduce/graph_recovery.py --quick      # 5 rounds, no file
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator, resolved_model
from pyg_fedgraph.experiment.reporting import (
    benchmark_records,
    counted,
    keep_readings,
    machine_lines,
    made_with,
    runs_table,
    save_report,
)
from pyg_fedgraph.utils import keep_freed_memory_at_start
from pyg_fedgraph.utils.recovery import graph_recovery

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent
RESULTS = HERE / "results" / "graph_recovery.md"
#: The records of finished runs and checkpoints of runs in progress: ``claims.py``'s.
RUNS = benchmark_records(ROOT)
#: The name of the study records.
STUDY = "graph-recovery"
COMMAND = "python benchmarks/reproduce/graph_recovery.py"
#: Planetoid's files, relative to the repository root (the records' keys hold this
#: string, so they are the same in every checkout beside ``../shared``).
DATA_ROOT = "../shared/data/planetoid"
STRATEGIES = ("pfedgraph", "fedaghn", "pfedgat")
SEPARATIONS = (0.0, 0.25, 0.5, 1.0)
PLANTED = {"data.num_groups": 4, "data.num_nodes": 800, "data.num_features": 16}
PLANTED_CLIENTS = 20
CORA_CLIENTS = 30
#: Seeds of the planted federation (graph, split, model and training); Cora runs the first.
SEEDS = (0, 1, 2)
#: The adjusted Rand index the issue asks for.
GOAL = 0.9


def planted_config(strategy: str, separation: float, seed: int,
                   rounds: int | None = None) -> ExperimentConfig:
    r"""The run of ``strategy`` on the planted federation."""
    return ExperimentConfig(dataset="planted-graphs", strategy=strategy,
                            clients=PLANTED_CLIENTS, rounds=rounds, seed=seed,
                            overrides={**PLANTED, "data.separation": separation})


def cora_config(strategy: str, rounds: int | None = None) -> ExperimentConfig:
    r"""The run of ``strategy`` on Cora's overlapping split."""
    return ExperimentConfig(dataset="cora", strategy=strategy, clients=CORA_CLIENTS,
                            partition="overlapping", rounds=rounds, seed=SEEDS[0],
                            overrides={"data.root": DATA_ROOT})


def measure(cfg: ExperimentConfig) -> tuple[Any, dict[str, Any]]:
    r"""Trains the run of ``cfg`` (from the repository root, where
    :data:`DATA_ROOT` points) and scores its final graph and every round's."""
    with contextlib.chdir(ROOT):
        sim = build_simulator(cfg)
        sim.run()
    graph = sim.strategy.collaboration_graph()
    truth = sim.dataset.client_labels
    if graph is None or truth is None:  # strategies and datasets chosen so
        raise RuntimeError(f"{cfg.strategy} on {cfg.dataset} has no graph or no groups")
    summary = sim.summary()
    model, kwargs = resolved_model(cfg, sim.dataset)
    return sim, {
        "ari": summary["adjusted_rand_index"], "ri": summary["rand_index"],
        "ari_components": graph_recovery(graph, truth, rule="components")["adjusted_rand_index"],
        "series": [r.extra["adjusted_rand_index"] for r in sim.history.records],
        "rounds": [r.round for r in sim.history.records],
        "self_weight": float(graph.double().diagonal().mean()),
        "protocol": f"{model} {kwargs}, {sim.trainer.config}",
    }


def scores(entry: dict[str, Any]) -> dict[str, Any]:
    r"""A record's figures for its table row: the recorded ones, and the
    first round with ARI >= :data:`GOAL` and how many rounds reach it."""
    reached = [r for r, v in zip(entry["rounds"], entry["series"], strict=True) if v >= GOAL]
    return {**entry, "first": reached[0] if reached else None, "at_goal": len(reached),
            "evaluated": len(entry["series"]), "test": entry["summary"]["test"]}


def row(label: str, strategy: str, runs: list[dict[str, Any]]) -> str:
    r"""One table row from :func:`scores` of the runs; per-seed values
    joined by " / "."""
    def each(key: str, fmt: str = "{:.3f}") -> str:
        return " / ".join("-" if r[key] is None else fmt.format(r[key]) for r in runs)

    mean_test = 100 * sum(r["test"] for r in runs) / len(runs)
    return (f"| {label} | {strategy} | {each('ari')} | {each('ri')} | "
            f"{each('ari_components')} | {each('first', '{}')} | "
            f"{each('at_goal', '{}')} of {runs[0]['evaluated']} | {each('self_weight')} | "
            f"{mean_test:.1f} | {sum(r['seconds'] for r in runs):.0f} |")


HEADER = ["| federation | strategy | ARI | RI | ARI (components) | first round ARI >= 0.9 "
          "| rounds ARI >= 0.9 | mean self weight | test acc % (mean) | seconds |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]


def report(rounds: int | None, run_missing: bool, flags: str = "") -> str:
    r"""The results file's text (without its readings); the runs whose
    records are missing are trained first when ``run_missing`` (``flags``:
    the options the commands of the missing runs repeat)."""
    pending: list[str] = []
    protocols: dict[str, str] = {}

    def fetch(cfg: ExperimentConfig, what: str) -> dict[str, Any] | None:
        entry = (RUNS.run_study(cfg, STUDY, lambda: measure(cfg)) if run_missing
                 else RUNS.load_study(cfg, STUDY))
        if entry is None:
            pending.append(what)
            return None
        protocols.setdefault(cfg.dataset, entry["protocol"])
        return scores(entry)

    lines = ["# Graph recovery: learned collaboration graphs against the true client groups",
             "", "`benchmarks/reproduce/graph_recovery.py`: "
             "the groups read from each strategy's final collaboration matrix W, scored "
             "against the federation's true groups. ARI: adjusted Rand index with spectral "
             "clustering of (|W| + |W|^T)/2 (diagonal ignored) into the true number of groups "
             "(scikit-learn, random_state 0), the rule every run records per round; RI: Rand "
             "index, same reading; ARI (components): connected components of each client's "
             "top-k links, k = group size - 1. \"first round\" and \"rounds ARI >= 0.9\" "
             "count over the spectral ARI of every round. Mean self weight: the mean diagonal "
             "of W. Test accuracy: mean client accuracy at the best-validation round. Where "
             "several seeds ran, each cell lists them in order (seed 0 / 1 / 2); seconds: "
             "their runs' wall seconds together. Goal (issue 33): ARI >= 0.9 at the clearest "
             "separation and on Cora. Each run is a record in `benchmarks/results/claims_runs/` "
             f"(study `{STUDY}`); `{COMMAND} --cached-only` rebuilds this file from them "
             "without training.", ""]
    lines += [f"## planted-graphs: {PLANTED_CLIENTS} clients, 4 groups, 800 nodes, 16 features, "
              f"seeds {', '.join(map(str, SEEDS))}", "", *HEADER]
    final: dict[str, list[float] | None] = {}
    for s in SEPARATIONS:
        for strategy in STRATEGIES:
            runs = [fetch(planted_config(strategy, s, seed, rounds),
                          f"planted s = {s} {strategy} seed {seed}") for seed in SEEDS]
            done = [r for r in runs if r is not None]
            if strategy == STRATEGIES[0] and s == max(SEPARATIONS):
                final["planted"] = [r["ari"] for r in done] if len(done) == len(runs) else None
            lines.append(row(f"s = {s}", strategy, done) if done else
                         f"| s = {s} | {strategy} | pending |" + " |" * 7)
    lines += ["", f"## Cora, overlapping: {CORA_CLIENTS} clients in 6 groups (METIS parts), "
              f"seed {SEEDS[0]}", "", *HEADER]
    for strategy in STRATEGIES:
        r = fetch(cora_config(strategy, rounds), f"cora overlapping {strategy}")
        if strategy == STRATEGIES[0]:
            final["cora"] = None if r is None else [r["ari"]]
        lines.append(row("cora overlapping", strategy, [r]) if r is not None else
                     f"| cora overlapping | {strategy} | pending |" + " |" * 7)
    lines += ["", "## Goal", "", goal_line(final), ""]
    if pending:
        lines += [f"## Not yet run ({counted(len(pending), 'run')})", "",
                  f"`{COMMAND}{flags}` runs them (Cora's from the Planetoid files in "
                  f"`{DATA_ROOT}`, relative to the repository root); `{COMMAND}{flags} "
                  "--cached-only` then rewrites this file.", "",
                  *(f"- {what}" for what in pending), ""]
    lines += ["## Protocol", "", *(f"- {name}: {text}" for name, text in protocols.items()),
              "- strategies: their default hyper-parameters; all clients every round", "",
              "## Runs", "", f"Records made with {made_with(RUNS.used.values())}.", "",
              *runs_table(RUNS.used), ""]
    return "\n".join(lines)


def goal_line(final: dict[str, list[float] | None]) -> str:
    r"""Issue 33's goal, met or not, with pFedGraph's final ARIs at the
    clearest separation (every seed) and on Cora (``None``: runs missing)."""
    planted, cora = final.get("planted"), final.get("cora")
    what = (f"- {STRATEGIES[0]}'s final ARI >= {GOAL} at s = {max(SEPARATIONS)} (every seed) "
            "and on Cora's overlapping split: ")
    if planted is None or cora is None:
        return what + "open (runs missing)."
    met = min(planted) >= GOAL and min(cora) >= GOAL
    return what + (f"**{'met' if met else 'not met'}** (s = {max(SEPARATIONS)}: "
                   f"{' / '.join(f'{v:.3f}' for v in planted)}; Cora: {cora[0]:.3f}).")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds each, no file")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of every run (default: the datasets' own)")
    parser.add_argument("--cached-only", action="store_true",
                        help="only read the records: train nothing, list what is missing")
    parser.add_argument("--no-write", action="store_true",
                        help="run (and record) without writing the results file")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else None)
    flags = (" --quick" if args.quick else "") + (f" --rounds {args.rounds}"
                                                  if args.rounds else "")
    load_start = os.getloadavg()[0]
    text = report(rounds, not args.cached_only, flags)
    text += "\n" + "\n".join(["## Machine", "", *machine_lines(load_start), ""])
    text = keep_readings(args.out.read_text() if args.out.is_file() else "", text)
    print(text)
    save_report(text, None if args.quick or args.no_write else args.out)
    return text


if __name__ == "__main__":
    keep_freed_memory_at_start()
    torch.set_num_threads(1)
    # The runs' warnings (small validation splits, per-client-best ties) are not what
    # this benchmark measures.
    logging.basicConfig(level=logging.ERROR)
    main()
