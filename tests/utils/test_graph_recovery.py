r"""Graph recovery scores: groups read from a collaboration matrix, scored
against known groups (values computed by hand)."""
import math

import pytest
import torch

from pyg_fedgraph.utils.recovery import graph_recovery, partition_scores, read_groups


def block_matrix(sizes, noise=0.0, seed=0):
    r"""A row-stochastic matrix with weight only inside blocks of ``sizes``
    (plus ``noise`` times a uniform draw off the blocks), rows unequal."""
    gen = torch.Generator().manual_seed(seed)
    groups = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    same = (groups[:, None] == groups[None, :]).double()
    w = same * (0.5 + torch.rand(len(groups), len(groups), generator=gen, dtype=torch.float64))
    w += noise * torch.rand(w.shape, generator=gen, dtype=torch.float64) * (1 - same)
    return w / w.sum(dim=1, keepdim=True), groups


def test_scores_of_a_known_wrong_split_by_hand():
    # 4 clients, truth {0,1}{2,3}, read {0,2}{1,3}: no pair together in both, the pairs
    # (0,3), (1,2) apart in both: RI = 2/6. ARI: sum C(n_ij, 2) = 0, both margins give
    # 2 pairs, expected 2 * 2 / 6, max 2: (0 - 2/3) / (2 - 2/3) = -1/2.
    s = partition_scores(torch.tensor([0, 1, 0, 1]), torch.tensor([0, 0, 1, 1]))
    assert s["rand_index"] == pytest.approx(1 / 3)
    assert s["adjusted_rand_index"] == pytest.approx(-0.5)
    # 6 clients, truth {0,1,2}{3,4,5}, read {0,1}{2,3,4,5}: 4 pairs together in both,
    # 6 apart in both, of 15: RI = 2/3. ARI: (4 - 6*7/15) / ((6+7)/2 - 6*7/15) = 12/37.
    s = partition_scores(torch.tensor([0, 0, 1, 1, 1, 1]), torch.tensor([0, 0, 0, 1, 1, 1]))
    assert s["rand_index"] == pytest.approx(2 / 3)
    assert s["adjusted_rand_index"] == pytest.approx(12 / 37)


def test_a_block_diagonal_matrix_recovers_its_groups_exactly():
    w, groups = block_matrix([3, 4, 3], noise=0.0)
    for rule in ("spectral", "components"):
        assert graph_recovery(w, groups, rule=rule) == {"rand_index": 1.0,
                                                        "adjusted_rand_index": 1.0}
    # Weak links across blocks do not change the spectral reading.
    w, groups = block_matrix([3, 4, 3], noise=0.05, seed=1)
    assert graph_recovery(w, groups)["adjusted_rand_index"] == 1.0


def test_scores_do_not_depend_on_how_groups_or_clients_are_numbered():
    w, groups = block_matrix([4, 4, 4], noise=0.6, seed=2)
    base = graph_recovery(w, groups)
    assert graph_recovery(w, torch.tensor([2, 0, 1])[groups]) == base   # relabelled groups
    # The wrong split of the hand-computed case, with its labels renamed.
    assert partition_scores(torch.tensor([5, 5, 9, 9, 9, 9]), torch.tensor([1, 1, 1, 0, 0, 0])) \
        == partition_scores(torch.tensor([0, 0, 1, 1, 1, 1]), torch.tensor([0, 0, 0, 1, 1, 1]))
    # Clients renumbered: W and groups permuted together read the same partition.
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    a = read_groups(w, 3)
    b = read_groups(w[perm][:, perm], 3)
    assert partition_scores(a[perm], b)["adjusted_rand_index"] == 1.0


def test_spectral_reading_uses_magnitudes_and_ignores_the_diagonal():
    w, groups = block_matrix([3, 3, 2], noise=0.1, seed=3)
    labels = read_groups(w, 3)
    assert torch.equal(read_groups(w + 50 * torch.eye(8, dtype=w.dtype), 3), labels)
    assert torch.equal(read_groups(-w, 3), labels)
    assert torch.equal(read_groups(w.T, 3), labels)    # symmetrized: rows or columns alike
    assert torch.equal(read_groups(w.float(), 3), labels)
    assert torch.equal(read_groups(w, 1), torch.zeros(8, dtype=torch.long))


def test_components_of_the_top_k_links_by_hand():
    # k = 1: 0 -> 1, 1 -> 0, 2 -> 3, 3 -> 4, 4 -> 5, 5 -> 4 (weight 1; 0.1 elsewhere):
    # components {0, 1} and {2, 3, 4, 5}, the wrong split of the hand-computed case.
    w = torch.full((6, 6), 0.1)
    for i, j in [(0, 1), (1, 0), (2, 3), (3, 4), (4, 5), (5, 4)]:
        w[i, j] = 1.0
    truth = torch.tensor([0, 0, 0, 1, 1, 1])
    labels = read_groups(w, 2, rule="components", k=1)
    assert partition_scores(labels, torch.tensor([0, 0, 1, 1, 1, 1]))["rand_index"] == 1.0
    s = graph_recovery(w, truth, rule="components", k=1)
    assert s["rand_index"] == pytest.approx(2 / 3)
    assert s["adjusted_rand_index"] == pytest.approx(12 / 37)
    # The default k is the mean group size minus one: 2 here, which links all six.
    assert read_groups(w, 2, rule="components").unique().numel() == 1
    # k = 0 links nobody; zero weights are no links; ties go to the lower index.
    assert read_groups(w, 2, rule="components", k=0).tolist() == [0, 1, 2, 3, 4, 5]
    assert read_groups(torch.eye(4), 2, rule="components", k=3).tolist() == [0, 1, 2, 3]
    # Row 0 gives 1 and 4 the same weight: the link goes to 1, so the two rings
    # 0 -> 1 -> 2 -> 0 and 3 -> 4 -> 5 -> 3 stay apart.
    tied = torch.zeros(6, 6)
    for i, j in [(0, 1), (0, 4), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]:
        tied[i, j] = 1.0
    assert read_groups(tied, 2, rule="components", k=1).tolist() == [0, 0, 0, 1, 1, 1]
    tied[0, 1] = 0.5
    assert read_groups(tied, 2, rule="components", k=1).tolist() == [0, 0, 0, 0, 0, 0]

def test_bad_input_is_one_line():
    w, groups = block_matrix([2, 2])
    with pytest.raises(ValueError, match=r"is \(4, 4\) but groups names 5 clients"):
        graph_recovery(w, torch.tensor([0, 0, 1, 1, 1]))
    with pytest.raises(ValueError, match=r"square \(N, N\) tensor, got \(4, 3\)"):
        graph_recovery(w[:, :3], groups)
    with pytest.raises(ValueError, match="NaN or infinite"):
        graph_recovery(w.masked_fill(w > 0.3, float("nan")), groups)
    with pytest.raises(ValueError, match=r"num_groups must be an int in \[1, 4\]"):
        read_groups(w, 5)
    with pytest.raises(ValueError, match=r"k must be an int in \[0, 3\]"):
        read_groups(w, 2, rule="components", k=4)
    with pytest.raises(ValueError, match="rule='components'"):
        read_groups(w, 2, k=1)
    with pytest.raises(ValueError, match="unknown reading rule 'kmeans'"):
        read_groups(w, 2, rule="kmeans")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="groups must be a 1-D integer tensor"):
        graph_recovery(w, groups.float())
    with pytest.raises(ValueError, match="labels name 3 clients, groups 4"):
        partition_scores(torch.tensor([0, 1, 1]), groups)


# ---------------------------------------------- weight inside and across known groups
def test_relation_weights_by_hand():
    from pyg_fedgraph.utils import relation_weights

    # Clients 0, 1 in group 0; clients 2, 3 in group 1.
    w = torch.tensor([[0.4, 0.3, 0.2, 0.1],
                      [0.1, 0.5, 0.2, 0.2],
                      [0.0, 0.2, 0.6, 0.2],
                      [0.25, 0.25, 0.25, 0.25]])
    groups = torch.tensor([0, 0, 1, 1])
    self_w, similar, other = relation_weights(w, groups)
    assert self_w == pytest.approx((0.4 + 0.5 + 0.6 + 0.25) / 4)
    assert similar == pytest.approx((0.3 + 0.1 + 0.2 + 0.25) / 4)
    assert other == pytest.approx(((0.2 + 0.1) / 2 + (0.2 + 0.2) / 2 + (0.0 + 0.2) / 2
                                   + (0.25 + 0.25) / 2) / 4)
    # Relabelling clients (a permutation of rows, columns and groups) changes nothing.
    perm = torch.tensor([2, 0, 3, 1])
    assert relation_weights(w[perm][:, perm], groups[perm]) == pytest.approx(
        (self_w, similar, other))


def test_relation_weights_refuse_what_they_cannot_read():
    from pyg_fedgraph.utils import relation_weights

    with pytest.raises(ValueError, match="at least two groups"):
        relation_weights(torch.eye(3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="names 2 clients"):
        relation_weights(torch.eye(3), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="square"):
        relation_weights(torch.ones(2, 3), torch.tensor([0, 1]))


def test_allocation_stats_by_hand():
    from pyg_fedgraph.utils import allocation_stats

    # Clients 0 and 1 share class 0; client 2 holds class 1 only.
    counts = torch.tensor([[3.0, 0.0], [1.0, 0.0], [0.0, 5.0]])
    w = torch.tensor([[0.5, 0.3, 0.2],
                      [0.2, 0.6, 0.2],
                      [0.1, 0.1, 0.8]])
    stats = allocation_stats(w, counts)
    share = [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    assert stats["chance"] == pytest.approx(5 / 9)
    assert stats["same"] == pytest.approx(sum(w[i, j].item() for i in range(3)
                                              for j in range(3) if share[i][j]) / 3)
    assert stats["within"] == pytest.approx((0.3 + 0.2) / 2)
    assert stats["between"] == pytest.approx((0.2 + 0.2 + 0.1 + 0.1) / 4)
    assert stats["self"] == pytest.approx((0.5 + 0.6 + 0.8) / 3)
    assert stats["dev"] == pytest.approx(float((w - 1 / 3).abs().mean()))
    # Every client alone with its class: no sharing pair off the diagonal.
    assert math.isnan(allocation_stats(torch.eye(2), torch.eye(2))["within"])
    with pytest.raises(ValueError, match=r"label_counts must be \(N, C\) = \(3, C\)"):
        allocation_stats(w, counts[:2])
