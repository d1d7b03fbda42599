import pickle

import numpy as np
import pytest
import torch

from pyg_fedgraph.datasets import vision
from pyg_fedgraph.datasets.registry import load_dataset


def test_missing_torchvision_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(vision, "WITH_TORCHVISION", False)
    for fn in (vision.cifar10, vision.cifar100):
        with pytest.raises(ImportError, match=r"pip install 'pyg-fedgraph\[vision\]'"):
            fn(tmp_path)


# ------------------------------------------------------------------ tiny files in the real format
def cifar_batch(labels, key, scale=10):
    # Rows are (3, 32, 32) flattened, channel-major; channel c of an image
    # equals scale * label + c, so a wrong axis order would show.
    data = (scale * labels[:, None, None] + np.arange(3)[None, :, None]).repeat(1024, axis=2)
    return {"data": data.reshape(len(labels), 3072).astype(np.uint8), key: labels.tolist()}


def dump(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def write_cifar10(root):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for b in range(1, 6):
        dump(folder / f"data_batch_{b}", cifar_batch(np.arange(10), "labels"))
    dump(folder / "test_batch", cifar_batch(np.arange(10), "labels"))
    dump(folder / "batches.meta", {"label_names": [f"c{k}" for k in range(10)]})


def write_cifar100(root):
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    # 2 * 99 + 2 still fits in uint8.
    train = cifar_batch(np.repeat(np.arange(100), 2), "fine_labels", scale=2)
    test = cifar_batch(np.arange(100), "fine_labels", scale=2)
    dump(folder / "train", train)
    dump(folder / "test", test)
    dump(folder / "meta", {"fine_label_names": [f"c{k}" for k in range(100)]})


def flat_split(ds, split):
    sp = ds.splits[split]
    mask = torch.arange(sp.x.size(1)) < sp.counts[:, None]
    return sp.x[mask], sp.y[mask]


@pytest.fixture
def no_md5(monkeypatch):
    # Tiny fake CIFAR files cannot match the official checksums.
    cifar = pytest.importorskip("torchvision.datasets.cifar")
    monkeypatch.setattr(cifar, "check_integrity", lambda *args, **kwargs: True)


def test_cifar10(tmp_path, no_md5):
    write_cifar10(tmp_path)
    ds = vision.cifar10(tmp_path, num_clients=3, partition="iid", seed=1)
    assert ds.name == "cifar10" and ds.num_classes == 10 and ds.input_shape == (3, 32, 32)
    assert sum(int(ds.num_samples(s).sum()) for s in ("train", "val", "test")) == 60
    x, y = flat_split(ds, "train")
    expected = (10 * y.view(-1, 1) + torch.arange(3)).float() / 255
    assert torch.allclose(x.mean(dim=(2, 3)), expected)
    again = load_dataset("cifar10", root=tmp_path, num_clients=3, partition="iid", seed=1)
    assert torch.equal(again.splits["train"].x, ds.splits["train"].x)


def test_cifar100(tmp_path, no_md5):
    write_cifar100(tmp_path)
    ds = vision.cifar100(tmp_path, num_clients=10, seed=0)  # pathological, 20 classes each
    assert ds.num_classes == 100 and ds.num_clients == 10
    assert sum(int(ds.num_samples(s).sum()) for s in ("train", "val", "test")) == 300
    for i in range(10):
        ys = torch.cat([sp.y[i, :sp.counts[i]] for sp in ds.splits.values()])
        assert ys.unique().numel() == 20
    x, y = flat_split(ds, "test")
    expected = (2 * y.view(-1, 1) + torch.arange(3)).float() / 255
    assert torch.allclose(x.mean(dim=(2, 3)), expected)


def test_cifar_options_without_torchvision(monkeypatch):
    # The torchvision reader stubbed: 10 classes x 6 images, pixel value = 10 * label.
    y = torch.arange(10).repeat_interleave(6)
    x = (10 * y).to(torch.uint8).view(-1, 1, 1, 1).expand(60, 3, 32, 32).contiguous()
    # (pooled images, labels, size of the official training set)
    monkeypatch.setattr(vision, "_load", lambda kind, root, download: (x, y, 50))
    ds = vision.cifar10("unused", num_clients=10, pairing="fixed", max_train_per_client=3,
                        max_test_per_client=1, seed=0)
    assert ds.defaults is vision.IMAGE_DEFAULTS and ds.defaults.model == "cnn"
    classes = [sorted(torch.cat([sp.y[i, :sp.counts[i]] for sp in ds.splits.values()])
                      .unique().tolist()) for i in range(10)]
    assert classes == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]] * 2
    # 2 classes x 3 images per client, split 4 / 1 / 1 (7:1:2 of 6), then capped.
    assert ds.num_samples("train").tolist() == [3] * 10
    assert ds.num_samples("val").tolist() == [1] * 10
    assert ds.num_samples("test").tolist() == [1] * 10
    xs, ys = flat_split(ds, "train")
    assert torch.equal(xs[:, :, 0, 0], (10 * ys).float().view(-1, 1).expand(-1, 3) / 255)
