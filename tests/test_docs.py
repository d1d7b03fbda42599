r"""The pieces of the API reference that are code: the generated strategy
table and the check of the built inventory (the build itself runs in CI:
``sphinx-build -W`` then ``docs/check_reference.py``)."""
import importlib
import importlib.util
import tomllib
import zlib
from pathlib import Path

import pytest

from pyg_fedgraph.nn import __all__ as nn_names
from pyg_fedgraph.strategies import STRATEGIES

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_strategy_table_lists_every_registered_strategy():
    table = _load("_ext").strategy_table()
    rows = [line for line in table.splitlines() if line.startswith("   * - ``")]
    assert [row.split("``")[1] for row in rows] == sorted(STRATEGIES)
    assert ":class:`~pyg_fedgraph.strategies.PFedGraph`" in table
    # Declared hyper-parameters with their defaults; a row that declares none says so.
    assert "``lam`` (``0.01``)" in table
    local = table.split("   * - ``local``")[1].split("   * - ``")[0]
    assert local.rstrip().endswith("     - none")
    fedavg = table.split("   * - ``fedavg``")[1].split("   * - ``")[0]
    assert fedavg.rstrip().endswith("     - ``weighting`` (``'samples'``)")


def _inventory(path, names):
    lines = "".join(f"{n} py:class 1 api.html#$ -\n" for n in names)
    path.mkdir(parents=True, exist_ok=True)
    (path / "objects.inv").write_bytes(
        b"# Sphinx inventory version 2\n# Project: p\n# Version: 0\n"
        b"# The remainder of this file is compressed using zlib.\n"
        + zlib.compress(lines.encode()))


def test_check_reference_reports_names_missing_from_the_inventory(tmp_path, capsys):
    pytest.importorskip("sphinx.util")
    pytest.importorskip("flwr")  # the Flower adapter is one of the checked packages
    check = _load("check_reference")
    documented = [f"pyg_fedgraph.nn.{n}" for n in nn_names if n != "ClientGAT"]
    _inventory(tmp_path / "html", documented)
    assert check.missing(tmp_path / "html", ("pyg_fedgraph.nn",)) == ["pyg_fedgraph.nn.ClientGAT"]
    assert check.main([str(tmp_path / "html")]) == 1
    assert "pyg_fedgraph.nn.ClientGAT" in capsys.readouterr().err

    others = [f"{package}.{n}" for package in check.PACKAGES if package != "pyg_fedgraph.nn"
              for n in importlib.import_module(package).__all__]
    assert "pyg_fedgraph.integrations.flower.GraphStrategy" in others
    _inventory(tmp_path / "full", [*documented, "pyg_fedgraph.nn.ClientGAT", *others])
    assert check.main([str(tmp_path / "full")]) == 0
    assert check.main([str(tmp_path / "nothing")]) == 1
    assert "build the docs first" in capsys.readouterr().err


def _requirements(extra: str) -> dict[str, str]:
    pyproject = tomllib.loads((DOCS.parent / "pyproject.toml").read_text())
    out = {}
    for req in pyproject["project"]["optional-dependencies"][extra]:
        name = req.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
        out[name] = req[req.index(">") if ">" in req else len(req):]
    return out


def test_the_docs_extra_brings_flwr_at_the_flower_extra_version():
    # autodoc imports pyg_fedgraph.integrations.flower: with the docs extra alone (the README's
    # docs command) flwr must be there, at the version the adapter is written for.
    assert _requirements("docs")["flwr"] == _requirements("flower")["flwr"]
