import pytest
import torch

from pyg_fedgraph.datasets import registry
from pyg_fedgraph.datasets.digits import digits
from pyg_fedgraph.datasets.registry import DATASETS, load_dataset, register_dataset


def valid_rows(split, client):
    n = int(split.counts[client])
    return split.x[client, :n], split.y[client, :n]


def test_digits_shapes_and_values():
    ds = digits()
    assert ds.name == "digits" and ds.num_clients == 10 and ds.num_classes == 10
    assert ds.input_shape == (64,)
    total = sum(int(ds.num_samples(s).sum()) for s in ("train", "val", "test"))
    assert total == 1797  # the whole set is dealt (10 clients x 2 classes cover 10 classes)
    for sp in ds.splits.values():
        assert sp.x.dtype == torch.float32 and sp.y.dtype == torch.long
        assert float(sp.x.min()) >= 0.0 and float(sp.x.max()) <= 1.0
    assert float(ds.splits["train"].x.max()) == 1.0  # scaled by 16, not by the max
    img = digits(image=True)
    assert img.input_shape == (1, 8, 8)
    assert torch.equal(img.splits["train"].x.flatten(2), ds.splits["train"].x)


def test_digits_pathological_two_classes_and_dominant_labels():
    ds = digits(num_clients=10, partition="pathological", classes_per_client=2, seed=1)
    for i in range(10):
        ys = torch.cat([valid_rows(sp, i)[1] for sp in ds.splits.values()])
        assert ys.unique().numel() == 2
        train_y = valid_rows(ds.splits["train"], i)[1]
        counts = torch.bincount(train_y, minlength=10)
        assert int(ds.client_labels[i]) in (counts == counts.max()).nonzero().view(-1).tolist()


@pytest.mark.parametrize("partition", ["iid", "dirichlet"])
def test_digits_other_partitions(partition):
    ds = digits(num_clients=5, partition=partition, beta=0.3, seed=0)
    assert ds.num_clients == 5 and ds.info["partition"] == partition
    assert int(ds.num_samples("val").min()) >= 1
    assert ds.client_labels.shape == (5,)


def test_digits_group_labels_are_groups():
    ds = digits(num_clients=10, partition="group", seed=0)
    assert ds.client_labels.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_digits_reproducible():
    a, b, c = digits(seed=4), digits(seed=4), digits(seed=5)
    assert torch.equal(a.splits["test"].x, b.splits["test"].x)
    assert not torch.equal(a.splits["test"].x, c.splits["test"].x)


def test_digits_bad_partition():
    with pytest.raises(ValueError, match="unknown partition 'shards'"):
        digits(partition="shards")


# ------------------------------------------------------------------ registry
def test_registry_names_and_load():
    assert {"fl60", "digits", "fashion-mnist", "mnist", "cifar10", "cifar100"} <= set(DATASETS)
    a = load_dataset("Digits", num_clients=4, partition="iid", seed=2)
    b = digits(num_clients=4, partition="iid", seed=2)
    assert torch.equal(a.splits["train"].x, b.splits["train"].x)
    assert load_dataset("fl60", num_clients=3, samples_per_client=10).num_clients == 3


def test_registry_unknown_and_duplicate(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown dataset 'emnist'; known: .*\bdigits, "):
        load_dataset("emnist")
    monkeypatch.setattr(DATASETS, "_entries", dict(DATASETS._entries))

    @register_dataset("toy_set")
    def toy(**kwargs):
        return digits(**kwargs)

    assert registry.DATASETS["toy-set"] is toy and "Toy_Set" in DATASETS
    with pytest.raises(ValueError, match="dataset name 'digits' is already taken by "
                                         "pyg_fedgraph.datasets.digits.digits"):
        register_dataset("digits")(toy)
