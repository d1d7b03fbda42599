r"""Graph classification across clients and datasets: does pFedGraph find the
datasets? (issue 35; GCFL's cross-dataset setting, Xie et al., NeurIPS 2021)

Twelve clients hold graphs of four TU datasets, three clients each: MUTAG
(molecules, 2 classes), PROTEINS (2), ENZYMES (6) and AIDS (molecules, 2).
Every client trains GCFL's GIN; only its GIN layers are federated, the input
layer (features zero-padded to the widest dataset) and the head (masked to
the client's own classes) stay private. pFedGraph learns a collaboration
graph from the similarity of the clients' shared parameters; the clients of
one dataset should collaborate with each other. The example prints the test
accuracy of pFedGraph and of training alone (Local), the adjusted Rand index
of a spectral clustering of pFedGraph's graph against the datasets (1: the
datasets exactly), and saves the graph as a heatmap with the clients ordered
by dataset (``collaboration_graph.png``).

The setting is ``configs/graph_classification_tu.yaml``; the datasets are
read from ``--root`` (the files of the TUDataset collection, e.g.
``../shared/data/tu``). ``--quick`` runs 3 rounds on 40 graphs per client
(about a minute on a CPU); the default, 30 rounds on all graphs, takes some
20 minutes (GCFL's protocol has 200).

Usage::

    python examples/graph_classification_tu.py --root ../shared/data/tu [--quick]
        [--rounds 30] [--out runs/graph_classification_tu]
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from pyg_fedgraph.experiment.files import load_config  # torch-free

HERE = Path(__file__).resolve().parent
SETTING = load_config(HERE.parent / "configs" / "graph_classification_tu.yaml")
DEFAULT_ROOT = HERE.parents[1] / "shared" / "data" / "tu"


def build_parser() -> argparse.ArgumentParser:
    r"""The example's options (argparse only: ``--help`` needs no torch)."""
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help="folder of the TU datasets (default: ../shared/data/tu)")
    parser.add_argument("--rounds", type=int, default=30,
                        help="rounds of each run (default: 30; GCFL's protocol has 200)")
    parser.add_argument("--seed", type=int, default=SETTING.get("seed", 0),
                        help="seed of the split and the models (default: the config's)")
    parser.add_argument("--out", type=Path, default=Path("runs/graph_classification_tu"),
                        help="folder of the heatmap (default: runs/graph_classification_tu)")
    parser.add_argument("--quick", action="store_true",
                        help="3 rounds on 40 graphs per client (about a minute)")
    return parser


if __name__ == "__main__":  # --help and bad options answer before torch is imported
    build_parser().parse_args()

import torch  # noqa: E402

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator  # noqa: E402
from pyg_fedgraph.utils.errors import one_line  # noqa: E402
from pyg_fedgraph.viz import client_order, plot_collaboration_matrix  # noqa: E402


def train(strategy: str, args: argparse.Namespace) -> Any:
    r"""One run of ``strategy`` in the setting; returns the simulator."""
    overrides = {**SETTING["set"], "data.root": str(args.root),
                 # One client after the other: faster than vmap for GIN on a CPU
                 # (benchmarks/results/graph_classification_batching.md).
                 "execution": "loop"}
    if args.quick:
        overrides["data.graphs_per_client"] = 40
    cfg = ExperimentConfig(dataset=SETTING["dataset"], model=SETTING["model"],
                           strategy=strategy, rounds=args.rounds, seed=args.seed,
                           overrides=overrides)
    sim = build_simulator(cfg)
    sim.run()
    return sim


def dataset_grouping_ari(weight: torch.Tensor, datasets: torch.Tensor) -> float:
    r"""Adjusted Rand index of a spectral clustering of the symmetrized
    graph :math:`(W + W^\top) / 2` into as many groups as datasets."""
    from sklearn.cluster import SpectralClustering
    from sklearn.metrics import adjusted_rand_score
    w = weight.detach().double().cpu()
    affinity = ((w + w.t()) / 2).clamp(min=0).numpy()
    k = int(datasets.max()) + 1
    labels = SpectralClustering(n_clusters=k, affinity="precomputed",
                                random_state=0).fit_predict(affinity)
    return float(adjusted_rand_score(datasets.tolist(), labels.tolist()))


def plot(weight: torch.Tensor, datasets: torch.Tensor, names: list[str], title: str):
    r"""The heatmap of ``weight`` with the clients ordered by dataset, the
    datasets named along the top."""
    order = dataclasses.replace(client_order(weight, datasets), names=list(names),
                                description="clients ordered by dataset of origin")
    fig = plot_collaboration_matrix(weight, title=title, order=order)
    fig.axes[1].set_ylabel(r"weight $W_{ij}$ (share of client i's aggregate; rows sum to 1)")
    return fig


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.rounds = 3
    t0 = time.perf_counter()
    try:
        runs = {name: train(name, args) for name in ("local", "pfedgraph")}
    except (OSError, ValueError, ImportError) as err:  # missing files: one line
        raise SystemExit(f"graph_classification_tu.py: error: {one_line(err)}") from None
    sim = runs["pfedgraph"]
    datasets = sim.dataset.client_labels
    names = list(sim.dataset.info["datasets"])
    weight = sim.strategy.collaboration_graph().cpu()
    ari = dataset_grouping_ari(weight, datasets)
    accuracy = {name: run.summary()["test"] for name, run in runs.items()}
    print(f"{len(datasets)} clients, datasets {', '.join(names)}, {args.rounds} rounds "
          f"({time.perf_counter() - t0:.0f} s)")
    print("test accuracy: " + ", ".join(f"{n} {a:.3f}" for n, a in accuracy.items()))
    print(f"pFedGraph's graph, spectral clustering against the datasets: ARI {ari:.2f}")
    same = datasets.unsqueeze(0) == datasets.unsqueeze(1)
    inside = float((weight * same).sum(1).mean())
    print(f"share of each client's weight on clients of its own dataset: {inside:.2f} "
          f"(uniform weights: {float(same.sum(1).float().mean()) / len(datasets):.2f})")
    args.out.mkdir(parents=True, exist_ok=True)
    fig = plot(weight, datasets, names, f"pFedGraph, GIN clients of {len(names)} datasets")
    path = args.out / "collaboration_graph.png"
    fig.savefig(path, dpi=150)
    print(f"heatmap written to {path}")
    return {"accuracy": accuracy, "ari": ari, "inside": inside, "weight": weight,
            "figure": path}


if __name__ == "__main__":
    main()
