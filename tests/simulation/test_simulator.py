
import pytest
import torch

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.fedavg import FedAvg, FedAvgFT, Local, weighted_average
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.utils.seeds import make_generator

TRAIN_COUNTS = (10, 6, 15, 4, 8, 12)
CFG = LocalConfig(lr=0.1, momentum=0.9, batch_size=5, epochs=2)


def opposite_groups(train_counts=TRAIN_COUNTS, seed: int = 0, shift_client=None
                    ) -> FederatedDataset:
    r"""Even clients label ``x_0 > 0`` as 1, odd clients the opposite: one global
    model cannot fit both groups, a personalized one can."""
    gen = torch.Generator().manual_seed(seed)
    splits = {}
    for name, counts in (("train", train_counts), ("val", [10] * len(train_counts)),
                         ("test", [10] * len(train_counts))):
        xs, ys = [], []
        for c, k in enumerate(counts):
            x = torch.randn(k, 2, generator=gen)
            x[:, 0] += x[:, 0].sign()  # a margin around the decision boundary x_0 = 0
            y = (x[:, 0] > 0).long()
            if name == "train" and c == shift_client:
                x = x + 0.5  # other values, same counts (the batch order is unchanged)
            xs.append(x)
            ys.append(y if c % 2 == 0 else 1 - y)
        splits[name] = ClientSplit.from_lists(xs, ys)
    return FederatedDataset("opposite", "classification", splits, num_classes=2)


def make_model() -> MLP:
    torch.manual_seed(0)
    return MLP(2, 8, 2)


def simulate(strategy, data=None, **kwargs) -> Simulator:
    kwargs = {"rounds": 2, "local": CFG, **kwargs}
    return Simulator(data if data is not None else opposite_groups(), make_model(), strategy,
                     **kwargs)


def count_trainings(sim: Simulator) -> list:
    r"""A list that grows by one at each call of ``sim``'s trainer's ``train``
    (local training and fine-tuning alike)."""
    calls: list = []
    train = sim.trainer.train
    sim.trainer.train = lambda *a, **k: calls.append(1) or train(*a, **k)
    return calls


# ------------------------------------------------------------- reproducibility
def test_seeds_reproduce_histories():
    runs = []
    for seed in (0, 0, 1):
        sim = simulate(FedAvg(), seed=seed, sample_fraction=0.5)
        sim.run()
        runs.append(sim)
    a, b, c = runs
    assert len(a.history) == 2
    assert a.history == b.history
    for ra, rb in zip(a.history.records, b.history.records, strict=True):
        for split in ("val", "test"):
            for k in ra.test:
                assert torch.equal(getattr(ra, split)[k], getattr(rb, split)[k])
    assert torch.equal(a.local_params, b.local_params)
    assert torch.equal(a.strategy.global_params, b.strategy.global_params)
    assert a.history != c.history
    assert not torch.equal(a.strategy.global_params, c.strategy.global_params)


def test_run_can_be_continued():
    whole = simulate(FedAvg(), rounds=3)
    whole.run()
    parts = simulate(FedAvg(), rounds=3)
    parts.run(2)
    assert parts.round == 2 and len(parts.history) == 2
    parts.run()
    assert parts.history == whole.history
    assert torch.equal(parts.strategy.global_params, whole.strategy.global_params)


# ------------------------------------------------------- agreement with hand runs
def test_fedavg_full_participation_equals_hand_run():
    data = opposite_groups()
    sim = simulate(FedAvg(), data=data, rounds=3)
    sim.run()

    model = make_model()
    trainer = ClientTrainer(model, data, config=CFG)
    n = data.num_clients
    everyone = torch.arange(n)
    global_params = trainer.layout.flatten(model)
    for rnd in (1, 2, 3):
        # Client i's batch order in round t comes from the stream (seed, "batches", t, i).
        gens = [make_generator(0, "batches", rnd, i) for i in range(n)]
        res = trainer.train(everyone, global_params.expand(n, -1).clone(), generator=gens)
        global_params = weighted_average(res.params, data.num_samples("train"))
    assert torch.allclose(sim.strategy.global_params, global_params, atol=1e-6)
    assert torch.allclose(sim.local_params, res.params, atol=1e-6)
    # Weighted by the sample counts: the plain mean would differ.
    assert not torch.allclose(res.params.mean(0), global_params, atol=1e-4)
    test = trainer.evaluate(everyone, global_params.expand(n, -1).clone(), split="test")
    last = sim.history.records[-1]
    assert torch.allclose(last.test["accuracy"], test["accuracy"])
    assert last.num_sampled == n
    assert last.train_loss == pytest.approx(float(res.loss.mean()), abs=1e-6)


def test_parallel_and_loop_simulations_agree():
    fast = simulate(FedAvg(), rounds=1, parallel=True)
    fast.run()
    slow = simulate(FedAvg(), rounds=1, parallel=False)
    slow.run()
    assert torch.allclose(fast.strategy.global_params, slow.strategy.global_params, atol=1e-5)


def test_local_equals_independent_training():
    data = opposite_groups()
    sim = simulate(Local(), data=data, rounds=3)
    sim.run()
    model = make_model()
    trainer = ClientTrainer(model, data, config=CFG)
    n = data.num_clients
    local = trainer.layout.flatten(model).repeat(n, 1)
    for rnd in (1, 2, 3):  # every client continues from its own model
        gens = [make_generator(0, "batches", rnd, i) for i in range(n)]
        local = trainer.train(torch.arange(n), local, generator=gens).params
    assert torch.allclose(sim.local_params, local, atol=1e-6)


def test_local_never_mixes_clients():
    base = simulate(Local(), rounds=2)
    base.run()
    # Changing client 1's training data changes client 1's model only.
    other = simulate(Local(), data=opposite_groups(shift_client=1), rounds=2)
    other.run()
    changed = [not torch.equal(a, b)
               for a, b in zip(base.local_params, other.local_params, strict=True)]
    assert changed == [False, True, False, False, False, False]


def test_fedavg_ft_beats_fedavg_on_opposite_groups():
    # One evaluation (round 2) keeps the fine-tuning cost down.
    fedavg = simulate(FedAvg(), eval_every=2)
    fedavg.run()
    ft = simulate(FedAvgFT(finetune_epochs=8), eval_every=2)
    ft.run()
    assert fedavg.summary()["test"] < 0.6  # the global model cannot serve both groups
    assert ft.summary()["test"] > fedavg.summary()["test"] + 0.25
    # Fine-tuning is for evaluation only: the federation trained the same global model.
    assert torch.equal(ft.strategy.global_params, fedavg.strategy.global_params)


def test_fedavg_ft_from_local_evaluates_the_last_local_models():
    fedavg = simulate(FedAvg())
    fedavg.run()
    ft = simulate(FedAvgFT(finetune_from="local"))
    ft.run()
    assert ft.strategy.finetune_job() is None
    params, _ = ft.personalized_models()
    # Each client's model right after its last local training (from the global model of
    # round 2), with no extra training, while the federation trains FedAvg's global model.
    assert torch.equal(params, fedavg.local_params)
    assert torch.equal(ft.strategy.global_params, fedavg.strategy.global_params)
    assert not torch.equal(params[0], ft.strategy.global_params)
    assert ft.summary()["test"] > fedavg.summary()["test"] + 0.1


@pytest.mark.parametrize("test_at", ["every", "best"])
def test_a_round_callback_gets_the_models_the_round_evaluated(test_at):
    # FedAvg-FT fine-tunes every client to evaluate it, with dropout masks from the
    # global stream: models built again would differ from those the round evaluated.
    torch.manual_seed(0)
    model = MLP(2, 8, 2, dropout=0.5)
    sim = Simulator(opposite_groups(), model, FedAvgFT(finetune_epochs=2), rounds=3,
                    local=CFG, test_at=test_at)
    trainings = count_trainings(sim)
    seen = []

    def callback(s, record):
        before = len(trainings)
        params, buffers = s.personalized_models()
        assert len(trainings) == before             # not fine-tuned a second time
        everyone = torch.arange(s.dataset.num_clients)
        val = s.trainer.evaluate(everyone, params, buffers, "val")
        assert torch.equal(val["loss"], record.val["loss"])
        seen.append(record.round)
    sim.callbacks.append(callback)
    sim.run()
    assert seen == [1, 2, 3]
    # Outside a callback the models are built again: fine-tuned anew, other masks.
    before = len(trainings)
    again, buffers = sim.personalized_models()
    assert len(trainings) == before + 1
    everyone = torch.arange(sim.dataset.num_clients)
    assert not torch.equal(sim.trainer.evaluate(everyone, again, buffers, "val")["loss"],
                           sim.history.records[-1].val["loss"])


def test_the_round_models_a_callback_gets_are_copies_and_go_with_the_round():
    # Local evaluates the clients' own models (no fine-tuning): the round's models are the
    # run's local models themselves, and a callback gets copies.
    def zero(s, record):
        s.personalized_models()[0].zero_()
    touched = simulate(Local(), callbacks=[zero])
    touched.run()
    plain = simulate(Local())
    plain.run()
    assert touched.history == plain.history
    assert torch.equal(touched.local_params, plain.local_params)
    # A callback that fails: the round's models are dropped with it, and models asked for
    # later are built again (FedAvg-FT fine-tunes anew).
    def fail(s, record):
        raise RuntimeError("callback failed")
    sim = simulate(FedAvgFT(finetune_epochs=1), callbacks=[fail])
    with pytest.raises(RuntimeError, match="callback failed"):
        sim.step()
    trainings = count_trainings(sim)
    sim.personalized_models()
    assert trainings == [1]


def test_a_runners_callbacks_get_the_models_the_round_evaluated():
    from pyg_fedgraph.experiment.runner import Runner

    sim = simulate(FedAvgFT(finetune_epochs=1), rounds=3)
    trainings = count_trainings(sim)
    counts = []

    def callback(s, record):
        before = len(trainings)
        s.personalized_models()
        counts.append(len(trainings) - before)
    Runner(sim, callbacks={"probe": callback}).run()
    assert counts == [0, 0, 0]
    # 3 rounds of training and 3 evaluations' fine-tuning: nothing trained twice.
    assert len(trainings) == 6


def test_finetuned_models_leave_the_run_as_it_was():
    from pyg_fedgraph.train.jobs import FineTune

    # Dropout masks come from the global stream, which fine-tuning draws from.
    def run(between):
        torch.manual_seed(0)
        sim = Simulator(opposite_groups(), MLP(2, 8, 2, dropout=0.5), FedAvg(), rounds=3,
                        local=CFG)
        sim.run(2)
        between(sim)
        sim.run()
        return sim
    tuned = run(lambda sim: sim.finetuned_models(FineTune(steps=3)))
    plain = run(lambda sim: None)
    assert tuned.history == plain.history
    assert torch.equal(tuned.local_params, plain.local_params)


# ------------------------------------------------------ held-out and sampling
def test_held_out_clients_never_train():
    held = torch.tensor([4, 1])
    for strategy in (FedAvg(), Local()):
        sim = simulate(strategy, held_out=held)
        init = sim.local_params.clone()
        sim.run()
        assert sim.held_out.tolist() == [1, 4]
        assert sim.train_clients.tolist() == [0, 2, 3, 5]
        assert torch.equal(sim.local_params[[1, 4]], init[[1, 4]])
        assert not torch.equal(sim.local_params[[0, 2, 3, 5]], init[[0, 2, 3, 5]])
        assert all(r.num_sampled == 4 for r in sim.history.records)
        summary = sim.summary()
        best = sim.history.records[sim.history.best_index]
        assert summary["test_novel"] == pytest.approx(float(best.test["accuracy"][[1, 4]].mean()))
        assert summary["test_novel_final"] == pytest.approx(
            float(sim.history.records[-1].test["accuracy"][[1, 4]].mean()))
        # The reported test metric covers the training clients only.
        assert summary["test"] == pytest.approx(
            float(best.test["accuracy"][[0, 2, 3, 5]].mean()))
    plain = simulate(FedAvg(), rounds=1)
    plain.run()
    assert "test" in plain.summary() and "test_novel" not in plain.summary()


def test_held_out_errors():
    with pytest.raises(ValueError, match="held_out names client 6, the dataset has 6 clients"):
        simulate(FedAvg(), held_out=torch.tensor([6]))
    with pytest.raises(ValueError, match="every client is held out"):
        simulate(FedAvg(), held_out=torch.arange(6))


def test_sample_fraction_samples_the_right_number():
    sim = simulate(Local(), rounds=1, sample_fraction=0.5)
    init = sim.local_params.clone()
    sim.run()
    assert sim.history.records[0].num_sampled == 3
    trained = [not torch.equal(a, b) for a, b in zip(sim.local_params, init, strict=True)]
    assert sum(trained) == 3
    sim = simulate(FedAvg(), rounds=2, sample_fraction=0.1)  # max(1, round(0.6)) = 1
    sim.run()
    assert [r.num_sampled for r in sim.history.records] == [1, 1]


@pytest.mark.parametrize("fraction, why", [(0.0, "must be > 0"), (-0.5, "must be > 0"),
                                           (1.5, "must be <= 1")])
def test_bad_sample_fraction(fraction, why):
    # The simulator checks its settings against their declarations (SimulatorConfig), as
    # the command line does.
    with pytest.raises(ValueError, match=rf"sample_fraction {why}, got {fraction}"):
        simulate(FedAvg(), sample_fraction=fraction)


def test_other_constructor_errors():
    with pytest.raises(ValueError, match="rounds must be >= 1, got -1"):
        simulate(FedAvg(), rounds=-1)
    with pytest.raises(ValueError, match="eval_every must be >= 1"):
        simulate(FedAvg(), eval_every=0)


def test_eval_every_still_evaluates_the_last_round():
    sim = simulate(FedAvg(), rounds=5, eval_every=2, local=LocalConfig(batch_size=10, epochs=1))
    sim.run()
    assert sim.history.rounds == [2, 4, 5]
