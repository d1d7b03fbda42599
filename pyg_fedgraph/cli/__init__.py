r"""Command line: ``pyg-fedgraph run ...`` and ``pyg-fedgraph tune ...``.

With no arguments, ``pyg-fedgraph run`` compares Local, FedAvg and FedAvg-FT
on scikit-learn's handwritten digits (real data, bundled, works offline)
split pathologically over 10 clients.

This module stays light: building the parser and ``--help`` import neither
torch nor PyG (the dataset and strategy names come from
:mod:`~pyg_fedgraph.cli.names`); a command imports what it needs when it runs.
Bad input ends with one line on stderr and exit code 2 before any work; an
interrupted run with exit code 130 (see :mod:`~pyg_fedgraph.cli.run`).
"""
from __future__ import annotations

import argparse
import logging
import sys
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pyg_fedgraph.cli.names import dataset_names, literal_choices, strategy_names
from pyg_fedgraph.cli.syntax import key_value, parse_distribution, run_command

__all__ = ["main", "build_parser", "parse_distribution", "run_command", "DEFAULT_COMPARISON",
           "DEFAULT_JOB",
           "EXIT_USAGE", "EXIT_INTERRUPTED", "EXIT_NOTHING_LEARNED"]

#: The strategies ``run`` compares when ``--strategy`` is not given.
DEFAULT_COMPARISON = ("local", "fedavg", "fedavg-ft", "pfedgraph")
#: The data of ``run`` when no ``--dataset`` is given (the default job): digits
#: over 40 clients in 5 label groups, each client with about 22 training
#: images, too few alone, and a 50/20/30 train/val/test split so that every
#: client has at least 5 validation images. Given options win over these.
DEFAULT_JOB: dict = {"dataset": "digits", "partition": "group", "clients": 40, "rounds": 20,
                     "set": {"data.fractions": [0.5, 0.2, 0.3]}}
#: Exit code of bad input (as argparse's own errors).
EXIT_USAGE = 2
#: Exit code of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
#: Exit code of a run that ended without accepting a single client update.
EXIT_NOTHING_LEARNED = 1
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Parser(argparse.ArgumentParser):
    r"""Errors in one line (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _log_level(text: str) -> str:
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"invalid log level {text!r}; choose one of "
                                         f"{', '.join(LOG_LEVELS)}")
    return level


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("pyg-fedgraph")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    r"""Help text wrapped to the terminal, never inside a hyphenated name
    (``per-fedavg``, ``--checkpoint-every``); the lists of the epilog keep
    their lines."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            lead = indent + line[:len(line) - len(line.lstrip())]
            lines += textwrap.wrap(line.strip(), width, initial_indent=lead,
                                   subsequent_indent=lead, break_on_hyphens=False) or [""]
        return "\n".join(lines)


def _names_epilog() -> str:
    # One line per list: _Formatter wraps it to the terminal.
    return ("datasets:\n  " + ", ".join(dataset_names())
            + "\nstrategies:\n  " + ", ".join(strategy_names()))


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds expects integers separated by commas, got "
                                         f"{text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"--seeds expects distinct integers >= 0, got {text!r}")
    return seeds


def _common(p: argparse.ArgumentParser) -> None:
    r"""Options shared by ``run`` and ``tune``: the data and the federation."""
    p.add_argument("--config", type=Path, default=None, metavar="FILE",
                   help="a YAML file of settings (the long option names, and a 'set' map of "
                        "--set keys); options given on the command line win, --set keys "
                        "over the file's; a run's own config.yaml reruns it")
    p.add_argument("--dataset", default=None, metavar="NAME",
                   help="dataset name, listed below (default: digits; for run without "
                        "--dataset, the default job: digits over 40 clients in 5 label "
                        "groups, 20 rounds)")
    p.add_argument("--rounds", type=int, default=None, help="communication rounds (>= 1)")
    p.add_argument("--clients", type=int, default=None, help="number of clients")
    p.add_argument("--partition", default=None,
                   choices=literal_choices("experiment.py", "PartitionName"),
                   help="how labels are split over clients")
    p.add_argument("--beta", type=float, default=None, help="Dirichlet concentration")
    p.add_argument("--classes-per-client", type=int, default=None,
                   help="classes per client for the pathological split")
    p.add_argument("--seed", type=int, default=0, help="seed of data, model and training")
    p.add_argument("--tracker", action="append", default=[],
                   choices=literal_choices("tracking.py", "TrackerName"),
                   help="also log to TensorBoard (event files in <out>/<run>) or MLflow (the "
                        "store <out>/mlflow.db); extras 'tensorboard', 'mlflow'; repeat for both")


def _device_options(p: argparse.ArgumentParser) -> None:
    r"""Where and how a command computes."""
    p.add_argument("--device", default="auto", metavar="DEVICE",
                   help="auto (CUDA when available), cpu, cuda, cuda:N or mps (default: auto)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch's intra-op threads (default: torch's choice; 1 is often "
                        "fastest on a machine shared with other jobs)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="autocast precision of local training and evaluation; parameters "
                        "and aggregation stay float32 (default: fp32)")
    p.add_argument("--deterministic", action="store_true",
                   help="torch's deterministic algorithms only (reproducible CUDA runs, "
                        "slower; CPU runs are reproducible anyway)")


def _logging_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-round lines")
    p.add_argument("--log-level", type=_log_level, default="WARNING",
                   help=f"one of {', '.join(LOG_LEVELS)} (default: WARNING)")


def build_parser() -> argparse.ArgumentParser:
    r"""The ``pyg-fedgraph`` parser (cheap: no torch)."""
    epilog = _names_epilog()
    p = _Parser(prog="pyg-fedgraph", description="Graph-based personalized federated learning.",
                epilog=epilog, formatter_class=_Formatter,
                allow_abbrev=False)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser(
        "run", help="simulate a federation and report the papers' metric",
        description="Simulate strategies on a federated dataset. With no options (the default "
        "job, offline, seconds): Local, FedAvg, FedAvg-FT and pFedGraph on digits spread over 40 "
        "clients in 5 label groups, too little data per client to learn alone. Every name "
        "and value is checked before any training. Ctrl-C stops after the current round "
        "with a checkpoint that --resume continues.", epilog=epilog,
        formatter_class=_Formatter, allow_abbrev=False)
    _common(run)
    run.add_argument("--strategy", default=None, metavar="NAME[,NAME...]",
                     help="strategy name, or several separated by commas "
                          f"(default: {','.join(DEFAULT_COMPARISON)})")
    run.add_argument("--seeds", type=_seed_list, default=None, metavar="S[,S...]",
                     help="run every strategy once per seed and report the mean and standard "
                          "deviation over them (instead of --seed)")
    run.add_argument("--novel-clients", type=float, default=0.0,
                     help="fraction of clients held out of training and evaluated as novel")
    run.add_argument("--attack", default=None, choices=literal_choices("attacks.py", "AttackName"),
                     help="malicious clients' attack: model poisoning (shuffle, same-value, "
                          "sign-flip, gaussian: pFedGraph; scaled-negative: Panacea) or data "
                          "poisoning (label-flip, backdoor); metrics are then over benign "
                          "clients and summary.json has test_benign")
    run.add_argument("--attack-ratio", type=float, default=0.4,
                     help="share of malicious clients, in (0, 1) (default: 0.4, pFedGraph "
                          "Table 3)")
    run.add_argument("--dropout", type=float, default=0.0,
                     help="probability in [0, 1) that a sampled client returns nothing in a "
                          "round")
    run.add_argument("--reject-policy", default="drop",
                     choices=literal_choices("engine/validation.py", "RejectPolicy"),
                     help="bad uploads (NaN/Inf, wrong length, absurd norm): drop them with a "
                          "logged reason (default) or stop with an error")
    run.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                     help="also write the whole run state to <out>/checkpoint.pt every K "
                          "rounds (atomically; the last round and a Ctrl-C are always "
                          "checkpointed)")
    run.add_argument("--resume", type=Path, default=None, metavar="DIR",
                     help="continue the run (or the comparison) in DIR with its saved "
                          "settings, writing to the same outputs; only --rounds (to extend), "
                          "--checkpoint-every, --device, --threads, --deterministic, --quiet "
                          "and --log-level may be given")
    run.add_argument("--out", type=Path, default=None,
                     help="output directory (default: runs/<dataset>-<time>); refused if it "
                          "holds a run, unless --overwrite")
    run.add_argument("--save-models", action="store_true",
                     help="also save every client's final personalized model to "
                          "<run>/models.pt (tensors only: torch.load(weights_only=True))")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the run already in --out (its files only)")
    run.add_argument("--set", dest="overrides", type=key_value, action="append", default=[],
                     metavar="KEY=VALUE",
                     help="override a setting: lr, momentum, nesterov, weight_decay, warmup, "
                          "lr_decay_to, batch_size, epochs, steps, sample_fraction, eval_every, "
                          "parallel, parallel_clients, execution, state_device, compile, model, "
                          "model.<arg>, data.<arg>, or a strategy option")
    _device_options(run)
    _logging_options(run)

    tune = sub.add_parser(
        "tune", help="tune a strategy's hyper-parameters with Optuna",
        description="Optuna study of one strategy: each trial is one simulated run; trials "
        "report the mean validation metric every round (pruning) and record the test metric "
        "at their best validation round. Rerun to resume; start several processes on the "
        "same --storage and --study-name to share the study.", epilog=epilog,
        formatter_class=_Formatter, allow_abbrev=False)
    _common(tune)
    tune.add_argument("--strategy", default=None, metavar="NAME",
                      help="strategy name (required here or in --config)")
    tune.add_argument("--n-trials", type=int, required=True, help="trials this process adds")
    tune.add_argument("--storage", default="sqlite:///study.db",
                      help="Optuna storage: a database URL or the path of a journal file "
                           "ending in .log (default: sqlite:///study.db)")
    tune.add_argument("--study-name", default=None,
                      help="default: <strategy>-<dataset>[-<partition>]")
    tune.add_argument("--pruner", choices=["median", "hyperband", "none"], default="median")
    tune.add_argument("--out", type=Path, default=None,
                      help="where best.json and the plots go (default: runs/tune-<study>)")
    tune.add_argument("--set", dest="overrides", type=key_value, action="append", default=[],
                      metavar="KEY=VALUE", help="fix a setting (as for run); never tuned")
    tune.add_argument("--param", dest="params", type=key_value, action="append", default=[],
                      metavar="KEY=SPEC",
                      help="tune KEY over SPEC instead of the strategy's range: LOW:HIGH, "
                           "LOW:HIGH:log, LOW:HIGH:STEP or a JSON list of choices")
    tune.add_argument("--tune-local", action="store_true",
                      help="also tune the local learning rate lr")
    tune.add_argument("--sampler-seed", type=int, default=None,
                      help="seed of the TPE sampler (give each worker its own)")
    tune.add_argument("--timeout", type=float, default=None,
                      help="stop starting trials after this many seconds")
    _device_options(tune)
    _logging_options(tune)
    return p


class _Once(logging.Filter):
    r"""Drops a log line identical to one already shown (a check that both
    the preflight and the run make, a warning repeated for each strategy)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def _configure_logging(level: str) -> None:
    root = logging.getLogger()
    if root.handlers:  # an application (or pytest) configured logging: leave it alone
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_Once())
    root.addHandler(handler)
    root.setLevel(getattr(logging, level))


def _one_line(err: BaseException) -> str:
    text = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
    return " ".join(str(text).split()) or type(err).__name__


def main(argv: Sequence[str] | None = None) -> int:
    r"""Runs the command line on ``argv`` (default: :data:`sys.argv`) and
    returns the exit code: 0, :data:`EXIT_USAGE` (bad input, one line),
    :data:`EXIT_NOTHING_LEARNED` or :data:`EXIT_INTERRUPTED`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["run"]
    args = build_parser().parse_args(argv)
    _configure_logging(args.log_level)
    # torch's deprecation of TorchScript, raised by PyG on import, is not the user's concern.
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*is deprecated",
                            category=FutureWarning)
    try:
        if args.command == "tune":
            from pyg_fedgraph.cli.run import apply_config
            from pyg_fedgraph.cli.tune import tune_main
            return tune_main(apply_config(args, argv))
        from pyg_fedgraph.cli.run import run_main
        return run_main(args, argv)
    except KeyboardInterrupt:
        print("pyg-fedgraph: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, KeyError, LookupError, ImportError, OSError) as err:
        print(f"pyg-fedgraph: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
