r"""Flags for optional dependencies, in the manner of :mod:`torch_geometric.typing`,
and the names a setting may take (the ``Literal`` types the command line's
choices, config files and constructors read), kept here, free of torch, so
that ``--help`` lists them without loading it."""
import importlib.util
from typing import Literal

WITH_TORCH_SCATTER: bool = importlib.util.find_spec("torch_scatter") is not None
WITH_TORCHVISION: bool = importlib.util.find_spec("torchvision") is not None
WITH_FLWR: bool = importlib.util.find_spec("flwr") is not None
WITH_PANDAS: bool = importlib.util.find_spec("pandas") is not None
WITH_H5PY: bool = importlib.util.find_spec("h5py") is not None
WITH_TENSORBOARD: bool = importlib.util.find_spec("tensorboard") is not None
WITH_MLFLOW: bool = importlib.util.find_spec("mlflow") is not None
WITH_PYMETIS: bool = importlib.util.find_spec("pymetis") is not None

#: How data are split over clients: samples by label (:mod:`pyg_fedgraph.data.partition`:
#: iid, pathological, dirichlet, group) or one graph by its nodes
#: (:mod:`pyg_fedgraph.datasets.subgraphs`: metis, overlapping, louvain, random-nodes).
PartitionName = Literal["iid", "pathological", "dirichlet", "group", "metis", "overlapping",
                        "louvain", "random-nodes"]
#: Poisoning attacks (:class:`~pyg_fedgraph.attacks.Attack`).
AttackName = Literal["shuffle", "same-value", "sign-flip", "gaussian", "scaled-negative",
                     "label-flip", "backdoor"]
#: What happens to a bad upload (:class:`~pyg_fedgraph.engine.UpdateValidator`).
RejectPolicy = Literal["drop", "raise"]
#: Autocast precision of local training and evaluation.
Precision = Literal["fp32", "bf16", "fp16"]
#: How a chunk of clients computes (:mod:`pyg_fedgraph.train.execution`).
ExecutionName = Literal["auto", "vmap", "loop"]
#: :func:`torch.compile` modes a trainer accepts (``compile=True`` is ``"default"``).
CompileMode = Literal["default", "reduce-overhead", "max-autotune",
                      "max-autotune-no-cudagraphs"]
#: How a graph classifier pools its node representations
#: (:func:`~pyg_fedgraph.nn.functional.global_pool`).
PoolName = Literal["sum", "mean"]
#: Experiment trackers (:mod:`pyg_fedgraph.tracking`).
TrackerName = Literal["tensorboard", "mlflow"]


def require(flag: bool, package: str, extra: str) -> None:
    r"""Raises an :class:`ImportError` naming the extra that provides ``package``."""
    if not flag:
        raise ImportError(f"this feature needs '{package}': install it with "
                          f"pip install 'pyg-fedgraph[{extra}]'")
