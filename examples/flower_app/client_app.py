"""ClientApp: one FL-60 client trained with pyg_fedgraph's local update rules."""
from task import load_model, load_partition

from pyg_fedgraph.integrations.flower import make_client_app

# The local SGD settings come from the server with every message (GraphStrategy's
# `local`); the model's parameters are replaced by the server's initial model.
app = make_client_app(load_model(), load_partition)
