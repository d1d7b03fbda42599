import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.regularizers import ProximalTerm
from pyg_fedgraph.train.trainer import ClientTrainer, batch_schedule

# Client 1 has fewer training samples than a batch (B = 4), client 2 has none.
TRAIN_COUNTS = [10, 3, 0, 7]
VAL_COUNTS = [4, 2, 3, 0]
TEST_COUNTS = [5, 0, 2, 3]


def make_dataset(seed: int = 0) -> FederatedDataset:
    gen = torch.Generator().manual_seed(seed)

    def split(counts):
        xs = [torch.randn(n, 2, generator=gen) + i for i, n in enumerate(counts)]
        ys = [torch.randint(3, (n,), generator=gen) for n in counts]
        return ClientSplit.from_lists(xs, ys)

    return FederatedDataset("toy", "classification",
                            {"train": split(TRAIN_COUNTS), "val": split(VAL_COUNTS),
                             "test": split(TEST_COUNTS)}, num_classes=3)


def make_mlp() -> nn.Module:
    torch.manual_seed(0)
    return MLP(2, 8, 3)


def make_bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def start_state(trainer: ClientTrainer, s: int, seed: int = 1):
    r"""Different starting parameters and BatchNorm statistics for every client."""
    gen = torch.Generator().manual_seed(seed)
    layout = trainer.layout
    params = layout.flatten(trainer.model).repeat(s, 1)
    params = params + 0.1 * torch.randn(params.shape, generator=gen)
    buffers = trainer.initial_buffers(s)
    if layout.num_buffers:
        buffers = buffers + 0.2 * torch.rand(buffers.shape, generator=gen)
    return params, buffers


def proximal(theta: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return 0.05 * (theta - ref).pow(2).sum()


# ------------------------------------------------------------ batch schedule
def test_batch_schedule_epochs_invariants():
    counts = torch.tensor(TRAIN_COUNTS)
    b, epochs = 4, 3
    index, active = batch_schedule(counts, b, epochs=epochs,
                                   generator=torch.Generator().manual_seed(0))
    per_epoch = 3  # ceil(max n_i / B) = ceil(10 / 4)
    assert index.shape == (epochs * per_epoch, 4, b)
    assert active.shape == (epochs * per_epoch, 4)
    n_batches = [-(-n // b) for n in TRAIN_COUNTS]
    assert active.sum(0).tolist() == [epochs * k for k in n_batches]  # [9, 3, 0, 6]
    for i, n in enumerate(TRAIN_COUNTS):
        if n == 0:
            assert not active[:, i].any()
            continue
        for e in range(epochs):
            rows = slice(e * per_epoch, (e + 1) * per_epoch)
            act = active[rows, i]
            # A client's active batches come first in each epoch.
            assert act.tolist() == [True] * n_batches[i] + [False] * (per_epoch - n_batches[i])
            visited = index[rows, i][act]  # (n_batches, B): every batch is full
            assert visited.shape == (n_batches[i], b)
            assert (visited >= 0).all() and (visited < n).all()
            flat = visited.reshape(-1)
            # The epoch starts with a permutation of the client's samples ...
            assert sorted(flat[:n].tolist()) == list(range(n))
            # ... and wraps around it to fill the last batch.
            assert torch.equal(flat[n:], flat[:flat.numel() - n])
            if n >= b:  # no sample twice in one batch
                assert all(len(set(r.tolist())) == b for r in visited)


def test_batch_schedule_epochs_are_reshuffled_and_seeded():
    counts = torch.tensor([50, 40])
    idx1, _ = batch_schedule(counts, 10, epochs=2, generator=torch.Generator().manual_seed(0))
    idx2, _ = batch_schedule(counts, 10, epochs=2, generator=torch.Generator().manual_seed(0))
    idx3, _ = batch_schedule(counts, 10, epochs=2, generator=torch.Generator().manual_seed(1))
    assert torch.equal(idx1, idx2)
    assert not torch.equal(idx1, idx3)
    assert not torch.equal(idx1[:5, 0], idx1[5:, 0])  # epoch 2 is a fresh permutation


@pytest.mark.parametrize("mode", [{"epochs": 2}, {"steps": 3}], ids=["epochs", "steps"])
def test_batch_schedule_client_alone_equals_client_among_others(mode):
    # Equal counts are sorted in one call, others apart: neither may change what a client
    # draws from its own generator, so its batches equal those it draws alone.
    counts = torch.tensor([7, 12, 7, 0, 12, 3, 7])
    gens = [torch.Generator().manual_seed(100 + i) for i in range(counts.numel())]
    index, active = batch_schedule(counts, 4, generator=gens, **mode)
    for i, n in enumerate(counts.tolist()):
        alone, alone_active = batch_schedule(counts[i:i + 1], 4, **mode,
                                             generator=[torch.Generator().manual_seed(100 + i)])
        if n == 0:
            assert not active[:, i].any()
            continue
        # The batches it visits, in order (in epoch mode, smaller clients wait at the end
        # of each epoch of the largest one, so the rows differ but not the visits).
        assert torch.equal(index[active[:, i], i], alone[alone_active[:, 0], 0])
    # One generator for all: clients draw one after the other, in client order.
    shared, _ = batch_schedule(counts, 4, generator=torch.Generator().manual_seed(5), **mode)
    gen = torch.Generator().manual_seed(5)
    rounds = mode.get("steps", mode.get("epochs"))
    for i, n in enumerate(counts.tolist()):
        if n:
            perm = torch.rand(rounds, n, generator=gen).argsort(dim=1)
            assert torch.equal(shared[0, i], perm[0, torch.arange(4) % n])


@pytest.mark.parametrize("shape", [(40, 500), (3, 7, 2000), (6, 23)])
def test_argsort_head_equals_the_head_of_a_full_argsort(shape):
    # Integer-valued draws tie often, so both paths run: rows whose k + 1 smallest values
    # are distinct (topk) and rows with a tie among them (sorted whole, ties as argsort
    # puts them); uniform draws take the first path almost always.
    from pyg_fedgraph.train.trainer import _argsort_head
    gen = torch.Generator().manual_seed(3)
    n = shape[-1]
    tied = torch.randint(0, 4 * n, shape, generator=gen).float()
    for values in (tied, torch.rand(shape, generator=gen)):
        for k in (0, 1, 5, 64, n // 3, n):
            k = min(k, n)
            head = _argsort_head(values, k)
            assert head.shape == (*shape[:-1], k)
            assert torch.equal(head, values.argsort(dim=-1)[..., :k])
    # Both paths were taken on the tied draws at k = 5.
    low = tied.reshape(-1, n).sort(dim=-1).values[:, :6]
    has_tie = (low.diff(dim=-1) == 0).any(dim=-1)
    if n >= 24:
        assert has_tie.any() and not has_tie.all()


def test_batch_schedule_steps_mode_visits_the_heads_of_full_permutations():
    # Steps mode sorts only the head of each client's draws: its batches must equal the
    # first B places (wrapped for n_i < B) of the full permutation the draws define.
    counts = torch.tensor([3000, 2500, 3000, 40, 0, 2500])
    b, steps = 64, 7
    seeds = [11 + i for i in range(counts.numel())]
    index, active = batch_schedule(counts, b, steps=steps, generator=seeds)
    assert index.shape == (steps, 6, b)
    for i, n in enumerate(counts.tolist()):
        if n == 0:
            assert not active[:, i].any()
            continue
        perm = torch.rand(steps, n, generator=torch.Generator().manual_seed(seeds[i]))
        perm = perm.argsort(dim=-1)
        assert torch.equal(index[:, i], perm[:, torch.arange(b) % n])


@pytest.mark.parametrize("mode", [{"epochs": 2}, {"steps": 3}], ids=["epochs", "steps"])
def test_batch_schedule_seeds_draw_what_seeded_generators_draw(mode):
    counts = torch.tensor([7, 12, 7, 0, 12, 3, 7])
    seeds = [2**62 + 17 * i for i in range(counts.numel())]  # large seeds, as derive_seeds gives
    by_gens = batch_schedule(counts, 4, **mode,
                             generator=[torch.Generator().manual_seed(s) for s in seeds])
    by_seeds = batch_schedule(counts, 4, **mode, generator=seeds)
    assert torch.equal(by_seeds[0], by_gens[0]) and torch.equal(by_seeds[1], by_gens[1])
    other = batch_schedule(counts, 4, **mode, generator=[s + 1 for s in seeds])
    assert not torch.equal(other[0], by_seeds[0])
    with pytest.raises(ValueError, match="6 generators given for 7 clients"):
        batch_schedule(counts, 4, **mode, generator=seeds[:6])
    with pytest.raises(TypeError, match="not a mix; got \\['Generator', 'int'\\]"):
        batch_schedule(counts, 4, **mode, generator=[torch.Generator(), *seeds[1:]])
    with pytest.raises(TypeError, match="Python int seeds"):
        batch_schedule(counts, 4, **mode, generator=[True] * counts.numel())


def test_batch_schedule_steps_mode():
    counts = torch.tensor(TRAIN_COUNTS)
    index, active = batch_schedule(counts, 4, steps=5, generator=torch.Generator().manual_seed(0))
    assert index.shape == (5, 4, 4)
    assert active.tolist() == [[True, True, False, True]] * 5
    for i, n in enumerate(TRAIN_COUNTS):
        if n == 0:
            continue
        assert (index[:, i] < n).all() and (index[:, i] >= 0).all()
        for t in range(5):
            batch = index[t, i].tolist()
            if n >= 4:
                assert len(set(batch)) == 4  # without replacement within a batch
            else:
                assert set(batch) == set(range(n))  # small client: all of it, wrapped


def test_batch_schedule_empty_cases():
    index, active = batch_schedule(torch.tensor([3, 2]), 4, epochs=0)
    assert index.shape == (0, 2, 4) and active.shape == (0, 2)
    index, active = batch_schedule(torch.tensor([0, 0]), 4, epochs=2)
    assert index.shape == (0, 2, 4)
    index, active = batch_schedule(torch.tensor([3, 2]), 4, steps=0)
    assert index.shape == (0, 2, 4) and active.shape == (0, 2)


def test_local_config_errors():
    with pytest.raises(ValueError, match="lr must be > 0, got 0"):
        LocalConfig(lr=0)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        LocalConfig(batch_size=0)
    with pytest.raises(ValueError, match="steps must be >= 0, got -1"):
        LocalConfig(steps=-1)
    with pytest.raises(ValueError, match="set epochs >= 0 or steps >= 0"):
        LocalConfig(epochs=None)
    with pytest.raises(ValueError, match="nesterov=True needs momentum > 0"):
        LocalConfig(nesterov=True)
    with pytest.raises(ValueError, match="warmup must be < 1"):
        LocalConfig(warmup=1.0)
    with pytest.raises(ValueError, match="lr_decay_to must be >= 0"):
        LocalConfig(lr_decay_to=-0.5)
    with pytest.raises(ValueError, match="lr_decay_to must be <= 1"):
        LocalConfig(lr_decay_to=2.0)


def test_lr_factors_by_hand():
    # T = 4 steps, u = 1/4, 2/4, 3/4, 1: warm-up to u = 1/2, then down to 0.2.
    cfg = LocalConfig(warmup=0.5, lr_decay_to=0.2)
    assert cfg.scheduled
    assert cfg.lr_factors(4) == pytest.approx([0.5, 1.0, 0.6, 0.2])
    # Warm-up alone stays at 1 after it; decay alone starts at once.
    assert LocalConfig(warmup=0.5).lr_factors(4) == pytest.approx([0.5, 1.0, 1.0, 1.0])
    assert LocalConfig(lr_decay_to=0.0).lr_factors(4) == pytest.approx([0.75, 0.5, 0.25, 0.0])
    plain = LocalConfig()
    assert not plain.scheduled and plain.lr_factors(3) == [1.0, 1.0, 1.0]
    # Per-client clocks: client 0 at step 1 of 4, client 1 at step 0 of 2.
    two = LocalConfig(warmup=0.5, lr_decay_to=0.2).lr_factor(torch.tensor([1, 0]),
                                                              torch.tensor([4, 2]))
    assert two.tolist() == pytest.approx([1.0, 1.0])
    assert plain.with_lr(0.0).lr == 0.0 and plain.lr == 0.01  # unchecked copy


def test_schedule_is_sfls_piecewise_linear():
    # SFL's released client optimizer: lr interpolated over local epochs at the
    # knots (0, 5, E) -> (0, 0.4, 0.001), read after the step counter moves.
    e = 50
    cfg = LocalConfig(lr=0.4, warmup=5 / e, lr_decay_to=0.001 / 0.4, steps=e)
    expected = [0.4 * k / 5 if k <= 5 else 0.4 + (0.001 - 0.4) * (k - 5) / (e - 5)
                for k in range(1, e + 1)]
    got = [cfg.lr * f for f in cfg.lr_factors(e)]
    assert got == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------- parallel vs reference loop
@pytest.mark.parametrize("model_fn", [make_mlp, make_bn_model], ids=["mlp", "batchnorm"])
@pytest.mark.parametrize("mode", [{"epochs": 2}, {"epochs": None, "steps": 3}],
                         ids=["epochs", "steps"])
def test_parallel_equals_per_client_loop(model_fn, mode):
    data = make_dataset()
    cfg = LocalConfig(lr=0.05, momentum=0.9, weight_decay=1e-3, batch_size=4, **mode)
    trainer = ClientTrainer(model_fn(), data, config=cfg)
    clients = torch.tensor([3, 0, 2, 1])  # any order, a subset of rows of the data
    params, buffers = start_state(trainer, 4)
    refs = torch.randn(4, trainer.layout.num_params, generator=torch.Generator().manual_seed(2))
    reg = ProximalTerm(refs, coefficient=0.1)
    params_in, buffers_in = params.clone(), buffers.clone()

    out = {}
    for parallel in (True, False):
        trainer.parallel = parallel
        out[parallel] = trainer.train(clients, params, buffers, regularizer=reg,
                                      generator=torch.Generator().manual_seed(0))
    par, loop = out[True], out[False]
    assert torch.equal(params, params_in) and torch.equal(buffers, buffers_in)  # no mutation
    assert par.params.shape == (4, trainer.layout.num_params)
    assert torch.allclose(par.params, loop.params, atol=1e-5, rtol=0)
    assert torch.allclose(par.buffers, loop.buffers, atol=1e-5, rtol=0)
    assert torch.allclose(par.loss, loop.loss, atol=1e-5)
    n = torch.tensor(TRAIN_COUNTS)[clients]
    expected_steps = (2 * ((n + 3) // 4) if mode.get("steps") is None
                      else torch.where(n > 0, 3, 0))
    assert par.steps.tolist() == expected_steps.tolist() == loop.steps.tolist()
    # The client without data is untouched; everybody else moved.
    assert torch.equal(par.params[2], params[2])
    assert torch.equal(par.buffers[2], buffers[2])
    assert float(par.loss[2]) == 0.0
    for i in (0, 1, 3):
        assert not torch.allclose(par.params[i], params[i])
        assert float(par.loss[i]) > 0
    if trainer.layout.num_buffers:
        for i in (0, 1, 3):  # BatchNorm statistics were updated by training
            assert not torch.allclose(par.buffers[i], buffers[i])


@pytest.mark.parametrize("model_fn", [make_mlp, make_bn_model], ids=["mlp", "batchnorm"])
def test_nesterov_and_schedule_parallel_equal_torch_sgd_loop(model_fn):
    # The per-client loop steps torch.optim.SGD(nesterov=True) with the
    # scheduled learning rate; the batched rule must give the same parameters,
    # and both must differ from plain momentum at a constant rate.
    data = make_dataset()
    clients = torch.tensor([3, 0, 2, 1])
    out = {}
    for name, extra in (("plain", {}),
                        ("nesterov", {"nesterov": True, "warmup": 0.3, "lr_decay_to": 0.1})):
        cfg = LocalConfig(lr=0.1, momentum=0.9, weight_decay=1e-3, batch_size=4, epochs=3,
                          **extra)
        trainer = ClientTrainer(model_fn(), data, config=cfg)
        params, buffers = start_state(trainer, 4)
        for parallel in (True, False):
            trainer.parallel = parallel
            out[name, parallel] = trainer.train(clients, params, buffers,
                                                generator=torch.Generator().manual_seed(0))
    par, loop = out["nesterov", True], out["nesterov", False]
    assert torch.allclose(par.params, loop.params, atol=1e-5, rtol=0)
    assert torch.allclose(par.buffers, loop.buffers, atol=1e-5, rtol=0)
    assert torch.allclose(par.loss, loop.loss, atol=1e-5)
    moved = [0, 1, 3]  # client 2 has no data
    assert not torch.allclose(par.params[moved], out["plain", True].params[moved], atol=1e-3)


@pytest.mark.parametrize("parallel", [True, False])
def test_schedule_follows_each_clients_own_steps(parallel):
    # A client's rates depend on its own steps only: trained alone (as on a
    # Flower node) or among clients with more batches, it ends the same; and a
    # decay to 0 (the last step's rate) trains.
    data = make_dataset()
    cfg = LocalConfig(lr=0.1, momentum=0.9, nesterov=True, batch_size=4, epochs=2,
                      warmup=0.25, lr_decay_to=0.0)
    trainer = ClientTrainer(make_mlp(), data, config=cfg, parallel=parallel)
    params, buffers = start_state(trainer, 4)
    clients = [3, 0, 2, 1]

    def gen(client):  # each client's own batch order, as the rounds draw it
        return torch.Generator().manual_seed(100 + client)
    together = trainer.train(torch.tensor(clients), params, buffers,
                             generator=[gen(c) for c in clients])
    for row, client in ((0, 3), (3, 1)):  # 7 and 3 samples: 2 and 1 batches, the cohort's 3
        alone = trainer.train(torch.tensor([client]), params[row:row + 1],
                              buffers[row:row + 1], generator=[gen(client)])
        assert torch.allclose(alone.params[0], together.params[row], atol=1e-6)


def test_finetune_with_its_own_rate_drops_nesterov_and_the_schedule():
    from pyg_fedgraph.train.jobs import FineTune
    run = LocalConfig(lr=0.1, momentum=0.9, nesterov=True, warmup=0.2, lr_decay_to=0.5)
    own = FineTune(steps=1, lr=0.003).local_config(run)
    assert (own.lr, own.nesterov, own.scheduled, own.momentum) == (0.003, False, False, 0.9)
    assert FineTune(epochs=1).local_config(run).scheduled  # the run's settings otherwise


def test_regularizer_changes_the_result():
    data = make_dataset()
    cfg = LocalConfig(lr=0.1, batch_size=4, epochs=1)
    trainer = ClientTrainer(make_mlp(), data, config=cfg)
    clients = torch.arange(4)
    params, _ = start_state(trainer, 4)
    plain = trainer.train(clients, params, generator=torch.Generator().manual_seed(0))
    # A strong pull towards zero shrinks the trained parameters.
    reg = ProximalTerm(torch.zeros_like(params), coefficient=0.1)
    pulled = trainer.train(clients, params, regularizer=reg,
                           generator=torch.Generator().manual_seed(0))
    for i in (0, 1, 3):
        assert pulled.params[i].norm() < plain.params[i].norm()
    assert torch.equal(pulled.params[2], plain.params[2])
    assert torch.equal(reg.select(torch.tensor([2])).refs[0], torch.zeros(1, params.size(1)))


def test_train_errors():
    data = make_dataset()
    trainer = ClientTrainer(make_bn_model(), data, config=LocalConfig(batch_size=4, epochs=1))
    d, b = trainer.layout.num_params, trainer.layout.num_buffers
    clients = torch.arange(4)
    with pytest.raises(ValueError, match=rf"params must be \(4, {d}\) for 4 clients, "
                                         rf"got \(3, {d}\)"):
        trainer.train(clients, torch.zeros(3, d))
    with pytest.raises(ValueError, match=rf"buffers must be \(4, {b}\), got \(4, 3\)"):
        trainer.train(clients, torch.zeros(4, d), torch.zeros(4, 3))
    with pytest.raises(ValueError, match="one row per trained client"):
        trainer.train(clients, torch.zeros(4, d),
                      regularizer=ProximalTerm(torch.zeros(3, d), coefficient=0.1))


# ----------------------------------------------------------------- evaluation
def manual_metrics(model: nn.Module, layout: ParamLayout, data: FederatedDataset,
                   clients, params, buffers, split: str):
    losses, accs = [], []
    sp = data.splits[split]
    for i, c in enumerate(clients.tolist()):
        n = int(sp.counts[c])
        if n == 0:
            losses.append(float("nan"))
            accs.append(float("nan"))
            continue
        m = copy.deepcopy(model)
        layout.load_into(m, params[i], buffers[i] if layout.num_buffers else None)
        m.eval()
        with torch.no_grad():
            out = m(sp.x[c, :n])
        losses.append(float(F.cross_entropy(out, sp.y[c, :n])))
        accs.append(float((out.argmax(-1) == sp.y[c, :n]).float().mean()))
    return torch.tensor(losses), torch.tensor(accs)


@pytest.mark.parametrize("model_fn", [make_mlp, make_bn_model], ids=["mlp", "batchnorm"])
@pytest.mark.parametrize("split", ["test", "val"])
def test_evaluate_matches_manual_per_client(model_fn, split):
    data = make_dataset()
    # A chunk size smaller than the largest client exercises the chunked loop.
    trainer = ClientTrainer(model_fn(), data, eval_batch_size=2)
    clients = torch.tensor([2, 0, 3, 1])
    params, buffers = start_state(trainer, 4, seed=5)
    got = trainer.evaluate(clients, params, buffers, split)
    assert set(got) == {"loss", "accuracy"}
    loss, acc = manual_metrics(trainer.model, trainer.layout, data, clients, params, buffers,
                               split)
    assert torch.allclose(got["loss"], loss, atol=1e-5, equal_nan=True)
    assert torch.allclose(got["accuracy"], acc, atol=1e-6, equal_nan=True)
    empty = torch.tensor(TEST_COUNTS if split == "test" else VAL_COUNTS)[clients] == 0
    assert torch.equal(torch.isnan(got["loss"]), empty)
    assert empty.any()


def test_evaluate_regression_metrics():
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, 3, generator=gen) for n in (4, 6)]
    ys = [torch.randn(n, 2, generator=gen) for n in (4, 6)]
    split = ClientSplit.from_lists(xs, ys)
    data = FederatedDataset("reg", "regression", {"train": split, "val": split, "test": split})
    torch.manual_seed(0)
    model = MLP(3, 4, 2)
    trainer = ClientTrainer(model, data, eval_batch_size=4)
    params, _ = start_state(trainer, 2)
    got = trainer.evaluate(torch.arange(2), params)
    for i in range(2):
        m = copy.deepcopy(model)
        trainer.layout.load_into(m, params[i])
        with torch.no_grad():
            err = m(xs[i]) - ys[i]
        assert torch.allclose(got["mse"][i], err.pow(2).mean(), atol=1e-6)
        assert torch.allclose(got["mae"][i], err.abs().mean(), atol=1e-6)
        assert torch.allclose(got["loss"][i], err.pow(2).mean(), atol=1e-6)


def test_evaluate_weighted_split_by_hand():
    # A model that always predicts class 0: accuracy is the weight of the class-0 rows.
    xs = [torch.zeros(3, 1), torch.zeros(2, 1)]
    ys = [torch.tensor([0, 1, 1]), torch.tensor([1, 0])]
    weighted = ClientSplit.from_lists(xs, ys, [torch.tensor([0.6, 0.2, 0.2]),
                                               torch.tensor([0.25, 0.0])])
    plain = ClientSplit.from_lists(xs, ys)
    data = FederatedDataset("w", "classification", {"train": plain, "val": plain,
                                                    "test": weighted}, num_classes=2)
    model = nn.Linear(1, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([1.0, 0.0]))
    trainer = ClientTrainer(model, data, eval_batch_size=2)
    params = trainer.layout.flatten(model).repeat(2, 1)
    test = trainer.evaluate(torch.arange(2), params, split="test")
    val = trainer.evaluate(torch.arange(2), params, split="val")
    # Client 0: 0.6 / (0.6 + 0.2 + 0.2); client 1: only the class-1 row weighs.
    assert torch.allclose(test["accuracy"], torch.tensor([0.6, 0.0]))
    assert torch.allclose(val["accuracy"], torch.tensor([1 / 3, 0.5]))
    ce = F.cross_entropy(torch.tensor([[1.0, 0.0]]), torch.tensor([1]))
    assert torch.allclose(test["loss"][1], ce)
    # The subset keeps the weights.
    sub = data.subset(torch.tensor([1]))
    assert torch.equal(sub.splits["test"].weight, weighted.weight[1:])


def test_client_split_weight_checks():
    with pytest.raises(ValueError, match="one weight per stored row"):
        ClientSplit(torch.zeros(2, 3, 1), torch.zeros(2, 3), torch.tensor([3, 3]),
                    torch.ones(2, 2))
    with pytest.raises(ValueError, match="finite and non-negative"):
        ClientSplit(torch.zeros(1, 2, 1), torch.zeros(1, 2), torch.tensor([2]),
                    torch.tensor([[1.0, -1.0]]))
    with pytest.raises(ValueError, match="and 1 weights"):
        ClientSplit.from_lists([torch.zeros(2, 1)], [torch.zeros(2)], [torch.ones(1)])


@pytest.mark.parametrize("execution", ["vmap", "loop"])
@pytest.mark.parametrize("model_fn", [make_mlp, make_bn_model], ids=["mlp", "batchnorm"])
def test_loss_gradient_matches_autograd(model_fn, execution):
    data = make_dataset()
    trainer = ClientTrainer(model_fn(), data, execution=execution)
    clients = torch.tensor([0, 3, 1])  # client 3 has no validation samples
    params, buffers = start_state(trainer, 3, seed=7)
    g, loss = trainer.loss_gradient(clients, params, buffers, split="val")
    assert g.shape == params.shape and loss.shape == (3,)
    for i, c in ((0, 0), (2, 1)):
        m = copy.deepcopy(trainer.model)
        trainer.layout.load_into(m, params[i], buffers[i] if trainer.layout.num_buffers else None)
        m.eval()
        n = VAL_COUNTS[c]
        ref = F.cross_entropy(m(data.splits["val"].x[c, :n]), data.splits["val"].y[c, :n])
        ref.backward()
        expected = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
        assert torch.allclose(g[i], expected, atol=1e-5)
        assert torch.allclose(loss[i], ref.detach(), atol=1e-6)
    assert float(loss[1]) == 0.0 and not g[1].any()


@pytest.mark.parametrize("execution", ["vmap", "loop"])
def test_regularized_training_gradient_is_the_flat_vectors(execution):
    # The data term is differentiated through the parameter tensors and the regularizer
    # through the flat vector (_pieces_loss); their sum is the gradient of the whole loss
    # with respect to the flat vector, here from plain autograd, one client at a time.
    data = make_dataset()
    trainer = ClientTrainer(make_mlp(), data, execution=execution)
    clients = torch.tensor([0, 1, 3])
    params, buffers = start_state(trainer, 3, seed=5)
    refs = torch.randn(3, trainer.layout.num_params, generator=torch.Generator().manual_seed(6))
    bufs = trainer._buffer_dict(buffers)
    batch = torch.tensor([[0, 1, 2], [1, 0, 0], [2, 2, 1]]).t()  # 3 samples per client
    problem = trainer.problem(clients, bufs, ProximalTerm(refs, coefficient=0.1))
    g, loss = problem.grad(params, batch)
    x, y = data.batch("train", batch, clients)
    for i in range(3):
        theta = params[i].clone().requires_grad_()
        m = copy.deepcopy(trainer.model)
        out = torch.func.functional_call(m, trainer.layout.unflatten(theta), (x[i],))
        whole = F.cross_entropy(out, y[i]) + proximal(theta, refs[i])
        expected, = torch.autograd.grad(whole, theta)
        assert torch.allclose(g[i], expected, atol=1e-6, rtol=0)
        assert torch.allclose(loss[i], whole.detach(), atol=1e-6)
    # Without the regularizer the gradient is smaller by exactly its gradient, 0.1 (θ - r).
    plain, _ = trainer.problem(clients, bufs, None).grad(params, batch)
    assert torch.allclose(g - plain, 0.1 * (params - refs), atol=1e-6, rtol=0)


def test_repr():
    trainer = ClientTrainer(make_mlp(), make_dataset())
    d = trainer.layout.num_params
    assert str(trainer) == f"ClientTrainer(MLP, clients=4, D={d})"


def test_dropout_model_trains_on_the_parallel_path():
    # Dropout draws random masks inside vmap: each client needs its own masks.
    data = make_dataset()
    torch.manual_seed(0)
    trainer = ClientTrainer(MLP(2, 8, 3, dropout=0.5), data,
                            config=LocalConfig(lr=0.1, batch_size=4, epochs=1))
    params = trainer.layout.flatten(trainer.model).repeat(4, 1)
    out = trainer.train(torch.arange(4), params, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(out.params).all()
    assert not torch.equal(out.params[0], params[0])
    assert torch.equal(out.params[2], params[2])  # no data, no step
    # Evaluation runs in eval mode: no dropout, deterministic.
    a = trainer.evaluate(torch.arange(4), out.params)["loss"]
    b = trainer.evaluate(torch.arange(4), out.params)["loss"]
    assert torch.equal(a.nan_to_num(), b.nan_to_num())


# ------------------------------------------------------------ output size
@pytest.mark.parametrize("outputs", [2, 5])
def test_a_model_with_the_wrong_output_size_is_refused_naming_both_sizes(outputs):
    # Before the check, training stopped inside the loss with "index 4 is out of
    # bounds for dimension 2 with size 3", which names neither size.
    torch.manual_seed(0)
    model = MLP(2, 8, outputs)
    message = (f"the model gives {outputs} outputs per sample, but dataset 'toy' has 3 classes: "
               r"a classification model must output one score per class, shape \(batch, 3\)")
    with pytest.raises(ValueError, match=message):
        ClientTrainer(model, make_dataset())
    from pyg_fedgraph.simulation import Simulator
    from pyg_fedgraph.strategies import FedAvg
    with pytest.raises(ValueError, match=message):
        Simulator(make_dataset(), model, FedAvg(), rounds=1)
    # Three outputs: accepted, and the probe (in eval mode) leaves the trainer's model training.
    assert ClientTrainer(make_mlp(), make_dataset()).model.training


def test_the_output_check_names_a_shape_that_is_not_batch_by_classes():
    model = nn.Sequential(nn.Linear(2, 3), nn.Flatten(0))  # (B, 3) -> (3B,)
    with pytest.raises(ValueError, match=r"outputs of shape \(6,\) for 2 samples"):
        ClientTrainer(model, make_dataset())


def test_regression_models_are_not_probed():
    data = make_dataset()
    data = FederatedDataset("toy", "regression", {s: ClientSplit(sp.x, sp.y.float(), sp.counts)
                                                   for s, sp in data.splits.items()})
    ClientTrainer(MLP(2, 8, 1), data)  # any output size: the loss decides
