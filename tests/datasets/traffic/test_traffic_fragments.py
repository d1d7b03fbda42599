r"""The real METR-LA and PEMS-BAY fragments of ../shared/data/traffic-fragments (DCRNN's
processed npz windows): read back, checked, windowed as Panacea's Table I counts them."""
import csv
import json
import logging
import shutil

import numpy as np
import pytest
from torch_geometric.utils import to_dense_adj
from traffic_helpers import FRAGMENTS, SHARED, needs_fragments, one_line_error

from pyg_fedgraph.cli import main as cli_main
from pyg_fedgraph.datasets import load_dataset
from pyg_fedgraph.datasets.traffic import (
    METRLA,
    PEMSBAY,
    load_sensor_graph,
    read_dcrnn_npz,
    read_sensor_ids,
)

pytestmark = needs_fragments
METR = FRAGMENTS / "METR-LA"


def _windows_of(series, first, count, steps):
    view = np.lib.stride_tricks.sliding_window_view(series[first:first + count + steps - 1],
                                                    steps, axis=0)  # (count, N, steps)
    return view.transpose(0, 2, 1)


def test_metr_la_windows_are_slices_of_the_rebuilt_series():
    table = read_dcrnn_npz(METR, "2012-03-01")
    assert table.sensor_ids == read_sensor_ids(METR / "sensor_ids.txt")
    assert table.speed.shape == (34272, 20)
    assert str(table.timestamps[0]) == "2012-03-01T00:00:00.000000000"
    assert str(table.timestamps[-1]) == "2012-06-27T23:55:00.000000000"
    assert np.all(np.diff(table.timestamps) == np.timedelta64(5, "m"))
    first = 0
    for name in ("train", "val", "test"):
        with np.load(METR / f"{name}.npz") as archive:
            x, y = archive["x"][..., 0], archive["y"][..., 0]
        count = x.shape[0]
        assert np.array_equal(_windows_of(table.speed, first, count, 6), x.astype(np.float32))
        assert np.array_equal(_windows_of(table.speed, first + 6, count, 6), y.astype(np.float32))
        first += count
    assert first == 34272 - 11


def test_metr_la_windowed_12_in_12_out_gives_table_i():
    ds = load_dataset("metr-la", root=SHARED / "traffic-fragments")
    assert isinstance(ds, METRLA) and ds.num_clients == 20 and ds.info["synthetic"] is False
    # Panacea (Lin, Lan, He and Li), Table I: 23,974 / 3,425 / 6,850 windows per client.
    assert [c for _, c in ds.split_windows.values()] == [23974, 3425, 6850]
    assert ds.input_steps == ds.output_steps == 12


def test_a_changed_value_in_a_fragment_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "METR-LA"
    shutil.copytree(METR, folder)
    path = folder / "val.npz"
    with np.load(path) as archive:
        arrays = {k: archive[k] for k in archive.files}
    arrays["y"][1000, 4, 7, 0] += 1.0
    np.savez_compressed(path, **arrays)
    message = one_line_error(lambda: METRLA(folder))
    assert message.startswith(f"{path}: the windows are not slices of one series: y of window "
                              f"1000, step 4 has ")


@pytest.mark.parametrize("cls, graph_file, folder", [
    (METRLA, "metr-la/adj_mx.pkl", "METR-LA"), (PEMSBAY, "pems-bay/adj_mx_bay.pkl", "PEMS-BAY")])
def test_the_subset_graph_is_the_full_graphs_rows_and_columns(cls, graph_file, folder,
                                                              fragment_folder):
    if not (SHARED / graph_file).exists():
        pytest.skip(f"../shared/data/{graph_file} not present")
    root = fragment_folder(folder)
    full_ids, full = load_sensor_graph(SHARED / graph_file)
    for graph_path in (None, SHARED / graph_file):       # the bundled graph and DCRNN's pickle
        ds = cls(root, graph_path=graph_path)
        index = [full_ids.index(s) for s in ds.sensor_ids]
        expected = full[np.ix_(index, index)]
        np.fill_diagonal(expected, 0.0)
        dense = to_dense_adj(ds.edge_index, edge_attr=ds.edge_weight,
                             max_num_nodes=ds.num_clients)[0].numpy()
        assert np.array_equal(dense, expected)


def test_pems_bay_highways_are_one_federation_of_67_sensors(caplog, fragment_folder):
    fragment_folder("PEMS-BAY")
    with caplog.at_level(logging.INFO, logger="pyg_fedgraph.datasets.traffic.npz"):
        ds = load_dataset("pems-bay", root=FRAGMENTS)
    assert isinstance(ds, PEMSBAY) and ds.num_clients == 67 == len(set(ds.sensor_ids))
    assert {k: len(v) for k, v in ds.info["groups"].items()} == {
        "CA85": 14, "CA87": 14, "I280": 13, "I680": 12, "I880": 14}
    assert "sensor 400823 appears twice (columns 1 and 7) with identical readings" in caplog.text
    # Table I: 36,465 / 5,209 / 10,419 windows per client, over the 52,116 steps with the
    # real file's 12 missing after 2017-03-12 01:55.
    assert [c for _, c in ds.split_windows.values()] == [36465, 5209, 10419]
    assert ds.speed.shape == (52116, 67)
    gap = np.flatnonzero(np.diff(ds.timestamps) != np.timedelta64(5, "m"))
    assert gap.tolist() == [20183]
    assert str(ds.timestamps[20183])[:16] == "2017-03-12T01:55"
    assert str(ds.timestamps[20184])[:16] == "2017-03-12T03:00"


def test_two_sources_agree_on_the_first_week():
    # T-GCN's los_speed.csv: all 207 sensors for the first 2,016 steps, missing readings
    # imputed; where the DCRNN fragment has a reading, both must hold the same speed.
    path = SHARED / "traffic-fragments" / "t-gcn-los-loop" / "los_speed.csv"
    if not path.exists():
        pytest.skip("../shared/data/traffic-fragments/t-gcn-los-loop not present")
    with open(path) as f:
        rows = list(csv.reader(f))
    header, values = rows[0], np.array(rows[1:], dtype=np.float64)
    table = read_dcrnn_npz(METR, "2012-03-01")
    week = table.speed[:values.shape[0]]
    other = values[:, [header.index(s) for s in table.sensor_ids]]
    seen = week > 0
    assert seen.mean() > 0.8
    np.testing.assert_allclose(week[seen], other[seen], rtol=0, atol=1e-4)


def test_the_command_line_runs_on_the_fragments(tmp_path, capfd):
    out = tmp_path / "out"
    code = cli_main(["run", "--dataset", "metr-la", "--strategy", "local", "--rounds", "1",
                     "--set", f"data.root={SHARED / 'traffic-fragments'}",
                     "--set", "model.hidden_channels=4", "--set", "steps=1",
                     "--out", str(out), "--quiet"])
    assert code == 0, capfd.readouterr().err


@pytest.mark.parametrize("dataset, folder, sensors", [("metr-la", "METR-LA", 20),
                                                       ("pems-bay", "PEMS-BAY", 67)])
def test_the_issues_command_runs_on_a_fragments_folder_and_names_a_missing_one(
        tmp_path, capfd, dataset, folder, sensors, fragment_folder):
    fragment_folder(folder)
    # Issue 37's acceptance: --set data.root=<the folder> --rounds 2 (a small model here).
    small = ["--strategy", "fedavg", "--rounds", "2", "--set", "model.hidden_channels=4",
             "--set", "steps=1", "--quiet"]
    out = tmp_path / "out"
    code = cli_main(["run", "--dataset", dataset, "--set", f"data.root={FRAGMENTS / folder}",
                     *small, "--out", str(out)])
    assert code == 0, capfd.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_clients"] == sensors and summary["rounds"] == 2
    assert summary["synthetic_data"] is False
    capfd.readouterr()
    absent = tmp_path / folder
    code = cli_main(["run", "--dataset", dataset, "--set", f"data.root={absent}", *small,
                     "--out", str(tmp_path / "out2")])
    err = capfd.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and not (tmp_path / "out2").exists()
    assert f"{absent / (dataset + '.h5')} not found, nor DCRNN's train.npz" in err[0]
