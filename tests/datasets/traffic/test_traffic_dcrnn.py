import hashlib
import shutil

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
    sim = build_simulator(cfg, progress=False)
    hist = sim.run()
    assert hist.metric == "mse_norm" and hist.higher_is_better is False
    test = hist.records[-1].test
    assert {"mae@3", "mse@6", "mape@12", "mse_norm"} <= set(test)
    assert all(torch.isfinite(v).all() for v in test.values())
