import dataclasses
import gzip
import hashlib
import importlib
import json
import re

import numpy as np
import pytest
import torch
from idx_files import NAMES, idx_bytes, labelled_images, write_idx, write_mnist

from pyg_fedgraph.cli import main
from pyg_fedgraph.data import DatasetDefaults
from pyg_fedgraph.datasets.idx import IDXFile
from pyg_fedgraph.datasets.mnist import DEBIAN_FASHION_MNIST, fashion_mnist, mnist, read_mnist
from pyg_fedgraph.datasets.registry import DATASETS, load_dataset
from pyg_fedgraph.datasets.vision import label_weighted_test_split

# The package re-exports the builder ``mnist`` under the module's name.
mnist_module = importlib.import_module("pyg_fedgraph.datasets.mnist")


def flat_split(ds, split):
    sp = ds.splits[split]
    mask = torch.arange(sp.x.size(1)) < sp.counts[:, None]
    return sp.x[mask], sp.y[mask]


def client_classes(ds, i):
    return sorted(torch.cat([sp.y[i, :sp.counts[i]] for sp in ds.splits.values()])
                  .unique().tolist())


# ------------------------------------------------------------------ read_mnist
@pytest.mark.parametrize("layout,compress", [("flat", False), ("torchvision", True)])
def test_read_mnist_layouts(tmp_path, layout, compress):
    folder = tmp_path if layout == "flat" else tmp_path / "MNIST" / "raw"
    write_mnist(folder, per_class_train=3, per_class_test=1, compress=compress)
    arrays = read_mnist(tmp_path, "mnist")
    assert arrays.folder == folder
    assert arrays.train_images.shape == (30, 28, 28) and arrays.test_images.shape == (10, 28, 28)
    assert arrays.train_labels.dtype == np.int64
    assert arrays.train_labels.tolist() == np.repeat(np.arange(10), 3).tolist()
    assert np.array_equal(arrays.test_images[:, 5, 7], 20 * np.arange(10))


def test_read_mnist_torchvision_layout_is_per_variant(tmp_path):
    write_mnist(tmp_path / "FashionMNIST" / "raw")
    assert read_mnist(tmp_path, "fashion-mnist").train_images.shape == (40, 28, 28)
    with pytest.raises(FileNotFoundError, match="no MNIST IDX files"):
        read_mnist(tmp_path, "mnist")


def test_read_mnist_missing_files_say_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(
            "apt-get install dataset-fashion-mnist")) as err:
        read_mnist(tmp_path / "empty", "fashion-mnist")
    assert str(tmp_path / "empty") in str(err.value) and "download=True" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(FileNotFoundError, match="pass root=DIR holding them, or root=DIR and "
                                                "download=True to fetch them"):
        read_mnist(tmp_path / "empty", "mnist")
    with pytest.raises(FileNotFoundError, match=re.escape(
            "raw or .gz) found: root=None and no system folder holds them; pass root=DIR")):
        read_mnist(None, "mnist")
    # A folder with some of the files: the message says which are missing.
    write_idx(tmp_path / NAMES[0], labelled_images(1)[0])
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"({tmp_path} lacks {NAMES[1]}[.gz], {NAMES[2]}[.gz], {NAMES[3]}[.gz])")):
        read_mnist(tmp_path, "mnist")


def test_read_mnist_without_root_looks_in_the_system_folder(tmp_path, monkeypatch):
    assert str(DEBIAN_FASHION_MNIST) == "/usr/share/datasets/fashion-mnist"
    variant = mnist_module._VARIANTS["fashion-mnist"]
    monkeypatch.setitem(mnist_module._VARIANTS, "fashion-mnist",
                        dataclasses.replace(variant, system_folders=(tmp_path / "system",)))
    with pytest.raises(FileNotFoundError, match=re.escape(f"in {tmp_path / 'system'};")):
        read_mnist()
    write_mnist(tmp_path / "system", compress=True)
    assert read_mnist().folder == tmp_path / "system"


def test_read_mnist_checks_the_files_belong_together(tmp_path):
    write_mnist(tmp_path)
    images, labels = labelled_images(2)
    write_idx(tmp_path / NAMES[1], labels[:-1])
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / NAMES[0]} holds 40 images but {tmp_path / NAMES[1]} holds 19 labels")):
        read_mnist(tmp_path, "mnist")
    labels = labels.copy()
    labels[3] = 12
    write_idx(tmp_path / NAMES[1], labels)
    write_idx(tmp_path / NAMES[0], images)
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / NAMES[1]} holds label 12 outside 0..9, so it is not a label file of "
            f"MNIST; replace it with the published one")):
        read_mnist(tmp_path, "mnist")
    write_idx(tmp_path / NAMES[1], labelled_images(2)[1])
    write_idx(tmp_path / NAMES[0], np.zeros((20, 32, 32), dtype=np.uint8))
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / NAMES[0]} holds 32x32 images; MNIST images are 28x28")):
        read_mnist(tmp_path, "mnist")


def test_read_mnist_foreign_file_names_it(tmp_path):
    write_mnist(tmp_path, compress=True)
    png = tmp_path / f"{NAMES[2]}.gz"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    with pytest.raises(ValueError, match=re.escape(f"{png} is not an IDX images file")):
        read_mnist(tmp_path, "mnist")


def test_read_mnist_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="download=True needs root=DIR"):
        read_mnist(download=True)
    with pytest.raises(ValueError, match="unknown variant 'emnist'"):
        read_mnist(tmp_path, "emnist")


def test_download_through_the_builder_offline(tmp_path, monkeypatch):
    # The published checksums cannot match tiny files: publish tiny ones instead.
    arrays = {NAMES[0]: labelled_images(2)[0], NAMES[1]: labelled_images(2)[1],
              NAMES[2]: labelled_images(1)[0], NAMES[3]: labelled_images(1)[1]}
    served, files = {}, []
    for name, array in arrays.items():
        archive = gzip.compress(idx_bytes(array))
        served[f"https://mirror/{name}.gz"] = archive
        files.append(IDXFile(name, hashlib.md5(archive).hexdigest(),
                             hashlib.sha256(idx_bytes(array)).hexdigest()))
    variant = mnist_module._VARIANTS["mnist"]
    monkeypatch.setitem(mnist_module._VARIANTS, "mnist", dataclasses.replace(
        variant, files=tuple(files), mirrors=("https://down/", "https://mirror/")))
    requests = []

    def fetch(url, dest):
        requests.append(url)
        if url not in served:
            raise OSError("offline")
        dest.write_bytes(served[url])

    ds = mnist(tmp_path / "new", num_clients=5, partition="iid", download=True, fetch=fetch)
    assert sum(int(ds.num_samples(s).sum()) for s in ("train", "val", "test")) == 30
    assert requests == [u for name in NAMES for u in (f"https://down/{name}.gz",
                                                      f"https://mirror/{name}.gz")]
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == sorted(
        f"{n}.gz" for n in NAMES)
    # Files present: download=True fetches nothing.
    requests.clear()
    mnist(tmp_path / "new", num_clients=5, partition="iid", download=True, fetch=fetch)
    assert requests == []


def test_published_checksums_are_well_formed():
    for variant in mnist_module._VARIANTS.values():
        assert [f.name for f in variant.files] == list(NAMES)
        for f in variant.files:
            assert re.fullmatch("[0-9a-f]{32}", f.md5) and re.fullmatch("[0-9a-f]{64}", f.sha256)
        assert all(m.endswith("/") for m in variant.mirrors)


# ------------------------------------------------------------------ builders
@pytest.mark.parametrize("builder,name", [(fashion_mnist, "fashion-mnist"), (mnist, "mnist")])
def test_builders_pool_scale_and_carry_defaults(tmp_path, builder, name):
    write_mnist(tmp_path, compress=name == "mnist")
    ds = builder(tmp_path, num_clients=5, partition="pathological", classes_per_client=2, seed=0)
    assert ds.name == name and ds.num_classes == 10 and ds.num_clients == 5
    assert ds.input_shape == (1, 28, 28)
    # Train and test files are pooled: 10 x (4 + 2) = 60 samples dealt.
    assert sum(int(ds.num_samples(s).sum()) for s in ("train", "val", "test")) == 60
    for s in ("train", "val", "test"):
        x, y = flat_split(ds, s)
        assert x.dtype == torch.float32
        assert torch.equal(x, (20 * y).float().view(-1, 1, 1, 1).expand_as(x) / 255)
    assert all(len(client_classes(ds, i)) == 2 for i in range(5))
    assert ds.client_labels.shape == (5,)
    assert ds.defaults == DatasetDefaults(
        "cnn", {}, {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5, "batch_size": 64,
                    "steps": 200}, rounds=50)
    assert ds.info["source"].endswith(f"IDX files in {tmp_path}")
    again = load_dataset(name, root=tmp_path, num_clients=5, seed=0)
    assert torch.equal(again.splits["train"].x, ds.splits["train"].x)


def test_registry_has_both_names():
    assert DATASETS["fashion-mnist"] is fashion_mnist and DATASETS["mnist"] is mnist


def test_fixed_pairing_and_caps_through_the_builder(tmp_path):
    write_mnist(tmp_path, per_class_train=10, per_class_test=10)  # 20 per class, 200 in all
    ds = fashion_mnist(tmp_path, num_clients=10, pairing="fixed", max_train_per_client=9,
                       max_val_per_client=2, max_test_per_client=3, seed=3)
    # Clients i and i + 5 hold classes (2 (i mod 5), 2 (i mod 5) + 1).
    assert [client_classes(ds, i) for i in range(10)] == [[0, 1], [2, 3], [4, 5], [6, 7],
                                                          [8, 9]] * 2
    # Each client holds 2 classes x 10 samples = 20, split 14 / 2 / 4, then capped.
    assert ds.num_samples("train").tolist() == [9] * 10
    assert ds.num_samples("val").tolist() == [2] * 10
    assert ds.num_samples("test").tolist() == [3] * 10
    assert ds.info["pairing"] == "fixed"


def test_global_weighted_test_set_through_the_builder(tmp_path):
    write_mnist(tmp_path, per_class_train=10, per_class_test=3)  # 100 train, 30 test images
    ds = fashion_mnist(tmp_path, num_clients=5, pairing="fixed", test_set="global-weighted")
    assert ds.info["test_set"] == "global-weighted"
    # Only the 100 official training images are dealt: 20 per client, 80 / 20 train / val.
    assert ds.num_samples("train").tolist() == [16] * 5
    assert ds.num_samples("val").tolist() == [4] * 5
    # Client i is tested on the 6 official test images of its classes (2i, 2i + 1),
    # each weighing 1/2, its share of either class.
    assert ds.num_samples("test").tolist() == [6] * 5
    test = ds.splits["test"]
    for i in range(5):
        assert sorted(test.y[i].tolist()) == [2 * i] * 3 + [2 * i + 1] * 3
        assert torch.equal(test.weight[i], torch.full((6,), 0.5))
        # Pixels equal 20 * label / 255: the rows are the test images of those labels.
        assert torch.allclose(test.x[i].amax(dim=(1, 2, 3)), 20 * test.y[i] / 255.0)
    capped = fashion_mnist(tmp_path, num_clients=5, pairing="fixed",
                           test_set="global-weighted", max_test_per_client=4)
    assert capped.num_samples("test").tolist() == [4] * 5
    with pytest.raises(ValueError, match=r"fractions must give no share to a client test"):
        fashion_mnist(tmp_path, num_clients=5, test_set="global-weighted",
                      fractions=(0.7, 0.1, 0.2))
    with pytest.raises(ValueError, match="unknown test_set 'global'"):
        fashion_mnist(tmp_path, num_clients=5, test_set="global")


def test_label_weighted_test_split_by_hand():
    counts = torch.tensor([[3, 1, 0], [0, 0, 2]])
    x = torch.arange(4.0).view(4, 1)
    y = torch.tensor([0, 1, 2, 0])
    split = label_weighted_test_split(x, y, counts)
    assert split.counts.tolist() == [3, 1]
    assert split.y[0].tolist() == [0, 1, 0] and split.x[0].view(-1).tolist() == [0.0, 1.0, 3.0]
    assert split.weight[0].tolist() == [0.75, 0.25, 0.75]
    # Padding rows weigh 0.
    assert split.y[1, :1].tolist() == [2] and split.weight[1].tolist() == [1.0, 0.0, 0.0]


# ------------------------------------------------------------------ command line
def test_cli_runs_fashion_mnist_from_idx_files_with_its_defaults(tmp_path, capsys):
    write_mnist(tmp_path / "data", compress=True)
    out = tmp_path / "run"
    code = main(["run", "--dataset", "fashion-mnist", "--strategy", "fedavg", "--rounds", "1",
                 "--clients", "5", "--out", str(out), "--quiet",
                 "--set", f"data.root={tmp_path / 'data'}", "--set", "data.pairing=fixed",
                 "--set", "data.max_train_per_client=3", "--set", "steps=1"])
    assert code == 0, capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["resolved"]["model"].startswith("SimpleCNN(1, 10, image_size=(28, 28))")
    local = config["resolved"]["local"]
    assert (local["lr"], local["momentum"], local["weight_decay"], local["batch_size"],
            local["steps"]) == (0.01, 0.9, 1e-5, 64, 1)
    assert json.loads((out / "summary.json").read_text())["dataset"] == "fashion-mnist"


def test_cli_says_how_to_get_missing_fashion_mnist(tmp_path, capsys):
    code = main(["run", "--dataset", "fashion-mnist", "--strategy", "fedavg", "--out",
                 str(tmp_path / "run"), "--quiet", "--set", f"data.root={tmp_path / 'none'}"])
    assert code == 2
    err = capsys.readouterr().err
    assert "apt-get install dataset-fashion-mnist" in err and "download=True" in err


# ------------------------------------------------------------------ real data
def _debian_files_present():
    return all((DEBIAN_FASHION_MNIST / f"{n}.gz").is_file() for n in NAMES)


real_fashion_mnist = pytest.mark.skipif(
    not _debian_files_present(),
    reason=f"Fashion-MNIST not installed in {DEBIAN_FASHION_MNIST} "
           f"(apt-get install dataset-fashion-mnist)")


@pytest.mark.real_data
@real_fashion_mnist
def test_real_fashion_mnist_files():
    arrays = read_mnist()
    assert arrays.folder == DEBIAN_FASHION_MNIST
    assert arrays.train_images.shape == (60000, 28, 28)
    assert arrays.test_images.shape == (10000, 28, 28)
    assert np.bincount(arrays.train_labels).tolist() == [6000] * 10
    assert np.bincount(arrays.test_labels).tolist() == [1000] * 10
    # Mean training pixel on [0, 1] pixels (the usual 0.2860 normalization constant).
    assert round(float(arrays.train_images.mean(dtype=np.float64) / 255), 4) == 0.2860
    # Debian re-compressed the archives, but the data is the published data.
    for f in mnist_module._VARIANTS["fashion-mnist"].files:
        data = gzip.decompress((DEBIAN_FASHION_MNIST / f"{f.name}.gz").read_bytes())
        assert hashlib.sha256(data).hexdigest() == f.sha256


@pytest.mark.real_data
@real_fashion_mnist
def test_real_fashion_mnist_pfedgraph_split():
    ds = fashion_mnist(pairing="fixed", max_train_per_client=3072)
    assert [client_classes(ds, i) for i in range(10)] == [[0, 1], [2, 3], [4, 5], [6, 7],
                                                          [8, 9]] * 2
    # 70,000 images pooled, 7,000 per client, 7:1:2 split, training capped at 3,072.
    assert ds.num_samples("train").tolist() == [3072] * 10
    assert ds.num_samples("val").tolist() == [700] * 10
    assert ds.num_samples("test").tolist() == [1400] * 10
