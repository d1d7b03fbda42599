"""pyg_fedgraph.datasets.synthetic_windows: shapes, the wave, seeds."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_fedgraph.datasets import synthetic_windows


def test_windows_have_metr_las_shape_and_say_they_are_synthetic():
    data = synthetic_windows(3, 5, steps_in=4, steps_out=2, eval_windows=7)
    train = data.splits["train"]
    assert train.x.shape == (3, 5, 4, 2) and train.y.shape == (3, 5, 2)
    assert data.splits["test"].x.shape == (3, 7, 4, 2)
    assert data.num_samples("val").tolist() == [7, 7, 7]
    assert data.task == "regression" and data.info["synthetic"] is True
    # The second feature is the time of day, 5-minute steps: consecutive steps differ by
    # 1/288 (modulo a day).
    day = train.x[..., 1]
    assert ((day >= 0) & (day < 1)).all()
    step = torch.remainder(day[..., 1:] - day[..., :-1], 1.0)
    torch.testing.assert_close(step, torch.full_like(step, 1 / 288))
    # The target continues the input's wave: a daily sinusoid of amplitude 1/2 moves at most
    # pi / 288 per step, plus the noise (5 standard deviations of two draws of 0.05).
    jump = (train.y[..., 0] - train.x[..., -1, 0]).abs()
    assert float(jump.max()) < math.pi / 288 + 5 * 0.05 * math.sqrt(2)


def test_windows_come_from_their_seed():
    a, b = synthetic_windows(2, 3, seed=1), synthetic_windows(2, 3, seed=1)
    torch.testing.assert_close(a.splits["train"].x, b.splits["train"].x, rtol=0, atol=0)
    assert not torch.equal(a.splits["train"].y, synthetic_windows(2, 3, seed=2).splits["train"].y)
    with pytest.raises(ValueError, match="windows=0"):
        synthetic_windows(2, 0)
