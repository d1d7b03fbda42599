r"""``pyg-fedgraph tune``: an Optuna study of one strategy."""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyg_fedgraph.cli.syntax import parse_distribution, run_command

if TYPE_CHECKING:
    import optuna

    from pyg_fedgraph.experiment import ExperimentConfig

__all__ = ["tune_main"]


def _trial_trackers(names: Sequence[str], out: Path, study: str, cfg: ExperimentConfig
                    ) -> Callable[[optuna.trial.Trial], list[Any]] | None:
    r"""``--tracker``: each trial logged as the run ``trial-<number>`` under
    ``out`` (checked before the study starts)."""
    from pyg_fedgraph.tracking import build_tracker, check_tracker

    names = list(dict.fromkeys(names))
    for name in names:
        check_tracker(name)
    if not names:
        return None

    def trackers(trial: optuna.trial.Trial) -> list[Any]:
        hparams = {**cfg.to_dict(), "optuna": {"study": study, "trial": trial.number}}
        return [build_tracker(t, out, run=f"trial-{trial.number}", experiment=study,
                              hparams=hparams) for t in names]

    return trackers


def optuna_verbosity(log_level: str, quiet: bool, bar: bool) -> int:
    r"""Optuna's logging level for ``tune``: ``--log-level`` DEBUG, INFO or
    ERROR as given; at the default WARNING, Optuna's line per trial when there
    is neither a progress bar (a terminal) nor ``--quiet``, else warnings only.
    Set on every call: Optuna's level is global to the process."""
    import optuna

    level = log_level.upper()
    if level in ("DEBUG", "INFO", "ERROR"):
        return int(getattr(optuna.logging, level))
    return optuna.logging.WARNING if bar or quiet else optuna.logging.INFO


def tune_main(args: argparse.Namespace) -> int:
    r"""``pyg-fedgraph tune``: checks every setting, then runs (or extends)
    the study and writes ``best.json`` and the plots."""
    import optuna

    from pyg_fedgraph.experiment import ExperimentConfig, route_overrides
    from pyg_fedgraph.experiment.comparison import placement
    from pyg_fedgraph.experiment.runner import StopSignal, is_terminal
    from pyg_fedgraph.tune import default_study_name, tune, write_study

    # On a terminal, Optuna's progress bar; in logs and CI, its line per trial instead
    # (the same terminal test as run's bar).
    bar = not args.quiet and is_terminal()
    optuna.logging.set_verbosity(optuna_verbosity(str(args.log_level), args.quiet, bar))
    if not args.strategy:
        raise ValueError("tune needs --strategy NAME (or 'strategy' in --config)")
    if "," in str(args.strategy):
        raise ValueError(f"tune studies one strategy, got --strategy {args.strategy!r}")
    if args.n_trials is None:
        raise ValueError("tune needs --n-trials N (or 'n_trials' in --config)")
    if args.n_trials < 1:
        raise ValueError(f"--n-trials must be >= 1, got {args.n_trials}")
    cfg = ExperimentConfig.from_args(args)
    route_overrides(cfg)  # every --set value, before the study starts
    params = {k: parse_distribution(v) for k, v in args.params}
    name = args.study_name or default_study_name(cfg)
    if args.storage.startswith("sqlite:///") and args.storage != "sqlite:///:memory:":
        Path(args.storage[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    sampler = optuna.samplers.TPESampler(seed=args.sampler_seed)
    out: Path = args.out or Path("runs") / f"tune-{name}"
    trial_callbacks = _trial_trackers(args.tracker, out, name, cfg)
    stop = StopSignal(hard_abort=True)
    with placement(cfg, args.deterministic), stop.installed():
        study = tune(cfg, args.n_trials, storage=args.storage, study_name=name,
                     pruner=args.pruner, sampler=sampler, params=params,
                     tune_local=args.tune_local, timeout=args.timeout,
                     show_progress_bar=bar, trial_callbacks=trial_callbacks, stop=stop)
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
