r"""pFedGraph's inferred collaboration graphs on the digits data (paper Figure 2).

Two federations of 10 clients, each trained with pFedGraph:

1. **IID split**: every client sees the same label distribution, so the
   inferred graph should be close to uniform. Measured as the mean absolute
   deviation from :math:`1/N`,

   .. math::
       U(W) = \frac{1}{N} \sum_i \frac{1}{N} \sum_j |W_{ij} - 1/N| ,

   and the check is :math:`U(W) \leq 0.05`.
2. **5-pair pathological split**: clients :math:`2k` and :math:`2k+1` hold
   the same two classes :math:`\{2k, 2k+1\}`, split evenly between them
   (``digits(partition="group", num_groups=5, iid_share=0.0)``; the random
   pathological partition does not pair clients). The check: each client's
   largest off-diagonal weight goes to its pair.

Both heatmaps are saved with :func:`pyg_fedgraph.viz.plot_collaboration_matrix`.

Usage::

    python examples/pfedgraph_graphs.py --out runs/pfedgraph_graphs --rounds 10 [--quick]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    r"""The example's options (argparse only: ``--help`` needs no torch)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/pfedgraph_graphs",
                        help="directory for the heatmaps (default: runs/pfedgraph_graphs)")
    parser.add_argument("--rounds", type=int, default=10, help="communication rounds per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds per run")
    return parser


if __name__ == "__main__":  # --help and bad options answer before torch is imported
    build_parser().parse_args()

import torch  # noqa: E402

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator  # noqa: E402
from pyg_fedgraph.viz import plot_collaboration_matrix  # noqa: E402


def train_graph(partition: str, rounds: int, seed: int, **data) -> tuple[torch.Tensor,
                                                                         torch.Tensor, dict]:
    r"""Runs pFedGraph on digits; returns the final graph :math:`W`, the
    clients' ground-truth labels and the run's summary."""
    cfg = ExperimentConfig(dataset="digits", strategy="pfedgraph", partition=partition,
                           rounds=rounds, seed=seed,
                           overrides={f"data.{k}": v for k, v in data.items()})
    sim = build_simulator(cfg)
    sim.run()
    # On the CPU for the checks below, whichever device the run used.
    return sim.strategy.collaboration_graph().cpu(), sim.dataset.client_labels, sim.summary()


def uniformity(weight: torch.Tensor) -> float:
    r""":math:`U(W)`: mean over rows of the mean :math:`|W_{ij} - 1/N|`."""
    n = weight.size(0)
    return float((weight - 1.0 / n).abs().mean(dim=1).mean())


def pair_check(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""For pairs :math:`(2k, 2k+1)`: whether each client's largest
    off-diagonal weight is its pair's, and the weight it gives its pair."""
    n = weight.size(0)
    pair = torch.arange(n) ^ 1  # 0 <-> 1, 2 <-> 3, ...
    off = weight.clone().fill_diagonal_(float("-inf"))
    return off.argmax(dim=1) == pair, weight[torch.arange(n), pair]


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.rounds = 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_printoptions(precision=3, linewidth=120, sci_mode=False)

    t0 = time.perf_counter()
    w_iid, _, summary = train_graph("iid", args.rounds, args.seed)
    u = uniformity(w_iid)
    print(f"IID split, {args.rounds} rounds (test accuracy {summary['test']:.4f}):")
    print(w_iid)
    print(f"  U(W) = mean_i mean_j |W_ij - 1/N| = {u:.4f}  (check <= 0.05: "
          f"{'PASS' if u <= 0.05 else 'FAIL'})")
    fig = plot_collaboration_matrix(w_iid, title="pFedGraph, IID split")
    fig.savefig(out / "iid.png", dpi=150)

    w_pair, groups, summary = train_graph("group", args.rounds, args.seed, num_groups=5,
                                          iid_share=0.0)
    hits, pair_weight = pair_check(w_pair)
    print(f"\n5-pair split (clients 2k, 2k+1 share classes 2k, 2k+1), {args.rounds} rounds "
          f"(test accuracy {summary['test']:.4f}):")
    print(w_pair)
    print(f"  largest off-diagonal weight on the pair: {int(hits.sum())}/{hits.numel()} clients"
          f"  (check: all: {'PASS' if bool(hits.all()) else 'FAIL'})")
    print(f"  weight given to the pair: mean {float(pair_weight.mean()):.3f}, "
          f"min {float(pair_weight.min()):.3f}; self weight mean "
          f"{float(w_pair.diagonal().mean()):.3f}")
    fig = plot_collaboration_matrix(w_pair, groups=groups, title="pFedGraph, 5-pair split")
    fig.savefig(out / "pairs.png", dpi=150)
    print(f"\nheatmaps written to {out} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
