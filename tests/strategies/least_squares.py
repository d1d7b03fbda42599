r"""Least squares by hand: a regression federation on which a linear model's
gradients and Hessians have closed forms, to check local rules against
hand-written arithmetic."""
import torch
from torch import nn

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset

N_PER_CLIENT = 4


def least_squares_dataset(num_clients: int = 2, seed: int = 0) -> FederatedDataset:
    r"""``num_clients`` clients of 4 samples ``(x, y)``, ``x`` 2-d, ``y`` 1-d."""
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(N_PER_CLIENT, 2, generator=gen) for _ in range(num_clients)]
    ys = [x @ torch.tensor([[1.0], [-2.0]]) + c + 0.3 * torch.randn(N_PER_CLIENT, 1,
                                                                       generator=gen)
          for c, x in enumerate(xs)]
    split = ClientSplit.from_lists(xs, ys)
    return FederatedDataset("least-squares", "regression",
                            {"train": split, "val": split, "test": split})


def linear_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(2, 1, bias=False)


def client_xy(data: FederatedDataset, client: int) -> tuple[torch.Tensor, torch.Tensor]:
    split = data.splits["train"]
    return split.x[client], split.y[client]


def grad(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r""":math:`\nabla f(w) = \frac{2}{B} X^\top (X w - y)` of
    :math:`f(w) = \frac{1}{B} \|X w - y\|^2`."""
    return 2.0 / x.size(0) * x.T @ (x @ w - y.view(-1))


def hessian(x: torch.Tensor) -> torch.Tensor:
    r""":math:`\nabla^2 f = \frac{2}{B} X^\top X`."""
    return 2.0 / x.size(0) * x.T @ x
