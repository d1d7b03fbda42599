"""pyg_fedgraph.utils.timing: what is timed and what comes back (never how long)."""
from __future__ import annotations

import pytest
import torch

from pyg_fedgraph.utils import current_rss, peak_rss, time_calls, timed


def test_time_calls_warms_up_once_and_returns_the_warm_ups_value():
    calls = []

    def fn():
        calls.append(len(calls))
        return len(calls)

    times, out = time_calls(fn, 3)
    assert calls == [0, 1, 2, 3]  # one untimed warm-up, then three timed calls
    assert out == 1 and len(times) == 3 and all(t >= 0 for t in times)
    seconds, value = timed(lambda: "x", device="cpu")
    assert value == "x" and seconds >= 0
    with pytest.raises(ValueError, match="repeats must be at least 1, got 0"):
        time_calls(fn, 0)


def test_peak_memory_is_a_high_water_mark_of_the_process():
    before = peak_rss()
    assert 0 < current_rss() <= before + 2 ** 20
    # 64 MiB touched: the peak keeps the usage of then after the tensor is freed (whether
    # the memory goes back to the system depends on the allocator's setting,
    # retain_freed_memory). Both are bytes: the peak of a process running torch is hundreds
    # of MiB. The kernel updates its counters in batches of pages, so readings may differ by
    # a few of them (1 MiB of slack).
    x = torch.ones(16 * 2 ** 20)
    during = current_rss()
    del x
    assert during > 64 * 2 ** 20
    assert peak_rss() >= max(during, before) - 2 ** 20
