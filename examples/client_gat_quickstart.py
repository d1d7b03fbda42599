r"""pFedGAT in a few lines: a server-side GAT learns who should average with whom.

Eight clients fit a linear regression model on a few noisy samples each.
Clients 0-3 and clients 4-7 have different true weights (a shared part plus a
group part), so averaging within a group is better than training alone and
better than averaging over everyone. Every round (pFedGAT Algorithm 1):

1. each client trains locally from its personalized model and uploads it;
2. the server's :class:`ClientGAT` computes the allocation matrix ``A`` and the
   personalized models ``theta_tilde = A @ theta``;
3. each client scores its ``theta_tilde_i`` on held-out data and returns the
   gradient of that loss (``mode="gradient"``: one extra model-sized upload);
4. the server takes one optimizer step on the GAT.

The GAT carries this package's similarity term by default (see ``ClientGAT``).
Because a client is always most similar to itself, the learned weights first
go to the client itself and then spread over its group. Here that beats local
training, but it stays short of the in-group average. ``ClientGAT(...,
similarity=False)`` is the paper's GAT.

Runs in a few seconds on a CPU:  python examples/client_gat_quickstart.py
"""
import torch
from torch import nn
from torch.func import functional_call, vmap

from pyg_fedgraph.data import FederationGraph, ParamLayout
from pyg_fedgraph.nn import ClientGAT
from pyg_fedgraph.nn.client_gat import allocation_backward

torch.manual_seed(0)
NUM_CLIENTS, IN_FEATURES, ROUNDS, LOCAL_STEPS = 8, 10, 30, 10

# ---- data: two groups of clients with related but different targets -----------------
group = torch.arange(NUM_CLIENTS) * 2 // NUM_CLIENTS  # 0 0 0 0 1 1 1 1
true_weight = torch.randn(IN_FEATURES) + 0.5 * torch.randn(2, IN_FEATURES)


def make_split(num_samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    inputs = torch.randn(NUM_CLIENTS, num_samples, IN_FEATURES)
    targets = torch.einsum("nsf,nf->ns", inputs, true_weight[group])
    return inputs, (targets + 2.0 * torch.randn_like(targets)).unsqueeze(-1)


train_data = make_split(20)  # few noisy samples: training alone overfits
val_data = make_split(50)    # the held-out part each client scores theta_tilde on

# ---- the model as flat parameter vectors, all clients at once ------------------------
model = nn.Linear(IN_FEATURES, 1)
layout = ParamLayout.from_module(model)


def client_losses(theta: torch.Tensor, data: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    r"""Loss of client i's data under row i of ``theta`` (N, D), for every i: (N,)."""
    def one(params, inputs, targets):
        pred = functional_call(model, layout.unflatten(params), (inputs,))
        return ((pred - targets) ** 2).mean()
    return vmap(one)(theta, *data)


def local_training(start: torch.Tensor) -> torch.Tensor:
    # Each client runs SGD on its own loss; the losses are independent, so one
    # backward of their sum gives every client its own gradient.
    theta = start.clone().requires_grad_(True)
    optimizer = torch.optim.SGD([theta], lr=0.1)
    for _ in range(LOCAL_STEPS):
        optimizer.zero_grad()
        client_losses(theta, train_data).sum().backward()
        optimizer.step()
    return theta.detach()


def client_feedback(theta_tilde: torch.Tensor) -> torch.Tensor:
    r"""Row i: what client i uploads in mode="gradient", dL_i / d theta_tilde_i."""
    theta_tilde = theta_tilde.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(client_losses(theta_tilde, val_data).sum(), theta_tilde)
    return grad


# ---- federated training --------------------------------------------------------------
gat = ClientGAT(layout.num_params, hidden_channels=8, heads=8)  # paper: 8 heads, slope 0.2
gat_optimizer = torch.optim.SGD(gat.parameters(), lr=0.01)  # the paper's server optimizer
print(gat, f"on {NUM_CLIENTS} clients with {layout.num_params} parameters each")

same_group = (group[:, None] == group[None, :]).float()
in_group_average = same_group / same_group.sum(dim=1, keepdim=True)
personalized = layout.flatten(model).repeat(NUM_CLIENTS, 1)  # everyone starts equal
for rnd in range(ROUNDS):
    theta = local_training(personalized)
    graph = FederationGraph(x=theta, delta=theta - personalized)

    theta_tilde, allocation = gat(graph)
    gat_optimizer.zero_grad()
    allocation_backward(theta_tilde, client_feedback(theta_tilde), mode="gradient")
    gat_optimizer.step()
    personalized = theta_tilde.detach()

    if rnd % 5 == 0 or rnd == ROUNDS - 1:
        with torch.no_grad():
            fedavg = theta.mean(dim=0).expand_as(theta)
            losses = {name: client_losses(t, val_data).mean().item() for name, t in [
                ("pFedGAT", personalized), ("local", theta), ("FedAvg", fedavg),
                ("in-group average", in_group_average @ theta)]}
        own = (allocation.detach() * same_group).sum(dim=1).mean().item()
        print(f"round {rnd:2d}  held-out MSE: "
              + "  ".join(f"{k} {v:.3f}" for k, v in losses.items())
              + f"  | weight on own group {own:.3f}")

torch.set_printoptions(precision=3, sci_mode=False)
print("allocation matrix A (row i = weights client i gives to clients 0..7):")
print(allocation.detach())
