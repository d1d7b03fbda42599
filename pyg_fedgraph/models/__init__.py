r"""Reference client models (plain :class:`torch.nn.Module`, vmap-friendly)."""
from pyg_fedgraph.models.cnn import CNNBN, SimpleCNN
from pyg_fedgraph.models.gnn import GAT, GCN, GraphSAGE, MaskedGCN
from pyg_fedgraph.models.graph_classifiers import GIN, GCNPool
from pyg_fedgraph.models.gru import GRUCell, GRUForecaster
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.models.registry import (
    MODELS,
    ModelSpec,
    build_model,
    model_options,
    register_model,
)
from pyg_fedgraph.models.seq2seq import GRUSeq2Seq

__all__ = [
    "MLP",
    "SimpleCNN",
    "CNNBN",
    "GRUCell",
    "GRUForecaster",
    "GRUSeq2Seq",
    "GCN",
    "GraphSAGE",
    "GAT",
    "GIN",
    "GCNPool",
    "MaskedGCN",
    "MODELS",
    "ModelSpec",
    "register_model",
    "build_model",
    "model_options",
]
