r"""Speeds as a CSV without time stamps (T-GCN's ``los_speed.csv``): read, dated and
restricted to the road graph like the other formats; malformed files refused in one line;
and the real file of ../shared/data when it is there."""
import numpy as np
import pytest
import torch
from traffic_helpers import SHARED

from pyg_fedgraph.datasets import load_dataset
from pyg_fedgraph.datasets.traffic import (
    METRLA,
    adjacency_to_edges,
    bundled_sensor_graph,
    read_dcrnn_npz,
    read_speed_csv,
    restrict_adjacency,
)

TGCN = SHARED / "traffic-fragments" / "t-gcn-los-loop"


def write_csv(path, ids, speed):
    r"""T-GCN's layout: a header of sensor ids, then one row of speeds per step."""
    lines = [",".join(ids)] + [",".join(repr(float(v)) for v in row) for row in speed]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def some_sensors():
    r"""Three real METR-LA ids, not in the graph's order, and 40 steps of speeds."""
    graph = bundled_sensor_graph("metr-la")
    ids = [graph.sensor_ids[k] for k in (5, 0, 17)]
    speed = np.random.default_rng(0).uniform(20.0, 70.0, (40, 3))
    return ids, speed


def test_a_csv_is_dated_from_its_start_and_keeps_its_columns(tmp_path, some_sensors):
    ids, speed = some_sensors
    table = read_speed_csv(write_csv(tmp_path / "s.csv", ids, speed), "2012-03-01")
    assert table.sensor_ids == ids
    assert np.array_equal(table.speed, speed.astype(np.float32))
    assert str(table.timestamps[0]) == "2012-03-01T00:00:00.000000000"
    assert str(table.timestamps[13]) == "2012-03-01T01:05:00.000000000"  # 13 x 5 minutes
    hourly = read_speed_csv(tmp_path / "s.csv", "2012-03-01", step_minutes=60)
    assert str(hourly.timestamps[2]) == "2012-03-01T02:00:00.000000000"


def test_metr_la_reads_los_speed_csv_in_the_files_order_on_the_road_graph(tmp_path,
                                                                        some_sensors):
    ids, speed = some_sensors
    write_csv(tmp_path / "los_speed.csv", ids, speed)
    assert METRLA.holds_speeds(tmp_path)
    ds = load_dataset("metr-la", root=tmp_path, input_steps=4, output_steps=2)
    assert isinstance(ds, METRLA) and ds.info["synthetic"] is False
    assert ds.sensor_ids == ids and "los_speed.csv" in ds.info["source"]
    # The prior graph: the bundled graph's rows and columns of these ids, in the file's order.
    graph = bundled_sensor_graph("metr-la")
    sub = restrict_adjacency(graph.sensor_ids, graph.to_dense(), ids, "test")
    edge_index, edge_weight = adjacency_to_edges(sub)
    assert torch.equal(ds.edge_index, edge_index)
    assert torch.equal(ds.edge_weight, edge_weight)
    # 40 steps windowed 4 in / 2 out: 35 windows, split 0.7 / 0.1 / 0.2.
    assert sum(c for _, c in ds.split_windows.values()) == 35
    # A subset keeps the asked order.
    two = load_dataset("metr-la", root=tmp_path, sensors=[ids[2], ids[0]])
    assert two.sensor_ids == [ids[2], ids[0]]


@pytest.mark.parametrize("body, says", [
    ("1.0,2.0,x\n", "not a table of numbers after the header"),
    ("1.0,2.0\n", "not a table of numbers after the header"),
    ("", "no rows of speeds after the header"),
])
def test_a_malformed_csv_is_refused_in_one_line_naming_it(tmp_path, body, says):
    path = tmp_path / "los_speed.csv"
    path.write_text("773869,767541,767542\n1.0,2.0,3.0\n" + body if body else
                    "773869,767541,767542\n")
    with pytest.raises(ValueError) as err:
        read_speed_csv(path, "2012-03-01")
    message = str(err.value)
    assert "\n" not in message and str(path) in message and says in message


def test_a_header_that_does_not_match_the_columns_is_refused(tmp_path):
    path = tmp_path / "los_speed.csv"
    path.write_text("773869,767541\n1.0,2.0,3.0\n")
    with pytest.raises(ValueError, match="3 columns of speeds for 2 sensor ids"):
        read_speed_csv(path, "2012-03-01")
    path.write_text(",\n1.0,2.0\n")
    with pytest.raises(ValueError, match="the first line must name the sensors"):
        read_speed_csv(path, "2012-03-01")


@pytest.mark.skipif(not (TGCN / "los_speed.csv").exists(),
                    reason="../shared/data/traffic-fragments/t-gcn-los-loop not present")
def test_the_real_week_of_all_207_sensors_agrees_with_dcrnns_fragment():
    ds = load_dataset("metr-la", root=TGCN)
    assert ds.num_clients == 207 and ds.edge_index.size(1) == 1515  # 1,722 non-zeros - diagonal
    assert ds.sensor_ids == bundled_sensor_graph("metr-la").sensor_ids
    # 2,016 steps windowed 12 / 12: 1,993 windows, DCRNN's 0.7 / 0.1 / 0.2 split.
    assert [c for _, c in ds.split_windows.values()] == [1395, 199, 399]
    # The 20 sensors of DCRNN's npz fragment agree with it over the week where DCRNN
    # has a reading (T-GCN imputed the missing ones): two independent sources.
    fragment = read_dcrnn_npz(SHARED / "traffic-fragments" / "dcrnn-pytorch-modified" / "METR-LA",
                              "2012-03-01")
    week = read_speed_csv(TGCN / "los_speed.csv", "2012-03-01").select(fragment.sensor_ids)
    dcrnn = fragment.speed[:2016]
    seen = dcrnn > 0
    assert seen.mean() > 0.9
    assert np.abs(week.speed[seen] - dcrnn[seen]).max() < 1e-3


def test_a_byte_order_mark_is_not_part_of_the_first_id(tmp_path, some_sensors):
    ids, speed = some_sensors
    path = write_csv(tmp_path / "s.csv", ids, speed)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert read_speed_csv(path, "2012-03-01").sensor_ids == ids


@pytest.mark.parametrize("content, says", [
    (b"\xff\xfe\x00b\x00i\x00n", "is not a text file (not UTF-8)"),
    (b"773869,773869,767542\n1,2,3\n", "the header names sensors more than once: ['773869']"),
    (b"773869,767541,767542\n1,2,3\n4,nan,6\n", "1 speeds are not finite non-negative numbers, "
                                                "the first nan of sensor 767541 on line 3"),
    (b"773869,767541,767542\n1,2,-3\n", "the first -3.0 of sensor 767542 on line 2"),
])
def test_bad_bytes_ids_or_speeds_are_refused_in_one_line_naming_the_file(tmp_path, content,
                                                                         says):
    path = tmp_path / "los_speed.csv"
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        read_speed_csv(path, "2012-03-01")
    message = str(err.value)
    assert "\n" not in message and str(path) in message and says in message


def test_asking_for_the_download_does_not_settle_for_the_csv(tmp_path, some_sensors):
    ids, speed = some_sensors
    write_csv(tmp_path / "los_speed.csv", ids, speed)
    fetched = []

    def fetch(url, dest):  # what download=True would bring: refused here by its checksum
        fetched.append(url)
        dest.write_bytes(b"not the file")

    with pytest.raises(ValueError, match="sha256"):
        METRLA(tmp_path, download=True, urls={"metr-la.h5": "https://example.org/metr-la.h5"},
               fetch=fetch)
    assert fetched == ["https://example.org/metr-la.h5"]


def test_an_empty_root_names_the_csv_among_the_files_it_looked_for(tmp_path):
    r"""METR-LA's message lists the CSV as a third source; PEMS-BAY, which reads
    none, does not mention one; the command line's builder says the same."""
    from pyg_fedgraph.datasets.traffic import PEMSBAY

    with pytest.raises(ValueError) as err:
        METRLA(tmp_path)
    message = str(err.value)
    assert "metr-la.h5 not found, nor DCRNN's train.npz" in message
    assert "nor los_speed.csv (T-GCN's week of all 207 sensors" in message
    assert "\n" not in message
    with pytest.raises(ValueError) as err:
        PEMSBAY(tmp_path)
    assert ".csv" not in str(err.value)
    with pytest.raises(ValueError, match=r"nor los_speed.csv \(T-GCN's .*\) in .*: save "
                                         r"DCRNN's metr-la.h5 or npz files"):
        load_dataset("metr-la", root=tmp_path)
