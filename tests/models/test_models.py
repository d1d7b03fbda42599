import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from pyg_fedgraph.catalog import MODEL_NAMES
from pyg_fedgraph.models.cnn import CNNBN, SimpleCNN
from pyg_fedgraph.models.gru import GRUCell, GRUForecaster
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.models.registry import MODELS, build_model
from pyg_fedgraph.models.seq2seq import GRUSeq2Seq

IMAGE_SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]


# --------------------------------------------------------------- helpers
def _clients(model: nn.Module, num_clients: int, seed: int) -> list:
    r"""Copies of ``model`` with different parameters and float buffers."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num_clients):
        m = copy.deepcopy(model)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
            for name, b in m.named_buffers():
                if name.endswith("running_mean"):
                    b.copy_(0.1 * torch.randn(b.shape, generator=gen))
                elif name.endswith("running_var"):
                    b.copy_(1.0 + torch.rand(b.shape, generator=gen))
                elif name.endswith("num_batches_tracked"):
                    b.fill_(int(torch.randint(0, 5, (1,), generator=gen)))
        out.append(m)
    return out


def _stack(models: list) -> tuple:
    params = {k: torch.stack([dict(m.named_parameters())[k].detach() for m in models])
              for k, _ in models[0].named_parameters()}
    buffers = {k: torch.stack([dict(m.named_buffers())[k].clone() for m in models])
               for k, _ in models[0].named_buffers()}
    return params, buffers


def _classification_loss(out, y):
    return F.cross_entropy(out, y)


def _vmap_matches_loop(base: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn) -> None:
    r"""Per-client gradients (and updated buffers) from ``vmap(grad(...))`` over
    stacked parameters and buffers equal a loop with ``loss.backward()``."""
    models = _clients(base, x.size(0), seed=1)
    params, buffers = _stack(models)
    base.train()

    def loss(p, b, xi, yi):
        return loss_fn(functional_call(base, (p, b), (xi,)), yi)

    grads = vmap(grad(loss))(params, buffers, x, y)

    for i, m in enumerate(models):
        m.train()
        loss_fn(m(x[i]), y[i]).backward()
        for k, p in m.named_parameters():
            torch.testing.assert_close(grads[k][i], p.grad, atol=1e-5, rtol=1e-5,
                                       msg=f"client {i}, gradient of {k}")
        for k, b in m.named_buffers():
            torch.testing.assert_close(buffers[k][i], b, atol=1e-5, rtol=1e-5,
                                       msg=f"client {i}, buffer {k}")


# ---------------------------------------------------------------- shapes
@pytest.mark.parametrize("shape", IMAGE_SHAPES)
def test_output_shapes_on_images(shape):
    x = torch.randn(2, *shape)
    models = [MLP(math.prod(shape), 16, 10), SimpleCNN(shape[0], 10, shape[1]),
              CNNBN(shape[0], 10, shape[1])]
    for model in models:
        assert model(x).shape == (2, 10)
        model.eval()
        assert model(x).shape == (2, 10)


@pytest.mark.parametrize("shape", IMAGE_SHAPES)
def test_cnns_accept_flat_and_channelless_inputs(shape):
    torch.manual_seed(0)
    x = torch.randn(3, *shape)
    for model in (SimpleCNN(shape[0], 4, shape[1]), CNNBN(shape[0], 4, shape[1])):
        model.eval()
        torch.testing.assert_close(model(x.flatten(1)), model(x))
        if shape[0] == 1:
            torch.testing.assert_close(model(x.squeeze(1)), model(x))


def test_cnn_flattened_size_follows_image_size():
    # Three 2x2 poolings with floor: 8 -> 1, 28 -> 3, 32 -> 4.
    assert SimpleCNN(1, 10, 8).fc1.in_features == 64 * 1 * 1
    assert SimpleCNN(1, 10, 28).fc1.in_features == 64 * 3 * 3
    assert SimpleCNN(3, 10, 32).fc1.in_features == 64 * 4 * 4
    assert SimpleCNN(3, 10, (32, 16)).fc1.in_features == 64 * 4 * 2
    assert CNNBN(3, 10, 32).fc.in_features == 128 * 4 * 4
    assert CNNBN(1, 10, 28, channels=(8, 8, 8, 8)).fc.in_features == 8 * 1 * 1


def test_gru_output_shape():
    model = GRUForecaster()
    assert model(torch.randn(4, 12, 2)).shape == (4, 12)
    assert GRUForecaster(3, 8, out_steps=5, num_layers=2)(torch.randn(2, 7, 3)).shape == (2, 5)


# ------------------------------------------------------ parameter counts
def test_mlp_parameter_counts():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731 - a one-line local helper
    # 4*16+16 + 16*16+16 + 16*2+2
    assert count(MLP(4, 16, 2)) == 80 + 272 + 34
    assert count(MLP(5, 3, 2, num_layers=1)) == 5 * 2 + 2
    assert count(MLP(5, 3, 2, num_layers=2)) == (5 * 3 + 3) + (3 * 2 + 2)
    assert len(MLP(4, 16, 2, num_layers=4).lins) == 4


def test_gru_and_cnn_parameter_counts():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731 - a one-line local helper
    # GRU: 3H(C + H + 2) with C=2, H=100; head 100*12 + 12.
    assert count(GRUForecaster()) == 3 * 100 * (2 + 100 + 2) + 100 * 12 + 12
    # conv 1->16, 16->32, 32->64 (3x3), fc 64->120->84->10.
    convs = (9 * 16 + 16) + (16 * 9 * 32 + 32) + (32 * 9 * 64 + 64)
    fcs = (64 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    assert count(SimpleCNN(1, 10, 8)) == convs + fcs


# ------------------------------------------------------------------- MLP
def test_mlp_dropout_only_in_training():
    torch.manual_seed(0)
    model = MLP(6, 32, 3, dropout=0.5)
    x = torch.randn(8, 6)
    assert not torch.allclose(model(x), model(x))
    model.eval()
    torch.testing.assert_close(model(x), model(x))


def test_mlp_is_relu_network():
    model = MLP(2, 3, 1, num_layers=2)
    with torch.no_grad():
        model.lins[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        model.lins[0].bias.copy_(torch.tensor([0.0, 0.0, -1.0]))
        model.lins[1].weight.copy_(torch.tensor([[1.0, 2.0, 3.0]]))
        model.lins[1].bias.fill_(0.5)
    x = torch.tensor([[1.0, -2.0], [2.0, 3.0]])
    # hidden: relu([1, -2, -2]) = [1, 0, 0]; relu([2, 3, 4]) = [2, 3, 4]
    expected = torch.tensor([[1.0 + 0.5], [2.0 + 6.0 + 12.0 + 0.5]])
    torch.testing.assert_close(model(x), expected)


# ------------------------------------------------------------------- GRU
@pytest.mark.parametrize("num_layers", [1, 2])
def test_gru_forecaster_matches_torch_gru(num_layers):
    torch.manual_seed(0)
    model = GRUForecaster(2, 100, out_steps=12, num_layers=num_layers)
    ref = nn.GRU(2, 100, num_layers=num_layers, batch_first=True)
    with torch.no_grad():
        for layer, cell in enumerate(model.cells):
            getattr(ref, f"weight_ih_l{layer}").copy_(cell.input_gates.weight)
            getattr(ref, f"bias_ih_l{layer}").copy_(cell.input_gates.bias)
            getattr(ref, f"weight_hh_l{layer}").copy_(cell.hidden_gates.weight)
            getattr(ref, f"bias_hh_l{layer}").copy_(cell.hidden_gates.bias)
    x = torch.randn(5, 12, 2)
    seq, _ = ref(x)
    torch.testing.assert_close(model(x), model.head(seq[:, -1]), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------ GRU seq2seq
def _torch_gru_seq2seq(model: GRUSeq2Seq, x: torch.Tensor) -> torch.Tensor:
    r"""CNFGNN's encoder-decoder decoding, written with two torch.nn.GRU (time-major, as
    its code) carrying ``model``'s weights: the last observed step starts the decoder,
    then each forecast goes back in with the time of day of the step it forecasts."""
    c, h, layers = model.in_channels, model.hidden_channels, model.num_layers
    encoder, decoder = nn.GRU(c, h, num_layers=layers), nn.GRU(c, h, num_layers=layers)
    with torch.no_grad():
        for gru, cells in ((encoder, model.encoder), (decoder, model.decoder)):
            for layer, cell in enumerate(cells):
                getattr(gru, f"weight_ih_l{layer}").copy_(cell.input_gates.weight)
                getattr(gru, f"bias_ih_l{layer}").copy_(cell.input_gates.bias)
                getattr(gru, f"weight_hh_l{layer}").copy_(cell.hidden_gates.weight)
                getattr(gru, f"bias_hh_l{layer}").copy_(cell.hidden_gates.bias)
    seq = x.transpose(0, 1)                                  # (T, B, C)
    _, hidden = encoder(seq)
    step, outs = seq[-1:], []
    for k in range(1, model.out_steps + 1):
        out, hidden = decoder(step, hidden)
        speed = model.head(out)                              # (1, B, 1)
        outs.append(speed[0, :, 0])
        if c > 1:
            time = (seq[-1:, :, 1:2] + k / model.steps_per_day) % 1.0
            step = torch.cat([speed, time, seq[-1:, :, 2:]], dim=-1)
        else:
            step = speed
    return torch.stack(outs, dim=1)


@pytest.mark.parametrize("in_channels, num_layers", [(2, 1), (2, 2), (1, 1), (3, 2)])
def test_gru_seq2seq_matches_torch_gru_encoder_decoder(in_channels, num_layers):
    torch.manual_seed(0)
    model = GRUSeq2Seq(in_channels, 16, out_steps=7, num_layers=num_layers)
    x = torch.randn(5, 12, in_channels)
    if in_channels > 1:  # times of day near midnight: the decoder's time wraps to 0
        x[:, :, 1] = torch.tensor([280, 284, 286, 287, 100]).view(5, 1) / 288.0
    out = model(x)
    assert out.shape == (5, 7)
    torch.testing.assert_close(out, _torch_gru_seq2seq(model, x), atol=1e-5, rtol=1e-5)


def test_gru_seq2seq_parameter_counts():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731 - a one-line local helper
    # Encoder and decoder: 3H(C + H + 2) per first layer, 3H(2H + 2) per further layer;
    # head H + 1. Panacea / CNFGNN's 63K model and CNFGNN's 727K one.
    assert count(GRUSeq2Seq()) == 2 * 3 * 100 * (2 + 100 + 2) + 100 + 1 == 62_501
    two = 2 * (3 * 200 * (2 + 200 + 2) + 3 * 200 * (200 + 200 + 2)) + 200 + 1
    assert count(GRUSeq2Seq(hidden_channels=200, num_layers=2)) == two == 727_401


def test_vmap_grad_gru_seq2seq():
    torch.manual_seed(0)
    x, y = torch.randn(3, 4, 12, 2), torch.randn(3, 4, 6)
    _vmap_matches_loop(GRUSeq2Seq(2, 8, out_steps=6, num_layers=2), x, y, F.mse_loss)


def test_gru_seq2seq_trains_the_same_batched_and_client_by_client():
    from pyg_fedgraph.data.layout import ParamLayout
    from pyg_fedgraph.datasets.traffic import TrafficDataset, synthetic_traffic
    from pyg_fedgraph.train.config import LocalConfig
    from pyg_fedgraph.train.trainer import ClientTrainer

    adj = torch.eye(4) + torch.diag(torch.full((3,), 0.8), 1)
    data = TrafficDataset.from_table(synthetic_traffic(adj.numpy(), num_steps=400, seed=1),
                                     adj=adj.numpy())
    torch.manual_seed(0)
    model = GRUSeq2Seq(2, 8, out_steps=12)
    cfg = LocalConfig(lr=0.05, batch_size=16, steps=3, momentum=0.9)
    start = ParamLayout.from_module(model).flatten(model).repeat(4, 1)
    start = start + 0.01 * torch.randn(start.shape, generator=torch.Generator().manual_seed(2))
    trainer = ClientTrainer(model, data, config=cfg, execution="vmap")
    runs = []
    for parallel in (True, False):
        trainer.parallel = parallel
        runs.append(trainer.train(torch.arange(4), start,
                                  generator=[torch.Generator().manual_seed(i) for i in range(4)]))
    torch.testing.assert_close(runs[0].params, runs[1].params, rtol=0, atol=1e-5)
    assert not torch.allclose(runs[0].params, start, atol=1e-3)   # it did train


def test_gru_cell_matches_torch_gru_cell():
    torch.manual_seed(0)
    cell, ref = GRUCell(3, 4), nn.GRUCell(3, 4)
    with torch.no_grad():
        ref.weight_ih.copy_(cell.input_gates.weight)
        ref.bias_ih.copy_(cell.input_gates.bias)
        ref.weight_hh.copy_(cell.hidden_gates.weight)
        ref.bias_hh.copy_(cell.hidden_gates.bias)
    x, h = torch.randn(6, 3), torch.randn(6, 4)
    torch.testing.assert_close(cell(x, h), ref(x, h), atol=1e-6, rtol=1e-6)


def test_gru_cell_init_bound():
    cell = GRUCell(2, 25)
    for p in cell.parameters():
        assert p.abs().max() <= 1 / 5


# ------------------------------------------------------------------ vmap
def test_vmap_grad_mlp():
    torch.manual_seed(0)
    x, y = torch.randn(3, 5, 1, 8, 8), torch.randint(0, 4, (3, 5))
    _vmap_matches_loop(MLP(64, 8, 4), x, y, _classification_loss)


@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32)])
def test_vmap_grad_simple_cnn(shape):
    torch.manual_seed(0)
    x, y = torch.randn(3, 4, *shape), torch.randint(0, 4, (3, 4))
    model = SimpleCNN(shape[0], 4, shape[1], channels=(4, 6, 8), fc_channels=(10, 6))
    _vmap_matches_loop(model, x, y, _classification_loss)


@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32)])
def test_vmap_grad_cnn_bn_with_all_buffers(shape):
    torch.manual_seed(0)
    x, y = torch.randn(3, 4, *shape), torch.randint(0, 4, (3, 4))
    model = CNNBN(shape[0], 4, shape[1], channels=(4, 6, 8))
    assert {k.rsplit(".", 1)[1] for k, _ in model.named_buffers()} == {
        "running_mean", "running_var", "num_batches_tracked"}
    _vmap_matches_loop(model, x, y, _classification_loss)


def test_cnn_bn_running_stats_under_vmap():
    torch.manual_seed(0)
    model = CNNBN(1, 3, 8, channels=(4, 4, 4))
    models = _clients(model, 3, seed=2)
    params, buffers = _stack(models)
    before = {k: v.clone() for k, v in buffers.items()}
    x = torch.randn(3, 6, 1, 8, 8)
    model.train()
    vmap(lambda p, b, xi: functional_call(model, (p, b), (xi,)))(params, buffers, x)
    for i, m in enumerate(models):
        m.train()
        m(x[i])
        for k, b in m.named_buffers():
            torch.testing.assert_close(buffers[k][i], b, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(buffers["bn1.num_batches_tracked"],
                               before["bn1.num_batches_tracked"] + 1)
    # Client 0's first-layer running mean moved by momentum 0.1 towards its batch mean.
    conv_out = F.conv2d(x[0], params["conv1.weight"][0], params["conv1.bias"][0], padding=1)
    expected = 0.9 * before["bn1.running_mean"][0] + 0.1 * conv_out.mean(dim=(0, 2, 3))
    torch.testing.assert_close(buffers["bn1.running_mean"][0], expected, atol=1e-6, rtol=1e-6)


def test_cnn_bn_eval_under_vmap_uses_each_clients_stats():
    torch.manual_seed(0)
    model = CNNBN(1, 3, 8, channels=(4, 4, 4))
    models = _clients(model, 3, seed=3)
    params, buffers = _stack(models)
    x = torch.randn(3, 2, 1, 8, 8)
    model.eval()
    out = vmap(lambda p, b, xi: functional_call(model, (p, b), (xi,)))(params, buffers, x)
    for i, m in enumerate(models):
        m.eval()
        torch.testing.assert_close(out[i], m(x[i]), atol=1e-5, rtol=1e-5)


def test_vmap_grad_gru():
    torch.manual_seed(0)
    x, y = torch.randn(3, 4, 12, 2), torch.randn(3, 4, 12)
    _vmap_matches_loop(GRUForecaster(2, 8, out_steps=12, num_layers=2), x, y, F.mse_loss)


# -------------------------------------------------------------- registry
@pytest.mark.parametrize("shape", IMAGE_SHAPES)
def test_build_image_models(shape):
    x = torch.randn(2, *shape)
    for name, cls in [("mlp", MLP), ("cnn", SimpleCNN), ("cnn-bn", CNNBN)]:
        model = build_model(name, shape, 7)
        assert type(model) is cls
        assert model(x).shape == (2, 7)


def test_build_model_details():
    assert MODEL_NAMES == tuple(MODELS) == ("mlp", "cnn", "cnn-bn", "gru", "gru-seq2seq", "gcn",
                                           "sage", "gat", "gin", "gcn-pool", "masked-gcn")
    mlp = build_model("mlp", (2,), 2)
    assert mlp.hidden_channels == 16 and mlp.num_layers == 3  # Panacea FL-60
    assert build_model("MLP", (2,), 2, hidden_channels=5).hidden_channels == 5

    digits = build_model("cnn", (64,), 10)
    assert digits.in_channels == 1 and digits.image_size == (8, 8)
    cifar = build_model("cnn-bn", (3072,), 10, image_size=32)
    assert cifar.in_channels == 3 and cifar.image_size == (32, 32)
    assert build_model("cnn", (28, 28), 10).in_channels == 1

    gru = build_model("gru", (12, 2), 12, hidden_channels=16)
    assert isinstance(gru, GRUForecaster)
    assert (gru.in_channels, gru.hidden_channels, gru.out_steps) == (2, 16, 12)
    seq2seq = build_model("gru-seq2seq", (12, 2), 6, num_layers=2)
    assert isinstance(seq2seq, GRUSeq2Seq)
    assert (seq2seq.in_channels, seq2seq.out_steps, seq2seq.num_layers) == (2, 6, 2)


def test_build_model_errors():
    with pytest.raises(ValueError, match=r"unknown model 'resnet'; known: cnn, cnn-bn, gat, gcn, "
                                         r"gcn-pool, gin, gru, gru-seq2seq, masked-gcn, mlp, sage"):
        build_model("resnet", (3, 32, 32), 10)
    with pytest.raises(ValueError, match="pass image_size"):
        build_model("cnn", (3072,), 10)
    with pytest.raises(ValueError, match="not a whole number"):
        build_model("cnn", (100,), 10, image_size=8)
    with pytest.raises(ValueError, match="only for flat"):
        build_model("cnn", (1, 8, 8), 10, image_size=8)
    with pytest.raises(ValueError, match=r"\(T, C\)"):
        build_model("gru", (12,), 12)
    with pytest.raises(ValueError, match=r"'gru-seq2seq' model needs sequences of shape \(T, C\)"):
        build_model("gru-seq2seq", (12,), 12)
    with pytest.raises(ValueError, match="num_outputs"):
        build_model("mlp", (4,), 0)


# ---------------------------------------------------------- errors, repr
def test_model_errors():
    with pytest.raises(ValueError, match="at least 8x8"):
        SimpleCNN(1, 10, 4)
    with pytest.raises(ValueError, match="at least 16x16"):
        CNNBN(1, 10, 8, channels=(4, 4, 4, 4))
    with pytest.raises(ValueError, match=r"expects images of shape \(B, 1, 8, 8\)"):
        SimpleCNN(1, 10, 8)(torch.randn(2, 3, 8, 8))
    with pytest.raises(ValueError, match="expects 64 input features"):
        MLP(64, 8, 2)(torch.randn(2, 65))
    with pytest.raises(ValueError, match=r"\(B, T, 2\)"):
        GRUForecaster()(torch.randn(2, 12, 3))
    with pytest.raises(ValueError, match=r"GRUSeq2Seq expects sequences of shape \(B, T, 2\)"):
        GRUSeq2Seq()(torch.randn(2, 12, 3))
    with pytest.raises(ValueError, match="out_steps must be a positive integer"):
        GRUSeq2Seq(out_steps=0)
    with pytest.raises(ValueError, match="num_layers"):
        MLP(4, 4, 2, num_layers=0)
    with pytest.raises(ValueError, match="momentum"):
        CNNBN(1, 10, 8, momentum=0.0)


def test_repr():
    assert str(MLP(64, 16, 10)) == "MLP(64, 16, 10, num_layers=3)"
    assert str(SimpleCNN(1, 10, 8)) == "SimpleCNN(1, 10, image_size=(8, 8))"
    assert str(CNNBN(3, 10, 32)) == "CNNBN(3, 10, image_size=(32, 32), channels=(32, 64, 128))"
    assert str(GRUForecaster()) == "GRUForecaster(2, 100, out_steps=12, num_layers=1)"
    assert str(GRUCell(2, 100)) == "GRUCell(2, 100)"
    assert str(GRUSeq2Seq()) == "GRUSeq2Seq(2, 100, out_steps=12, num_layers=1)"
