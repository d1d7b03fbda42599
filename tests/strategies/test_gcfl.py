r"""GCFL (CFL's criterion, unweighted, with a minimum cut) and GCFL+ (a
split by dynamic time warping over the clients' update norms), by hand."""
import pytest
import torch

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.nn import dtw_distance
from pyg_fedgraph.strategies import CFL, GCFL, GCFLPlus, build_strategy
from pyg_fedgraph.strategies.base import FederationContext


def setup(strategy, n, d=2, num_samples=None):
    init = torch.zeros(d)
    ctx = FederationContext(num_clients=n, layout=ParamLayout.from_module(
        torch.nn.Linear(d - 1, 1)), init_params=init,
        num_samples=torch.ones(n, dtype=torch.long) if num_samples is None else num_samples)
    strategy.setup(ctx)
    return strategy


def upload(s, rnd, delta, clients=None):
    clients = torch.arange(delta.size(0)) if clients is None else torch.as_tensor(clients)
    start = s.configure_train(rnd, clients).params
    s.aggregate_train(rnd, FederationGraph(x=start + delta, delta=delta, client_id=clients,
                                           num_samples=s.ctx.num_samples[clients]))


def test_gcfl_is_cfl_with_a_minimum_cut_and_the_unweighted_criterion():
    # The authors' runs on the biochem group (runnerfile): EPS_1 = 0.07, EPS_2 = 0.35,
    # len > 2, round > 20 (training.py).
    assert GCFL().hparams() == {"eps1": 0.07, "eps2": 0.35, "min_cluster_size": 3,
                                "warmup_rounds": 20, "linkage": "min-cut",
                                "mean_norm": "unweighted"}
    assert isinstance(build_strategy("gcfl"), CFL)
    gen = torch.Generator().manual_seed(0)
    kwargs = {"eps1": 1.0, "eps2": 0.5, "warmup_rounds": 0}
    a = setup(GCFL(**kwargs), 6, d=4, num_samples=torch.tensor([5, 1, 2, 7, 3, 4]))
    b = setup(CFL(linkage="min-cut", mean_norm="unweighted", **kwargs), 6, d=4,
              num_samples=torch.tensor([5, 1, 2, 7, 3, 4]))
    for rnd in range(1, 4):
        delta = torch.randn(6, 4, generator=gen)
        upload(a, rnd, delta)
        upload(b, rnd, delta)
    assert int(a.num_clusters) > 1
    assert torch.equal(a.cluster_of, b.cluster_of)
    assert torch.equal(a.cluster_params, b.cluster_params)


def test_the_criterion_averages_updates_without_weights():
    # Updates +1 (9 samples) and -1, -1 (1 sample each): the weighted mean is
    # (9 - 2) / 11 = 0.64, the unweighted mean -1/3.
    delta = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]])
    samples = torch.tensor([9, 1, 1])
    for mean_norm, split in (("weighted", False), ("unweighted", True)):
        s = setup(CFL(eps1=0.5, eps2=0.9, warmup_rounds=0, linkage="min-cut",
                      mean_norm=mean_norm), 3, num_samples=samples)
        upload(s, 1, delta)
        expected = 7 / 11 if mean_norm == "weighted" else 1 / 3
        assert float(s.last_mean_norm[0]) == pytest.approx(expected)
        assert (int(s.num_clusters) == 2) is split
    # The split cut the odd client off; both halves kept the old model (zeros) plus
    # their own sample-weighted mean update.
    assert s.cluster_of.tolist() == [0, 1, 1]
    assert s.cluster_params.tolist() == [[1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]]


def test_the_minimum_cut_splits_by_the_similarities_plus_one():
    # Directions 0, 10, 170, 180 degrees: cos + 1 joins the first two and the last two.
    angles = torch.tensor([0.0, 10.0, 170.0, 180.0]).deg2rad()
    delta = torch.stack([angles.cos(), angles.sin()], 1)
    s = setup(GCFL(eps1=0.5, eps2=0.5, warmup_rounds=0), 4)
    upload(s, 1, delta)
    assert s.cluster_of.tolist() == [0, 0, 1, 1]


def trajectories():
    # Clients 0 and 1 grow their updates (norms 1, 2, 3), 2 and 3 shrink them (3, 2, 1);
    # the directions pair 0 with 2 and 1 with 3 (+x and -x), so that every round's mean
    # update is 0.
    norms = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [3.0, 2.0, 1.0]])
    direction = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    return [norms[:, t:t + 1] * direction for t in range(3)]


def test_gcfl_plus_splits_by_the_trajectories_of_update_norms():
    s = setup(GCFLPlus(eps1=0.1, eps2=0.5, warmup_rounds=0, min_cluster_size=2,
                       seq_length=3), 4)
    plain = setup(GCFL(eps1=0.1, eps2=0.5, warmup_rounds=0, min_cluster_size=2), 4)
    for rnd, delta in enumerate(trajectories(), start=1):
        upload(s, rnd, delta)
        upload(plain, rnd, delta)
        if rnd < 3:  # the criterion holds, but the sequences are not full yet
            assert int(s.num_clusters) == 1
            assert s.history_length.tolist() == [rnd] * 4
    # GCFL splits by this round's directions, GCFL+ by the norms' trajectories.
    assert plain.cluster_of.tolist() == [0, 1, 0, 1]
    assert s.cluster_of.tolist() == [0, 0, 1, 1]
    assert s.history_length.tolist() == [0, 0, 0, 0]  # every sequence starts again
    assert s.norm_history.tolist() == [[1.0, 2.0, 3.0]] * 2 + [[3.0, 2.0, 1.0]] * 2


def test_the_dtw_similarities_by_hand():
    s = setup(GCFLPlus(seq_length=3), 3)
    s.norm_history.copy_(torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [3.0, 2.0, 1.0]]))
    beta = torch.tensor([[0.0, float(dtw_distance(torch.tensor([1.0, 2, 3]),
                                                  torch.tensor([2.0, 4, 6]))), 0.0],
                         [0.0, 0.0, float(dtw_distance(torch.tensor([2.0, 4, 6]),
                                                       torch.tensor([3.0, 2, 1])))],
                         [0.0, 0.0, 0.0]])
    beta[0, 2] = float(dtw_distance(torch.tensor([1.0, 2, 3]), torch.tensor([3.0, 2, 1])))
    beta = beta + beta.t()
    got = s._similarity(torch.arange(3), torch.zeros(3, 2))
    torch.testing.assert_close(got, beta.max() - beta)
    # Standardized, 1 2 3 and 2 4 6 are one trajectory (distance 0: the largest similarity).
    s.standardize = True
    got = s._similarity(torch.arange(3), torch.zeros(3, 2))
    assert float(got[0, 1]) == pytest.approx(float(got.max()))


def test_gcfl_plus_state_resumes():
    a = setup(GCFLPlus(seq_length=3, warmup_rounds=0), 4)
    for rnd, delta in enumerate(trajectories()[:2], start=1):
        upload(a, rnd, delta)
    b = setup(GCFLPlus(seq_length=3, warmup_rounds=0), 4)
    b.load_state_dict(a.state_dict())
    assert torch.equal(b.norm_history, a.norm_history)
    assert b.history_length.tolist() == [2] * 4
    assert GCFLPlus().hparams()["seq_length"] == 5
