r"""The tie rule of ``History``'s ``"per-client-best"`` protocol and its warning (issue 39,
item 11): pFedGraph's ``test.py`` replaces a client's kept test accuracy only when its
validation accuracy is strictly higher than its best so far, i.e. keeps the earliest tie."""
import logging
import math

import pytest
import torch

from pyg_fedgraph.engine import TIE_WARNING_SHARE, History, RoundRecord


def _history(val, test, eval_clients=None) -> History:
    r"""A history of ``val`` and ``test`` :math:`(R, N)`."""
    h = History("accuracy", higher_is_better=True, eval_clients=eval_clients)
    for r, (v, t) in enumerate(zip(val, test, strict=True)):
        h.append(RoundRecord(r + 1, 0.0, {"accuracy": torch.tensor(v)},
                             {"accuracy": torch.tensor(t)}, 1.0, len(v)))
    return h


def _authors_rule(val: torch.Tensor, test: torch.Tensor, strict: bool) -> torch.Tensor:
    r"""The loop of pFedGraph's ``test.py`` (written here from its description): each
    client keeps the test value of the round whose validation value beats its best so far,
    ``>`` there (``strict``), ``>=`` for the other rule. Starts below any value."""
    kept = torch.full((val.size(1),), math.nan, dtype=torch.double)
    best = torch.full((val.size(1),), -math.inf, dtype=torch.double)
    for r in range(val.size(0)):
        for i in range(val.size(1)):
            v = float(val[r, i])
            if v > best[i] or (not strict and v == best[i]):
                best[i], kept[i] = v, float(test[r, i])
    return kept


def test_earliest_tie_is_the_authors_strict_rule_and_latest_the_other():
    gen = torch.Generator().manual_seed(0)
    # 2 validation samples per client: values in {0, 0.5, 1}, ties everywhere.
    val = torch.randint(0, 3, (12, 40), generator=gen).float() / 2
    test = torch.rand(12, 40, generator=gen)  # float32, as records hold them
    h = _history(val.tolist(), test.tolist())
    assert torch.equal(h._per_client_best("test", ties="earliest"),
                       _authors_rule(val, test, strict=True))
    assert torch.equal(h._per_client_best("test", ties="latest"),
                       _authors_rule(val, test, strict=False))
    assert h.test_at_best(protocol="per-client-best") == pytest.approx(
        float(_authors_rule(val, test, strict=True).mean()))


def test_ties_by_hand_and_a_bad_rule():
    # Client 0 reaches 1.0 at rounds 2, 3 and 4; client 1 only at round 3.
    h = _history([[0.5, 0.5], [1.0, 0.5], [1.0, 1.0], [1.0, 0.5]],
                 [[0.1, 0.0], [0.2, 0.0], [0.6, 0.7], [0.9, 0.0]])
    assert h.per_client_best_index().tolist() == [1, 2]
    assert h.per_client_best_index("latest").tolist() == [3, 2]
    assert h.test_at_best(protocol="per-client-best") == pytest.approx((0.2 + 0.7) / 2)
    assert h.test_at_best(protocol="per-client-best", ties="latest") == pytest.approx(0.8)
    with pytest.raises(ValueError, match="unknown ties 'last'"):
        h.per_client_best_index("last")


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            and "per-client-best" in r.getMessage()]


def test_a_warning_with_both_values_when_ties_decide_many_clients(caplog):
    # Every client is at 1.0 from round 1 on; the test accuracy rises afterwards.
    val = [[1.0] * 5] * 4
    test = [[0.2] * 5, [0.4] * 5, [0.6] * 5, [0.8] * 5]
    h = _history(val, test)
    with caplog.at_level(logging.WARNING, logger="pyg_fedgraph.engine.history"):
        assert h.test_at_best(protocol="per-client-best") == pytest.approx(0.2)
        h.summary("per-client-best")  # the same state: no second warning
    (message,) = _warnings(caplog)
    assert message.startswith("per-client-best: 5 of 5 clients reach their best validation "
                              "accuracy in several rounds (a median of 4 of 4 evaluated "
                              "rounds)")
    assert "test 0.2000; the latest would give 0.8000" in message
    h.append(RoundRecord(5, 0.0, {"accuracy": torch.ones(5)},
                         {"accuracy": torch.full((5,), 0.9)}, 1.0, 5))
    with caplog.at_level(logging.WARNING, logger="pyg_fedgraph.engine.history"):
        h.test_at_best(protocol="per-client-best")
    assert len(_warnings(caplog)) == 2  # a new state, a new warning


@pytest.mark.parametrize("tied,warned", [(1, False), (2, True)])
def test_the_warning_threshold_is_a_share_of_the_reported_clients(tied, warned, caplog):
    assert TIE_WARNING_SHARE == 0.1
    # 20 clients with a strict best at round 2, except `tied` of them, also best at round 3
    # with another test value: 1 of 20 (5%) is below the threshold, 2 of 20 (10%) not.
    val = [[0.5] * 20, [1.0] * 20, [1.0] * tied + [0.5] * (20 - tied)]
    test = [[0.1] * 20, [0.5] * 20, [0.9] * 20]
    with caplog.at_level(logging.WARNING, logger="pyg_fedgraph.engine.history"):
        _history(val, test).test_at_best(protocol="per-client-best")
    assert bool(_warnings(caplog)) == warned


def test_no_warning_when_tied_rounds_agree_or_the_protocol_is_best_round(caplog):
    # Ties everywhere, but the tied rounds give the same test values: nothing is decided.
    h = _history([[1.0, 1.0]] * 3, [[0.5, 0.25]] * 3)
    with caplog.at_level(logging.WARNING, logger="pyg_fedgraph.engine.history"):
        h.test_at_best(protocol="per-client-best")
        _history([[1.0] * 5] * 3, [[0.1] * 5, [0.5] * 5, [0.9] * 5]).test_at_best()
    assert not _warnings(caplog)


def test_clients_left_out_of_the_mean_do_not_count_for_the_warning(caplog):
    # Clients 0-1 are decided by ties, but only clients 2-9 (strict bests) are reported.
    val = [[1.0, 1.0] + [0.5] * 8, [1.0, 1.0] + [1.0] * 8]
    test = [[0.1] * 10, [0.9] * 10]
    with caplog.at_level(logging.WARNING, logger="pyg_fedgraph.engine.history"):
        _history(val, test, eval_clients=torch.arange(2, 10)).test_at_best(
            protocol="per-client-best")
    assert not _warnings(caplog)
