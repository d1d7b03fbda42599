r"""The names registered with ``@register_strategy`` and ``@register_dataset``,
and the choices of a ``Literal`` alias, read from the package's source without
importing it, so that ``--help`` lists them without loading torch (the
registries and aliases are the source of truth: a test checks that both
agree)."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

__all__ = ["strategy_names", "dataset_names", "literal_choices"]

_PACKAGE = Path(__file__).resolve().parent.parent  # pyg_fedgraph/


def _registered(decorator: str, folder: Path) -> list[str]:
    names = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                continue
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Name)
                        and dec.func.id == decorator and dec.args
                        and isinstance(dec.args[0], ast.Constant)
                        and isinstance(dec.args[0].value, str)):
                    names.append(dec.args[0].value)
    return names


@cache
def strategy_names() -> tuple[str, ...]:
    r"""The CLI names of the strategies, sorted."""
    return tuple(sorted(_registered("register_strategy", _PACKAGE / "strategies")))


@cache
def dataset_names() -> tuple[str, ...]:
    r"""The dataset names, normalized as :func:`~pyg_fedgraph.datasets.load_dataset` does."""
    return tuple(sorted(n.strip().lower().replace("_", "-")
                        for n in _registered("register_dataset", _PACKAGE / "datasets")))


@cache
def literal_choices(module: str, alias: str) -> tuple[str, ...]:
    r"""The strings of ``alias = Literal["a", "b", ...]`` in the module
    ``module`` (a path relative to the package, e.g. ``"attacks.py"``)."""
    path = _PACKAGE / module
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in tree.body:
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) else None)
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(target, ast.Name) and target.id == alias and isinstance(value, ast.Subscript):
            sl = value.slice
            items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            return tuple(e.value for e in items
                         if isinstance(e, ast.Constant) and isinstance(e.value, str))
    raise LookupError(f"no Literal alias {alias!r} in {path}")
