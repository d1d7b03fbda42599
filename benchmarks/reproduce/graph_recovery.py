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

Usage::

    OMP_NUM_THREADS=1 python benchmarks/reproduce/graph_recovery.py --root DIR   # writes results
    OMP_NUM_THREADS=1 python benchmarks/reproduce/graph_recovery.py --quick      # 5 rounds, no file
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator, resolved_model
from pyg_fedgraph.experiment.reporting import machine_lines, save_report
from pyg_fedgraph.utils.recovery import graph_recovery

RESULTS = Path(__file__).resolve().parents[1] / "results" / "graph_recovery.md"
STRATEGIES = ("pfedgraph", "fedaghn", "pfedgat")
SEPARATIONS = (0.0, 0.25, 0.5, 1.0)
PLANTED = {"data.num_groups": 4, "data.num_nodes": 800, "data.num_features": 16}
PLANTED_CLIENTS = 20
CORA_CLIENTS = 30
#: Seeds of the planted federation (graph, split, model and training); Cora runs the first.
SEEDS = (0, 1, 2)
#: The adjusted Rand index the issue asks for.
GOAL = 0.9


def run_one(cfg: ExperimentConfig) -> dict[str, Any]:
    r"""One run; the recovery of its final graph and its ARI series."""
    start = time.perf_counter()
    sim = build_simulator(cfg)
    sim.run()
    summary = sim.summary()
    graph = sim.strategy.collaboration_graph()
    truth = sim.dataset.client_labels
    assert graph is not None and truth is not None  # strategies and datasets chosen so
    series = [r.extra["adjusted_rand_index"] for r in sim.history.records]
    reached = [r.round for r in sim.history.records if r.extra["adjusted_rand_index"] >= GOAL]
    model, kwargs = resolved_model(cfg, sim.dataset)
    return {
        "ari": summary["adjusted_rand_index"], "ri": summary["rand_index"],
        "ari_components": graph_recovery(graph, truth, rule="components")["adjusted_rand_index"],
        "first": reached[0] if reached else None, "at_goal": len(reached),
        "rounds": len(series), "series": series, "test": summary["test"],
        "self_weight": float(graph.double().diagonal().mean()),
        "protocol": f"{model} {kwargs}, {sim.trainer.config}",
        "seconds": time.perf_counter() - start,
    }


def row(label: str, strategy: str, runs: list[dict[str, Any]]) -> str:
    r"""One table row; per-seed values joined by " / "."""
    def each(key: str, fmt: str = "{:.3f}") -> str:
        return " / ".join("-" if r[key] is None else fmt.format(r[key]) for r in runs)

    mean_test = 100 * sum(r["test"] for r in runs) / len(runs)
    return (f"| {label} | {strategy} | {each('ari')} | {each('ri')} | "
            f"{each('ari_components')} | {each('first', '{}')} | "
            f"{each('at_goal', '{}')} of {runs[0]['rounds']} | {each('self_weight')} | "
            f"{mean_test:.1f} | {sum(r['seconds'] for r in runs):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=None,
                        help="folder of the Planetoid files (Cora); without it Cora is skipped")
    parser.add_argument("--quick", action="store_true", help="5 rounds each, no file")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of every run (default: the datasets' own)")
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.quick else None)
    load_start = os.getloadavg()[0]
    start = time.perf_counter()
    header = ["| federation | strategy | ARI | RI | ARI (components) | first round ARI >= 0.9 "
              "| rounds ARI >= 0.9 | mean self weight | test acc % (mean) | seconds |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines = ["# Graph recovery: learned collaboration graphs against the true client groups",
             "", f"`benchmarks/reproduce/graph_recovery.py`{' --quick' if args.quick else ''}: "
             "the groups read from each strategy's final collaboration matrix W, scored "
             "against the federation's true groups. ARI: adjusted Rand index with spectral "
             "clustering of (|W| + |W|^T)/2 (diagonal ignored) into the true number of groups "
             "(scikit-learn, random_state 0), the rule every run records per round; RI: Rand "
             "index, same reading; ARI (components): connected components of each client's "
             "top-k links, k = group size - 1. \"first round\" and \"rounds ARI >= 0.9\" "
             "count over the spectral ARI of every round. Mean self weight: the mean diagonal "
             "of W. Test accuracy: mean client accuracy at the best-validation round. Where "
             "several seeds ran, each cell lists them in order (seed 0 / 1 / 2). Goal "
             "(issue 33): ARI >= 0.9 at the clearest separation and on Cora.", ""]
    protocols: dict[str, str] = {}
    lines += [f"## planted-graphs: {PLANTED_CLIENTS} clients, 4 groups, 800 nodes, 16 features, "
              f"seeds {', '.join(map(str, SEEDS))}", "", *header]
    for s in SEPARATIONS:
        for strategy in STRATEGIES:
            runs = []
            for seed in SEEDS:
                cfg = ExperimentConfig(dataset="planted-graphs", strategy=strategy,
                                       clients=PLANTED_CLIENTS, rounds=rounds, seed=seed,
                                       overrides={**PLANTED, "data.separation": s})
                runs.append(run_one(cfg))
                protocols["planted-graphs"] = runs[-1]["protocol"]
                print(f"[recovery] planted s={s} {strategy} seed {seed}: ARI "
                      f"{runs[-1]['ari']:.3f} series "
                      f"{[round(v, 2) for v in runs[-1]['series']]}", flush=True)
            lines.append(row(f"s = {s}", strategy, runs))
    lines.append("")
    if args.root is not None:
        lines += [f"## Cora, overlapping: {CORA_CLIENTS} clients in 6 groups (METIS parts), "
                  f"seed {SEEDS[0]}", "", *header]
        for strategy in STRATEGIES:
            cfg = ExperimentConfig(dataset="cora", strategy=strategy, clients=CORA_CLIENTS,
                                   partition="overlapping", rounds=rounds, seed=SEEDS[0],
                                   overrides={"data.root": args.root})
            r = run_one(cfg)
            protocols["cora"] = r["protocol"]
            lines.append(row("cora overlapping", strategy, [r]))
            print(f"[recovery] cora {strategy}: ARI {r['ari']:.3f} ({r['seconds']:.0f} s) "
                  f"series {[round(v, 2) for v in r['series']]}", flush=True)
        lines.append("")
    else:
        lines += ["Cora: skipped (no --root).", ""]
    lines += ["## Protocol", "", *(f"- {name}: {text}" for name, text in protocols.items()),
              "- strategies: their default hyper-parameters; all clients every round", "",
              "## Machine", "", *machine_lines(load_start),
              f"- total time: {time.perf_counter() - start:.0f} s", ""]
    text = "\n".join(lines)
    print(text)
    save_report(text, None if args.quick else RESULTS)


if __name__ == "__main__":
    torch.set_num_threads(1)
    # The runs' warnings (small validation splits, per-client-best ties) are not what
    # this benchmark measures.
    logging.basicConfig(level=logging.ERROR)
    main()
