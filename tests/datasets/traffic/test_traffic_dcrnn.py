import hashlib
import shutil

import pytest
import torch

pd = pytest.importorskip("pandas")

from traffic_helpers import (  # noqa: E402
    METR_GRAPH,
    chain_adjacency,
    needs_real_graph,
    speed_frame,
    write_graph,
)

from pyg_fedgraph.datasets import load_dataset  # noqa: E402
from pyg_fedgraph.datasets.traffic import (  # noqa: E402
    METRLA,
    PEMSBAY,
    TrafficDataset,
    load_sensor_graph,
)

METR_SHA = "a35687c6e15aa228dc45027b0ed2a0ea0f4ec78f573deb992c595092d12f61b3"


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
