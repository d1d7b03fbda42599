r"""Command line: ``pyg-fedgraph run ...`` and ``pyg-fedgraph tune ...``.

With no arguments, ``pyg-fedgraph`` runs ``pyg-fedgraph run``'s default job:
Local, FedAvg, FedAvg-FT and pFedGraph on scikit-learn's handwritten digits
(real data, bundled, works offline) over 40 clients in 5 label groups.

The command line only parses: its options are the declared settings
(:mod:`pyg_fedgraph.experiment.settings`), and a command hands them to the
experiment layer (:class:`~pyg_fedgraph.experiment.Comparison`, the
:class:`~pyg_fedgraph.experiment.Runner`, :func:`~pyg_fedgraph.tune.tune`).
Building the parser and ``--help`` import neither torch nor PyG (the names
come from the table :mod:`pyg_fedgraph.catalog`).
Bad input ends with one line on stderr and exit code 2 before any work; an
interrupted run with exit code 130 (see :mod:`~pyg_fedgraph.cli.run`).

``run`` and ``tune`` first make the C allocator keep freed memory
(:func:`~pyg_fedgraph.utils.retain_freed_memory`: batched clients' large
temporaries are then reused instead of page-faulted in on every use), unless
the environment variable ``PYG_FEDGRAPH_KEEP_MEMORY`` is ``0``.
"""
from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Sequence

from pyg_fedgraph.cli.parser import (
    DEFAULT_COMPARISON,
    DEFAULT_JOB,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_LEARNED,
    EXIT_USAGE,
    build_parser,
)
from pyg_fedgraph.cli.syntax import parse_distribution, run_command

__all__ = ["main", "build_parser", "parse_distribution", "run_command", "DEFAULT_COMPARISON",
           "DEFAULT_JOB", "EXIT_USAGE", "EXIT_INTERRUPTED", "EXIT_NOTHING_LEARNED"]


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


def _keep_freed_memory() -> None:
    r"""The application's allocator choice
    (:func:`~pyg_fedgraph.utils.keep_freed_memory_at_start`). Imported here:
    ``--help`` never gets this far, and the package's import stays free of it."""
    from pyg_fedgraph.utils.allocator import keep_freed_memory_at_start

    keep_freed_memory_at_start()


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
    _keep_freed_memory()
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
