import pytest
import torch
from torch_geometric.nn import GAE

from pyg_fedgraph.nn.hypernetwork import (
    GCNHypernetwork,
    hypernetwork_grads,
    hypernetwork_update,
)

# Ring over 5 clients, both directions.
RING = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 0],
                     [1, 0, 2, 1, 3, 2, 4, 3, 0, 4]])
# Path 0-1-2-3-4 without the closing edge.
PATH = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4],
                     [1, 0, 2, 1, 3, 2, 4, 3]])


def small(encoder="gcn", **kwargs):
    torch.manual_seed(0)
    return GCNHypernetwork(5, 7, embedding_dim=4, hidden_channels=8, num_gnn_layers=2,
                           num_mlp_layers=2, encoder=encoder, **kwargs)


def test_shapes_and_repr():
    model = small()
    assert str(model) == ("GCNHypernetwork(5, 7, encoder=gcn, graph_generator=True, "
                          "chunk_size=None)")
    assert model(RING).shape == (5, 7)
    assert model(RING, clients=torch.tensor([3, 1])).shape == (2, 7)
    assert model.embed(RING).shape == (5, 8)
    w = torch.rand(RING.size(1))
    assert model(RING, w).shape == (5, 7)
    # Dense head: the last Linear is hidden -> D.
    assert model.head.lins[-1].weight.shape == (7, 8)


@pytest.mark.parametrize("encoder", ["gcn", "mlp"])
def test_client_subset_matches_full_rows(encoder):
    model = small(encoder)
    clients = torch.tensor([4, 0, 2])
    full = model(RING)
    assert torch.allclose(model(RING, clients=clients), full[clients], atol=1e-6)


def test_mlp_ignores_graph_gcn_does_not():
    mlp, gcn = small("mlp"), small("gcn")
    assert torch.allclose(mlp(RING), mlp(PATH))
    assert torch.allclose(mlp(RING), mlp())
    out_ring, out_path = gcn(RING), gcn(PATH)
    # Only clients 0 and 4 (the removed edge) see a different neighbourhood in layer 1.
    assert not torch.allclose(out_ring[0], out_path[0])
    assert not torch.allclose(out_ring[4], out_path[4])


def test_gcn_without_edges_is_per_client():
    model = small("gcn")
    empty = torch.empty(2, 0, dtype=torch.long)
    before = model(empty)
    with torch.no_grad():
        model.embedding[1] += 1.0
    after = model(empty)
    assert torch.allclose(before[[0, 2, 3, 4]], after[[0, 2, 3, 4]])
    assert not torch.allclose(before[1], after[1])


def test_grad_rule_equals_mse_gradient():
    model = small()
    clients = torch.tensor([0, 2, 3])
    theta = model(RING, clients=clients)
    delta = torch.randn_like(theta)
    params = [p for p in model.parameters() if p.requires_grad]
    rule = torch.autograd.grad(theta, params, grad_outputs=-delta, retain_graph=True,
                               allow_unused=True)
    mse = 0.5 * (theta - (theta.detach() + delta)).pow(2).sum()
    ref = torch.autograd.grad(mse, params, retain_graph=True, allow_unused=True)
    ours = hypernetwork_grads(theta, delta, params)
    for a, b, c in zip(rule, ref, ours, strict=True):
        if b is None:  # decoder parameters do not touch theta
            assert a is None and c is None
            continue
        assert torch.allclose(a, b, atol=1e-6)
        assert torch.allclose(c, b, atol=1e-6)
    assert any(g is not None and g.abs().sum() > 0 for g in ours)


@pytest.mark.parametrize("encoder", ["gcn", "mlp"])
def test_update_moves_towards_target(encoder):
    model = small(encoder)
    clients = torch.tensor([1, 3])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    old = model(RING, clients=clients)
    delta = 0.5 * torch.randn_like(old)
    target = old.detach() + delta
    hypernetwork_update(model, opt, old, delta)
    with torch.no_grad():
        new = model(RING, clients=clients)
    for i in range(len(clients)):
        assert (new[i] - target[i]).norm() < (old[i].detach() - target[i]).norm()


def test_update_with_extra_loss_and_clipping():
    model = small()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    z = model.embed(RING)
    theta = model.generate(z[:2])
    delta = 100.0 * torch.randn_like(theta)
    extra = 0.1 * model.reconstruction_loss(z, RING)
    hypernetwork_update(model, opt, theta, delta, extra_loss=extra, max_grad_norm=0.5)
    # With lr=1, the total step norm equals the clipped gradient norm.
    step = torch.cat([(model.state_dict()[k] - before[k]).flatten()
                      for k in before if k != "held_out"])
    assert torch.isclose(step.norm(), torch.tensor(0.5), atol=1e-4)
    # The generator's own MLP is trained by the extra loss.
    assert not torch.equal(before["decoder_mlp.lins.0.weight"],
                           model.state_dict()["decoder_mlp.lins.0.weight"])


def test_reconstruction_loss_matches_gae():
    model = small()
    z = model.embed(RING)
    neg = torch.tensor([[0, 1, 2, 3, 4], [2, 3, 4, 0, 1]])
    ours = model.reconstruction_loss(z, RING, neg)
    ref = GAE(torch.nn.Identity()).recon_loss(model.decoder_mlp(z), RING, neg)
    assert torch.allclose(ours, ref, atol=1e-5)
    torch.manual_seed(1)
    assert torch.isfinite(model.reconstruction_loss(z, RING))


def test_reconstruction_loss_decreases():
    model = small()
    neg = torch.tensor([[0, 1, 2, 3, 4], [2, 3, 4, 0, 1]])
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(50):
        opt.zero_grad()
        loss = model.reconstruction_loss(model.embed(RING), RING, neg)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.7 * losses[0]


def test_reconstruction_loss_without_generator_raises():
    model = small(graph_generator=False)
    assert model.decoder_mlp is None
    with pytest.raises(ValueError, match="no graph generator"):
        model.reconstruction_loss(model.embed(RING), RING)


def test_held_out_embedding_gets_no_gradient():
    # Client 4 neighbours 0 and 3 on the ring; train clients 0 and 1.
    train = torch.tensor([0, 1])
    model = small("gcn")
    theta = model(RING, clients=train)
    theta.sum().backward()
    assert model.embedding.grad[4].abs().sum() > 0  # reached through messages

    model = small("gcn")
    model.set_held_out(torch.tensor([4]))
    theta = model(RING, clients=train)
    (model.reconstruction_loss(model.embed(RING), RING) + theta.sum()).backward()
    assert torch.all(model.embedding.grad[4] == 0)
    assert model.embedding.grad[0].abs().sum() > 0


@pytest.mark.parametrize("encoder,changes", [("gcn", True), ("mlp", False)])
def test_held_out_model_follows_trained_neighbours(encoder, changes):
    model = small(encoder)
    model.set_held_out(torch.tensor([4]))
    # Train only the embeddings so that the shared weights stay fixed.
    opt = torch.optim.SGD([model.embedding], lr=0.1)
    held_before = model(RING, clients=torch.tensor([4])).detach()
    emb_before = model.embedding[4].detach().clone()
    train = torch.tensor([0, 3])
    theta = model(RING, clients=train)
    hypernetwork_update(model, opt, theta, torch.randn_like(theta))
    assert torch.equal(model.embedding[4], emb_before)
    held_after = model(RING, clients=torch.tensor([4])).detach()
    assert (not torch.allclose(held_before, held_after)) == changes


def test_held_out_mask_in_state_dict():
    model = small()
    model.set_held_out(torch.tensor([1, 4]))
    other = small()
    other.load_state_dict(model.state_dict())
    assert other.held_out.tolist() == [False, True, False, False, True]
    other.set_held_out(None)
    assert not other.held_out.any()


def test_chunked_head():
    torch.manual_seed(0)
    model = GCNHypernetwork(5, 23, embedding_dim=4, hidden_channels=8, num_gnn_layers=2,
                            num_mlp_layers=2, chunk_size=5)
    assert model.num_chunks == 5 and model.chunk_embedding.shape == (5, 8)
    out = model(RING, clients=torch.tensor([0, 2]))
    assert out.shape == (2, 23)
    assert model.head.lins[-1].weight.shape == (5, 8)  # hidden -> chunk_size
    # Chunks differ only through their embeddings.
    full = model(RING)
    assert not torch.allclose(full[:, :5], full[:, 5:10])
    assert torch.allclose(full[[0, 2]], out, atol=1e-6)
    out.pow(2).sum().backward()
    assert model.chunk_embedding.grad.abs().sum() > 0
    assert model.embedding.grad.abs().sum() > 0
    # Fewer parameters than the dense head for large D.
    dense = GCNHypernetwork(5, 10_000, hidden_channels=8, num_gnn_layers=1, num_mlp_layers=1,
                            embedding_dim=4)
    chunked = GCNHypernetwork(5, 10_000, hidden_channels=8, num_gnn_layers=1,
                              num_mlp_layers=1, embedding_dim=4, chunk_size=100)
    n_dense = sum(p.numel() for p in dense.head.parameters())
    n_chunk = sum(p.numel() for p in chunked.head.parameters()) + chunked.chunk_embedding.numel()
    assert n_dense == 8 * 10_000 + 10_000
    assert n_chunk == 100 * 8 + 16 * 100 + 100


def test_add_clients():
    model = small("gcn")
    old = model.embedding.detach().clone()
    index = model.add_clients(2, held_out=True)
    assert index.tolist() == [5, 6]
    assert model.num_clients == 7 and model.embedding.shape == (7, 4)
    assert torch.equal(model.embedding[:5], old)
    assert model.held_out.tolist() == [False] * 5 + [True] * 2
    graph = torch.cat([RING, torch.tensor([[4, 5, 5, 6], [5, 4, 6, 5]])], dim=1)
    assert model(graph, clients=index).shape == (2, 7)
    with pytest.raises(ValueError, match="positive integer"):
        model.add_clients(0)


def test_reset_parameters_keeps_held_out():
    model = small()
    model.set_held_out(torch.tensor([2]))
    before = model(RING).detach()
    model.reset_parameters()
    assert not torch.allclose(before, model(RING))
    assert model.held_out.tolist() == [False, False, True, False, False]


def test_errors():
    with pytest.raises(ValueError, match="encoder must be one of"):
        GCNHypernetwork(5, 7, encoder="gat")
    with pytest.raises(ValueError, match="chunk_size"):
        GCNHypernetwork(5, 7, chunk_size=0)
    with pytest.raises(ValueError, match="num_gnn_layers"):
        GCNHypernetwork(5, 7, num_gnn_layers=0)
    model = small()
    with pytest.raises(ValueError, match="needs the prior client graph"):
        model()
    with pytest.raises(ValueError, match=r"shape \(2, num_edges\)"):
        model(RING.t())
    with pytest.raises(ValueError, match="outside"):
        model(torch.tensor([[0], [9]]))
    with pytest.raises(ValueError, match="edge_weight must have shape"):
        model(RING, torch.ones(3))
    with pytest.raises(ValueError, match=r"clients must lie in \[0, 5\)"):
        model(RING, clients=torch.tensor([5]))
    with pytest.raises(ValueError, match="1-D long"):
        model(RING, clients=torch.tensor([0.0]))
    with pytest.raises(ValueError, match="z must have shape"):
        model.generate(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="at least one edge"):
        model.reconstruction_loss(model.embed(RING), torch.empty(2, 0, dtype=torch.long))
    theta = model(RING)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="delta must have the shape"):
        hypernetwork_update(model, opt, theta, torch.zeros(5, 6))
    with pytest.raises(ValueError, match="does not require grad"):
        hypernetwork_grads(theta.detach(), torch.zeros(5, 7), model.parameters())
    with pytest.raises(ValueError, match="extra_loss must be a scalar"):
        hypernetwork_update(model, opt, theta, torch.zeros(5, 7), extra_loss=torch.zeros(2))
