import json

import pytest
import torch
from robustness_helpers import two_group_dataset

from pyg_fedgraph.attacks import (
    ATTACKS,
    Attack,
    blend_trigger,
    flip_labels,
    gaussian_params,
    same_value_params,
    scaled_negative_params,
    shuffle_params,
    sign_flip_params,
)
from pyg_fedgraph.cli import main
from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies.fedavg import FedAvg
from pyg_fedgraph.train.config import LocalConfig

CFG = LocalConfig(lr=0.1, batch_size=4, steps=2)


# ----------------------------------------------------------- model poisoning
def test_sign_flip_and_same_value_by_hand():
    x = torch.tensor([[1.0, -2.0], [0.0, 3.0]])
    assert torch.equal(sign_flip_params(x), torch.tensor([[-1.0, 2.0], [0.0, -3.0]]))
    assert torch.equal(same_value_params(x), torch.ones(2, 2))
    assert torch.equal(same_value_params(x, 2.5), torch.full((2, 2), 2.5))


def test_scaled_negative_update_by_hand():
    start = torch.tensor([[1.0, 1.0]])
    trained = torch.tensor([[3.0, 0.0]])  # update g = (2, -1)
    # Panacea: g' = -0.5 g = (-1, 0.5), uploaded = start + g'.
    assert torch.equal(scaled_negative_params(trained, start), torch.tensor([[0.0, 1.5]]))
    assert torch.equal(scaled_negative_params(trained, start, scale=1.0),
                       torch.tensor([[-1.0, 2.0]]))
    with pytest.raises(ValueError, match="start has shape"):
        scaled_negative_params(trained, torch.zeros(2, 2))


def test_shuffle_permutes_within_each_parameter_tensor():
    x = torch.arange(5.0).repeat(6, 1) + 10 * torch.arange(6.0).unsqueeze(1)
    ptr = torch.tensor([0, 3, 5])
    out = shuffle_params(x, generator=torch.Generator().manual_seed(0), segment_ptr=ptr)
    assert torch.equal(out[:, :3].sort(1).values, x[:, :3])
    assert torch.equal(out[:, 3:].sort(1).values, x[:, 3:])
    assert not torch.equal(out, x)
    again = shuffle_params(x, generator=torch.Generator().manual_seed(0), segment_ptr=ptr)
    assert torch.equal(out, again)
    whole = shuffle_params(x, generator=torch.Generator().manual_seed(1))
    assert torch.equal(whole.sort(1).values, x)
    with pytest.raises(ValueError, match="segment_ptr must run from 0 to 5"):
        shuffle_params(x, segment_ptr=torch.tensor([0, 4]))


def test_gaussian_params_are_standard_normal():
    x = torch.full((4, 5000), 7.0)
    out = gaussian_params(x, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    assert abs(float(out.mean())) < 0.05 and abs(float(out.std()) - 1.0) < 0.05
    assert torch.equal(gaussian_params(x, std=0.0), torch.zeros_like(x))


# ------------------------------------------------------------ data poisoning
def test_flip_labels():
    y = torch.arange(4).repeat(50)
    flipped = flip_labels(y, 4, generator=torch.Generator().manual_seed(0))
    assert bool((flipped != y).all()) and int(flipped.min()) >= 0 and int(flipped.max()) <= 3
    # Every other class is reachable from class 0.
    assert set(flipped[y == 0].tolist()) == {1, 2, 3}
    assert flip_labels(torch.tensor([0, 1, 2, 3]), 4, "reverse").tolist() == [3, 2, 1, 0]
    with pytest.raises(ValueError, match="at least 2 classes"):
        flip_labels(y, 1)


def test_blend_trigger_by_hand():
    x = torch.zeros(2, 3)
    out = blend_trigger(x, torch.ones(3), 0.2)
    assert torch.allclose(out, torch.full((2, 3), 0.2))
    with pytest.raises(ValueError, match="blend"):
        blend_trigger(x, torch.ones(3), 1.5)


def test_attack_selects_a_share_of_the_candidates():
    candidates = torch.arange(2, 12)
    gen = torch.Generator().manual_seed(0)
    chosen = Attack("sign-flip", 0.4).select(candidates, gen)
    assert chosen.numel() == 4 and bool(torch.isin(chosen, candidates).all())
    assert torch.equal(chosen, chosen.sort().values) and chosen.unique().numel() == 4
    assert Attack("sign-flip", 0.0).select(candidates, gen).numel() == 0
    assert Attack("sign-flip", 0.01).select(candidates, gen).numel() == 1
    assert Attack("sign-flip", 1.0).select(candidates, gen).numel() == 10


def test_attack_checks_its_options():
    with pytest.raises(ValueError, match="unknown attack 'flip'"):
        Attack("flip")
    with pytest.raises(ValueError, match="attack ratio"):
        Attack("sign-flip", 1.5)
    assert set(ATTACKS) == {"shuffle", "same-value", "sign-flip", "gaussian",
                            "scaled-negative", "label-flip", "backdoor"}


def test_label_flip_corrupts_only_malicious_training_labels():
    data = two_group_dataset(train_counts=(8, 5, 8, 3), num_classes=3)
    malicious = torch.tensor([1, 3])
    out = Attack("label-flip").poison_dataset(data, malicious, torch.Generator().manual_seed(0))
    old, new = data.splits["train"], out.splits["train"]
    for c, n in enumerate((8, 5, 8, 3)):
        changed = new.y[c, :n] != old.y[c, :n]
        assert bool(changed.all()) if c in (1, 3) else not bool(changed.any())
    assert torch.equal(new.x, old.x)
    for split in ("val", "test"):
        assert out.splits[split] is data.splits[split]
    assert out.info["attack"] == "label-flip"


def test_backdoor_blends_half_of_the_malicious_samples():
    data = two_group_dataset(train_counts=(8, 6, 8), num_classes=3)
    attack = Attack("backdoor", target=2)
    out = attack.poison_dataset(data, torch.tensor([1]), torch.Generator().manual_seed(0))
    old, new = data.splits["train"], out.splits["train"]
    trigger = attack.trigger_for(data)
    rows = (new.x[1, :6] != old.x[1, :6]).any(-1)
    assert int(rows.sum()) == 3  # 50% of the 6 samples (Panacea)
    assert torch.allclose(new.x[1, :6][rows], 0.8 * old.x[1, :6][rows] + 0.2 * trigger)
    assert bool((new.y[1, :6][rows] == 2).all())
    assert torch.equal(new.y[1, :6][~rows], old.y[1, :6][~rows])
    assert torch.equal(new.x[[0, 2]], old.x[[0, 2]]) and torch.equal(new.y[[0, 2]], old.y[[0, 2]])


def test_data_attacks_need_classification():
    x = torch.randn(2, 4, 3)
    split = ClientSplit(x, torch.randn(2, 4), torch.tensor([4, 4]))
    reg = FederatedDataset("reg", "regression", {"train": split, "val": split, "test": split})
    with pytest.raises(ValueError, match="needs a classification dataset"):
        Attack("label-flip").poison_dataset(reg, torch.tensor([0]), torch.Generator())


# --------------------------------------------------------------- simulation
class Spy(FedAvg):
    def __init__(self):
        super().__init__()
        self.seen = []

    def aggregate_train(self, rnd, graph):
        self.seen.append((graph.client_id.clone(), graph.x.clone(), graph.delta.clone()))
        super().aggregate_train(rnd, graph)


def simulate(attack, **kwargs):
    torch.manual_seed(0)
    return Simulator(two_group_dataset(), MLP(2, 8, 2), Spy(), rounds=2, local=CFG, attack=attack,
                     **kwargs)


def test_model_poisoning_reaches_the_server_only():
    sim = simulate(Attack("sign-flip", 0.5))
    assert sim.malicious.numel() == 3
    sim.run()
    ids, x, delta = sim.strategy.seen[-1]
    bad = torch.isin(ids, sim.malicious)
    # Malicious clients keep their honest model and upload its negative.
    assert torch.equal(x[bad], -sim.local_params[ids[bad]])
    assert torch.equal(x[~bad], sim.local_params[ids[~bad]])
    # delta is measured from the start of the round: FedAvg's average of the
    # (partly poisoned) uploads of round 1 (equal sample counts: a plain mean).
    start = sim.strategy.seen[0][1].mean(0)
    assert torch.allclose(x - delta, start.expand_as(x), atol=1e-6)


def test_metrics_are_over_benign_clients():
    sim = simulate(Attack("gaussian", 0.5))
    sim.run()
    benign = sim.benign
    assert torch.equal(benign, torch.tensor([c for c in range(6) if c not in sim.malicious]))
    rec = sim.history.records[sim.history.best_index]
    summary = sim.summary()
    assert summary["test_benign"] == pytest.approx(float(rec.test["accuracy"][benign].mean()))
    assert summary["test"] == summary["test_benign"] and summary["num_malicious"] == 3


def test_clean_run_has_no_benign_keys():
    sim = simulate(None)
    sim.run()
    assert "test_benign" not in sim.summary()
    assert torch.equal(sim.benign, torch.arange(6))


def test_backdoor_reports_attack_success_rate():
    sim = simulate(Attack("backdoor", 0.5, target=1))
    sim.run()
    asr = sim.backdoor_success_rate()
    assert asr.shape == (6,) and bool(((asr >= 0) & (asr <= 1)).all())
    assert 0.0 <= sim.summary()["backdoor_asr"] <= 1.0


def test_cli_attack_writes_test_benign(tmp_path):
    code = main(["run", "--dataset", "fl60", "--clients", "5", "--strategy", "fedavg",
                 "--rounds", "2", "--quiet", "--set", "steps=2",
                 "--set", "data.samples_per_client=20", "--attack", "sign-flip",
                 "--attack-ratio", "0.4", "--out", str(tmp_path)])
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_malicious"] == 2
    assert summary["test_benign"] == summary["test"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["attack"] == "sign-flip" and config["attack_ratio"] == 0.4


@pytest.mark.parametrize("kind", ATTACKS)
def test_every_attack_runs(kind):
    sim = simulate(Attack(kind, 0.5))
    sim.run()
    summary = sim.summary()
    assert summary["num_malicious"] == 3 and 0.0 <= summary["test_benign"] <= 1.0
    ids, x, _ = sim.strategy.seen[-1]
    bad = torch.isin(ids, sim.malicious)
    honest = torch.equal(x[bad], sim.local_params[ids[bad]])
    assert honest == (kind in ("label-flip", "backdoor"))  # data attacks upload what they train
