import math
import re

import pytest
import torch

from pyg_fedgraph.data.federated_dataset import ClientSplit
from pyg_fedgraph.data.partition import (
    build_federated_dataset,
    dirichlet_partition,
    dominant_class,
    group_partition,
    iid_partition,
    partition_labels,
    pathological_partition,
    split_client,
)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def assert_disjoint_cover(parts, num_samples):
    cat = torch.cat(parts)
    assert cat.numel() == num_samples
    assert torch.equal(cat.sort().values, torch.arange(num_samples))


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def mean_entropy(labels, parts, num_classes):
    out = []
    for p in parts:
        q = torch.bincount(labels[p], minlength=num_classes).double() / p.numel()
        q = q[q > 0]
        out.append(float(-(q * q.log()).sum()))
    return sum(out) / len(out)


LABELS = torch.arange(10).repeat_interleave(20)  # 10 classes x 20 samples


# ------------------------------------------------------------------ iid
@pytest.mark.parametrize("balanced", [False, True])
def test_iid_partition_covers_and_reproduces(balanced):
    parts = iid_partition(103, 7, generator=gen(0), balanced=balanced)
    assert len(parts) == 7
    assert_disjoint_cover(parts, 103)
    assert same(parts, iid_partition(103, 7, generator=gen(0), balanced=balanced))
    assert not same(parts, iid_partition(103, 7, generator=gen(1), balanced=balanced))
    if balanced:
        assert sorted(p.numel() for p in parts) == [14] * 2 + [15] * 5


def test_iid_partition_errors():
    with pytest.raises(ValueError, match="cannot deal 3 samples to 4 clients"):
        iid_partition(3, 4, generator=gen())
    with pytest.raises(ValueError, match=r"client \d+ received no samples"):
        # 5 samples to 5 clients at random: some client is almost surely empty.
        iid_partition(5, 5, generator=gen(0))
    assert all(p.numel() == 1 for p in iid_partition(5, 5, generator=gen(0), balanced=True))


# ------------------------------------------------------------------ pathological
@pytest.mark.parametrize("num_clients,c", [(10, 2), (7, 3), (13, 4), (4, 10), (20, 1)])
def test_pathological_exact_classes(num_clients, c):
    parts = pathological_partition(LABELS, num_clients, c, generator=gen(3))
    assert_disjoint_cover(parts, LABELS.numel())
    for p in parts:
        assert LABELS[p].unique().numel() == c
    # Round-robin: every class is held by floor(Nc/C) or ceil(Nc/C) clients.
    holders = torch.zeros(10, dtype=torch.long)
    for p in parts:
        holders[LABELS[p].unique()] += 1
    assert int(holders.max() - holders.min()) <= 1


def test_pathological_equal_amounts():
    # 10 clients x 2 classes over 10 classes: each class is held by exactly two
    # clients, so each client gets 10 + 10 samples.
    parts = pathological_partition(LABELS, 10, 2, generator=gen(0))
    assert [p.numel() for p in parts] == [20] * 10
    for p in parts:
        assert torch.bincount(LABELS[p], minlength=10).max() == 10


def test_pathological_reproducible():
    a = pathological_partition(LABELS, 10, 2, generator=gen(5))
    assert same(a, pathological_partition(LABELS, 10, 2, generator=gen(5)))
    assert not same(a, pathological_partition(LABELS, 10, 2, generator=gen(6)))


def test_pathological_errors():
    with pytest.raises(ValueError, match="classes_per_client=11 but the labels hold 10"):
        pathological_partition(LABELS, 10, 11, generator=gen())
    with pytest.raises(ValueError, match="classes_per_client=0"):
        pathological_partition(LABELS, 10, 0, generator=gen())
    with pytest.raises(ValueError, match="cannot deal 200 samples to 201 clients"):
        pathological_partition(LABELS, 201, 2, generator=gen())
    # Class 0 has one sample but two holders: one of them ends up empty.
    labels = torch.tensor([0, 1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match=r"client \d received no samples"):
        pathological_partition(labels, 4, 1, generator=gen())
    with pytest.raises(TypeError, match="integer class ids"):
        pathological_partition(LABELS.float(), 10, 2, generator=gen())


def test_pathological_random_pairing_is_unchanged():
    # Values of the implementation before pairing= existed: the default draws stay the same.
    parts = pathological_partition(LABELS, 10, 2, generator=gen(0))
    assert same(parts, pathological_partition(LABELS, 10, 2, generator=gen(0), pairing="random"))
    assert [LABELS[p].unique().tolist() for p in parts] == [
        [1, 4], [5, 7], [3, 9], [0, 8], [2, 6], [3, 9], [2, 4], [7, 8], [0, 6], [1, 5]]
    assert [p[:3].tolist() for p in parts] == [
        [20, 22, 26], [100, 101, 102], [60, 61, 63], [2, 5, 7], [43, 44, 45], [62, 64, 68],
        [40, 41, 42], [143, 144, 145], [0, 1, 3], [21, 23, 24]]


def test_pathological_fixed_pairing_hand_checked():
    # pFedGraph's blocks: client i holds classes (2 (i mod 5), 2 (i mod 5) + 1), so
    # every class has two holders with 10 samples each.
    parts = pathological_partition(LABELS, 10, 2, generator=gen(0), pairing="fixed")
    assert [LABELS[p].unique().tolist() for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7],
                                                            [8, 9]] * 2
    assert [p.numel() for p in parts] == [20] * 10
    assert_disjoint_cover(parts, LABELS.numel())
    # 7 clients: classes 0-3 have two holders (10 samples each), classes 4-9 one (20).
    parts = pathological_partition(LABELS, 7, 2, generator=gen(0), pairing="fixed")
    assert [LABELS[p].unique().tolist() for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7],
                                                            [8, 9], [0, 1], [2, 3]]
    assert [p.numel() for p in parts] == [20, 20, 40, 40, 40, 20, 20]
    # 5 classes per client: two blocks.
    parts = pathological_partition(LABELS, 4, 5, generator=gen(0), pairing="fixed")
    assert [LABELS[p].unique().tolist() for p in parts] == [[0, 1, 2, 3, 4],
                                                            [5, 6, 7, 8, 9]] * 2


def test_pathological_fixed_pairing_uses_sorted_labels_and_seeds_only_samples():
    labels = torch.tensor([9, 3, 7, 5] * 6)
    a = pathological_partition(labels, 4, 2, generator=gen(1), pairing="fixed")
    b = pathological_partition(labels, 4, 2, generator=gen(2), pairing="fixed")
    assert [labels[p].unique().tolist() for p in a] == [[3, 5], [7, 9], [3, 5], [7, 9]]
    assert [labels[p].unique().tolist() for p in b] == [[3, 5], [7, 9], [3, 5], [7, 9]]
    assert not same(a, b)  # which samples of a class go to which holder is random


def test_pathological_fixed_pairing_warns_about_unused_classes(caplog):
    with caplog.at_level("WARNING", logger="pyg_fedgraph.data.partition"):
        parts = pathological_partition(LABELS, 3, 2, generator=gen(0), pairing="fixed")
    assert [LABELS[p].unique().tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]
    assert "leave 4 of the 10 classes unused" in caplog.text


def test_pathological_pairing_errors():
    with pytest.raises(ValueError, match="classes_per_client=3, which must divide 10; choose a "
                                         "divisor or pairing='random'"):
        pathological_partition(LABELS, 10, 3, generator=gen(), pairing="fixed")
    with pytest.raises(ValueError, match="unknown pairing 'sorted'"):
        pathological_partition(LABELS, 10, 2, generator=gen(), pairing="sorted")
    with pytest.raises(ValueError, match="pairing='fixed' applies to the pathological partition "
                                         "only, got partition='iid'"):
        partition_labels(LABELS, 10, "iid", generator=gen(), pairing="fixed")
    parts, _ = partition_labels(LABELS, 10, "pathological", generator=gen(), pairing="fixed")
    assert LABELS[parts[6]].unique().tolist() == [2, 3]


# ------------------------------------------------------------------ dirichlet
def test_dirichlet_covers_and_respects_min_size():
    parts = dirichlet_partition(LABELS, 8, 0.5, generator=gen(0), min_size=5)
    assert len(parts) == 8
    assert_disjoint_cover(parts, LABELS.numel())
    assert min(p.numel() for p in parts) >= 5


def test_dirichlet_smaller_beta_more_heterogeneous():
    labels = torch.arange(10).repeat_interleave(100)
    ent = {beta: mean_entropy(labels, dirichlet_partition(labels, 10, beta, generator=gen(1),
                                                          min_size=1), 10)
           for beta in (0.1, 1.0, 100.0)}
    assert ent[0.1] < ent[1.0] < ent[100.0]
    assert ent[100.0] > 0.95 * math.log(10)  # near-IID


def test_dirichlet_reproducible():
    a = dirichlet_partition(LABELS, 5, 0.5, generator=gen(2), min_size=1)
    assert same(a, dirichlet_partition(LABELS, 5, 0.5, generator=gen(2), min_size=1))
    assert not same(a, dirichlet_partition(LABELS, 5, 0.5, generator=gen(3), min_size=1))


def test_dirichlet_errors():
    with pytest.raises(ValueError, match="beta must be positive, got 0"):
        dirichlet_partition(LABELS, 5, 0.0, generator=gen())
    with pytest.raises(ValueError, match="min_size=50 exceeds the 200 samples"):
        dirichlet_partition(LABELS, 5, 0.5, generator=gen(), min_size=50)
    with pytest.raises(ValueError, match="after 2 Dirichlet draws"):
        dirichlet_partition(LABELS, 10, 0.01, generator=gen(), min_size=19, max_retries=2)


# ------------------------------------------------------------------ group
def test_group_partition_groups_and_dominant_classes():
    parts, group = group_partition(LABELS, 10, 5, 0.0, generator=gen(0))
    assert group.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert_disjoint_cover(parts, LABELS.numel())
    for i, p in enumerate(parts):
        # No IID share: group g only sees its classes {2g, 2g + 1}, in equal pieces.
        assert set(LABELS[p].tolist()) <= {2 * int(group[i]), 2 * int(group[i]) + 1}
        assert p.numel() == 20


def test_group_partition_iid_share():
    labels = torch.arange(10).repeat_interleave(100)
    parts, group = group_partition(labels, 10, 5, 0.2, generator=gen(0))
    assert_disjoint_cover(parts, labels.numel())
    for i, p in enumerate(parts):
        own = (labels[p] // 2 == group[i]).double().mean()
        # 80% dominant + 20% IID of which a fifth is in the own group: 0.84.
        assert 0.75 < float(own) < 0.92
        assert labels[p].unique().numel() > 2
    again, _ = group_partition(labels, 10, 5, 0.2, generator=gen(0))
    assert same(parts, again)
    other, _ = group_partition(labels, 10, 5, 0.2, generator=gen(1))
    assert not same(parts, other)


def test_group_partition_errors():
    with pytest.raises(ValueError, match=r"num_groups=6 must be in \[1, .*\] = \[1, 5\]"):
        group_partition(LABELS, 5, 6, generator=gen())
    with pytest.raises(ValueError, match=r"iid_share must be in \[0, 1\)"):
        group_partition(LABELS, 10, 5, 1.0, generator=gen())


def test_partition_labels_dispatch():
    parts, group = partition_labels(LABELS, 5, "group", generator=gen(0))
    assert group is not None and len(parts) == 5
    parts, group = partition_labels(LABELS, 10, "pathological", generator=gen(0),
                                    classes_per_client=3)
    assert group is None and all(LABELS[p].unique().numel() == 3 for p in parts)
    with pytest.raises(ValueError, match="unknown partition 'shards'"):
        partition_labels(LABELS, 5, "shards", generator=gen())


# ------------------------------------------------------------------ split_client
def test_split_client_sizes():
    train, val, test = split_client(torch.arange(100, 200), generator=gen(0))
    assert (train.numel(), val.numel(), test.numel()) == (70, 10, 20)
    assert torch.equal(torch.cat([train, val, test]).sort().values, torch.arange(100, 200))
    sizes = [t.numel() for t in split_client(torch.arange(100), (0.64, 0.16, 0.2),
                                             generator=gen(0))]
    assert sizes == [64, 16, 20]
    sizes = [t.numel() for t in split_client(torch.arange(10), (0.8, 0.0, 0.2),
                                             generator=gen(0))]
    assert sizes == [8, 0, 2]


@pytest.mark.parametrize("n", list(range(3, 40)))
def test_split_client_every_split_nonempty(n):
    parts = split_client(torch.arange(n), generator=gen(n))
    assert all(p.numel() >= 1 for p in parts)
    assert sum(p.numel() for p in parts) == n


def test_split_client_reproducible_and_errors():
    a = split_client(torch.arange(50), generator=gen(4))
    assert same(a, split_client(torch.arange(50), generator=gen(4)))
    assert not same(a, split_client(torch.arange(50), generator=gen(5)))
    with pytest.raises(ValueError, match="must sum to 1"):
        split_client(torch.arange(10), (0.7, 0.1, 0.1), generator=gen())
    with pytest.raises(ValueError, match="non-negative"):
        split_client(torch.arange(10), (1.1, -0.1, 0.0), generator=gen())
    with pytest.raises(ValueError, match=r"\(train, val, test\)"):
        split_client(torch.arange(10), (0.5, 0.5), generator=gen())


# ------------------------------------------------------------------ build
def test_build_federated_dataset():
    x = torch.arange(30, dtype=torch.float32).view(30, 1)
    y = torch.arange(30) % 3
    parts = [torch.arange(0, 10), torch.arange(10, 13), torch.arange(13, 30)]
    ds = build_federated_dataset("toy", x, y, parts, num_classes=3, generator=gen(0),
                                 info={"k": 1})
    assert ds.num_clients == 3 and ds.input_shape == (1,)
    assert ds.num_samples("train").tolist() == [7, 1, 12]
    assert ds.num_samples("val").tolist() == [1, 1, 2]
    assert ds.num_samples("test").tolist() == [2, 1, 3]
    for i, part in enumerate(parts):
        seen = torch.cat([sp.x[i, :sp.counts[i], 0] for sp in ds.splits.values()])
        assert torch.equal(seen.sort().values.long(), part)
        tr = ds.splits["train"]
        assert torch.equal(tr.y[i, :tr.counts[i]], tr.x[i, :tr.counts[i], 0].long() % 3)
    assert ds.info == {"k": 1}


def test_build_federated_dataset_caps():
    x = torch.arange(30, dtype=torch.float32).view(30, 1)
    y = torch.arange(30) % 3
    parts = [torch.arange(0, 10), torch.arange(10, 13), torch.arange(13, 30)]
    full = build_federated_dataset("toy", x, y, parts, num_classes=3, generator=gen(0))
    capped = build_federated_dataset("toy", x, y, parts, num_classes=3, generator=gen(0),
                                     max_train_per_client=5, max_val_per_client=1,
                                     max_test_per_client=2)
    # Uncapped: train [7, 1, 12], val [1, 1, 2], test [2, 1, 3].
    assert capped.num_samples("train").tolist() == [5, 1, 5]
    assert capped.num_samples("val").tolist() == [1, 1, 1]
    assert capped.num_samples("test").tolist() == [2, 1, 2]
    # A cap keeps the first samples of the (shuffled) split: no extra random draw.
    for split in ("train", "val", "test"):
        for i in range(3):
            n = int(capped.splits[split].counts[i])
            assert torch.equal(capped.splits[split].x[i, :n], full.splits[split].x[i, :n])
    # Caps above the sizes change nothing.
    loose = build_federated_dataset("toy", x, y, parts, num_classes=3, generator=gen(0),
                                    max_train_per_client=100)
    assert torch.equal(loose.splits["train"].x, full.splits["train"].x)


@pytest.mark.parametrize("cap", [0, -3, 2.5, True, "7"])
def test_build_federated_dataset_bad_caps(cap):
    x, y = torch.zeros(10, 2), torch.zeros(10, dtype=torch.long)
    with pytest.raises(ValueError, match=re.escape(
            f"max_val_per_client must be a positive integer or None, got {cap!r}")):
        build_federated_dataset("t", x, y, [torch.arange(10)], num_classes=2, generator=gen(),
                                max_val_per_client=cap)


def test_build_federated_dataset_errors():
    x, y = torch.zeros(10, 2), torch.zeros(10, dtype=torch.long)
    with pytest.raises(ValueError, match="client 1 has no samples"):
        build_federated_dataset("t", x, y, [torch.arange(5), torch.empty(0, dtype=torch.long)],
                                num_classes=2, generator=gen())
    with pytest.raises(ValueError, match=r"client 0 has indices outside \[0, 10\)"):
        build_federated_dataset("t", x, y, [torch.arange(11)], num_classes=2, generator=gen())
    with pytest.raises(ValueError, match="x holds 10 samples but y holds 9"):
        build_federated_dataset("t", x, y[:9], [torch.arange(5)], num_classes=2, generator=gen())
    with pytest.raises(ValueError, match="client_labels has 1 entries for 2 clients"):
        build_federated_dataset("t", x, y, [torch.arange(5), torch.arange(5, 10)],
                                num_classes=2, generator=gen(), client_labels=torch.zeros(1))


def test_dominant_class():
    split = ClientSplit.from_lists(
        [torch.zeros(3, 1), torch.zeros(2, 1), torch.zeros(0, 1)],
        [torch.tensor([2, 1, 2]), torch.tensor([0, 3]), torch.empty(0, dtype=torch.long)])
    # Client 1 is a tie (0 and 3): the smaller class wins; client 2 is empty.
    assert dominant_class(split, 4).tolist() == [2, 0, -1]
