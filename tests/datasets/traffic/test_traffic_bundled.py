import csv
import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from traffic_helpers import SHARED, run_cli, speed_frame, write_h5

import pyg_fedgraph.datasets.traffic as traffic
from pyg_fedgraph.datasets import load_dataset
from pyg_fedgraph.datasets.traffic import (
    METRLA,
    PEMSBAY,
    bundled_sensor_graph,
    load_sensor_graph,
    synthetic_traffic,
)
from pyg_fedgraph.datasets.traffic.io import BUNDLED_GRAPHS

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "pyg_fedgraph" / "datasets" / "traffic" / "data"
needs_shared = pytest.mark.skipif(not (SHARED / "pems-bay" / "adj_mx_bay.pkl").exists(),
                                  reason="../shared/data not present")

# name, sensors, nonzeros of adj_mx (diagonal included), first id, latitude range
GRAPHS = [("metr-la", 207, 1722, "773869", (34.0, 34.3)),
          ("pems-bay", 325, 2694, "400001", (37.2, 37.5))]


def load_module(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name,n,nonzeros,first,latitudes", GRAPHS)
def test_bundled_graph_shapes_ids_and_direction(name, n, nonzeros, first, latitudes):
    g = bundled_sensor_graph(name)
    assert g.num_nodes == n and len(set(g.sensor_ids)) == n and g.sensor_ids[0] == first
    assert str(g) == f"SensorGraph({name}, num_nodes={n}, num_edges={nonzeros})"
    assert g.edge_index.shape == (2, nonzeros) and g.edge_index.dtype == torch.long
    assert g.edge_weight.dtype == torch.float32 and g.location.shape == (n, 2)
    loops = g.edge_index[0] == g.edge_index[1]
    assert int(loops.sum()) == n and bool((g.edge_weight[loops] == 1).all())
    assert float(g.edge_weight[~loops].min()) >= 0.1 and float(g.edge_weight.max()) <= 1
    pairs = g.edge_index[0] * n + g.edge_index[1]
    assert pairs.unique().numel() == nonzeros                       # no edge twice
    adj = g.to_dense()
    assert adj.dtype == np.float32 and int((adj != 0).sum()) == nonzeros
    assert not np.array_equal(adj, adj.T)                           # directed roads kept
    assert latitudes[0] < float(g.location[:, 0].min()) < float(g.location[:, 0].max()) \
        < latitudes[1]


def test_bundled_files_are_small_checked_and_licensed(monkeypatch):
    total = 0
    for name, (file, sha) in BUNDLED_GRAPHS.items():
        data = (DATA / file).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha, name
        with np.load(DATA / file, allow_pickle=False) as archive:   # no object arrays
            assert sorted(archive.files) == ["location", "sensor_ids", "source", "target",
                                             "weight"]
        total += len(data)
    assert total < 100_000          # against 2.36 MB for the two pickles
    notice = (DATA / "NOTICE").read_text()
    assert "Copyright (c) 2017 Yaguang Li" in notice and "MIT License" in notice
    assert "602afd9d767d3aa1c9b3eac51710d6aeee12c227" in notice
    monkeypatch.setitem(BUNDLED_GRAPHS, "metr-la", ("metr-la.npz", "0" * 64))
    with pytest.raises(ValueError, match=r"metr-la.npz bundled with pyg_fedgraph has sha256 "
                                         r"ff31b61d.*installation is corrupted"):
        bundled_sensor_graph("metr-la")
    with pytest.raises(ValueError, match="no bundled road graph 'la'"):
        bundled_sensor_graph("la")


@needs_shared
def test_bundled_graphs_reproduce_dcrnn_files_exactly(capsys):
    for name, pickle_file, locations, header in (
            ("metr-la", "metr-la/adj_mx.pkl", "metr-la/graph_sensor_locations.csv", True),
            ("pems-bay", "pems-bay/adj_mx_bay.pkl",
             "pems-bay/graph_sensor_locations_bay.csv", False)):
        g = bundled_sensor_graph(name)
        ids, adj = load_sensor_graph(SHARED / pickle_file)
        assert g.sensor_ids == ids
        assert g.to_dense().dtype == adj.dtype and np.array_equal(g.to_dense(), adj)
        with open(SHARED / locations, newline="") as f:
            rows = [r[1:] if header else r for r in list(csv.reader(f))[int(header):]]
        assert [r[0] for r in rows] == ids
        assert torch.equal(g.location, torch.tensor([[float(r[1]), float(r[2])] for r in rows],
                                                    dtype=torch.float64))
    # The committed files are what the script writes, byte for byte.
    script = load_module(REPO / "scripts" / "bundle_sensor_graphs.py")
    assert script.main(["--check", "--shared", str(SHARED)]) == 0
    assert "metr-la.npz  30098 bytes" in capsys.readouterr().out


def test_loaders_fall_back_to_the_bundled_graph(tmp_path):
    ids = bundled_sensor_graph("metr-la").sensor_ids
    write_h5(speed_frame(60, ids[::-1]), tmp_path / "metr-la.h5")  # no adj_mx.pkl in root
    ds = METRLA(tmp_path, verify=False)
    assert ds.num_clients == 207 and ds.sensor_ids == ids and ds.info["graph"] == "bundled"
    assert ds.edge_index.size(1) == 1722 - 207 and ds.info["synthetic"] is False
    for name, n in (("metr-la", 207), ("pems-bay", 325)):
        synthetic = load_dataset(name, synthetic_steps=300)
        assert synthetic.num_clients == n and synthetic.info["synthetic"] is True
        assert synthetic.info["graph"] == "bundled"
    bay = bundled_sensor_graph("pems-bay")
    table = synthetic_traffic("pems-bay", num_steps=50)
    assert table.sensor_ids == bay.sensor_ids and table.speed.shape == (50, 325)
    assert np.array_equal(table.speed, synthetic_traffic(bay, num_steps=50).speed)
    assert PEMSBAY.road_graph()[2] == "bundled"


def test_cli_hints_name_the_command_line_settings(tmp_path, capfd):
    empty = tmp_path / "empty"
    empty.mkdir()
    root_line = run_cli(empty, tmp_path / "out", capfd)
    assert f"{empty / 'metr-la.h5'} not found" in root_line
    assert "leave out --set data.root=DIR" in root_line
    assert "github.com/liyaguang/DCRNN" in root_line  # where the file comes from
    graph_line = run_cli(tmp_path / "nowhere", tmp_path / "out", capfd, setting="graph_path")
    assert f"{tmp_path / 'nowhere'} not found: expected DCRNN's adj_mx.pkl" in graph_line
    assert "leave out --set data.graph_path=DIR" in graph_line
    with pytest.raises(ValueError, match=r"download=True \(command line: --set "
                                         r"data.download=true\)"):
        METRLA(empty)
    assert not any("pass graph_path=" in line or "pass root=" in line
                   for line in (root_line, graph_line))


def test_example_needs_no_shared_folder(tmp_path):
    example = load_module(REPO / "examples" / "metr_la_traffic.py")
    args = example.build_parser().parse_args(["--quick"])
    assert args.graph is None and Path(args.out) == REPO / "runs" / "metr_la_traffic"
    assert "runs/" in (REPO / ".gitignore").read_text().split()
    data = example.load_data(args, 300)
    assert data.num_clients == 207 and data.info["synthetic"] is True
    assert data.info["graph"] == "bundled"
    ids = bundled_sensor_graph("metr-la").sensor_ids
    args = example.build_parser().parse_args(
        ["--h5", str(write_h5(speed_frame(60, ids), tmp_path / "metr-la.h5")), "--no-verify"])
    recorded = example.load_data(args, 300)
    assert recorded.info["synthetic"] is False and recorded.info["graph"] == "bundled"
    assert recorded.num_clients == 207


def test_package_exports_the_bundled_graph():
    assert {"SensorGraph", "bundled_sensor_graph"} <= set(traffic.__all__)
