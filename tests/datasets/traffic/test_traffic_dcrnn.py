import hashlib
import shutil

import numpy as np
import pytest
import torch

pd = pytest.importorskip("pandas")

from traffic_helpers import (  # noqa: E402 - imported after the pandas importorskip
    METR_GRAPH,
    chain_adjacency,
    needs_real_graph,
    speed_frame,
    write_graph,
)

from pyg_fedgraph.datasets import load_dataset  # noqa: E402 - imported after the pandas importorskip
from pyg_fedgraph.datasets.traffic import (  # noqa: E402 - imported after the pandas importorskip
    METRLA,
    PEMSBAY,
    TrafficDataset,
    load_sensor_graph,
)


def test_metrla_reads_root_and_downloads_missing_files(tmp_path):
    pytest.importorskip("tables", reason="pandas writes HDF5 files with PyTables")
    ids = [str(100 + i) for i in range(4)]
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    speed_frame(60, ids).rename(columns=int).to_hdf(mirror / "metr-la.h5", key="df")  # int ids
    sha = hashlib.sha256((mirror / "metr-la.h5").read_bytes()).hexdigest()
    fetched = []

    def fetch(url, dest):
        fetched.append(url)
        shutil.copy(mirror / url.rsplit("/", 1)[-1], dest)

    root = tmp_path / "root"
    with pytest.raises(ValueError, match=r"metr-la.h5 not found, nor DCRNN's train.npz, val.npz "
                                         r"and test.npz in .* save DCRNN's metr-la.h5 there"):
        METRLA(root)
    with pytest.raises(ValueError, match="no direct public URL of metr-la.h5"):
        METRLA(root, download=True, fetch=fetch)
    root.mkdir()
    write_graph(root / "adj_mx.pkl", ids, chain_adjacency(4))   # a graph in root is used
    ds = METRLA(root, download=True, urls={"metr-la.h5": "https://mirror/metr-la.h5"},
                checksums={"metr-la.h5": sha}, fetch=fetch)
    assert fetched == ["https://mirror/metr-la.h5"]               # the graph is never fetched
    assert [r.name for r in METRLA.RESOURCES] == ["metr-la.h5"]
    assert ds.num_clients == 4 and ds.sensor_ids == ids and ds.info["synthetic"] is False
    assert ds.info["graph"] == str(root / "adj_mx.pkl")
    assert ds.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]]
    assert METRLA(root, verify=False).num_samples("test").tolist() == [7] * 4  # now in root


@needs_real_graph
def test_metrla_with_a_real_format_h5_has_207_clients(tmp_path):
    pytest.importorskip("tables")
    shutil.copy(METR_GRAPH, tmp_path / "adj_mx.pkl")
    ids, adj = load_sensor_graph(METR_GRAPH)
    frame = speed_frame(60, ids)
    shuffled = frame[list(reversed(ids))]                       # column order differs
    shuffled.to_hdf(tmp_path / "metr-la.h5", key="df")
    ds = METRLA(tmp_path, verify=False)
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
    loaded = load_dataset("metr-la", root=tmp_path, verify=False)
    assert loaded.num_clients == 207 and loaded.info["synthetic"] is False


def test_pemsbay_files_are_named_as_published(tmp_path):
    assert PEMSBAY.SPEED_FILE == "pems-bay.h5" and PEMSBAY.GRAPH_FILE == "adj_mx_bay.pkl"
    with pytest.raises(ValueError, match="pems-bay.h5 not found"):
        PEMSBAY(tmp_path)
    with pytest.raises(ValueError, match="adj_mx_bay.pkl not found"):
        PEMSBAY.road_graph(tmp_path)


def test_registered_builder_uses_synthetic_speeds_on_a_given_graph(tmp_path):
    ids = ["a", "b", "c", "d"]
    write_graph(tmp_path / "adj_mx.pkl", ids, chain_adjacency(4))
    ds = load_dataset("metr-la", graph_path=tmp_path, synthetic_steps=300, seed=0)
    assert isinstance(ds, TrafficDataset) and ds.info["synthetic"] is True
    assert ds.sensor_ids == ids and ds.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]]
    assert ds.info["graph"] == str(tmp_path / "adj_mx.pkl")
    # A root holding only the graph: synthetic speeds on it, as with graph_path.
    on_root = load_dataset("metr-la", root=tmp_path, synthetic_steps=300, seed=0)
    assert on_root.info["synthetic"] is True and on_root.sensor_ids == ids


def test_simulation_reports_horizon_metrics(tmp_path):
    from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
    ids = [str(i) for i in range(4)]
    write_graph(tmp_path / "adj_mx.pkl", ids, chain_adjacency(4))
    cfg = ExperimentConfig(dataset="metr-la", strategy="fedavg", rounds=2, overrides={
        "data.graph_path": str(tmp_path), "data.synthetic_steps": 200,
        "model.hidden_channels": 4, "steps": 2, "batch_size": 8})
    sim = build_simulator(cfg)
    hist = sim.run()
    assert hist.metric == "mse_norm" and hist.higher_is_better is False
    test = hist.records[-1].test
    assert {"mae@3", "mse@6", "mape@12", "mse_norm"} <= set(test)
    assert all(torch.isfinite(v).all() for v in test.values())


# ------------------------------------------------------------- sensor subsets
def test_the_speed_file_runs_at_any_size(tmp_path):
    pytest.importorskip("tables", reason="pandas writes HDF5 files with PyTables")
    from pyg_fedgraph.datasets.traffic import bundled_sensor_graph

    full = bundled_sensor_graph("metr-la")
    # A sensor and five road neighbours, in the graph's order.
    src, dst = full.edge_index[:, full.edge_index[0] != full.edge_index[1]]
    hub = int(torch.bincount(src).argmax())
    keep = sorted({hub, *dst[src == hub].tolist()[:5]})
    ids = [full.sensor_ids[k] for k in keep]
    frame = speed_frame(80, sorted(set(ids) | set(full.sensor_ids[:4])))   # and the first 4
    frame.to_hdf(tmp_path / "metr-la.h5", key="df")
    # Without a subset every sensor of the graph needs a column.
    with pytest.raises(ValueError, match="sensors of the graph have no speed column"):
        METRLA(tmp_path, verify=False)
    ds = METRLA(tmp_path, verify=False, sensors=[ids[3], ids[1], ids[5]])
    assert ds.sensor_ids == [ids[3], ids[1], ids[5]]
    torch.testing.assert_close(ds.speed, torch.tensor(frame[ds.sensor_ids].to_numpy(),
                                                      dtype=torch.float32))
    rows = [keep[3], keep[1], keep[5]]
    adj = full.to_dense()[np.ix_(rows, rows)]
    np.fill_diagonal(adj, 0.0)
    dense = np.zeros((3, 3), dtype=np.float32)
    dense[ds.edge_index[0].numpy(), ds.edge_index[1].numpy()] = ds.edge_weight.numpy()
    assert np.array_equal(dense, adj) and ds.edge_index.size(1) > 0
    first = load_dataset("metr-la", root=tmp_path, verify=False, num_sensors=4)
    assert first.sensor_ids == full.sensor_ids[:4]          # the graph's order
    (tmp_path / "ids.txt").write_text(f"{ids[2]},{ids[0]}")
    assert load_dataset("metr-la", root=tmp_path, verify=False,
                        sensors=str(tmp_path / "ids.txt")).sensor_ids == [ids[2], ids[0]]
    with pytest.raises(ValueError, match=r"1 of the requested sensors are not in the metr-la "
                                         r"road graph: 123"):
        METRLA(tmp_path, verify=False, sensors=[ids[0], 123])
    # Synthetic speeds take the same subsets of the road graph.
    synthetic = load_dataset("metr-la", num_sensors=10, synthetic_steps=300)
    assert synthetic.sensor_ids == full.sensor_ids[:10] and synthetic.info["synthetic"]


def test_the_dataset_options_reach_the_builder():
    from pyg_fedgraph.experiment import ExperimentConfig, route_overrides

    cfg = ExperimentConfig(dataset="metr-la", overrides={
        "data.sensors": [773869, "767541"], "data.num_sensors": 3, "data.verify": False})
    assert route_overrides(cfg)["data"] == {"sensors": [773869, "767541"], "num_sensors": 3,
                                            "verify": False}
    with pytest.raises(ValueError, match="data.num_sensors"):
        route_overrides(ExperimentConfig(dataset="pems-bay",
                                         overrides={"data.num_sensors": 0}))


# ------------------------------------------------------------- known checksums
def test_the_published_files_are_known():
    # Sizes and sha256 of the full files as pinned by Git LFS in public mirrors (issue 37).
    metr, bay = METRLA.resource("metr-la.h5"), PEMSBAY.resource("pems-bay.h5")
    assert (metr.size, metr.sha256) == (
        57_038_056, "64784b76d6fb8ec9bff4b6decafb354da2bb37840468fdccee5044e511277c05")
    assert (bay.size, bay.sha256) == (
        135_930_936, "65d69fb0a2323dba9867179eb7af47c8b814186bc459ff0a4937d21614153c8f")


def test_a_users_speed_file_is_verified_without_a_given_hash(tmp_path, monkeypatch):
    pytest.importorskip("tables", reason="pandas writes HDF5 files with PyTables")
    from pyg_fedgraph.datasets.traffic import RemoteFile, bundled_sensor_graph

    ids = bundled_sensor_graph("metr-la").sensor_ids
    path = tmp_path / "metr-la.h5"
    speed_frame(60, ids).to_hdf(path, key="df")
    data = path.read_bytes()
    size, sha = len(data), hashlib.sha256(data).hexdigest()
    # The real checksums: a file of another size is named as such, with the way out.
    with pytest.raises(ValueError, match=rf"{path} has {size:,} bytes, the published metr-la.h5 "
                                         r"57,038,056: a partial or different file.*pass "
                                         r"verify=False \(command line: --set "
                                         r"data.verify=false\)"):
        METRLA(tmp_path)
    # As if this file were the published one: it is read; one changed byte is refused.
    monkeypatch.setattr(METRLA, "RESOURCES", (RemoteFile("metr-la.h5", None, sha, size),))
    assert METRLA(tmp_path).num_clients == 207
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match=rf"sha256 of {path} is .*, expected {sha}: the file "
                                         r"is corrupted.*pass verify=False"):
        METRLA(tmp_path)
    assert METRLA(tmp_path, verify=False).num_clients == 207   # one byte of padding


def test_a_download_is_checked_against_the_known_checksum(tmp_path, monkeypatch):
    pytest.importorskip("tables", reason="pandas writes HDF5 files with PyTables")
    from pyg_fedgraph.datasets.traffic import RemoteFile

    ids = ["0", "1", "2"]
    mirror = tmp_path / "mirror.h5"
    speed_frame(60, ids).to_hdf(mirror, key="df")
    data = mirror.read_bytes()
    monkeypatch.setattr(METRLA, "RESOURCES", (RemoteFile(
        "metr-la.h5", None, hashlib.sha256(data).hexdigest(), len(data)),))
    root = tmp_path / "root"
    root.mkdir()
    write_graph(root / "adj_mx.pkl", ids, chain_adjacency(3))
    ds = METRLA(root, download=True, urls={"metr-la.h5": "https://mirror/metr-la.h5"},
                fetch=lambda url, dest: shutil.copy(mirror, dest))   # no checksum given
    assert ds.num_clients == 3
    (root / "metr-la.h5").unlink()
    with pytest.raises(ValueError, match="is corrupted or was tampered with"):
        METRLA(root, download=True, urls={"metr-la.h5": "https://mirror/metr-la.h5"},
               fetch=lambda url, dest: dest.write_bytes(data[:-5]))
    assert not (root / "metr-la.h5").exists() and not any(root.glob("*.part"))
