r"""Config files (``--config``), the resolved ``config.yaml`` of every run,
several seeds (``--seeds``) and ``--save-models``."""
import json
import statistics
from pathlib import Path

import pytest
import torch
import yaml

from pyg_fedgraph.cli import main
from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
from pyg_fedgraph.experiment.files import load_config
from pyg_fedgraph.simulation.report import read_models
from tests.test_cli_resume import FL60, history


def write(path, text):
    path.write_text(text)
    return path


def one_error_line(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# --------------------------------------------------------------- bad files
@pytest.mark.parametrize("text,needle", [
    ("dataset: fl60\nroundz: 3\n", "'roundz'"),              # misspelled key
    ("rounds: three\n", "'rounds'"),                         # wrong type
    ("set: [1, 2]\n", "set"),                                # set is not a map
    ("- a\n- b\n", "map of settings"),                       # not a map at all
    ("dataset: [unclosed\n", "not a YAML file"),             # YAML syntax
    ("strategy: {a: 1}\n", "'strategy'"),                    # strategy neither name nor list
])
def test_a_bad_config_file_is_one_line_and_exit_2_before_any_work(tmp_path, capsys, text,
                                                                   needle):
    cfg = write(tmp_path / "exp.yaml", text)
    assert main(["run", "--config", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = one_error_line(capsys)
    assert needle in err and str(cfg) in err
    assert not (tmp_path / "out").exists()


def test_a_bad_value_in_the_file_is_checked_like_the_flag(tmp_path, capsys):
    cfg = write(tmp_path / "exp.yaml", "dataset: fl60\nset:\n  lr: -1\n")
    assert main(["run", "--config", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "lr" in one_error_line(capsys)


def test_a_missing_config_file(tmp_path, capsys):
    assert main(["run", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in one_error_line(capsys)


def test_a_yaml_tag_never_runs_code(tmp_path, capsys):
    marker = tmp_path / "ran"
    cfg = write(tmp_path / "exp.yaml",
                f"dataset: !!python/object/apply:os.system ['touch {marker}']\n")
    assert main(["run", "--config", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    one_error_line(capsys)
    assert not marker.exists()


# --------------------------------------------------------------- reading
def test_nested_set_maps_become_set_keys_and_absent_keys_stay_unset(tmp_path):
    cfg = write(tmp_path / "exp.yaml", "strategy: [fedavg, local]\nset:\n"
                "  model: {name: mlp, hidden_channels: 8}\n  data: {samples_per_client: 20}\n")
    values = load_config(cfg)
    assert values["strategy"] == "fedavg,local"
    assert values["set"] == {"model": "mlp", "model.hidden_channels": 8,
                             "data.samples_per_client": 20}
    assert "rounds" not in values and "dataset" not in values  # the CLI's defaults stay


def test_flags_win_over_the_file_and_set_keys_over_its_set(tmp_path):
    cfg = write(tmp_path / "exp.yaml", "dataset: fl60\nclients: 6\nrounds: 5\nstrategy: fedavg\n"
                "set:\n  data.samples_per_client: 20\n  steps: 3\n  lr: 0.2\n")
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg), "--rounds", "2", "--set", "lr=0.1",
                 "--out", str(out), "--quiet"]) == 0
    resolved = load_config(out / "config.yaml")
    assert resolved["rounds"] == 2 and resolved["clients"] == 6
    assert resolved["set"]["lr"] == 0.1 and resolved["set"]["steps"] == 3
    assert len(history(out)) == 2


# --------------------------------------------------------------- replay and provenance
def test_a_runs_config_yaml_reruns_it_exactly(tmp_path):
    first = tmp_path / "first"
    assert main(["run", *FL60, "--strategy", "pfedgraph", "--rounds", "3", "--seed", "4",
                 "--set", "alpha=0.5", "--out", str(first), "--quiet"]) == 0
    resolved = load_config(first / "config.yaml")
    # Defaults are pinned: a later change of a default does not change the rerun.
    for key in ("lr", "batch_size", "model", "model.hidden_channels", "alpha", "lam"):
        assert key in resolved["set"], key
    assert resolved["seed"] == 4 and resolved["set"]["alpha"] == 0.5
    again = tmp_path / "again"
    assert main(["run", "--config", str(first / "config.yaml"), "--out", str(again),
                 "--quiet"]) == 0
    assert history(again) == history(first)
    prov = [yaml.safe_load((d / "config.yaml").read_text())["provenance"]
            for d in (first, again)]
    assert prov[0]["data_sha256"] == prov[1]["data_sha256"]
    assert len(prov[0]["data_sha256"]) == 64
    for key in ("pyg_fedgraph", "torch", "torch_geometric", "python", "device", "git_commit"):
        assert key in prov[0], key


def test_the_data_checksum_moves_with_the_data(tmp_path):
    from pyg_fedgraph.datasets import load_dataset
    from pyg_fedgraph.experiment.files import data_checksum

    a = load_dataset("fl60", num_clients=6, samples_per_client=20, seed=0)
    b = load_dataset("fl60", num_clients=6, samples_per_client=20, seed=0)
    c = load_dataset("fl60", num_clients=6, samples_per_client=20, seed=1)
    assert data_checksum(a) == data_checksum(b) != data_checksum(c)


# --------------------------------------------------------------- seeds
def test_seeds_runs_each_seed_as_its_own_run_and_reports_mean_and_std(tmp_path):
    out = tmp_path / "seeds"
    assert main(["run", *FL60, "--strategy", "fedavg,local", "--rounds", "2", "--seeds", "0,1",
                 "--out", str(out), "--quiet"]) == 0
    for seed in (0, 1):
        alone = tmp_path / f"alone{seed}"
        assert main(["run", *FL60, "--strategy", "fedavg", "--rounds", "2", "--seed", str(seed),
                     "--out", str(alone), "--quiet"]) == 0
        assert history(out / "fedavg" / f"seed-{seed}") == history(alone)
    rows = {r["strategy"]: r for r in json.loads((out / "comparison.json").read_text())}
    tests = [json.loads((out / "fedavg" / f"seed-{s}" / "summary.json").read_text())["test"]
             for s in (0, 1)]
    assert rows["fedavg"]["test"] == pytest.approx(statistics.mean(tests))
    assert rows["fedavg"]["test_std"] == pytest.approx(statistics.stdev(tests))
    assert [r["seed"] for r in rows["fedavg"]["runs"]] == [0, 1]


def test_seed_and_seeds_together_are_refused(tmp_path, capsys):
    assert main(["run", *FL60, "--seed", "1", "--seeds", "0,1", "--out", str(tmp_path)]) == 2
    assert "--seeds" in one_error_line(capsys)


@pytest.mark.parametrize("text", ["0,0", "a,b", "-1", ""])
def test_bad_seed_lists(tmp_path, capsys, text):
    with pytest.raises(SystemExit) as exc:  # argparse's own exit
        main(["run", *FL60, "--seeds", text, "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "--seeds" in one_error_line(capsys)


# --------------------------------------------------------------- models
def test_save_models_writes_every_clients_personalized_model(tmp_path):
    out = tmp_path / "out"
    assert main(["run", *FL60, "--strategy", "local", "--rounds", "2", "--save-models",
                 "--out", str(out), "--quiet"]) == 0
    saved = read_models(out / "models.pt")
    # The same run in-process: its personalized models are the saved ones.
    cfg = ExperimentConfig(dataset="fl60", strategy="local", rounds=2, clients=6,
                           overrides={"data.samples_per_client": 20, "steps": 2})
    sim = build_simulator(cfg)
    sim.run()
    params, buffers = sim.personalized_models()
    torch.testing.assert_close(saved["params"], params.float().cpu())  # files hold CPU tensors
    assert len(saved["state_dicts"]) == 6
    model = sim.trainer.model
    model.load_state_dict(saved["state_dicts"][3])
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.testing.assert_close(flat, params[3].float())
    # Local clients differ from each other.
    assert not torch.equal(saved["params"][0], saved["params"][1])


def test_tune_reads_the_config_file_too(tmp_path):
    cfg = write(tmp_path / "exp.yaml", "dataset: fl60\nclients: 6\nrounds: 1\nstrategy: fedavg\n"
                "seeds: [0, 1]\nset:\n  data.samples_per_client: 20\n  steps: 1\n")
    out = tmp_path / "tune"
    assert main(["tune", "--config", str(cfg), "--n-trials", "1", "--storage",
                 f"sqlite:///{tmp_path / 'study.db'}", "--out", str(out), "--quiet"]) == 0
    best = json.loads((out / "best.json").read_text())
    text = json.dumps(best)
    assert "fl60" in text and "data.samples_per_client" in text


CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_shipped_config_is_valid(path):
    from pyg_fedgraph.cli import build_parser
    from pyg_fedgraph.cli.run import _strategy_list, apply_config
    from pyg_fedgraph.experiment import route_overrides

    argv = ["run", "--config", str(path)]
    args = apply_config(build_parser().parse_args(argv), argv)
    for name in _strategy_list(args.strategy):
        for seed in args.seeds or [args.seed]:
            cfg = ExperimentConfig(dataset=args.dataset, strategy=name, rounds=args.rounds,
                                   clients=args.clients, partition=args.partition,
                                   beta=args.beta, classes_per_client=args.classes_per_client,
                                   seed=seed, attack=args.attack, overrides=dict(args.overrides))
            route_overrides(cfg)  # every set key reaches an option that takes its value


# --------------------------------------------------------------- the default job
def _planned_runs(argv):
    r"""The strategies, seeds and settings ``run`` plans for ``argv`` (as run_main)."""
    from pyg_fedgraph.cli import build_parser
    from pyg_fedgraph.cli.run import _strategy_list, apply_config, default_job

    args = apply_config(build_parser().parse_args(argv), argv)
    if args.dataset is None:
        args = default_job(args)
    names = _strategy_list(args.strategy)
    seeds = args.seeds or [args.seed]
    return names, seeds, [ExperimentConfig.from_args(args, strategy=n, seed=s).to_dict()
                          for n in names for s in seeds]


def test_the_quickstart_config_is_the_default_job():
    # configs/quickstart.yaml is the Quickstart's job written out: the same runs, setting for
    # setting, as `pyg-fedgraph run` without options.
    quickstart = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"
    from_file = _planned_runs(["run", "--config", str(quickstart)])
    assert from_file == _planned_runs(["run"])
    assert from_file[0] == ["local", "fedavg", "fedavg-ft", "pfedgraph"]
    # And it is not so by accident: a change to the file shows.
    assert _planned_runs(["run", "--config", str(quickstart), "--clients", "39"]) != from_file


def test_the_default_job_fills_only_what_is_not_given():
    from pyg_fedgraph.cli import DEFAULT_JOB, build_parser
    from pyg_fedgraph.cli.run import default_job

    args = default_job(build_parser().parse_args(["run"]))
    assert (args.dataset, args.partition, args.clients, args.rounds) == (
        "digits", "group", 40, 20)
    assert args.overrides == list(DEFAULT_JOB["set"].items())
    args = default_job(build_parser().parse_args(
        ["run", "--clients", "10", "--rounds", "2", "--set", "data.fractions=[0.7,0.1,0.2]"]))
    assert (args.clients, args.rounds, args.partition) == (10, 2, "group")
    assert args.overrides == [("data.fractions", "[0.7,0.1,0.2]")]
    # With --dataset the dataset's own defaults hold (run_main calls default_job only then).
    assert build_parser().parse_args(["run", "--dataset", "fl60"]).partition is None
