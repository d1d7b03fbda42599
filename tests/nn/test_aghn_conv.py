import math

import pytest
import torch
import torch.nn.functional as F

from pyg_fedgraph.nn.aghn_conv import AGHNConv

PTR = torch.tensor([0, 2, 4])


def _set(conv, sharpness, self_weight):
    with torch.no_grad():
        conv.sharpness.copy_(torch.as_tensor(sharpness, dtype=conv.sharpness.dtype))
        conv.self_weight.copy_(torch.as_tensor(self_weight, dtype=conv.self_weight.dtype))


def _random_case(n=5, sizes=(3, 2, 4), seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    ptr = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()])
    d = int(ptr[-1])
    x = torch.randn(n, d, generator=gen, dtype=dtype)
    delta = torch.randn(n, d, generator=gen, dtype=dtype)
    conv = AGHNConv(n, len(sizes)).to(dtype)
    _set(conv, 0.5 + 4 * torch.rand(n, len(sizes), generator=gen),
         0.05 + torch.rand(n, len(sizes), generator=gen))
    return conv, x, delta, ptr


def _loop_reference(x, delta, ptr, p, q, q_min, neighbours):
    """Client by client, layer by layer, straight from the paper's formulas."""
    n, num_layers = p.shape
    out = torch.zeros_like(x)
    for i in range(n):
        for layer in range(num_layers):
            a, b = int(ptr[layer]), int(ptr[layer + 1])
            exps = [math.exp(float(p[i, layer]) * float(
                F.cosine_similarity(delta[i, a:b], delta[j, a:b], dim=0)))
                for j in neighbours[i]]
            q_il = max(float(q[i, layer]), q_min)
            total = q_il + (1.0 if exps else 0.0)
            acc = q_il * x[i, a:b]
            for j, e in zip(neighbours[i], exps, strict=True):
                acc = acc + e / sum(exps) * x[j, a:b]
            out[i, a:b] = acc / total
    return out


def test_hand_computed_example():
    # Layer 1 (columns 0-1): cos(0,1)=0, cos(0,2)=-1, cos(1,2)=0.
    # Layer 2 (columns 2-3): cos(0,1)=1, cos(0,2)=0,  cos(1,2)=0.
    delta = torch.tensor([[1.0, 0.0, 1.0, 0.0],
                          [0.0, 2.0, 2.0, 0.0],
                          [-3.0, 0.0, 0.0, 1.0]])
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0],
                      [-1.0, 0.0, 5.0, 1.0],
                      [2.0, -2.0, 0.0, 8.0]])
    p = [[1.0, 2.0], [3.0, 0.5], [2.0, 1.0]]
    q = [[0.5, 0.25], [1.0, 0.0], [0.2, 3.0]]
    conv = AGHNConv(3, 2)
    _set(conv, p, q)

    e = math.exp
    # Layer 1.  Client 0: p=1, others c=(0, -1), q=0.5, total 1.5.
    s0 = e(0) + e(-1)
    row00 = [0.5 / 1.5, e(0) / s0 / 1.5, e(-1) / s0 / 1.5]
    # Client 1: p=3, others c=(0, 0) -> 1/2 each, q=1, total 2.
    row01 = [0.25, 0.5, 0.25]
    # Client 2: p=2, others c=(-1, 0), q=0.2, total 1.2.
    s2 = e(-2) + e(0)
    row02 = [e(-2) / s2 / 1.2, e(0) / s2 / 1.2, 0.2 / 1.2]
    # Layer 2.  Client 0: p=2, others c=(1, 0), q=0.25, total 1.25.
    t0 = e(2) + e(0)
    row10 = [0.25 / 1.25, e(2) / t0 / 1.25, e(0) / t0 / 1.25]
    # Client 1: p=0.5, others c=(1, 0), q=0 -> no self share.
    t1 = e(0.5) + e(0)
    row11 = [e(0.5) / t1, 0.0, e(0) / t1]
    # Client 2: p=1, others c=(0, 0), q=3, total 4.
    row12 = [0.125, 0.125, 0.75]
    expected = torch.tensor([[row00, row01, row02], [row10, row11, row12]])

    out, alpha = conv(x, delta=delta, layer_ptr=PTR, return_attention_weights=True)
    assert alpha.shape == (2, 3, 3)
    torch.testing.assert_close(alpha, expected)

    expected_out = torch.empty(3, 4)
    expected_out[:, :2] = expected[0] @ x[:, :2]
    expected_out[:, 2:] = expected[1] @ x[:, 2:]
    torch.testing.assert_close(out, expected_out)
    # One entry written out: client 1, coordinate 0 = 0.25*1 + 0.5*(-1) + 0.25*2.
    assert out[1, 0].item() == pytest.approx(0.25)


def test_self_share_and_row_sums():
    conv, x, delta, ptr = _random_case()
    _, alpha = conv(x, delta=delta, layer_ptr=ptr, return_attention_weights=True)
    q = conv.self_weight.detach()
    diag = alpha.diagonal(dim1=1, dim2=2)  # (L, N)
    torch.testing.assert_close(diag, (q / (1 + q)).t())
    torch.testing.assert_close(alpha.sum(-1), torch.ones(3, 5))
    assert bool((alpha >= 0).all())


def test_batched_matches_loop_reference_complete_graph():
    conv, x, delta, ptr = _random_case(dtype=torch.float64)
    out = conv(x, delta=delta, layer_ptr=ptr)
    neighbours = [[j for j in range(5) if j != i] for i in range(5)]
    ref = _loop_reference(x, delta, ptr, conv.sharpness.detach(), conv.self_weight.detach(),
                          conv.self_weight_min, neighbours)
    torch.testing.assert_close(out, ref)


def test_batched_matches_loop_reference_sparse_graph():
    conv, x, delta, ptr = _random_case(dtype=torch.float64, seed=3)
    # Edges j -> i; client 4 has no in-neighbour and keeps its own model.
    edge_index = torch.tensor([[1, 2, 0, 3, 0, 1, 2, 3],
                               [0, 0, 1, 1, 2, 3, 3, 3]])
    out, alpha = conv(x, edge_index, delta=delta, layer_ptr=ptr, return_attention_weights=True)
    neighbours = [[1, 2], [0, 3], [0], [1, 2], []]  # the edge 3 -> 3 is a self loop
    ref = _loop_reference(x, delta, ptr, conv.sharpness.detach(), conv.self_weight.detach(),
                          conv.self_weight_min, neighbours)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(out[4], x[4])
    # Self loops in edge_index are ignored: the self weight is q.
    assert alpha[:, 3, 4].abs().sum() == 0 and alpha[:, 2, 3].abs().sum() == 0
    torch.testing.assert_close(alpha.sum(-1), torch.ones(3, 5, dtype=torch.float64))


def test_self_loops_in_edge_index_are_dropped():
    conv, x, delta, ptr = _random_case(n=3, sizes=(2, 2))
    edge_index = torch.tensor([[1, 2, 0, 2, 0, 1], [0, 0, 1, 1, 2, 2]])
    with_loops = torch.cat([edge_index, torch.tensor([[0, 1, 2], [0, 1, 2]])], dim=1)
    complete = conv(x, delta=delta, layer_ptr=ptr)
    torch.testing.assert_close(conv(x, with_loops, delta=delta, layer_ptr=ptr), complete)
    torch.testing.assert_close(conv(x, edge_index, delta=delta, layer_ptr=ptr), complete)


def test_gradient_matches_finite_differences():
    conv, x, delta, ptr = _random_case(n=3, sizes=(3, 2), seed=1, dtype=torch.float64)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    out = conv(x, delta=delta, layer_ptr=ptr)
    grad_p, grad_q = torch.autograd.grad(out, [conv.sharpness, conv.self_weight],
                                         grad_outputs=g)
    eps = 1e-6
    for param, grad in ((conv.sharpness, grad_p), (conv.self_weight, grad_q)):
        numeric = torch.zeros_like(grad)
        for idx in torch.cartesian_prod(torch.arange(3), torch.arange(2)).tolist():
            idx = tuple(idx)
            with torch.no_grad():
                param[idx] += eps
                plus = (conv(x, delta=delta, layer_ptr=ptr) * g).sum()
                param[idx] -= 2 * eps
                minus = (conv(x, delta=delta, layer_ptr=ptr) * g).sum()
                param[idx] += eps
            numeric[idx] = (plus - minus) / (2 * eps)
        torch.testing.assert_close(grad, numeric, rtol=1e-6, atol=1e-8)
        assert grad.abs().max() > 1e-3  # the check is not vacuous


def test_hypernetwork_update_rule():
    conv, x, delta, ptr = _random_case(seed=2, dtype=torch.float64)
    theta_tilde = conv(x, delta=delta, layer_ptr=ptr)
    delta_new = torch.randn(x.shape, generator=torch.Generator().manual_seed(5),
                            dtype=torch.float64)
    grads = torch.autograd.grad(theta_tilde, [conv.sharpness, conv.self_weight],
                                grad_outputs=-delta_new)
    before = [conv.sharpness.detach().clone(), conv.self_weight.detach().clone()]
    opt = torch.optim.SGD(conv.parameters(), lr=1e-3)
    for param, grad in zip([conv.sharpness, conv.self_weight], grads, strict=True):
        param.grad = grad
    opt.step()
    # The step moves theta_tilde along the clients' updates: <theta_tilde, delta_new> grows
    # by about lr * |grad|^2.
    with torch.no_grad():
        after = conv(x, delta=delta, layer_ptr=ptr)
    gain = ((after - theta_tilde.detach()) * delta_new).sum()
    predicted = 1e-3 * sum((g ** 2).sum() for g in grads)
    assert gain > 0
    assert gain.item() == pytest.approx(predicted.item(), rel=1e-2)
    torch.testing.assert_close(conv.sharpness.detach(), before[0] - 1e-3 * grads[0])
    torch.testing.assert_close(conv.self_weight.detach(), before[1] - 1e-3 * grads[1])


def test_round_zero_is_uniform():
    conv, x, _, ptr = _random_case(n=4, sizes=(2, 3))
    out, alpha = conv(x, delta=None, layer_ptr=ptr, return_attention_weights=True)
    torch.testing.assert_close(alpha, torch.full((2, 4, 4), 0.25))
    torch.testing.assert_close(out, x.mean(0, keepdim=True).expand(4, -1))
    assert not out.requires_grad
    # On a sparse graph: uniform over the in-neighbours and the client itself.
    edge_index = torch.tensor([[1, 2, 0], [0, 0, 1]])
    out, alpha = conv(x, edge_index, delta=None, layer_ptr=ptr, return_attention_weights=True)
    torch.testing.assert_close(out[0], x[:3].mean(0))
    torch.testing.assert_close(out[1], x[:2].mean(0))
    torch.testing.assert_close(out[2:], x[2:])


def test_all_ones_placeholder_reproduces_authors_round_zero():
    conv = AGHNConv(4, 2, self_weight=0.2)
    x = torch.randn(4, 5)
    _, alpha = conv(x, delta=torch.ones_like(x), layer_ptr=torch.tensor([0, 2, 5]),
                    return_attention_weights=True)
    expected = torch.full((2, 4, 4), 1 / 3 / 1.2)
    expected.diagonal(dim1=1, dim2=2).fill_(0.2 / 1.2)
    torch.testing.assert_close(alpha, expected)


def test_permutation_equivariance():
    conv, x, delta, ptr = _random_case(seed=4)
    out, alpha = conv(x, delta=delta, layer_ptr=ptr, return_attention_weights=True)
    perm = torch.tensor([3, 0, 4, 1, 2])
    permuted = AGHNConv(5, 3)
    _set(permuted, conv.sharpness.detach()[perm], conv.self_weight.detach()[perm])
    out_p, alpha_p = permuted(x[perm], delta=delta[perm], layer_ptr=ptr,
                              return_attention_weights=True)
    torch.testing.assert_close(out_p, out[perm])
    torch.testing.assert_close(alpha_p, alpha[:, perm][:, :, perm])


def test_layers_do_not_mix():
    conv, x, delta, ptr = _random_case(seed=5)
    out = conv(x, delta=delta, layer_ptr=ptr)
    delta2 = delta.clone()
    delta2[:, ptr[1]:ptr[2]] = torch.randn(5, int(ptr[2] - ptr[1]))
    x2 = x.clone()
    x2[:, ptr[2]:] += 10.0
    out2 = conv(x2, delta=delta2, layer_ptr=ptr)
    torch.testing.assert_close(out2[:, :ptr[1]], out[:, :ptr[1]])
    assert not torch.allclose(out2[:, ptr[1]:ptr[2]], out[:, ptr[1]:ptr[2]])
    assert not torch.allclose(out2[:, ptr[2]:], out[:, ptr[2]:])


def test_client_id_selects_table_rows():
    conv, x, delta, ptr = _random_case(n=5, seed=6)
    ids = torch.tensor([4, 1, 2])
    out, alpha = conv(x[:3], delta=delta[:3], layer_ptr=ptr, client_id=ids,
                      return_attention_weights=True)
    small = AGHNConv(3, 3)
    _set(small, conv.sharpness.detach()[ids], conv.self_weight.detach()[ids])
    ref, ref_alpha = small(x[:3], delta=delta[:3], layer_ptr=ptr, return_attention_weights=True)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(alpha, ref_alpha)
    # Using the permuted rows is the same as permuting the clients.
    perm = torch.tensor([2, 0, 4, 3, 1])
    full = conv(x, delta=delta, layer_ptr=ptr)
    torch.testing.assert_close(conv(x[perm], delta=delta[perm], layer_ptr=ptr, client_id=perm),
                               full[perm])
    # Default client_id needs enough rows.
    with pytest.raises(ValueError, match="add_clients"):
        small(x, delta=delta, layer_ptr=ptr)
    with pytest.raises(ValueError, match="client_id must lie in"):
        conv(x[:2], delta=delta[:2], layer_ptr=ptr, client_id=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="duplicates"):
        conv(x[:2], delta=delta[:2], layer_ptr=ptr, client_id=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="one entry per row"):
        conv(x[:2], delta=delta[:2], layer_ptr=ptr, client_id=torch.tensor([0, 1, 2]))
    with pytest.raises(TypeError, match="integer"):
        conv(x[:2], delta=delta[:2], layer_ptr=ptr, client_id=torch.tensor([0.0, 1.0]))


def test_negative_self_weight_is_clamped():
    conv, x, delta, ptr = _random_case(n=4, sizes=(2, 2), seed=8)
    with torch.no_grad():
        conv.self_weight[0, 0] = -0.5
    out, alpha = conv(x, delta=delta, layer_ptr=ptr, return_attention_weights=True)
    assert alpha[0, 0, 0] == 0
    torch.testing.assert_close(alpha.sum(-1), torch.ones(2, 4))
    # No gradient flows through the clamp to the clamped entry.
    grad_q, = torch.autograd.grad(out, [conv.self_weight], grad_outputs=torch.ones_like(out))
    assert grad_q[0, 0] == 0 and grad_q[1, 0] != 0

    conv_min = AGHNConv(4, 2, self_weight_min=0.1)
    _set(conv_min, conv.sharpness.detach(), conv.self_weight.detach())
    _, alpha = conv_min(x, delta=delta, layer_ptr=ptr, return_attention_weights=True)
    assert alpha[0, 0, 0].item() == pytest.approx(0.1 / 1.1)
    # clamp_self_weight_ projects the stored table, other entries untouched.
    before = conv_min.self_weight.detach().clone()
    conv_min.clamp_self_weight_()
    assert conv_min.self_weight[0, 0].item() == pytest.approx(0.1)
    torch.testing.assert_close(conv_min.self_weight.detach()[1:], before[1:])


def test_isolated_client_with_zero_self_weight_keeps_its_model():
    conv = AGHNConv(1, 1, self_weight=0.0)
    x, delta = torch.randn(1, 3), torch.randn(1, 3)
    out, alpha = conv(x, delta=delta, layer_ptr=torch.tensor([0, 3]), return_attention_weights=True)
    torch.testing.assert_close(out, x)
    torch.testing.assert_close(alpha, torch.ones(1, 1, 1))


def test_zero_delta_gives_zero_cosine_not_nan():
    conv = AGHNConv(3, 1, sharpness=10.0, self_weight=0.5)
    x = torch.randn(3, 2)
    delta = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    out, alpha = conv(x, delta=delta, layer_ptr=torch.tensor([0, 2]), return_attention_weights=True)
    assert torch.isfinite(out).all()
    # Client 0 sees cosine 0 with both others: equal weights.
    torch.testing.assert_close(alpha[0, 0], torch.tensor([0.5, 0.5, 0.5]) / 1.5)


def test_add_clients_keeps_rows_and_initializes_new_ones():
    conv = AGHNConv(2, 3, sharpness=5.0, self_weight=0.1)
    with torch.no_grad():
        conv.sharpness[1] = 7.0
        conv.self_weight[0] = 0.3
    conv.add_clients(2)
    assert conv.num_clients == 4 and conv.sharpness.shape == (4, 3)
    torch.testing.assert_close(conv.sharpness.detach(),
                               torch.tensor([[5.0] * 3, [7.0] * 3, [5.0] * 3, [5.0] * 3]))
    torch.testing.assert_close(conv.self_weight.detach(),
                               torch.tensor([[0.3] * 3, [0.1] * 3, [0.1] * 3, [0.1] * 3]))
    assert {n for n, _ in conv.named_parameters()} == {"sharpness", "self_weight"}
    out = conv(torch.randn(4, 6), delta=torch.randn(4, 6), layer_ptr=torch.tensor([0, 2, 4, 6]))
    assert out.shape == (4, 6)
    with pytest.raises(ValueError, match="non-negative"):
        conv.add_clients(-1)
    conv.reset_parameters()
    torch.testing.assert_close(conv.sharpness.detach(), torch.full((4, 3), 5.0))


def test_state_dict_round_trip():
    conv, x, delta, ptr = _random_case(seed=9)
    fresh = AGHNConv(5, 3)
    fresh.load_state_dict(conv.state_dict())
    torch.testing.assert_close(fresh(x, delta=delta, layer_ptr=ptr),
                               conv(x, delta=delta, layer_ptr=ptr))


def test_repr_and_constructor_errors():
    assert str(AGHNConv(20, 4)) == "AGHNConv(num_clients=20, num_layers=4)"
    with pytest.raises(ValueError, match="num_clients"):
        AGHNConv(0, 4)
    with pytest.raises(ValueError, match="num_layers"):
        AGHNConv(3, 0)


def test_shape_errors():
    conv, x, delta, ptr = _random_case(n=3, sizes=(2, 2))
    with pytest.raises(ValueError, match="x must be"):
        conv(x[0], delta=delta[0], layer_ptr=ptr)
    with pytest.raises(ValueError, match="delta has shape"):
        conv(x, delta=delta[:, :3], layer_ptr=ptr)
    with pytest.raises(ValueError, match="layer_ptr must have 3 entries"):
        conv(x, delta=delta, layer_ptr=torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="must increase from 0"):
        conv(x, delta=delta, layer_ptr=torch.tensor([0, 2, 5]))
    with pytest.raises(ValueError, match="must increase from 0"):
        conv(x, delta=delta, layer_ptr=torch.tensor([0, 5, 4]))
    with pytest.raises(ValueError, match=r"edge_index must be \(2, E\)"):
        conv(x, torch.tensor([0, 1]), delta=delta, layer_ptr=ptr)
    with pytest.raises(ValueError, match="outside"):
        conv(x, torch.tensor([[0, 3], [1, 1]]), delta=delta, layer_ptr=ptr)


def test_self_weight_at_the_threshold_gets_no_gradient():
    # Once q sits at q_min (here 0, after clamp_self_weight_), the forward clamp passes
    # no gradient: plain SGD can never raise it again.
    conv = AGHNConv(3, 1, sharpness=2.0, self_weight=0.3)
    with torch.no_grad():
        conv.self_weight[0] = -0.5
    conv.clamp_self_weight_()
    assert conv.self_weight[0, 0] == 0.0
    gen = torch.Generator().manual_seed(0)
    x, delta = torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen)
    out = conv(x, delta=delta, layer_ptr=torch.tensor([0, 4]))
    grad_q, = torch.autograd.grad(out, [conv.self_weight],
                                  grad_outputs=torch.randn(3, 4, generator=gen))
    assert grad_q[0, 0] == 0.0 and bool((grad_q[1:] != 0).all())
