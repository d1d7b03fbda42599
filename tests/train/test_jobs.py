"""Client work as declared data: plans, jobs and regularizers, carried out by run_plan
and evaluate_clients for a batch of clients."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.jobs import (
    JOBS,
    ChooseModel,
    ClientStart,
    EvaluatePlan,
    FineTune,
    LossGradient,
    PersonalTraining,
    SharedBody,
    TrainPlan,
    evaluate_clients,
    finetuned,
    run_plan,
)
from pyg_fedgraph.train.regularizers import REGULARIZERS, ProximalTerm
from pyg_fedgraph.train.rules import SGD
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.utils.seeds import derive_seeds

S = 3


def trainer() -> ClientTrainer:
    gen = torch.Generator().manual_seed(0)
    splits = {}
    for split, m in (("train", 6), ("val", 4), ("test", 4)):
        xs = [torch.randn(m, 2, generator=gen) + i for i in range(S)]
        ys = [torch.arange(m) % 2 for _ in range(S)]
        splits[split] = ClientSplit.from_lists(xs, ys)
    data = FederatedDataset("toy", "classification", splits, num_classes=2)
    torch.manual_seed(0)
    return ClientTrainer(nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2)), data,
                         config=LocalConfig(lr=0.1, batch_size=3, epochs=1))


def start(t: ClientTrainer, shift: float = 0.0) -> ClientStart:
    flat = t.layout.flatten(t.model).repeat(S, 1) + shift
    rows = torch.arange(S)
    return ClientStart(rows, rows, flat, t.initial_buffers(S), flat + 0.05)


def test_run_plan_is_the_main_training_then_the_jobs_from_the_same_start():
    t = trainer()
    begin = start(t)
    personal = begin.params + 0.2
    plan = TrainPlan(params=begin.params,
                     regularizer=ProximalTerm(begin.params, coefficient=0.5),
                     jobs=(PersonalTraining(personal), LossGradient()))
    result = run_plan(t, plan, begin, seed=4, rnd=2)
    # The main training: the trainer with the plan's regularizer, batches (4, "batches", 2, i).
    main = t.train(begin.rows, begin.params, begin.buffers, regularizer=plan.regularizer,
                   generator=derive_seeds(4, "batches", 2, ids=[0, 1, 2]))
    assert torch.equal(result.params, main.params) and torch.equal(result.start, begin.params)
    # Ditto's second training from its own start, batches (4, "personal", 2, i).
    second = t.train(begin.rows, personal, begin.buffers,
                     generator=derive_seeds(4, "personal", 2, ids=[0, 1, 2]))
    assert torch.equal(result.outputs["personal_x"], second.params)
    # pFedGAT's feedback: the validation gradient at the start.
    grad, _ = t.loss_gradient(begin.rows, begin.params, begin.buffers, "val")
    assert torch.equal(result.outputs["feedback"], grad)


def test_two_pieces_of_work_may_not_write_one_output():
    t = trainer()
    plan = TrainPlan(jobs=(LossGradient(), LossGradient("train")))
    with pytest.raises(ValueError, match="two pieces of client work write 'feedback'"):
        run_plan(t, plan, start(t), seed=0, rnd=1)


def test_choose_model_takes_each_clients_lowest_loss_candidate():
    t = trainer()
    begin = start(t)
    candidates = torch.stack([begin.params[0], begin.params[0] + 3.0])
    params, out = ChooseModel(candidates).prepare(t, begin, seed=0, rnd=1)
    losses = torch.stack([t.evaluate(begin.rows, c.expand(S, -1), begin.buffers,
                                     "train")["loss"] for c in candidates])
    assert torch.equal(out["choice"], losses.argmin(0))
    assert torch.equal(params, candidates[out["choice"]])


def test_shared_body_keeps_each_clients_head_and_trains_only_it():
    t = trainer()
    begin = start(t)
    d = t.layout.num_params
    head = torch.zeros(d, dtype=torch.bool)
    head[-10:] = True  # the last Linear(4, 2): 8 weights and 2 biases
    body = torch.full((d - 10,), 0.3)
    params, out = SharedBody(body, head, epochs=1).prepare(t, begin, seed=0, rnd=1)
    assert torch.equal(params[:, ~head], body.expand(S, -1))  # the server's body, untouched
    assert not torch.equal(params[:, head], begin.local[:, head])  # heads trained ...
    untrained, _ = SharedBody(body, head).prepare(t, begin, seed=0, rnd=1)
    assert torch.equal(untrained[:, head], begin.local[:, head])  # ... from the clients' own
    assert out["head_loss"].shape == (S,)
    with pytest.raises(ValueError, match="do not split a model"):
        SharedBody(body[:-1], head).prepare(t, begin, seed=0, rnd=1)


def test_finetune_and_evaluate_clients():
    t = trainer()
    begin = start(t)
    tuned, _ = finetuned(t, begin, FineTune(steps=2, lr=0.5), seed=1, rnd=3)
    config = FineTune(steps=2, lr=0.5).local_config(t.config)
    assert (config.steps, config.lr, config.nesterov) == (2, 0.5, False)
    want = t.train(begin.rows, begin.params, begin.buffers, config=config,
                   generator=derive_seeds(1, "finetune", 3, ids=[0, 1, 2])).params
    assert torch.equal(tuned, want)
    metrics = evaluate_clients(t, begin, finetune=FineTune(steps=2, lr=0.5), seed=1, rnd=3)
    assert torch.equal(metrics["test"]["accuracy"],
                       t.evaluate(begin.rows, tuned, begin.buffers, "test")["accuracy"])


def test_plans_restrict_to_clients_with_their_per_client_fields():
    t = trainer()
    begin = start(t)
    plan = TrainPlan(params=begin.params, regularizer=ProximalTerm(begin.params + 1.0, 0.5),
                     jobs=(PersonalTraining(begin.params * 2),), rule=SGD())
    rows = torch.tensor([2, 0])
    picked = plan.select(rows)
    assert torch.equal(picked.params, begin.params[rows])
    assert torch.equal(picked.regularizer.center, begin.params[rows] + 1.0)
    assert picked.regularizer.coefficient == 0.5
    assert torch.equal(picked.jobs[0].params, begin.params[rows] * 2)
    assert picked.rule == plan.rule
    assert EvaluatePlan(params=begin.params).select(rows).params.shape == (2, begin.params.size(1))


def test_plans_are_checked_against_the_clients():
    d = trainer().layout.num_params
    with pytest.raises(ValueError, match=rf"sent parameters of shape \(2, {d}\) to 3 clients"):
        TrainPlan(params=torch.zeros(2, d)).check(3, d)
    with pytest.raises(ValueError, match="regularizer whose references do not have one row"):
        TrainPlan(regularizer=ProximalTerm(torch.zeros(2, d))).check(3, d)
    with pytest.raises(TypeError, match="which is not a registered ClientJob"):
        TrainPlan(jobs=(object(),)).check(3, d)  # type: ignore[arg-type]


def test_registered_names():
    assert {"personal-training", "loss-gradient", "choose-model", "shared-body"} <= set(JOBS)
    assert JOBS["loss-gradient"] is LossGradient and LossGradient.kind == "loss-gradient"
    assert REGULARIZERS["proximal"] is ProximalTerm
    with pytest.raises(ValueError, match="unknown client job 'nope'; known: "):
        JOBS["nope"]
