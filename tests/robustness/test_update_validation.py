import logging
import math

import pytest
import torch
from robustness_helpers import two_group_dataset

from pyg_fedgraph.attacks import Attack
from pyg_fedgraph.engine.validation import UpdateValidator, check_updates
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.fedavg import FedAvg
from pyg_fedgraph.train.config import LocalConfig

LOGGER = "pyg_fedgraph.engine.validation"


# ------------------------------------------------------------ pure function
def test_nan_and_inf_updates_are_rejected():
    x = torch.ones(4, 5)
    x[1, 2] = math.nan
    x[3, 0] = math.inf
    x[3, 4] = -math.inf
    check = check_updates(x, 5)
    assert check.keep.tolist() == [True, False, True, False]
    assert check.reasons[0] is None and check.reasons[2] is None
    assert check.reasons[1] == "non-finite values: 1 of 5 parameters are NaN or Inf"
    assert check.reasons[3] == "non-finite values: 2 of 5 parameters are NaN or Inf"
    assert check.rejected.tolist() == [1, 3]


def test_wrong_length_updates_are_rejected():
    updates = [torch.ones(5), torch.ones(4), torch.ones(2, 3), torch.zeros(5)]
    check = check_updates(updates, 5)
    assert check.keep.tolist() == [True, False, False, True]
    assert check.reasons[1] == "wrong length: sent 4 parameters, the model has 5"
    assert check.reasons[2] == "wrong length: sent 6 parameters, the model has 5"
    assert math.isnan(float(check.norm[1]))
    assert check.norm[[0, 3]].tolist() == pytest.approx([math.sqrt(5), 0.0])
    # A whole batch of the wrong width.
    batch = check_updates(torch.ones(3, 7), 5)
    assert not bool(batch.keep.any())
    assert all(r == "wrong length: sent 7 parameters, the model has 5" for r in batch.reasons)


def test_huge_norm_updates_are_rejected():
    x = torch.tensor([[3.0, 4.0], [3e6, 4e6], [1e10, 1e10]])
    check = check_updates(x, 2)
    assert check.keep.tolist() == [True, False, False]
    assert check.norm[0] == pytest.approx(5.0) and check.norm[1] == pytest.approx(5e6)
    assert check.reasons[1] == "absurd norm: update norm 5e+06 exceeds max_norm 1e+06"
    # The norm is that of the update relative to the reference (the start model).
    ref = torch.tensor([[0.0, 0.0], [3e6, 4e6], [1e10, 1e10]])
    assert check_updates(x, 2, reference=ref).keep.tolist() == [True, True, True]
    assert check_updates(x, 2, max_norm=None).keep.tolist() == [True, True, True]
    assert check_updates(x, 2, max_norm=4.0).keep.tolist() == [False, False, False]


def test_overflowing_norm_is_rejected():
    x = torch.tensor([[3e38, 3e38], [1.0, 1.0]])
    ref = torch.tensor([[-3e38, -3e38], [0.0, 0.0]])
    check = check_updates(x, 2, reference=ref, max_norm=None)
    assert check.keep.tolist() == [False, True]
    assert check.reasons[0] == "absurd norm: the update norm overflows torch.float32"


def test_every_kind_of_row_in_one_batch_against_a_reference():
    # The norm is computed first and the values searched only where it is not finite:
    # each row must still get its own reason and the others their exact norms.
    x = torch.tensor([[3.0, 4.0, 0.0],        # fine: norm 5 against zeros
                      [math.nan, 1.0, 1.0],   # NaN upload
                      [1.0, 1.0, 1.0],        # finite upload, Inf reference
                      [math.inf, 1.0, 1.0],   # Inf upload against an Inf reference
                      [3e38, 3e38, 0.0],      # finite, but the norm overflows
                      [1.0, 2.0, 2.0]])       # fine: norm 3
    ref = torch.zeros(6, 3)
    ref[2, 1] = math.inf
    ref[3, 0] = math.inf
    ref[4] = torch.tensor([-3e38, -3e38, 0.0])
    check = check_updates(x, 3, reference=ref, max_norm=None)
    assert check.keep.tolist() == [True, False, False, False, False, True]
    assert check.reasons[1] == "non-finite values: 1 of 3 parameters are NaN or Inf"
    assert check.reasons[3] == "non-finite values: 1 of 3 parameters are NaN or Inf"
    assert check.reasons[2] == check.reasons[4] == \
        "absurd norm: the update norm overflows torch.float32"
    assert check.norm[[0, 5]].tolist() == pytest.approx([5.0, 3.0])
    assert math.isnan(float(check.norm[1])) and math.isnan(float(check.norm[3]))


def test_relative_norm_bound():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.2], [0.9, 0.0], [50.0, 0.0]])
    assert bool(check_updates(x, 2).keep.all())
    check = check_updates(x, 2, max_norm_ratio=10.0)
    assert check.keep.tolist() == [True, True, True, False]
    assert "more than 10 times the median" in check.reasons[3]


def test_checks_of_the_options():
    with pytest.raises(ValueError, match="max_norm must be positive"):
        check_updates(torch.ones(1, 2), 2, max_norm=0.0)
    with pytest.raises(ValueError, match="policy must be one of"):
        UpdateValidator(2, policy="ignore")
    with pytest.raises(ValueError, match=r"\(S, D\) tensor"):
        check_updates(torch.ones(2), 2)


# ---------------------------------------------------------------- validator
def test_validator_logs_one_line_per_round_naming_each_rejection(caplog):
    x = torch.ones(3, 4)
    x[0, 0] = math.nan
    x[2] = 1e7
    validator = UpdateValidator(4)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        keep = validator(x, client_id=torch.tensor([7, 8, 9]), rnd=3)
    assert keep.tolist() == [False, True, False]
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert messages == [
        "round 3: rejected 2 of 3 update(s): client 7: non-finite values: 1 of 4 parameters "
        "are NaN or Inf; client 9: absurd norm: update norm 2e+07 exceeds max_norm 1e+06",
    ]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validator([torch.ones(4), torch.ones(3)], client_id=torch.tensor([1, 2]))
    assert caplog.records[-1].getMessage() == (
        "rejected 1 of 2 update(s): client 2: wrong length: sent 3 parameters, the model has 4")


def test_validator_stops_warning_after_a_few_rounds_but_keeps_rejecting(caplog):
    validator = UpdateValidator(2)
    bad = torch.full((5, 2), math.nan)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for rnd in range(1, 7):
            assert not validator(bad, rnd=rnd).any()
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in records] == [logging.WARNING] * 3 + [logging.INFO] * 3
    assert "further rounds with rejections are logged at INFO" in records[2].getMessage()
    # Five clients: three reasons shown, the rest counted.
    assert records[0].getMessage().endswith("; and 2 more")


def test_raise_policy_names_the_clients():
    x = torch.ones(2, 4)
    x[1, 3] = math.inf
    with pytest.raises(ValueError, match="round 2: rejected 1 update.*client 5: non-finite"):
        UpdateValidator(4, policy="raise")(x, client_id=torch.tensor([4, 5]), rnd=2)
    assert UpdateValidator(4, policy="raise")(torch.ones(2, 4)).all()


# --------------------------------------------------------------- simulation
class Spy(FedAvg):
    def __init__(self):
        super().__init__()
        self.seen = []

    def aggregate_train(self, rnd, graph):
        self.seen.append(graph.client_id.clone())
        super().aggregate_train(rnd, graph)


def simulate(attack, rounds=2, **kwargs):
    torch.manual_seed(0)
    return Simulator(two_group_dataset(), MLP(2, 8, 2), Spy(), rounds=rounds,
                     local=LocalConfig(lr=0.1, batch_size=4, steps=2),
                     attack=attack, **kwargs)


@pytest.mark.parametrize("value,reason", [(math.nan, "non-finite values"),
                                          (1e7, "absurd norm")])
def test_simulator_drops_bad_uploads(caplog, value, reason):
    sim = simulate(Attack("same-value", 0.5, value=value))
    bad = sim.malicious.tolist()
    init = sim.local_params[0].clone()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        sim.run()
    rejected = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(rejected) == 2  # one line per round naming every malicious upload
    for rnd, line in enumerate(rejected, 1):
        assert line.startswith(f"round {rnd}: rejected {len(bad)} of 6 update(s): ")
        named = [int(part.split("client ")[1].split(":")[0])
                 for part in line.split(": ", 1)[1].split("; ")]
        assert named == bad
        assert line.count(reason) == len(bad)
    for ids in sim.strategy.seen:  # the strategy never saw them
        assert set(ids.tolist()) == set(range(6)) - set(bad)
    # Rejected clients keep their previous local model (here the initial one).
    assert torch.equal(sim.local_params[bad], init.expand(len(bad), -1))
    assert bool(torch.isfinite(sim.strategy.global_params).all())
    assert [r.extra["num_rejected"] for r in sim.history.records] == [3, 3]


def test_simulator_raise_policy():
    sim = simulate(Attack("same-value", 0.5, value=math.inf), reject_policy="raise")
    first = int(sim.malicious[0])
    with pytest.raises(ValueError, match=f"round 1: rejected 3 update.*client {first}"):
        sim.run()


def test_round_with_every_upload_rejected_is_still_evaluated():
    sim = simulate(Attack("same-value", 1.0, value=math.nan))
    global_before = sim.strategy.global_params.clone()
    sim.run()
    assert sim.strategy.seen == []  # aggregation skipped
    assert torch.equal(sim.strategy.global_params, global_before)
    assert len(sim.history) == 2 and math.isnan(sim.history.records[0].train_loss)


def test_the_engine_keeps_every_rejection_evaluated_round_or_not():
    sim = simulate(Attack("same-value", 0.5, value=math.nan), rounds=5, eval_every=3)
    sim.run()
    bad = sorted(sim.malicious.tolist())
    assert len(bad) == 3
    # Every round's rejected uploads, although only rounds 3 and 5 are evaluated.
    assert [(r.round, r.client) for r in sim.rejections] == [
        (t, c) for t in range(1, 6) for c in bad]
    assert {r.reason for r in sim.rejections} == {
        f"non-finite values: {sim.engine.layout.num_params} of "
        f"{sim.engine.layout.num_params} parameters are NaN or Inf"}
    assert [r.round for r in sim.history.records] == [3, 5]
    assert [r.extra["num_rejected"] for r in sim.history.records] == [3, 3]
    assert sim.engine.rejections_from == 1


def test_rejections_resume_with_the_state_and_old_states_say_from_when():
    whole = simulate(Attack("same-value", 0.5, value=math.inf), rounds=4)
    whole.run()
    first = simulate(Attack("same-value", 0.5, value=math.inf), rounds=4)
    first.run(2)
    state = first.state_dict()
    assert [r[0] for r in state["rejections"]] == [1, 1, 1, 2, 2, 2]
    resumed = simulate(Attack("same-value", 0.5, value=math.inf), rounds=4)
    resumed.load_state_dict(state)
    resumed.run()
    assert resumed.rejections == whole.rejections
    assert resumed.engine.rejections_from == 1
    # A checkpoint written before the engine kept them: known from the next round on.
    del state["rejections"], state["rejections_from"]
    old = simulate(Attack("same-value", 0.5, value=math.inf), rounds=4)
    old.load_state_dict(state)
    old.run()
    assert old.engine.rejections_from == 3
    assert old.rejections == [r for r in whole.rejections if r.round >= 3]
