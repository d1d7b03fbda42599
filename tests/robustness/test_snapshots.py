"""Snapshot semantics: strategies follow PyTorch (state dicts share storage,
tables updated in place); orchestrators' state_dict() are snapshots."""
import pytest
import torch
from robustness_helpers import tiny_simulator

from pyg_fedgraph.strategies import STRATEGIES


def _assert_same_state(a, b):
    assert a.history == b.history
    assert torch.equal(a.local_params, b.local_params)
    assert torch.equal(a.engine.table.params, b.engine.table.params)
    for key, value in a.strategy.state_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(b.strategy.state_dict()[key], value, rtol=0, atol=0,
                                       equal_nan=True, msg=key)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_snapshot_taken_after_round_one_still_restores_round_one(name):
    sim = tiny_simulator(name, rounds=3)
    sim.step()
    kept = sim.state_dict()          # kept in memory, as a hook or a report would
    live = sim.strategy.state_dict()  # PyTorch's rule: shares storage with the strategy
    # Every (N, D) table of the strategy is updated in place, never copied per round.
    n = sim.dataset.num_clients
    tables = {k: v.data_ptr() for k, v in live.items()
              if isinstance(v, torch.Tensor) and v.dim() == 2 and v.size(0) == n and v.numel()}
    sim.step()
    now = sim.strategy.state_dict()
    assert {k: now[k].data_ptr() for k in tables} == tables
    # The kept snapshot did not move with the live state ...
    resumed = tiny_simulator(name, rounds=3)
    resumed.load_state_dict(kept)
    assert resumed.round == 1
    resumed.step()
    # ... so restoring it and replaying round 2 reaches the same state.
    _assert_same_state(sim, resumed)
