"""FedALA and its adaptive local aggregation start job."""
import copy

import numpy as np
import pytest
import torch
from strategy_toys import two_group_dataset

from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, FedALA, FedAvg, build_strategy
from pyg_fedgraph.train import ClientTrainer, LocalConfig
from pyg_fedgraph.train.ala import AdaptiveLocalAggregation, ala_schedule
from pyg_fedgraph.train.jobs import ClientStart
from pyg_fedgraph.utils.seeds import make_generator

LOCAL = LocalConfig(lr=0.2, batch_size=8, epochs=2)


def _simulator(strategy, rounds=3, seed=0):
    torch.manual_seed(seed)
    return Simulator(two_group_dataset(), MLP(2, 8, 2, num_layers=2), strategy, rounds=rounds,
                     local=LOCAL, seed=seed)


def _setup(seed=0):
    torch.manual_seed(seed)
    data = two_group_dataset()
    model = MLP(2, 8, 2, num_layers=3)
    trainer = ClientTrainer(model, data, config=LocalConfig(lr=0.1, batch_size=7, epochs=1))
    gen = torch.Generator().manual_seed(seed)
    d = trainer.layout.num_params
    glob = torch.randn(d, generator=gen)
    local = glob + 0.5 * torch.randn(4, d, generator=gen)
    local[2] = glob  # client 2 has not trained: its model is the global one
    return data, model, trainer, glob, local


def _reference(model, layout, data, client, local, glob, w, started, job, index):
    r"""The ALA of one client written plainly, as the authors' loop: a model,
    autograd, one batch after the other."""
    top = job.top
    if torch.equal(local, glob):
        return glob.clone(), w.clone()

    def assemble(w):
        return torch.cat([glob[:top], local[top:] + (glob[top:] - local[top:]) * w])

    losses = []
    for _ in range(1 if started else job.max_epochs):
        for batch in index:
            m = copy.deepcopy(model)
            layout.load_into(m, assemble(w))
            x, y = data.batch("train", batch.view(1, -1), torch.tensor([client]))
            loss = torch.nn.functional.cross_entropy(m(x[0]), y[0])
            loss.backward()
            grad = layout.flatten({n: p.grad for n, p in m.named_parameters()})
            w = (w - job.eta * grad[top:] * (glob[top:] - local[top:])).clamp(0.0, 1.0)
            last = float(loss.detach())
        losses.append(last)
        if started:
            break
        if len(losses) > job.num_pre_loss and np.std(losses[-job.num_pre_loss:]) < \
                job.threshold:
            break
    return assemble(w), w


def test_batched_aggregation_equals_a_per_client_reference_loop():
    data, model, trainer, glob, local = _setup()
    layout = trainer.layout
    top = int(layout.ptr[1])  # the top two of three layers
    weights = torch.rand(4, layout.num_params - top, generator=torch.Generator().manual_seed(1))
    started = torch.tensor([False, True, False, True])
    job = AdaptiveLocalAggregation(glob, weights, started, top=top, share=0.5, eta=0.5,
                                   threshold=0.05, num_pre_loss=3, max_epochs=8)
    everyone = torch.arange(4)
    start = ClientStart(everyone, everyone, local, torch.zeros(4, 0), local)
    params, out = job.prepare(trainer, start, seed=3, rnd=2)
    trainer.parallel = False
    one_by_one, out_loop = job.prepare(trainer, start, seed=3, rnd=2)
    torch.testing.assert_close(one_by_one, params, atol=1e-5, rtol=0)
    torch.testing.assert_close(out_loop["ala_weights"], out["ala_weights"], atol=1e-5, rtol=0)
    index, active = ala_schedule(data.num_samples("train"), 0.5, 7,
                                 [make_generator(3, "ala", 2, i) for i in range(4)])
    for i in range(4):
        want, w = _reference(model, layout, data, i, local[i], glob, weights[i], bool(started[i]),
                             job, index[active[:, i], i])
        torch.testing.assert_close(params[i], want, atol=1e-5, rtol=0)
        torch.testing.assert_close(out["ala_weights"][i], w, atol=1e-5, rtol=0)
    # The lower layer is the global model's; client 2 kept its weights and starts from it.
    torch.testing.assert_close(params[:, :top], glob[:top].expand(4, -1))
    assert torch.equal(params[2], glob) and torch.equal(out["ala_weights"][2], weights[2])
    assert not torch.equal(out["ala_weights"][0], weights[0])


def test_weights_zero_and_one_by_hand():
    data, model, trainer, glob, local = _setup()
    top = int(trainer.layout.ptr[2])
    p = trainer.layout.num_params - top
    everyone = torch.arange(4)
    start = ClientStart(everyone, everyone, local, torch.zeros(4, 0), local)
    for fill in (0.0, 1.0):  # eta = 0: the weights do not move
        job = AdaptiveLocalAggregation(glob, torch.full((4, p), fill),
                                       torch.ones(4, dtype=torch.bool), top=top, eta=0.0)
        params, out = job.prepare(trainer, start, seed=0, rnd=1)
        expected = torch.cat([glob[:top].expand(4, -1),
                              local[:, top:] if fill == 0.0 else glob[top:].expand(4, -1)], 1)
        torch.testing.assert_close(params, expected)  # W = 1: the global model
        assert bool((out["ala_weights"] == fill).all())
    with pytest.raises(ValueError, match="needs each client's own model"):
        job.prepare(trainer, ClientStart(everyone, everyone, local, torch.zeros(4, 0)),
                    seed=0, rnd=1)


def test_weights_one_is_fedavg():
    # eta = 0 keeps W = 1: every client starts from the global model, as in FedAvg.
    ala = _simulator(FedALA(eta=0.0), rounds=3)
    fedavg = _simulator(FedAvg(), rounds=3)
    ala.run(), fedavg.run()
    torch.testing.assert_close(ala.strategy.global_params, fedavg.strategy.global_params,
                               atol=1e-6, rtol=0)
    assert bool((ala.strategy.ala_weights == 1).all())
    for split in ("val", "test"):
        assert ala.history.mean(split) == pytest.approx(fedavg.history.mean(split), abs=1e-6)


def test_first_round_skips_and_second_starts():
    sim = _simulator(FedALA(), rounds=2)
    sim.step()  # everyone's model equals the global model: no aggregation learned
    assert bool((sim.strategy.ala_weights == 1).all()) and not bool(sim.strategy.ala_started.any())
    sim.step()
    assert bool(sim.strategy.ala_started.all())
    assert float(sim.strategy.ala_weights.min()) < 1.0


def test_evaluation_is_the_start_of_the_next_round():
    sim = _simulator(FedALA(), rounds=2)
    sim.run()
    everyone = torch.arange(4)
    start = ClientStart(everyone, everyone, sim.local_params, sim.local_buffers, sim.local_params)
    evaluated, _ = sim.strategy.configure_evaluate(everyone).start_job.prepare(
        sim.trainer, start, seed=sim.seed, rnd=2)
    trained, _ = sim.strategy.configure_train(3, everyone).start_job.prepare(
        sim.trainer, start, seed=sim.seed, rnd=3)
    assert torch.equal(evaluated, trained)


def test_adaptive_aggregation_personalizes_the_top_layer():
    # Opposite label maps in two groups: the shared lower layer, a personal top layer.
    # The toy's top layer has 18 parameters and small gradients: eta = 10 lets the
    # weights move within a few rounds (with eta = 1 they stay near 0.6 here).
    ala = _simulator(FedALA(eta=10.0), rounds=6)
    fedavg = _simulator(FedAvg(), rounds=6)
    ala.run(), fedavg.run()
    assert ala.summary()["test"] > fedavg.summary()["test"] + 0.2
    assert float(ala.strategy.ala_weights.mean()) < 0.5  # mostly their own top layer


def test_options_and_errors():
    assert STRATEGIES["fedala"] is FedALA
    assert build_strategy("fedala").hparams() == {
        "layers": 1, "share": 0.8, "eta": 1.0, "threshold": 0.01, "num_pre_loss": 10,
        "max_start_epochs": 50}
    with pytest.raises(ValueError, match="share must be <= 1"):
        FedALA(share=1.5)
    with pytest.raises(ValueError, match="layers=3 but the model has 2 layers"):
        _simulator(FedALA(layers=3))
