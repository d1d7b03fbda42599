"""kNN-Per: the kNN vote, its interpolation with the global model, and the strategy."""
import math

import pytest
import torch
from strategy_toys import two_group_dataset

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.nn import knn_vote
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, FedAvg, KNNPer, build_strategy
from pyg_fedgraph.train import ClientTrainer, LocalConfig
from pyg_fedgraph.train import knn as knn_module
from pyg_fedgraph.train.jobs import ClientStart, evaluate_clients
from pyg_fedgraph.train.knn import KNNInterpolation, output_layer

LOCAL = LocalConfig(lr=0.2, batch_size=8, epochs=2)


def _simulator(strategy, rounds=3, seed=0):
    torch.manual_seed(seed)
    return Simulator(two_group_dataset(), MLP(2, 8, 2, num_layers=2), strategy, rounds=rounds,
                     local=LOCAL, seed=seed)


def test_knn_vote_by_hand():
    keys = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 3.0], [5.0, 5.0]],
                         [[2.0, 2.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
                         [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])
    labels = torch.tensor([[0, 1, 1, 0], [2, 0, 0, 0], [0, 0, 0, 0]])
    values = torch.nn.functional.one_hot(labels, 3).float()
    num_keys = torch.tensor([4, 1, 0])  # client 1 has fewer keys than k, client 2 none
    query = torch.tensor([[[0.2, 0.0]], [[0.0, 0.0]], [[1.0, 1.0]]])
    vote, has_keys = knn_vote(query, keys, values, num_keys, k=2, scale=0.5)
    # Client 0: neighbours key 0 (d^2 = 0.04) and key 1 (d^2 = 0.64); E * scale = 1.
    w0, w1 = math.exp(-0.04), math.exp(-0.64)
    torch.testing.assert_close(vote[0, 0], torch.tensor([w0, w1, 0.0]) / (w0 + w1))
    torch.testing.assert_close(vote[1, 0], torch.tensor([0.0, 0.0, 1.0]))  # its only key
    assert vote[2].abs().sum() == 0 and has_keys.tolist() == [True, True, False]
    # One client at a time gives the same votes (batched == loop over clients).
    for i in range(3):
        one, _ = knn_vote(query[i:i + 1], keys[i:i + 1], values[i:i + 1], num_keys[i:i + 1],
                          k=2, scale=0.5)
        torch.testing.assert_close(one[0], vote[i])
    # Far keys do not underflow to 0/0: the ratio of their weights is kept.
    far, _ = knn_vote(query[:1] + 100.0, keys[:1], values[:1], num_keys[:1], k=4)
    assert bool(torch.isfinite(far).all()) and float(far.sum()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="k must be >= 1"):
        knn_vote(query, keys, values, num_keys, k=0)


def _identity_embedding_model():
    # lins[0] is the identity, so on positive inputs the embedding (the input of
    # lins[1], the output layer) is the input itself.
    model = MLP(2, 2, 2, num_layers=2)
    with torch.no_grad():
        model.lins[0].weight.copy_(torch.eye(2))
        model.lins[0].bias.zero_()
        model.lins[1].weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))
        model.lins[1].bias.zero_()
    return model


def _hand_made_data():
    train_x = [torch.tensor([[1.0, 1.0], [1.2, 1.0], [3.0, 3.0], [3.0, 3.5]]),
               torch.tensor([[1.0, 1.0], [2.0, 2.0], [2.1, 2.0]])]
    train_y = [torch.tensor([0, 0, 1, 1]), torch.tensor([1, 0, 0])]
    test_x = [torch.tensor([[1.1, 1.1], [2.9, 3.1], [2.0, 2.2]]),
              torch.tensor([[1.0, 1.2], [2.05, 2.0], [1.1, 0.9]])]
    test_y = [torch.tensor([0, 1, 1]), torch.tensor([1, 0, 1])]
    splits = {"train": ClientSplit.from_lists(train_x, train_y),
              "val": ClientSplit.from_lists(test_x, test_y),
              "test": ClientSplit.from_lists(test_x, test_y)}
    return FederatedDataset("hand", "classification", splits, num_classes=2), train_x, train_y, \
        test_x, test_y


def test_lambda_one_is_the_knn_vote_on_a_hand_made_datastore():
    data, train_x, train_y, test_x, test_y = _hand_made_data()
    model = _identity_embedding_model()
    trainer = ClientTrainer(model, data, config=LOCAL)
    params = trainer.layout.flatten(model).expand(2, -1).clone()
    start = ClientStart(torch.arange(2), torch.arange(2), params, torch.zeros(2, 0))
    k, scale = 2, 0.25
    metrics = evaluate_clients(trainer, start, splits=("test",),
                               evaluator=KNNInterpolation(lam=1.0, k=k, scale=scale))["test"]
    for i in range(2):  # by hand: sort the datastore by distance, weigh the k nearest
        correct, nll = 0.0, 0.0
        for q, y in zip(test_x[i], test_y[i], strict=True):
            d2 = ((train_x[i] - q) ** 2).sum(1).tolist()
            nearest = sorted(range(len(d2)), key=d2.__getitem__)[:k]
            score = [0.0, 0.0]
            for j in nearest:
                score[int(train_y[i][j])] += math.exp(-d2[j] / (2 * scale))
            p = [v / sum(score) for v in score]
            correct += float(p.index(max(p)) == int(y))
            nll += -math.log(p[int(y)]) if p[int(y)] > 0 else math.inf
        assert float(metrics["accuracy"][i]) == pytest.approx(correct / len(test_y[i]))
        assert float(metrics["loss"][i]) == pytest.approx(nll / len(test_y[i]), rel=1e-5)
    # The model alone gets client 1's third sample wrong, the vote gets it right.
    plain = evaluate_clients(trainer, start, splits=("test",))["test"]
    assert plain["accuracy"].tolist() == pytest.approx([1.0, 2 / 3])
    assert metrics["accuracy"].tolist() == [1.0, 1.0]


def test_interpolation_in_between_and_chunks(monkeypatch):
    data, *_ = _hand_made_data()
    model = _identity_embedding_model()
    trainer = ClientTrainer(model, data, config=LOCAL)
    params = trainer.layout.flatten(model).expand(2, -1).clone()
    start = ClientStart(torch.arange(2), torch.arange(2), params, torch.zeros(2, 0))
    evaluator = KNNInterpolation(lam=0.3, k=2)
    full = evaluate_clients(trainer, start, evaluator=evaluator)
    # p = 0.3 p_knn + 0.7 softmax(z), by hand for client 1's first test sample.
    xb, _ = data.batch("test", torch.tensor([[0]]), torch.tensor([1]))
    logits, emb = knn_module.embed(trainer, params[1:], trainer._buffer_dict(torch.zeros(1, 0)),
                                   xb)
    torch.testing.assert_close(emb[0, 0], xb[0, 0])  # the identity embedding
    vote, has = knn_vote(emb, torch.tensor([[[1.0, 1.0], [2.0, 2.0], [2.1, 2.0]]]),
                         torch.eye(2)[[1, 0, 0]].unsqueeze(0), torch.tensor([3]), k=2)
    mixed = evaluator.mix(logits, vote, has).exp()
    torch.testing.assert_close(mixed, 0.3 * vote + 0.7 * logits.softmax(-1))
    # Tiny chunks of clients and queries give the same metrics.
    monkeypatch.setattr(knn_module, "MAX_ELEMENTS", 4)
    chunked = evaluate_clients(trainer, start, evaluator=evaluator)
    for split in ("val", "test"):
        for name in full[split]:
            torch.testing.assert_close(chunked[split][name], full[split][name])


def test_lambda_zero_is_fedavg():
    knn = _simulator(KNNPer(lam=0.0))
    fedavg = _simulator(FedAvg())
    knn.run(), fedavg.run()
    torch.testing.assert_close(knn.strategy.global_params, fedavg.strategy.global_params,
                               rtol=0, atol=0)
    for ours, theirs in zip(knn.history.records, fedavg.history.records, strict=True):
        for split in ("val", "test"):
            a, b = getattr(ours, split), getattr(theirs, split)
            assert torch.equal(a["accuracy"], b["accuracy"])
            torch.testing.assert_close(a["loss"], b["loss"], atol=1e-6, rtol=0)


def test_the_vote_personalizes_a_shared_model():
    # Two groups with opposite label maps: one global model cannot serve both,
    # each client's own datastore can.
    knn = _simulator(KNNPer(lam=0.5, k=5), rounds=4)
    fedavg = _simulator(FedAvg(), rounds=4)
    knn.run(), fedavg.run()
    assert knn.summary()["test"] > fedavg.summary()["test"] + 0.2


def test_options_and_errors():
    assert STRATEGIES["knn-per"] is KNNPer
    assert build_strategy("knn-per").hparams() == {"lam": 0.5, "k": 10, "scale": 1.0}
    with pytest.raises(ValueError, match="lam must be <= 1"):
        KNNPer(lam=1.5)
    with pytest.raises(ValueError, match="lam must lie in"):
        KNNInterpolation(lam=-0.1)
    with pytest.raises(ValueError, match="needs a classification task"):
        regression = FederatedDataset("r", "regression", {
            s: ClientSplit.from_lists([torch.randn(4, 2)], [torch.randn(4, 1)])
            for s in ("train", "val", "test")})
        Simulator(regression, MLP(2, 4, 1), KNNPer(), rounds=1)
    with pytest.raises(ValueError, match="output layer, a torch.nn.Linear"):
        output_layer(torch.nn.Sequential(torch.nn.ReLU()))
