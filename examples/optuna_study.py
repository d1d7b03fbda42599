r"""Tune pFedGraph with Optuna on a pathological split of the digits.

pFedGraph (Ye et al., ICML 2023) has two hyper-parameters: :math:`\alpha`,
the weight of model similarity in the collaboration-graph QP, and
:math:`\lambda`, the weight of the cosine regularizer of local training. The
paper's sensitivity study (Fig. 4b) tries :math:`\alpha \in \{0.7, 0.8, 0.9,
1.0\}` with 10 clients and :math:`\lambda \in \{0.001, 0.01, 0.1, 1\}`.

This script tunes both with Optuna's TPE sampler and the median pruner on
scikit-learn's handwritten digits (offline) split over 10 clients with 2
classes each. :math:`\lambda` comes from pFedGraph's own search space
(``PFedGraph.search_space``); :math:`\alpha` is not in it (its scale grows with
the number of clients), so it is added here as a user range, as
``pyg-fedgraph tune --param alpha=0.5:1.2`` would. Each trial reports its mean
validation accuracy every round; the study keeps, for each trial, the test
accuracy at its best validation round.

The study lives in ``<out>/study.db`` (SQLite): run the script again to add
trials to it, or start a second copy at the same time to share the work. It
writes ``best.json``, ``trials.csv`` and Optuna's optimization-history,
intermediate-values and parameter-importance plots to ``<out>``.

Run (a few minutes on 2 CPU cores):  python examples/optuna_study.py [--trials 12] [--quick]
The same study from the command line:
    pyg-fedgraph tune --dataset digits --partition pathological --strategy pfedgraph \
        --n-trials 12 --rounds 5 --set epochs=1 --param alpha=0.5:1.2 \
        --storage sqlite:///runs/optuna_study/study.db --study-name pfedgraph-digits
"""
import argparse
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    r"""The example's options (argparse only: ``--help`` needs neither torch nor optuna)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=12, help="trials this run adds")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per trial")
    parser.add_argument("--strategy", default="pfedgraph")
    parser.add_argument("--out", type=Path, default=Path("runs/optuna_study"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 2 trials of 2 rounds (its own study in <out>)")
    return parser


if __name__ == "__main__":  # --help and bad options answer before torch and optuna are imported
    build_parser().parse_args()

import optuna  # noqa: E402
from optuna.distributions import FloatDistribution  # noqa: E402

from pyg_fedgraph.cli import run_command  # noqa: E402
from pyg_fedgraph.experiment import ExperimentConfig  # noqa: E402
from pyg_fedgraph.tune import study_summary, tune, write_study  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.trials, args.rounds = 2, 2
        if args.out == Path("runs/optuna_study"):  # keep the real study apart
            args.out = Path("runs/optuna_study_quick")

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = ExperimentConfig(dataset="digits", partition="pathological", strategy=args.strategy,
                           rounds=args.rounds, seed=args.seed,
                           overrides={"epochs": 1})  # short trials; the ranking is what matters
    params = {"alpha": FloatDistribution(0.5, 1.2)} if args.strategy == "pfedgraph" else {}
    args.out.mkdir(parents=True, exist_ok=True)
    study = tune(cfg, args.trials, storage=f"sqlite:///{args.out / 'study.db'}",
                 study_name=f"{args.strategy}-digits", pruner="median", params=params,
                 show_progress_bar=True)

    print(f"\n{'trial':>5} {'state':>9} " + " ".join(f"{k:>9}" for k in sorted(
        study.best_params)) + f" {'val':>7} {'test@val':>8} {'round':>5}")
    for t in study.trials:
        values = " ".join(f"{t.params.get(k, float('nan')):>9.4f}" for k in sorted(
            study.best_params))
        val = t.value if t.value is not None else float("nan")
        test = t.user_attrs.get("test_at_best_val") or float("nan")
        print(f"{t.number:>5} {t.state.name:>9} {values} {val:>7.4f} {test:>8.4f} "
              f"{t.user_attrs.get('best_round', '-'):>5}")
    summary = study_summary(study, run_command)
    print(f"\nbest trial #{summary['best_trial']}: {summary['best_params']}")
    print(f"validation accuracy {summary['best_value']:.4f}, test accuracy at its best "
          f"validation round ({summary['best_round']}) {summary['test_at_best_val']:.4f}")
    print(f"reproduce: {summary['command']}")
    written = write_study(study, args.out, run_command)
    print("written:", ", ".join(str(p) for p in written.values()))


if __name__ == "__main__":
    main()
