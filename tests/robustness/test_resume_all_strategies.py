import io

import pytest
import torch
from robustness_helpers import tiny_simulator

from pyg_fedgraph.strategies import STRATEGIES

# test_checkpoint_resume.py covers the five strategies of the acceptance
# criterion over 10 rounds; this keeps every other registered one resumable.
ACCEPTANCE = {"fedavg", "pfedgraph", "fedaghn", "pfedgat", "panacea"}


@pytest.mark.parametrize("name", sorted(set(STRATEGIES) - ACCEPTANCE))
def test_every_strategy_resumes_exactly(name):
    full = tiny_simulator(name, rounds=4)
    full.run()
    first = tiny_simulator(name, rounds=4)
    first.run(2)
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    resumed = tiny_simulator(name, rounds=4)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    resumed.run()
    assert resumed.history == full.history
    assert torch.equal(resumed.local_params, full.local_params)
    for key, value in full.strategy.state_dict().items():
        if isinstance(value, torch.Tensor):
            # Exactly equal, NaN placeholders included.
            torch.testing.assert_close(resumed.strategy.state_dict()[key], value, rtol=0,
                                       atol=0, equal_nan=True, msg=key)
