"""The history of a run (best round, per-client best, state) and client sampling."""
import math

import pytest
import torch

from pyg_fedgraph.engine.history import History, RoundRecord
from pyg_fedgraph.engine.rounds import sample_clients


def test_sample_clients():
    gen = torch.Generator().manual_seed(0)
    candidates = torch.tensor([2, 3, 5, 7, 11, 13, 17, 19, 23, 29])
    seen = set()
    for _ in range(20):
        pick = sample_clients(candidates, 0.3, gen)
        assert pick.numel() == 3
        assert torch.equal(pick, pick.sort().values)
        assert len(set(pick.tolist())) == 3
        assert set(pick.tolist()) <= set(candidates.tolist())
        seen.add(tuple(pick.tolist()))
    assert len(seen) > 1
    assert torch.equal(sample_clients(candidates, 1.0, gen), candidates)
    assert sample_clients(candidates, 0.01, gen).numel() == 1



# ------------------------------------------------------------------- History
def record(rnd: int, val, test, metric: str = "accuracy") -> RoundRecord:
    return RoundRecord(rnd, 0.1 * rnd, {metric: torch.tensor(val)}, {metric: torch.tensor(test)},
                       1.0, 3)


NAN = math.nan
RECORDS = [
    record(1, [0.5, 0.5, 0.5], [0.125, 0.125, 0.125]),
    record(2, [0.75, 0.75, NAN], [0.25, 0.25, 0.25]),   # per-client NaN ignored: mean 0.75
    record(3, [NAN, NAN, NAN], [1.0, 1.0, 1.0]),        # no validation value: never best
    record(4, [0.75, 0.75, 0.75], [0.5, 0.5, 0.5]),     # ties with round 2: earliest wins
    record(5, [0.625, 0.625, 0.625], [0.625, 0.625, 0.625]),
]


def test_history_best_round_higher_is_better():
    h = History("accuracy", higher_is_better=True)
    for r in RECORDS:
        h.append(r)
    assert h.mean("val")[:2] == [0.5, 0.75] and math.isnan(h.mean("val")[2])
    assert h.best_index == 1
    assert h.best_round == 2
    assert h.test_at_best() == 0.25
    assert h.summary() == {"metric": "accuracy", "higher_is_better": True, "test": 0.25,
                           "test_final": 0.625, "val_best": 0.75, "best_round": 2, "rounds": 5}
    assert h.rounds == [1, 2, 3, 4, 5]
    assert len(h.round_rows()) == 5 and h.round_rows()[1]["val_accuracy"] == 0.75
    rows = h.client_rows()
    assert len(rows) == 3
    assert rows[0]["test_accuracy_best"] == 0.25 and rows[0]["test_accuracy_final"] == 0.625
    assert math.isnan(rows[2]["val_accuracy_best"])


def test_history_best_round_lower_is_better():
    h = History("accuracy", higher_is_better=False)
    for r in RECORDS:
        h.append(r)
    assert h.best_index == 0  # 0.5 is the smallest; the all-NaN round 3 does not win
    assert h.test_at_best() == 0.125
    only_nan = History("accuracy", higher_is_better=False)
    only_nan.append(RECORDS[2])
    only_nan.append(RECORDS[4])
    assert only_nan.best_round == 5


def test_history_eval_clients_restrict_the_mean():
    recs = [record(1, [0.5, 0.5, 1.0], [0.0, 0.0, 0.0]),
            record(2, [0.75, 0.75, 0.0], [1.0, 1.0, 1.0])]
    everyone = History("accuracy", True)
    benign = History("accuracy", True, eval_clients=torch.tensor([0, 1]))
    for r in recs:
        everyone.append(r)
        benign.append(r)
    assert everyone.best_round == 1   # mean 0.667 vs 0.5
    assert benign.best_round == 2     # mean 0.5 vs 0.75 without client 2


def test_history_per_client_best_by_hand():
    h = History("accuracy", higher_is_better=True)
    for r in RECORDS:
        h.append(r)
    # Clients 0 and 1 peak at rounds 2 and 4 (0.75): the earliest, round 2, test 0.25.
    # Client 2 has NaN in rounds 2-3 and peaks at round 4: test 0.5.
    assert h.per_client_best_index().tolist() == [1, 1, 3]
    assert h.test_at_best(protocol="per-client-best") == pytest.approx(1.0 / 3.0)
    s = h.summary("per-client-best")
    assert s == {"metric": "accuracy", "higher_is_better": True, "test": pytest.approx(1 / 3),
                 "test_final": 0.625, "val_best": 0.75, "best_round": None,
                 "protocol": "per-client-best", "ties": "earliest", "rounds": 5}
    # The latest tie: clients 0 and 1 take round 4 (test 0.5), client 2 too.
    assert h.per_client_best_index("latest").tolist() == [3, 3, 3]
    assert h.test_at_best(protocol="per-client-best", ties="latest") == 0.5
    assert h.summary("per-client-best", ties="latest")["test"] == 0.5
    assert h.summary() == h.summary("best-round")
    low = History("accuracy", higher_is_better=False)
    for r in RECORDS:
        low.append(r)
    assert low.per_client_best_index().tolist() == [0, 0, 0]
    assert low.test_at_best(protocol="per-client-best") == 0.125


def test_history_per_client_best_differs_from_best_round():
    recs = [record(1, [0.875, 0.125, NAN], [0.75, 0.25, 1.0]),
            record(2, [0.25, 0.75, NAN], [0.375, 0.625, 1.0])]
    h = History("accuracy", True)
    benign = History("accuracy", True, eval_clients=torch.tensor([1, 2]))
    for r in recs:
        h.append(r)
        benign.append(r)
    # One round for everyone: round 1 (mean val 0.5 vs 0.5, earliest wins).
    assert h.test_at_best() == pytest.approx((0.75 + 0.25 + 1.0) / 3)
    # Each client its own round; client 2 never has a validation value and is left out.
    assert h.per_client_best_index().tolist() == [0, 1, -1]
    assert h.test_at_best(protocol="per-client-best") == (0.75 + 0.625) / 2
    assert benign.test_at_best(protocol="per-client-best") == 0.625
    with pytest.raises(ValueError, match="unknown protocol 'best'"):
        h.summary("best")


def test_history_empty_equality_and_state_dict():
    h = History("accuracy", True)
    assert h.summary() == {"metric": "accuracy", "rounds": 0}
    with pytest.raises(ValueError, match="the history is empty"):
        _ = h.best_index
    for r in RECORDS:
        h.append(r)
    copy = History("mse", False)
    copy.load_state_dict(h.state_dict())
    assert copy == h and copy.metric == "accuracy" and copy.higher_is_better
    other = History("accuracy", True)
    for r in RECORDS[:-1]:
        other.append(r)
    assert other != h
    other.append(record(5, [0.625, 0.625, 0.5], [0.625, 0.625, 0.625]))
    assert other != h
