import hashlib
import os
import pickle
import shutil
import warnings

import numpy as np
import pytest
import torch

pd = pytest.importorskip("pandas")

from traffic_helpers import (  # noqa: E402 - imported after the pandas importorskip
    METR_GRAPH,
    Exploit,
    chain_adjacency,
    needs_real_graph,
    one_line_error,
    run_cli,
    speed_frame,
    write_graph,
    write_h5,
)

from pyg_fedgraph.datasets.traffic import (  # noqa: E402 - imported after the pandas importorskip
    METRLA,
    adjacency_to_edges,
    download_file,
    load_sensor_graph,
    read_speed_h5,
    verify_sha256,
)


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
        pickle.dump([["a"], {"a": 0}, Exploit(marker)], f, protocol=2)
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


def evil_speed_root(tmp_path, marker):
    root = tmp_path / "root"
    root.mkdir()
    write_graph(root / "adj_mx.pkl", ["0", "1"], chain_adjacency(2))
    frame = speed_frame(40, ["0", "1"]).astype(object)
    frame.iloc[3, 1] = Exploit(marker)                 # an object column with a payload
    write_h5(frame, root / "metr-la.h5")
    return root


def test_object_column_is_refused_and_runs_nothing(tmp_path, capfd):
    marker = tmp_path / "PWNED"
    root = evil_speed_root(tmp_path, marker)
    path = root / "metr-la.h5"
    message = one_line_error(lambda: read_speed_h5(path))
    assert message.startswith(f"{path}: columns ['0', '1'] hold variable-length data")
    assert "expected DCRNN's speed file" in message
    assert one_line_error(lambda: METRLA(root, verify=False)) == message
    assert run_cli(root, tmp_path / "out", capfd,
                   extra=["data.verify=false"]) == f"pyg-fedgraph: error: {message}"
    bare = write_h5(pd.DataFrame({"x": [Exploit(marker)]}), tmp_path / "bare.h5")
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
        f["df/axis1"].attrs["freq"] = np.bytes_(pickle.dumps(Exploit(marker_h5py), 0))
    write_h5(frame, by_tables)
    with tables.open_file(by_tables, "a") as f:  # PyTables pickles what it cannot store
        f.get_node("/df")._v_attrs.evil = Exploit(marker_tables)
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
    assert METRLA(good, verify=False).num_clients == 2
    for broken, content in (("adj_mx.pkl", os.urandom(2048)), ("adj_mx.pkl", b""),
                            ("metr-la.h5", os.urandom(2048)), ("metr-la.h5", b"")):
        root = tmp_path / f"{broken}-{len(content)}"
        shutil.copytree(good, root)
        (root / broken).write_bytes(content)
        message = one_line_error(lambda r=root: METRLA(r, verify=False))
        expected = "a pickle of [sensor_ids" if broken == "adj_mx.pkl" else "speed file"
        assert message.startswith(f"{root / broken} is not ") and expected in message
        assert run_cli(root, tmp_path / "out", capfd,
                       extra=["data.verify=false"]) == f"pyg-fedgraph: error: {message}"
