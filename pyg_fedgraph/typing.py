r"""Flags for optional dependencies, in the manner of :mod:`torch_geometric.typing`."""
import importlib.util

WITH_TORCH_SCATTER: bool = importlib.util.find_spec("torch_scatter") is not None
WITH_TORCHVISION: bool = importlib.util.find_spec("torchvision") is not None
WITH_FLWR: bool = importlib.util.find_spec("flwr") is not None
WITH_PANDAS: bool = importlib.util.find_spec("pandas") is not None
WITH_H5PY: bool = importlib.util.find_spec("h5py") is not None
WITH_TENSORBOARD: bool = importlib.util.find_spec("tensorboard") is not None
WITH_MLFLOW: bool = importlib.util.find_spec("mlflow") is not None
WITH_PYMETIS: bool = importlib.util.find_spec("pymetis") is not None


def require(flag: bool, package: str, extra: str) -> None:
    r"""Raises an :class:`ImportError` naming the extra that provides ``package``."""
    if not flag:
        raise ImportError(f"this feature needs '{package}': install it with "
                          f"pip install 'pyg-fedgraph[{extra}]'")
