r"""DCRNN's processed npz windows: the series read back, checked, dated and windowed again;
sensor subsets and the restricted road graph."""
import logging
import shutil

import numpy as np
import pytest
import torch
from torch_geometric.utils import to_dense_adj
from traffic_helpers import (
    Exploit,
    five_minute_stamps,
    one_line_error,
    random_speeds,
    time_of_day,
    write_dcrnn_npz,
)

from pyg_fedgraph.cli import main as cli_main
from pyg_fedgraph.datasets import load_dataset
from pyg_fedgraph.datasets.traffic import (
    METRLA,
    PEMSBAY,
    SpeedTable,
    TrafficDataset,
    bundled_sensor_graph,
    choose_sensors,
    concat_tables,
    find_npz_folders,
    find_sensor_ids,
    read_dcrnn_npz,
    restrict_adjacency,
)

METR_IDS = bundled_sensor_graph("metr-la").sensor_ids


# ------------------------------------------------------------ the series read back
@pytest.mark.parametrize("steps", [(6, 6), (12, 12), (1, 3), (4, 1)])
def test_the_series_is_read_back_from_any_window_lengths(tmp_path, steps):
    speed = random_speeds(200, 3)
    stamps = five_minute_stamps(200, start="2012-03-01")
    sizes = write_dcrnn_npz(tmp_path, speed, stamps, *steps, ids=["a", "b", "c"])
    table = read_dcrnn_npz(tmp_path, "2012-03-01")
    assert np.array_equal(table.speed, speed.astype(np.float32))
    assert np.array_equal(table.timestamps, stamps) and table.sensor_ids == ["a", "b", "c"]
    windows = table.info["npz_windows"]
    assert (windows["input_steps"], windows["output_steps"]) == steps
    assert windows["counts"] == sizes and sum(sizes.values()) == 200 - sum(steps) + 1


def test_the_time_of_day_dates_the_steps_and_shows_a_gap(tmp_path):
    # Starts at 22:00 on 2017-03-11; 12 steps missing after step 30 (as PEMS-BAY's file).
    stamps = five_minute_stamps(120, start="2017-03-11T22:00", skip=(30, 12))
    write_dcrnn_npz(tmp_path, random_speeds(120, 2), stamps, ids=["x", "y"])
    table = read_dcrnn_npz(tmp_path, "2017-03-11")
    assert np.array_equal(table.timestamps, stamps)
    assert str(table.timestamps[30])[:16] == "2017-03-12T00:30"
    assert str(table.timestamps[31])[:16] == "2017-03-12T01:35"
    # A start with a time must agree with the channel.
    assert np.array_equal(read_dcrnn_npz(tmp_path, "2017-03-11T22:00").timestamps, stamps)
    message = one_line_error(lambda: read_dcrnn_npz(tmp_path, "2017-03-11T21:00"))
    assert "starts at 22:00 by its time-of-day channel, not at 21:00" in message
    # Windowed by the library, the series keeps its length; the gap is only in the stamps.
    ds = TrafficDataset.from_table(table, input_steps=12, output_steps=12)
    assert sum(c for _, c in ds.split_windows.values()) == 120 - 23


def test_a_series_without_time_of_day_takes_regular_steps(tmp_path):
    stamps = five_minute_stamps(80)
    write_dcrnn_npz(tmp_path, random_speeds(80, 2), stamps, ids=["p", "q"], channels=("speed",))
    assert np.array_equal(read_dcrnn_npz(tmp_path, "2012-03-01").timestamps, stamps)


def test_library_windows_of_the_rebuilt_series_equal_windows_of_the_original(tmp_path):
    ids = METR_IDS[:4]
    speed = random_speeds(300, 4, seed=3)
    stamps = five_minute_stamps(300)
    write_dcrnn_npz(tmp_path / "METR-LA", speed, stamps, 6, 6, ids=ids)
    ds = METRLA(tmp_path)
    direct = TrafficDataset.from_table(SpeedTable(stamps, speed, ids), "metr-la")
    assert ds.sensor_ids == ids and ds.info["synthetic"] is False
    for split in ("train", "val", "test"):
        assert torch.equal(ds.splits[split].x, direct.splits[split].x)
        assert torch.equal(ds.splits[split].y, direct.splits[split].y)
    # 300 - 23 = 277 windows of 12 + 12 steps: 194 / 28 / 55 (DCRNN's rounding).
    assert [c for _, c in ds.split_windows.values()] == [194, 28, 55]


# --------------------------------------------------------------- files refused
@pytest.mark.parametrize("split, array, index, found", [
    # A changed value inside a window disagrees with the series read from window starts.
    ("val", "x", (5, 2, 1, 0), "val.npz: the windows are not slices of one series: x of "
                               "window 5, step 2 has {v} as the speed of sensor 718045"),
    ("test", "y", (0, 3, 0, 0), "test.npz: the windows are not slices of one series: y of "
                                "window 0, step 3 has {v} as the speed of sensor 773869"),
    # A changed window start moves the series: an earlier window names it as the other side.
    ("train", "x", (17, 0, 2, 1), "train.npz x of window 17, step 0 has {v}"),
])
def test_a_changed_value_is_found_and_named_in_one_line(tmp_path, split, array, index, found):
    ids = ["773869", "718045", "767541"]
    write_dcrnn_npz(tmp_path, random_speeds(150, 3), five_minute_stamps(150), ids=ids)
    path = tmp_path / f"{split}.npz"
    with np.load(path) as archive:
        arrays = {k: archive[k] for k in archive.files}
    arrays[array][index] += 0.5
    np.savez_compressed(path, **arrays)
    message = one_line_error(lambda: read_dcrnn_npz(tmp_path, "2012-03-01"))
    assert found.format(v=f"{arrays[array][index]:g}") in message, message
    assert "one of them was changed (a corrupted or edited file)" in message


def test_splits_out_of_order_are_refused(tmp_path):
    write_dcrnn_npz(tmp_path, random_speeds(150, 2), five_minute_stamps(150), ids=["a", "b"])
    (tmp_path / "val.npz").rename(tmp_path / "keep.npz")
    (tmp_path / "test.npz").rename(tmp_path / "val.npz")
    (tmp_path / "keep.npz").rename(tmp_path / "test.npz")
    assert "the windows are not slices of one series" in one_line_error(
        lambda: read_dcrnn_npz(tmp_path, "2012-03-01"))


def test_malformed_files_get_one_line(tmp_path):
    good = tmp_path / "good"
    write_dcrnn_npz(good, random_speeds(100, 2), five_minute_stamps(100), ids=["a", "b"])

    def variant(name, **changes):
        folder = tmp_path / name
        shutil.copytree(good, folder)
        with np.load(folder / "val.npz") as archive:
            arrays = {k: archive[k] for k in archive.files}
        arrays.update(changes)
        np.savez_compressed(folder / "val.npz", **arrays)
        return one_line_error(lambda: read_dcrnn_npz(folder, "2012-03-01"))

    with np.load(good / "val.npz") as archive:
        x, y = archive["x"], archive["y"]
    assert "are not consecutive steps -5..0 and 1..6" in variant(
        "offsets", x_offsets=np.array([[-10], [-8], [-6], [-4], [-2], [0]]))
    assert "windows of 6 + 6 steps, 1 sensors" in variant("narrow", x=x[:, :, :1], y=y[:, :, :1])
    assert "are not windows of one series" in variant("short", y=y[:-1])
    assert "holds <U1 values, not numbers" in variant("text", x_offsets=np.array(["a"]))
    missing = tmp_path / "missing"
    shutil.copytree(good, missing)
    (missing / "test.npz").unlink()
    assert one_line_error(lambda: read_dcrnn_npz(missing, "2012-03-01")).startswith(
        f"{missing}: no test.npz; expected DCRNN's generate_training_data.py output")
    no_ids = tmp_path / "no_ids"
    shutil.copytree(good, no_ids)
    (no_ids / "sensor_ids.txt").unlink()
    assert f"write them in {no_ids / 'sensor_ids.txt'}" in one_line_error(
        lambda: read_dcrnn_npz(no_ids, "2012-03-01"))
    assert "3 sensor ids for 2 sensor columns" in one_line_error(
        lambda: read_dcrnn_npz(good, "2012-03-01", sensor_ids=["a", "b", "c"]))
    garbage = tmp_path / "garbage"
    shutil.copytree(good, garbage)
    (garbage / "train.npz").write_bytes(b"\x00" * 300)
    assert one_line_error(lambda: read_dcrnn_npz(garbage, "2012-03-01")).startswith(
        f"{garbage / 'train.npz'}: cannot read it (")


def test_a_pickled_array_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "PWNED"
    good = tmp_path / "npz"
    write_dcrnn_npz(good, random_speeds(100, 2), five_minute_stamps(100), ids=["a", "b"])
    with np.load(good / "train.npz") as archive:
        arrays = {k: archive[k] for k in archive.files}
    payload = np.empty(1, dtype=object)
    payload[0] = Exploit(marker)
    arrays["x_offsets"] = payload
    np.savez(good / "train.npz", **arrays)
    message = one_line_error(lambda: read_dcrnn_npz(good, "2012-03-01"))
    assert message.startswith(f"{good / 'train.npz'}: cannot read it (") and "pickle" in message
    assert not marker.exists()
    with np.load(good / "train.npz", allow_pickle=True) as archive:  # the payload is live
        archive["x_offsets"]
    assert marker.exists()


# ------------------------------------------------------------- repeated sensors
def test_a_sensor_listed_twice_with_identical_readings_is_kept_once(tmp_path, caplog):
    speed = random_speeds(120, 3)
    speed = np.concatenate([speed, speed[:, 1:2]], axis=1)            # column 3 = column 1
    write_dcrnn_npz(tmp_path, speed, five_minute_stamps(120), ids=["a", "b", "c", "b"])
    with caplog.at_level(logging.INFO, logger="pyg_fedgraph.datasets.traffic.npz"):
        table = read_dcrnn_npz(tmp_path, "2012-03-01")
    assert table.sensor_ids == ["a", "b", "c"]
    assert np.array_equal(table.speed, speed[:, :3].astype(np.float32))
    assert "sensor b appears twice (columns 1 and 3) with identical readings" in caplog.text
    speed[7, 3] += 1.0
    write_dcrnn_npz(tmp_path, speed, five_minute_stamps(120), ids=["a", "b", "c", "b"])
    assert "sensor b appears twice (columns 1 and 3) with different readings at 1 time " \
           "steps" in one_line_error(lambda: read_dcrnn_npz(tmp_path, "2012-03-01"))


# ------------------------------------------------------------------ groups
def test_sensor_groups_join_into_one_federation(tmp_path):
    stamps = five_minute_stamps(150, start="2017-01-01")
    bay = bundled_sensor_graph("pems-bay").sensor_ids
    root = tmp_path / "PEMS-BAY"
    first, second = random_speeds(150, 3, seed=1), random_speeds(150, 2, seed=2)
    write_dcrnn_npz(root / "I880", first, stamps, ids=bay[10:13])
    # The fork's layout: no sensor_ids.txt, the ids in ../sensor_graph/device_ids_85.txt.
    write_dcrnn_npz(root / "CA85", second, stamps)
    (tmp_path / "sensor_graph").mkdir()
    (tmp_path / "sensor_graph" / "device_ids_85.txt").write_text(",".join(bay[3:5]))
    assert find_sensor_ids(root / "CA85") == tmp_path / "sensor_graph" / "device_ids_85.txt"
    assert find_npz_folders(tmp_path, "pems-bay") == [root / "CA85", root / "I880"]
    ds = load_dataset("pems-bay", root=tmp_path)
    assert isinstance(ds, PEMSBAY) and ds.sensor_ids == bay[3:5] + bay[10:13]
    assert ds.info["groups"] == {"CA85": bay[3:5], "I880": bay[10:13]}
    assert torch.equal(ds.speed, torch.from_numpy(
        np.concatenate([second, first], axis=1).astype(np.float32)))
    # Groups over other time steps cannot share windows.
    later = read_dcrnn_npz(root / "I880", "2017-01-02")
    message = one_line_error(lambda: concat_tables(
        [read_dcrnn_npz(root / "CA85", "2017-01-01"), later], ["CA85", "I880"]))
    assert message.startswith("I880 covers other time steps")


# ----------------------------------------------------- sensors and the road graph
def test_the_graph_of_the_files_sensors_is_the_full_graphs_rows_and_columns(tmp_path):
    full = bundled_sensor_graph("metr-la")
    rng = np.random.default_rng(0)
    ids = [full.sensor_ids[i] for i in rng.permutation(207)[:12]]    # the file's order
    write_dcrnn_npz(tmp_path, random_speeds(200, 12), five_minute_stamps(200), ids=ids)
    ds = METRLA(tmp_path)
    assert ds.sensor_ids == ids
    adj = full.to_dense()
    index = [full.sensor_ids.index(s) for s in ids]
    expected = adj[np.ix_(index, index)]
    np.fill_diagonal(expected, 0.0)                          # the prior graph has no self-loops
    dense = to_dense_adj(ds.edge_index, edge_attr=ds.edge_weight, max_num_nodes=12)[0]
    assert np.array_equal(dense.numpy(), expected) and ds.edge_index.size(1) > 0
    sub = full.subgraph(ids)
    assert sub.sensor_ids == ids and torch.equal(sub.location, full.location[index])
    assert np.array_equal(sub.to_dense(), adj[np.ix_(index, index)])


def test_ids_the_graph_lacks_are_named_in_one_line(tmp_path):
    write_dcrnn_npz(tmp_path, random_speeds(100, 3), five_minute_stamps(100),
                    ids=[METR_IDS[0], "999001", "999002"])
    message = one_line_error(lambda: METRLA(tmp_path))
    assert "2 of the 3 sensors are not in the metr-la road graph (bundled): 999001, 999002" \
        in message
    assert "999001" in one_line_error(
        lambda: bundled_sensor_graph("metr-la").subgraph(["999001"]))
    many = [str(i) for i in range(12)]
    assert "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more" in one_line_error(
        lambda: restrict_adjacency(["a"], np.eye(1), many))


def test_choosing_sensors():
    available = ["a", "b", "c", "d"]
    assert choose_sensors(available) == available
    assert choose_sensors(available, ["c", "a"]) == ["c", "a"]
    assert choose_sensors(available, "d, b") == ["d", "b"]
    assert choose_sensors(["7", "8"], 8) == ["8"]
    assert choose_sensors(available, num_sensors=2) == ["a", "b"]
    assert "not both" in one_line_error(lambda: choose_sensors(available, ["a"], 1))
    assert "between 1 and the 4 sensors of the data" in one_line_error(
        lambda: choose_sensors(available, num_sensors=5))
    assert "1 of the requested sensors are not in the data: e" in one_line_error(
        lambda: choose_sensors(available, ["a", "e"]))
    assert "lists a more than once" in one_line_error(lambda: choose_sensors(available, "a,a"))


def test_a_subset_of_the_npz_sensors(tmp_path):
    ids = METR_IDS[:5]
    speed = random_speeds(200, 5)
    write_dcrnn_npz(tmp_path, speed, five_minute_stamps(200), ids=ids)
    (tmp_path / "mine.txt").write_text(f"{ids[4]}\n{ids[1]}\n")
    for kwargs, keep in (({"sensors": str(tmp_path / "mine.txt")}, [4, 1]),
                         ({"num_sensors": 2}, [0, 1]), ({"sensors": [ids[2]]}, [2])):
        ds = METRLA(tmp_path, **kwargs)
        assert ds.sensor_ids == [ids[k] for k in keep]
        assert torch.equal(ds.speed, torch.from_numpy(speed[:, keep].astype(np.float32)))


def test_the_cli_runs_on_npz_files_and_fails_in_one_line_without_them(tmp_path, capfd):
    root = tmp_path / "data"
    write_dcrnn_npz(root / "METR-LA", random_speeds(200, 3), five_minute_stamps(200),
                    ids=METR_IDS[:3])
    out = tmp_path / "out"
    code = cli_main(["run", "--dataset", "metr-la", "--strategy", "fedavg", "--rounds", "1",
                     "--set", f"data.root={root}", "--set", "model.hidden_channels=4",
                     "--set", "steps=2", "--out", str(out), "--quiet"])
    assert code == 0, capfd.readouterr().err
    assert out.is_dir() and any(out.iterdir())
    capfd.readouterr()
    code = cli_main(["run", "--dataset", "metr-la", "--strategy", "fedavg", "--rounds", "1",
                     "--set", f"data.root={tmp_path / 'nowhere'}", "--out",
                     str(tmp_path / "out2"), "--quiet"])
    err = capfd.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"{tmp_path / 'nowhere' / 'metr-la.h5'} not found, nor DCRNN's train.npz" in err[0]


def test_full_sized_npz_without_ids_are_in_the_graphs_order(tmp_path, caplog):
    ids = bundled_sensor_graph("metr-la").sensor_ids
    write_dcrnn_npz(tmp_path, random_speeds(60, 207), five_minute_stamps(60), 3, 3)
    with caplog.at_level(logging.WARNING):
        ds = METRLA(tmp_path)
    assert ds.sensor_ids == ids and "in its order" in caplog.text


def test_time_of_day_of_the_helper_is_dcrnns():
    stamps = five_minute_stamps(3, start="2012-03-01T23:55")
    assert time_of_day(stamps).tolist() == [287 / 288, 0.0, 1 / 288]
