r"""Traffic forecasting on METR-LA with every road sensor as a client.

The Panacea paper's setting (Lin, Lan, He and Li, Sec. IV): 207 loop detectors of Los
Angeles, one client each, the road graph as the prior client graph, a GRU
forecaster reading 12 steps (speed, time of day) and predicting the next 12.
This script trains Local, FedAvg, FedAvg-FT, pFedGraph and Panacea (``--all``
adds every other registered strategy) and prints, per strategy, the masked
MAE / RMSE / MAPE in mph at horizons 3, 6 and 12 (15, 30, 60 minutes) and
the MSE on normalized speeds (x 1e-3, Panacea's measure), all averaged over
clients at the round of best validation MSE.

Speeds: the real ``metr-la.h5`` with ``--h5 PATH`` (checked against the
published file's sha256 unless ``--no-verify``); DCRNN's processed windows
``train.npz``, ``val.npz``, ``test.npz`` with ``--npz DIR`` (a folder holding
them or their ``METR-LA`` folder, with a ``sensor_ids.txt`` naming the
sensors unless they are all 207: the series is rebuilt from them and
windowed 12 in / 12 out, one client per sensor of the files); otherwise
**synthetic** speeds (:func:`pyg_fedgraph.datasets.traffic.synthetic_traffic`)
on the real METR-LA road graph. The road graph is the one bundled with
pyg_fedgraph unless ``--graph`` names DCRNN's ``adj_mx.pkl`` (or its folder),
restricted to the sensors of the files. Every printed table and saved
picture says which speeds it shows; pictures go to ``runs/metr_la_traffic/``
in the repository unless ``--out`` says otherwise.

It also saves, for the strategies that have one, the collaboration graph
drawn over the road graph (grey), without a map
(:func:`pyg_fedgraph.viz.plot_collaboration_network`).

Measured on recorded speeds with ``--quick --npz
../shared/data/traffic-fragments/dcrnn-pytorch-modified/METR-LA`` (DCRNN's
processed windows of 20 METR-LA sensors over the whole four months, rebuilt
and windowed 12 in / 12 out: 23,974 / 3,425 / 6,850 windows per sensor, the
sensors' rows and columns of the road graph; ``../shared/data/README.md``
says where they come from), and ``--seed 1``: a short run, 16 rounds of 10
local steps, 25% of the sensors per round, a GRU with hidden 32, about 70 s
of CPU on one thread per seed (4 minutes of wall time on a busy 2-core
machine), far from converged and far from Panacea's protocol (for that, see
section O of ``benchmarks/results/claims.md``). Test metrics at the best
validation round, averaged over the sensors: MSE on normalized speeds x 1e-3
and masked MAE in mph at 15 / 60 minutes (the strategies' code of that day;
later changes to them move these numbers):

==== ================== ================== ================== ================== ==================
seed local              fedavg             fedavg-ft          pfedgraph          panacea
==== ================== ================== ================== ================== ==================
0    330.8, 4.41 / 6.59 337.4, 4.14 / 6.84 311.9, 4.06 / 6.37 319.3, 4.29 / 6.61 325.6, 4.44 / 6.97
1    320.4, 4.35 / 6.35 336.2, 4.24 / 6.78 312.3, 4.08 / 6.31 318.5, 4.16 / 6.37 335.6, 4.32 / 6.71
==== ================== ================== ================== ================== ==================

Usage::

    python examples/metr_la_traffic.py --quick            # < 3 min on 2 CPU cores
    python examples/metr_la_traffic.py --h5 data/metr-la.h5
    python examples/metr_la_traffic.py --npz data/METR-LA      # DCRNN's npz windows
    python examples/metr_la_traffic.py --quick \
        --npz ../shared/data/traffic-fragments/dcrnn-pytorch-modified/METR-LA   # the table
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_parser() -> argparse.ArgumentParser:
    r"""The example's options (argparse only: ``--help`` needs no torch)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--h5", help="the real metr-la.h5 (default: synthetic speeds)")
    parser.add_argument("--npz", metavar="DIR",
                        help="a folder of DCRNN's train/val/test.npz windows (or holding "
                             "their METR-LA folder), instead of --h5")
    parser.add_argument("--no-verify", action="store_true",
                        help="read an --h5 file that is not the published metr-la.h5")
    parser.add_argument("--graph", default=None,
                        help="DCRNN's adj_mx.pkl or its folder (default: the road graph "
                             "bundled with pyg_fedgraph)")
    parser.add_argument("--quick", action="store_true", help="short run (< 3 min, 2 cores)")
    parser.add_argument("--model", choices=("gru", "gru-seq2seq"), default="gru",
                        help="client model: a GRU with a 12-step linear head (default), or "
                             "the GRU encoder-decoder of CNFGNN that Panacea uses (62,501 "
                             "parameters at hidden 100)")
    parser.add_argument("--all", action="store_true", help="every registered strategy")
    parser.add_argument("--strategies", help="comma list of strategies to run instead")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int,
                        help="torch CPU threads (default: 1 with --quick, whose many small "
                             "operations run faster on one thread, else torch's default)")
    parser.add_argument("--out", default=str(REPO / "runs" / "metr_la_traffic"),
                        help="where pictures go (default: runs/metr_la_traffic in the "
                             "repository, which git ignores)")
    return parser


if __name__ == "__main__":  # --help and bad options answer before torch is imported
    build_parser().parse_args()

import torch  # noqa: E402

from pyg_fedgraph.datasets import load_dataset  # noqa: E402
from pyg_fedgraph.datasets.traffic import METRLA, TrafficDataset, read_speed_h5  # noqa: E402
from pyg_fedgraph.experiment import ExperimentConfig, build_simulator  # noqa: E402
from pyg_fedgraph.experiment.files import load_config  # noqa: E402
from pyg_fedgraph.simulation.report import format_table  # noqa: E402
from pyg_fedgraph.strategies import STRATEGIES  # noqa: E402
from pyg_fedgraph.train.traffic_metrics import add_rmse  # noqa: E402
from pyg_fedgraph.utils.errors import one_line  # noqa: E402

MAIN = ("local", "fedavg", "fedavg-ft", "pfedgraph", "panacea")
HORIZONS = (3, 6, 12)

#: Run settings, the same for every strategy. Clients are sampled each round
#: (Panacea samples 5 of the 207 sensors per round, Sec. IV-A): quick runs
#: sample 25% so that every sensor trains a few times in 16 rounds. quick:
#: one week of synthetic speeds and a small GRU; full: four weeks and the
#: paper's GRU (hidden 100), batch 64 and K_c = 50 local steps.
_FULL = load_config(REPO / "configs" / "metr_la_panacea.yaml")
SETTINGS = {
    "quick": {"synthetic_steps": 2016, "hidden": 32, "rounds": 16, "steps": 10,
              "batch_size": 32, "lr": 0.5, "sample_fraction": 0.25, "eval_every": 4},
    # The full settings are configs/metr_la_panacea.yaml's (users run the same file).
    "full": {"synthetic_steps": 8064, "hidden": _FULL["set"]["model.hidden_channels"],
             "rounds": _FULL["rounds"],
             **{k: _FULL["set"][k] for k in ("steps", "batch_size", "lr", "sample_fraction",
                                             "eval_every")}},
}
#: Per-strategy options (server learning rates for the short runs used here;
#: pFedMe's lambda such that lr * lambda stays below 2, see its docstring;
#: FedRep's head trained for as many steps as the body, not 10 epochs).
STRATEGY_OPTIONS = {"panacea": {"hn_lr": 0.01}, "pfedhn": {"hn_lr": 0.01},
                    "pfedme": {"lam": 1.0}, "fedrep": {"head_steps": 10},
                    # FedALA's weight learning walks 80% of a sensor's ~1400 training windows
                    # per round (up to 50 times in its first): 35 steps against 10 of training.
                    "fedala": {"share": 0.1, "max_start_epochs": 10},
                    # alpha_k <= sigma / (N - 1) keeps FedAMP's cloud models convex combinations
                    # of the 207 sensors' models; lam = alpha_k keeps the proximal coefficient
                    # lam / alpha_k at 1 (lr 0.5 times a larger one diverges).
                    "fedamp": {"alpha_k": 0.004, "lam": 0.004}}


def load_data(args: argparse.Namespace, steps: int) -> TrafficDataset:
    if args.h5 and args.npz:
        raise ValueError("give --h5 or --npz, not both")
    if args.npz:
        return METRLA(args.npz, graph_path=args.graph)
    if args.h5:
        if Path(args.h5).is_file() and not args.no_verify:
            METRLA.verify_speed_file(args.h5, skip="pass --no-verify")
        ids, adj, graph = METRLA.road_graph(args.graph)   # None: the bundled graph
        return TrafficDataset.from_table(read_speed_h5(args.h5), "metr-la", adj=adj,
                                         sensor_ids=ids, info={"graph": graph})
    return load_dataset("metr-la", graph_path=args.graph, synthetic_steps=steps,
                        seed=args.seed)


def client_mean(values: torch.Tensor) -> float:
    r"""Mean over clients, leaving out NaN (a sensor without valid targets)."""
    return float(torch.nanmean(values.double()))


def horizon_row(sim, name: str, seconds: float) -> dict:
    r"""Test metrics at the best validation round, averaged over clients
    (RMSE: per client from its MSE, then averaged)."""
    hist = sim.history
    record = hist.records[hist.best_index]
    test = add_rmse(record.test)
    row = {"strategy": name, "mse_norm x1e-3": 1e3 * client_mean(test["mse_norm"])}
    for h in HORIZONS:
        for kind in ("mae", "rmse", "mape"):
            key = f"{kind}@{h}"
            if key in test:
                row[key] = client_mean(test[key])
    row["best round"] = record.round
    row["seconds"] = seconds
    return row


def road_share(weight: torch.Tensor, edge_index: torch.Tensor, top_k: int = 2
               ) -> tuple[float, float]:
    r"""Share of each client's ``top_k`` largest off-diagonal collaboration
    weights that go to a road neighbour (either direction), and the share
    expected by chance (the road graph's density)."""
    n = weight.size(0)
    w = weight.detach().float().cpu().clone().fill_diagonal_(float("-inf"))
    edge_index = edge_index.cpu()
    road = torch.zeros(n, n, dtype=torch.bool)
    road[edge_index[0], edge_index[1]] = True
    road = (road | road.t()).fill_diagonal_(False)
    hits = road.gather(1, w.topk(top_k, dim=1).indices).float().mean()
    return float(hits), float(road.sum()) / (n * (n - 1))


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    threads = args.threads or (1 if args.quick else None)
    if threads:
        torch.set_num_threads(threads)
    cfg = dict(SETTINGS["quick" if args.quick else "full"])
    if args.rounds:
        cfg["rounds"] = args.rounds

    t0 = time.perf_counter()
    try:
        data = load_data(args, cfg["synthetic_steps"])
    except (OSError, ValueError, ImportError) as err:  # a missing file or package: one line
        raise SystemExit(f"metr_la_traffic.py: error: {one_line(err)}") from None
    synthetic = bool(data.info.get("synthetic"))
    speeds = "SYNTHETIC speeds on the real METR-LA road graph" if synthetic else \
        f"recorded speeds from {args.h5 or args.npz}"
    print(f"{data}\n{speeds}; prior graph: {data.edge_index.size(1)} directed road edges")
    print("settings: " + ", ".join(f"{k}={v}" for k, v in cfg.items()) + "\n")

    names = [s for s in MAIN if s in STRATEGIES]
    missing = [s for s in MAIN if s not in STRATEGIES]
    if missing:
        print(f"not registered (skipped): {missing}")
    if args.all:
        names += sorted(s for s in STRATEGIES if s not in names)
    if args.strategies:
        names = args.strategies.split(",")
        unknown = [s for s in names if s not in STRATEGIES]
        if unknown:
            raise SystemExit(f"unknown strategies {unknown}; known: {sorted(STRATEGIES)}")

    rows, graphs = [], {}
    for name in names:
        overrides = {"model": args.model, "model.hidden_channels": cfg["hidden"],
                     "steps": cfg["steps"], "batch_size": cfg["batch_size"], "lr": cfg["lr"],
                     "eval_every": cfg["eval_every"], "sample_fraction": cfg["sample_fraction"],
                     **STRATEGY_OPTIONS.get(name, {})}
        run = ExperimentConfig(dataset="metr-la", strategy=name, rounds=cfg["rounds"],
                               seed=args.seed, overrides=overrides)
        start = time.perf_counter()
        try:
            sim = build_simulator(run, dataset=data)
        except ValueError as err:  # a strategy for classification only (FedRoD, kNN-Per)
            print(f"{name}: skipped ({err})", flush=True)
            continue
        sim.run()
        rows.append(horizon_row(sim, name, time.perf_counter() - start))
        graph = sim.strategy.collaboration_graph()
        if graph is not None:
            graphs[name] = (graph.detach(), bool(getattr(sim.strategy, "needs_prior_graph",
                                                         False)))
        print(f"{name}: done in {rows[-1]['seconds']:.0f} s", flush=True)

    columns = ["strategy", "mse_norm x1e-3"] + [f"{k}@{h}" for h in HORIZONS
                                                 for k in ("mae", "rmse", "mape")]
    print(f"\nMETR-LA, {data.num_clients} sensor clients, {speeds}; test metrics at the best "
          f"validation round (MAE/RMSE in mph, MAPE in %):")
    print(format_table(rows, columns + ["best round", "seconds"]))

    if graphs:
        import matplotlib.pyplot as plt

        from pyg_fedgraph.viz import plot_collaboration_network
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        tag = "synthetic speeds" if synthetic else "recorded speeds"
        for name, (weight, from_prior) in graphs.items():
            hits, chance = road_share(weight, data.edge_index)
            spread = float((weight - 1.0 / weight.size(0)).abs().mean())
            print(f"{name}: {100 * hits:.0f}% of each sensor's 2 strongest partners are road "
                  f"neighbours (chance {100 * chance:.1f}%); mean |W_ij - 1/N| = {spread:.2e}"
                  + (" (a propagation over the road graph itself)" if from_prior else ""))
            fig = plot_collaboration_network(
                weight, prior_edge_index=data.edge_index, top_k=2,
                title=f"{name} on METR-LA ({tag})")
            path = out / f"collaboration_{name}.png"
            fig.savefig(path, dpi=120)
            plt.close(fig)
            print(f"saved {path}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    if not math.isfinite(rows[0]["mse_norm x1e-3"]):
        raise SystemExit("the first run produced no finite metric")


if __name__ == "__main__":
    main()
