r"""Orchestration in one process: the batched simulator over the round engine.

Names are imported on first use (PEP 562), so that the declaration of the
simulator's settings (:mod:`pyg_fedgraph.simulation.config`, which the command
line's ``--help`` reads) loads without torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "Simulator": "pyg_fedgraph.simulation.simulator",
    "SimulatorConfig": "pyg_fedgraph.simulation.config",
    "History": "pyg_fedgraph.engine",
    "RoundRecord": "pyg_fedgraph.engine",
    "sample_clients": "pyg_fedgraph.engine",
    "read_models": "pyg_fedgraph.simulation.report",
    "write_models": "pyg_fedgraph.simulation.report",
    "GroupRecoveryCallback": "pyg_fedgraph.simulation.recovery",
    "strategy_clusters": "pyg_fedgraph.simulation.recovery",
}

__all__ = ["Simulator", "SimulatorConfig", "History", "RoundRecord", "sample_clients",
           "read_models", "write_models", "GroupRecoveryCallback", "strategy_clusters"]

if TYPE_CHECKING:
    from pyg_fedgraph.engine import History, RoundRecord, sample_clients
    from pyg_fedgraph.simulation.config import SimulatorConfig
    from pyg_fedgraph.simulation.recovery import GroupRecoveryCallback, strategy_clusters
    from pyg_fedgraph.simulation.report import read_models, write_models
    from pyg_fedgraph.simulation.simulator import Simulator


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pyg_fedgraph.simulation' has no attribute {name!r}")
