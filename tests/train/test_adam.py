"""Local optimizers as declared rules: Adam against torch.optim.Adam step for step, and
per-client optimizer state that persists across local runs (in the simulator, through
checkpoints, and on Flower nodes)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import build_strategy
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.rules import SGD, Adam, default_rule
from pyg_fedgraph.train.trainer import ClientTrainer


def dataset(num_clients: int = 3, seed: int = 0) -> FederatedDataset:
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for split, m in (("train", 9), ("val", 4), ("test", 4)):
        xs = [torch.randn(m, 3, generator=gen) for _ in range(num_clients)]
        ys = [torch.randint(0, 2, (m,), generator=gen) for _ in range(num_clients)]
        splits[split] = ClientSplit.from_lists(xs, ys)
    return FederatedDataset("toy", "classification", splits, num_classes=2)


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))


ADAM = LocalConfig(optimizer="adam", lr=0.05, beta1=0.8, beta2=0.99, eps=1e-6,
                   weight_decay=1e-2, batch_size=4, epochs=2)


def start(trainer: ClientTrainer, s: int) -> torch.Tensor:
    flat = trainer.layout.flatten(trainer.model).repeat(s, 1)
    return flat + 0.1 * torch.randn(flat.shape, generator=torch.Generator().manual_seed(3))


def test_the_config_chooses_the_rule_and_checks_its_settings():
    assert isinstance(default_rule(ADAM), Adam) and isinstance(default_rule(LocalConfig()), SGD)
    with pytest.raises(ValueError, match="momentum=0.9 and nesterov=False are SGD's"):
        LocalConfig(optimizer="adam", momentum=0.9)
    with pytest.raises(ValueError, match="beta2 must be < 1"):
        LocalConfig(optimizer="adam", beta2=1.0)


@pytest.mark.parametrize("execution", ["vmap", "loop"])
def test_batched_adam_equals_torch_optim_adam(execution):
    # The batched rule and the reference loop (torch.optim.Adam on each client's model)
    # consume the same batches: the same parameters to float rounding.
    data = dataset()
    trainer = ClientTrainer(model(), data, config=ADAM, execution=execution)
    params = start(trainer, 3)
    clients = torch.arange(3)
    batched = trainer.train(clients, params, generator=torch.Generator().manual_seed(1))
    trainer.parallel = False
    loop = trainer.train(clients, params, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(batched.params, loop.params, atol=1e-6, rtol=0)
    assert torch.allclose(batched.loss, loop.loss, atol=1e-6)
    assert not torch.allclose(batched.params, params, atol=1e-3)


def test_one_client_by_hand():
    # Client 0 alone, one torch.optim.Adam stepping through its schedule by hand.
    data = dataset()
    trainer = ClientTrainer(model(), data, config=ADAM)
    params = start(trainer, 1)
    gen = torch.Generator().manual_seed(5)
    out = trainer.train(torch.tensor([0]), params, generator=[gen])
    from pyg_fedgraph.train.trainer import batch_schedule

    index, active = batch_schedule(data.num_samples("train")[:1], 4, epochs=2,
                                   generator=[torch.Generator().manual_seed(5)])
    net = copy.deepcopy(trainer.model)
    trainer.layout.load_into(net, params[0], torch.zeros(0))
    opt = torch.optim.Adam(net.parameters(), lr=0.05, betas=(0.8, 0.99), eps=1e-6,
                           weight_decay=1e-2)
    for t in range(index.size(0)):
        x, y = data.batch("train", index[t, :1], torch.tensor([0]))
        opt.zero_grad()
        nn.functional.cross_entropy(net(x[0]), y[0]).backward()
        opt.step()
    assert torch.allclose(out.params[0], trainer.layout.flatten(net), atol=1e-6, rtol=0)


def test_kept_state_continues_one_optimizer_across_runs():
    # With keep_optimizer_state, two local runs equal one Adam optimizer running through
    # both (state carried: moments and step count); without it, the second run restarts.
    keep = LocalConfig(**{**vars(ADAM), "keep_optimizer_state": True})
    data = dataset()
    clients = torch.arange(3)
    for parallel in (True, False):
        trainer = ClientTrainer(model(), data, config=keep, parallel=parallel)
        params = start(trainer, 3)
        first = trainer.train(clients, params, generator=torch.Generator().manual_seed(1))
        assert set(first.state) == {"exp_avg", "exp_avg_sq", "step"}
        assert first.state["step"].tolist() == [6.0, 6.0, 6.0]  # 3 batches x 2 epochs
        second = trainer.train(clients, first.params, generator=torch.Generator().manual_seed(2),
                               state=first.state)
        assert second.state["step"].tolist() == [12.0, 12.0, 12.0]
        if parallel:
            batched = second
        else:
            assert torch.allclose(batched.params, second.params, atol=1e-6, rtol=0)
            for key in ("exp_avg", "exp_avg_sq"):
                assert torch.allclose(batched.state[key], second.state[key], atol=1e-7)
    fresh = ClientTrainer(model(), data, config=ADAM).train(
        clients, first.params, generator=torch.Generator().manual_seed(2))
    assert fresh.state == {}
    assert not torch.allclose(fresh.params, batched.params, atol=1e-4)


def test_sgd_momentum_state_is_kept_too():
    keep = LocalConfig(lr=0.1, momentum=0.9, batch_size=4, epochs=1, keep_optimizer_state=True)
    data = dataset()
    clients = torch.arange(3)
    outs = {}
    for parallel in (True, False):
        trainer = ClientTrainer(model(), data, config=keep, parallel=parallel)
        a = trainer.train(clients, start(trainer, 3), generator=torch.Generator().manual_seed(1))
        assert a.state["started"].all()
        outs[parallel] = trainer.train(clients, a.params, state=a.state,
                                       generator=torch.Generator().manual_seed(2))
    assert torch.allclose(outs[True].params, outs[False].params, atol=1e-6, rtol=0)
    assert torch.allclose(outs[True].state["momentum"], outs[False].state["momentum"], atol=1e-6)


def simulator(rounds: int, **local) -> Simulator:
    cfg = LocalConfig(**{**vars(ADAM), "keep_optimizer_state": True, **local})
    return Simulator(dataset(), model(), build_strategy("fedavg"), rounds=rounds, local=cfg,
                     seed=0)


def test_the_simulator_keeps_each_clients_state_and_resumes_it_exactly():
    whole = simulator(4)
    whole.run()
    assert whole.optimizer_state["step"].tolist() == [24.0, 24.0, 24.0]
    half = simulator(4)
    half.run(2)
    state = half.state_dict()
    assert state["optimizer_state"]["step"].tolist() == [12.0, 12.0, 12.0]
    again = simulator(4)
    again.load_state_dict(state)
    again.run()
    assert torch.equal(again.local_params, whole.local_params)
    assert again.history.mean("test") == whole.history.mean("test")
    # Without keep_optimizer_state nothing is kept, and the runs differ.
    plain = simulator(4, keep_optimizer_state=False)
    plain.run()
    assert plain.optimizer_state == {}
    assert not torch.equal(plain.local_params, whole.local_params)
