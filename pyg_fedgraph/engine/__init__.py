r"""The round engine: the server side of federated rounds, shared by the
in-process simulator and the Flower integration."""
from pyg_fedgraph.engine.history import PROTOCOLS, History, Protocol, RoundRecord
from pyg_fedgraph.engine.rounds import (
    STATE_FORMAT,
    RoundEngine,
    RoundUpdate,
    sample_clients,
    snapshot,
)
from pyg_fedgraph.engine.validation import (
    DEFAULT_MAX_NORM,
    UpdateCheck,
    UpdateValidator,
    check_dataset,
    check_updates,
)

__all__ = [
    "RoundEngine",
    "RoundUpdate",
    "STATE_FORMAT",
    "sample_clients",
    "snapshot",
    "History",
    "RoundRecord",
    "Protocol",
    "PROTOCOLS",
    "DEFAULT_MAX_NORM",
    "UpdateCheck",
    "UpdateValidator",
    "check_updates",
    "check_dataset",
]
