"""The benchmarks wing's floor plan (issue 38): scripts share code through the package,
never through each other, and never change the library's globals; the results folder stays
a few files. The checker is tested on made-up sources first, so that it can fail."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
#: Scripts allowed to write ``sys.path``, with the reason.
SYS_PATH_ALLOWED = {
    "perf/operator_speed.py": "imports a renamed copy of an older package tree (before/after "
                              "timings of two library versions), not a script",
}
#: Methods that change a container in place.
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert",
            "remove", "__setitem__", "__delitem__", "add", "discard"}


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def violations(source: str, scripts: set[str]) -> list[str]:
    r"""What in ``source`` (a benchmark script) breaks the floor plan: an
    import of another benchmark script (by module name in ``scripts``),
    loading a file as a module, a write to ``sys.path``, or a write to a
    name imported from ``pyg_fedgraph`` (item assignment, attribute
    assignment, an in-place method, a ``register*`` call or decorator)."""
    tree = ast.parse(source)
    found: list[str] = []
    library: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in scripts:
                    found.append(f"line {node.lineno}: imports the script {alias.name}")
                if top == "pyg_fedgraph":
                    library.add(alias.asname or top)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            if top in scripts:
                found.append(f"line {node.lineno}: imports from the script {node.module}")
            if top == "pyg_fedgraph":
                library.update(a.asname or a.name for a in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("spec_from_file_location", "module_from_spec", "run_path"):
                found.append(f"line {node.lineno}: loads a file as a module ({name})")
            if (isinstance(func, ast.Attribute) and func.attr in MUTATORS
                    and _root(func.value) in library):
                found.append(f"line {node.lineno}: {_root(func.value)}.{func.attr}(...) changes "
                             "a library global")
            if (isinstance(func, ast.Attribute) and func.attr in MUTATORS
                    and isinstance(func.value, ast.Attribute)
                    and func.value.attr in ("path", "modules") and _root(func.value) == "sys"):
                found.append(f"line {node.lineno}: writes sys.{func.value.attr}")
            if name.startswith("register") and (_root(func) in library or name in library):
                found.append(f"line {node.lineno}: {name}(...) registers into the library")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete))
                       else [node.target])
            for target in targets:
                if isinstance(target, (ast.Subscript, ast.Attribute)) \
                        and _root(target) in library:
                    found.append(f"line {node.lineno}: writes {_root(target)}'s contents, a "
                                 "library global")
                elif isinstance(target, (ast.Subscript, ast.Attribute)) \
                        and _root(target) == "sys":
                    found.append(f"line {node.lineno}: writes {ast.unparse(target)}")
    return found


def _scripts() -> list[Path]:
    return sorted(p for p in BENCH.rglob("*.py") if ".venv" not in p.parts)


def test_the_checker_finds_each_kind_of_breach():
    bad = '''
import sys
import claims
from devices import train_once
import importlib.util
from pyg_fedgraph.experiment import DATASET_DEFAULTS
from pyg_fedgraph.datasets.registry import register_dataset
import pyg_fedgraph.strategies as strategies
sys.path.insert(0, "x")
sys.modules["devices"] = claims
spec = importlib.util.spec_from_file_location("x", "x.py")
DATASET_DEFAULTS["fl60-x"] = {}
DATASET_DEFAULTS.update(a=1)
strategies.STRATEGIES["x"] = None
register_dataset("x")(lambda: None)
@register_dataset("y")
def y(): ...
'''
    found = "\n".join(violations(bad, {"claims", "devices"}))
    for what in ("imports the script claims", "imports from the script devices",
                 "loads a file as a module", "writes sys.path", "writes sys.modules['devices']",
                 "writes DATASET_DEFAULTS's contents", "DATASET_DEFAULTS.update(...)",
                 "writes strategies's contents", "register_dataset(...) registers"):
        assert what in found, what
    fine = '''
import json
from pyg_fedgraph.experiment import DATASET_DEFAULTS, RecordCache
defaults = dict(DATASET_DEFAULTS["fl60"])
defaults["rounds"] = 3
RUNS = RecordCache("a", "b")
RUNS.used.clear()
trainer.parallel = False
'''
    assert violations(fine, {"claims"}) == []


@pytest.mark.parametrize("path", _scripts(), ids=lambda p: str(p.relative_to(BENCH)))
def test_no_benchmark_script_imports_another_or_changes_library_globals(path):
    scripts = {p.stem for p in _scripts()}
    found = violations(path.read_text(), scripts - {"__init__"})
    rel = str(path.relative_to(BENCH))
    if rel in SYS_PATH_ALLOWED:
        found = [f for f in found if "sys.path" not in f]
    assert not found, f"{rel}: " + "; ".join(found)


def test_the_results_folder_holds_a_few_small_files():
    try:
        out = subprocess.run(["git", "ls-files", "benchmarks/results"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    if not out:
        pytest.skip("not a git checkout of the repository: no tracked results")
    assert len(out) < 60, f"{len(out)} tracked files under benchmarks/results"
    # Each under 2 MB (the record tables keep their graphs packed; a table that grows
    # past it wants a narrower table rule in pyg_fedgraph.experiment.records).
    large = [f"{name} ({(ROOT / name).stat().st_size:,} bytes)" for name in out
             if (ROOT / name).is_file() and (ROOT / name).stat().st_size >= 2_000_000]
    assert not large, "tracked results files of 2 MB or more: " + ", ".join(large)
