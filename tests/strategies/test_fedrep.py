"""FedRep and its SharedBody start job: bodies are shared, heads never leave a client."""
import pytest
import torch
from strategy_toys import two_group_dataset

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, FedAvg, FedRep, build_strategy
from pyg_fedgraph.strategies.fedrep import head_mask
from pyg_fedgraph.train import ClientTrainer, LocalConfig
from pyg_fedgraph.train.jobs import ClientStart, SharedBody
from pyg_fedgraph.train.rules import SGD

LOCAL = LocalConfig(lr=0.2, batch_size=8, epochs=1)


def _model():
    torch.manual_seed(0)
    return MLP(2, 8, 2, num_layers=3)   # layers 2*8+8, 8*8+8, 8*2+2: D = 114


def test_head_mask_by_hand():
    layout = ParamLayout.from_module(_model())
    mask = head_mask(layout)
    assert mask.tolist() == [False] * 96 + [True] * 18      # the last layer, lins.2
    assert head_mask(layout, 2).tolist() == [False] * 24 + [True] * 90
    with pytest.raises(ValueError, match=r"the head must be 1 to 2 of the model's 3 layers"):
        head_mask(layout, 3)


def test_registered_hparams():
    assert STRATEGIES["fedrep"] is FedRep
    assert build_strategy("fedrep").hparams() == {"head_layers": 1, "head_epochs": 10,
                                                  "head_steps": None, "body_epochs": None}


def _start(trainer, seed=1):
    gen = torch.Generator().manual_seed(seed)
    local = trainer.layout.flatten(trainer.model).repeat(4, 1)
    local = local + 0.5 * torch.randn(local.shape, generator=gen)
    everyone = torch.arange(4)
    return ClientStart(everyone, everyone, local.clone(), trainer.initial_buffers(4), local)


def test_shared_body_takes_the_clients_own_head_and_trains_only_it():
    trainer = ClientTrainer(_model(), two_group_dataset(), config=LOCAL)
    head = head_mask(trainer.layout)
    start = _start(trainer)
    body = torch.linspace(-1, 1, int((~head).sum()))
    params, out = SharedBody(body, head).prepare(trainer, start, seed=0, rnd=1)
    assert torch.equal(params[:, ~head], body.expand(4, -1))     # the server's body
    assert torch.equal(params[:, head], start.local[:, head])    # each client's own head
    assert out["head_loss"].tolist() == [0.0] * 4
    trained, out = SharedBody(body, head, epochs=2).prepare(trainer, start, seed=0, rnd=1)
    assert torch.equal(trained[:, ~head], params[:, ~head])      # the body is frozen
    assert not torch.allclose(trained[:, head], params[:, head])
    assert bool((out["head_loss"] > 0).all())
    # Steps win over epochs: 3 steps train the head alone, differently from 2 epochs.
    stepped, _ = SharedBody(body, head, epochs=2, steps=3).prepare(trainer, start, seed=0,
                                                                    rnd=1)
    assert torch.equal(stepped[:, ~head], params[:, ~head])
    assert not torch.allclose(stepped[:, head], trained[:, head])
    no_step, _ = SharedBody(body, head, epochs=2, steps=0).prepare(trainer, start, seed=0,
                                                                    rnd=1)
    assert torch.equal(no_step, params)
    # Batched over clients equals one client at a time.
    for i in range(4):
        one = ClientStart(start.rows[i:i + 1], start.ids[i:i + 1], start.params[i:i + 1],
                          start.buffers[i:i + 1], start.local[i:i + 1])
        alone, _ = SharedBody(body, head, epochs=2).prepare(trainer, one, seed=0, rnd=1)
        torch.testing.assert_close(alone[0], trained[i], atol=1e-6, rtol=0)


def test_shared_body_errors():
    trainer = ClientTrainer(_model(), two_group_dataset(), config=LOCAL)
    head = head_mask(trainer.layout)
    start = _start(trainer)
    with pytest.raises(ValueError, match="do not split a model of 114 parameters"):
        SharedBody(torch.zeros(5), head).prepare(trainer, start, seed=0, rnd=1)
    with pytest.raises(ValueError, match="needs each client's own model"):
        SharedBody(torch.zeros(96), head).prepare(
            trainer, ClientStart(start.rows, start.ids, start.params, start.buffers),
            seed=0, rnd=1)


def _simulator(strategy, rounds=4, fraction=None, seed=0):
    torch.manual_seed(seed)
    return Simulator(two_group_dataset(), MLP(2, 8, 2, num_layers=3), strategy, rounds=rounds,
                     local=LOCAL, seed=seed, sample_fraction=fraction)


def test_fedrep_never_sends_heads_and_never_changes_another_clients_head():
    sim = _simulator(FedRep(head_epochs=2), fraction=0.5)
    strategy, trainer = sim.strategy, sim.trainer
    head = strategy.head
    init_head = strategy.global_params[head].clone()
    for rnd in range(1, 5):
        before = sim.local_params.clone()
        sampled = sim.engine.sample(rnd)
        plan = strategy.configure_train(rnd, sampled)
        # What the server sends: no starting models, only the shared body.
        assert plan.params is None and plan.regularizer is None and plan.jobs == ()
        job = plan.start_job
        assert isinstance(job, SharedBody) and job.body.numel() == int((~head).sum())
        assert torch.equal(job.body, strategy.global_params[~head])
        assert isinstance(plan.rule, SGD) and torch.equal(plan.rule.mask, ~head)
        # Each sampled client's head phase, replayed alone from its own head.
        expected = {}
        for c in sampled.tolist():
            one = torch.tensor([c])
            params, _ = job.select(torch.tensor([0])).prepare(
                trainer, ClientStart(one, one, before[one], sim.local_buffers[one],
                                     before[one]), seed=sim.seed, rnd=rnd)
            expected[c] = params[0, head]
        sim.step()
        for c in range(4):
            if c in expected:   # its own head, trained by itself; the body phase keeps it
                torch.testing.assert_close(sim.local_params[c, head], expected[c],
                                           atol=1e-6, rtol=0)
            else:               # not sampled: nothing of it changed
                assert torch.equal(sim.local_params[c], before[c])
        # The server averaged bodies only; its head coordinates never move.
        weights = sim.dataset.num_samples("train")[sampled].float()
        body = (weights / weights.sum()) @ sim.local_params[sampled][:, ~head]
        torch.testing.assert_close(strategy.global_params[~head], body, atol=1e-6, rtol=0)
        assert torch.equal(strategy.global_params[head], init_head)


def test_clients_are_evaluated_with_the_body_and_their_own_head():
    sim = _simulator(FedRep(head_epochs=1), rounds=2)
    sim.run()
    params, _ = sim.personalized_models()
    head = sim.strategy.head
    expected = torch.where(head, sim.local_params, sim.strategy.global_params)
    assert torch.equal(params, expected)
    assert torch.equal(sim.strategy.personalized_params(torch.arange(4)), expected)


def test_personal_heads_fit_opposite_label_maps():
    # Clients 0, 1 and 2, 3 label the same inputs oppositely: one shared model
    # cannot serve both groups, a shared body with personal heads can.
    fedrep, fedavg = _simulator(FedRep(head_epochs=3), rounds=8), _simulator(FedAvg(), rounds=8)
    fedrep.run(), fedavg.run()
    assert fedrep.history.mean("test")[-1] > 0.8     # 0.94 measured
    assert fedavg.history.mean("test")[-1] < 0.6     # 0.5: chance
