r"""Every command of the README and every example's ``--quick`` runs, as a new
user would run them in a fresh clone (without ``../shared``), shortened to a
round or two and writing under a temporary folder.

Commands are extracted from the README's ``bash`` blocks, in order (a later
command may read what an earlier one wrote: ``--resume runs/p``, ``--config
runs/s/...``). Commands that install the package or start a server are listed
in :data:`NOT_RUN` with the reason; commands naming the user's own data files
(``/data/...``) must fail with one clear line naming the file."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pyg_fedgraph.cli import main
from pyg_fedgraph.datasets.mnist import DEBIAN_FASHION_MNIST

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
# ../shared/data next to the project root (one level further up from a git worktree).
SHARED = next((p / "shared" / "data" for p in ROOT.parents if (p / "shared" / "data").is_dir()),
              ROOT.parent / "shared" / "data")
#: Examples that read the user's files: the options naming them and a file they need
#: (skipped, with the reason, where the shared copy is absent).
EXAMPLE_DATA = {"subgraph_fl_cora": (["--root", str(SHARED / "planetoid")],
                                     SHARED / "planetoid" / "ind.cora.x"),
                "graph_classification_tu": (["--root", str(SHARED / "tu")],
                                            SHARED / "tu" / "AIDS" / "AIDS_A.txt")}
#: Folders the README gives as the reader's own that the shared data holds (a file they
#: need): where the shared copy is present, a command naming one runs on it for real.
README_DATA = {"/data/planetoid": SHARED / "planetoid" / "ind.cora.x"}
#: Commands not run here, by their start: they install (CI's job) or start a server.
NOT_RUN = {"python3.11 -m venv": "installs (what .ci/run does)",
           "tensorboard ": "starts a server", "mlflow ui": "starts a server",
           "flwr ": "starts a Flower deployment (tests/integrations)",
           "sphinx-build": "builds the docs (.ci/run)", "pip ": "installs",
           ". .venv/bin/activate": "activates the virtual environment",
           "python benchmarks/": "reproduction and benchmark runs, minutes to hours",
           "nohup ": "starts a reproduction run or worker in the background",
           "mkdir -p runs/queue": "prepares the reproduction queue",
           "cp benchmarks/": "prepares the reproduction queue"}


def readme_commands(text: str) -> list[str]:
    r"""The commands of ``text``'s ``bash`` blocks in order: continuation
    lines joined, comments dropped, each ``&&`` part its own command."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if not line or line.startswith("#"):
                continue
            commands += [part.strip() for part in line.split("&&")]
    return commands


def test_the_extraction_sees_continuations_comments_and_chains():
    text = ("x\n```bash\na --b 1 \\\n    --c 2   # why\n# only a comment\nd && e f\n```\n"
            "```python\nnot_a_command()\n```\n")
    assert readme_commands(text) == ["a --b 1      --c 2", "d", "e f"]


def _local(arg: str, tmp: Path) -> str:
    r"""``arg`` with the README's output paths moved under ``tmp``."""
    if arg.startswith("runs/"):
        return str(tmp / arg)
    if arg.startswith("sqlite:///") and not arg.startswith("sqlite:////"):
        return "sqlite:///" + str(tmp / arg[len("sqlite:///"):])
    return arg


def _shortened(argv: list[str], tmp: Path, index: int) -> list[str]:
    r"""A ``pyg-fedgraph`` command's arguments, short and under ``tmp``."""
    argv = [_local(a, tmp) for a in argv]
    if "--resume" in argv:
        return [*argv, "--quiet"]
    argv += ["--rounds", "1", "--quiet"]
    if "--out" not in argv:
        argv += ["--out", str(tmp / f"auto-{index}")]
    if argv[0] == "tune":
        argv += ["--n-trials", "1"]
    if "fashion-mnist" in argv:  # 2 local steps, a few hundred test images
        argv += ["--set", "steps=2", "--set", "data.max_val_per_client=64",
                 "--set", "data.max_test_per_client=64"]
    return argv


def _on_shared_data(argv: list[str]) -> list[str]:
    r"""``argv`` with the folders of :data:`README_DATA` replaced by the shared
    copies that are present."""
    out = []
    for arg in argv:
        for folder, needed in README_DATA.items():
            if needed.is_file():
                arg = re.sub(re.escape(folder) + r"(?=/|$)", str(needed.parent), arg)
        out.append(arg)
    return out


def test_readme_folders_of_shared_data_are_replaced_only_where_present():
    argv = ["--set", "data.root=/data/planetoid", "--h5", "/data/planetoids/x.h5",
            "--set", "data.root=/data"]
    moved = _on_shared_data(argv)
    present = README_DATA["/data/planetoid"].is_file()
    expected = (f"data.root={README_DATA['/data/planetoid'].parent}" if present
                else "data.root=/data/planetoid")
    assert moved == ["--set", expected, *argv[2:]]  # other folders untouched


@pytest.mark.slow
def test_every_readme_command_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the README's commands run from the repository's root
    commands = readme_commands(README.read_text())
    ran, failures = [], []
    for index, command in enumerate(commands):
        if any(command.startswith(start) for start in NOT_RUN):
            continue
        words = shlex.split(command)
        if words[0] == "python" and words[1] == "-m" and words[2] == "pytest":
            continue  # this very suite
        if words[0] == "python" and words[1].startswith("examples/"):
            continue  # examples run in test_every_example_runs_quick (own processes)
        assert words[0] == "pyg-fedgraph", f"README command of an unknown kind: {command}"
        argv = _on_shared_data(_shortened(words[1:], tmp_path, index))
        user_data = [a for a in argv if "/data" in a and not a.startswith(str(tmp_path))
                     and str(SHARED) not in a]
        if "fashion-mnist" in argv and not DEBIAN_FASHION_MNIST.is_dir():
            continue  # needs the dataset-fashion-mnist package (CI installs it)
        code = main(argv)
        captured = capsys.readouterr()
        if user_data:  # the reader's own files: absent here, one clear line
            err = captured.err.strip().splitlines()
            if code != 2 or len(err) != 1 or "/data" not in err[0]:
                failures.append(f"{command}: expected one line naming /data, got {code} {err}")
        elif code != 0:
            failures.append(f"{command}: exit {code}: {captured.err.strip()[-500:]}")
        ran.append(command)
    assert not failures, "\n".join(failures)
    # The quickstart's default job and the resume of a checkpointed run are among them.
    assert "pyg-fedgraph run" in ran
    assert any("--resume" in c for c in ran) and any("--config" in c for c in ran)


def test_every_example_has_quick():
    for path in EXAMPLES:
        assert '"--quick"' in path.read_text(), f"{path.name} has no --quick"


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_runs_quick(path, tmp_path):
    # Run from a copy's point of view: outputs go under the current folder's runs/.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, str(path), "--quick"]
    if path.stem in EXAMPLE_DATA:
        options, needed = EXAMPLE_DATA[path.stem]
        if not needed.is_file():
            pytest.skip(f"{needed} (the shared copy of the data {path.name} reads) not present")
        args += options
    if "--out" in path.read_text():
        args += ["--out", str(tmp_path / "out")]
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    # Nothing written into the current folder but runs/ (and only when no --out is taken).
    assert {p.name for p in tmp_path.iterdir()} <= {"out", "runs"}


@pytest.mark.slow
def test_the_traffic_example_names_a_missing_speed_file_in_one_line(tmp_path):
    missing = tmp_path / "metr-la.h5"
    # -W: torch's own FutureWarning at import (torch.jit.script in PyG) is not ours.
    done = subprocess.run([sys.executable, "-W", "ignore::FutureWarning",
                           str(ROOT / "examples" / "metr_la_traffic.py"),
                           "--h5", str(missing), "--quick"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode != 0
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and str(missing) in err[0], done.stderr[-1000:]
    assert "github.com/liyaguang/DCRNN" in err[0]  # where the file comes from
