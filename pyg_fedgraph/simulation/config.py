r"""The declaration of the simulator's own settings: :class:`SimulatorConfig`.

These are the ``--set`` keys that reach :class:`~pyg_fedgraph.simulation.Simulator`
(the others reach local training, the model, the data or the strategy). Kept
free of torch so that the command line's ``--help`` lists them without
loading it; the simulator checks its keyword arguments against
:data:`SIM_SCHEMA`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pyg_fedgraph.hparams import Range, schema
from pyg_fedgraph.typing import CompileMode, ExecutionName

__all__ = ["SimulatorConfig", "SIM_SCHEMA", "SIM_KEYS", "Rounds", "DropoutRate", "TestAt"]

#: Communication rounds: at least one (a run of none has nothing to report).
Rounds = Annotated[int, Range(ge=1)]
#: The probability that a sampled client returns nothing in a round: below 1,
#: or nobody would ever train.
DropoutRate = Annotated[float, Range(ge=0.0, lt=1.0)]
#: Which evaluated rounds the test split is evaluated at: ``"every"`` one, or
#: only those the reported figures read (``"best"``, see
#: :class:`~pyg_fedgraph.simulation.Simulator`).
TestAt = Literal["every", "best"]


@dataclass
class SimulatorConfig:
    r"""The simulator's settings (see :class:`~pyg_fedgraph.simulation.Simulator`
    for what each does).

    Args:
        rounds (int): communication rounds, at least 1 (default: ``50``).
        dropout (float): probability in :math:`[0, 1)` that a sampled client
            returns nothing in a round (default: ``0.0``).
        sample_fraction (float, optional): share of clients sampled per round
            (default: the strategy's own).
        eval_every (int): evaluate every k rounds (default: ``1``).
        parallel (bool): batched training; :obj:`False` runs the per-client
            reference loop (default: :obj:`True`).
        parallel_clients (int, optional): clients per batched computation
            (default: all on the CPU, an estimate that fits on a GPU).
        execution (str): ``"auto"``, ``"vmap"`` or ``"loop"`` (default: ``"auto"``).
        state_device (str, optional): where the client table lives
            (default: the compute device).
        compile (bool or str): :func:`torch.compile` the batched gradient and
            the evaluation's batched forward pass (default: :obj:`False`).
        private (str, optional): comma-separated parameter-name prefixes of
            the part of every client's model that stays on the client
            (:mod:`pyg_fedgraph.train.private`; default: the model's
            ``private_parameters``, usually none).
        test_at (str): ``"every"`` evaluated round, or ``"best"``: only where
            the reported figures read it (default: ``"every"``).
    """
    rounds: Rounds = 50
    dropout: DropoutRate = 0.0
    sample_fraction: Annotated[float | None, Range(gt=0.0, le=1.0)] = None
    eval_every: Annotated[int, Range(ge=1)] = 1
    parallel: bool = True
    parallel_clients: Annotated[int | None, Range(ge=1)] = None
    execution: ExecutionName = "auto"
    state_device: str | None = None
    compile: bool | CompileMode = False
    private: str | None = None
    test_at: TestAt = "every"


#: The declared settings of :class:`SimulatorConfig`.
SIM_SCHEMA = schema(SimulatorConfig)
#: The simulator's ``--set`` keys (rounds and dropout have options of their own).
SIM_KEYS = tuple(k for k in SIM_SCHEMA if k not in ("rounds", "dropout"))
