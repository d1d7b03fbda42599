import subprocess
import sys
import textwrap

import pytest
import torch

from pyg_fedgraph.nn import aggregation
from pyg_fedgraph.nn.aggregation import GraphAggregation, dense_to_edges
from pyg_fedgraph.strategies.fedavg import weighted_average

# Three clients with two parameters each, and a hand-picked collaboration matrix
# (row i = the weights client i gives to clients 0, 1, 2).
X = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
W = torch.tensor([[0.5, 0.5, 0.0],
                  [0.0, 1.0, 0.0],
                  [0.2, 0.3, 0.5]])
# Row 0: 0.5*[1,2] + 0.5*[3,4] = [2, 3]; row 1: [3, 4];
# row 2: 0.2*[1,2] + 0.3*[3,4] + 0.5*[5,6] = [3.6, 4.6].
EXPECTED = torch.tensor([[2.0, 3.0], [3.0, 4.0], [3.6, 4.6]])
# The same matrix as edges j -> i (edge_index[:, e] = (j, i), weight W[i, j]).
EDGE_INDEX = torch.tensor([[0, 1, 1, 0, 1, 2],
                           [0, 0, 1, 2, 2, 2]])
EDGE_WEIGHT = torch.tensor([0.5, 0.5, 1.0, 0.2, 0.3, 0.5])


def test_hand_computed_three_clients():
    agg = GraphAggregation()
    assert str(agg) == "GraphAggregation(normalize=False)"
    assert torch.allclose(agg(X, EDGE_INDEX, EDGE_WEIGHT), EXPECTED)
    assert torch.allclose(agg(X, weight=W), EXPECTED)
    # Edge order does not matter.
    perm = torch.tensor([5, 2, 0, 4, 1, 3])
    assert torch.allclose(agg(X, EDGE_INDEX[:, perm], EDGE_WEIGHT[perm]), EXPECTED)
    # Without weights every edge counts once: row 0 = x0 + x1, row 1 = x1, row 2 = sum.
    assert torch.equal(agg(X, EDGE_INDEX),
                       torch.tensor([[4.0, 6.0], [3.0, 4.0], [9.0, 12.0]]))


def test_dense_to_edges_hand_computed():
    ei, ew = dense_to_edges(W)
    pairs = {(int(j), int(i)): float(w) for (j, i), w in zip(ei.t(), ew, strict=True)}
    assert pairs == {(int(j), int(i)): float(w)
                     for (j, i), w in zip(EDGE_INDEX.t(), EDGE_WEIGHT, strict=True)}
    ei, ew = dense_to_edges(W, keep_zeros=True)
    assert ei.size(1) == 9 and int((ew == 0).sum()) == 3
    assert torch.equal(ei[:, 1], torch.tensor([1, 0]))  # entry W[0, 1]: edge 1 -> 0
    with pytest.raises(ValueError, match=r"weight must be square \(N, N\), got \(2, 3\)"):
        dense_to_edges(torch.zeros(2, 3))


def test_edge_form_equals_dense_form_equals_matmul():
    gen = torch.Generator().manual_seed(0)
    n, d = 6, 11
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    w = torch.rand(n, n, generator=gen, dtype=torch.float64)
    w[w < 0.4] = 0.0  # a sparse graph with some empty entries
    ei, ew = dense_to_edges(w)
    agg = GraphAggregation()
    out_edges = agg(x, ei, ew)
    out_dense = agg(x, weight=w)
    assert out_edges.dtype == torch.float64
    assert torch.allclose(out_edges, w @ x, atol=1e-12)
    assert torch.allclose(out_dense, w @ x, atol=1e-12)


def test_gradients_agree_between_forms():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 5, generator=gen)
    w = torch.rand(4, 4, generator=gen)
    target = torch.randn(4, 5, generator=gen)
    ei, ew = dense_to_edges(w, keep_zeros=True)
    ew = ew.clone().requires_grad_()
    wd = w.clone().requires_grad_()
    ((GraphAggregation()(x, ei, ew) - target) ** 2).sum().backward()
    ((GraphAggregation()(x, weight=wd) - target) ** 2).sum().backward()
    # ew[e] is W[tgt, src] with edges enumerated row by row.
    assert torch.allclose(ew.grad.view(4, 4), wd.grad, atol=1e-5)


def _sparse_graph(n, edges, seed, dtype=torch.float64):
    r"""A random graph of ``edges`` distinct edges on ``n`` nodes (fewer than
    n^2 / 4, so GraphAggregation takes its CSR branch), as (edge_index,
    edge_weight, dense W)."""
    gen = torch.Generator().manual_seed(seed)
    flat = torch.randperm(n * n, generator=gen)[:edges]
    tgt, src = flat // n, flat % n
    weight = torch.rand(edges, generator=gen, dtype=dtype)
    w = torch.zeros(n, n, dtype=dtype)
    w[tgt, src] = weight
    return torch.stack([src, tgt]), weight, w


def test_csr_branch_is_taken_and_equals_the_dense_product(monkeypatch):
    n, d = 12, 7
    ei, ew, w = _sparse_graph(n, 20, seed=3)
    assert 4 * ei.size(1) < n * n
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    agg = GraphAggregation()
    seen = []
    agg.register_propagate_forward_hook(lambda module, inputs, out: seen.append(inputs[0].layout))
    real = aggregation.spmm

    def spy(adj, other, reduce):  # the CSR product inside message_and_aggregate
        seen.append(adj.layout)
        return real(adj, other, reduce)

    monkeypatch.setattr(aggregation, "spmm", spy)
    out = agg(x, ei, ew)
    assert seen == [torch.sparse_csr, torch.sparse_coo]  # spmm, then propagate returns
    torch.testing.assert_close(out, w @ x, atol=1e-12, rtol=0)
    # Per-layer weights take the CSR path layer by layer, in one propagate.
    ptr = torch.tensor([0, 3, 7])
    ew2 = torch.stack([ew, 2 * ew], dim=1)
    seen.clear()
    out = agg(x, ei, ew2, layer_ptr=ptr)
    assert seen == [torch.sparse_csr, torch.sparse_csr, torch.sparse_coo]
    torch.testing.assert_close(out[:, :3], (w @ x)[:, :3], atol=1e-12, rtol=0)
    torch.testing.assert_close(out[:, 3:], (2 * w @ x)[:, 3:], atol=1e-12, rtol=0)
    # Row normalization on the CSR path.
    normed = GraphAggregation(normalize=True)(x, ei, ew)
    rows = w.sum(1, keepdim=True)
    torch.testing.assert_close(normed, torch.where(rows > 0, w / rows.clamp_min(1e-300), 0.0)
                               @ x, atol=1e-12, rtol=0)


@pytest.mark.parametrize("edges", [["sparse", 10], ["dense", 40]])
def test_duplicate_edges_count_as_their_sum(edges):
    # Both branches (CSR below N^2/4 edges, dense above) and the edge-wise
    # message form sum the weights of repeated edges, per layer too.
    n = 8
    ei, ew, w = _sparse_graph(n, edges[1], seed=7)
    assert (4 * (ei.size(1) + 3) >= n * n) == (edges[0] == "dense")
    ei = torch.cat([ei, ei[:, :3]], dim=1)
    ew = torch.cat([ew, torch.tensor([0.5, 1.0, 2.0], dtype=ew.dtype)])
    w = w.clone()
    w[ei[1, :3], ei[0, :3]] += torch.tensor([0.5, 1.0, 2.0], dtype=w.dtype)
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    agg = GraphAggregation()
    torch.testing.assert_close(agg(x, ei, ew), w @ x, atol=1e-12, rtol=0)
    torch.testing.assert_close(agg.propagate(ei, x=x, edge_weight=ew, layer_ptr=None), w @ x,
                               atol=1e-12, rtol=0)
    ptr = torch.tensor([0, 2, 5])
    out = agg(x, ei, torch.stack([ew, 3 * ew], dim=1), layer_ptr=ptr)
    torch.testing.assert_close(out, torch.cat([(w @ x)[:, :2], (3 * w @ x)[:, 2:]], dim=1),
                               atol=1e-12, rtol=0)


@pytest.mark.slow
def test_csr_branch_does_not_warn():
    # torch warns once per process about CSR tensors (beta; invariant checks off):
    # a fresh process shows what a user's first run would print. Only what the
    # aggregation prints counts: importing torch_geometric on torch 2.14 warns that
    # torch.jit.script is deprecated (PyG's own use of it, not ours), so stderr is
    # read from a marker written after the imports.
    script = textwrap.dedent("""
        import sys
        import warnings
        import torch
        from pyg_fedgraph.nn.aggregation import GraphAggregation
        print("--- imported ---", file=sys.stderr, flush=True)
        warnings.simplefilter("error")
        ei = torch.tensor([[0, 1, 2], [1, 2, 3]])
        out = GraphAggregation()(torch.ones(10, 2), ei, torch.ones(3))
        print(out.sum().item())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    after_imports = proc.stderr.split("--- imported ---", 1)[1]
    assert proc.stdout.split()[-1] == "6.0" and "Warning" not in after_imports


def test_csr_branch_gradients_equal_the_dense_ones():
    n, d = 10, 5
    ei, ew, w = _sparse_graph(n, 15, seed=5)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    target = torch.randn(n, d, generator=gen, dtype=torch.float64)
    xs, ews = x.clone().requires_grad_(), ew.clone().requires_grad_()
    xd, wd = x.clone().requires_grad_(), w.clone().requires_grad_()
    ((GraphAggregation()(xs, ei, ews) - target) ** 2).sum().backward()
    ((GraphAggregation()(xd, weight=wd) - target) ** 2).sum().backward()
    torch.testing.assert_close(xs.grad, xd.grad, atol=1e-10, rtol=0)
    # d/d ew[e] = d/d W[tgt_e, src_e].
    torch.testing.assert_close(ews.grad, wd.grad[ei[1], ei[0]], atol=1e-10, rtol=0)


def test_uniform_rows_equal_fedavg():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 7, generator=gen)
    num_samples = torch.tensor([10, 3, 0, 7, 20])
    p = num_samples / num_samples.sum()
    w = p.unsqueeze(0).expand(5, 5)  # every client uses p_j for client j
    expected = weighted_average(x, num_samples).expand(5, -1)
    agg = GraphAggregation()
    assert torch.allclose(agg(x, weight=w), expected, atol=1e-6)
    ei, ew = dense_to_edges(w.contiguous(), keep_zeros=True)
    assert torch.allclose(agg(x, ei, ew), expected, atol=1e-6)
    # normalize=True turns raw sample counts into the same shares.
    raw = num_samples.float().unsqueeze(0).expand(5, 5)
    assert torch.allclose(GraphAggregation(normalize=True)(x, weight=raw), expected, atol=1e-6)


def test_per_layer_weights():
    gen = torch.Generator().manual_seed(3)
    n = 4
    layer_ptr = torch.tensor([0, 2, 5])  # layer 0: columns 0-1, layer 1: columns 2-4
    x = torch.randn(n, 5, generator=gen)
    w = torch.rand(2, n, n, generator=gen)
    expected = torch.cat([w[0] @ x[:, :2], w[1] @ x[:, 2:]], dim=1)
    agg = GraphAggregation()
    assert torch.allclose(agg(x, weight=w, layer_ptr=layer_ptr), expected, atol=1e-6)
    ei, ew0 = dense_to_edges(w[0], keep_zeros=True)
    _, ew1 = dense_to_edges(w[1], keep_zeros=True)
    ew = torch.stack([ew0, ew1], dim=1)  # (E, L)
    assert torch.allclose(agg(x, ei, ew, layer_ptr=layer_ptr), expected, atol=1e-6)
    # A single (1, N, N) matrix needs no pointer and equals the shared form.
    assert torch.allclose(agg(x, weight=w[:1]), w[0] @ x, atol=1e-6)


def test_normalize():
    w = torch.tensor([[1.0, 3.0, 0.0],
                      [0.0, 0.0, 0.0],
                      [2.0, 2.0, 4.0]])
    # Row 0 -> [0.25, 0.75, 0]: [0.25 + 2.25, 0.5 + 3] = [2.5, 3.5];
    # row 1 has no weight and stays zero; row 2 -> [0.25, 0.25, 0.5]: [3.5, 4.5].
    expected = torch.tensor([[2.5, 3.5], [0.0, 0.0], [3.5, 4.5]])
    agg = GraphAggregation(normalize=True)
    assert str(agg) == "GraphAggregation(normalize=True)"
    assert torch.allclose(agg(X, weight=w), expected)
    ei, ew = dense_to_edges(w)
    assert torch.allclose(agg(X, ei, ew), expected)
    # Per layer: each layer's rows are normalized separately.
    w2 = torch.stack([w, w.t()])
    ptr = torch.tensor([0, 1, 2])
    wt = w.t() / w.t().sum(1, keepdim=True)
    expected2 = torch.stack([expected[:, 0], wt @ X[:, 1]], dim=1)
    assert torch.allclose(agg(X, weight=w2, layer_ptr=ptr), expected2)
    _, ewt = dense_to_edges(w.t().contiguous(), keep_zeros=True)
    ei_all, ew_all = dense_to_edges(w, keep_zeros=True)
    assert torch.allclose(agg(X, ei_all, torch.stack([ew_all, ewt], 1), layer_ptr=ptr),
                          expected2)
    # Inputs are not modified in place.
    assert torch.equal(w, torch.tensor([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0], [2.0, 2.0, 4.0]]))


def test_errors():
    agg = GraphAggregation()
    with pytest.raises(ValueError, match=r"x must be \(num_clients, num_params\), got \(3,\)"):
        agg(torch.zeros(3), weight=torch.eye(3))
    with pytest.raises(ValueError, match="exactly one of edge_index or a dense weight="):
        agg(X)
    with pytest.raises(ValueError, match="exactly one of edge_index or a dense weight="):
        agg(X, EDGE_INDEX, weight=W)
    with pytest.raises(ValueError, match=r"dense weight must be \(3, 3\) or \(L, 3, 3\), "
                                         r"got "):
        agg(X, weight=torch.eye(2))
    with pytest.raises(ValueError, match=r"edge_index must be \(2, E\), got \(3, 2\)"):
        agg(X, torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"edge_index refers to node 3, outside \[0, 3\) "
                                         r"for the 3 rows of x"):
        agg(X, torch.tensor([[0, 3], [1, 1]]))
    with pytest.raises(ValueError, match="edge_weight has 5 rows for 6 edges"):
        agg(X, EDGE_INDEX, EDGE_WEIGHT[:5])
    with pytest.raises(ValueError, match="2 per-layer weight matrices given but no layer_ptr"):
        agg(X, weight=torch.stack([W, W]))
    with pytest.raises(ValueError, match=r"layer_ptr \[0, 1\] does not describe 2 layers "
                                         r"covering 2 parameters"):
        agg(X, weight=torch.stack([W, W]), layer_ptr=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="does not describe 2 layers"):
        agg(X, EDGE_INDEX, torch.ones(6, 2), layer_ptr=torch.tensor([0, 1, 3]))


_MEMORY_SCRIPT = textwrap.dedent("""
    import resource
    import torch
    from pyg_fedgraph.nn.aggregation import GraphAggregation

    def peak():  # bytes (ru_maxrss is in KiB on Linux)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    torch.manual_seed(0)
    N, D = 207, 60_000
    x = torch.randn(N, D)
    x.add_(1.0)  # touch every page
    w = torch.rand(N, N)
    tgt, src = torch.meshgrid(torch.arange(N), torch.arange(N), indexing="ij")
    edge_index = torch.stack([src.reshape(-1), tgt.reshape(-1)])  # all N^2 edges
    edge_weight = w.reshape(-1)
    agg = GraphAggregation()

    before = peak()
    out_edges = agg(x, edge_index, edge_weight)
    delta_edges = peak() - before

    # ru_maxrss is a high-water mark: lift the current usage to at least the
    # previous peak (out_edges stays alive, plus a ballast of the edge form's
    # extra) so that the dense form's own extra memory shows up.
    ballast = torch.ones(max(delta_edges, 0) // 4 + 1)
    before = peak()
    out_dense = agg(x, weight=w)
    delta_dense = peak() - before

    ref = w @ x
    scale = float(ref.abs().max())
    err_edges = float((out_edges - ref).abs().max()) / scale
    err_dense = float((out_dense - ref).abs().max()) / scale
    print(delta_edges, delta_dense, err_edges, err_dense)
""")


@pytest.mark.slow
def test_memory_bound_all_to_all_207_clients():
    n, d = 207, 60_000
    proc = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    delta_edges, delta_dense, err_edges, err_dense = proc.stdout.split()[-4:]
    bound = 5 * n * d * 4  # a few (N, D) float tensors; an (E, D) message tensor is ~10 GB
    assert int(delta_edges) < bound, f"edge form peaked at +{int(delta_edges) / 2**20:.0f} MiB"
    assert int(delta_dense) < bound, f"dense form peaked at +{int(delta_dense) / 2**20:.0f} MiB"
    assert float(err_edges) < 1e-5
    assert float(err_dense) < 1e-5
