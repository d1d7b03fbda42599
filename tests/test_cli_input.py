r"""Bad command-line input: one line on stderr, exit code 2, no traceback,
and no training (the simulator's step is booby-trapped)."""
import os
import subprocess
import sys

import pytest

from pyg_fedgraph.catalog import DATASET_NAMES, MODEL_NAMES, STRATEGY_NAMES
from pyg_fedgraph.cli import build_parser, main
from pyg_fedgraph.simulation import Simulator

FL60 = ["--dataset", "fl60", "--clients", "6", "--set", "data.samples_per_client=20",
        "--set", "steps=2", "--quiet"]


@pytest.fixture
def no_training(monkeypatch):
    def step(self):
        raise AssertionError("a round ran although the input was bad")
    monkeypatch.setattr(Simulator, "step", step)


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


BAD_RUNS = [
    (["--set", "lr=abc"], "--set lr: expected a float > 0, got 'abc'"),
    (["--set", "lr=NaN"], "--set lr: expected a finite number"),
    (["--set", "lr=inf"], "--set lr"),
    (["--set", "epochs=1.5"], "--set epochs: expected an int"),
    (["--set", "model.hidden_channels=abc"], "--set model.hidden_channels: expected an int"),
    (["--set", "model.no_such=3"], "model 'mlp' has no option 'no_such'"),
    (["--set", "data.no_such=3"], "dataset 'digits' has no option 'no_such'"),
    (["--set", "sample_fraction=0"], "--set sample_fraction"),
    (["--strategy", "fedavg,pfedgrap"], "unknown strategy 'pfedgrap'"),
    (["--strategy", "fedavg,fedavg"], "more than once"),
    (["--rounds", "0"], "rounds must be >= 1"),
    (["--dropout", "1.0"], "dropout must be < 1"),
    (["--attack", "sign-flip", "--attack-ratio", "1.0"], "attack_ratio must be < 1"),
    (["--novel-clients", "1.0"], "novel_clients must be < 1"),
    (["--strategy", "fedcedar", "--set", "num_clusters=50"],
     "num_clusters=50 exceeds the 40 clients"),
    (["--strategy", "fedaghn,panacea"], "strategy 'panacea' needs a prior client graph"),
    (["--checkpoint-every", "-1"], "--checkpoint-every must be >= 0"),
    # The default job's group partition (5 groups) on too few clients names its option.
    (["--clients", "3"], "num_groups=5 must be in [1, min(num_clients, num_classes)] = [1, 3] "
     "(3 clients, 10 classes): every group needs a client and a class of its own; use fewer "
     "groups or more clients (--set data.num_groups=K)"),
]


@pytest.mark.parametrize("extra,message", BAD_RUNS, ids=[" ".join(a) for a, _ in BAD_RUNS])
def test_bad_run_input_exits_2_with_one_line_before_any_work(extra, message, tmp_path, capsys,
                                                               no_training):
    out = tmp_path / "out"
    assert main(["run", "--rounds", "2", "--quiet", "--out", str(out), *extra]) == 2
    line = one_error_line(capsys)
    assert line.startswith("pyg-fedgraph: error: ") and message in line
    assert not out.exists()  # checked before the output folder is even created


@pytest.mark.parametrize("extra,message", [
    (["--log-level", "bogus"], "invalid log level 'bogus'"),
    (["--rounds", "two"], "invalid int value"),
    (["--partition", "zipf"], "invalid choice"),
    (["--set", "lr"], "--set expects key=value"),
    (["--no-such-flag"], "unrecognized arguments"),
])
def test_argparse_errors_are_one_line_too(extra, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", *extra])
    assert exc.value.code == 2
    assert message in one_error_line(capsys)


def test_tune_checks_its_settings_before_the_study(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    assert main(["tune", "--strategy", "fedavg", "--n-trials", "1", "--storage", storage,
                 "--set", "lr=abc", "--quiet"]) == 2
    assert "--set lr" in one_error_line(capsys)
    assert not (tmp_path / "study.db").exists()


# ---------------------------------------------------------------- --out
def test_out_that_is_a_file_or_lies_under_one(tmp_path, capsys, no_training):
    f = tmp_path / "file"
    f.write_text("mine")
    assert main(["run", "--out", str(f), "--quiet"]) == 2
    assert "is a file, not a directory" in one_error_line(capsys)
    assert main(["run", "--out", str(f / "sub"), "--quiet"]) == 2
    assert "a part of the path is a file" in one_error_line(capsys)
    assert f.read_text() == "mine"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_out_that_is_not_writable(tmp_path, capsys, no_training):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert main(["run", "--out", str(locked), "--quiet"]) == 2
        assert "is not writable" in one_error_line(capsys)
        assert main(["run", "--out", str(locked / "new"), "--quiet"]) == 2
        assert "cannot be created" in one_error_line(capsys)
    finally:
        locked.chmod(0o700)


def test_out_that_refuses_writes_as_root_would_not(tmp_path, capsys, monkeypatch, no_training):
    # The same path for users the file system lets through but something else refuses
    # (a read-only mount): the probe file fails.
    import pyg_fedgraph.experiment.comparison as run_module

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Read-only file system")
    monkeypatch.setattr(run_module.tempfile, "TemporaryFile", refuse)
    assert main(["run", "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "is not writable: Read-only file system" in one_error_line(capsys)


def test_out_holding_a_run_is_refused_and_overwrite_removes_only_its_files(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", *FL60, "--strategy", "pfedgraph", "--rounds", "1",
                 "--out", str(out)]) == 0
    assert (out / "collaboration.npz").is_file()
    (out / "notes.txt").write_text("the user's own file")
    capsys.readouterr()

    assert main(["run", *FL60, "--strategy", "fedavg", "--rounds", "1", "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert "already holds a run" in line and f"--resume {out}" in line and "--overwrite" in line

    assert main(["run", *FL60, "--strategy", "fedavg", "--rounds", "1", "--out", str(out),
                 "--overwrite"]) == 0
    assert not list(out.glob("collaboration*"))  # the pfedgraph run's files are gone
    assert (out / "notes.txt").read_text() == "the user's own file"
    assert '"strategy": "fedavg"' in (out / "summary.json").read_text()


# ---------------------------------------------------------------- --resume
def test_resume_refuses_other_settings_and_fewer_rounds(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", *FL60, "--strategy", "fedavg", "--rounds", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    for extra in (["--strategy", "pfedgraph"], ["--out", str(tmp_path / "x")],
                  ["--set", "lr=0.5"], ["--seed", "3"]):
        assert main(["run", "--resume", str(out), *extra]) == 2
        line = one_error_line(capsys)
        assert "cannot be given with it" in line and extra[0] in line
    assert main(["run", "--resume", str(out), "--rounds", "2"]) == 2
    assert "--rounds 2 is below round 3" in one_error_line(capsys)


def test_garbage_checkpoint_is_one_line_without_torch_advice(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(os.urandom(256))
    assert main(["run", "--resume", str(out)]) == 2
    line = one_error_line(capsys)
    assert "is not a pyg-fedgraph checkpoint" in line
    assert "weights_only" not in line


# ---------------------------------------------------------------- runs that learn nothing
def test_a_run_that_accepts_no_update_ends_with_an_error_and_keeps_its_results(
        tmp_path, capsys, caplog):
    out = tmp_path / "run"
    code = main(["run", *FL60, "--strategy", "fedavg", "--rounds", "8", "--out", str(out),
                 "--set", "lr=1e6"])
    assert code == 1
    err = capsys.readouterr().err
    assert "no client update was accepted in any round of fedavg" in err
    assert (out / "summary.json").is_file()
    # Not one line per client and round: one per round, and INFO after three rounds;
    # "nothing accepted" is said once.
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"
                and r.getMessage().startswith("round ")]
    assert len(warnings) == 4, warnings
    assert sum("no update was accepted" in w for w in warnings) == 1


def test_few_evaluation_samples_are_warned_about(caplog):
    from pyg_fedgraph.datasets import digits
    from pyg_fedgraph.engine.validation import check_dataset

    check_dataset(digits(num_clients=400))
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "clients have fewer than 5 test samples" in text


# ---------------------------------------------------------------- --help
def test_help_lists_the_registered_names(capsys):
    from typing import get_args

    from pyg_fedgraph.attacks import ATTACKS
    from pyg_fedgraph.datasets import DATASETS
    from pyg_fedgraph.engine.validation import REJECT_POLICIES
    from pyg_fedgraph.models import MODELS
    from pyg_fedgraph.strategies import STRATEGIES
    from pyg_fedgraph.typing import AttackName, RejectPolicy

    # The torch-free table the help reads is the registries' names.
    assert STRATEGY_NAMES == tuple(sorted(STRATEGIES))
    assert DATASET_NAMES == tuple(sorted(DATASETS))
    assert sorted(MODEL_NAMES) == sorted(MODELS)
    assert get_args(AttackName) == tuple(ATTACKS)
    assert get_args(RejectPolicy) == tuple(REJECT_POLICIES)
    for argv in (["--help"], ["run", "--help"], ["tune", "--help"]):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(argv)
        assert exc.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        for name in (*STRATEGIES, *DATASETS):
            # Long lists wrap at hyphens: compare without the breaks.
            assert name.replace("-", "- ") in text or name in text, (argv, name)


def test_help_and_version_do_not_import_torch():
    code = ("import sys\n"
            "from pyg_fedgraph.cli import main\n"
            "for argv in (['--help'], ['run', '--help'], ['--version']):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit as e:\n"
            "        assert e.code == 0, e.code\n"
            "print('TORCH' if 'torch' in sys.modules else 'LIGHT')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "LIGHT"
    assert "pyg-fedgraph" in done.stdout


@pytest.mark.parametrize("extra", [["--set", "foo=1"], ["--set", "model=nope"],
                                   ["--set", "model.nope=1"], ["--set", "data.nope=1"]])
def test_refusals_list_names_with_commas(extra, tmp_path, capsys, no_training):
    # The names a refusal offers read as the help's lists do, not as a Python list.
    assert main(["run", "--rounds", "2", "--quiet", "--out", str(tmp_path / "o"), *extra]) == 2
    line = one_error_line(capsys)
    assert "[" not in line and "'" in line and ", " in line, line
