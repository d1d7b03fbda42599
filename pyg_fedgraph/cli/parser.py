r"""The ``pyg-fedgraph`` parser, built from the declared settings
(:func:`pyg_fedgraph.experiment.settings.options`), and the command line's
constants. Cheap: building it and ``--help`` import neither torch nor PyG."""
from __future__ import annotations

import argparse
import textwrap
from typing import NoReturn

from pyg_fedgraph.catalog import DATASET_NAMES, STRATEGY_NAMES
from pyg_fedgraph.experiment.settings import options

__all__ = ["build_parser", "DEFAULT_COMPARISON", "DEFAULT_JOB", "EXIT_USAGE", "EXIT_INTERRUPTED",
           "EXIT_NOTHING_LEARNED"]

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


class _Parser(argparse.ArgumentParser):
    r"""Errors in one line (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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
    return ("datasets:\n  " + ", ".join(DATASET_NAMES)
            + "\nstrategies:\n  " + ", ".join(STRATEGY_NAMES))


def build_parser() -> argparse.ArgumentParser:
    r"""The ``pyg-fedgraph`` parser (cheap: no torch). Its options are the
    declared settings (:func:`pyg_fedgraph.experiment.settings.options`)."""
    epilog = _names_epilog()
    p = _Parser(prog="pyg-fedgraph",
                description="Graph-based personalized federated learning. Without a command, "
                            "'pyg-fedgraph' runs 'pyg-fedgraph run': the default job, which "
                            "trains for about half a minute and writes its results to "
                            "runs/<dataset>-<time>.",
                epilog=epilog, formatter_class=_Formatter, allow_abbrev=False)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser(
        "run", help="simulate a federation and report the papers' metric",
        description="Simulate strategies on a federated dataset. With no options (the default "
        "job, offline, seconds): Local, FedAvg, FedAvg-FT and pFedGraph on digits spread over 40 "
        "clients in 5 label groups, too little data per client to learn alone. Every name "
        "and value is checked before any training. Ctrl-C stops within seconds (after the "
        "round, or between two local steps of a long one) with a checkpoint that --resume "
        "continues; a second Ctrl-C aborts at once.", epilog=epilog,
        formatter_class=_Formatter, allow_abbrev=False)
    for option in options("run"):
        option.add_to(run)
    tune = sub.add_parser(
        "tune", help="tune a strategy's hyper-parameters with Optuna",
        description="Optuna study of one strategy: each trial is one simulated run; trials "
        "report the mean validation metric every round (pruning) and record the test metric "
        "at their best validation round. Rerun to resume; start several processes on the "
        "same --storage and --study-name to share the study.", epilog=epilog,
        formatter_class=_Formatter, allow_abbrev=False)
    for option in options("tune"):
        option.add_to(tune)
    return p
