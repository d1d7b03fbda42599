r"""train_pooled: one model on every client's training data pooled, by hand."""
import math

import pytest
import torch

from pyg_fedgraph.data import ClientSplit, FederatedDataset
from pyg_fedgraph.train import LocalConfig, train_pooled


def col(*values):
    return torch.tensor(values, dtype=torch.float32).view(-1, 1)


def regression():
    r"""Two clients, 1-D inputs and targets: train (1, 2), (2, 4) | (3, 3);
    test (1, 1) | (2, 2)."""
    splits = {"train": ClientSplit.from_lists([col(1, 2), col(3)], [col(2, 4), col(3)]),
              "val": ClientSplit.from_lists([col(1), col(1)], [col(1), col(1)]),
              "test": ClientSplit.from_lists([col(1), col(2)], [col(1), col(2)])}
    return FederatedDataset("toy", "regression", splits)


def line(weight=0.0):
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(weight)
    return model


def test_one_sgd_step_on_the_pooled_mean_by_hand():
    model = line()
    mse = train_pooled(model, regression(), LocalConfig(lr=0.1, full_batch=True, epochs=1))
    # L(w) = mean over the 3 pooled samples of (w x - y)^2; at w = 0 its gradient is
    # -2/3 (1*2 + 2*4 + 3*3) = -38/3, so w = 0.1 * 38/3.
    w = 0.1 * 38 / 3
    assert model.weight.item() == pytest.approx(w, rel=1e-6)
    assert mse.dtype == torch.float64 and mse.shape == (2,)
    assert mse.tolist() == pytest.approx([(w - 1) ** 2, (2 * w - 2) ** 2], rel=1e-5)
    # A client's mean alone would give another step: the samples are pooled.
    assert model.weight.item() != pytest.approx(0.1 * (1 * 2 + 2 * 4))  # client 0 alone


def test_adam_first_step_moves_by_the_learning_rate():
    model = line()
    train_pooled(model, regression(), LocalConfig(optimizer="adam", lr=0.01, full_batch=True,
                                                  epochs=1))
    # Adam's first step is lr * g / (|g| + eps): 0.01 against the gradient's sign.
    assert model.weight.item() == pytest.approx(0.01, rel=1e-6)


def test_mini_batches_follow_the_drawn_order():
    data = regression()
    steps, lr = 4, 0.01
    model = line(0.5)
    train_pooled(model, data, LocalConfig(lr=lr, batch_size=2, steps=steps),
                 generator=torch.Generator().manual_seed(7))
    # By hand: passes of 2 batches (2 + 1 samples) over a random order drawn per pass.
    xs, ys = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 3.0])
    gen, w = torch.Generator().manual_seed(7), 0.5
    for t in range(steps):
        if t % 2 == 0:
            order = torch.randperm(3, generator=gen)
        idx = order[(t % 2) * 2:(t % 2) * 2 + 2]
        w -= lr * float((2 * xs[idx] * (w * xs[idx] - ys[idx])).mean())
    assert model.weight.item() == pytest.approx(w, rel=1e-5)
    # One pass of one batch of everything is the full-batch step.
    a, b = line(), line()
    train_pooled(a, data, LocalConfig(lr=0.1, batch_size=3, epochs=1))
    train_pooled(b, data, LocalConfig(lr=0.1, full_batch=True, epochs=1))
    assert a.weight.item() == pytest.approx(b.weight.item(), rel=1e-6)


def test_per_client_accuracy_weights_and_empty_clients_by_hand():
    # Class 1 exactly when x > 0: logits (0, x).
    model = torch.nn.Linear(1, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.0], [1.0]]))
        model.bias.zero_()
    label = lambda *v: torch.tensor(v, dtype=torch.long)  # noqa: E731
    train = ClientSplit.from_lists([col(1), col(-1), col(2)], [label(1), label(0), label(1)])
    test = ClientSplit.from_lists([col(-1, 1, 2), col(3), col(1)], [label(0, 1, 0), label(1),
                                                                    label(1)])
    test.counts[2] = 0  # client 2 has no test sample
    data = FederatedDataset("toy", "classification", {"train": train, "val": train,
                                                      "test": test}, num_classes=2)
    acc = train_pooled(model, data, LocalConfig(steps=0))
    assert acc[:2].tolist() == [pytest.approx(2 / 3), 1.0] and math.isnan(acc[2])
    weighted = ClientSplit(test.x, test.y, test.counts, torch.tensor([[1.0, 1.0, 2.0],
                                                                      [1.0, 0.0, 0.0],
                                                                      [1.0, 0.0, 0.0]]))
    data.splits["test"] = weighted
    assert train_pooled(model, data, LocalConfig(steps=0))[0].item() == pytest.approx(2 / 4)
    assert train_pooled(model, data, LocalConfig(steps=0), split="train").tolist() == [1.0] * 3


def test_errors():
    data = regression()
    with pytest.raises(ValueError, match="unknown split 'dev'; dataset 'toy' has train"):
        train_pooled(line(), data, LocalConfig(), split="dev")
    with pytest.raises(ValueError, match="no parameters"):
        train_pooled(torch.nn.Identity(), data, LocalConfig())
