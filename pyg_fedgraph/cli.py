"""Command line: ``pyg-fedgraph run ...`` and ``pyg-fedgraph tune ...``.

With no arguments, ``pyg-fedgraph run`` compares Local, FedAvg and FedAvg-FT
on scikit-learn's handwritten digits (real data, bundled, works offline)
split pathologically over 10 clients.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser", "parse_distribution", "run_command"]

DEFAULT_COMPARISON = ("local", "fedavg", "fedavg-ft")
# Mirrors pyg_fedgraph.attacks.ATTACKS (not imported here: the parser stays light).
_ATTACKS = ("shuffle", "same-value", "sign-flip", "gaussian", "scaled-negative", "label-flip",
            "backdoor")


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set expects key=value, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), v.strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyg-fedgraph",
                                description="Graph-based personalized federated learning.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="simulate a federation and report the papers' metric",
                         description="Simulate strategies on a federated dataset. With no "
                         "options: Local vs FedAvg vs FedAvg-FT on digits (offline).")
    run.add_argument("--dataset", default="digits", help="dataset name (default: digits)")
    run.add_argument("--strategy", default=None,
                     help="strategy name, or several separated by commas "
                          f"(default: {','.join(DEFAULT_COMPARISON)})")
    run.add_argument("--rounds", type=int, default=None, help="communication rounds")
    run.add_argument("--clients", type=int, default=None, help="number of clients")
    run.add_argument("--partition", choices=["iid", "pathological", "dirichlet", "group"],
                     default=None, help="how labels are split over clients")
    run.add_argument("--beta", type=float, default=None, help="Dirichlet concentration")
    run.add_argument("--classes-per-client", type=int, default=None,
                     help="classes per client for the pathological split")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--novel-clients", type=float, default=0.0,
                     help="fraction of clients held out of training and evaluated as novel")
    run.add_argument("--attack", default=None, choices=list(_ATTACKS),
                     help="malicious clients' attack: model poisoning (shuffle, same-value, "
                          "sign-flip, gaussian: pFedGraph; scaled-negative: Panacea) or data "
                          "poisoning (label-flip, backdoor); metrics are then over benign "
                          "clients and summary.json has test_benign")
    run.add_argument("--attack-ratio", type=float, default=0.4,
                     help="share of malicious clients (default: 0.4, pFedGraph Table 3)")
    run.add_argument("--dropout", type=float, default=0.0,
                     help="probability that a sampled client returns nothing in a round")
    run.add_argument("--reject-policy", choices=["drop", "raise"], default="drop",
                     help="bad uploads (NaN/Inf, wrong length, absurd norm): drop them with a "
                          "logged reason (default) or stop with an error")
    run.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                     help="write the whole run state to <out>/checkpoint.pt every K rounds "
                          "and at the end (atomically; default: 0 = never)")
    run.add_argument("--resume", type=Path, default=None, metavar="DIR",
                     help="continue the run(s) checkpointed in DIR (DIR/checkpoint.pt, or "
                          "DIR/<strategy>/checkpoint.pt) with their saved settings, writing to "
                          "the same outputs; only --rounds (to extend), --checkpoint-every, "
                          "--quiet and --log-level apply")
    run.add_argument("--out", type=Path, default=None,
                     help="output directory (default: runs/<dataset>-<time>)")
    run.add_argument("--set", dest="overrides", type=_key_value, action="append", default=[],
                     metavar="KEY=VALUE",
                     help="override a setting: lr, momentum, weight_decay, batch_size, epochs, "
                          "steps, sample_fraction, eval_every, model, model.<arg>, data.<arg>, "
                          "or a strategy option")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--log-level", default="WARNING")

    tune = sub.add_parser("tune", help="tune a strategy's hyper-parameters with Optuna",
                          description="Optuna study of one strategy: each trial is one "
                          "simulated run; trials report the mean validation metric every "
                          "round (pruning) and record the test metric at their best "
                          "validation round. Rerun to resume; start several processes on "
                          "the same --storage and --study-name to share the study.")
    tune.add_argument("--dataset", default="digits", help="dataset name (default: digits)")
    tune.add_argument("--strategy", required=True, help="strategy name")
    tune.add_argument("--n-trials", type=int, required=True, help="trials this process adds")
    tune.add_argument("--storage", default="sqlite:///study.db",
                      help="Optuna storage: database URL or a journal file *.log "
                           "(default: sqlite:///study.db)")
    tune.add_argument("--study-name", default=None,
                      help="default: <strategy>-<dataset>[-<partition>]")
    tune.add_argument("--pruner", choices=["median", "hyperband", "none"], default="median")
    tune.add_argument("--out", type=Path, default=None,
                      help="where best.json and the plots go (default: runs/tune-<study>)")
    tune.add_argument("--rounds", type=int, default=None, help="communication rounds per trial")
    tune.add_argument("--clients", type=int, default=None, help="number of clients")
    tune.add_argument("--partition", choices=["iid", "pathological", "dirichlet", "group"],
                      default=None, help="how labels are split over clients")
    tune.add_argument("--beta", type=float, default=None, help="Dirichlet concentration")
    tune.add_argument("--classes-per-client", type=int, default=None,
                      help="classes per client for the pathological split")
    tune.add_argument("--seed", type=int, default=0, help="seed of data, model and training")
    tune.add_argument("--set", dest="overrides", type=_key_value, action="append", default=[],
                      metavar="KEY=VALUE", help="fix a setting (as for run); never tuned")
    tune.add_argument("--param", dest="params", type=_key_value, action="append", default=[],
                      metavar="KEY=SPEC",
                      help="tune KEY over SPEC instead of the strategy's range: LOW:HIGH, "
                           "LOW:HIGH:log, LOW:HIGH:STEP or a JSON list of choices")
    tune.add_argument("--tune-local", action="store_true",
                      help="also tune the local learning rate lr")
    tune.add_argument("--sampler-seed", type=int, default=None,
                      help="seed of the TPE sampler (give each worker its own)")
    tune.add_argument("--timeout", type=float, default=None,
                      help="stop starting trials after this many seconds")
    tune.add_argument("--quiet", action="store_true", help="no progress bar")
    tune.add_argument("--log-level", default="WARNING")
    return p


def parse_distribution(text: str) -> Any:
    r"""Parses the CLI's ``--param NAME=SPEC`` specification.

    ``LOW:HIGH`` is uniform (integers if both bounds are integers),
    ``LOW:HIGH:log`` log-uniform, ``LOW:HIGH:STEP`` discretized, and a JSON
    list ``[a, b, c]`` categorical.

    Examples:
        ``"0.5:2"`` -> ``FloatDistribution(0.5, 2.0)``;
        ``"1e-3:1e-1:log"`` -> log-uniform float;
        ``"3:7"`` -> ``IntDistribution(3, 7)``;
        ``"[1, 2, 4, 8]"`` -> ``CategoricalDistribution((1, 2, 4, 8))``.
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    text = text.strip()
    if text.startswith("["):
        try:
            choices = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"categorical choices {text!r} are not a JSON list: {err}") from None
        if not isinstance(choices, list) or not choices:
            raise ValueError(f"categorical choices {text!r} must be a non-empty list")
        return CategoricalDistribution(tuple(choices))
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"distribution {text!r}: expected LOW:HIGH, LOW:HIGH:log, "
                         f"LOW:HIGH:STEP or a JSON list [a, b, ...]")
    try:
        bounds = [json.loads(p) for p in parts[:2]]
    except json.JSONDecodeError:
        raise ValueError(f"distribution {text!r}: bounds must be numbers") from None
    if not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds):
        raise ValueError(f"distribution {text!r}: bounds must be numbers")
    low, high = bounds
    if low > high:
        raise ValueError(f"distribution {text!r}: low {low} exceeds high {high}")
    integer = isinstance(low, int) and isinstance(high, int)
    log_scale, step = False, None
    if len(parts) == 3:
        if parts[2].strip().lower() == "log":
            log_scale = True
        else:
            try:
                step = json.loads(parts[2])
            except json.JSONDecodeError:
                step = None
            if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
                raise ValueError(f"distribution {text!r}: the third field must be 'log' or "
                                 f"a positive step")
            integer = integer and isinstance(step, int)
    if log_scale and low <= 0:
        raise ValueError(f"distribution {text!r}: a log scale needs low > 0")
    if integer:
        return IntDistribution(low, high, log=log_scale, step=step or 1)
    return FloatDistribution(float(low), float(high), log=log_scale,
                             step=None if step is None else float(step))


def run_command(settings: Mapping[str, Any], overrides: Mapping[str, Any]) -> str:
    r"""The ``pyg-fedgraph run`` command of a study's trial: its settings
    (an :class:`~pyg_fedgraph.experiment.ExperimentConfig` as a dict) and its
    ``--set`` keys. The flag syntax lives here, with the parser."""
    from dataclasses import MISSING, fields

    from pyg_fedgraph.experiment import ExperimentConfig

    flags = [f"--dataset {settings['dataset']}", f"--strategy {settings['strategy']}",
             f"--rounds {settings['rounds']}", f"--seed {settings['seed']}"]
    for f in fields(ExperimentConfig):  # the other options of ``run`` are named after them
        if f.name in ("dataset", "strategy", "rounds", "seed", "overrides"):
            continue
        default = f.default if f.default is not MISSING else None
        if f.name in settings and settings[f.name] != default:
            flags.append(f"--{f.name.replace('_', '-')} {settings[f.name]}")
    flags += [f"--set {k}={json.dumps(v) if not isinstance(v, str) else v}"
              for k, v in overrides.items()]
    return "pyg-fedgraph run " + " ".join(flags)


def _run(args: argparse.Namespace) -> int:
    from pyg_fedgraph.experiment import (
        ExperimentConfig,
        build_dataset,
        build_simulator,
        parse_value,
    )
    from pyg_fedgraph.simulation.report import format_table

    if args.checkpoint_every < 0:
        raise ValueError(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    if args.resume is not None:
        return _resume(args)
    names = (args.strategy.split(",") if args.strategy else list(DEFAULT_COMPARISON))
    names = [n.strip() for n in names if n.strip()]
    out_root: Path = args.out or Path("runs") / f"{args.dataset}-{datetime.now():%Y%m%d-%H%M%S}"
    overrides = {k: parse_value(v) for k, v in args.overrides}
    base = ExperimentConfig(dataset=args.dataset, rounds=args.rounds, clients=args.clients,
                            partition=args.partition, beta=args.beta,
                            classes_per_client=args.classes_per_client, seed=args.seed,
                            novel_clients=args.novel_clients, attack=args.attack,
                            attack_ratio=args.attack_ratio, dropout=args.dropout,
                            reject_policy=args.reject_policy)
    data_overrides = {k[5:]: v for k, v in overrides.items() if k.startswith("data.")}
    dataset = build_dataset(base, data_overrides)
    synthetic = bool(dataset.info.get("synthetic"))
    print(f"{dataset}" + ("  [synthetic data]" if synthetic else ""))
    rows, histories = [], {}
    for name in names:
        cfg = ExperimentConfig(**{**base.to_dict(), "strategy": name, "overrides": overrides})
        sim = build_simulator(cfg, dataset=dataset, progress=not args.quiet)
        out = out_root if len(names) == 1 else out_root / name
        rows.append(_run_one(sim, cfg, out, args.checkpoint_every))
        histories[name] = sim.history
    print()
    print(format_table(rows, _table_columns(args.novel_clients, args.attack)))
    if len(names) > 1:
        import matplotlib.pyplot as plt

        from pyg_fedgraph.viz import plot_learning_curves
        partition = dataset.info.get("partition")
        fig = plot_learning_curves(
            histories, title=f"{args.dataset}" + (f", {partition} partition" if partition else "")
            + f", {dataset.num_clients} clients: " + " vs ".join(names))
        fig.savefig(out_root / "learning_curves.png", dpi=120)
        plt.close(fig)
        (out_root / "comparison.json").write_text(json.dumps(rows, indent=2, default=str))
    print(f"\nresults written to {out_root}")
    return 0


def _table_columns(novel: float, attack: str | None) -> list[str]:
    return (["strategy", "metric", "test", "test_final", "best_round", "rounds", "seconds"]
            + (["test_novel"] if novel else []) + (["test_benign"] if attack else []))


def _run_one(sim, cfg, out: Path, checkpoint_every: int) -> dict:
    r"""Runs ``sim`` to its last round (checkpointing every ``checkpoint_every``
    rounds and at the end), writes its outputs to ``out``, returns the summary."""
    from pyg_fedgraph.simulation.checkpoint import save_checkpoint
    from pyg_fedgraph.simulation.report import write_run

    first = sim.round
    t0 = time.perf_counter()
    if checkpoint_every:
        while sim.round < sim.rounds:
            sim.run(min(sim.round + checkpoint_every, sim.rounds))
            # The settings travel with the state, so --resume can rebuild the run.
            save_checkpoint({**sim.state_dict(), "run": {"config": cfg.to_dict(),
                                                         "checkpoint_every": checkpoint_every}},
                            out)
    else:
        sim.run()
    seconds = time.perf_counter() - t0
    dataset = sim.dataset
    summary = {"strategy": cfg.strategy, "dataset": cfg.dataset, **sim.summary(),
               "seconds": seconds, "seconds_per_round": seconds / max(sim.round - first, 1),
               "num_clients": dataset.num_clients, "seed": cfg.seed,
               "synthetic_data": bool(dataset.info.get("synthetic"))}
    if first:
        summary["resumed_from_round"] = first
    config = {**cfg.to_dict(), "resolved": {
        "rounds": sim.rounds, "local": vars(sim.trainer.config),
        "model": repr(sim.trainer.model), "strategy": sim.strategy.hparams(),
        "num_params": sim.layout.num_params}}
    write_run(out, sim.history, config, summary, collaboration=sim.strategy.collaboration_graph(),
              groups=dataset.client_labels, prior_edge_index=dataset.edge_index)
    return summary


def _resume(args: argparse.Namespace) -> int:
    from pyg_fedgraph.experiment import ExperimentConfig, build_dataset, build_simulator
    from pyg_fedgraph.simulation.checkpoint import CHECKPOINT_NAME, load_checkpoint
    from pyg_fedgraph.simulation.report import format_table

    root: Path = args.resume
    files = ([root / CHECKPOINT_NAME] if (root / CHECKPOINT_NAME).is_file()
             else sorted(root.glob(f"*/{CHECKPOINT_NAME}")))
    if not files:
        raise FileNotFoundError(f"no {CHECKPOINT_NAME} in {root} nor in its sub-directories; "
                                f"write checkpoints with --checkpoint-every K")
    rows, novel, attack = [], 0.0, None
    for path in files:
        state = load_checkpoint(path)
        if "run" not in state:
            raise ValueError(f"{path} holds no run settings; it was not written by "
                             f"'pyg-fedgraph run --checkpoint-every'")
        cfg = ExperimentConfig(**state["run"]["config"])
        if args.rounds is not None:
            cfg.rounds = args.rounds
        data_overrides = {k[5:]: v for k, v in cfg.overrides.items() if k.startswith("data.")}
        dataset = build_dataset(cfg, data_overrides)
        sim = build_simulator(cfg, dataset=dataset, progress=not args.quiet)
        sim.load_state_dict(state)
        print(f"{cfg.strategy}: resuming {path} at round {sim.round} of {sim.rounds}")
        every = args.checkpoint_every or int(state["run"].get("checkpoint_every", 0))
        rows.append(_run_one(sim, cfg, path.parent, every))
        novel, attack = novel or cfg.novel_clients, attack or cfg.attack
    print()
    print(format_table(rows, _table_columns(novel, attack)))
    print(f"\nresults written to {root}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    import optuna

    from pyg_fedgraph.experiment import ExperimentConfig, parse_value
    from pyg_fedgraph.tune import default_study_name, tune, write_study

    if str(args.log_level).upper() not in ("INFO", "DEBUG"):
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar says enough
    cfg = ExperimentConfig(dataset=args.dataset, strategy=args.strategy, rounds=args.rounds,
                           clients=args.clients, partition=args.partition, beta=args.beta,
                           classes_per_client=args.classes_per_client, seed=args.seed,
                           overrides={k: parse_value(v) for k, v in args.overrides})
    params = {k: parse_distribution(v) for k, v in args.params}
    name = args.study_name or default_study_name(cfg)
    if args.storage.startswith("sqlite:///") and args.storage != "sqlite:///:memory:":
        Path(args.storage[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    sampler = optuna.samplers.TPESampler(seed=args.sampler_seed)
    study = tune(cfg, args.n_trials, storage=args.storage, study_name=name,
                 pruner=args.pruner, sampler=sampler, params=params,
                 tune_local=args.tune_local, timeout=args.timeout,
                 show_progress_bar=not args.quiet)
    out: Path = args.out or Path("runs") / f"tune-{name}"
    written = write_study(study, out, run_command)
    summary = json.loads(written["best"].read_text())
    counts = ", ".join(f"{n} {state}" for state, n in sorted(summary["trials"].items()))
    print(f"study {name!r} in {args.storage}: {counts}")
    if "best_trial" not in summary:
        print("no trial completed yet")
    else:
        test = summary["test_at_best_val"]
        print(f"best trial #{summary['best_trial']}: validation {summary['metric']} "
              f"{summary['best_value']:.4f} (round {summary['best_round']}), test at that "
              f"round {'nan' if test is None else f'{test:.4f}'}")
        for key, value in summary["best_params"].items():
            print(f"  {key} = {value}")
        print(f"reproduce: {summary['command']}")
    print(f"results written to {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["run"]
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return _tune(args) if args.command == "tune" else _run(args)
    except (ValueError, KeyError, ImportError, FileNotFoundError) as err:
        print(f"pyg-fedgraph: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
