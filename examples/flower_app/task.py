"""What the server and the clients share: the FL-60 federation, the model, the settings."""
from __future__ import annotations

import warnings

# PyG's import calls torch.jit.script, which torch deprecates: a warning about
# neither this app nor its user, which Ray's workers would print once per client
# (the pyg-fedgraph command line hides it too). Set before pyg_fedgraph is imported:
# both apps import this module first.
warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated")

import torch  # noqa: E402
from flwr.app import Context  # noqa: E402
from torch import nn  # noqa: E402

from pyg_fedgraph.data.federated_dataset import FederatedDataset  # noqa: E402
from pyg_fedgraph.datasets import load_dataset  # noqa: E402
from pyg_fedgraph.models import build_model  # noqa: E402
from pyg_fedgraph.train import LocalConfig  # noqa: E402

# FL-60 inputs are 2-D points with 2 classes; Panacea's client model is a
# 3-layer MLP with 16 hidden units (Sec. IV-A).
INPUT_SHAPE = (2,)
NUM_CLASSES = 2


def load_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model("mlp", INPUT_SHAPE, NUM_CLASSES, hidden_channels=16, num_layers=3)


def local_config(run_config: dict) -> LocalConfig:
    return LocalConfig(lr=float(run_config["lr"]), momentum=float(run_config["momentum"]),
                       batch_size=int(run_config["batch-size"]),
                       epochs=int(run_config["local-epochs"]))


def load_partition(context: Context) -> FederatedDataset:
    """This node's client of FL-60. The federation is synthetic and drawn from
    the run's seed, so every node can generate it and keep only its own slice;
    with real data, load the local files here instead."""
    cfg = context.run_config
    data = load_dataset("fl60", num_clients=int(cfg["num-clients"]), seed=int(cfg["seed"]))
    pid = int(context.node_config["partition-id"])
    return data.subset(torch.tensor([pid]))
