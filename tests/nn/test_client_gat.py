import pytest
import torch
import torch.nn.functional as F

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.nn.client_gat import (
    AllocationLogits,
    ClientGAT,
    allocation_backward,
    client_similarity,
)
from pyg_fedgraph.utils.graph import complete_graph


def manual_similarity(x: torch.Tensor) -> torch.Tensor:
    # s_ij written out pair by pair.
    dev = x - x.mean(dim=0)
    n = x.size(0)
    return torch.tensor([[float(dev[i] @ dev[j] / (dev[i].norm() * dev[j].norm()))
                          for j in range(n)] for i in range(n)])


def manual_allocation(gat: ClientGAT, x: torch.Tensor) -> torch.Tensor:
    # GAT attention written out from the GATConv's own weights (PyG 2.8:
    # lin.weight (H*C, D), att_src / att_dst (1, H, C)) and the two
    # coefficient vectors of the similarity term.
    conv = gat.conv
    h = F.layer_norm(x, (x.size(1),))
    z = (h @ conv.lin.weight.t()).view(x.size(0), conv.heads, conv.out_channels)
    score_src = (z * conv.att_src).sum(-1)  # (N, H): a_src . W h_j
    score_dst = (z * conv.att_dst).sum(-1)  # (N, H): a_dst . W h_i
    e = score_dst[:, None, :] + score_src[None, :, :]
    if gat.similarity:  # + tau * beta_k * s_ij off the diagonal, + tau * gamma_k on it
        n, tau = x.size(0), gat.similarity_scale
        for i in range(n):
            for j in range(n):
                e[i, j] += tau * (gat.self_weight if i == j
                                  else gat.similarity_weight * manual_similarity(x)[i, j])
    e = F.leaky_relu(e, conv.negative_slope)
    return e.softmax(dim=1).mean(dim=-1)  # softmax over j, mean over heads


def paper_twin(gat: ClientGAT) -> ClientGAT:
    # The paper's GAT (similarity=False) with the same node-feature weights.
    twin = ClientGAT(gat.in_channels, gat.hidden_channels, heads=gat.heads,
                     negative_slope=gat.negative_slope, similarity=False)
    for name in ("lin.weight", "att_src", "att_dst", "bias"):
        twin.conv.get_parameter(name).data.copy_(gat.conv.get_parameter(name))
    return twin


def random_similarity_coefficients(gat: ClientGAT, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        gat.similarity_weight.copy_(0.01 * torch.randn(gat.heads, generator=gen))
        gat.self_weight.copy_(0.01 * torch.randn(gat.heads, generator=gen))


def two_groups(seed: int = 0, n: int = 6, d: int = 6):
    gen = torch.Generator().manual_seed(seed)
    centers = 2 * torch.randn(2, d, generator=gen)
    group = torch.arange(n) * 2 // n
    theta = centers[group] + 0.3 * torch.randn(n, d, generator=gen)
    return theta, centers[group], group


def test_client_gat_shapes_and_rows():
    torch.manual_seed(0)
    gat = ClientGAT(5, hidden_channels=3, heads=2)
    assert str(gat) == "ClientGAT(5, 3, heads=2)"
    x = torch.randn(4, 5)
    theta_tilde, alloc = gat(x)
    assert theta_tilde.shape == (4, 5)
    assert alloc.shape == (4, 4)
    assert (alloc >= 0).all()
    assert torch.allclose(alloc.sum(dim=1), torch.ones(4))
    assert torch.allclose(theta_tilde, alloc @ x, atol=1e-6)
    assert alloc.requires_grad and alloc.grad_fn is not None


@pytest.mark.parametrize("similarity", [True, False])
def test_client_gat_matches_manual_attention(similarity):
    torch.manual_seed(1)
    gat = ClientGAT(7, hidden_channels=3, heads=4, negative_slope=0.3, similarity=similarity)
    suffix = "" if similarity else ", similarity=False"
    assert str(gat) == "ClientGAT(7, 3, heads=4" + suffix + ")"
    if similarity:
        random_similarity_coefficients(gat, seed=1)
    x = torch.randn(4, 7)
    alloc = gat.allocation(x)
    expected = manual_allocation(gat, x)
    assert torch.allclose(alloc, expected, atol=1e-6)
    # The allocation is not symmetric in general: the edge direction matters.
    assert not torch.allclose(alloc, alloc.t(), atol=1e-4)


def test_client_similarity_by_hand():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [0.0, 0.0]])
    # mean (0, 0): deviations are the rows; client 3 sits at the mean.
    r = 2 ** -0.5
    expected = torch.tensor([[1.0, 0.0, -r, 0.0],
                             [0.0, 1.0, -r, 0.0],
                             [-r, -r, 1.0, 0.0],
                             [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(client_similarity(x), expected)
    torch.testing.assert_close(client_similarity(x + 3.0), expected)  # shift invariant
    y = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    perm = torch.tensor([2, 4, 0, 1, 3])
    torch.testing.assert_close(client_similarity(y[perm]), client_similarity(y)[perm][:, perm])
    torch.testing.assert_close(client_similarity(y), manual_similarity(y))
    assert torch.equal(client_similarity(y.new_ones(4, 3)), torch.zeros(4, 4))  # all alike


def test_fresh_similarity_module_scores_like_the_paper_gat():
    # beta and gamma start at 0: with the same GATConv weights both modules agree.
    torch.manual_seed(2)
    with_sim = ClientGAT(6, hidden_channels=3, heads=2)
    paper = paper_twin(with_sim)
    assert torch.equal(with_sim.similarity_coefficients, torch.zeros(2))
    assert torch.equal(with_sim.self_coefficients, torch.zeros(2))
    assert paper.similarity_coefficients is None and paper.self_coefficients is None
    assert {name for name, _ in paper.named_parameters()} == {
        "conv.lin.weight", "conv.att_src", "conv.att_dst", "conv.bias"}
    x = torch.randn(5, 6)
    torch.testing.assert_close(with_sim.allocation(x), paper.allocation(x))
    # GATConv's edge path is fixed: only the two coefficient vectors are learned.
    trainable = {name for name, p in with_sim.named_parameters() if p.requires_grad}
    assert trainable == {"conv.lin.weight", "conv.att_src", "conv.att_dst", "conv.bias",
                         "similarity_weight", "self_weight"}
    # ... and hands head k's edge feature to head k unchanged.
    edge_attr = torch.randn(7, 2)
    projected = with_sim.conv.lin_edge(edge_attr).view(7, 2, 3)
    torch.testing.assert_close((projected * with_sim.conv.att_edge).sum(-1), edge_attr)
    # The coefficients are tau times the parameters.
    with torch.no_grad():
        with_sim.similarity_weight.copy_(torch.tensor([0.5, -1.0]))
        with_sim.self_weight.copy_(torch.tensor([2.0, 0.0]))
    assert torch.equal(with_sim.similarity_coefficients, torch.tensor([40.0, -80.0]))
    assert torch.equal(with_sim.self_coefficients, torch.tensor([160.0, 0.0]))


def test_static_attention_ranks_alike_similarity_term_does_not():
    # Paper GAT, one head: every row orders the columns the same way.
    torch.manual_seed(3)
    x = torch.randn(6, 8)
    static = ClientGAT(8, hidden_channels=4, heads=1, similarity=False)
    alloc = static.allocation(x)
    order = alloc.argsort(dim=1)
    assert (order == order[:1]).all()
    # With the similarity term each client can favour its own neighbours:
    # with a large beta every row puts its largest weight on the other client
    # most similar to it, or on itself (score 0) when all others have s < 0 ...
    sim = ClientGAT(8, hidden_channels=4, heads=1)
    with torch.no_grad():
        sim.similarity_weight.fill_(1.0)  # beta = 80
    alloc = sim.allocation(x)
    s = client_similarity(x).fill_diagonal_(0.0)
    assert torch.equal(alloc.argmax(dim=1), s.argmax(dim=1))
    assert alloc.argmax(dim=1).tolist() != list(range(6))
    assert not (alloc.argsort(dim=1) == alloc.argsort(dim=1)[:1]).all()
    # ... and the self coefficient alone moves weight to the diagonal.
    with torch.no_grad():
        sim.similarity_weight.zero_()
        sim.self_weight.fill_(0.1)  # gamma = 8
    alloc = sim.allocation(x)
    assert (alloc.diagonal() > 0.9).all()


@pytest.mark.parametrize("module", ["gat", "logits"])
def test_a_graph_in_place_of_x_still_works_with_a_deprecation_warning(module):
    op = ClientGAT(6, hidden_channels=4, heads=2) if module == "gat" else AllocationLogits(3)
    x = torch.randn(3, 6)
    with pytest.warns(FutureWarning, match=r"^passing a FederationGraph in place of x is "
                      r"deprecated and will stop working: pass its x \(graph\.x\)$"):
        out, allocation = op(FederationGraph(x=x))
    expected, expected_allocation = op(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(allocation, expected_allocation, rtol=0, atol=0)
    with pytest.warns(FutureWarning):
        torch.testing.assert_close(op.allocation(FederationGraph(x=x)), expected_allocation,
                                   rtol=0, atol=0)
    with pytest.raises(TypeError, match=r"^expected client parameters as a \(num_clients, "
                       r"num_params\) tensor, got FederationGraph$"):
        op(FederationGraph(edge_index=torch.tensor([[0], [1]])))


@pytest.mark.parametrize("module", ["gat", "logits"])
def test_complete_edge_index_equals_the_default_graph(module):
    # Agreement of the two input forms: the complete graph given as edges (self
    # loops left out: one is added per client) equals the default dense path.
    torch.manual_seed(2)
    op = ClientGAT(6, hidden_channels=4, heads=2) if module == "gat" else AllocationLogits(4)
    if module == "gat":
        random_similarity_coefficients(op, seed=2)
    else:
        with torch.no_grad():
            op.logits.copy_(torch.randn(4, 4))
    x = torch.randn(4, 6)
    out, alloc = op(x)
    out_e, alloc_e = op(x, complete_graph(4, self_loops=False))
    torch.testing.assert_close(alloc_e, alloc, atol=1e-6, rtol=0)
    torch.testing.assert_close(out_e, out, atol=1e-6, rtol=0)
    torch.testing.assert_close(op.allocation(x, complete_graph(4)), alloc, atol=1e-6, rtol=0)


@pytest.mark.parametrize("module", ["gat", "logits"])
def test_edge_index_restricts_the_allocation(module):
    # Edges 1 -> 0, 2 -> 0 and 0 -> 2: client 0 spreads over {0, 1, 2}, client 1
    # keeps only itself, client 2 over {0, 2}; each row is the full softmax
    # restricted to those entries and renormalized (scores are per edge, and with
    # one head the mean over heads is that softmax).
    torch.manual_seed(3)
    op = ClientGAT(6, hidden_channels=4, heads=1) if module == "gat" else AllocationLogits(3)
    if module == "logits":
        with torch.no_grad():
            op.logits.copy_(torch.randn(3, 3))
    x = torch.randn(3, 6)
    edge_index = torch.tensor([[1, 2, 0], [0, 0, 2]])
    fired = []
    op.aggregation.register_propagate_forward_hook(lambda *args: fired.append(True))
    out, alloc = op(x, edge_index)
    assert fired == [True]  # the edge form goes through propagate
    mask = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    full = op.allocation(x)
    expected = full * mask / (full * mask).sum(dim=1, keepdim=True)
    torch.testing.assert_close(alloc, expected, atol=1e-6, rtol=0)
    assert torch.equal(alloc == 0, mask == 0)
    torch.testing.assert_close(out, alloc @ x, atol=1e-6, rtol=0)
    torch.testing.assert_close(out[1], x[1])


def test_client_gat_permutation_equivariance():
    torch.manual_seed(3)
    gat = ClientGAT(6, hidden_channels=4, heads=3)
    x = torch.randn(5, 6)
    perm = torch.tensor([3, 0, 4, 1, 2])
    out, alloc = gat(x)
    out_p, alloc_p = gat(x[perm])
    assert torch.allclose(alloc_p, alloc[perm][:, perm], atol=1e-6)
    assert torch.allclose(out_p, out[perm], atol=1e-5)


def test_client_gat_identical_clients_uniform():
    torch.manual_seed(4)
    gat = ClientGAT(6, hidden_channels=4, heads=2)
    x = torch.randn(1, 6).repeat(5, 1)
    out, alloc = gat(x)
    assert torch.allclose(alloc, torch.full((5, 5), 0.2), atol=1e-6)
    assert torch.allclose(out, x, atol=1e-6)


def test_client_gat_clients_join():
    torch.manual_seed(5)
    gat = ClientGAT(6, hidden_channels=4, heads=2)
    x = torch.randn(10, 6)
    _, alloc8 = gat(x[:8])
    out10, alloc10 = gat(x)
    assert alloc10.shape == (10, 10) and out10.shape == (10, 6)
    assert torch.allclose(alloc10.sum(dim=1), torch.ones(10))
    assert torch.allclose(alloc10, manual_allocation(gat, x), atol=1e-6)
    _, alloc8_again = gat(x[:8])
    assert torch.allclose(alloc8_again, alloc8)
    random_similarity_coefficients(gat, seed=5)  # a trained similarity term, too
    assert torch.allclose(gat.allocation(x), manual_allocation(gat, x), atol=1e-6)

    # With one head and no similarity term (s_ij depends on the mean of all
    # clients), the old clients' scores are unchanged and only renormalized
    # over the two new ones (LayerNorm is per client).
    single = ClientGAT(6, hidden_channels=4, heads=1, similarity=False)
    _, alloc8 = single(x[:8])
    _, alloc10 = single(x)
    renorm = alloc10[:8, :8] / alloc10[:8, :8].sum(dim=1, keepdim=True)
    assert torch.allclose(renorm, alloc8, atol=1e-6)


def test_client_gat_input_errors():
    gat = ClientGAT(6, hidden_channels=2, heads=1)
    with pytest.raises(ValueError, match="built for in_channels=6"):
        gat(torch.randn(3, 5))
    with pytest.raises(ValueError, match=r"\(num_clients, num_params\)"):
        gat(torch.randn(6))
    with pytest.raises(TypeError, match=r"\(num_clients, num_params\) tensor, got list$"):
        gat([[0.0] * 6])
    with pytest.raises(ValueError, match=r"x\.to\(torch\.float32\) or "
                       r"module\.to\(torch\.float64\)"):
        gat(torch.randn(3, 6, dtype=torch.float64))
    # Integer parameters: the hint converts the input (module.to(torch.int64) would raise).
    with pytest.raises(ValueError, match=r"^client parameters are torch\.int64: pass "
                       r"floating-point parameters \(e\.g\. x\.float\(\)\)$"):
        gat(torch.ones(3, 6, dtype=torch.int64))
    with pytest.raises(ValueError, match="hidden_channels must be a positive int"):
        ClientGAT(6, hidden_channels=0)
    with pytest.raises(ValueError, match="similarity_scale must be positive"):
        ClientGAT(6, similarity_scale=0.0)
    with pytest.raises(TypeError, match="similarity must be a bool"):
        ClientGAT(6, similarity="cosine")



@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("module", ["gat", "logits"])
def test_non_finite_client_parameters_are_refused(bad, module):
    x = torch.randn(4, 6)
    poisoned = x.clone()
    poisoned[1, 3] = bad
    poisoned[3, 0] = bad
    gat = ClientGAT(6, hidden_channels=2, heads=2)
    op = gat if module == "gat" else AllocationLogits(4)
    with pytest.raises(ValueError, match=r"^client parameters hold NaN or inf in 2 of 4 "
                       r"clients \(rows 1, 3\)"):
        op(poisoned)
    theta, alloc = op(x)  # the same clients, finite: accepted
    assert torch.isfinite(theta).all() and torch.isfinite(alloc).all()


def test_gradient_feedback_equals_end_to_end_autograd():
    torch.manual_seed(6)
    theta, target, _ = two_groups(seed=6, n=4, d=5)
    gat = ClientGAT(5, hidden_channels=3, heads=2)
    random_similarity_coefficients(gat, seed=6)

    # End to end: L = sum_i ||theta_tilde_i - t_i||^2 straight through autograd.
    theta_tilde, _ = gat(theta)
    ((theta_tilde - target) ** 2).sum().backward()
    expected = {name: p.grad.clone() for name, p in gat.named_parameters() if p.grad is not None}
    gat.zero_grad()

    # Federated: each client returns G_i = dL_i/d theta_tilde_i = 2 (theta_tilde_i - t_i).
    theta_tilde, _ = gat(theta)
    feedback = 2 * (theta_tilde.detach() - target)
    allocation_backward(theta_tilde, feedback, mode="gradient")
    got = {name: p.grad for name, p in gat.named_parameters() if p.grad is not None}

    assert set(got) == set(expected) == {"conv.att_src", "conv.att_dst", "conv.lin.weight",
                                         "similarity_weight", "self_weight"}
    for name in expected:
        assert torch.allclose(got[name], expected[name], atol=1e-6), name
        assert expected[name].abs().sum() > 0


def test_delta_feedback_is_negated_gradient():
    torch.manual_seed(7)
    theta = torch.randn(4, 5)
    delta = torch.randn(4, 5)
    gat = ClientGAT(5, hidden_channels=3, heads=2)
    theta_tilde, _ = gat(theta)
    allocation_backward(theta_tilde, delta, mode="delta")
    from_delta = gat.conv.att_src.grad.clone()
    gat.zero_grad()
    theta_tilde, _ = gat(theta)
    allocation_backward(theta_tilde, -delta, mode="gradient")
    assert torch.allclose(gat.conv.att_src.grad, from_delta)


def regression_federation(seed: int, n: int = 4, features: int = 3):
    # Two groups of clients fitting y = w^T x + b with their own w; the flat
    # model is (w, b). Returns node features theta and train / held-out data.
    gen = torch.Generator().manual_seed(seed)
    group = torch.arange(n) * 2 // n
    weight = torch.randn(features, generator=gen, dtype=torch.float64)
    weight = weight + torch.randn(2, features, generator=gen, dtype=torch.float64)

    def split(m):
        x = torch.randn(n, m, features, generator=gen, dtype=torch.float64)
        y = torch.einsum("nsf,nf->ns", x, weight[group])
        return x, y + 0.5 * torch.randn(y.shape, generator=gen, dtype=torch.float64)

    theta = torch.cat([weight[group], torch.zeros(n, 1, dtype=torch.float64)], dim=1)
    theta = theta + 0.5 * torch.randn(theta.shape, generator=gen, dtype=torch.float64)
    return theta, split(8), split(8)


def client_mse(theta, data):
    # L_i(theta_i) for every client i: (N,).
    x, y = data
    pred = torch.einsum("nsf,nf->ns", x, theta[:, :-1]) + theta[:, -1:]
    return ((pred - y) ** 2).mean(dim=1)


def held_out_gradient(theta_tilde, data):
    # What client i uploads in feedback="gradient": dL_i / d theta_tilde_i.
    leaf = theta_tilde.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(client_mse(leaf, data).sum(), leaf)
    return grad


def local_steps(start, data, lr, steps):
    # Plain gradient descent of every client on its own loss; returns the delta.
    theta = start.detach().clone()
    for _ in range(steps):
        theta = theta - lr * held_out_gradient(theta, data)
    return theta - start.detach()


def float64_gat(similarity: bool, seed: int) -> ClientGAT:
    torch.manual_seed(seed)
    gat = ClientGAT(4, hidden_channels=3, heads=2, similarity=similarity).double()
    if similarity:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            gat.similarity_weight.copy_(0.02 * torch.randn(2, generator=gen))
            gat.self_weight.copy_(0.02 * torch.randn(2, generator=gen))
    return gat


def trained_params(gat: ClientGAT) -> dict:
    # Everything the server optimizer steps (GATConv's output bias never reaches A).
    return {name: p for name, p in gat.named_parameters()
            if p.requires_grad and name != "conv.bias"}


def finite_differences(loss_fn, params: dict, eps: float = 1e-6) -> dict:
    # Central differences of loss_fn() in every entry of every parameter.
    grads = {}
    for name, param in params.items():
        grad = torch.zeros_like(param)
        flat = param.data.view(-1)
        for k in range(flat.numel()):
            old = float(flat[k])
            flat[k] = old + eps
            plus = float(loss_fn().detach())
            flat[k] = old - eps
            minus = float(loss_fn().detach())
            flat[k] = old
            grad.view(-1)[k] = (plus - minus) / (2 * eps)
        grads[name] = grad
    return grads


@pytest.mark.parametrize("similarity", [True, False])
def test_gradient_feedback_matches_finite_differences(similarity):
    # L(psi) = sum_i L_i(theta_tilde_i(psi)) on held-out data, in float64: the
    # gradient allocation_backward leaves in .grad is dL/dpsi.
    theta, _, held_out = regression_federation(seed=10)
    gat = float64_gat(similarity, seed=10)
    params = trained_params(gat)

    theta_tilde, _ = gat(theta)
    allocation_backward(theta_tilde, held_out_gradient(theta_tilde, held_out), mode="gradient")
    expected = finite_differences(lambda: client_mse(gat(theta)[0], held_out).sum(), params)

    for name, param in params.items():
        assert expected[name].abs().max() > 1e-4, name  # the check has something to check
        torch.testing.assert_close(param.grad, expected[name], atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("similarity", [True, False])
def test_delta_feedback_sign_and_scale_by_finite_differences(similarity):
    theta, train, held_out = regression_federation(seed=11)
    gat = float64_gat(similarity, seed=11)
    params = trained_params(gat)
    loss = lambda: client_mse(gat(theta)[0], held_out).sum()  # noqa: E731 - the closure finite_differences evaluates
    exact = finite_differences(loss, params)

    # One local step of size eta on the held-out loss itself gives
    # delta_i = -eta g_i, so feedback="delta" applies exactly eta * dL/dpsi.
    eta = 0.05
    theta_tilde, _ = gat(theta)
    allocation_backward(theta_tilde, local_steps(theta_tilde, held_out, eta, 1), mode="delta")
    for name, param in params.items():
        torch.testing.assert_close(param.grad, eta * exact[name], atol=1e-8, rtol=1e-6)

    # With several steps on separate training data it is a pseudo-gradient:
    # not dL/dpsi, but a descent direction of the held-out loss here.
    gat.zero_grad()
    theta_tilde, _ = gat(theta)
    allocation_backward(theta_tilde, local_steps(theta_tilde, train, eta, 5), mode="delta")
    applied = torch.cat([p.grad.reshape(-1) for p in params.values()])
    true = torch.cat([g.reshape(-1) for g in exact.values()])
    assert float(applied @ true) > 0.5 * float(applied.norm() * true.norm())
    assert not torch.allclose(applied / applied.norm(), true / true.norm(), atol=1e-3)


@pytest.mark.parametrize("similarity", [True, False])
def test_small_server_step_decreases_held_out_loss(similarity):
    # One SGD step psi <- psi - lr dL/dpsi lowers L by lr |dL/dpsi|^2 to first
    # order; lr is set so that the predicted decrease is 0.1% of L.
    theta, _, held_out = regression_federation(seed=12)
    gat = float64_gat(similarity, seed=12)
    params = trained_params(gat)
    with torch.no_grad():
        before = float(client_mse(gat(theta)[0], held_out).sum())
    theta_tilde, _ = gat(theta)
    allocation_backward(theta_tilde, held_out_gradient(theta_tilde, held_out))
    squared_norm = sum(float((p.grad ** 2).sum()) for p in params.values())
    lr = 1e-3 * before / squared_norm
    torch.optim.SGD(params.values(), lr=lr).step()
    with torch.no_grad():
        after = float(client_mse(gat(theta)[0], held_out).sum())
    assert before - after == pytest.approx(lr * squared_norm, rel=0.05)


def test_allocation_backward_errors():
    gat = ClientGAT(5, hidden_channels=2, heads=1)
    theta_tilde, _ = gat(torch.randn(3, 5))
    with pytest.raises(ValueError, match="mode must be one of"):
        allocation_backward(theta_tilde, torch.zeros(3, 5), mode="loss")
    with pytest.raises(ValueError, match="one D-vector per client"):
        allocation_backward(theta_tilde, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="no autograd graph"):
        allocation_backward(theta_tilde.detach(), torch.zeros(3, 5))


def train_two_groups(similarity: bool, steps: int = 20):
    torch.manual_seed(1)
    theta, target, group = two_groups(seed=1)
    same = (group[:, None] == group[None, :]).float()
    gat = ClientGAT(theta.size(1), hidden_channels=4, heads=2)
    if not similarity:
        gat = paper_twin(gat)
    optimizer = torch.optim.SGD(gat.parameters(), lr=0.005)

    def evaluate():
        with torch.no_grad():
            theta_tilde, alloc = gat(theta)
        return float(((theta_tilde - target) ** 2).sum()), float((alloc * same).sum(1).mean())

    before = evaluate()
    for _ in range(steps):
        optimizer.zero_grad()
        theta_tilde, _ = gat(theta)
        allocation_backward(theta_tilde, 2 * (theta_tilde.detach() - target), mode="gradient")
        optimizer.step()
    return before, evaluate()


def test_client_gat_learns_two_groups():
    (loss0, same0), (loss_paper, same_paper) = train_two_groups(similarity=False)
    (loss0_sim, same0_sim), (loss_sim, same_sim) = train_two_groups(similarity=True)
    assert (loss0, same0) == pytest.approx((loss0_sim, same0_sim))  # same start
    # Both learn; the paper's static attention levels off well below the
    # block structure the similarity term reaches.
    assert loss_paper < 0.8 * loss0 and same_paper > same0
    assert same_sim > 0.95 and loss_sim < 0.1 * loss0
    assert same_sim > same_paper + 0.2


def test_allocation_logits():
    ablation = AllocationLogits(4)
    assert str(ablation) == "AllocationLogits(num_clients=4)"
    x = torch.randn(4, 3)
    theta_tilde, alloc = ablation(x)
    assert torch.allclose(alloc, torch.full((4, 4), 0.25))
    assert torch.allclose(theta_tilde, x.mean(dim=0).expand(4, 3), atol=1e-6)
    with pytest.raises(ValueError, match="call add_clients"):
        ablation(torch.randn(5, 3))


def test_allocation_logits_learns_and_grows():
    theta, target, group = two_groups(seed=1)
    same = (group[:, None] == group[None, :]).float()
    ablation = AllocationLogits(6)
    optimizer = torch.optim.SGD(ablation.parameters(), lr=0.01)
    for _ in range(10):
        optimizer.zero_grad()
        theta_tilde, _ = ablation(theta)
        allocation_backward(theta_tilde, 2 * (theta_tilde.detach() - target), mode="gradient")
        optimizer.step()
    theta_tilde, alloc = ablation(theta)
    assert ((theta_tilde - target) ** 2).sum() < ((theta.mean(0) - target) ** 2).sum()
    assert (alloc * same).sum(dim=1).min() > 0.6

    learned = ablation.logits.detach().clone()
    ablation.add_clients(2)
    assert ablation.num_clients == 8 and ablation.logits.shape == (8, 8)
    assert torch.equal(ablation.logits[:6, :6], learned)
    assert (ablation.logits[6:] == 0).all() and (ablation.logits[:, 6:] == 0).all()
    _, alloc8 = ablation(torch.randn(8, theta.size(1)))
    assert torch.allclose(alloc8[6:], torch.full((2, 8), 0.125))
    assert torch.allclose(alloc8.sum(dim=1), torch.ones(8))

    # A module built before the clients joined can resume from the grown state.
    resumed = AllocationLogits(6)
    resumed.load_state_dict(ablation.state_dict())
    assert torch.equal(resumed.logits, ablation.logits) and resumed.num_clients == 8
    parent = torch.nn.ModuleDict({"server": AllocationLogits(6)})
    parent.load_state_dict({"server.logits": ablation.logits.detach()})
    assert parent["server"].num_clients == 8
