import numpy as np
import pytest
import torch

pd = pytest.importorskip("pandas")

from traffic_helpers import chain_adjacency  # noqa: E402 - imported after the pandas importorskip

from pyg_fedgraph.datasets.traffic import SpeedTable, TrafficDataset, synthetic_traffic  # noqa: E402 - imported after the pandas importorskip


def test_synthetic_traffic_format_and_labels():
    adj = chain_adjacency(10)
    table = synthetic_traffic(adj, num_steps=2016, seed=1)
    assert isinstance(table, SpeedTable) and table.speed.shape == (2016, 10)
    assert table.sensor_ids == [str(i) for i in range(10)] and table.speed.dtype == np.float32
    assert table.timestamps[0] == np.datetime64("2012-03-01T00:00", "ns")
    assert (np.diff(table.timestamps) == np.timedelta64(5, "m")).all()
    assert table.info["synthetic"] is True and table.info["seed"] == 1
    zeros = float((table.speed == 0).mean())
    assert 0.01 < zeros < 0.15
    assert np.array_equal(table.speed, synthetic_traffic(adj, num_steps=2016, seed=1).speed)
    assert not np.array_equal(table.speed, synthetic_traffic(adj, num_steps=2016, seed=2).speed)
    # Neighbouring sensors move together more than distant ones.
    v = table.speed[~(table.speed == 0).any(1)]
    c = np.corrcoef(v.T)
    near = np.mean([c[i, i + 1] for i in range(9)])
    far = np.mean([c[i, i + 7] for i in range(3)])
    assert near > far
    ds = TrafficDataset.from_table(table, "chain", adj=adj)
    assert ds.info["synthetic"] is True and "synthetic" in repr(ds)
    # The DataFrame round trip gives the same dataset, labels included.
    df = table.to_dataframe()
    assert isinstance(df.index, pd.DatetimeIndex) and df.attrs["synthetic"] is True
    ds2 = TrafficDataset.from_dataframe(df, "chain", adj=adj)
    assert ds2.info["synthetic"] is True
    assert torch.equal(ds.splits["test"].y, ds2.splits["test"].y)
    assert torch.equal(ds.splits["train"].x, ds2.splits["train"].x)
