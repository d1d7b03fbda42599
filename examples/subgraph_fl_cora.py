r"""Subgraph federated learning on Cora: 10 institutions, each holding one METIS
part of the citation graph and training a GCN on it.

The setting is ``configs/cora_metis10.yaml`` (FED-PUB's disjoint setting,
Baek et al., ICML 2023): the largest connected component of Cora (2,485
papers) split into 10 METIS parts, one per client, each client a two-layer GCN
of width 128 with a linear classifier, Adam, one full-batch epoch a round.
Local training, FedAvg, FED-PUB (its masked GCN, whose masks stay on the
clients) and pFedGraph are compared (FedAGHN and pFedGAT too without
``--quick``), each scored by the mean test accuracy of the clients at the
round of best mean validation accuracy; a second picture shows every client's
accuracy under each strategy and its gain over local training (who gains,
who loses from collaboration).

The picture sets pFedGraph's learned client graph :math:`W` (row :math:`i`:
the weights client :math:`i` aggregates the clients' models with) beside the
prior client graph the split gives: the number of citation edges METIS cut
between two clients' subgraphs (``dataset.edge_index`` and
``dataset.edge_weight``). The diagonals are left out of both (a client's own
weight; no edge is cut inside a client); the Spearman correlation of the two
over the 45 client pairs (with :math:`W` symmetrized) is printed.

Measured with seed 0 (torch 2.13 on one CPU thread; the strategies' code of
that day, later changes move these numbers), mean test accuracy at the best
validation round after 100 rounds, as ``pyg-fedgraph run --config
configs/cora_metis10.yaml`` prints it (FED-PUB: the record of the same settings
in ``benchmarks/results/subgraph_t1.md``):

========= ====== ====== ========= ======= ======= =======
          local  fedavg pfedgraph fedaghn pfedgat fedpub
========= ====== ====== ========= ======= ======= =======
test      0.8106 0.4819 0.6583    0.7394  0.8047  0.8208
best at   47     99     3         100     71      87
========= ====== ====== ========= ======= ======= =======

pFedGraph's graph here is not a learned structure: the clients' updates
since the initial model are so alike (cosine 0.94 to 0.99 between every two
clients after 20 rounds of a run with ``--set threshold=1.0``, which clips
none) that its default threshold of 0.9 sets every similarity to 1, and each
row of :math:`W` is then the clients' shares of the training nodes, FedAvg's
weights (the script checks and says so). The picture shows exactly that
beside the cut edges, which do have structure (clients 5 and 6 share 76
cut edges, 8 and 9 share 66).

Planetoid's Cora files (``ind.cora.*``) are read from ``--root`` (or PyG's
``<root>/Cora/raw``); ``--download`` fetches them there on a machine with
internet, checksums checked. Writes the picture and ``results.json`` into
``--out``.

Usage::

    python examples/subgraph_fl_cora.py --root DIR --quick   # 4 strategies, 10 rounds
    python examples/subgraph_fl_cora.py --root DIR           # 6 strategies, 100 rounds
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from pyg_fedgraph.experiment.files import load_config  # torch-free

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "cora_metis10.yaml"
SETTING = load_config(CONFIG)
#: ``--quick``: four strategies, 10 rounds.
QUICK = {"strategies": ["local", "fedavg", "fedpub", "pfedgraph"], "rounds": 10}
#: FED-PUB runs with its masked GCN (masks private to the clients), dropout 0.5
#: and the similarity scale of its Cora script (3): benchmarks/reproduce/subgraph_t1.py.
FEDPUB = {"model": "masked-gcn", "set": {"scale": 3.0, "model.dropout": 0.5}}


def build_parser() -> argparse.ArgumentParser:
    r"""The example's options (argparse only: ``--help`` needs no torch)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", metavar="DIR",
                        help="the folder of Planetoid's Cora files ind.cora.* (or of PyG's "
                             "Cora/raw)")
    parser.add_argument("--download", action="store_true",
                        help="fetch the files into --root first (needs internet)")
    parser.add_argument("--rounds", type=int, help=f"rounds (default: {SETTING['rounds']}, "
                                                   f"{QUICK['rounds']} with --quick)")
    parser.add_argument("--seed", type=int, default=SETTING["seed"])
    parser.add_argument("--quick", action="store_true",
                        help="local, fedavg, fedpub and pfedgraph for 10 rounds (about a "
                             "minute on one CPU core)")
    parser.add_argument("--out", default="runs/subgraph_fl_cora",
                        help="folder of the picture and results.json "
                             "(default: runs/subgraph_fl_cora)")
    return parser


if __name__ == "__main__":  # --help and bad options answer before torch is imported
    build_parser().parse_args()

import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from pyg_fedgraph.experiment import (  # noqa: E402
    ExperimentConfig,
    build_dataset,
    build_simulator,
    route_overrides,
)
from pyg_fedgraph.simulation.report import format_table  # noqa: E402
from pyg_fedgraph.utils.errors import one_line  # noqa: E402
from pyg_fedgraph.viz import COLUMN_LABEL, ROW_LABEL, plot_client_accuracy  # noqa: E402


def cut_edge_matrix(edge_index: Tensor, edge_weight: Tensor, num_clients: int) -> Tensor:
    r"""The prior client graph as an :math:`(N, N)` matrix: entry
    :math:`(i, j)` the number of edges cut between clients :math:`i` and
    :math:`j`."""
    dense = torch.zeros(num_clients, num_clients)
    dense[edge_index[0], edge_index[1]] = edge_weight.float()
    return dense


def pair_correlation(weight: Tensor, cut: Tensor) -> float:
    r"""Spearman's rank correlation between :math:`(W_{ij} + W_{ji}) / 2` and
    the edges cut between :math:`i` and :math:`j`, over the pairs
    :math:`i < j`."""
    from scipy.stats import spearmanr

    i, j = torch.triu_indices(cut.size(0), cut.size(0), offset=1)
    symmetric = (weight + weight.t()) / 2
    return float(spearmanr(symmetric[i, j].numpy(), cut[i, j].numpy()).statistic)


def plot_learned_beside_prior(weight: Tensor, cut: Tensor, after_round: int):
    r"""Two heatmaps, clients in index order: the learned :math:`W` and the
    cut-edge counts, each with its own colour bar and unit; the diagonals are
    left blank (grey)."""
    import matplotlib.pyplot as plt

    off = ~torch.eye(weight.size(0), dtype=torch.bool)
    learned = weight.masked_fill(~off, float("nan"))
    prior = cut.masked_fill(~off, float("nan"))
    cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 5.4))
    ticks = list(range(weight.size(0)))
    # The learned weights use the range they take: on a full scale from 0 rows
    # close to the clients' data shares look flat.
    image = left.imshow(learned.numpy(), cmap=cmap, interpolation="nearest")
    fig.colorbar(image, ax=left, fraction=0.046, pad=0.03).set_label(
        r"aggregation weight $W_{ij}$ (share of client j's model in client i's)")
    left.set_title(f"pFedGraph's learned client graph after round {after_round}")
    left.set_xlabel(COLUMN_LABEL)
    left.set_ylabel(ROW_LABEL, fontsize=8)
    image = right.imshow(prior.numpy(), cmap=cmap, vmin=0.0, interpolation="nearest")
    fig.colorbar(image, ax=right, fraction=0.046, pad=0.03).set_label(
        "edges cut between client i's and client j's subgraphs (number of edges)")
    right.set_title("prior client graph: citation edges METIS cut")
    right.set_xlabel("client j")
    right.set_ylabel("client i")
    for ax in (left, right):
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
    fig.text(0.01, 0.01, "Cora, 10 METIS clients; diagonals (a client's own weight, edges "
             "inside a client) left blank", fontsize=8, color="dimgrey")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    strategies = QUICK["strategies"] if args.quick else \
        [*SETTING["strategy"].split(","), "fedpub"]
    rounds = args.rounds or (QUICK["rounds"] if args.quick else SETTING["rounds"])
    if args.root is None:
        raise SystemExit("subgraph_fl_cora.py: error: give the folder of Planetoid's Cora "
                         "files with --root DIR (add --download to fetch them there from "
                         "https://github.com/kimiyoung/planetoid, checksums checked)")
    torch.set_num_threads(1)  # small graphs: one thread is faster than several
    start = time.perf_counter()

    def config(strategy: str) -> ExperimentConfig:
        extra: dict[str, Any] = FEDPUB if strategy == "fedpub" else {}
        return ExperimentConfig(
            dataset=SETTING["dataset"], strategy=strategy, partition=SETTING["partition"],
            clients=SETTING["clients"], model=extra.get("model", SETTING["model"]),
            rounds=rounds, seed=args.seed,
            overrides={**SETTING["set"], **extra.get("set", {}), "data.root": args.root,
                       "data.download": args.download})

    try:
        first = config(strategies[0])
        data = build_dataset(first, route_overrides(first)["data"])
    except (OSError, ValueError, ImportError) as err:  # missing files or pymetis: one line
        raise SystemExit(f"subgraph_fl_cora.py: error: {one_line(err)}") from None
    n = data.num_clients
    print(data)
    report = data.info["report"]
    print("client  nodes  edges kept  edges cut:  "
          + "  ".join(f"{r['client']}:{r['nodes']}/{r['edges']}/{r['edges_cut']}"
                      for r in report))

    rows, weight, after = [], None, 0
    per_client: dict[str, Tensor] = {}  # every client's test accuracy at the best round
    for name in strategies:
        begin = time.perf_counter()
        sim = build_simulator(config(name), dataset=data)
        sim.run()
        summary = sim.summary()
        per_client[name] = sim.history.records[sim.history.best_index].test["accuracy"]
        rows.append({"strategy": name, "test": summary["test"],
                     "test_final": summary["test_final"], "best_round": summary["best_round"],
                     "seconds": round(time.perf_counter() - begin, 1)})
        print(f"{name}: test accuracy {summary['test']:.4f} (round {summary['best_round']}), "
              f"{rows[-1]['seconds']:.0f} s", flush=True)
        if name == "pfedgraph":
            weight, after = sim.strategy.collaboration_graph().detach().float().cpu(), rounds
            similarity = sim.strategy.last_similarity().detach().float().cpu()
    print(f"\nCora, {n} METIS clients, GCN, {rounds} rounds: mean test accuracy of the clients "
          f"at the round of best validation accuracy (test_final: after the last round)")
    print(format_table(rows, ["strategy", "test", "test_final", "best_round", "seconds"]))

    cut = cut_edge_matrix(data.edge_index, data.edge_weight, n)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"rows": rows, "rounds": rounds, "seed": args.seed,
                               "cut_edges": cut.long().tolist()}
    figure = None
    if weight is not None:
        rho = pair_correlation(weight, cut)
        torch.set_printoptions(precision=3, sci_mode=False, linewidth=120)
        print(f"\npFedGraph's learned graph W after round {after} (row i: the weights "
              f"client i aggregates with):\n{weight}")
        off = weight.masked_select(~torch.eye(n, dtype=torch.bool))
        print(f"self weights {weight.diagonal().min():.3f}..{weight.diagonal().max():.3f}, "
              f"other weights {off.min():.3f}..{off.max():.3f} (uniform: {1 / n:.3f})")
        # pFedGraph's prior: each client's share of the training nodes.
        shares = torch.tensor([r["train"] for r in report], dtype=torch.float)
        shares = shares / shares.sum()
        sim_off = similarity.masked_select(~torch.eye(n, dtype=torch.bool))
        print(f"update similarities S_ij fed to the graph inference (after its threshold): "
              f"{sim_off.min():.3f}..{sim_off.max():.3f}")
        if torch.allclose(weight, shares.expand(n, n), atol=1e-4):
            print("every row of W is the clients' shares of the training nodes (FedAvg's "
                  "weights): the similarities do not tell the clients apart")
        print(f"Spearman correlation of (W_ij + W_ji) / 2 with the edges cut between i and j, "
              f"over the {n * (n - 1) // 2} pairs: {rho:+.2f}")
        import matplotlib.pyplot as plt

        fig = plot_learned_beside_prior(weight, cut, after)
        figure = out / "learned_vs_cut_edges.png"
        fig.savefig(figure, dpi=130)
        plt.close(fig)
        print(f"saved {figure}")
        results.update(learned_graph=weight.tolist(), spearman=rho)
    import matplotlib.pyplot as plt

    fig = plot_client_accuracy(per_client, baseline="local" if "local" in per_client else None,
                               title=f"Cora, {n} METIS clients, {rounds} rounds: test accuracy "
                                     f"per client at each strategy's best round")
    accuracy_figure = out / "client_accuracy.png"
    fig.savefig(accuracy_figure, dpi=130)
    plt.close(fig)
    print(f"saved {accuracy_figure}")
    results["client_accuracy"] = {k: v.tolist() for k, v in per_client.items()}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"results in {out} (total {time.perf_counter() - start:.0f} s)")
    return {"rows": rows, "weight": weight, "cut": cut, "report": report,
            "figure": figure, "spearman": results.get("spearman"),
            "accuracy_figure": accuracy_figure, "client_accuracy": per_client}


if __name__ == "__main__":
    main()
