r"""Server operators of pFedGraph: model similarity and the collaboration-graph QP.

`"Personalized Federated Learning with Inferred Collaboration Graphs"
<https://proceedings.mlr.press/v202/ye23b.html>`_ (Ye et al., ICML 2023).
The server turns the clients' last updates into a cosine-similarity matrix
(:func:`update_similarity`), solves one small quadratic program per client for
its row of the collaboration graph (:class:`CollaborationQP`), and aggregates
with :class:`~pyg_fedgraph.nn.aggregation.GraphAggregation`.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from pyg_fedgraph.nn.functional import pairwise_cosine

__all__ = [
    "DEFAULT_ALPHA_PER_CLIENT",
    "CODE_ALPHA",
    "update_similarity",
    "project_simplex",
    "CollaborationQP",
    "collaboration_qp_cvxpy",
    "initial_collaboration_graph",
]

log = logging.getLogger(__name__)

#: Appendix C.1.4 of the paper: ":math:`\alpha = K \cdot 0.08` is a pleasant choice".
DEFAULT_ALPHA_PER_CLIENT = 0.08
#: The authors' scripts pass ``--alpha 0.8`` as the weight :math:`\lambda` of the
#: quadratic term (see :class:`CollaborationQP`), i.e. :math:`\alpha = 1 / 0.8`
#: here, whatever the number of clients.
CODE_ALPHA = 1.0 / 0.8

#: Tolerances of the cvxpy reference. The error of the solution is about the square
#: root of the duality gap (the objective is 2-strongly convex), so the gap must be
#: far below 1e-12 for a 1e-6 match: CLARABEL at its default tolerances is off by
#: up to ~4e-6 at N = 50; at gap/feasibility 1e-12 by ~8e-7 at N = 207
#: (alpha = 0.08 N = 16.6); at 1e-14 by ~1e-8 (one or two more interior-point
#: iterations). OSQP is exact when its polishing step succeeds (cvxpy turns
#: polishing on by itself; the option's name changed in osqp 1.0), and ~eps off
#: when it does not.
_TIGHT_OPTIONS: dict[str, dict[str, Any]] = {
    "CLARABEL": dict(tol_gap_abs=1e-14, tol_gap_rel=1e-14, tol_feas=1e-14, tol_ktratio=1e-12,
                     max_iter=500),
    "OSQP": dict(eps_abs=1e-10, eps_rel=1e-10, max_iter=200_000),
}

ExtraConstraints = Callable[..., list]


def update_similarity(delta: Tensor, *, mask: Tensor | None = None,
                      threshold: float | None = 0.9) -> Tensor:
    r"""Cosine similarity of the clients' updates, as in pFedGraph's server step
    (Ye et al., 2023, Sec. 3.3 and Appendix C.1.4).

    .. math::
        S_{ij} = \begin{cases}
            1 & \text{if } \cos(\delta_i, \delta_j) > \tau \\
            \cos(\delta_i, \delta_j) & \text{otherwise}
        \end{cases}, \qquad
        \cos(\mathbf{a}, \mathbf{b}) = \frac{\langle \mathbf{a}, \mathbf{b} \rangle}
        {\|\mathbf{a}\|\,\|\mathbf{b}\|}

    where :math:`\delta_i` is "current model minus initial global model" of
    client :math:`i`, restricted to the coordinates in ``mask``. The paper
    computes the cosine on the last fully-connected layers only ("the last few
    fully-connected layers are sufficient", Sec. 3.3); the authors' code keeps
    parameters whose name contains ``fc``. Here that choice is explicit: build
    the mask once with ``layout.mask(layout.select_layers("fc"))``. The paper
    sets similarities above :math:`\tau = 0.9` to :math:`1.0` (Appendix C.1.4;
    the code uses the strict inequality, as here).

    A zero update (a client that did not move) has similarity :math:`0` with
    every other client and :math:`1` with itself, never NaN.

    Args:
        delta (torch.Tensor): client updates :math:`(N, D)`.
        mask (torch.Tensor, optional): boolean :math:`(D,)` selecting the
            coordinates to compare; all of them if :obj:`None` (default: :obj:`None`).
        threshold (float, optional): values strictly above it become
            :math:`1.0`; :obj:`None` keeps the raw cosines (default: :obj:`0.9`).

    Shapes:
        - **input:** :math:`(N, D)`, mask :math:`(D,)`.
        - **output:** :math:`(N, N)`, symmetric, unit diagonal, values in
          :math:`[-1, 1]`.
    """
    if not isinstance(delta, Tensor) or delta.dim() != 2:
        shape = tuple(delta.shape) if isinstance(delta, Tensor) else type(delta).__name__
        raise ValueError(f"delta must be a (num_clients, num_params) tensor, got {shape}")
    if not delta.is_floating_point():
        raise TypeError(f"delta must be a floating-point tensor, got {delta.dtype}")
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a boolean tensor (e.g. ParamLayout.mask(...)), "
                            f"got {mask.dtype}")
        if tuple(mask.shape) != (delta.size(1),):
            raise ValueError(f"mask has shape {tuple(mask.shape)}, expected ({delta.size(1)},) "
                             f"to match the {delta.size(1)} parameters of delta")
        if not bool(mask.any()):
            raise ValueError("mask selects no coordinate: pass layers that exist "
                             "(ParamLayout.select_layers) or mask=None")
        delta = delta[:, mask.to(delta.device)]
    if not bool(torch.isfinite(delta).all()):
        bad = (~torch.isfinite(delta)).any(dim=1).nonzero().flatten().tolist()
        raise ValueError(f"delta holds NaN or Inf in the (selected) updates of clients {bad}")

    # Zero rows get similarity 0 with the others (pairwise_cosine's epsilon rule).
    sim = pairwise_cosine(delta).clamp(-1.0, 1.0)
    sim.fill_diagonal_(1.0)
    if threshold is not None:
        sim = sim.masked_fill(sim > threshold, 1.0)
    return sim


def project_simplex(v: Tensor) -> Tensor:
    r"""Euclidean projection of every row onto the probability simplex
    (Held, Wolfe & Crowder, 1974; Condat, 2016, Algorithm 1).

    .. math::
        \Pi_{\Delta}(\mathbf{v}) = \arg\min_{\mathbf{x} \geq 0,\
        \mathbf{1}^\top \mathbf{x} = 1} \|\mathbf{x} - \mathbf{v}\|_2^2
        = \max(\mathbf{v} - \tau, 0), \qquad
        \tau = \frac{1}{\rho}\Big(\sum_{k=1}^{\rho} u_k - 1\Big),

    with :math:`u` the entries of :math:`\mathbf{v}` sorted in decreasing order
    and :math:`\rho = \max\{k : u_k - \frac{1}{k}(\sum_{r \le k} u_r - 1) > 0\}`.
    It costs one sort per row (:math:`O(N \log N)`), is exact up to round-off,
    runs on all rows at once, and is differentiable almost everywhere (its
    Jacobian on the support :math:`A` is :math:`I - \mathbf{1}\mathbf{1}^\top / |A|`).

    Args:
        v (torch.Tensor): points to project, any leading batch shape.

    Shapes:
        - **input:** :math:`(*, N)`.
        - **output:** :math:`(*, N)`, non-negative, each row summing to 1.
    """
    if not v.is_floating_point():
        raise TypeError(f"project_simplex needs a floating-point tensor, got {v.dtype}")
    if v.dim() == 0 or v.size(-1) == 0:
        raise ValueError(f"project_simplex needs at least one coordinate, got shape "
                         f"{tuple(v.shape)}")
    # The projection commutes with adding a constant to every entry: shifting by
    # the row maximum keeps the cumulative sums small whatever the scale of v.
    v = v - v.amax(dim=-1, keepdim=True).detach()
    u = v.sort(dim=-1, descending=True).values
    css = u.cumsum(dim=-1) - 1.0
    k = torch.arange(1, v.size(-1) + 1, dtype=v.dtype, device=v.device)
    # u_1 = 0 after the shift, so k = 1 always qualifies and rho >= 1.
    rho = (u * k > css).sum(dim=-1, keepdim=True).clamp_min(1)
    tau = css.gather(-1, rho - 1) / rho.to(v.dtype)
    return (v - tau).clamp_min(0.0)


def initial_collaboration_graph(num_clients: int, *, dtype: torch.dtype | None = None,
                                device: torch.device | None = None) -> Tensor:
    r"""The collaboration graph pFedGraph starts from (authors' code): uniform
    weight on every other client, none on itself.

    .. math::
        W^{(0)}_{ij} = \frac{1 - \mathbb{1}[i = j]}{N - 1},
        \qquad W^{(0)} = [1] \text{ for } N = 1 .

    Args:
        num_clients (int): :math:`N`.
        dtype (torch.dtype, optional): default float type if :obj:`None`.
        device (torch.device, optional): where to allocate.

    Shapes:
        - **output:** :math:`(N, N)`, row-stochastic.
    """
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
        raise ValueError(f"num_clients must be a positive int, got {num_clients!r}")
    if num_clients == 1:
        return torch.ones(1, 1, dtype=dtype, device=device)
    w = torch.full((num_clients, num_clients), 1.0 / (num_clients - 1), dtype=dtype,
                   device=device)
    return w.fill_diagonal_(0.0)


class CollaborationQP(torch.nn.Module):
    r"""The collaboration-graph quadratic program of pFedGraph
    (Ye et al., 2023, eq. (2) and (4)).

    Row :math:`i` of the graph trades off the dataset-size prior
    :math:`\mathbf{p}` (:math:`p_j = n_j / \sum_k n_k`) against the similarity
    row :math:`\mathbf{s}_i`:

    .. math::
        \mathbf{w}_i = \arg\min_{\mathbf{x} \geq 0,\ \mathbf{1}^\top \mathbf{x} = 1}
        \|\mathbf{x} - \mathbf{p}\|_2^2 - \alpha\, \mathbf{s}_i^\top \mathbf{x}
        = \Pi_{\Delta}\Big(\mathbf{p} + \frac{\alpha}{2}\, \mathbf{s}_i\Big),

    since the objective equals :math:`\|\mathbf{x} - (\mathbf{p} + \frac{\alpha}{2}
    \mathbf{s}_i)\|^2` minus a constant. The default ``solver="projection"``
    therefore solves all :math:`N` rows at once with :func:`project_simplex`:
    exact, :math:`O(N^2 \log N)`, differentiable almost everywhere, on any device.
    ``solver="cvxpy"`` builds the same QP in the paper's form (4),
    :math:`\min_\mathbf{x} \mathbf{x}^\top\mathbf{x} + (-2\mathbf{p} - \alpha
    \mathbf{s}_i)^\top\mathbf{x}`, and hands it to a conic/QP solver: it is the
    slow reference, and the way to add constraints (``extra_constraints``).
    By default it is one problem with an :math:`(N, N)` variable and row-wise
    constraints; ``per_row=True`` solves one problem per client in a Python
    loop, as the authors' code does (kept for benchmarking, slowest).

    Sign and scale conventions: the authors' code writes the QP as
    :math:`\min_\mathbf{x} \lambda \mathbf{x}^\top\mathbf{x} + (-\mathbf{s}_i - 2\lambda
    \mathbf{p})^\top\mathbf{x}` (it stores :math:`-\mathbf{s}_i` as a "difference"),
    which is the same problem with :math:`\lambda = 1/\alpha`: a code value
    ``alpha=0.8`` (the code's argument name for :math:`\lambda`) is
    :math:`\alpha = 1.25` here. The paper recommends :math:`\alpha = 0.08 N`
    (Appendix C.1.4, the default when ``alpha=None``) and studies
    :math:`\alpha \in \{0.7, 0.8, 0.9, 1.0\}` (Sec. 4.6, Fig. 4b).
    :math:`\alpha = 0` returns :math:`\mathbf{p}` in every row (FedAvg weights);
    as :math:`\alpha \to \infty` row :math:`i` concentrates on
    :math:`\arg\max_j S_{ij}`.

    Args:
        alpha (float, optional): weight :math:`\alpha \geq 0` of the similarity
            term; :obj:`None` uses :math:`0.08 N`, with :math:`N` read from the
            input at every call (default: :obj:`None`).
        solver (str, optional): ``"projection"`` (exact, batched) or
            ``"cvxpy"`` (reference QP solver) (default: ``"projection"``).
        cvxpy_solver (str, optional): cvxpy solver name for ``solver="cvxpy"``;
            :obj:`None` means ``"CLARABEL"`` (default: :obj:`None`).
        per_row (bool, optional): with ``solver="cvxpy"``, one problem per
            client in a loop (the authors' approach) instead of one joint
            problem (default: :obj:`False`).
        extra_constraints (callable, optional): with ``solver="cvxpy"`` only:
            receives the cvxpy variable and returns a list of cvxpy constraints
            added to the simplex constraints. In the joint formulation it is
            called once as ``extra_constraints(W)`` with ``W`` the
            :math:`(N, N)` variable (row :math:`i` = weights of client :math:`i`);
            with ``per_row=True`` it is called as ``extra_constraints(x, i)`` with
            ``x`` the :math:`(N,)` variable of row :math:`i` (default: :obj:`None`).
        solver_options (dict, optional): keyword arguments for
            :meth:`cvxpy.Problem.solve`. :obj:`None` uses tight tolerances for
            CLARABEL (gap and feasibility :math:`10^{-14}`) and OSQP
            (:math:`10^{-10}`, polished), so the reference matches the
            projection to :math:`10^{-6}` (CLARABEL's defaults do not: the
            error is about the square root of the duality gap); pass ``{}``
            for the solver's own defaults (default: :obj:`None`).

    Shapes:
        - **input:** similarity :math:`S` :math:`(N, N)`, dataset-size weights
          :math:`\mathbf{p}` :math:`(N,)` (non-negative, summing to 1).
        - **output:** collaboration graph :math:`W` :math:`(N, N)`,
          row-stochastic; feed it to
          :class:`~pyg_fedgraph.nn.aggregation.GraphAggregation` as ``weight=W``.
    """

    def __init__(
        self,
        alpha: float | None = None,
        solver: Literal["projection", "cvxpy"] = "projection",
        cvxpy_solver: str | None = None,
        *,
        per_row: bool = False,
        extra_constraints: ExtraConstraints | None = None,
        solver_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if alpha is not None:
            if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
                raise TypeError(f"alpha must be a float or None, got {type(alpha).__name__}")
            if not (0.0 <= float(alpha) < float("inf")):
                raise ValueError(f"alpha must be finite and >= 0, got {alpha} (the authors' "
                                 f"code's lam is 1 / alpha)")
            alpha = float(alpha)
        if solver not in ("projection", "cvxpy"):
            raise ValueError(f"solver must be 'projection' or 'cvxpy', got {solver!r}")
        if solver == "projection":
            given = [name for name, value in (("cvxpy_solver", cvxpy_solver),
                                              ("extra_constraints", extra_constraints),
                                              ("solver_options", solver_options))
                     if value is not None]
            if per_row:
                given.append("per_row=True")
            if given:
                raise ValueError(f"{', '.join(given)} only apply to the cvxpy QP: the closed-form "
                                 f"projection cannot take them; use solver='cvxpy'")
        if cvxpy_solver is not None and not isinstance(cvxpy_solver, str):
            raise TypeError(f"cvxpy_solver must be a solver name such as 'CLARABEL' or 'OSQP', "
                            f"got {type(cvxpy_solver).__name__}")
        if extra_constraints is not None and not callable(extra_constraints):
            raise TypeError(f"extra_constraints must be a callable returning a list of cvxpy "
                            f"constraints, got {type(extra_constraints).__name__}")
        self.alpha = alpha
        self.solver = solver
        self.cvxpy_solver = cvxpy_solver.upper() if cvxpy_solver is not None else None
        self.per_row = bool(per_row)
        self.extra_constraints = extra_constraints
        self.solver_options = dict(solver_options) if solver_options is not None else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""The QP has no learnable parameters: nothing to reset."""

    def effective_alpha(self, num_clients: int) -> float:
        r"""The :math:`\alpha` used for :math:`N` = ``num_clients``."""
        return self.alpha if self.alpha is not None else DEFAULT_ALPHA_PER_CLIENT * num_clients

    def forward(self, similarity: Tensor, p: Tensor) -> Tensor:
        r"""Solves the QP of every client.

        Args:
            similarity (torch.Tensor): :math:`S` :math:`(N, N)`; row :math:`i`
                is :math:`\mathbf{s}_i` (any finite values; symmetry is not
                required).
            p (torch.Tensor): :math:`(N,)`, non-negative, summing to 1.
        """
        similarity, p = _check_inputs(similarity, p)
        alpha = self.effective_alpha(similarity.size(0))
        if self.solver == "projection":
            return project_simplex(p.unsqueeze(0) + 0.5 * alpha * similarity)
        return collaboration_qp_cvxpy(
            similarity, p, alpha, per_row=self.per_row, cvxpy_solver=self.cvxpy_solver,
            solver_options=self.solver_options, extra_constraints=self.extra_constraints)

    def __repr__(self) -> str:
        alpha = "0.08*N" if self.alpha is None else f"{self.alpha:g}"
        extra = ""
        if self.solver == "cvxpy":
            extra = f", cvxpy_solver={self.cvxpy_solver or 'CLARABEL'}"
            if self.per_row:
                extra += ", per_row=True"
        return f"{self.__class__.__name__}(alpha={alpha}, solver={self.solver}{extra})"


def collaboration_qp_cvxpy(
    similarity: Tensor,
    p: Tensor,
    alpha: float,
    *,
    per_row: bool = False,
    rows: Sequence[int] | None = None,
    cvxpy_solver: str | None = None,
    solver_options: dict[str, Any] | None = None,
    extra_constraints: ExtraConstraints | None = None,
) -> Tensor:
    r"""Reference cvxpy solver of the pFedGraph QP (Ye et al., 2023, eq. (4)),
    used by :class:`CollaborationQP` with ``solver="cvxpy"``.

    .. math::
        \min_{W \geq 0,\ W\mathbf{1} = \mathbf{1}} \sum_i \Big(\mathbf{w}_i^\top
        \mathbf{w}_i + (-2\mathbf{p} - \alpha\, \mathbf{s}_i)^\top \mathbf{w}_i\Big)

    The rows are independent problems, so one joint problem over the
    :math:`(N, N)` variable gives the same rows as :math:`N` separate problems.
    ``per_row=True`` is the authors' loop (one cvxpy problem per client, the
    slowest option, kept as a baseline); ``rows`` then restricts the loop to
    some clients (the benchmark uses it to cap the time spent).

    Args:
        similarity (torch.Tensor): :math:`(N, N)`.
        p (torch.Tensor): :math:`(N,)`.
        alpha (float): similarity weight :math:`\alpha`.
        per_row (bool, optional): one problem per row (default: :obj:`False`).
        rows (list of int, optional): rows to solve with ``per_row=True``;
            all if :obj:`None` (default: :obj:`None`).
        cvxpy_solver (str, optional): solver name, ``"CLARABEL"`` if
            :obj:`None` (default: :obj:`None`).
        solver_options (dict, optional): see :class:`CollaborationQP`
            (default: :obj:`None`).
        extra_constraints (callable, optional): see :class:`CollaborationQP`
            (default: :obj:`None`).

    Shapes:
        - **output:** :math:`(N, N)`, or :math:`(|\text{rows}|, N)` with ``rows``;
          dtype and device of ``similarity``. Negative entries of solver
          round-off (:math:`\sim 10^{-12}`) are clipped to 0.
    """
    try:
        import cvxpy as cp
        import numpy as np
    except ImportError as e:  # cvxpy is a core dependency, but keep the message clear
        raise ImportError("solver='cvxpy' needs cvxpy: pip install cvxpy") from e

    similarity, p = _check_inputs(similarity, p)
    n = similarity.size(0)
    if rows is not None and not per_row:
        raise ValueError("rows= selects clients of the per-row loop: pass per_row=True")
    name = (cvxpy_solver or "CLARABEL").upper()
    if name not in cp.installed_solvers():
        raise ValueError(f"cvxpy solver {name!r} is not installed; installed solvers are "
                         f"{cp.installed_solvers()}")
    options = _TIGHT_OPTIONS.get(name, {}) if solver_options is None else solver_options

    s_np = similarity.detach().cpu().double().numpy()
    p_np = p.detach().cpu().double().numpy()
    # Linear term of eq. (4), one row per client.
    lin = -2.0 * p_np[None, :] - alpha * s_np

    def solve(problem: Any, what: str) -> None:
        problem.solve(solver=name, **options)
        if problem.status in ("infeasible", "infeasible_inaccurate"):
            raise ValueError(f"the collaboration QP for {what} is infeasible: check "
                             f"extra_constraints (status {problem.status!r})")
        if problem.status == "optimal_inaccurate":
            log.warning("cvxpy/%s solved the collaboration QP for %s inaccurately", name, what)
        elif problem.status != "optimal":
            raise RuntimeError(f"cvxpy/{name} failed on the collaboration QP for {what} "
                               f"(status {problem.status!r}); try another cvxpy_solver")

    if per_row:
        idx = list(range(n)) if rows is None else [int(i) for i in rows]
        bad = [i for i in idx if not 0 <= i < n]
        if bad:
            raise ValueError(f"rows {bad} are out of range for {n} clients")
        out = []
        # One problem per client, as in the authors' code: deliberately a loop
        # (this path exists to measure what the batched projection saves).
        for i in idx:
            x = cp.Variable(n)
            cons = [x >= 0, cp.sum(x) == 1]
            if extra_constraints is not None:
                cons += list(extra_constraints(x, i))
            solve(cp.Problem(cp.Minimize(cp.sum_squares(x) + lin[i] @ x), cons), f"client {i}")
            if x.value is None:
                raise RuntimeError(f"cvxpy/{name} returned no solution of the collaboration QP "
                                   f"for client {i}; try another cvxpy_solver")
            out.append(x.value)
        value = torch.from_numpy(np.stack(out)) if out else torch.empty(0, n)
    else:
        w = cp.Variable((n, n))
        cons = [w >= 0, cp.sum(w, axis=1) == 1]
        if extra_constraints is not None:
            cons += list(extra_constraints(w))
        objective = cp.sum_squares(w) + cp.sum(cp.multiply(lin, w))
        solve(cp.Problem(cp.Minimize(objective), cons), f"all {n} clients")
        value = torch.as_tensor(w.value)
    return value.to(dtype=similarity.dtype, device=similarity.device).clamp_min(0.0)


def _check_inputs(similarity: Tensor, p: Tensor) -> tuple[Tensor, Tensor]:
    if not isinstance(similarity, Tensor) or not isinstance(p, Tensor):
        raise TypeError("similarity and p must be tensors")
    if similarity.dim() != 2 or similarity.size(0) != similarity.size(1):
        raise ValueError(f"similarity must be square (N, N), got {tuple(similarity.shape)}")
    n = similarity.size(0)
    if n == 0:
        raise ValueError("similarity is empty: the QP needs at least one client")
    if p.dim() != 1 or p.size(0) != n:
        raise ValueError(f"p must have shape ({n},) to match similarity, got {tuple(p.shape)}")
    dtype = torch.promote_types(similarity.dtype, p.dtype)
    if not dtype.is_floating_point:
        raise TypeError(f"similarity and p must be floating point, got {similarity.dtype} "
                        f"and {p.dtype}")
    similarity, p = similarity.to(dtype), p.to(dtype=dtype, device=similarity.device)
    if not bool(torch.isfinite(similarity).all()):
        raise ValueError("similarity holds NaN or Inf; check the client updates "
                         "(update_similarity rejects non-finite deltas)")
    if not bool(torch.isfinite(p).all()):
        raise ValueError("p holds NaN or Inf")
    if bool((p < 0).any()):
        raise ValueError(f"p must be non-negative (relative dataset sizes n_i / sum_j n_j), "
                         f"got min {float(p.min()):.3g}")
    total = float(p.double().sum())
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"p must sum to 1 (relative dataset sizes n_i / sum_j n_j), sums to "
                         f"{total:.8g}: divide the sample counts by their total")
    return similarity, p
