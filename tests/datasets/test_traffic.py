import hashlib
import math
import os
import pickle
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

pd = pytest.importorskip("pandas")

from pyg_fedgraph.cli import main as cli_main  # noqa: E402
from pyg_fedgraph.datasets import load_dataset  # noqa: E402
from pyg_fedgraph.datasets.traffic import (  # noqa: E402
    METRLA,
    PEMSBAY,
    SpeedTable,
    TrafficDataset,
    adjacency_to_edges,
    dcrnn_split_sizes,
    download_file,
    load_sensor_graph,
    read_speed_h5,
    synthetic_traffic,
    verify_sha256,
)
from pyg_fedgraph.train import ClientTrainer  # noqa: E402
from pyg_fedgraph.train.traffic_metrics import add_rmse, pack_targets, traffic_objective  # noqa: E402

# ../shared/data next to the project root (one level further up from a git worktree).
SHARED = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[2].parents
               if (p / "shared" / "data").is_dir()), Path("../shared/data"))
METR_GRAPH = SHARED / "metr-la" / "adj_mx.pkl"
METR_SHA = "a35687c6e15aa228dc45027b0ed2a0ea0f4ec78f573deb992c595092d12f61b3"
needs_real_graph = pytest.mark.skipif(not METR_GRAPH.exists(),
                                      reason="../shared/data/metr-la/adj_mx.pkl not present")


# ------------------------------------------------------------------ helpers
def write_graph(path, ids, adj, protocol=2):
    with open(path, "wb") as f:
        pickle.dump([list(ids), {s: i for i, s in enumerate(ids)},
                     np.asarray(adj, dtype=np.float32)], f, protocol=protocol)


def speed_frame(num_steps, ids, seed=0, start="2012-03-01"):
    r"""Speeds in the real format: DatetimeIndex at 5 min, string sensor columns,
    float64 mph, zeros for missing readings."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(20.0, 70.0, (num_steps, len(ids)))
    values[rng.random(values.shape) < 0.1] = 0.0
    index = pd.date_range(start, periods=num_steps, freq="5min")
    return pd.DataFrame(values, index=index, columns=[str(s) for s in ids])


def chain_adjacency(n):
    adj = np.eye(n, dtype=np.float32)
    for i in range(n - 1):
        adj[i, i + 1] = 0.8   # road i -> i + 1
    return adj


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


# ------------------------------------------------------------------ splits
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


# ------------------------------------------------------------------ metrics
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


# ------------------------------------------------------------------ batches
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


# ------------------------------------------------------------------ files
def test_adjacency_to_edges_keeps_dcrnn_direction():
    adj = np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.2], [0.3, 0.0, 1.0]], dtype=np.float32)
    ei, ew = adjacency_to_edges(adj)
    assert ei.tolist() == [[0, 1, 2], [1, 2, 0]]
    torch.testing.assert_close(ew, torch.tensor([0.5, 0.2, 0.3]))
    assert adjacency_to_edges(adj, self_loops=True)[0].size(1) == 6


@pytest.mark.parametrize("protocol", [2, 5])
def test_graph_pickle_round_trip(tmp_path, protocol):
    ids = ["773869", "767541", "767542"]
    adj = chain_adjacency(3)
    write_graph(tmp_path / "g.pkl", ids, adj, protocol)
    got_ids, got_adj = load_sensor_graph(tmp_path / "g.pkl")
    assert got_ids == ids and got_adj.dtype == np.float32 and np.array_equal(got_adj, adj)


def test_malicious_pickle_is_rejected(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "adj_mx.pkl"
    with open(path, "wb") as f:
        pickle.dump([["a"], {"a": 0}, _Exploit(marker)], f, protocol=2)
    with pytest.raises(ValueError, match=r"refusing to unpickle .*system.*lists, dicts"):
        load_sensor_graph(path)
    assert not marker.exists()
    with open(path, "wb") as f:
        pickle.dump(["a", {"a": 0}, eval], f)
    with pytest.raises(ValueError, match="builtins.eval"):
        load_sensor_graph(path)
    with open(path, "wb") as f:
        pickle.dump([["a", "b"], {"a": 0, "b": 0}, np.eye(2, dtype=np.float32)], f)
    with pytest.raises(ValueError, match="does not map"):
        load_sensor_graph(path)


@needs_real_graph
def test_real_metr_la_graph():
    ids, adj = load_sensor_graph(METR_GRAPH)
    assert len(ids) == 207 and ids[0] == "773869" and adj.shape == (207, 207)
    assert int((adj != 0).sum()) == 1722 and not np.allclose(adj, adj.T)
    ei, ew = adjacency_to_edges(adj)
    assert ei.size(1) == 1722 - 207 and float(ew.min()) > 0.1


# ------------------------------------------------------------------ speed files
def write_h5(df, path, **kwargs):
    with warnings.catch_warnings():  # PyTables warns when it pickles object columns
        warnings.simplefilter("ignore")
        df.to_hdf(path, key="df", **kwargs)
    return path


def assert_same_as_pandas(path):
    table = read_speed_h5(path)
    df = pd.read_hdf(path, key="df")
    assert table.sensor_ids == [str(c) for c in df.columns]
    assert table.timestamps.dtype == np.dtype("datetime64[ns]")
    assert np.array_equal(table.timestamps, df.index.values.astype("datetime64[ns]"))
    assert table.speed.dtype == np.float32
    assert np.array_equal(table.speed, df.to_numpy().astype(np.float32))
    return table


def test_speed_file_reads_as_pandas_does(tmp_path):
    frame = speed_frame(50, ["773869", "767541", "767542", "717447"])
    table = assert_same_as_pandas(write_h5(frame, tmp_path / "real.h5"))
    assert table.sensor_ids == ["773869", "767541", "767542", "717447"]
    assert table.timestamps[1] - table.timestamps[0] == np.timedelta64(5, "m")
    # Integer labels; T == N, so the orientation can only come from the file.
    assert_same_as_pandas(write_h5(speed_frame(4, [1, 2, 3, 4]).rename(columns=int),
                                   tmp_path / "square.h5"))
    # Several dtype blocks interleaved in column order, non-ASCII labels.
    index = pd.date_range("2012-03-01", periods=6, freq="5min")
    mixed = pd.DataFrame({"b": np.arange(6, dtype=np.int32), "a": np.linspace(0, 1, 6),
                          "é": np.arange(6, dtype=np.float32) / 3,
                          "c": np.arange(6, dtype=np.int64) * 7}, index=index)
    table = assert_same_as_pandas(write_h5(mixed, tmp_path / "mixed.h5"))
    assert table.sensor_ids == ["b", "a", "é", "c"]
    assert table.speed[5].tolist() == pytest.approx([5, 1, 5 / 3, 35])


def test_untransposed_block_reads_as_pandas_does(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = write_h5(speed_frame(7, ["a", "b", "c"]), tmp_path / "u.h5")
    with h5py.File(path, "a") as f:  # the same block stored (N, T), as the attribute says
        values = f["df/block0_values"][()]
        del f["df/block0_values"]
        f["df/block0_values"] = values.T
        f["df/block0_values"].attrs["transposed"] = np.uint8(0)
    table = assert_same_as_pandas(path)
    assert table.speed.shape == (7, 3)


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def one_line_error(call):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


def run_cli(root, out, capfd):
    code = cli_main(["run", "--dataset", "metr-la", "--strategy", "fedavg", "--rounds", "1",
                     "--set", f"data.root={root}", "--out", str(out), "--quiet"])
    captured = capfd.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1, captured.err
    assert lines[0].startswith("pyg-fedgraph: error: ") and "Traceback" not in captured.err
    assert not out.exists()
    return lines[0]


def evil_speed_root(tmp_path, marker):
    root = tmp_path / "root"
    root.mkdir()
    write_graph(root / "adj_mx.pkl", ["0", "1"], chain_adjacency(2))
    frame = speed_frame(40, ["0", "1"]).astype(object)
    frame.iloc[3, 1] = _Exploit(marker)                 # an object column with a payload
    write_h5(frame, root / "metr-la.h5")
    return root


def test_object_column_is_refused_and_runs_nothing(tmp_path, capfd):
    marker = tmp_path / "PWNED"
    root = evil_speed_root(tmp_path, marker)
    path = root / "metr-la.h5"
    message = one_line_error(lambda: read_speed_h5(path))
    assert message.startswith(f"{path}: columns ['0', '1'] hold variable-length data")
    assert "expected DCRNN's speed file" in message
    assert one_line_error(lambda: METRLA(root)) == message
    assert run_cli(root, tmp_path / "out", capfd) == f"pyg-fedgraph: error: {message}"
    bare = write_h5(pd.DataFrame({"x": [_Exploit(marker)]}), tmp_path / "bare.h5")
    assert "columns ['x'] hold variable-length data" in one_line_error(lambda: read_speed_h5(bare))
    assert not marker.exists()
    # The payload is live: pandas runs it when it reads the same file.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pd.read_hdf(path, key="df")
    assert marker.exists()


def test_pickled_attributes_are_never_loaded(tmp_path):
    h5py = pytest.importorskip("h5py")
    tables = pytest.importorskip("tables")
    frame = speed_frame(30, ["a", "b", "c"])
    by_h5py, by_tables = tmp_path / "freq.h5", tmp_path / "attr.h5"
    marker_h5py, marker_tables = tmp_path / "PWNED_freq", tmp_path / "PWNED_attr"
    write_h5(frame, by_h5py)
    with h5py.File(by_h5py, "a") as f:  # pandas unpickles the index's freq attribute
        f["df/axis1"].attrs["freq"] = np.bytes_(pickle.dumps(_Exploit(marker_h5py), 0))
    write_h5(frame, by_tables)
    with tables.open_file(by_tables, "a") as f:  # PyTables pickles what it cannot store
        f.get_node("/df")._v_attrs.evil = _Exploit(marker_tables)
    for path in (by_h5py, by_tables):
        table = read_speed_h5(path)
        assert np.array_equal(table.speed, frame.to_numpy().astype(np.float32))
    assert not marker_h5py.exists() and not marker_tables.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in (by_h5py, by_tables):
            pd.read_hdf(path, key="df")
    assert marker_h5py.exists() and marker_tables.exists()


def test_other_speed_files_get_one_clear_line(tmp_path):
    frame = speed_frame(30, ["a", "b"])
    table = write_h5(frame, tmp_path / "table.h5", format="table")
    assert f"{table}: 'df' was saved with format='table'" in one_line_error(
        lambda: read_speed_h5(table))
    text = frame.assign(c=["x"] * 30)
    strings = write_h5(text, tmp_path / "strings.h5")
    assert f"{strings}: columns ['c'] hold str values, not speeds" in one_line_error(
        lambda: read_speed_h5(strings))
    stamps = write_h5(frame.assign(t=frame.index), tmp_path / "stamps.h5")
    assert "columns ['t'] hold datetime64" in one_line_error(lambda: read_speed_h5(stamps))
    plain = write_h5(frame.reset_index(drop=True), tmp_path / "plain.h5")
    assert "the index is integer, not a DatetimeIndex" in one_line_error(
        lambda: read_speed_h5(plain))
    series = write_h5(frame["a"], tmp_path / "series.h5")
    assert "holds a pandas 'series', not a DataFrame" in one_line_error(
        lambda: read_speed_h5(series))
    garbage, empty = tmp_path / "garbage.h5", tmp_path / "empty.h5"
    garbage.write_bytes(os.urandom(4096))
    empty.write_bytes(b"")
    for path in (garbage, empty):
        assert one_line_error(lambda p=path: read_speed_h5(p)).startswith(
            f"{path} is not an HDF5 file (")
    assert "speed file" in one_line_error(lambda: read_speed_h5(tmp_path / "missing.h5"))


def test_object_labels_are_refused(tmp_path):
    mixed = speed_frame(30, ["a", "b"]).rename(columns={"b": 7})   # labels str and int
    path = write_h5(mixed, tmp_path / "labels.h5")
    assert f"{path}: the column labels 'df/axis0' are variable-length data" in one_line_error(
        lambda: read_speed_h5(path))


def test_garbage_graph_and_speed_files_through_the_cli(tmp_path, capfd):
    ids = ["0", "1"]
    good = tmp_path / "good"
    good.mkdir()
    write_graph(good / "adj_mx.pkl", ids, chain_adjacency(2))
    write_h5(speed_frame(40, ids), good / "metr-la.h5")
    assert METRLA(good).num_clients == 2
    for broken, content in (("adj_mx.pkl", os.urandom(2048)), ("adj_mx.pkl", b""),
                            ("metr-la.h5", os.urandom(2048)), ("metr-la.h5", b"")):
        root = tmp_path / f"{broken}-{len(content)}"
        shutil.copytree(good, root)
        (root / broken).write_bytes(content)
        message = one_line_error(lambda r=root: METRLA(r))
        expected = "a pickle of [sensor_ids" if broken == "adj_mx.pkl" else "speed file"
        assert message.startswith(f"{root / broken} is not ") and expected in message
        assert run_cli(root, tmp_path / "out", capfd) == f"pyg-fedgraph: error: {message}"


def test_sha256_and_download_with_injected_fetch(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"speed data")
    digest = hashlib.sha256(b"speed data").hexdigest()
    assert verify_sha256(src, digest.upper()) == digest
    with pytest.raises(ValueError, match="tampered"):
        verify_sha256(src, "0" * 64)

    def fetch(url, dest):
        shutil.copy(tmp_path / url.rsplit("/", 1)[-1], dest)

    out = download_file("https://example.org/src.bin", tmp_path / "dl" / "f.bin", digest, fetch)
    assert out.read_bytes() == b"speed data"
    with pytest.raises(ValueError, match="sha256 of"):
        download_file("https://example.org/src.bin", tmp_path / "dl" / "g.bin", "ab" * 32, fetch)
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["f.bin"]   # nothing left


def test_metrla_reads_root_and_downloads_missing_files(tmp_path):
    pytest.importorskip("tables")
    ids = [str(100 + i) for i in range(4)]
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    write_graph(mirror / "adj_mx.pkl", ids, chain_adjacency(4))
    speed_frame(60, ids).rename(columns=int).to_hdf(mirror / "metr-la.h5", key="df")  # int ids
    sums = {name: hashlib.sha256((mirror / name).read_bytes()).hexdigest()
            for name in ("adj_mx.pkl", "metr-la.h5")}
    fetched = []

    def fetch(url, dest):
        fetched.append(url)
        shutil.copy(mirror / url.rsplit("/", 1)[-1], dest)

    root = tmp_path / "root"
    with pytest.raises(ValueError, match="not found"):
        METRLA(root)
    with pytest.raises(ValueError, match="no direct public URL of metr-la.h5"):
        METRLA(root, download=True, checksums={"adj_mx.pkl": sums["adj_mx.pkl"]}, fetch=fetch)
    ds = METRLA(root, download=True, urls={"metr-la.h5": "https://mirror/metr-la.h5"},
                checksums=sums, fetch=fetch)
    assert fetched[-1] == "https://mirror/metr-la.h5"
    assert METRLA.resource("adj_mx.pkl").sha256 == METR_SHA
    assert fetched[0].endswith("/602afd9d767d3aa1c9b3eac51710d6aeee12c227/data/sensor_graph/"
                               "adj_mx.pkl")
    assert ds.num_clients == 4 and ds.sensor_ids == ids and ds.info["synthetic"] is False
    assert METRLA(root).num_samples("test").tolist() == [7] * 4   # files now in root


@needs_real_graph
def test_metrla_with_a_real_format_h5_has_207_clients(tmp_path):
    pytest.importorskip("tables")
    shutil.copy(METR_GRAPH, tmp_path / "adj_mx.pkl")
    ids, adj = load_sensor_graph(METR_GRAPH)
    frame = speed_frame(60, ids)
    shuffled = frame[list(reversed(ids))]                       # column order differs
    shuffled.to_hdf(tmp_path / "metr-la.h5", key="df")
    ds = METRLA(tmp_path)
    assert ds.num_clients == 207 and ds.sensor_ids == ids
    # 60 - 23 = 37 windows -> 26 / 4 / 7 (DCRNN's rounding).
    assert [ds.num_samples(s)[0].item() for s in ("train", "val", "test")] == [26, 4, 7]
    assert ds.edge_index.size(1) == 1515
    i, j = ds.edge_index[:, 0].tolist()
    assert ds.edge_weight[0].item() == pytest.approx(float(adj[i, j]))
    # Values are aligned with the graph order, zeros included.
    torch.testing.assert_close(ds.splits["test"].y[5, 0],
                               torch.tensor(frame[ids[5]].to_numpy()[26 + 4 + 12:][:12],
                                            dtype=torch.float32))
    loaded = load_dataset("metr-la", root=tmp_path)
    assert loaded.num_clients == 207 and loaded.info["synthetic"] is False


def test_pemsbay_files_are_named_as_published(tmp_path):
    assert PEMSBAY.SPEED_FILE == "pems-bay.h5" and PEMSBAY.GRAPH_FILE == "adj_mx_bay.pkl"
    with pytest.raises(ValueError, match="adj_mx_bay.pkl"):
        PEMSBAY(tmp_path)


# ------------------------------------------------------------------ synthetic
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


def test_registered_builder_uses_synthetic_speeds_on_a_given_graph(tmp_path):
    ids = ["a", "b", "c", "d"]
    write_graph(tmp_path / "adj_mx.pkl", ids, chain_adjacency(4))
    ds = load_dataset("metr-la", graph_path=tmp_path, synthetic_steps=300, seed=0)
    assert isinstance(ds, TrafficDataset) and ds.info["synthetic"] is True
    assert ds.sensor_ids == ids and ds.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]]
    with pytest.raises(ValueError, match="graph_path"):
        load_dataset("metr-la")


def test_simulation_reports_horizon_metrics(tmp_path):
    from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
    ids = [str(i) for i in range(4)]
    write_graph(tmp_path / "adj_mx.pkl", ids, chain_adjacency(4))
    cfg = ExperimentConfig(dataset="metr-la", strategy="fedavg", rounds=2, overrides={
        "data.graph_path": str(tmp_path), "data.synthetic_steps": 200,
        "model.hidden_channels": 4, "steps": 2, "batch_size": 8})
    sim = build_simulator(cfg, progress=False)
    hist = sim.run()
    assert hist.metric == "mse_norm" and hist.higher_is_better is False
    test = hist.records[-1].test
    assert {"mae@3", "mse@6", "mape@12", "mse_norm"} <= set(test)
    assert all(torch.isfinite(v).all() for v in test.values())
