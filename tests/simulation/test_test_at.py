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


def _scheduled(test_at: str):
    r"""Built for 4 rounds, run to 4, then extended to 10 and stopped at 8 (rounds 6 and 8
    are evaluated before the run's last round)."""
    sim = _sim("fedavg", test_at, rounds=4)
    sim.run()
    sim.rounds = 10
    sim.run(8)
    return sim


def test_a_figure_owed_a_test_value_is_nan_not_the_mean_of_the_others():
    every, best = _scheduled("every"), _scheduled("best")
    index = best.history.per_client_best_index()
    later = [r.round for r in best.history.records].index(6)
    assert bool((index >= later).any())  # some clients are at their best in round 6 or 8
    # Before complete_test every figure is the full evaluation's, or NaN where one of
    # its clients' values is owed: never the mean of the clients evaluated.
    a, s = every.summary(), best.summary()
    assert all(_same(a[k], s[k]) or math.isnan(s[k]) for k in REPORTED)
    assert math.isnan(s["test_final"]) and math.isnan(s["test_per_client_best"])
    best.complete_test()
    b = best.summary()
    # The last round (8) is not the run's last (10): evaluated only if it is a best one.
    assert all(_same(a[k], b[k]) for k in REPORTED if k != "test_final")


def test_rounds_past_the_last_are_evaluated_in_full():
    every, best = _sim("fedavg", "every", rounds=4), _sim("fedavg", "best", rounds=4)
    every.run(8)
    best.run(8)  # rounds 6 and 8 are past the last round: any may be the last
    a, b = every.summary(), best.summary()
    assert all(_same(a[k], b[k]) for k in REPORTED)


def test_a_client_without_test_samples_is_left_out_as_in_a_full_evaluation():
    from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
    from pyg_fedgraph.models.mlp import MLP
    from pyg_fedgraph.simulation.simulator import Simulator
    from pyg_fedgraph.strategies.registry import build_strategy
    from pyg_fedgraph.train.config import LocalConfig

    gen = torch.Generator().manual_seed(0)
    splits = {}
    for name, counts in (("train", (12, 12, 12, 12)), ("val", (6, 6, 6, 6)),
                         ("test", (0, 6, 6, 6))):  # client 0 has no test samples
        xs = [torch.randn(n, 3, generator=gen) for n in counts]
        splits[name] = ClientSplit.from_lists(xs, [(x[:, 0] > 0).long() for x in xs])
    data = FederatedDataset("toy", "classification", splits, num_classes=2)
    out = {}
    for test_at in ("every", "best"):
        torch.manual_seed(0)
        sim = Simulator(data, MLP(3, 4, 2, num_layers=2), build_strategy("fedavg"),
                        rounds=6, local=LocalConfig(lr=0.2, batch_size=4, epochs=1), seed=3,
                        test_at=test_at)
        sim.run()
        out[test_at] = sim
    a, b = out["every"].summary(), out["best"].summary()
    assert math.isnan(out["every"].history.records[-1].test["accuracy"][0])
    assert a["test_per_client_best"] == b["test_per_client_best"]
    assert a["test"] == b["test"]
    assert out["every"].history.test_at_best(protocol="per-client-best") == \
        out["best"].history.test_at_best(protocol="per-client-best")
