"""``test_at="best"``: the test split evaluated only where the reported figures read
it, which must leave every reported figure as a full evaluation gives it."""
from __future__ import annotations

import io
import math

import pytest
import torch

from pyg_fedgraph.experiment import ExperimentConfig, build_simulator

REPORTED = ("test", "test_final", "test_per_client_best", "test_novel", "test_novel_final",
            "test_novel_per_client_best", "val_best", "best_round")


def _sim(strategy: str, test_at: str, rounds: int = 7):
    # digits over 10 clients, 2 of them held out as novel, evaluated every 2 rounds
    # (and the last one): 4 evaluated rounds.
    cfg = ExperimentConfig(dataset="digits", strategy=strategy, rounds=rounds, seed=3,
                           novel_clients=0.2,
                           overrides={"eval_every": 2, "test_at": test_at, "epochs": 1})
    return build_simulator(cfg)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("strategy", ["fedavg", "fedavg-ft", "local"])
def test_best_reports_what_every_reports_bit_for_bit(strategy):
    every, best = _sim(strategy, "every"), _sim(strategy, "best")
    every.run()
    best.run()
    a, b = every.summary(), best.summary()
    for key in REPORTED:
        assert _same(a[key], b[key]), (key, a[key], b[key])
    # The records: the validation the same everywhere; the test at the best round and
    # at each client's own best round the same, NaN elsewhere but at the last round.
    he, hb = every.history, best.history
    for re_, rb in zip(he.records, hb.records, strict=True):
        assert all(torch.equal(re_.val[k], rb.val[k]) for k in re_.val)
    bi = he.best_index
    assert bi == hb.best_index
    assert all(torch.equal(he.records[bi].test[k], hb.records[bi].test[k])
               for k in he.records[bi].test)
    assert all(torch.equal(he.records[-1].test[k], hb.records[-1].test[k])
               for k in he.records[-1].test)
    index = he.per_client_best_index()
    for i, j in enumerate(index.tolist()):
        assert _same(float(he.records[j].test["accuracy"][i]),
                     float(hb.records[j].test["accuracy"][i]))
    owed = torch.zeros(len(hb), he.records[0].val["accuracy"].numel(), dtype=torch.bool)
    owed[bi] = True
    owed[-1] = True
    owed[index, torch.arange(index.numel())] = True
    skipped = torch.stack([r.test["accuracy"] for r in hb.records]).isnan() & ~owed
    assert bool(skipped.any())  # something was left out, or the option did nothing
    # A round's mean test value is that of a full evaluation at the best and the last
    # round, NaN at the others (not the mean of the few clients filled in there).
    for j, (m_every, m_best) in enumerate(zip(he.mean("test"), hb.mean("test"), strict=True)):
        assert (m_best == m_every) if j in (bi, len(hb) - 1) else math.isnan(m_best)
    assert [math.isnan(row["test_accuracy"]) for row in hb.round_rows()] == [
        j not in (bi, len(hb) - 1) for j in range(len(hb))]
    assert not torch.stack([r.test["accuracy"] for r in he.records]).isnan().any()


def test_a_resumed_run_keeps_the_models_it_owes_a_test():
    full = _sim("fedavg-ft", "best")
    full.run()
    first = _sim("fedavg-ft", "best")
    first.run(4)
    state = first.state_dict()
    assert set(state["kept_for_test"]) == {"best_round", "best_params", "best_buffers",
                                           "client_round", "client_params", "client_buffers"}
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    resumed = _sim("fedavg-ft", "best")
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    resumed.run()
    assert resumed.history == full.history
    a, b = full.summary(), resumed.summary()
    assert all(_same(a[k], b[k]) for k in REPORTED)


def test_complete_test_reads_a_run_stopped_early():
    every, best = _sim("fedavg", "every"), _sim("fedavg", "best")
    every.run(4)
    best.run(4)  # rounds 2 and 4 evaluated, neither the last of the 7
    assert math.isnan(best.summary()["test"])
    best.complete_test()
    assert best.summary()["test"] == every.summary()["test"]
    assert best.history.test_at_best(protocol="per-client-best") == \
        every.history.test_at_best(protocol="per-client-best")


def test_an_unknown_choice_is_refused():
    with pytest.raises(ValueError, match="test_at"):
        _sim("fedavg", "sometimes")


def test_the_progress_line_leaves_out_a_test_value_not_evaluated():
    from pyg_fedgraph.experiment.runner import RoundProgress, Runner

    stream = io.StringIO()
    Runner(_sim("fedavg", "best", rounds=4), name="fedavg",
           progress=RoundProgress(terminal=False, interval=1e9, stream=stream)).run()
    lines = [line for line in stream.getvalue().splitlines() if "  accuracy val" in line]
    assert len(lines) == 2  # rounds 2 and 4; round 4, the last, has its test value
    assert lines[0].startswith("fedavg: round 2/4  accuracy val ") and " test " not in lines[0]
    assert lines[1].startswith("fedavg: round 4/4  accuracy val ") and " test " in lines[1]
