import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pyg_fedgraph
from pyg_fedgraph.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_pyprojects():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert pyg_fedgraph.__version__ == version("pyg-fedgraph") == declared
    from pyg_fedgraph import __version__
    assert __version__ == declared


def test_cli_prints_the_package_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exit:
        assert exit.code == 0
    assert capsys.readouterr().out.split() == ["pyg-fedgraph", pyg_fedgraph.__version__]


def test_version_does_not_import_torch():
    code = ("import sys, pyg_fedgraph\n"
            "v = pyg_fedgraph.__version__\n"
            "print(v, 'TORCH' if 'torch' in sys.modules else 'LIGHT')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [pyg_fedgraph.__version__, "LIGHT"]
