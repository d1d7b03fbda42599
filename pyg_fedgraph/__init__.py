r"""pyg_fedgraph: graph-based personalized federated learning for PyTorch Geometric.

A federation of :math:`N` clients is a :class:`FederationGraph`: node :math:`i`
is client :math:`i` and carries its flat model parameters. Server rules that
decide who learns from whom are message-passing modules in
:mod:`pyg_fedgraph.nn`; strategies in :mod:`pyg_fedgraph.strategies` own them;
:class:`Simulator` runs them.

The top-level names are imported on first use (PEP 562), so that
``import pyg_fedgraph`` (and the command line's ``--help``) does not load torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "FederationGraph": "pyg_fedgraph.data",
    "ParamLayout": "pyg_fedgraph.data",
    "FederatedDataset": "pyg_fedgraph.data",
    "ClientSplit": "pyg_fedgraph.data",
    "Simulator": "pyg_fedgraph.simulation",
}

__all__ = ["FederationGraph", "ParamLayout", "FederatedDataset", "ClientSplit", "Simulator",
           "__version__"]

if TYPE_CHECKING:
    from pyg_fedgraph.data import ClientSplit, FederatedDataset, FederationGraph, ParamLayout
    from pyg_fedgraph.simulation import Simulator


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pyg_fedgraph' has no attribute {name!r}")
