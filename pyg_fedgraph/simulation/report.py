"""Write a finished run to a directory (called by the CLI, never implicitly)."""
from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.engine.history import History

__all__ = ["write_run", "write_collaboration", "top_k_weights", "write_csv", "format_table",
           "write_models", "read_models", "RUN_FILES", "MODELS_NAME"]

#: File of :func:`write_models` in a run's folder.
MODELS_NAME = "models.pt"

#: The files :func:`write_run` may write into a run's folder (glob patterns),
#: so that a caller replacing a run removes exactly these.
RUN_FILES = ("config.json", "history.csv", "clients.csv", "summary.json", "learning_curve.png",
             "collaboration.npz", "collaboration_topk.csv", "collaboration.csv",
             "collaboration_matrix.png", "collaboration_graph.png", "config.yaml", "models.pt")


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


#: Largest federation whose full matrix is also written as ``collaboration.csv``.
FULL_CSV_MAX_CLIENTS = 200
#: Weights per client in ``collaboration_topk.csv``.
TOP_K = 10


def top_k_weights(weight: Tensor, k: int = TOP_K) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""The ``k`` largest weights of each row of a collaboration matrix
    :math:`(N, N)` (row :math:`i` = weights client :math:`i` gives, the
    client's own weight included), largest first, zero weights left out.

    Returns:
        ``(client, rank, neighbour, weight)`` on the CPU, each :math:`(E)` with
        :math:`E \le N k`; ``rank`` counts from 1.
    """
    weight = weight.detach().cpu()
    k = min(k, weight.size(1))
    vals, idx = weight.topk(k, dim=1)
    n = weight.size(0)
    client = torch.arange(n).unsqueeze(1).expand(n, k)
    rank = torch.arange(1, k + 1).unsqueeze(0).expand(n, k)
    keep = vals > 0
    return client[keep], rank[keep], idx[keep], vals[keep]


def write_collaboration(out: Path, weight: Tensor, top_k: int = TOP_K,
                        full_csv_max_clients: int = FULL_CSV_MAX_CLIENTS) -> list[str]:
    r"""Writes a collaboration matrix :math:`W` :math:`(N, N)` (row :math:`i` =
    weights client :math:`i` gives) into ``out``:

    * ``collaboration.npz``: ``weight`` as float32, compressed; read it back
      with ``numpy.load(path, allow_pickle=False)["weight"]``;
    * ``collaboration_topk.csv``: ``client, rank, neighbour, weight``, the
      ``top_k`` largest weights of each row (see :func:`top_k_weights`),
      :math:`N k` rows at most whatever :math:`N`;
    * ``collaboration.csv``: the full matrix (header ``c0, c1, ...``, one line
      per row), only up to ``full_csv_max_clients`` clients, so small runs open
      in a spreadsheet and large ones do not spend minutes writing text.

    Returns the names of the files written."""
    import numpy as np

    w = weight.detach().cpu()
    n = w.size(0)
    names = ["collaboration.npz", "collaboration_topk.csv"]
    np.savez_compressed(out / names[0], weight=w.float().numpy())
    client, rank, neighbour, value = top_k_weights(w, top_k)
    # Shortest text that reads back to the same number in the matrix's dtype.
    table = np.stack([client.numpy().astype(str), rank.numpy().astype(str),
                      neighbour.numpy().astype(str), value.numpy().astype(str)], axis=1)
    np.savetxt(out / names[1], table, fmt="%s", delimiter=",",
               header="client,rank,neighbour,weight", comments="")
    if n <= full_csv_max_clients:
        names.append("collaboration.csv")
        np.savetxt(out / names[2], w.numpy().astype(str), fmt="%s", delimiter=",",
                   header=",".join(f"c{j}" for j in range(n)), comments="")
    return names


def write_run(out: Path, history: History, config: Mapping[str, Any],
              summary: Mapping[str, Any], plots: bool = True,
              collaboration: Tensor | None = None, groups: Tensor | None = None,
              prior_edge_index: Tensor | None = None,
              collaboration_round: int | None = None) -> None:
    r"""Writes ``config.json``, ``history.csv``, ``clients.csv``,
    ``summary.json`` and ``learning_curve.png`` into ``out``; with a
    ``collaboration`` matrix :math:`(N, N)` (row :math:`i` = weights client
    :math:`i` gives) also the files of :func:`write_collaboration`
    (``collaboration.npz``, ``collaboration_topk.csv``, and
    ``collaboration.csv`` for small :math:`N`), ``collaboration_matrix.png``
    and ``collaboration_graph.png`` (see :mod:`pyg_fedgraph.viz`: clients
    ordered by ``groups`` or by a clustering of the matrix, aggregated into
    blocks for large :math:`N`). ``collaboration_round`` (default:
    ``summary["rounds"]``) is the round the pictures say the matrix is from;
    with ``summary["synthetic_data"]`` true, their titles say "(synthetic
    data)"."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(dict(config), indent=2, default=str))
    write_csv(out / "history.csv", history.round_rows())
    write_csv(out / "clients.csv", history.client_rows())
    (out / "summary.json").write_text(
        json.dumps({k: _clean(v) for k, v in summary.items()}, indent=2, default=str))
    # Pictures of synthetic data say so in their titles (the summary of `run` tells).
    synthetic = " (synthetic data)" if summary.get("synthetic_data") else ""
    if plots and len(history):
        import matplotlib.pyplot as plt

        from pyg_fedgraph.viz import plot_learning_curves
        fig = plot_learning_curves({summary.get("strategy", "run"): history},
                                   title=f"{summary.get('strategy')} on {summary.get('dataset')}"
                                   + synthetic)
        fig.savefig(out / "learning_curve.png", dpi=120)
        plt.close(fig)
    if collaboration is not None:
        w = collaboration.detach().cpu()
        write_collaboration(out, w)
        if plots:
            import matplotlib.pyplot as plt

            from pyg_fedgraph.viz import (
                client_order,
                plot_collaboration_matrix,
                plot_collaboration_network,
            )
            name = summary.get("strategy", "run")
            after = collaboration_round if collaboration_round is not None else summary.get(
                "rounds")
            order = client_order(w, groups)  # one clustering for both pictures
            fig = plot_collaboration_matrix(w, groups,
                                            title=f"{name}: collaboration matrix{synthetic}",
                                            after_round=after, order=order)
            fig.savefig(out / "collaboration_matrix.png", dpi=120)
            plt.close(fig)
            fig = plot_collaboration_network(w, prior_edge_index, groups,
                                             title=f"{name}: collaboration graph{synthetic}",
                                             after_round=after, order=order)
            fig.savefig(out / "collaboration_graph.png", dpi=120)
            plt.close(fig)


def format_table(rows: Sequence[Mapping[str, Any]], columns: list[str]) -> str:
    r"""A markdown table of ``rows`` restricted to ``columns``."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.4f}"
        return str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_models(out: Path, layout: ParamLayout, params: Tensor, buffers: Tensor,
                 model: str = "") -> Path:
    r"""Saves every client's model into ``out / models.pt``: flat parameters
    :math:`(N, D)` and buffers :math:`(N, B)` (float32, on the CPU) with the
    layout needed to rebuild them (names and shapes, in order) and the model's
    description. Tensors, lists and strings only, so :func:`read_models`
    loads it with ``torch.load(weights_only=True)``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / MODELS_NAME
    torch.save({"params": params.detach().cpu().float(),
                "buffers": buffers.detach().cpu().float(),
                "param_names": [e.name for e in layout.params],
                "param_shapes": [list(e.shape) for e in layout.params],
                "buffer_names": [e.name for e in layout.buffers],
                "buffer_shapes": [list(e.shape) for e in layout.buffers],
                "model": model}, path)
    return path


def read_models(path: Path | str) -> dict[str, Any]:
    r"""The models :func:`write_models` saved, with ``state_dicts``: one
    ``{name: tensor}`` per client, ready for ``model.load_state_dict``.
    Loaded with ``weights_only=True``: the file never runs code."""
    data = torch.load(Path(path), map_location="cpu", weights_only=True)
    states = []
    for i in range(data["params"].size(0)):
        state: dict[str, Tensor] = {}
        for key, names, shapes in (("params", data["param_names"], data["param_shapes"]),
                                   ("buffers", data["buffer_names"], data["buffer_shapes"])):
            offset = 0
            for name, shape in zip(names, shapes, strict=True):
                size = int(torch.Size(shape).numel())
                state[name] = data[key][i, offset:offset + size].view(shape).clone()
                offset += size
        states.append(state)
    return {**data, "state_dicts": states}
