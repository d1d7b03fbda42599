r"""Run pyg_fedgraph strategies on `Flower <https://flower.ai>`_ (Message API).

Needs the ``flower`` extra: ``pip install 'pyg-fedgraph[flower]'``.

* :class:`GraphStrategy` (server): wraps any
  :class:`~pyg_fedgraph.strategies.Strategy` as a
  :class:`flwr.serverapp.strategy.Strategy`; each client gets its own
  personalized model, replies are validated, the round's results become a
  :class:`~pyg_fedgraph.data.FederationGraph`.
* :func:`make_client_app` / :class:`GraphClient` (clients): a torch model and
  one client's data as a :class:`flwr.clientapp.ClientApp` that trains with the
  simulator's local update rules.
* :mod:`~pyg_fedgraph.integrations.flower.protocol`: the record formats,
  reply validation and plan encoding, as pure functions.
"""
from pyg_fedgraph.typing import WITH_FLWR, require

require(WITH_FLWR, "flwr", "flower")

from pyg_fedgraph.integrations.flower.client import GraphClient, make_client_app  # noqa: E402 - imported after the flwr availability check
from pyg_fedgraph.integrations.flower.protocol import (  # noqa: E402 - imported after the flwr availability check
    check_params_record,
    params_to_record,
    record_to_params,
)
from pyg_fedgraph.integrations.flower.server import DroppedReply, GraphStrategy  # noqa: E402 - imported after the flwr availability check

__all__ = [
    "GraphStrategy",
    "DroppedReply",
    "GraphClient",
    "make_client_app",
    "params_to_record",
    "record_to_params",
    "check_params_record",
]
