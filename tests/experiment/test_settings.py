"""One declaration of the run settings: the command line's options, the config-file
schema, the ``--set`` help and the resolved ``config.yaml`` all come from it."""
from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pyg_fedgraph.cli import build_parser, main
from pyg_fedgraph.experiment import ExperimentConfig, RunOptions, build_simulator
from pyg_fedgraph.experiment.files import file_schema, load_config, resolved_config
from pyg_fedgraph.experiment.records import config_key
from pyg_fedgraph.experiment.settings import file_keys, options, parse_overrides
from pyg_fedgraph.simulation.config import SIM_KEYS, SIM_SCHEMA, SimulatorConfig
from pyg_fedgraph.train.config import LOCAL_SCHEMA


def help_text(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(sub.choices[command].format_help().split())


@pytest.mark.parametrize("command", ["run", "tune"])
def test_every_declared_setting_is_an_option_with_its_help(command):
    text = help_text(command)
    opts = options(command)
    assert opts and len({o.flag for o in opts}) == len(opts)
    for option in opts:
        assert option.flag in text, option.name
        if option.choices:
            assert all(str(c) in text for c in option.choices)
    # run's --set lists every local-training and simulator key, from their declarations.
    if command == "run":
        for key in (*LOCAL_SCHEMA, *SIM_KEYS):
            assert key in text, key


def test_the_config_file_schema_and_the_resolved_config_hold_every_file_setting(tmp_path):
    schema = {f.name for f in dataclasses.fields(file_schema())}
    assert set(file_keys("run")) <= schema and set(file_keys("tune")) <= schema
    cfg = ExperimentConfig(dataset="fl60", strategy="fedavg", clients=4, rounds=1)
    sim = build_simulator(cfg)
    sim.run()
    resolved = resolved_config(sim, cfg, RunOptions())
    assert list(resolved) == list(file_keys("run"))
    # Every local-training and simulator key is pinned in its set map (those set only
    # when they differ from their defaults aside).
    from pyg_fedgraph.train.config import LOCAL_WHEN_SET
    assert {k for k in LOCAL_SCHEMA if k not in LOCAL_WHEN_SET} <= set(resolved["set"])
    assert {k for k in SIM_KEYS if k not in ("state_device", "compile")} <= set(resolved["set"])
    # ... and the file reads back as the same settings.
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in resolved.items() if k != "provenance"}))
    values = load_config(path)
    assert values["rounds"] == 1 and values["clients"] == 4 and values["set"]["lr"] == 0.05


def test_a_setting_added_later_leaves_the_record_keys_alone():
    # model joined the settings after run records existed: at its default it is not part
    # of to_dict, so the keys of earlier records stay; set, it is.
    cfg = ExperimentConfig(dataset="digits", strategy="fedavg")
    assert "model" not in cfg.to_dict()
    gcn = dataclasses.replace(cfg, model="cnn")
    assert gcn.to_dict()["model"] == "cnn" and config_key(gcn) != config_key(cfg)
    assert ExperimentConfig(**cfg.to_dict()) == cfg and ExperimentConfig(**gcn.to_dict()) == gcn


def test_from_args_reads_every_field_and_the_set_pairs():
    args = build_parser().parse_args(["run", "--dataset", "fl60", "--rounds", "3",
                                      "--model", "mlp", "--set", "lr=0.2",
                                      "--set", "data.samples_per_client=10"])
    cfg = ExperimentConfig.from_args(args, strategy="fedavg")
    assert (cfg.dataset, cfg.rounds, cfg.model, cfg.strategy) == ("fl60", 3, "mlp", "fedavg")
    assert cfg.overrides == {"lr": 0.2, "data.samples_per_client": 10}
    run = RunOptions.from_args(args)
    assert run.checkpoint_every == 0 and run.tracker == []
    assert parse_overrides([("a", "1"), ("a", "[1, 2]"), ("b", "x")]) == {"a": [1, 2], "b": "x"}


def test_the_simulator_and_the_command_line_check_the_same_declarations():
    # One check, shared: rounds=0 and dropout=1.0 are refused by both.
    from pyg_fedgraph.datasets import fl60
    from pyg_fedgraph.models import build_model
    from pyg_fedgraph.simulation.simulator import Simulator
    from pyg_fedgraph.strategies import build_strategy

    data = fl60(num_clients=4)
    net = build_model("mlp", data.input_shape, 2)
    for kwargs, message in (({"rounds": 0}, "rounds must be >= 1, got 0"),
                            ({"dropout": 1.0}, "dropout must be < 1, got 1.0")):
        with pytest.raises(ValueError, match=message):
            Simulator(data, net, build_strategy("fedavg"), **kwargs)
        with pytest.raises(ValueError, match=message):
            ExperimentConfig(dataset="fl60", **kwargs)
    # The simulator's own defaults are those declared.
    import inspect
    signature = inspect.signature(Simulator)
    for name, hp in SIM_SCHEMA.items():
        assert signature.parameters[name].default == hp.default, name
    assert dataclasses.fields(SimulatorConfig)


def test_help_and_the_settings_import_no_torch():
    code = ("import sys\n"
            "from pyg_fedgraph.experiment.settings import options\n"
            "from pyg_fedgraph.experiment import ExperimentConfig\n"
            "ExperimentConfig(dataset='fl60', rounds=2)\n"
            "options('run'); options('tune')\n"
            "print('TORCH' if 'torch' in sys.modules else 'LIGHT')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "LIGHT"


@pytest.mark.parametrize("argv, message", [
    (["--strategy", ""], "--strategy '' names no strategy"),
    (["--strategy", " , "], "names no strategy"),
    (["--beta", "0.5"], "--beta 0.5 is the concentration of --partition dirichlet; the "
                        "group partition does not use it"),
    (["--set", "dropout=1.0"], "--set dropout: dropout is a setting of its own, not a --set "
                               "key: give --dropout 1.0"),
    (["--model", "nope"], "--model: expected one of"),
    (["--model", "cnn", "--set", "model=mlp"], "--model cnn and --set model=mlp name two "
                                               "models"),
    (["--checkpoint-every", "-1"], "--checkpoint-every must be >= 0"),
])
def test_bad_settings_are_one_line_before_training(argv, message, tmp_path, capsys):
    assert main(["run", "--quiet", "--rounds", "1", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o" / "run.json").exists()


def test_resume_of_a_folder_without_a_checkpoint_is_refused(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "run.json").write_text(
        '{"format": 1, "strategies": ["fedavg"], "seeds": [0], "config": '
        '{"dataset": "fl60", "strategy": "fedavg", "rounds": 2}}')
    assert main(["run", "--resume", str(out), "--quiet"]) == 2
    assert "nothing of this run was saved" in capsys.readouterr().err


def test_the_worked_example_of_contributing_is_the_declaration():
    # CONTRIBUTING.md shows adding a setting as one field of ExperimentConfig.
    text = (Path(__file__).resolve().parents[2] / "CONTRIBUTING.md").read_text()
    assert "setting(" in text and "ExperimentConfig" in text
