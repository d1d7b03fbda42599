"""Graph-level federations: GCFL's chunks, label skew, stratified splits and
clients across datasets with padded features."""
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from pyg_fedgraph.datasets import (
    TUGraphs,
    cross_dataset_federation,
    gcfl_chunks,
    one_dataset_federation,
    pad_node_features,
    stratified_split,
)

SHARED_TU = next((p / "shared" / "data" / "tu" for p in Path(__file__).resolve().parents[2].parents
                  if (p / "shared" / "data").is_dir()), Path("../shared/data/tu"))


def toy(name, labels, width, seed=0):
    r"""A dataset held in memory: graph ``k`` has 2 to 4 nodes whose features
    are all in [0.5, 1.5), so padded zeros cannot be confused with them."""
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for k, label in enumerate(labels):
        n = 2 + k % 3
        graphs.append(Data(x=torch.rand(n, width, generator=g) + 0.5,
                           edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.tensor([label])))
    y = torch.tensor(labels)
    return TUGraphs(name=name, graphs=tuple(graphs), y=y, num_classes=int(y.max()) + 1,
                    num_node_attributes=0, num_node_labels=width, num_edge_labels=0,
                    folder=Path("."))


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def all_indices(federation):
    return torch.cat([torch.cat([c.train_index, c.val_index, c.test_index])
                      for c in federation])


# ------------------------------------------------------------------ GCFL's chunks
def test_gcfl_chunks_follow_the_rule():
    # 200 graphs, 3 clients: chunks of min(50, 66) = 50 in file order, 50 left over.
    parts = gcfl_chunks(200, 3, generator=gen())
    for i, part in enumerate(parts):
        assert set(range(50 * i, 50 * i + 50)) <= set(part.tolist())
    assert torch.cat(parts).sort().values.tolist() == list(range(200))
    assert sum(p.numel() for p in parts) == 200
    # 23 graphs, 4 clients: chunks of min(50, 5) = 5, the 3 left over dealt at random.
    parts = gcfl_chunks(23, 4, generator=gen(), chunk_size=50)
    assert [p[:5].tolist() for p in parts] == [list(range(5 * i, 5 * i + 5)) for i in range(4)]
    assert torch.cat(parts).sort().values.tolist() == list(range(23))


def test_gcfl_chunks_are_deterministic_and_shuffle_on_request():
    assert all(torch.equal(a, b) for a, b in zip(gcfl_chunks(230, 4, generator=gen(1)),
                                                 gcfl_chunks(230, 4, generator=gen(1)),
                                                 strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(gcfl_chunks(230, 4, generator=gen(1)),
                                                     gcfl_chunks(230, 4, generator=gen(2)),
                                                     strict=True))
    shuffled = gcfl_chunks(200, 4, generator=gen(), shuffle=True)
    assert torch.cat(shuffled).sort().values.tolist() == list(range(200))
    assert shuffled[0].tolist() != list(range(50))


def test_gcfl_overlapping_chunks():
    parts = gcfl_chunks(100, 6, generator=gen(), overlap=True)
    sizes = [p.numel() for p in parts]
    assert all(50 <= s < 150 for s in sizes)
    flat = torch.cat(parts)
    assert 0 <= int(flat.min()) and int(flat.max()) < 100
    # drawn with replacement: more draws than graphs, so graphs repeat
    assert flat.unique().numel() < flat.numel()


def test_gcfl_chunk_errors():
    with pytest.raises(ValueError, match="num_clients must be at least 1, got 0"):
        gcfl_chunks(10, 0, generator=gen())
    with pytest.raises(ValueError, match="cannot deal 3 graphs to 4 clients"):
        gcfl_chunks(3, 4, generator=gen())
    with pytest.raises(ValueError, match="overlap_sizes"):
        gcfl_chunks(10, 2, generator=gen(), overlap=True, overlap_sizes=(5, 5))


# ------------------------------------------------------------------ stratified split
def test_stratified_split_by_hand():
    # 10 graphs, 5 per class: 8 / 1 / 1 by largest remainder.
    labels = torch.tensor([0, 1] * 5)
    train, val, test = stratified_split(labels, generator=gen())
    assert (train.numel(), val.numel(), test.numel()) == (8, 1, 1)
    assert torch.cat([train, val, test]).sort().values.tolist() == list(range(10))


@pytest.mark.parametrize("seed", range(5))
def test_stratified_split_keeps_every_class_within_one_graph_of_its_share(seed):
    g = gen(seed)
    labels = torch.randint(0, 4, (int(torch.randint(20, 90, (1,), generator=g)),), generator=g)
    train, val, test = stratified_split(labels, (0.6, 0.2, 0.2), generator=gen(seed))
    n = labels.numel()
    assert torch.cat([train, val, test]).sort().values.tolist() == list(range(n))
    for k in labels.unique():
        n_k = int((labels == k).sum())
        test_k = int((labels[test] == k).sum())
        assert abs(test_k - n_k * test.numel() / n) < 1
        rest_k, rest = n_k - test_k, n - test.numel()
        assert abs(int((labels[val] == k).sum()) - rest_k * val.numel() / rest) < 1


# ------------------------------------------------------------------ one dataset
def sorted_labels(per_class, classes):
    return [k for k in range(classes) for _ in range(per_class)]


def test_one_dataset_gcfl_covers_every_graph_once_and_is_deterministic():
    data = toy("SORTED", sorted_labels(40, 3), width=4)
    fed = one_dataset_federation(data, 5, seed=3)
    assert fed.num_clients == 5 and fed.datasets == ("SORTED",) and fed.group.tolist() == [0] * 5
    assert all_indices(fed).sort().values.tolist() == list(range(120))
    for client in fed:
        for split in ("train", "val", "test"):
            graphs, index = getattr(client, split), getattr(client, f"{split}_index")
            assert all(g is data[int(i)] for g, i in zip(graphs, index, strict=True))
        assert len(client.val) >= 1 and len(client.test) >= 1
    again = one_dataset_federation(data, 5, seed=3)
    assert torch.equal(all_indices(fed), all_indices(again))
    assert not torch.equal(all_indices(fed), all_indices(one_dataset_federation(data, 5, seed=4)))
    # GCFL's chunks follow the file order: on a label-sorted file, client 0 holds class 0 only.
    assert fed.label_counts("all")[0].tolist()[1:] == [0, 0]
    shuffled = one_dataset_federation(data, 5, seed=3, shuffle=True)
    assert (shuffled.label_counts("all") > 0).sum() > (fed.label_counts("all") > 0).sum()


def test_dirichlet_label_skew_concentrates_labels_for_small_beta():
    data = toy("SIX", sorted_labels(20, 6), width=2)
    skewed = one_dataset_federation(data, 3, partition="dirichlet", beta=1e-3, min_size=1)
    held = skewed.label_counts("all") > 0
    # every class goes whole to one client: no class is shared
    assert held.sum(0).tolist() == [1] * 6
    assert all_indices(skewed).sort().values.tolist() == list(range(120))
    even = one_dataset_federation(data, 3, partition="dirichlet", beta=1e3, min_size=1)
    counts = even.label_counts("all").float()
    assert (counts > 0).all()
    assert ((counts - 20 / 3).abs() < 5).all()


def test_one_dataset_errors():
    data = toy("SMALL", [0, 1] * 10, width=2)
    with pytest.raises(ValueError, match=r"^the Dirichlet concentration beta must be positive, "
                                         r"got 0\.0$"):
        one_dataset_federation(data, 2, partition="dirichlet", beta=0.0, min_size=1)
    with pytest.raises(ValueError, match=r"^num_clients must be at least 1, got 0$"):
        one_dataset_federation(data, 0)
    with pytest.raises(ValueError, match=r"^num_clients must be at least 1, got 0$"):
        one_dataset_federation(data, 0, partition="dirichlet")
    with pytest.raises(ValueError, match="unknown partition 'iid'"):
        one_dataset_federation(data, 2, partition="iid")  # type: ignore[arg-type]


# ------------------------------------------------------------------ across datasets
def three_datasets():
    return [toy("A", sorted_labels(20, 2), width=3, seed=1),
            toy("B", sorted_labels(10, 6), width=7, seed=2),
            toy("C", sorted_labels(15, 3), width=5, seed=3)]


def test_cross_dataset_groups_padding_and_classes():
    datasets = three_datasets()
    fed = cross_dataset_federation(datasets, clients_per_dataset=3, seed=0)
    assert fed.num_clients == 9 and fed.datasets == ("A", "B", "C")
    assert fed.group.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [c.dataset for c in fed] == ["A"] * 3 + ["B"] * 3 + ["C"] * 3
    assert (fed.num_features, fed.num_classes) == (7, 6)
    assert fed.dataset_num_features == (3, 7, 5) and fed.dataset_num_classes == (2, 6, 3)
    assert fed.client_num_classes.tolist() == [2] * 3 + [6] * 3 + [3] * 3
    mask = fed.class_mask()
    assert mask.shape == (9, 6) and mask.sum(1).tolist() == [2] * 3 + [6] * 3 + [3] * 3
    assert mask[0].tolist() == [True, True, False, False, False, False]
    for group, data in enumerate(datasets):
        clients = [c for c in fed if c.group == group]
        index = torch.cat([torch.cat([c.train_index, c.val_index, c.test_index])
                           for c in clients])
        assert index.sort().values.tolist() == list(range(len(data)))
        assert max(len(c.train) + len(c.val) + len(c.test) for c in clients) - min(
            c.num_graphs for c in clients) <= 1
        for client in clients:
            for graph, i in zip(client.train + client.val + client.test,
                                torch.cat([client.train_index, client.val_index,
                                           client.test_index]), strict=True):
                source = data[int(i)].x
                assert graph.x.shape == (source.size(0), 7)
                assert torch.equal(graph.x[:, :source.size(1)], source)
                assert torch.count_nonzero(graph.x[:, source.size(1):]) == 0
                assert graph.edge_index is data[int(i)].edge_index and int(graph.y) < 6
    # The sources are untouched.
    assert datasets[0][0].x.size(1) == 3


def test_a_datasets_clients_do_not_depend_on_the_others():
    a, b, c = three_datasets()
    first = cross_dataset_federation([a, b], 2, seed=5)
    second = cross_dataset_federation([c, a], 2, seed=5)
    assert all(torch.equal(x.train_index, y.train_index) and torch.equal(x.test_index, y.test_index)
               for x, y in zip(first.clients[:2], second.clients[2:], strict=True))
    third = cross_dataset_federation([a, b], 2, seed=6)
    assert not torch.equal(first.clients[0].train_index, third.clients[0].train_index)


def test_graphs_per_client_takes_a_subset():
    a, b, _ = three_datasets()
    fed = cross_dataset_federation([a, b], 2, graphs_per_client=12, seed=0)
    assert [c.num_graphs for c in fed] == [12, 12, 12, 12]
    index = torch.cat([torch.cat([c.train_index, c.val_index, c.test_index]) for c in fed[:2]])
    assert index.unique().numel() == 24


def test_cross_dataset_errors(tmp_path):
    a, b, _ = three_datasets()
    with pytest.raises(ValueError, match=r"^A has 40 graphs but clients_per_dataset=5 clients "
                                         r"need 10 each \(min_size\), 50 in all; use at most 4 "
                                         r"clients per dataset$"):
        cross_dataset_federation([b, a], clients_per_dataset=5)
    with pytest.raises(ValueError, match=r"^A has 40 graphs but clients_per_dataset=3 clients "
                                         r"need 15 each \(graphs_per_client\)"):
        cross_dataset_federation([a, b], 3, graphs_per_client=15)
    with pytest.raises(ValueError, match=r"^clients_per_dataset must be at least 1, got 0$"):
        cross_dataset_federation([a, b], clients_per_dataset=0)
    with pytest.raises(ValueError, match="dataset 'A' is listed twice"):
        cross_dataset_federation([a, a])
    with pytest.raises(ValueError, match=r"^unknown dataset 'MUTAGG' \(did you mean 'MUTAG'\?\): "
                                         r"no MUTAGG_A\.txt under") as err:
        cross_dataset_federation(["MUTAGG", "PROTEINS"], root=tmp_path)
    assert "\n" not in str(err.value)


def test_pad_node_features_refuses_to_cut():
    graph = Data(x=torch.ones(2, 4), edge_index=torch.zeros(2, 0, dtype=torch.long))
    assert pad_node_features([graph], 6)[0].x[:, 4:].abs().sum() == 0
    with pytest.raises(ValueError, match="cannot pad node features of width 4 to 3"):
        pad_node_features([graph], 3)


@pytest.mark.real_data
@pytest.mark.slow
def test_four_tu_datasets_three_clients_each():
    names = ["MUTAG", "PROTEINS", "ENZYMES", "AIDS"]
    if not all((SHARED_TU / n).is_dir() for n in names):
        pytest.skip("../shared/data/tu/{MUTAG,PROTEINS,ENZYMES,AIDS} not present")
    fed = cross_dataset_federation(names, clients_per_dataset=3, root=SHARED_TU, seed=0)
    assert fed.num_clients == 12 and fed.group.tolist() == [g for g in range(4) for _ in range(3)]
    # widths 7, 3, 3, 38 padded to 38 (AIDS's 38 node labels); ENZYMES's 6 classes set the head
    assert fed.dataset_num_features == (7, 3, 3, 38) and fed.num_features == 38
    assert fed.dataset_num_classes == (2, 2, 6, 2) and fed.num_classes == 6
    sizes = {name: sum(c.num_graphs for c in fed if c.dataset == name) for name in names}
    assert sizes == {"MUTAG": 188, "PROTEINS": 1113, "ENZYMES": 600, "AIDS": 2000}
    mutag = fed[0].train[0]
    assert mutag.x.shape[1] == 38 and torch.count_nonzero(mutag.x[:, 7:]) == 0
    with pytest.raises(ValueError, match=r"^MUTAG has 188 graphs but clients_per_dataset=19 "
                                         r"clients need 10 each"):
        cross_dataset_federation(names, clients_per_dataset=19, root=SHARED_TU)
