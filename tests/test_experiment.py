import pytest
import torch

from pyg_fedgraph.data import DatasetDefaults
from pyg_fedgraph.data.partition import build_federated_dataset
from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
from pyg_fedgraph.models.cnn import SimpleCNN
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.train import LocalConfig

DEFAULTS = DatasetDefaults("cnn", {"channels": (4, 8, 8)},
                           {"lr": 0.2, "momentum": 0.5, "batch_size": 7, "steps": 3}, rounds=4)


def images(name, defaults):
    # 3 clients of 8x8 grey images, 2 classes.
    x = torch.rand(60, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.arange(60) % 2
    parts = [torch.arange(0, 20), torch.arange(20, 40), torch.arange(40, 60)]
    return build_federated_dataset(name, x, y, parts, num_classes=2,
                                   generator=torch.Generator().manual_seed(0), defaults=defaults)


def simulator(ds, **cfg):
    return build_simulator(ExperimentConfig(dataset=ds.name, strategy="fedavg", **cfg),
                           dataset=ds)


def test_a_custom_named_dataset_carries_and_applies_its_defaults():
    ds = images("my-own-images", DEFAULTS)
    assert ds.defaults is DEFAULTS and ds.subset(torch.tensor([0, 2])).defaults is DEFAULTS
    sim = simulator(ds)
    assert isinstance(sim.trainer.model, SimpleCNN) and sim.trainer.model.channels == (4, 8, 8)
    assert sim.trainer.config == LocalConfig(lr=0.2, momentum=0.5, batch_size=7, steps=3)
    assert sim.rounds == 4
    # The settings of the run still win over the dataset's.
    sim = simulator(ds, rounds=2, overrides={"lr": 0.05, "model.channels": [2, 2, 2]})
    assert sim.trainer.model.channels == (2, 2, 2) and sim.trainer.config.lr == 0.05
    assert sim.trainer.config.steps == 3 and sim.rounds == 2
    assert DEFAULTS.local["lr"] == 0.2 and DEFAULTS.model_kwargs == {"channels": (4, 8, 8)}


def test_asking_for_epochs_drops_a_default_step_count():
    sim = simulator(images("my-own-images", DEFAULTS), overrides={"epochs": 1})
    assert sim.trainer.config.epochs == 1 and sim.trainer.config.steps is None
    sim = simulator(images("my-own-images", DEFAULTS), overrides={"epochs": 1, "steps": 5})
    assert sim.trainer.config.steps == 5


def test_a_dataset_without_defaults_falls_back_to_the_table_by_name():
    sim = simulator(images("my-own-images", None))
    assert isinstance(sim.trainer.model, MLP) and sim.trainer.model.hidden_channels == 16
    assert sim.rounds == 30
    sim = simulator(images("digits", None))
    assert sim.trainer.model.hidden_channels == 64 and sim.trainer.config.lr == 0.05


def test_dataset_defaults_check_rounds():
    with pytest.raises(ValueError, match="at least one round, got rounds=0"):
        DatasetDefaults("cnn", rounds=0)


def test_nesterov_and_schedule_reach_the_trainer_and_the_resolved_config():
    from pyg_fedgraph.experiment.files import resolved_config

    def run(**over):
        cfg = ExperimentConfig(dataset="fl60", clients=4, strategy="fedavg", rounds=1,
                               overrides=over)
        return cfg, build_simulator(cfg)

    cfg, sim = run(momentum=0.9, nesterov=True, warmup=0.2, lr_decay_to=0.01)
    local = sim.trainer.config
    assert (local.nesterov, local.warmup, local.lr_decay_to) == (True, 0.2, 0.01)
    resolved = resolved_config(sim, cfg)["set"]
    assert (resolved["nesterov"], resolved["warmup"], resolved["lr_decay_to"]) == (True, 0.2,
                                                                                   0.01)
    # Runs without them write the keys they always wrote.
    cfg, sim = run()
    assert not {"nesterov", "warmup", "lr_decay_to"} & set(resolved_config(sim, cfg)["set"])
    with pytest.raises(ValueError, match="nesterov=True needs momentum > 0"):
        run(momentum=0.0, nesterov=True)


def test_a_strategys_own_option_wins_over_the_client_setting_of_its_name():
    from pyg_fedgraph.experiment.build import route_overrides
    from pyg_fedgraph.strategies import STRATEGIES
    from pyg_fedgraph.train.config import LOCAL_SCHEMA

    # pFedGAT's optimizer is its server's (the GAT's): as it was before clients had one.
    cfg = ExperimentConfig(dataset="digits", strategy="pfedgat",
                           overrides={"optimizer": "adam", "local.optimizer": "adam",
                                      "lr": 0.05})
    routed = route_overrides(cfg)
    assert routed["strategy"] == {"optimizer": "adam"}
    assert routed["local"] == {"optimizer": "adam", "lr": 0.05}
    # Where the strategy declares no such option, the plain key reaches the clients.
    routed = route_overrides(ExperimentConfig(dataset="digits", strategy="fedavg",
                                              overrides={"optimizer": "adam"}))
    assert routed["local"] == {"optimizer": "adam"} and routed["strategy"] == {}
    with pytest.raises(ValueError, match="--set local.gat_lr: not a local-training key"):
        route_overrides(ExperimentConfig(dataset="digits", strategy="pfedgat",
                                         overrides={"local.gat_lr": 0.1}))
    # Every shadowed name is reachable both ways.
    for name, cls in STRATEGIES.items():
        for key in set(cls.hparam_schema()) & set(LOCAL_SCHEMA):
            value = {"optimizer": "adam"}.get(key)
            if value is None:
                continue
            routed = route_overrides(ExperimentConfig(
                dataset="digits", strategy=name, overrides={key: value, f"local.{key}": value}))
            assert routed["strategy"][key] == value and routed["local"][key] == value, name


def test_the_resolved_config_of_a_shadowed_client_setting_reruns_it():
    from pyg_fedgraph.experiment.files import resolved_config

    cfg = ExperimentConfig(dataset="digits", strategy="pfedgat", clients=3, rounds=1,
                           overrides={"local.optimizer": "adam", "momentum": 0.0, "epochs": 1})
    sim = build_simulator(cfg)
    assert sim.trainer.config.optimizer == "adam" and sim.strategy.optimizer == "sgd"
    resolved = resolved_config(sim, cfg)["set"]
    assert resolved["local.optimizer"] == "adam" and resolved["optimizer"] == "sgd"
    again = build_simulator(ExperimentConfig(dataset="digits", strategy="pfedgat", clients=3,
                                             rounds=1, overrides=resolved))
    assert again.trainer.config.optimizer == "adam" and again.strategy.optimizer == "sgd"
