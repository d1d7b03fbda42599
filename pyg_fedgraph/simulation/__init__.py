r"""Orchestration in one process: the batched simulator over the round engine."""
from pyg_fedgraph.engine import History, RoundRecord, sample_clients
from pyg_fedgraph.simulation.report import read_models, write_models
from pyg_fedgraph.simulation.simulator import Simulator

__all__ = ["Simulator", "History", "RoundRecord", "sample_clients", "read_models", "write_models"]
