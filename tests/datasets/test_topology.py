"""The topology dataset (FedCEDAR's case study) on its three bases: scikit-learn's digits,
MNIST and Fashion-MNIST read from IDX files (written here in the real format, and the
real Fashion-MNIST files where Debian's package installed them)."""
import re
from pathlib import Path

import pytest
import torch
from idx_files import write_mnist

from pyg_fedgraph.datasets import TOPOLOGY_BASES, topology
from pyg_fedgraph.datasets.mnist import DEBIAN_FASHION_MNIST
from pyg_fedgraph.datasets.topology import ring_topology
from pyg_fedgraph.experiment import ExperimentConfig
from pyg_fedgraph.experiment.build import build_dataset, route_overrides


def client_samples(data, i):
    r"""Client ``i``'s inputs and labels over its three splits."""
    xs, ys = [], []
    for sp in data.splits.values():
        xs.append(sp.x[i, :int(sp.counts[i])])
        ys.append(sp.y[i, :int(sp.counts[i])])
    return torch.cat(xs), torch.cat(ys)


def test_fashion_mnist_base_deals_each_nodes_classes_to_its_clients(tmp_path):
    # 6 train + 2 test images per class, every pixel 20 * label: 8 per class pooled.
    write_mnist(tmp_path, per_class_train=6, per_class_test=2)
    data = topology(num_groups=3, num_clients=6, base="fashion-mnist", root=tmp_path)
    assert TOPOLOGY_BASES == ("digits", "mnist", "fashion-mnist")
    assert data.input_shape == (784,) and data.splits["train"].x.dtype == torch.float32
    assert data.client_labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert data.info["base"] == "fashion-mnist" and str(tmp_path) in data.info["source"]
    groups = ring_topology(3)  # [[0, 1, 2], [2, 3, 4], [0, 4, 5]]
    seen = torch.zeros(10, dtype=torch.long)
    for i in range(6):
        x, y = client_samples(data, i)
        assert set(y.tolist()) == set(groups[i // 2])
        # Inputs stay with their labels, scaled to [0, 1].
        torch.testing.assert_close(x, (20 * y[:, None].float() / 255).expand(-1, 784))
        seen += torch.bincount(y, minlength=10)
    # Classes 0, 2, 4 are held by two nodes (4 clients), 1, 3, 5 by one (2 clients):
    # all 8 images of each used class are dealt, the classes of no node are not.
    assert seen.tolist() == [8] * 6 + [0] * 4


def test_mnist_base_reads_torchvision_layout_as_images(tmp_path):
    write_mnist(tmp_path / "MNIST" / "raw", per_class_train=5, per_class_test=1)
    data = topology(groups=[[1, 7], [7, 9]], num_clients=4, base="mnist", root=tmp_path,
                    image=True, fractions=(0.5, 0.25, 0.25))
    assert data.input_shape == (1, 28, 28)
    x, y = client_samples(data, 3)
    assert set(y.tolist()) == {7, 9}
    torch.testing.assert_close(x[:, 0, 13, 5], 20 * y.float() / 255)
    # Class 7: 6 images for 4 clients (2, 2, 1, 1); class 9: 6 for clients 2 and 3.
    counts = torch.stack([torch.bincount(client_samples(data, i)[1], minlength=10)
                          for i in range(4)])
    assert counts[:, 7].tolist() == [2, 2, 1, 1] and counts[:, 9].tolist() == [0, 0, 3, 3]


def test_max_train_per_client_caps_the_training_split_only(tmp_path):
    write_mnist(tmp_path, per_class_train=18, per_class_test=2)
    full = topology(num_groups=2, num_clients=2, base="fashion-mnist", root=tmp_path)
    capped = topology(num_groups=2, num_clients=2, base="fashion-mnist", root=tmp_path,
                      max_train_per_client=10)
    # Ring of 2 nodes, {0, 1, 2} and {0, 2, 3}: each client holds 10 + 20 + 10 images of
    # its classes (the shared 0 and 2 halved), 70% of 40 to train.
    assert full.splits["train"].counts.tolist() == [28, 28]
    assert capped.splits["train"].counts.tolist() == [10, 10]
    for split in ("val", "test"):
        assert capped.splits[split].counts.tolist() == full.splits[split].counts.tolist()


def test_base_is_an_option_of_runs(tmp_path):
    write_mnist(tmp_path / "FashionMNIST" / "raw")
    cfg = ExperimentConfig(dataset="topology", strategy="fedavg", clients=3, rounds=1,
                           overrides={"data.base": "fashion-mnist", "data.root": str(tmp_path),
                                      "data.num_groups": 3})
    data = build_dataset(cfg, route_overrides(cfg)["data"])
    assert data.info["base"] == "fashion-mnist" and data.input_shape == (784,)


def test_base_errors_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match=re.escape(
            "unknown base 'cifar10'; choose one of ('digits', 'mnist', 'fashion-mnist')")):
        topology(base="cifar10")
    with pytest.raises(ValueError, match="root= and download= are for base='mnist' or "
                                         "'fashion-mnist'"):
        topology(base="digits", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="no Fashion-MNIST IDX files .*"
                                                "apt-get install dataset-fashion-mnist"):
        topology(base="fashion-mnist", root=tmp_path / "empty")
    write_mnist(tmp_path, per_class_train=1, per_class_test=0)
    # Class 0 of the 3-node ring goes to 4 of 6 clients but has one image.
    with pytest.raises(ValueError, match="class 0 has 1 samples for 4 clients"):
        topology(num_groups=3, num_clients=6, base="fashion-mnist", root=tmp_path)


@pytest.mark.skipif(not (Path(DEBIAN_FASHION_MNIST) / "t10k-labels-idx1-ubyte.gz").is_file(),
                    reason=f"Fashion-MNIST not installed in {DEBIAN_FASHION_MNIST} "
                           "(apt-get install dataset-fashion-mnist)")
def test_real_fashion_mnist_topology_of_the_paper_layout():
    # FedCEDAR's Topology 1: 3 nodes of 20 clients; 6 classes of 7,000 images each.
    data = topology(num_groups=3, num_clients=60, base="fashion-mnist")
    assert data.num_samples("train").tolist() == [490] * 60
    assert data.num_samples("val").tolist() == [70] * 60
    assert data.num_samples("test").tolist() == [140] * 60
    x, y = client_samples(data, 59)
    assert set(y.tolist()) == {0, 4, 5} and 0.0 <= float(x.min()) < float(x.max()) <= 1.0
