"""Write a finished run to a directory (called by the CLI, never implicitly)."""
from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from pyg_fedgraph.engine.history import History

__all__ = ["write_run", "write_csv", "format_table"]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def write_run(out: Path, history: History, config: Mapping[str, Any],
              summary: Mapping[str, Any], plots: bool = True,
              collaboration: Tensor | None = None, groups: Tensor | None = None,
              prior_edge_index: Tensor | None = None) -> None:
    r"""Writes ``config.json``, ``history.csv``, ``clients.csv``,
    ``summary.json`` and ``learning_curve.png`` into ``out``; with a
    ``collaboration`` matrix :math:`(N, N)` also ``collaboration.csv``,
    ``collaboration_matrix.png`` (clients ordered by ``groups``) and
    ``collaboration_graph.png``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(dict(config), indent=2, default=str))
    write_csv(out / "history.csv", history.round_rows())
    write_csv(out / "clients.csv", history.client_rows())
    (out / "summary.json").write_text(
        json.dumps({k: _clean(v) for k, v in summary.items()}, indent=2, default=str))
    if plots and len(history):
        import matplotlib.pyplot as plt

        from pyg_fedgraph.viz import plot_learning_curves
        fig = plot_learning_curves({summary.get("strategy", "run"): history},
                                   title=f"{summary.get('strategy')} on {summary.get('dataset')}")
        fig.savefig(out / "learning_curve.png", dpi=120)
        plt.close(fig)
    if collaboration is not None:
        w = collaboration.detach().cpu()
        write_csv(out / "collaboration.csv",
                  [{f"c{j}": float(w[i, j]) for j in range(w.size(1))} for i in range(w.size(0))])
        if plots:
            import matplotlib.pyplot as plt

            from pyg_fedgraph.viz import plot_collaboration_matrix, plot_collaboration_network
            name = summary.get("strategy", "run")
            fig = plot_collaboration_matrix(w, groups, title=f"{name}: collaboration matrix")
            fig.savefig(out / "collaboration_matrix.png", dpi=120)
            plt.close(fig)
            fig = plot_collaboration_network(w, prior_edge_index, groups,
                                             title=f"{name}: collaboration graph")
            fig.savefig(out / "collaboration_graph.png", dpi=120)
            plt.close(fig)


def format_table(rows: list[Mapping[str, Any]], columns: list[str]) -> str:
    r"""A markdown table of ``rows`` restricted to ``columns``."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.4f}"
        return str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
