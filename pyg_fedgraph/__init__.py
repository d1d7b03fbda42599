r"""pyg_fedgraph: graph-based personalized federated learning for PyTorch Geometric.

A federation of :math:`N` clients is a :class:`FederationGraph`: node :math:`i`
is client :math:`i` and carries its flat model parameters. Server rules that
decide who learns from whom are message-passing modules in
:mod:`pyg_fedgraph.nn`; strategies in :mod:`pyg_fedgraph.strategies` own them;
:class:`Simulator` runs them.

The top-level names are imported on first use (PEP 562), so that
``import pyg_fedgraph`` (and the command line's ``--help``) does not load torch.
``__version__`` is read on first use from the installed package's metadata,
whose source is the ``version`` in ``pyproject.toml`` (the one place it is
written).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    __version__: str
    from pyg_fedgraph.data import ClientSplit, FederatedDataset, FederationGraph, ParamLayout
    from pyg_fedgraph.simulation import Simulator


def _read_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("pyg-fedgraph")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = globals()["__version__"] = _read_version()  # read once
        return value
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pyg_fedgraph' has no attribute {name!r}")
