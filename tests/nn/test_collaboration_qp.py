import math

import pytest
import torch
from torch import nn

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.nn.aggregation import GraphAggregation
from pyg_fedgraph.nn.collaboration_qp import (
    CollaborationQP,
    collaboration_qp_cvxpy,
    initial_collaboration_graph,
    project_simplex,
    update_similarity,
)

cp = pytest.importorskip("cvxpy")


def random_problem(n: int, seed: int = 0, dim: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    delta = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    p = torch.rand(n, generator=gen, dtype=torch.float64) + 0.1
    return update_similarity(delta, threshold=None), p / p.sum()


# ------------------------------------------------------------------ project_simplex
@pytest.mark.parametrize("v, expected", [
    ([0.5, 0.5], [0.5, 0.5]),
    ([2.0, 0.0], [1.0, 0.0]),
    ([1.0, 1.0, -1.0], [0.5, 0.5, 0.0]),
    # Inside the simplex's plane but not summing to 1: shift every entry equally.
    ([0.2, 0.2, 0.2], [1 / 3, 1 / 3, 1 / 3]),
    # tau = (3 + 1 - 1) / 2 = 1.5: [3 - 1.5, 1 - 1.5 < 0, ...]
    ([3.0, 1.0, 0.0], [1.0, 0.0, 0.0]),
    # tau = (0.9 + 0.6 - 1) / 2 = 0.25
    ([0.9, 0.6, -0.3, 0.1], [0.65, 0.35, 0.0, 0.0]),
    ([7.0], [1.0]),
])
def test_project_simplex_hand_computed(v, expected):
    out = project_simplex(torch.tensor(v, dtype=torch.float64))
    assert torch.allclose(out, torch.tensor(expected, dtype=torch.float64), atol=1e-12)


def test_project_simplex_batched_matches_rows_and_is_on_simplex():
    v = torch.randn(2, 3, 6, dtype=torch.float64) * 3
    out = project_simplex(v)
    assert out.shape == v.shape
    rows = torch.stack([project_simplex(r) for r in v.reshape(-1, 6)]).reshape(2, 3, 6)
    assert torch.equal(out, rows)
    assert (out >= 0).all()
    assert torch.allclose(out.sum(-1), torch.ones(2, 3, dtype=torch.float64), atol=1e-12)
    # Points on the simplex are fixed points; adding a constant to a row changes nothing.
    assert torch.allclose(project_simplex(out), out, atol=1e-12)
    assert torch.allclose(project_simplex(v + 123.0), out, atol=1e-10)


def test_project_simplex_kkt():
    # w = max(v - tau, 0): v - w is the same tau on the support, and v <= tau off it.
    v = torch.randn(20, 9, dtype=torch.float64)
    w = project_simplex(v)
    for vi, wi in zip(v, w, strict=True):
        support = wi > 0
        taus = (vi - wi)[support]
        assert torch.allclose(taus, taus[0].expand_as(taus), atol=1e-12)
        assert (vi[~support] <= taus[0] + 1e-12).all()


def test_project_simplex_jacobian():
    v = torch.tensor([0.9, 0.6, -0.3, 0.1], dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(project_simplex, v)
    expected = torch.zeros(4, 4, dtype=torch.float64)
    expected[:2, :2] = torch.eye(2, dtype=torch.float64) - 0.5
    assert torch.allclose(jac, expected, atol=1e-12)


def test_project_simplex_float32_large_values():
    v = torch.tensor([1e4, 1e4 - 0.5, 0.0])
    assert torch.allclose(project_simplex(v), torch.tensor([0.75, 0.25, 0.0]))
    # Without shifting by the row maximum, float32 rounds u_1 - 1 to u_1 here and
    # no index qualifies for rho.
    out = project_simplex(torch.tensor([[3e8, 3e8, 0.0], [1e9, 0.0, -1e9]]))
    assert torch.equal(out, torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]))


def test_project_simplex_errors():
    with pytest.raises(TypeError, match="floating-point"):
        project_simplex(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="at least one coordinate"):
        project_simplex(torch.empty(3, 0))


# ------------------------------------------------------------------ CollaborationQP
def test_hand_computed_two_clients():
    s = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    p = torch.tensor([0.5, 0.5], dtype=torch.float64)
    # p + alpha / 2 * s_0 = [0.7, 0.5] -> tau = 0.1 -> [0.6, 0.4]
    w = CollaborationQP(alpha=0.4)(s, p)
    assert torch.allclose(w, torch.tensor([[0.6, 0.4], [0.4, 0.6]], dtype=torch.float64))


@pytest.mark.parametrize("n", [2, 10, 50])
@pytest.mark.parametrize("alpha", [None, 0.8, 5.0])
def test_projection_matches_cvxpy(n, alpha):
    s, p = random_problem(n, seed=n)
    w = CollaborationQP(alpha)(s, p)
    ref = CollaborationQP(alpha, solver="cvxpy")(s, p)
    assert (w - ref).abs().max() < 1e-6
    assert (w >= 0).all()
    assert torch.allclose(w.sum(1), torch.ones(n, dtype=torch.float64), atol=1e-12)


def test_per_row_equals_joint_and_osqp_polished():
    s, p = random_problem(10, seed=3)
    joint = CollaborationQP(1.0, solver="cvxpy")(s, p)
    per_row = CollaborationQP(1.0, solver="cvxpy", per_row=True)(s, p)
    osqp = CollaborationQP(1.0, solver="cvxpy", cvxpy_solver="OSQP")(s, p)
    assert (per_row - joint).abs().max() < 1e-8
    assert (osqp - joint).abs().max() < 1e-6
    some = collaboration_qp_cvxpy(s, p, 1.0, per_row=True, rows=[7, 2])
    assert (some - joint[[7, 2]]).abs().max() < 1e-8


@pytest.mark.parametrize("case", ["equal", "ties", "negative", "one_hot_sim"])
def test_edge_cases_agree(case):
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    if case == "equal":
        s = torch.full((4, 4), 0.3, dtype=torch.float64)
    elif case == "ties":
        s = torch.tensor([[1.0, 1.0, 0.2, 0.2]] * 4, dtype=torch.float64)
    elif case == "negative":
        s = -torch.rand(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    else:
        s = torch.eye(4, dtype=torch.float64)
    w = CollaborationQP(2.0)(s, p)
    ref = CollaborationQP(2.0, solver="cvxpy")(s, p)
    assert (w - ref).abs().max() < 1e-6
    if case == "equal":
        # A constant similarity row shifts every coordinate equally: FedAvg weights.
        assert torch.allclose(w, p.expand(4, 4))


def test_single_client():
    s = torch.tensor([[1.0]])
    p = torch.tensor([1.0])
    assert torch.equal(CollaborationQP()(s, p), torch.tensor([[1.0]]))
    assert torch.allclose(CollaborationQP(solver="cvxpy")(s, p), torch.tensor([[1.0]]))


def test_alpha_zero_gives_p():
    s, p = random_problem(6)
    assert torch.allclose(CollaborationQP(0.0)(s, p), p.expand(6, 6), atol=1e-12)


def test_large_alpha_concentrates_on_argmax():
    s, p = random_problem(6, seed=5)
    s = s - 2 * torch.eye(6, dtype=torch.float64)  # make the argmax an off-diagonal entry
    w = CollaborationQP(1e4)(s, p)
    assert torch.equal(w, nn.functional.one_hot(s.argmax(1), 6).to(w.dtype))


def test_tie_at_large_alpha_splits_evenly():
    s = torch.tensor([[1.0, 1.0, 0.0]] * 3, dtype=torch.float64)
    p = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    w = CollaborationQP(1e3)(s, p)
    # p + 500 s = [500.6, 500.3, 0.1] -> tau = 499.95 -> [0.65, 0.35, 0]
    assert torch.allclose(w[0], torch.tensor([0.65, 0.35, 0.0], dtype=torch.float64))


def test_default_alpha_is_008_n():
    s, p = random_problem(10, seed=2)
    qp = CollaborationQP()
    assert qp.effective_alpha(10) == pytest.approx(0.8)
    assert qp.effective_alpha(25) == pytest.approx(2.0)
    assert torch.equal(qp(s, p), CollaborationQP(0.8)(s, p))
    assert not torch.allclose(qp(s, p), CollaborationQP(2.0)(s, p))


def test_permutation_equivariance():
    s, p = random_problem(7, seed=4)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(0))
    qp = CollaborationQP(1.5)
    w = qp(s, p)
    w_perm = qp(s[perm][:, perm], p[perm])
    assert torch.allclose(w_perm, w[perm][:, perm], atol=1e-12)


def test_gradient_flows_to_similarity():
    s, p = random_problem(5, seed=6)
    s = s.clone().requires_grad_()
    w = CollaborationQP(3.0)(s, p)
    (w * torch.arange(5.0, dtype=torch.float64)).sum().backward()
    assert s.grad is not None and torch.isfinite(s.grad).all() and s.grad.abs().sum() > 0


def test_extra_constraints_joint_and_per_row():
    s = torch.eye(3, dtype=torch.float64)
    p = torch.full((3,), 1 / 3, dtype=torch.float64)
    free = CollaborationQP(4.0)(s, p)
    assert free.max() > 0.9
    joint = CollaborationQP(4.0, solver="cvxpy", extra_constraints=lambda w: [w <= 0.5])(s, p)
    per_row = CollaborationQP(4.0, solver="cvxpy", per_row=True,
                              extra_constraints=lambda x, i: [x[i] <= 0.5])(s, p)
    # Capping the self weight at 0.5 leaves 0.25 to each of the two others.
    expected = torch.full((3, 3), 0.25, dtype=torch.float64).fill_diagonal_(0.5)
    assert (joint - expected).abs().max() < 1e-6
    assert (per_row - expected).abs().max() < 1e-6


def test_infeasible_extra_constraints():
    s, p = random_problem(3)
    qp = CollaborationQP(solver="cvxpy", extra_constraints=lambda w: [w <= 0.1])
    with pytest.raises(ValueError, match="infeasible"):
        qp(s, p)


def test_repr():
    assert str(CollaborationQP(0.8)) == "CollaborationQP(alpha=0.8, solver=projection)"
    assert str(CollaborationQP()) == "CollaborationQP(alpha=0.08*N, solver=projection)"
    assert str(CollaborationQP(1.0, solver="cvxpy", cvxpy_solver="osqp", per_row=True)) == \
        "CollaborationQP(alpha=1, solver=cvxpy, cvxpy_solver=OSQP, per_row=True)"


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(alpha=-1.0), ValueError, "alpha must be finite and >= 0"),
    (dict(alpha=float("nan")), ValueError, "alpha must be finite"),
    (dict(alpha="0.8"), TypeError, "alpha must be a float"),
    (dict(solver="qp"), ValueError, "solver must be 'projection' or 'cvxpy'"),
    (dict(extra_constraints=lambda w: []), ValueError, "use solver='cvxpy'"),
    (dict(per_row=True), ValueError, "per_row=True only apply to the cvxpy QP"),
    (dict(cvxpy_solver="OSQP"), ValueError, "cvxpy_solver only apply"),
    (dict(solver="cvxpy", extra_constraints=3), TypeError, "extra_constraints must be a callable"),
])
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        CollaborationQP(**kwargs)


def test_input_errors():
    qp = CollaborationQP()
    p = torch.full((3,), 1 / 3)
    with pytest.raises(ValueError, match="similarity must be square"):
        qp(torch.zeros(3, 4), p)
    with pytest.raises(ValueError, match=r"p must have shape \(3,\)"):
        qp(torch.zeros(3, 3), torch.full((4,), 0.25))
    with pytest.raises(ValueError, match="non-negative"):
        qp(torch.zeros(3, 3), torch.tensor([1.2, -0.1, -0.1]))
    with pytest.raises(ValueError, match="must sum to 1"):
        qp(torch.zeros(3, 3), torch.tensor([0.3, 0.3, 0.3]))
    with pytest.raises(ValueError, match="NaN or Inf"):
        qp(torch.tensor([[1.0, float("nan"), 0], [0, 1, 0], [0, 0, 1]]), p)
    with pytest.raises(TypeError, match="floating point"):
        qp(torch.eye(3, dtype=torch.long), torch.tensor([1, 0, 0]))
    with pytest.raises(ValueError, match="not installed"):
        CollaborationQP(solver="cvxpy", cvxpy_solver="NO_SUCH_SOLVER")(torch.eye(3), p)
    with pytest.raises(ValueError, match="pass per_row=True"):
        collaboration_qp_cvxpy(torch.eye(3), p, 1.0, rows=[0])
    with pytest.raises(ValueError, match=r"rows \[5\] are out of range"):
        collaboration_qp_cvxpy(torch.eye(3), p, 1.0, per_row=True, rows=[5])


# ------------------------------------------------------------------ initial graph
def test_initial_collaboration_graph():
    w = initial_collaboration_graph(4)
    expected = torch.full((4, 4), 1 / 3).fill_diagonal_(0.0)
    assert torch.allclose(w, expected)
    assert torch.equal(initial_collaboration_graph(1), torch.tensor([[1.0]]))
    assert initial_collaboration_graph(3, dtype=torch.float64).dtype == torch.float64
    with pytest.raises(ValueError, match="positive int"):
        initial_collaboration_graph(0)


# ------------------------------------------------------------------ update_similarity
def test_update_similarity_hand_computed_and_threshold():
    delta = torch.tensor([[1.0, 0.0], [1.0, 1.0], [10.0, 0.1], [-2.0, 0.0]])
    c01 = 1 / math.sqrt(2)
    c02 = 10 / math.sqrt(100.01)  # 0.99995 > 0.9
    raw = update_similarity(delta, threshold=None)
    assert raw[0, 1] == pytest.approx(c01, abs=1e-6)
    assert raw[0, 2] == pytest.approx(c02, abs=1e-6)
    assert raw[0, 3] == pytest.approx(-1.0, abs=1e-6)
    assert torch.allclose(raw, raw.t()) and torch.equal(raw.diagonal(), torch.ones(4))
    thr = update_similarity(delta)
    assert thr[0, 2] == 1.0 and thr[2, 0] == 1.0
    assert thr[0, 1] == pytest.approx(c01, abs=1e-6)  # below 0.9: kept
    assert thr[0, 3] == pytest.approx(-1.0, abs=1e-6)
    assert update_similarity(delta, threshold=0.5)[0, 1] == 1.0


def test_update_similarity_zero_row_and_scale():
    delta = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [3.0, -1.0, 0.5]])
    s = update_similarity(delta, threshold=None)
    assert torch.isfinite(s).all()
    assert torch.equal(s[0], torch.tensor([1.0, 0.0, 0.0]))
    assert torch.equal(s[:, 0], torch.tensor([1.0, 0.0, 0.0]))
    scaled = update_similarity(delta * torch.tensor([[1.0], [1e-3], [50.0]]), threshold=None)
    assert torch.allclose(s, scaled, atol=1e-6)


def test_update_similarity_mask_from_layout():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(2, 2)
            self.fc = nn.Linear(2, 1)

    layout = ParamLayout.from_module(Net())  # body: 6 values, fc: 3 values
    mask = layout.mask(layout.select_layers("fc"))
    delta = torch.zeros(2, 9)
    delta[0, :6], delta[1, :6] = 3.0, -3.0      # opposite bodies outweigh the fc part
    delta[0, 6:], delta[1, 6:] = torch.tensor([1.0, 2, 3]), torch.tensor([2.0, 4, 6])
    assert update_similarity(delta, threshold=None)[0, 1] < 0
    assert update_similarity(delta, mask=mask, threshold=None)[0, 1] == pytest.approx(1.0)


def test_update_similarity_errors():
    with pytest.raises(ValueError, match=r"\(num_clients, num_params\)"):
        update_similarity(torch.zeros(3))
    with pytest.raises(TypeError, match="boolean"):
        update_similarity(torch.zeros(2, 3), mask=torch.ones(3))
    with pytest.raises(ValueError, match=r"expected \(3,\)"):
        update_similarity(torch.zeros(2, 3), mask=torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="selects no coordinate"):
        update_similarity(torch.zeros(2, 3), mask=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"clients \[1\]"):
        update_similarity(torch.tensor([[1.0, 0.0], [float("inf"), 1.0]]))


# ------------------------------------------------------------------ end to end
def test_server_step_with_graph_aggregation():
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(4, 5, generator=gen)
    # Two pairs of clients whose updates point the same way.
    base = torch.randn(2, 5, generator=gen)
    delta = base.repeat_interleave(2, 0) + 0.01 * torch.randn(4, 5, generator=gen)
    p = torch.full((4,), 0.25)
    w = CollaborationQP(alpha=1.0)(update_similarity(delta), p)
    # Similar pairs (0, 1) and (2, 3) get similarity 1.0: each row splits its weight
    # over its own pair more than over the other pair.
    assert w[0, :2].sum() > w[0, 2:].sum() and w[3, 2:].sum() > w[3, :2].sum()
    out = GraphAggregation()(theta, weight=w)
    assert torch.allclose(out, w @ theta, atol=1e-6)
