r"""Federation graph, parameter layout, per-client data, objectives and partitioners."""
from pyg_fedgraph.data.federated_dataset import ClientSplit, DatasetDefaults, FederatedDataset
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.graph_dataset import ClientGraphs, GraphFederatedDataset, gcn_edge_weight
from pyg_fedgraph.data.graph_set_dataset import (
    GraphSetFederatedDataset,
    GraphStore,
    collate_graph_sets,
)
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.data.objective import (
    Objective,
    classification_objective,
    objective_for,
    regression_objective,
)

__all__ = [
    "ParamLayout",
    "FederationGraph",
    "ClientSplit",
    "FederatedDataset",
    "DatasetDefaults",
    "ClientGraphs",
    "GraphFederatedDataset",
    "gcn_edge_weight",
    "GraphStore",
    "GraphSetFederatedDataset",
    "collate_graph_sets",
    "Objective",
    "classification_objective",
    "regression_objective",
    "objective_for",
]
