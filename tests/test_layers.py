"""The package's import graph: no module imports one of a higher layer, and no
import cycle (the layers of ../shared/STYLE.md: operators, then strategies, then
orchestration; data and models beside them, below what uses them)."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "pyg_fedgraph"

#: Top-level parts of the package, lowest layer first. A module may import its own
#: layer and those below it. typing, hparams and catalog are declarations free of torch.
LAYERS: list[set[str]] = [
    {"typing", "hparams", "catalog", "utils"},
    {"nn"},                                     # operators: tensors in, tensors out
    {"data", "transforms"},                     # federation graph, layouts, client data
    {"models"},                                 # reference client models
    {"train"},                                  # client-side work, batched over clients
    {"datasets", "attacks"},                    # data sets (and their poisoning)
    {"strategies"},                             # one server algorithm each
    {"engine"},                                 # the server's rounds
    {"viz", "simulation", "tracking", "integrations"},  # orchestration: in process, Flower
    {"experiment"},                             # settings, runner, comparisons, records
    {"tune"},                                   # Optuna studies of experiments
    {"cli"},                                    # the command line: parsing only
]
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["pyg_fedgraph", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> nx.DiGraph:
    r"""Module -> module it imports (any import: top level, inside functions, or
    for type checking only), edges within the package."""
    mods = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module \
                    and node.module.startswith("pyg_fedgraph"):
                targets.append(node.module)
                targets += [f"{node.module}.{a.name}" for a in node.names
                            if f"{node.module}.{a.name}" in mods]
            elif isinstance(node, ast.Import):
                targets += [a.name for a in node.names if a.name.startswith("pyg_fedgraph")]
            graph.add_edges_from((name, t) for t in targets if t in mods and t != name)
    return graph


def part(module: str) -> str:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "__init__"


def test_every_part_of_the_package_has_a_layer():
    parts = {part(m) for m in modules()} - {"__init__"}
    assert parts <= set(RANK), f"no layer for {sorted(parts - set(RANK))}"


def test_no_module_imports_a_higher_layer():
    upward = sorted((a, b) for a, b in import_graph().edges
                    if part(a) != "__init__" and part(b) != "__init__"
                    and RANK[part(b)] > RANK[part(a)])
    assert not upward, f"imports into a higher layer: {upward}"


def test_no_import_cycle():
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_the_analysis_sees_an_upward_import(tmp_path, monkeypatch):
    # The test itself: a lower module importing a higher one is found.
    fake = tmp_path / "pyg_fedgraph"
    for sub in ("nn", "cli"):
        (fake / sub).mkdir(parents=True)
        (fake / sub / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "nn" / "bad.py").write_text("def f():\n    from pyg_fedgraph.cli import x\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    edges = set(import_graph().edges)
    assert ("pyg_fedgraph.nn.bad", "pyg_fedgraph.cli") in edges
