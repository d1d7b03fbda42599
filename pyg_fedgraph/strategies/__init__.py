r"""Server algorithms: one strategy per paper, each owning its operators and state."""
from pyg_fedgraph.strategies.base import FederationContext, Strategy, TrainPlan
from pyg_fedgraph.strategies.cfl import CFL
from pyg_fedgraph.strategies.ditto import Ditto

# Strategies of later issues: one import line each, below this comment.
from pyg_fedgraph.strategies.fedaghn import FedAGHN
from pyg_fedgraph.strategies.fedala import FedALA
from pyg_fedgraph.strategies.fedamp import FedAMP, HeurFedAMP
from pyg_fedgraph.strategies.fedavg import FedAvg, FedAvgFT, Local, weighted_average
from pyg_fedgraph.strategies.fedcedar import FedCEDAR
from pyg_fedgraph.strategies.fedprox import FedProx, FedProxFT
from pyg_fedgraph.strategies.fedpub import FedPUB
from pyg_fedgraph.strategies.fedrep import FedRep
from pyg_fedgraph.strategies.fedrod import FedRoD
from pyg_fedgraph.strategies.gcfl import GCFL, GCFLPlus
from pyg_fedgraph.strategies.ifca import IFCA
from pyg_fedgraph.strategies.knn_per import KNNPer
from pyg_fedgraph.strategies.panacea import Panacea, PFedHN
from pyg_fedgraph.strategies.perfedavg import PerFedAvg
from pyg_fedgraph.strategies.pfedgat import PFedGAT
from pyg_fedgraph.strategies.pfedgraph import PFedGraph
from pyg_fedgraph.strategies.pfedla import PFedLA
from pyg_fedgraph.strategies.pfedme import PFedMe
from pyg_fedgraph.strategies.registry import (
    STRATEGIES,
    build_strategy,
    register_strategy,
    strategy_kwargs,
)
from pyg_fedgraph.strategies.sfl import SFL, SFL_AUTHORS_CODE

__all__ = [
    "Strategy",
    "TrainPlan",
    "FederationContext",
    "STRATEGIES",
    "build_strategy",
    "register_strategy",
    "strategy_kwargs",
    "Local",
    "FedAvg",
    "FedAvgFT",
    "weighted_average",
    "FedAGHN",
    "SFL",
    "SFL_AUTHORS_CODE",
    "CFL",
    "FedCEDAR",
    "FedProx",
    "FedProxFT",
    "Ditto",
    "FedAMP",
    "Panacea",
    "PFedHN",
    "PFedGraph",
    "PFedGAT",
    "IFCA",
    "PerFedAvg",
    "PFedMe",
    "FedRep",
    "FedRoD",
    "HeurFedAMP",
    "KNNPer",
    "FedALA",
    "PFedLA",
    "FedPUB",
    "GCFL",
    "GCFLPlus",
]
