import math

import numpy as np
import pytest
import torch
from torch import nn

from pyg_fedgraph.datasets.traffic import TrafficDataset, dcrnn_split_sizes
from pyg_fedgraph.train import ClientTrainer
from pyg_fedgraph.train.traffic_metrics import add_rmse, pack_targets, traffic_objective


class ConstantForecaster(nn.Module):
    r"""Predicts the same normalized value per horizon for every window."""

    def __init__(self, out_steps):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(out_steps))
        nn.init.zeros_(self.bias)

    def forward(self, x):
        return self.bias.expand(x.size(0), -1) + 0.0 * x[:, 0, :1]


def tiny_dataset(num_steps=40, n=3, **kwargs):
    ts = np.datetime64("2012-03-01T00:00", "ns") + np.arange(num_steps) * np.timedelta64(5, "m")
    speed = 10.0 + np.arange(num_steps * n, dtype=np.float32).reshape(num_steps, n)
    return TrafficDataset("tiny", speed, ts, **kwargs), speed, ts


def test_dcrnn_split_sizes_match_panacea_table_1():
    assert dcrnn_split_sizes(34272 - 23) == (23974, 3425, 6850)    # METR-LA
    assert dcrnn_split_sizes(52116 - 23) == (36465, 5209, 10419)   # PEMS-BAY
    assert dcrnn_split_sizes(37) == (26, 4, 7)                     # round(25.9), round(7.4)
    with pytest.raises(ValueError, match="summing to 1"):
        dcrnn_split_sizes(10, (0.5, 0.1, 0.1))


def test_windows_are_the_series_shifted():
    ds, speed, ts = tiny_dataset(num_steps=40, n=3, input_steps=4, output_steps=3)
    assert ds.num_clients == 3 and ds.input_shape == (4, 2)
    # 40 - 4 - 3 + 1 = 34 windows: test round(6.8) = 7, train round(23.8) = 24, val 3.
    assert {s: c for s, (_, c) in ds.split_windows.items()} == {"train": 24, "val": 3, "test": 7}
    assert ds.num_samples("val").tolist() == [3, 3, 3]
    for split, (start, count) in ds.split_windows.items():
        sp = ds.splits[split]
        assert sp.x.shape == (3, count, 4, 2) and sp.y.shape == (3, count, 3)
        for i in range(3):
            for k in (0, count - 1):
                raw = sp.x[i, k, :, 0] * ds.std[i] + ds.mean[i]
                torch.testing.assert_close(raw, torch.tensor(speed[start + k:start + k + 4, i]))
                torch.testing.assert_close(sp.y[i, k],
                                           torch.tensor(speed[start + k + 4:start + k + 7, i]))
    # time of day: step t is t * 5 minutes after midnight.
    torch.testing.assert_close(ds.splits["train"].x[0, 2, :, 1],
                               torch.arange(2, 6, dtype=torch.float32) * 5 / 1440)


def test_column_major_input_gives_the_same_windows():
    ts = np.datetime64("2012-03-01", "ns") + np.arange(40) * np.timedelta64(5, "m")
    speed = np.random.default_rng(0).uniform(10, 60, (40, 4)).astype(np.float32)
    a = TrafficDataset("c", np.ascontiguousarray(speed), ts)
    b = TrafficDataset("f", np.asfortranarray(speed), ts)
    for split in ("train", "val", "test"):
        assert torch.equal(a.splits[split].y, b.splits[split].y)
        assert torch.equal(a.splits[split].x, b.splits[split].x)


def test_normalization_uses_training_readings_without_zeros():
    ts = np.datetime64("2012-03-01", "ns") + np.arange(30) * np.timedelta64(5, "m")
    speed = np.full((30, 2), 50.0, dtype=np.float32)
    speed[:, 1] = 30.0
    speed[0, 0], speed[1, 0] = 0.0, 70.0
    ds = TrafficDataset("n", speed, ts, input_steps=2, output_steps=2, normalization="sensor")
    # 27 windows -> train round(18.9) = 19, statistics over steps 0..19.
    assert ds.split_windows["train"] == (0, 19)
    span = speed[:20, 0][speed[:20, 0] > 0]
    assert ds.mean[0].item() == pytest.approx(span.mean())
    assert ds.std[0].item() == pytest.approx(span.std())
    assert ds.mean[1].item() == pytest.approx(30.0)
    both = speed[:20][speed[:20] > 0]
    assert ds.std[1].item() == pytest.approx(both.std())   # constant: the global std
    g = TrafficDataset("n", speed, ts, input_steps=2, output_steps=2, normalization="global")
    assert torch.allclose(g.mean, torch.full((2,), float(both.mean())))
    assert torch.allclose(g.std, torch.full((2,), float(both.std())))
    with pytest.raises(ValueError, match="normalization must be"):
        TrafficDataset("n", speed, ts, normalization="minmax")


def test_too_short_series_and_bad_input_are_rejected():
    ts = np.datetime64("2012-03-01", "ns") + np.arange(25) * np.timedelta64(5, "m")
    with pytest.raises(ValueError, match="every split needs at least one window"):
        TrafficDataset("s", np.ones((25, 2), np.float32), ts)
    with pytest.raises(ValueError, match="non-negative"):
        TrafficDataset("s", -np.ones((25, 2), np.float32), ts, input_steps=2, output_steps=2)
    with pytest.raises(ValueError, match="strictly increasing"):
        TrafficDataset("s", np.ones((25, 2), np.float32), ts[::-1], input_steps=2,
                       output_steps=2)


def test_masked_metrics_by_hand():
    # Two windows, two horizons; mean 50, std 10. The second horizon of the
    # first window is missing (0 mph), so p = (1, 1/2) and weights (1, 0), (1, 2).
    target = torch.tensor([[60.0, 0.0], [40.0, 70.0]])
    weight = torch.tensor([[1.0, 0.0], [1.0, 2.0]])
    y = pack_targets(target, weight, torch.tensor(50.0), torch.tensor(10.0))
    assert y.shape == (2, 4, 2)
    out = torch.tensor([[1.5, 0.0], [-1.0, 2.5]])   # 65, 50 / 40, 75 mph
    obj = traffic_objective(horizons=(1, 2))
    m = {k: fn(out, y).mean() for k, fn in obj.metrics.items()}
    assert m["mae@1"].item() == pytest.approx((5 + 0) / 2)
    assert m["mae@2"].item() == pytest.approx(5.0)                 # only 75 vs 70
    assert m["mse@1"].item() == pytest.approx((25 + 0) / 2)
    assert m["mape@1"].item() == pytest.approx(100 * (5 / 60) / 2)
    assert m["mape@2"].item() == pytest.approx(100 * 5 / 70)
    assert m["mse_norm"].item() == pytest.approx((0.5 ** 2 / 2 + 0.5 ** 2) / 2)
    assert m["mae"].item() == pytest.approx((2.5 + 5.0) / 2)
    assert obj.loss(out, y).mean().item() == pytest.approx(m["mse_norm"].item())
    assert add_rmse({"mse@1": m["mse@1"]})["rmse@1"].item() == pytest.approx(math.sqrt(12.5))
    assert obj.primary == "mse_norm" and obj.higher_is_better is False
    with pytest.raises(ValueError, match="packed"):
        obj.loss(out, target)


def test_evaluate_matches_masked_means_of_the_raw_file():
    ts = np.datetime64("2012-03-01", "ns") + np.arange(60) * np.timedelta64(5, "m")
    rng = np.random.default_rng(3)
    speed = rng.uniform(20.0, 70.0, (60, 3)).astype(np.float32)
    speed[rng.random(speed.shape) < 0.25] = 0.0
    speed[:, 2] = np.where(np.arange(60) >= 40, 0.0, speed[:, 2])   # sensor 2 dead in test
    ds = TrafficDataset("m", speed, ts, input_steps=3, output_steps=4, horizons=(1, 4),
                        normalization="sensor")
    model = ConstantForecaster(4)
    with torch.no_grad():
        model.bias.copy_(torch.tensor([0.3, -0.2, 0.1, 0.5]))
    trainer = ClientTrainer(model, ds, ds.objective)
    params = trainer.layout.flatten(model).unsqueeze(0).repeat(3, 1)
    got = trainer.evaluate(torch.arange(3), params, split="test")
    start, count = ds.split_windows["test"]
    for i in range(3):
        mu, sd = ds.mean[i].item(), ds.std[i].item()
        for h in (1, 4):
            y = speed[start + 3 + h - 1:start + 3 + h - 1 + count, i].astype(np.float64)
            pred = model.bias[h - 1].item() * sd + mu
            v = y[y > 0]
            if v.size == 0:
                assert math.isnan(got[f"mae@{h}"][i].item())
                continue
            assert got[f"mae@{h}"][i].item() == pytest.approx(np.abs(pred - v).mean(), rel=1e-5)
            assert got[f"mse@{h}"][i].item() == pytest.approx(((pred - v) ** 2).mean(), rel=1e-5)
            assert got[f"mape@{h}"][i].item() == pytest.approx(
                100 * (np.abs(pred - v) / v).mean(), rel=1e-5)
    # The training loss stays finite (no NaN gradients) despite the dead sensor.
    result = trainer.train(torch.arange(3), params)
    assert torch.isfinite(result.params).all() and torch.isfinite(result.loss).all()


def test_batch_packs_mask_weights_and_subset_keeps_statistics():
    ds, _, _ = tiny_dataset(num_steps=40, n=3, input_steps=4, output_steps=3)
    index = torch.tensor([[0, 5], [1, 2]])
    x, y = ds.batch("train", index, torch.tensor([2, 0]))
    assert x.shape == (2, 2, 4, 2) and y.shape == (2, 2, 4, 3)
    assert torch.equal(y[0, :, 0], ds.splits["train"].y[2, [0, 5]])
    assert torch.all(y[:, :, 1] == 1.0)             # no missing reading: weight 1
    assert torch.all(y[0, :, 2] == ds.mean[2]) and torch.all(y[1, :, 3] == ds.std[0])
    sub = ds.subset(torch.tensor([2, 0]))
    assert isinstance(sub, TrafficDataset) and sub.sensor_ids == ["2", "0"]
    xs, ys = sub.batch("train", index, None)
    assert torch.equal(xs, x) and torch.equal(ys, y)


def test_simulator_on_a_traffic_dataset_uses_its_masked_loss():
    from pyg_fedgraph.simulation import Simulator
    from pyg_fedgraph.strategies import FedAvg
    from pyg_fedgraph.train import LocalConfig

    ds, _, _ = tiny_dataset(num_steps=60, n=3)
    torch.manual_seed(0)
    sim = Simulator(ds, ConstantForecaster(ds.output_steps), FedAvg(), rounds=1,
                    local=LocalConfig(lr=0.1, batch_size=4, steps=2))
    # No objective was passed: the dataset declares its own (masked, packed targets).
    assert sim.trainer.objective.primary == "mse_norm"
    assert sim.engine.ctx.objective.primary == "mse_norm"
    record = sim.run().records[-1]
    assert "mae@3" in record.val and "mse" not in record.val
    # The training loss is the masked normalized MSE of the packed targets, which a
    # plain MSE on the packed tensor would not give: check it on one batch by hand.
    obj = ds.objective
    x, y = ds.batch("train", torch.arange(4).view(1, 4), torch.tensor([0]))
    out = ConstantForecaster(ds.output_steps)(x[0])
    assert not torch.allclose(obj.loss(out, y[0]).mean(),
                              (out - y[0][:, 0]).pow(2).mean())
