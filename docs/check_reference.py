r"""Checks a built API reference: every public name of the packages below
(their ``__all__``) must have an entry in the build's ``objects.inv``, so
that a name that autodoc skipped or failed to import fails CI.

Usage: ``python docs/check_reference.py [docs/_build/html]``; exit code 1
lists the missing names.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

#: Packages whose every public name must be documented. The Flower adapter is
#: among them because autodoc once failed to import it (without ``flwr``) and
#: its page documented nothing.
PACKAGES = ("pyg_fedgraph.nn", "pyg_fedgraph.strategies", "pyg_fedgraph.integrations.flower")


def documented(html: Path) -> set[str]:
    r"""The Python object names in ``html/objects.inv``."""
    from sphinx.util.inventory import InventoryFile

    with open(html / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    return {name for kind, entries in inventory.items() if kind.startswith("py:")
            for name in entries}


def missing(html: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    r"""``package.name`` for every name of each package's ``__all__`` that
    the reference lacks."""
    names = documented(html)
    out = []
    for package in packages:
        for name in importlib.import_module(package).__all__:
            if f"{package}.{name}" not in names:
                out.append(f"{package}.{name}")
    return out


def main(argv: list[str]) -> int:
    html = Path(argv[0] if argv else Path(__file__).parent / "_build" / "html")
    if not (html / "objects.inv").is_file():
        print(f"check_reference: no objects.inv in {html}; build the docs first "
              f"(sphinx-build -W -b html docs {html})", file=sys.stderr)
        return 1
    lost = missing(html)
    if lost:
        print(f"check_reference: {len(lost)} public name(s) missing from the reference: "
              f"{', '.join(lost)}", file=sys.stderr)
        return 1
    total = sum(len(importlib.import_module(p).__all__) for p in PACKAGES)
    print(f"check_reference: all {total} public names of {', '.join(PACKAGES)} documented")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main(sys.argv[1:]))
