r"""Experiments: the run settings (declared once), building a run from them,
the runner that carries runs out, comparisons of several runs, their files,
and the record cache of the reproduction scripts.

* :mod:`~pyg_fedgraph.experiment.settings`: :class:`ExperimentConfig`,
  :class:`RunOptions`, :class:`TuneOptions` (free of torch: ``--help`` reads them);
* :mod:`~pyg_fedgraph.experiment.build`: :func:`build_simulator` and friends;
* :mod:`~pyg_fedgraph.experiment.runner`: :class:`Runner`, the one loop with
  checkpoints, Ctrl-C, resuming, progress and trackers;
* :mod:`~pyg_fedgraph.experiment.comparison`: :class:`Comparison`, every
  strategy with every seed (``pyg-fedgraph run``);
* :mod:`~pyg_fedgraph.experiment.files`: config files and the run folder;
* :mod:`~pyg_fedgraph.experiment.records`: :class:`RecordCache`, finished runs
  kept as records;
* :mod:`~pyg_fedgraph.experiment.reporting`: pieces of a results file made from
  records (the machine, a table of runs), shared by the benchmark scripts.

Names are imported on first use (PEP 562), so that the settings load without
torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pyg_fedgraph.experiment.settings import (
    CONFIG_SCHEMA,
    ExperimentConfig,
    RunOptions,
    TuneOptions,
)

_LAZY = {
    **{n: "pyg_fedgraph.experiment.build" for n in (
        "DATASET_DEFAULTS", "build_dataset", "build_simulator", "check_config",
        "check_partition", "resolved_defaults", "resolved_model", "route_overrides", "parse_value",
        "dataset_options")},
    **{n: "pyg_fedgraph.experiment.runner" for n in (
        "Runner", "RunResult", "StopSignal", "RoundProgress")},
    "Comparison": "pyg_fedgraph.experiment.comparison",
    **{n: "pyg_fedgraph.experiment.files" for n in (
        "load_config", "resolved_config", "write_results")},
    "RecordCache": "pyg_fedgraph.experiment.records",
}

__all__ = ["ExperimentConfig", "RunOptions", "TuneOptions", "CONFIG_SCHEMA", "DATASET_DEFAULTS",
           "build_dataset", "build_simulator", "check_config", "check_partition",
           "resolved_defaults", "resolved_model", "route_overrides", "parse_value",
           "dataset_options", "Runner", "RunResult", "StopSignal", "RoundProgress", "Comparison",
           "load_config", "resolved_config", "write_results", "RecordCache"]

if TYPE_CHECKING:
    from pyg_fedgraph.experiment.build import (
        DATASET_DEFAULTS,
        build_dataset,
        build_simulator,
        check_config,
        check_partition,
        dataset_options,
        parse_value,
        resolved_defaults,
        resolved_model,
        route_overrides,
    )
    from pyg_fedgraph.experiment.comparison import Comparison
    from pyg_fedgraph.experiment.files import load_config, resolved_config, write_results
    from pyg_fedgraph.experiment.records import RecordCache
    from pyg_fedgraph.experiment.runner import RoundProgress, Runner, RunResult, StopSignal


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pyg_fedgraph.experiment' has no attribute {name!r}")
