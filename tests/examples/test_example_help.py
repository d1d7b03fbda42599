r"""Every example's ``--help`` answers before torch is imported, and describes
the example with its docstring's whole first paragraph."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
#: Modules that take seconds to import; ``--help`` must need none of them.
HEAVY = ("torch", "torch_geometric", "optuna")


def imported_modules(importtime: str) -> set[str]:
    r"""The modules that ``python -X importtime`` reports (its lines are
    ``import time: self [us] | cumulative | name``, the name indented by depth)."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)\s*$", importtime, re.M)
    return set(names)


def run_help(path: Path) -> subprocess.CompletedProcess:
    # COLUMNS: argparse wraps the description to the terminal; a wide one keeps it whole.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "10000",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-X", "importtime", str(path), "--help"],
                          capture_output=True, text=True, timeout=120, env=env)


def test_the_import_report_is_read():
    # The check below would pass vacuously if the report's format were not understood.
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import json"],
                          capture_output=True, text=True, timeout=60)
    assert "json" in imported_modules(done.stderr)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_help_answers_without_torch(path):
    done = run_help(path)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = imported_modules(done.stderr)
    assert "argparse" in modules
    heavy = sorted(m for m in HEAVY if m in modules)
    assert not heavy, f"{path.name} --help imported {heavy}"
    # The description: the docstring's first paragraph, whole (not its first line).
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc
    first = " ".join(doc.split("\n\n")[0].split())
    assert first in " ".join(done.stdout.split())
    assert done.stdout.startswith("usage:")
