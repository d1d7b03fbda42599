import pyg_fedgraph.datasets.traffic as traffic

# The public names of pyg_fedgraph.datasets.traffic when it was one module.
NAMES_OF_THE_MODULE = {
    "TrafficDataset", "METRLA", "PEMSBAY", "RemoteFile", "synthetic_traffic",
    "load_sensor_graph", "adjacency_to_edges", "read_speed_h5", "dcrnn_split_sizes",
    "verify_sha256", "download_file", "metr_la", "pems_bay",
}


def test_package_re_exports_every_public_name_from_its_modules():
    assert NAMES_OF_THE_MODULE <= set(traffic.__all__)
    homes = {name: getattr(traffic, name).__module__ for name in traffic.__all__}
    assert set(homes.values()) == {f"pyg_fedgraph.datasets.traffic.{m}"
                                   for m in ("io", "npz", "dataset", "dcrnn", "synthetic")}
    assert homes["TrafficDataset"].endswith(".dataset") and homes["METRLA"].endswith(".dcrnn")
    assert homes["read_speed_h5"].endswith(".io")
    assert homes["synthetic_traffic"].endswith(".synthetic")
