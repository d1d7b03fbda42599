r"""Generated pages of the reference, written before Sphinx reads the sources:

* ``_generated/strategy_table.rst``: every registered strategy (its CLI
  name, class, the first line of its docstring and its declared
  hyper-parameters with their defaults), read from
  :data:`pyg_fedgraph.strategies.STRATEGIES`, so that a new strategy appears
  without editing the docs.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

GENERATED = Path(__file__).resolve().parent / "_generated"


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    paragraph = doc.split("\n\n")[0]
    return " ".join(paragraph.split())


def _default(value: Any) -> str:
    return "required" if value is inspect.Parameter.empty else f"``{value!r}``"


def strategy_table() -> str:
    from pyg_fedgraph.strategies import STRATEGIES

    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 12 18 40 30", "",
             "   * - CLI name", "     - class", "     - what it is",
             "     - hyper-parameters (default)"]
    for name in sorted(STRATEGIES):
        cls = STRATEGIES[name]
        params = ", ".join(f"``{p.name}`` ({_default(p.default)})"
                           for p in cls.hparam_schema().values()) or "none"
        lines += [f"   * - ``{name}``",
                  f"     - :class:`~pyg_fedgraph.strategies.{cls.__name__}`",
                  f"     - {_first_line(cls)}",
                  f"     - {params}"]
    return "\n".join(lines) + "\n"


def _write_if_changed(path: Path, text: str) -> None:
    # An unchanged file keeps its time stamp, so incremental builds stay incremental.
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _generate(app: Any) -> None:
    _write_if_changed(GENERATED / "strategy_table.rst", strategy_table())


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
