import math

import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, rand_score

from pyg_fedgraph.nn.aggregation import dense_to_edges
from pyg_fedgraph.nn.cluster_propagation import (
    ClusterGraphPropagation,
    client_clusters,
    cluster_graph,
    distribute,
)
from pyg_fedgraph.utils.clustering import kmeans


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _blobs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(seed)
    means = torch.tensor([[0.0, 0.0, 0.0, 0.0], [50.0, 0.0, 0.0, 0.0], [0.0, 0.0, 50.0, 50.0]])
    truth = torch.tensor([0, 1, 2, 0, 2, 1, 1, 0, 2, 0, 1, 2])
    x = means[truth] + 0.1 * torch.randn(truth.numel(), 4, generator=g)
    return x, truth


# k-means ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_kmeans_recovers_separated_blobs(seed):
    x, truth = _blobs(seed)
    centres, assignment = kmeans(x, 3, generator=_gen(seed))

    assert centres.shape == (3, 4)
    assert assignment.shape == (12,) and assignment.dtype == torch.long
    assert rand_score(truth.numpy(), assignment.numpy()) == 1.0
    for k in range(3):
        members = x[assignment == k]
        assert torch.allclose(centres[k], members.mean(dim=0), atol=1e-5)


def test_kmeans_is_deterministic_per_seed():
    x = torch.randn(10, 6, generator=_gen(5))
    c1, a1 = kmeans(x, 3, generator=_gen(11))
    c2, a2 = kmeans(x, 3, generator=_gen(11))
    assert torch.equal(c1, c2) and torch.equal(a1, a2)

    # Another seed must draw other seeds for k-means++ on some input: the first draw is
    # uniform over 10 points, so 5 distinct generator seeds cannot all give one result.
    results = {tuple(kmeans(x, 3, generator=_gen(s), max_iter=1)[1].tolist()) for s in range(5)}
    assert len(results) > 1


def test_kmeans_converged_points_are_assigned_to_nearest_centre():
    x = torch.randn(15, 3, generator=_gen(7))
    centres, assignment = kmeans(x, 4, generator=_gen(0))
    nearest = torch.cdist(x, centres).argmin(dim=1)
    assert torch.equal(nearest, assignment)
    assert torch.bincount(assignment, minlength=4).min() >= 1


def test_kmeans_more_clusters_than_points():
    x = torch.tensor([[0.0, 1.0], [3.0, 0.0], [5.0, 5.0]])
    centres, assignment = kmeans(x, 5, generator=_gen(0))

    assert centres.shape == (3, 2)
    assert sorted(assignment.tolist()) == [0, 1, 2]
    assert torch.allclose(centres[assignment], x, atol=1e-6)


def test_kmeans_duplicate_points():
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, 0.0, 4.0])
    x = torch.stack([a, a, b, a, b, a])
    centres, assignment = kmeans(x, 3, generator=_gen(0))

    assert torch.isfinite(centres).all()
    assert torch.bincount(assignment, minlength=3).min() >= 1
    # a-points and b-points never share a cluster.
    assert set(assignment[[0, 1, 3, 5]].tolist()).isdisjoint(assignment[[2, 4]].tolist())
    for k in range(3):
        assert torch.allclose(centres[k], x[assignment == k].mean(dim=0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kmeans_all_points_identical(seed):
    x = torch.tensor([[2.0, -1.0]]).repeat(5, 1)
    centres, assignment = kmeans(x, 3, generator=_gen(seed))

    assert torch.equal(centres, x[:3])
    assert torch.bincount(assignment, minlength=3).min() >= 1


def test_kmeans_single_cluster_is_the_mean():
    x = torch.randn(6, 3, generator=_gen(1))
    centres, assignment = kmeans(x, 1, generator=_gen(0))
    assert torch.allclose(centres, x.mean(dim=0, keepdim=True), atol=1e-6)
    assert assignment.tolist() == [0] * 6


def test_kmeans_errors():
    with pytest.raises(ValueError, match="num_clusters must be a positive int"):
        kmeans(torch.randn(4, 2), 0, generator=_gen(0))
    with pytest.raises(ValueError, match="num_points, num_features"):
        kmeans(torch.randn(4), 2, generator=_gen(0))
    with pytest.raises(ValueError, match="no rows"):
        kmeans(torch.randn(0, 3), 2, generator=_gen(0))
    with pytest.raises(ValueError, match="NaN"):
        kmeans(torch.tensor([[0.0], [float("nan")]]), 1, generator=_gen(0))
    with pytest.raises(TypeError, match="torch.Generator"):
        kmeans(torch.randn(4, 2), 2, generator=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kmeans_agrees_with_sklearn_on_separated_data(seed):
    # 5 groups of 12 points in 20 dimensions, centres 40 apart and noise 0.5: any sound
    # k-means finds the groups, so ours and scikit-learn's give the same partition (up to
    # the cluster labels) and, the centres being the groups' means, the same centres.
    g = _gen(seed)
    means = 40.0 * torch.randn(5, 20, generator=g, dtype=torch.float64)
    truth = torch.randperm(60, generator=g) % 5
    x = means[truth] + 0.5 * torch.randn(60, 20, generator=g, dtype=torch.float64)

    centres, ours = kmeans(x, 5, generator=_gen(seed + 100))
    ref = KMeans(n_clusters=5, n_init=10, random_state=seed).fit(x.numpy())

    assert adjusted_rand_score(ref.labels_, ours.numpy()) == 1.0
    assert adjusted_rand_score(truth.numpy(), ours.numpy()) == 1.0
    # Our label k is scikit-learn's label of any point in cluster k.
    to_ref = torch.as_tensor(ref.labels_)[[int((ours == k).nonzero()[0]) for k in range(5)]]
    assert torch.allclose(centres, torch.as_tensor(ref.cluster_centers_)[to_ref], atol=1e-9)


# Cluster graph ----------------------------------------------------------------------------------

def test_cluster_graph_rows_sum_to_one_and_non_negative():
    centres = torch.randn(5, 7, generator=_gen(3))
    w = cluster_graph(centres)
    assert w.shape == (5, 5)
    assert (w >= 0).all()
    assert torch.allclose(w.sum(dim=1), torch.ones(5))
    # Undoing the row normalization (diagonal weight = 1 / row sum) gives the symmetric cosines.
    cos = w / w.diagonal().unsqueeze(1)
    assert torch.allclose(cos, cos.t(), atol=1e-6)


def test_cluster_graph_orthogonal_and_opposite_centres():
    # c0 and c1 orthogonal, c2 opposite to c0: every off-diagonal cosine is <= 0.
    centres = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0]])
    assert torch.equal(cluster_graph(centres), torch.eye(3))


def test_cluster_graph_hand_example():
    centres = torch.tensor([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]])
    s = 1 / math.sqrt(2)
    expected = torch.tensor([[1.0, s, 0.0], [s, 1.0, 0.0], [0.0, 0.0, 1.0]])
    expected = expected / expected.sum(dim=1, keepdim=True)
    assert torch.allclose(cluster_graph(centres), expected, atol=1e-6)


def test_cluster_graph_zero_centre_keeps_its_own_weight():
    w = cluster_graph(torch.tensor([[0.0, 0.0], [1.0, 1.0]]))
    assert torch.allclose(w, torch.eye(2))


# Propagation ------------------------------------------------------------------------------------

def test_propagation_repr_and_errors():
    assert str(ClusterGraphPropagation()) == "ClusterGraphPropagation(num_steps=2)"
    assert str(ClusterGraphPropagation(num_steps=1)) == "ClusterGraphPropagation(num_steps=1)"
    with pytest.raises(ValueError, match="num_steps must be a non-negative int"):
        ClusterGraphPropagation(num_steps=-1)
    with pytest.raises(ValueError, match="edge_weight given without edge_index"):
        ClusterGraphPropagation()(torch.randn(3, 2), edge_weight=torch.ones(2))
    with pytest.raises(ValueError, match="outside"):
        ClusterGraphPropagation()(torch.randn(3, 2), torch.tensor([[0, 3], [1, 1]]))


def test_propagation_steps_are_powers_of_r():
    centres = torch.randn(4, 6, generator=_gen(9))
    r = cluster_graph(centres)

    assert torch.allclose(ClusterGraphPropagation(num_steps=1)(centres), r @ centres, atol=1e-6)
    assert torch.allclose(ClusterGraphPropagation(num_steps=2)(centres), r @ r @ centres,
                          atol=1e-6)
    assert torch.equal(ClusterGraphPropagation(num_steps=0)(centres), centres)


def test_propagation_hand_example():
    centres = torch.tensor([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]])
    s = 1 / math.sqrt(2)
    # Row 0 and 1 mix c0 and c1 with weights (1, s) / (1 + s) and (s, 1) / (1 + s); c2 stays.
    out = ClusterGraphPropagation(num_steps=1)(centres)
    expected = torch.tensor([[(1 + s) / (1 + s), s / (1 + s)],
                             [(s + 1) / (1 + s), 1 / (1 + s)],
                             [-1.0, 0.0]])
    assert torch.allclose(out, expected, atol=1e-6)


def test_propagation_edge_form_agrees_with_default():
    centres = torch.randn(5, 3, generator=_gen(2))
    edge_index, edge_weight = dense_to_edges(cluster_graph(centres))
    conv = ClusterGraphPropagation(num_steps=2)
    assert torch.allclose(conv(centres, edge_index, edge_weight), conv(centres), atol=1e-6)

    # Unweighted edges: a directed path 0 -> 1 -> 2 shifts rows twice.
    path = torch.tensor([[0, 1], [1, 2]])
    out = conv(centres[:3], path)
    assert torch.allclose(out, torch.stack([torch.zeros(3), torch.zeros(3), centres[0]]))


def test_propagation_identical_centres_stay_identical():
    c = torch.tensor([0.5, -1.0, 2.0])
    centres = torch.stack([c, c, c, -c])
    out = ClusterGraphPropagation(num_steps=3)(centres)
    assert torch.allclose(out[:3], c.expand(3, 3), atol=1e-6)
    assert torch.allclose(out[3], -c, atol=1e-6)


def test_propagation_is_permutation_equivariant():
    centres = torch.randn(5, 4, generator=_gen(4))
    perm = torch.tensor([3, 0, 4, 1, 2])
    conv = ClusterGraphPropagation()
    assert torch.allclose(conv(centres[perm]), conv(centres)[perm], atol=1e-6)


# Distribution -----------------------------------------------------------------------------------

def test_distribute_two_condition_rule():
    propagated = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    # Round t-1 sampled clients 4, 1, 2 (rows in that order) into clusters 2, 0, 2.
    cluster_of = client_clusters(torch.tensor([2, 0, 2]), torch.tensor([4, 1, 2]), num_clients=6)
    assert cluster_of.tolist() == [-1, 0, 2, -1, 2, -1]

    out = distribute(propagated, cluster_of)
    mean = torch.tensor([4.0 / 3, 2.0])
    expected = torch.stack([mean, propagated[0], propagated[2], mean, propagated[2], mean])
    assert out.shape == (6, 2)
    assert torch.allclose(out, expected)


def test_distribute_with_nobody_sampled_gives_the_mean():
    propagated = torch.tensor([[1.0, 1.0], [3.0, 5.0]])
    out = distribute(propagated, torch.full((3,), -1))
    assert torch.allclose(out, torch.tensor([[2.0, 3.0]]).expand(3, 2))


def test_distribute_errors():
    propagated = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="cluster in \\[0, 2\\)"):
        distribute(propagated, torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="twice"):
        client_clusters(torch.tensor([0, 1]), torch.tensor([3, 3]), num_clients=5)
    with pytest.raises(ValueError, match="must lie in \\[0, 5\\)"):
        client_clusters(torch.tensor([0]), torch.tensor([5]), num_clients=5)
    with pytest.raises(ValueError, match="same length"):
        client_clusters(torch.tensor([0, 1]), torch.tensor([3]), num_clients=5)


def test_server_round_end_to_end():
    x, truth = _blobs(1)
    sampled = torch.arange(12) * 2  # even client ids of 24
    centres, assignment = kmeans(x, 3, generator=_gen(0))
    propagated = ClusterGraphPropagation()(centres)
    out = distribute(propagated, client_clusters(assignment, sampled, num_clients=24))

    assert out.shape == (24, 4)
    assert torch.allclose(out[sampled], propagated[assignment])
    assert torch.allclose(out[1::2], propagated.mean(dim=0).expand(12, 4))
