r"""Federation graph, parameter layout, per-client data and partitioners."""
from pyg_fedgraph.data.federated_dataset import ClientSplit, DatasetDefaults, FederatedDataset
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout

__all__ = [
    "ParamLayout",
    "FederationGraph",
    "ClientSplit",
    "FederatedDataset",
    "DatasetDefaults",
]
