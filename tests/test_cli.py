import argparse
import csv
import json
import re

import pytest

from pyg_fedgraph.catalog import STRATEGY_NAMES
from pyg_fedgraph.cli import build_parser, main


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_run_fl60_fedavg_writes_all_outputs(tmp_path, capsys):
    code = main(["run", "--dataset", "fl60", "--strategy", "fedavg", "--rounds", "2",
                 "--out", str(tmp_path), "--quiet", "--set", "lr=0.1"])
    assert code == 0
    for name in ("config.json", "history.csv", "clients.csv", "summary.json",
                 "learning_curve.png"):
        assert (tmp_path / name).is_file(), name
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    history = read_csv(tmp_path / "history.csv")
    assert [row["round"] for row in history] == ["1", "2"]
    assert {"train_loss", "val_accuracy", "test_accuracy"} <= set(history[0])
    clients = read_csv(tmp_path / "clients.csv")
    assert len(clients) == 60
    assert [row["client"] for row in clients] == [str(i) for i in range(60)]

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {"strategy", "dataset", "metric", "test", "test_final", "rounds",
            "seconds"} <= set(summary)
    assert summary["strategy"] == "fedavg" and summary["dataset"] == "fl60"
    assert summary["metric"] == "accuracy" and summary["rounds"] == 2
    assert 0.0 <= summary["test"] <= 1.0
    assert summary["num_clients"] == 60
    # The summary's test value is the mean test accuracy of the best validation round.
    best = summary["best_round"]
    assert summary["test"] == pytest.approx(float(history[best - 1]["test_accuracy"]))

    config = json.loads((tmp_path / "config.json").read_text())
    assert config["overrides"] == {"lr": 0.1}
    assert config["resolved"]["local"]["lr"] == 0.1
    assert config["resolved"]["rounds"] == 2
    assert config["strategy"] == "fedavg" and config["dataset"] == "fl60"
    assert "results written to" in capsys.readouterr().out


def test_unknown_strategy_exits_2(tmp_path, capsys):
    code = main(["run", "--dataset", "fl60", "--strategy", "nope", "--rounds", "1",
                 "--out", str(tmp_path), "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown strategy 'nope'" in err and "fedavg" in err
    assert not (tmp_path / "summary.json").exists()


def test_bad_set_key_exits_2(tmp_path, capsys):
    code = main(["run", "--dataset", "fl60", "--strategy", "fedavg", "--rounds", "1",
                 "--out", str(tmp_path), "--quiet", "--set", "no_such_key=3"])
    assert code == 2
    assert "--set no_such_key" in capsys.readouterr().err


def test_bad_set_value_and_syntax_exit_2(tmp_path, capsys):
    code = main(["run", "--dataset", "fl60", "--strategy", "fedavg", "--rounds", "1",
                 "--out", str(tmp_path), "--quiet", "--set", "lr=-1"])
    assert code == 2
    assert "lr must be > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse rejects a --set without '='
        main(["run", "--set", "lr"])
    assert exc.value.code == 2
    assert "--set expects key=value" in capsys.readouterr().err


def test_unknown_dataset_exits_2(tmp_path, capsys):
    code = main(["run", "--dataset", "nope", "--out", str(tmp_path), "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    # The names as the strategies' error and --help list them, not a Python list.
    assert "unknown dataset 'nope'; known: cifar10, cifar100, citeseer, cora, digits, " in err


def test_progress_bar_only_on_a_terminal_with_a_width(monkeypatch):
    import fcntl
    import os
    import struct
    import sys
    import termios

    from pyg_fedgraph.experiment.runner import is_terminal as _is_terminal

    main_fd, tty_fd = os.openpty()  # a fresh pseudo-terminal has 0 rows and 0 columns
    try:
        with os.fdopen(tty_fd, "w", closefd=False) as tty:
            monkeypatch.setattr(sys, "stderr", tty)
            assert tty.isatty() and not _is_terminal()  # tqdm would draw an empty bar
            fcntl.ioctl(tty_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            assert _is_terminal()
    finally:
        os.close(main_fd)
        os.close(tty_fd)


@pytest.mark.parametrize("columns", ["60", "80", "100"])
def test_help_never_breaks_a_hyphenated_name(columns, monkeypatch):
    # Wrapping at a hyphen split "per-" / "fedavg" and "--checkpoint-" / "every".
    monkeypatch.setenv("COLUMNS", columns)
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for text in (parser.format_help(), *(p.format_help() for p in sub.choices.values())):
        broken = [line for line in text.splitlines() if re.search(r"\w-$", line)]
        assert not broken, broken
        assert "per-fedavg" in text and "fedprox-ft" in text
        # The name lists fill each line (no short line before a name that would fit).
        block = text.split("strategies:\n")[1].splitlines()
        assert all(line.startswith("  ") for line in block)
        for line, after in zip(block, block[1:], strict=False):
            assert len(line) + 1 + len(after.split()[0]) > int(columns) - 2, (line, after)
        assert ", ".join(" ".join(block).split()).replace(",,", ",") == \
            ", ".join(STRATEGY_NAMES)
