r"""The local rules of Per-FedAvg, pFedMe and FedRoD: batched over clients
(``ClientTrainer.train``) against per-client reference loops written with
plain autograd on torch modules, as the authors' and PFLlib's code does."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.rules import (
    SGD,
    FedRoDStep,
    PerFedAvgHFStep,
    PerFedAvgStep,
    PFedMeStep,
    class_counts,
)
from pyg_fedgraph.train.trainer import ClientTrainer, batch_schedule

# Client 1 has fewer samples than a batch and lacks class 2, client 2 has no data.
TRAIN = [(10, None), (3, [0, 1, 0]), (0, None), (7, None)]


def make_dataset(seed: int = 0) -> FederatedDataset:
    gen = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for i, (n, labels) in enumerate(TRAIN):
        xs.append(torch.randn(n, 2, generator=gen) + i)
        ys.append(torch.tensor(labels) if labels else torch.randint(3, (n,), generator=gen))
    train = ClientSplit.from_lists(xs, ys)
    return FederatedDataset("toy", "classification", {"train": train, "val": train,
                                                      "test": train}, num_classes=3)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3))


def start_params(trainer: ClientTrainer, s: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    params = trainer.layout.flatten(trainer.model).repeat(s, 1)
    return params + 0.1 * torch.randn(params.shape, generator=gen)


CLIENTS = torch.tensor([3, 0, 2, 1])
CONFIGS = [LocalConfig(lr=0.1, momentum=0.9, weight_decay=1e-3, batch_size=4, epochs=3),
           LocalConfig(lr=0.1, batch_size=2, epochs=None, steps=4)]


def schedule(data, cfg):
    counts = data.num_samples("train")[CLIENTS]
    return batch_schedule(counts, cfg.batch_size, epochs=cfg.epochs, steps=cfg.steps,
                          generator=torch.Generator().manual_seed(0))


def run_rule(rule, cfg):
    data = make_dataset()
    trainer = ClientTrainer(make_model(), data, config=cfg)
    params = start_params(trainer, CLIENTS.numel())
    out = trainer.train(CLIENTS, params, rule=rule, generator=torch.Generator().manual_seed(0))
    return data, trainer, params, out


def reference_steps(data, cfg, k):
    r"""Per client: the list of its steps, each a list of k (x, y) batches."""
    index, active = schedule(data, cfg)
    out = []
    for i, c in enumerate(CLIENTS.tolist()):
        steps = []
        for t in range(index.size(0) // k):
            if bool(active[t * k:(t + 1) * k, i].all()):
                steps.append([data.batch("train", index[t * k + j, i:i + 1],
                                         torch.tensor([c])) for j in range(k)])
        out.append([[(x[0], y[0]) for x, y in step] for step in steps])
    return out


def load(model, layout, flat):
    net = copy.deepcopy(model)
    layout.load_into(net, flat)
    return net


def flat_of(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def test_class_counts_by_hand():
    data = make_dataset()
    counts = class_counts(data, torch.tensor([1, 2]))
    assert counts.tolist() == [[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]]  # padding rows not counted
    assert class_counts(data, CLIENTS).sum(1).tolist() == [7.0, 10.0, 0.0, 3.0]
    regression = FederatedDataset("r", "regression", data.splits)
    with pytest.raises(ValueError, match="class counts need classification data"):
        class_counts(regression, CLIENTS)


# ------------------------------------------------------------------ Per-FedAvg
def _per_fedavg_loop(model, layout, params, steps, cfg, alpha, hf):
    out, losses = [], []
    for theta, client_steps in zip(params, steps, strict=True):
        net = load(model, layout, theta)
        inner = torch.optim.SGD(net.parameters(), lr=alpha)
        meta = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                               weight_decay=cfg.weight_decay)
        total = 0.0
        for batches in client_steps:
            frozen = [p.detach().clone() for p in net.parameters()]
            (x0, y0), (x1, y1) = batches[:2]
            inner.zero_grad()
            F.cross_entropy(net(x0), y0).backward()
            inner.step()
            meta.zero_grad()
            loss = F.cross_entropy(net(x1), y1)
            loss.backward()
            total += float(loss.detach())
            with torch.no_grad():
                for p, f in zip(net.parameters(), frozen, strict=True):
                    p.copy_(f)
            if hf:  # Hessian-vector product by double backward at the frozen point
                x2, y2 = batches[2]
                v = [p.grad.clone() for p in net.parameters()]
                grads = torch.autograd.grad(F.cross_entropy(net(x2), y2),
                                            list(net.parameters()), create_graph=True)
                hv = torch.autograd.grad(grads, list(net.parameters()), grad_outputs=v)
                for p, h in zip(net.parameters(), hv, strict=True):
                    p.grad = p.grad - alpha * h
            meta.step()
        out.append(flat_of(net))
        losses.append(total / max(len(client_steps), 1))
    return torch.stack(out), torch.tensor(losses)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["epochs-momentum", "steps"])
@pytest.mark.parametrize("hf", [False, True], ids=["fo", "hf"])
def test_per_fedavg_batched_equals_reference_loop(cfg, hf):
    rule = (PerFedAvgHFStep if hf else PerFedAvgStep)(alpha=0.3)
    data, trainer, params, out = run_rule(rule, cfg)
    k = 3 if hf else 2
    steps = reference_steps(data, cfg, k)
    want, loss = _per_fedavg_loop(trainer.model, trainer.layout, params, steps, cfg, 0.3, hf)
    torch.testing.assert_close(out.params, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.loss, loss, atol=1e-5, rtol=0)
    assert out.steps.tolist() == [len(s) for s in steps]
    assert out.steps[2] == 0 and torch.equal(out.params[2], params[2])


def test_per_fedavg_first_order_with_alpha_zero_is_sgd_on_every_second_batch():
    # Full batches (B = n = 7, client 3 alone): every batch holds all samples,
    # so 2k meta steps' batches are k SGD steps' batches.
    data = make_dataset()
    one = torch.tensor([3])
    cfg = LocalConfig(lr=0.2, momentum=0.5, batch_size=7, epochs=None, steps=6)
    trainer = ClientTrainer(make_model(), data, config=cfg)
    start = start_params(trainer, 1)
    meta = trainer.train(one, start, rule=PerFedAvgStep(alpha=0.0))
    sgd = trainer.train(one, start, rule=SGD(),
                        config=LocalConfig(lr=0.2, momentum=0.5, batch_size=7, epochs=None,
                                           steps=3))
    assert meta.steps.tolist() == sgd.steps.tolist() == [3]
    torch.testing.assert_close(meta.params, sgd.params, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------- pFedMe
def _pfedme_loop(model, layout, params, steps, cfg, lam, inner_lr, k):
    uploads, personal = [], []
    for theta, client_steps in zip(params, steps, strict=True):
        net = load(model, layout, theta)  # the personalized model, warm-started
        local = [p.detach().clone() for p in net.parameters()]  # w
        for ((x, y),) in client_steps:
            for _ in range(k):
                net.zero_grad()
                F.cross_entropy(net(x), y).backward()
                with torch.no_grad():
                    for p, w in zip(net.parameters(), local, strict=True):
                        p -= inner_lr * (p.grad + cfg.weight_decay * p + lam * (p - w))
            with torch.no_grad():
                for p, w in zip(net.parameters(), local, strict=True):
                    w -= cfg.lr * lam * (w - p)
        uploads.append(torch.cat([w.reshape(-1) for w in local]))
        personal.append(flat_of(net))
    return torch.stack(uploads), torch.stack(personal)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["epochs-momentum", "steps"])
def test_pfedme_batched_equals_reference_loop(cfg):
    rule = PFedMeStep(lam=2.0, inner_lr=0.05, inner_steps=3)
    data, trainer, params, out = run_rule(rule, cfg)
    steps = reference_steps(data, cfg, 1)
    upload, personal = _pfedme_loop(trainer.model, trainer.layout, params, steps, cfg,
                                    2.0, 0.05, 3)
    torch.testing.assert_close(out.params, upload, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.extra["personal_x"], personal, atol=1e-5, rtol=0)
    assert set(out.extra) == set(PFedMeStep.outputs) == {"personal_x"}


# ---------------------------------------------------------------------- FedRoD
def _fedrod_loop(model, layout, params, generic_head, steps, counts, cfg):
    uploads, heads, losses = [], [], []
    for theta, client_steps, n in zip(params, steps, counts, strict=True):
        flat = theta.clone()
        flat[-generic_head.numel():] = generic_head
        net = load(model, layout, flat)            # body + generic head
        body, head = net[:2], net[2]
        personal = copy.deepcopy(head)             # the personal head p = start - g
        with torch.no_grad():
            personal.weight.copy_(layout.unflatten(theta)["2.weight"] - head.weight)
            personal.bias.copy_(layout.unflatten(theta)["2.bias"] - head.bias)
        opt = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                              weight_decay=cfg.weight_decay)
        opt_p = torch.optim.SGD(personal.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                weight_decay=cfg.weight_decay)
        total = 0.0
        for ((x, y),) in client_steps:             # PFLlib's clientROD.train, step by step
            rep = body(x)
            out_g = head(rep)
            loss_bsm = F.cross_entropy(out_g + n.log(), y)
            opt.zero_grad()
            loss_bsm.backward()
            opt.step()
            loss_p = F.cross_entropy(out_g.detach() + personal(rep.detach()), y)
            opt_p.zero_grad()
            loss_p.backward()
            opt_p.step()
            total += float(loss_bsm.detach()) + float(loss_p.detach())
        uploads.append(flat_of(net))
        heads.append(flat_of(personal))
        losses.append(total / max(len(client_steps), 1))
    return torch.stack(uploads), torch.stack(heads), torch.tensor(losses)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["epochs-momentum", "steps"])
def test_fedrod_batched_equals_reference_loop(cfg):
    data = make_dataset()
    trainer = ClientTrainer(make_model(), data, config=cfg)
    layout = trainer.layout
    params = start_params(trainer, CLIENTS.numel())
    head_start = int(layout.ptr[-2])
    generic = layout.flatten(trainer.model)[head_start:] - 0.2
    rule = FedRoDStep(generic, head_start, layout.num_params - 3)
    out = trainer.train(CLIENTS, params, rule=rule, generator=torch.Generator().manual_seed(0))
    steps = reference_steps(data, cfg, 1)
    upload, heads, loss = _fedrod_loop(trainer.model, layout, params, generic, steps,
                                       class_counts(data, CLIENTS), cfg)
    torch.testing.assert_close(out.params, upload, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.extra["personal_head"], heads, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.loss, loss, atol=1e-5, rtol=0)
    assert bool(torch.isfinite(out.params).all())  # client 1 lacks class 2: log 0 = -inf
    # Client 1's generic logit of its missing class gets no gradient: only weight decay.
    w_class2 = slice(head_start + 2 * 8, head_start + 3 * 8)
    if cfg.weight_decay == 0:
        torch.testing.assert_close(out.params[3, w_class2], generic[16:24])


def test_fedrod_rule_checks_its_head():
    data = make_dataset()
    trainer = ClientTrainer(make_model(), data, config=CONFIGS[1])
    layout = trainer.layout
    params = start_params(trainer, 4)
    head_start = int(layout.ptr[-2])
    generic = params[0, head_start:]
    with pytest.raises(ValueError, match="does not end a model"):
        trainer.train(CLIENTS, params, rule=FedRoDStep(generic[1:], head_start, head_start))
    with pytest.raises(ValueError, match="the data has 3 classes, the head's bias holds 4"):
        trainer.train(CLIENTS, params,
                      rule=FedRoDStep(generic, head_start, layout.num_params - 4))


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_step_helper_equals_torch_sgd(nesterov):
    # _sgd_step (Per-FedAvg's and FedRoD's outer step) against torch.optim.SGD,
    # three steps with weight decay, on two rows at once.
    from pyg_fedgraph.train.rules import _sgd_step
    cfg = LocalConfig(lr=0.1, momentum=0.9, nesterov=nesterov, weight_decay=0.01)
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(2, 5, generator=gen)
    grads = [torch.randn(2, 5, generator=gen) for _ in range(3)]
    ref = theta.clone().requires_grad_()
    opt = torch.optim.SGD([ref], lr=0.1, momentum=0.9, nesterov=nesterov, weight_decay=0.01)
    state = {"momentum": torch.zeros_like(theta)}
    for g in grads:
        theta, state = _sgd_step(theta, g, state, "momentum", cfg)
        ref.grad = g.clone()
        opt.step()
    assert torch.allclose(theta, ref.detach(), atol=1e-6)
