"""Pictures of runs: learning curves and collaboration graphs (matplotlib).

Functions return a :class:`matplotlib.figure.Figure`; saving is the caller's choice.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from pyg_fedgraph.engine.history import History

__all__ = ["plot_learning_curves", "plot_collaboration_matrix", "plot_collaboration_network",
           "plot_layer_graphs"]


def _plt():
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    return plt


def plot_learning_curves(histories: Mapping[str, History], title: str | None = None):
    r"""Mean validation and test metric per round, one line per run."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    metric = None
    for name, h in histories.items():
        metric = h.metric
        for ax, split in zip(axes, ("val", "test"), strict=True):
            ax.plot(h.rounds, h.mean(split), label=name, marker="." if len(h) < 40 else None)
    for ax, split in zip(axes, ("validation", "test"), strict=True):
        ax.set_xlabel("round")
        ax.set_title(f"{split} {metric} (mean over clients)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric or "")
    axes[1].legend(loc="best", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_collaboration_matrix(weight: Tensor, groups: Tensor | None = None,
                              title: str = "collaboration graph"):
    r"""Heatmap of a collaboration matrix :math:`(N, N)` (row :math:`i` =
    weights client :math:`i` gives), clients ordered by ``groups`` if given."""
    plt = _plt()
    w = weight.detach().cpu().float()
    order = torch.arange(w.size(0)) if groups is None else torch.argsort(groups, stable=True)
    w = w[order][:, order]
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    im = ax.imshow(w.numpy(), cmap="viridis", vmin=0.0)
    fig.colorbar(im, ax=ax, fraction=0.046)
    ticks = order.tolist() if w.size(0) <= 30 else None
    if ticks is not None:
        ax.set_xticks(range(len(ticks)), ticks, fontsize=6)
        ax.set_yticks(range(len(ticks)), ticks, fontsize=6)
    ax.set_xlabel("client j (gives)")
    ax.set_ylabel("client i (receives)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_collaboration_network(weight: Tensor, prior_edge_index: Tensor | None = None,
                               groups: Tensor | None = None, top_k: int = 3,
                               title: str = "collaboration graph", seed: int = 0):
    r"""The collaboration matrix as a network: each client's ``top_k`` largest
    off-diagonal weights above the uniform share :math:`1/N` as edges, width
    proportional to the weight, nodes coloured by ``groups``; the prior client
    graph (if any) in grey beneath. Nodes are placed by a spring layout of the
    weighted collaboration graph, so clients that collaborate sit together."""
    import networkx as nx
    plt = _plt()
    w = weight.detach().cpu().float().clone()
    n = w.size(0)
    w.fill_diagonal_(0.0)
    g = nx.Graph()
    g.add_nodes_from(range(n))
    k = min(top_k, max(n - 1, 0))
    if k:
        vals, idx = w.topk(k, dim=1)
        for i in range(n):
            for v, j in zip(vals[i].tolist(), idx[i].tolist(), strict=True):
                if v > 1.0 / n:
                    old = g.get_edge_data(i, j, {"weight": 0.0})["weight"]
                    g.add_edge(i, j, weight=max(old, v))
    prior = nx.Graph()
    prior.add_nodes_from(range(n))
    if prior_edge_index is not None:
        prior.add_edges_from(tuple(e) for e in prior_edge_index.t().tolist() if e[0] != e[1])
    layout_graph = nx.Graph(g)
    layout_graph.add_edges_from((u, v, {"weight": 0.1 / n}) for u, v in prior.edges()
                                if not g.has_edge(u, v))
    pos = nx.spring_layout(layout_graph, seed=seed, weight="weight")
    fig, ax = plt.subplots(figsize=(5.5, 5))
    if prior.number_of_edges():
        nx.draw_networkx_edges(prior, pos, ax=ax, edge_color="lightgrey", width=0.8)
    weights = [d["weight"] for _, _, d in g.edges(data=True)]
    top = max(weights) if weights else 1.0
    nx.draw_networkx_edges(g, pos, ax=ax, width=[0.5 + 4.0 * x / top for x in weights],
                           edge_color="tab:blue", alpha=0.7)
    color = ({"node_color": groups.tolist(), "cmap": "tab10"} if groups is not None
             else {"node_color": "tab:orange"})
    nx.draw_networkx_nodes(g, pos, ax=ax, node_size=120 if n <= 60 else 40, **color)
    if n <= 30:
        nx.draw_networkx_labels(g, pos, ax=ax, font_size=7)
    ax.set_title(title + (" (grey: prior graph)" if prior.number_of_edges() else ""))
    ax.axis("off")
    fig.tight_layout()
    return fig


def plot_layer_graphs(alphas: Tensor, layer_names: list | None = None,
                      groups: Tensor | None = None,
                      title: str = "layer-wise collaboration graphs"):
    r"""FedAGHN's layer-wise collaboration weights :math:`\alpha^{(l)}`
    :math:`(L, N, N)` as :math:`L` heatmaps side by side (one colour scale
    shared by all layers), clients ordered by ``groups`` if given, so that
    layers which collaborate within groups show diagonal blocks.

    Args:
        alphas (torch.Tensor): weights :math:`(L, N, N)`; row :math:`i` of
            layer :math:`l` holds the weights client :math:`i` gives.
        layer_names (list of str, optional): one title per layer
            (default: ``"layer l"``)
        groups (torch.Tensor, optional): group of each client :math:`(N)`.
        title (str, optional): figure title.
    """
    plt = _plt()
    a = alphas.detach().cpu().float()
    if a.dim() == 2:
        a = a.unsqueeze(0)
    if a.dim() != 3 or a.size(1) != a.size(2):
        raise ValueError(f"alphas must be (L, N, N), got {tuple(alphas.shape)}")
    num_layers, n = a.size(0), a.size(1)
    names = list(layer_names) if layer_names is not None else [f"layer {layer}"
                                                               for layer in range(num_layers)]
    if len(names) != num_layers:
        raise ValueError(f"{len(names)} layer names given for {num_layers} layers")
    if groups is not None and groups.numel() != n:
        raise ValueError(f"groups has {groups.numel()} entries but alphas has {n} clients")
    order = torch.arange(n) if groups is None else torch.argsort(groups.cpu(), stable=True)
    a = a[:, order][:, :, order]
    vmax = float(a.max()) if a.numel() else 1.0
    fig, axes = plt.subplots(1, num_layers, figsize=(2.8 * num_layers + 0.8, 3.2),
                             squeeze=False)
    im = None
    for layer, ax in enumerate(axes[0]):
        im = ax.imshow(a[layer].numpy(), cmap="viridis", vmin=0.0, vmax=vmax)
        ax.set_title(str(names[layer]), fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0][0].set_ylabel("client i (receives)")
    if im is not None:
        fig.colorbar(im, ax=list(axes[0]), fraction=0.02)
    fig.suptitle(title)
    return fig
