r"""The round engine: the server side of federated rounds, shared by the
in-process simulator and the Flower integration."""
from pyg_fedgraph.engine.history import (
    PROTOCOLS,
    TIE_WARNING_SHARE,
    TIES,
    History,
    Protocol,
    RoundRecord,
    Ties,
)
from pyg_fedgraph.engine.rounds import (
    STATE_FORMAT,
    Rejection,
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
    "Rejection",
    "STATE_FORMAT",
    "sample_clients",
    "snapshot",
    "History",
    "RoundRecord",
    "Protocol",
    "PROTOCOLS",
    "Ties",
    "TIES",
    "TIE_WARNING_SHARE",
    "DEFAULT_MAX_NORM",
    "UpdateCheck",
    "UpdateValidator",
    "check_updates",
    "check_dataset",
]
