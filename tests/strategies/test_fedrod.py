"""FedRoD: the balanced-softmax generic head, the personal head, predictions as their sum."""
import pytest
import torch
import torch.nn.functional as F
from strategy_toys import two_group_dataset
from torch import nn

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, FedRoD, build_strategy
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.fedrod import linear_head
from pyg_fedgraph.train import ClientTrainer, LocalConfig
from pyg_fedgraph.train.rules import FedRoDStep


def _model(classes=3):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, classes))


def test_registered():
    assert STRATEGIES["fedrod"] is FedRoD
    assert build_strategy("fedrod").hparams() == {}


def test_linear_head_by_hand():
    # Layer "0": 2*8 + 8 = 24 values, layer "2": weight 3*8 then bias 3.
    assert linear_head(ParamLayout.from_module(_model())) == (24, 48)
    assert linear_head(ParamLayout.from_module(nn.Linear(4, 3))) == (0, 12)
    for bad in (nn.Sequential(nn.Linear(2, 8), nn.Linear(8, 3, bias=False)),
                nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3))):
        with pytest.raises(ValueError, match="FedRoD needs a linear classifier"):
            linear_head(ParamLayout.from_module(bad))


def _one_client(labels):
    x = torch.tensor([[1.0, 0.5], [-0.5, 2.0], [0.3, -1.0], [2.0, 1.0]])
    split = ClientSplit.from_lists([x], [torch.tensor(labels)])
    return FederatedDataset("one", "classification", {"train": split, "val": split,
                                                      "test": split}, num_classes=3), x


def test_one_step_by_hand_balanced_softmax_and_personal_head():
    # A linear model: z = x, generic head (W, b), personal head (P, c); class 2 absent.
    labels = [0, 1, 0, 0]
    data, x = _one_client(labels)
    lr = 0.5
    trainer = ClientTrainer(nn.Linear(2, 3), data,
                            config=LocalConfig(lr=lr, batch_size=4, epochs=1))
    gen = torch.Generator().manual_seed(3)
    generic, personal = torch.randn(9, generator=gen), torch.randn(9, generator=gen)
    out = trainer.train(torch.tensor([0]), (generic + personal).unsqueeze(0),
                        rule=FedRoDStep(generic, 0, 6))
    W, b, P, c = generic[:6].view(3, 2), generic[6:], personal[:6].view(3, 2), personal[6:]
    onehot = F.one_hot(torch.tensor(labels), 3).float()
    # Balanced softmax: softmax(W x + b + log n) with n = (3, 1, 0).
    logits = x @ W.T + b + torch.tensor([3.0, 1.0, 0.0]).log()
    err = (logits.softmax(1) - onehot) / 4
    want_generic = torch.cat([(W - lr * err.T @ x).view(-1), b - lr * err.sum(0)])
    # Personal head: cross-entropy of the summed logits, gradient on (P, c) only.
    err_p = ((x @ (W + P).T + b + c).softmax(1) - onehot) / 4
    want_personal = torch.cat([(P - lr * err_p.T @ x).view(-1), c - lr * err_p.sum(0)])
    torch.testing.assert_close(out.params[0], want_generic, atol=1e-6, rtol=0)
    torch.testing.assert_close(out.extra["personal_head"][0], want_personal, atol=1e-6,
                               rtol=0)
    # The absent class drops out of the balanced softmax: its generic row keeps its values.
    torch.testing.assert_close(out.params[0, [4, 5, 8]], generic[[4, 5, 8]], rtol=0, atol=0)
    # Plain cross-entropy (no log n) would have moved the generic head elsewhere.
    plain = ((x @ W.T + b).softmax(1) - onehot) / 4
    assert not torch.allclose(want_generic[6:], b - lr * plain.sum(0), atol=1e-3)


def _strategy(model, data, held_out=()):
    layout = ParamLayout.from_module(model)
    ctx = FederationContext(num_clients=data.num_clients, layout=layout,
                            init_params=layout.flatten(model),
                            num_samples=data.num_samples("train"),
                            held_out=torch.tensor(held_out, dtype=torch.long))
    strategy = FedRoD()
    strategy.setup(ctx)
    return strategy, layout


def test_predictions_are_the_sum_of_the_generic_and_personal_heads():
    model, data = _model(2), two_group_dataset()
    strategy, layout = _strategy(model, data, held_out=(3,))
    gen = torch.Generator().manual_seed(0)
    strategy.personal_heads.copy_(torch.randn(strategy.personal_heads.shape, generator=gen))
    params = strategy.personalized_params(torch.arange(4))
    x, y = data.splits["test"].x, data.splits["test"].y
    trainer = ClientTrainer(model, data)
    acc = trainer.evaluate(torch.arange(4), params, split="test")["accuracy"]
    personal = nn.Linear(8, 2)
    for i in range(4):
        net = layout.load_into(_model(2), strategy.global_params)   # body + generic head
        z = net[:2](x[i])
        with torch.no_grad():
            head = strategy.personal_heads[i]
            personal.weight.copy_(head[:16].view(2, 8))
            personal.bias.copy_(head[16:])
        want = net[2](z) if i == 3 else net[2](z) + personal(z)   # held out: generic only
        got = layout.load_into(_model(2), params[i])(x[i])
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
        assert float(acc[i]) == pytest.approx(float((want.argmax(1) == y[i]).float().mean()))
    # The plan sends the personalized models and the generic head.
    plan = strategy.configure_train(1, torch.tensor([2, 0]))
    torch.testing.assert_close(plan.params, params[[2, 0]])
    assert torch.equal(plan.rule.generic_head, strategy.global_params[24:])
    assert plan.outputs == ("personal_head",)


def test_rounds_average_generic_models_and_keep_personal_heads():
    torch.manual_seed(0)
    sim = Simulator(two_group_dataset(), _model(2), FedRoD(), rounds=2,
                    sample_fraction=0.5, local=LocalConfig(lr=0.2, batch_size=8, epochs=1))
    heads = sim.strategy.personal_heads.clone()
    sampled = sim.engine.sample(1)
    sim.step()
    n = sim.dataset.num_samples("train")[sampled].float()
    torch.testing.assert_close(sim.strategy.global_params,
                               (n / n.sum()) @ sim.local_params[sampled], atol=1e-6, rtol=0)
    moved = (sim.strategy.personal_heads != heads).any(1)
    assert moved.nonzero().view(-1).tolist() == sampled.tolist()


def test_fedrod_needs_classification_and_a_linear_head():
    split = ClientSplit.from_lists([torch.randn(4, 2)], [torch.randn(4, 1)])
    regression = FederatedDataset("r", "regression", {"train": split, "val": split,
                                                      "test": split})
    with pytest.raises(ValueError, match="FedRoD's balanced softmax is for classification"):
        Simulator(regression, nn.Linear(2, 1), FedRoD(), rounds=1)
    with pytest.raises(ValueError, match="FedRoD needs a linear classifier"):
        Simulator(two_group_dataset(), nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)),
                  FedRoD(), rounds=1)
