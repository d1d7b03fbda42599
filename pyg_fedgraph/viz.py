r"""Pictures of runs: learning curves and collaboration graphs (matplotlib).

Functions return a :class:`matplotlib.figure.Figure`; saving is the caller's choice.

Every collaboration matrix :math:`W` :math:`(N, N)` reads the same way: row
:math:`i` = weights client :math:`i` gives, that is client :math:`i` aggregates
:math:`\sum_j W_{ij} \theta_j`; column :math:`j` is the client whose model is used.

Large federations stay readable and quick: above ``max_clients`` clients the
matrix is shown as block means and the network as one node per block, where the
blocks are the known groups or, without groups, clusters of the matrix itself
(:func:`client_order`). Nothing loops over clients or cells in Python.
"""
from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_fedgraph.engine.history import History

__all__ = ["ClientOrder", "client_order", "block_weights", "plot_learning_curves",
           "plot_collaboration_matrix", "plot_collaboration_network", "plot_layer_graphs",
           "plot_client_accuracy"]

#: Axis labels shared by every heatmap of a collaboration matrix.
ROW_LABEL = "client i (aggregates; row i = weights client i gives)"
COLUMN_LABEL = "client j (whose model is used)"

# Above this many clients the pictures aggregate clients into blocks.
MAX_CLIENTS = 250
# At most this many blocks when aggregating (groups beyond it are merged in runs).
MAX_BLOCKS = 100
# Hierarchical clustering needs all pairwise distances; above this, k-means.
_MAX_HIERARCHICAL = 2000
# Columns of the random projection that sketches the rows before clustering.
_SKETCH_DIM = 64
# The network shows blocks instead of clients when the top-k weights of a client carry on
# average less than this share of the weight it gives the others (flat, dense rows: its
# top k are picked among near-equal weights) and there are more clients than this.
FLAT_TOP_SHARE = 0.5
FLAT_MIN_CLIENTS = 30


def _plt():
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    return plt


@dataclass(frozen=True)
class ClientOrder:
    r"""An order of the clients for drawing, and the blocks it puts together.

    Attributes:
        order (torch.Tensor): permutation :math:`(N)`; position :math:`p`
            shows client ``order[p]``.
        blocks (torch.Tensor): block of each client :math:`(N)`, numbered
            :math:`0, \dots, B - 1` in drawing order, so ``blocks[order]`` is
            non-decreasing.
        names (list of str): one name per block (``"group 3"``, ``"cluster 2"``).
        kind (str): ``"group"`` (blocks are the given groups), ``"group run"``
            (runs of consecutive groups, when there are too many groups) or
            ``"cluster"`` (found from the matrix).
        description (str): one sentence saying how the clients are ordered.
    """
    order: Tensor
    blocks: Tensor
    names: list[str]
    kind: str
    description: str

    @property
    def num_blocks(self) -> int:
        return len(self.names)

    @property
    def unit(self) -> str:
        r"""What a block is, in the plural (``"groups"`` ...)."""
        return {"group": "groups", "group run": "runs of consecutive groups"}.get(
            self.kind, "clusters")


def _relabel_in_order(labels: Tensor, order: Tensor) -> Tensor:
    r"""Renumbers ``labels`` :math:`(N)` by first appearance along ``order``."""
    seq = labels[order]
    first = torch.ones_like(seq, dtype=torch.bool)
    first[1:] = seq[1:] != seq[:-1]
    rank = torch.cumsum(first.long(), 0) - 1  # contiguous runs along order
    out = torch.empty_like(rank)
    out[order] = rank
    return out


def _chunks(n: int, num_chunks: int) -> Tensor:
    r"""Chunk index of each of ``n`` positions split into ``num_chunks`` runs."""
    return torch.arange(n) * num_chunks // max(n, 1)


def _row_features(weight: Tensor, dim: int, seed: int) -> Tensor:
    r"""Two-step collaboration profiles of the clients: the rows of
    :math:`S^2`, where :math:`S` is :math:`(W + W^\top)/2` without its diagonal,
    unit-normalized. Two steps let clients of one cluster that share few direct
    partners (sparse rows) still look alike. Above ``dim`` clients the rows are
    sketched as :math:`S (S R)` with a Gaussian :math:`R` of ``dim`` columns
    (distances kept up to a small factor), so no :math:`(N, N)` temporary is
    built."""
    n = weight.size(0)
    w = weight.double() if n <= dim else weight.float()
    diag = w.diagonal().unsqueeze(1)

    def apply_s(x: Tensor) -> Tensor:
        return (w @ x + w.t() @ x) / 2 - diag * x

    if n <= dim:
        r = torch.eye(n, dtype=w.dtype)
    else:
        gen = torch.Generator().manual_seed(seed)
        r = torch.randn(n, dim, generator=gen, dtype=w.dtype) / math.sqrt(dim)
    x = apply_s(apply_s(r))
    return (x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)).double()


def client_order(weight: Tensor, groups: Tensor | None = None, max_blocks: int = MAX_BLOCKS,
                 seed: int = 0) -> ClientOrder:
    r"""Orders clients so that the collaboration matrix shows blocks.

    With ``groups`` the clients are sorted by group (stable) and the blocks are
    the groups. Without groups the matrix orders itself: the rows of
    :math:`(W + W^\top)/2` without its diagonal (what each client gives and
    receives), unit-normalized, are clustered; up to 2,000 clients by average-
    linkage hierarchical clustering (the order is the dendrogram's leaf order,
    the blocks its cut into at most ``max_blocks`` clusters), above that by
    k-means into ``max_blocks`` clusters of a 64-column random projection of
    the rows, the clusters in the leaf order of their centres.

    Args:
        weight (torch.Tensor): collaboration matrix :math:`(N, N)`.
        groups (torch.Tensor, optional): a group label per client :math:`(N)`.
        max_blocks (int, optional): most blocks; more groups than this are
            merged into runs of consecutive groups. (default: :obj:`100`)
        seed (int, optional): seed of the projection and of k-means.
            (default: :obj:`0`)
    """
    if weight.dim() != 2 or weight.size(0) != weight.size(1):
        raise ValueError(f"weight must be square (N, N), got {tuple(weight.shape)}")
    n = weight.size(0)
    if groups is not None:
        groups = groups.detach().cpu().reshape(-1)
        if groups.numel() != n:
            raise ValueError(f"groups has {groups.numel()} entries but the matrix has {n} "
                             f"clients")
        order = torch.argsort(groups, stable=True)
        values, blocks = torch.unique(groups, return_inverse=True)
        if values.numel() <= max_blocks:
            return ClientOrder(order, blocks, [f"group {v}" for v in values.tolist()], "group",
                               f"clients ordered by group ({values.numel()} groups)")
        # Too many groups to show one by one: runs of consecutive groups.
        run = _chunks(values.numel(), max_blocks)
        first = torch.ones_like(run, dtype=torch.bool)
        first[1:] = run[1:] != run[:-1]
        last = torch.ones_like(first)
        last[:-1] = first[1:]
        names = [f"groups {a}-{b}" for a, b in zip(values[first].tolist(),
                                                  values[last].tolist(), strict=True)]
        return ClientOrder(order, run[blocks], names, "group run",
                           f"clients ordered by group ({values.numel()} groups, shown in "
                           f"{len(names)} runs of consecutive groups)")
    if n <= 2:
        return ClientOrder(torch.arange(n), torch.arange(n), [f"client {i}" for i in range(n)],
                           "cluster", "clients in index order")
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, leaves_list, linkage

    x = _row_features(weight.detach().cpu(), _SKETCH_DIM, seed).numpy()
    if n <= _MAX_HIERARCHICAL:
        tree = linkage(x, method="average", metric="euclidean")
        order = torch.from_numpy(leaves_list(tree).astype(np.int64))
        flat = torch.from_numpy(fcluster(tree, t=min(max_blocks, n), criterion="maxclust")
                                .astype(np.int64))
        how = "hierarchical clustering"
    else:
        from sklearn.cluster import KMeans

        # k-means++ seeding (scipy's kmeans2 takes ~10 s for it at 10,000 clients).
        km = KMeans(n_clusters=max_blocks, n_init=1, random_state=seed).fit(x)
        centres, labels = km.cluster_centers_, km.labels_
        used = np.unique(labels)
        rank = np.empty(max_blocks, dtype=np.int64)
        rank[used[leaves_list(linkage(centres[used], method="average"))]] = np.arange(used.size)
        flat = torch.from_numpy(rank[labels])
        order = torch.argsort(flat, stable=True)
        how = "k-means clustering"
    blocks = _relabel_in_order(flat, order)
    num = int(blocks.max()) + 1
    return ClientOrder(order, blocks, [f"cluster {b}" for b in range(num)], "cluster",
                       f"no groups known: clients ordered by {how} of the matrix "
                       f"(two-step collaboration profiles)")


def block_weights(weight: Tensor, blocks: Tensor, num_blocks: int | None = None
                  ) -> tuple[Tensor, Tensor]:
    r"""Sums of a collaboration matrix over blocks of clients.

    .. math::
        S_{gh} = \sum_{i \in g} \sum_{j \in h} W_{ij}

    The block mean is :math:`S_{gh} / (n_g n_h)`; the average share of its
    weight a client of :math:`g` gives to :math:`h` is :math:`S_{gh} / n_g`.

    Args:
        weight (torch.Tensor): :math:`(N, N)`.
        blocks (torch.Tensor): block of each client in :math:`\{0, \dots, B-1\}`
            :math:`(N)`.
        num_blocks (int, optional): :math:`B` (default: ``blocks.max() + 1``).

    Returns:
        ``(S, counts)`` of shapes :math:`(B, B)` and :math:`(B)`.
    """
    blocks = blocks.detach().cpu().long()
    b = int(blocks.max()) + 1 if num_blocks is None else num_blocks
    w = weight.detach().cpu()
    w = w if w.is_floating_point() else w.double()
    # In the matrix's own dtype first: no (N, N) copy of a large float32 matrix.
    cols = torch.zeros(w.size(0), b, dtype=w.dtype).index_add_(1, blocks, w)
    sums = torch.zeros(b, b, dtype=torch.double).index_add_(0, blocks, cols.double())
    return sums, torch.bincount(blocks, minlength=b)


def _band(runs: Sequence[History], split: str) -> tuple[list[int], Tensor]:
    r"""The rounds that all of ``runs`` evaluated and their mean ``split``
    metric there :math:`(K, R)`, one row per run."""
    common = sorted(set(runs[0].rounds).intersection(*(h.rounds for h in runs[1:])))
    rows = []
    for h in runs:
        at = dict(zip(h.rounds, h.mean(split), strict=True))
        rows.append([at[r] for r in common])
    return common, torch.tensor(rows, dtype=torch.double).reshape(len(runs), len(common))


def _draw_band(ax, rounds: Sequence[int], values: Tensor, label: str,
               band_alpha: float = 0.2, **line_kw: Any):
    r"""One line, the mean of ``values`` :math:`(K, R)` (one row per run) at
    ``rounds``, and, for more than one run, a band from their minimum to
    their maximum in the line's colour. Returns the line."""
    line, = ax.plot(list(rounds), values.mean(0).tolist(), label=label, **line_kw)
    if values.size(0) > 1:
        ax.fill_between(list(rounds), values.min(0).values.tolist(),
                        values.max(0).values.tolist(), color=line.get_color(),
                        alpha=band_alpha, linewidth=0)
    return line


def _integer_ticks(ax, values: Sequence[int]) -> None:
    r"""Integer x ticks (rounds, trials); a few values get a tick each (a
    single round would otherwise get ticks such as 0.95, 1.00, 1.05)."""
    from matplotlib.ticker import MaxNLocator
    values = sorted(set(values))
    if 0 < len(values) <= 8:
        ax.set_xticks(values)
        lo, hi = values[0], values[-1]
        pad = max(0.5, 0.05 * (hi - lo))
        ax.set_xlim(lo - pad, hi + pad)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_learning_curves(histories: Mapping[str, History | Sequence[History]],
                         title: str | None = None):
    r"""Mean validation and test metric per round, one line per run.

    A value that is a sequence of histories (one run per seed) is drawn as
    one line, the mean over its runs, with a band from their minimum to their
    maximum at every round that all of them evaluated; the legend says so.
    The legend sits below the two panels, outside the curves.

    Args:
        histories (dict): label -> :class:`~pyg_fedgraph.engine.History`, or
            label -> sequence of histories of the same strategy (seeds).
        title (str, optional): figure title.
    """
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    metric = None
    seen: set[int] = set()
    seeds = set()
    for name, value in histories.items():
        runs = [value] if isinstance(value, History) else list(value)
        if not runs:
            raise ValueError(f"no history given for {name!r}")
        metric = runs[0].metric
        for ax, split in zip(axes, ("val", "test"), strict=True):
            rounds, values = _band(runs, split)
            seen.update(rounds)
            label = name if len(runs) == 1 else f"{name} (mean of {len(runs)} runs)"
            # Markers where few rounds are drawn, or where the line has gaps (a test
            # split evaluated at a run's best rounds only, test_at="best"): a value
            # between two NaNs is a point, not a line.
            sparse = len(rounds) < 40 or bool(values.isnan().any())
            _draw_band(ax, rounds, values, label, marker="." if sparse else None)
            if len(runs) > 1:
                seeds.add(len(runs))
    for ax, split in zip(axes, ("validation", "test"), strict=True):
        ax.set_xlabel("round")
        _integer_ticks(ax, sorted(seen))
        ax.set_title(f"{split} {metric} (mean over clients)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric or "")
    handles, labels = axes[0].get_legend_handles_labels()
    if seeds:
        from matplotlib.patches import Patch
        handles.append(Patch(color="grey", alpha=0.2))
        labels.append("band: minimum to maximum over the runs")
    ncol = min(len(labels), 3)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    rows = math.ceil(len(labels) / ncol)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.045 * rows + 0.01, 1, 1))
    return fig


def plot_client_accuracy(values: Mapping[str, Tensor | Sequence[float]],
                         groups: Tensor | None = None, baseline: str | None = None,
                         metric: str = "test accuracy", title: str | None = None):
    r"""Every client's metric under several strategies, side by side: one
    group of bars per client, one bar per strategy; with a ``baseline``
    strategy (``"local"``: no collaboration), a second panel of each
    strategy's gain over it per client,

    .. math::
        g_i^{(s)} = a_i^{(s)} - a_i^{(\mathrm{baseline})},

    so who gains and who loses from collaboration reads at a glance (bars
    below zero). Clients are ordered by ``groups`` (then by id) when given,
    with the groups named under the axis; a client whose value is NaN (not
    evaluated) gets no bar.

    Args:
        values (dict): strategy -> the metric of every client :math:`(N,)`
            (e.g. ``history.records[history.best_index].test["accuracy"]``,
            or a run record's ``test_clients``), in the order of the bars.
        groups (torch.Tensor, optional): each client's group :math:`(N,)`.
        baseline (str, optional): a key of ``values`` to draw gains over
            (default: :obj:`None`, no gain panel).
        metric (str, optional): the y-axis label (default: ``"test accuracy"``).
        title (str, optional): figure title.
    """
    if not values:
        raise ValueError("plot_client_accuracy needs the values of at least one strategy")
    table = {k: torch.as_tensor(v, dtype=torch.double).reshape(-1) for k, v in values.items()}
    sizes = {k: v.numel() for k, v in table.items()}
    n = next(iter(sizes.values()))
    if len(set(sizes.values())) != 1:
        raise ValueError(f"every strategy needs one value per client; got sizes {sizes}")
    if baseline is not None and baseline not in table:
        raise ValueError(f"baseline {baseline!r} is not one of the strategies "
                         f"{', '.join(table)}")
    if groups is not None and groups.numel() != n:
        raise ValueError(f"groups has {groups.numel()} entries for {n} clients")
    # By group, then by client id (a stable sort of the groups).
    order = (torch.arange(n) if groups is None
             else torch.sort(groups.cpu().long(), stable=True).indices)
    plt = _plt()
    panels = 1 if baseline is None else 2
    fig, axes = plt.subplots(panels, 1, figsize=(min(24.0, max(6.0, 0.3 * n * len(table))),
                                                 3.2 * panels + 0.6),
                             sharex=True, squeeze=False)
    x = torch.arange(n, dtype=torch.double)
    shown = [(axes[0][0], table, metric)]
    if baseline is not None:
        base = table[baseline]
        shown.append((axes[1][0], {k: v - base for k, v in table.items() if k != baseline},
                      f"gain over {baseline}"))
    colors = {name: f"C{k}" for k, name in enumerate(table)}
    for ax, rows, label in shown:
        width = 0.8 / len(rows)
        for k, (name, v) in enumerate(rows.items()):
            ax.bar((x + (k - (len(rows) - 1) / 2) * width).tolist(), v[order].tolist(),
                   width=width, label=name, color=colors[name])
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        if baseline is not None and rows is not table:
            ax.axhline(0.0, color="black", linewidth=0.8)
    bottom = axes[-1][0]
    ticks = _thinned(n, 60)
    bottom.set_xticks([float(i) for i in ticks])
    bottom.set_xticklabels([str(int(order[i])) for i in ticks],
                           rotation=90 if n > 20 else 0, fontsize=7)
    bottom.set_xlabel("client" + ("" if groups is None else " (ordered by group)"))
    if groups is not None:
        sorted_groups = groups.cpu()[order]
        starts = [0] + ((sorted_groups[1:] != sorted_groups[:-1]).nonzero().view(-1) + 1).tolist()
        for ax_row in axes:
            for i in starts[1:]:
                ax_row[0].axvline(i - 0.5, color="grey", linewidth=0.6, linestyle=":")
        for j, i in enumerate(starts):
            end = starts[j + 1] if j + 1 < len(starts) else n
            axes[0][0].annotate(f"group {int(sorted_groups[i])}", ((i + end - 1) / 2, 1.0),
                                xycoords=("data", "axes fraction"), ha="center", va="bottom",
                                fontsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8,
               frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def _with_round(title: str, after_round: int | None) -> str:
    return title if after_round is None else f"{title} after round {after_round}"


def _thinned(n: int, most: int) -> range:
    return range(0, n, max(1, math.ceil(n / most)))


def plot_collaboration_matrix(weight: Tensor, groups: Tensor | None = None,
                              title: str = "collaboration matrix",
                              after_round: int | None = None, max_clients: int = MAX_CLIENTS,
                              order: ClientOrder | None = None):
    r"""Heatmap of a collaboration matrix :math:`(N, N)`: row :math:`i` =
    weights client :math:`i` gives, column :math:`j` = the client whose model
    is used.

    Clients are ordered so that collaborating clients form blocks
    (:func:`client_order`): by ``groups`` when given, with lines between
    groups, else by a clustering of the matrix; the figure says which. Above
    ``max_clients`` clients each pixel is a block mean
    :math:`S_{gh} / (n_g n_h)` (see :func:`block_weights`) over groups or
    clusters.

    Args:
        weight (torch.Tensor): :math:`(N, N)`.
        groups (torch.Tensor, optional): group of each client :math:`(N)`.
        title (str, optional): title; ``after_round`` is appended.
        after_round (int, optional): the round after which ``weight`` was taken.
        max_clients (int, optional): most clients drawn one by one.
            (default: :obj:`250`)
        order (ClientOrder, optional): a precomputed :func:`client_order`
            (``groups`` is then ignored).
    """
    plt = _plt()
    w = weight.detach().cpu().float()
    n = w.size(0)
    co = order if order is not None else client_order(w, groups)
    aggregate = n > max_clients
    if aggregate:
        sums, counts = block_weights(w, co.blocks, co.num_blocks)
        image = (sums / (counts.unsqueeze(1) * counts.unsqueeze(0)).clamp_min(1)).float()
        labels = co.names
        cbar = "mean weight a client of row block gives\na client of column block"
        note = (f"{co.description}; {n} clients shown as block means over "
                f"{co.num_blocks} {co.unit}")
    else:
        image = w[co.order][:, co.order]
        labels = [str(c) for c in co.order.tolist()]
        cbar = r"weight $W_{ij}$ client i gives client j"
        note = co.description
    size = image.size(0)
    fig, ax = plt.subplots(figsize=(6.2, 5.6))
    im = ax.imshow(image.numpy(), cmap="viridis", vmin=0.0, interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03).set_label(cbar)
    ticks = list(_thinned(size, 30 if not aggregate else 25))
    font = 7 if len(ticks) <= 20 else 6
    # Upright labels fit about 60 characters across the axis (e.g. 30 labels of two
    # digits); longer ones (207 METR-LA sensors: 3 digits) are turned.
    upright = not aggregate and len(ticks) * max(len(labels[t]) for t in ticks) <= 60
    ax.set_xticks(ticks, [labels[t] for t in ticks], fontsize=font,
                  rotation=0 if upright else 90)
    ax.set_yticks(ticks, [labels[t] for t in ticks], fontsize=font)
    if not aggregate and co.kind == "group" and 1 < co.num_blocks < size:
        # Lines between groups, group names along the top.
        seq = co.blocks[co.order]
        edges = (torch.nonzero(seq[1:] != seq[:-1]).flatten() + 0.5).tolist()
        for e in edges:
            ax.axhline(e, color="white", lw=0.8)
            ax.axvline(e, color="white", lw=0.8)
        starts = [-0.5, *edges]
        ends = [*edges, size - 0.5]
        if co.num_blocks <= 30:
            top = ax.secondary_xaxis("top")
            top.set_xticks([(a + b) / 2 for a, b in zip(starts, ends, strict=True)],
                           co.names, fontsize=7)
            top.tick_params(length=0)
    ax.set_xlabel("column block (" + COLUMN_LABEL + ")" if aggregate else COLUMN_LABEL)
    ax.set_ylabel("row block (" + ROW_LABEL + ")" if aggregate else ROW_LABEL,
                  fontsize=8 if aggregate else None)
    ax.set_title(_with_round(title, after_round))
    note = textwrap.fill(note, 95)
    fig.text(0.01, 0.01, note, fontsize=8, color="dimgrey")
    fig.tight_layout(rect=(0, 0.03 * (note.count("\n") + 1), 1, 1))
    return fig


def _undirected_top_k(weight: Tensor, top_k: int, floor: Tensor) -> tuple[Tensor, Tensor]:
    r"""Edges :math:`\{i, j\}` where :math:`j` is among row :math:`i`'s
    ``top_k`` largest off-diagonal weights and :math:`W_{ij} >` ``floor[j]``;
    each undirected edge keeps the larger of its two weights. Returns
    ``(edge_index (2, E), edge_weight (E))``."""
    w = weight.clone()
    n = w.size(0)
    w.fill_diagonal_(-math.inf)
    k = min(top_k, max(n - 1, 0))
    if k == 0:
        return torch.empty(2, 0, dtype=torch.long), torch.empty(0)
    vals, idx = w.topk(k, dim=1)
    src = torch.arange(n).unsqueeze(1).expand(n, k)
    keep = vals > floor[idx]
    i, j, v = src[keep], idx[keep], vals[keep]
    key = torch.minimum(i, j) * n + torch.maximum(i, j)
    uniq, inv = torch.unique(key, return_inverse=True)
    best = torch.full((uniq.numel(),), -math.inf, dtype=v.dtype).scatter_reduce(
        0, inv, v, reduce="amax")
    return torch.stack([uniq // n, uniq % n]), best


def _top_k_share(weight: Tensor, top_k: int) -> float:
    r"""Mean over clients of the share of the weight a client gives the
    others that its ``top_k`` largest off-diagonal weights carry (clients
    that give the others nothing are left out)."""
    w = weight.double().clone()
    w.fill_diagonal_(0.0)
    total = w.sum(dim=1)
    k = min(top_k, max(w.size(0) - 1, 0))
    if k == 0:
        return 1.0
    top = w.topk(k, dim=1).values.sum(dim=1)
    gives = total > 0
    return float((top[gives] / total[gives]).mean()) if bool(gives.any()) else 1.0


def _palette(num: int):
    import matplotlib
    name = "tab10" if num <= 10 else "tab20" if num <= 20 else "turbo"
    cmap = matplotlib.colormaps[name]
    if name == "turbo":
        return [cmap(x) for x in torch.linspace(0.05, 0.95, num).tolist()]
    return [cmap(i) for i in range(num)]


def plot_collaboration_network(weight: Tensor, prior_edge_index: Tensor | None = None,
                               groups: Tensor | None = None, top_k: int = 3,
                               title: str = "collaboration graph", seed: int = 0,
                               after_round: int | None = None, max_nodes: int = MAX_CLIENTS,
                               order: ClientOrder | None = None):
    r"""The collaboration matrix as a network.

    An edge joins clients :math:`i` and :math:`j` when :math:`j` is among the
    ``top_k`` largest off-diagonal weights client :math:`i` gives and the
    weight exceeds the uniform share :math:`1/N`; its width is proportional to
    the larger of :math:`W_{ij}, W_{ji}`. Nodes are coloured by ``groups``
    (legend), and placed by a spring layout of the weighted graph, so
    collaborating clients sit together; the layout is stretched to fill the
    axes. The prior client graph (if any) is drawn light, thin and beneath.

    Above ``max_nodes`` clients each node is a block of clients (the groups or
    clusters of :func:`client_order`), sized by its number of clients; an edge
    :math:`g - h` then shows the average share :math:`S_{gh} / n_g` of its
    weight a client of :math:`g` gives to :math:`h` (top ``top_k`` per block,
    above the uniform share :math:`n_h / N`), and a prior edge's opacity is the
    density of prior edges between the two blocks. The title says so.
    Blocks are drawn as well, about :math:`\sqrt{N}` of them, when the
    matrix is too flat for client edges: above 30 clients, when a client's
    ``top_k`` weights carry on average less than half of the weight it gives
    the others (Panacea's normalized prior graph on FL-60: 12%), since its
    top ``top_k`` are then picked among near-equal weights and the picture
    is a tangle of arbitrary edges.

    Args:
        weight (torch.Tensor): :math:`(N, N)`, row :math:`i` = weights client
            :math:`i` gives.
        prior_edge_index (torch.Tensor, optional): prior client graph
            :math:`(2, E)`.
        groups (torch.Tensor, optional): group of each client :math:`(N)`.
        top_k (int, optional): edges kept per client. (default: :obj:`3`)
        title (str, optional): title; ``after_round`` is appended.
        seed (int, optional): seed of the layout. (default: :obj:`0`)
        after_round (int, optional): the round after which ``weight`` was taken.
        max_nodes (int, optional): most nodes drawn. (default: :obj:`250`)
        order (ClientOrder, optional): precomputed blocks for large :math:`N`.
    """
    import networkx as nx
    import numpy as np
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    plt = _plt()
    w = weight.detach().cpu()
    n = w.size(0)
    if groups is not None and groups.numel() != n:
        raise ValueError(f"groups has {groups.numel()} entries but the matrix has {n} clients")
    prior = None
    if prior_edge_index is not None and prior_edge_index.numel():
        prior = prior_edge_index.detach().cpu().long()
        prior = prior[:, prior[0] != prior[1]]
        # One segment per undirected pair (both directions are usually stored).
        key = torch.unique(torch.minimum(prior[0], prior[1]) * n
                           + torch.maximum(prior[0], prior[1]))
        prior = torch.stack([key // n, key % n])
    aggregate = n > max_nodes
    flat_note = ""
    if not aggregate and n > FLAT_MIN_CLIENTS:
        top_share = _top_k_share(w, top_k)
        if top_share < FLAT_TOP_SHARE:
            aggregate = True
            flat_note = (f": too flat for client edges (a client's top {top_k} weights carry "
                         f"{100 * top_share:.0f}% of what it gives the others)")
    if aggregate:
        if flat_note:  # a few blocks, not max_blocks: most clients would stay alone
            most = max(2, round(math.sqrt(n)))
            co = (order if order is not None and order.num_blocks <= most
                  else client_order(w, groups, max_blocks=most))
        else:
            co = order if order is not None else client_order(w, groups)
        sums, counts = block_weights(w, co.blocks, co.num_blocks)
        share = sums / counts.unsqueeze(1).clamp_min(1)
        edge_index, edge_weight = _undirected_top_k(share, top_k, counts.double() / n)
        num = co.num_blocks
        sizes = 30.0 + 270.0 * counts.double() / counts.max()
        node_class = torch.arange(num) if co.kind != "cluster" else None
        class_names = co.names
        if prior is not None:
            b = co.blocks
            dense = torch.zeros(num * num, dtype=torch.double).index_add_(
                0, b[prior[0]] * num + b[prior[1]], torch.ones(prior.size(1), dtype=torch.double))
            pairs = (counts.unsqueeze(1) * counts.unsqueeze(0)).double()
            pairs = pairs - torch.diag(counts.double())  # ordered pairs without self loops
            density = (dense.view(num, num) / pairs.clamp_min(1)).triu(1)
            density = torch.maximum(density, density.t().triu(1))
            pi = density.nonzero().t()
            prior_alpha = density[pi[0], pi[1]]
            prior = pi
        node_text = "node: a block of clients, size by number of clients"
        edge_text = (f"edge: block's top-{top_k} average shares of weight above uniform, "
                     "width by share")
        title = (_with_round(title, after_round) + "\n"
                 + textwrap.fill(f"{n} clients shown as {num} {co.unit}{flat_note}", 90))
    else:
        num = n
        edge_index, edge_weight = _undirected_top_k(w.double(), top_k,
                                                    torch.full((n,), 1.0 / n))
        sizes = torch.full((n,), 160.0 if n <= 60 else 40.0)
        node_class, class_names = None, []
        if groups is not None:
            values, node_class = torch.unique(groups.detach().cpu(), return_inverse=True)
            class_names = [f"group {v}" for v in values.tolist()]
        if prior is not None:
            prior_alpha = torch.ones(prior.size(1))
        node_text = "node: a client"
        edge_text = (f"edge i-j: j among client i's top-{top_k} weights above 1/N, "
                     r"width by weight")
        title = _with_round(title, after_round)

    # Layout: learned edges pull hardest, prior edges a little, and a faint pull
    # between all pairs keeps separate components from drifting to the corners.
    top = float(edge_weight.max()) if edge_weight.numel() else 1.0
    adj = np.full((num, num), 0.2 / max(num, 1))
    if prior is not None:
        adj[prior[0].numpy(), prior[1].numpy()] += 0.1 * prior_alpha.double().numpy()
    adj[edge_index[0].numpy(), edge_index[1].numpy()] += edge_weight.numpy() / top
    adj = np.maximum(adj, adj.T)
    np.fill_diagonal(adj, 0.0)
    pos = nx.spring_layout(nx.from_numpy_array(adj), seed=seed, weight="weight")
    xy = np.array([pos[i] for i in range(num)]) if num else np.zeros((0, 2))
    if num > 1:  # stretch each axis to [-1, 1] so the drawing fills the canvas
        lo, hi = xy.min(0), xy.max(0)
        xy = 2 * (xy - lo) / np.where(hi > lo, hi - lo, 1.0) - 1

    fig, ax = plt.subplots(figsize=(8.4, 6.0))
    handles = []
    if prior is not None and prior.size(1):
        alpha = (0.15 + 0.45 * prior_alpha.float() / prior_alpha.max()).numpy()
        prior_colors = np.zeros((prior.size(1), 4))
        prior_colors[:, :3] = 0.55
        prior_colors[:, 3] = alpha if aggregate else min(0.3, 20.0 / math.sqrt(prior.size(1)))
        ax.add_collection(LineCollection(xy[prior.t().numpy()], colors=prior_colors,
                                         linewidths=0.5, zorder=1))
        handles.append(Line2D([], [], color="0.55", lw=0.5,
                              label="prior graph (dataset)" + (", opacity by density"
                                                               if aggregate else "")))
    if edge_index.size(1):
        widths = 0.4 + 2.6 * edge_weight.numpy() / top
        ax.add_collection(LineCollection(xy[edge_index.t().numpy()], colors="tab:blue",
                                         linewidths=widths, alpha=0.7, zorder=2))
    handles.append(Line2D([], [], color="tab:blue", lw=2.5, label=edge_text))
    palette = _palette(len(class_names)) if node_class is not None else []
    colors = ([palette[c] for c in node_class.tolist()] if node_class is not None
              else ["tab:orange"] * num)
    ax.scatter(xy[:, 0], xy[:, 1], s=sizes.numpy(), c=colors, edgecolors="white",
               linewidths=0.6, zorder=3)
    if node_class is None or aggregate:
        handles.append(Line2D([], [], ls="", marker="o", label=node_text,
                              color="tab:orange" if node_class is None else "grey"))
    if node_class is not None and len(class_names) <= 20:
        handles += [Line2D([], [], ls="", marker="o", color=palette[c], label=name)
                    for c, name in enumerate(class_names)]
    elif node_class is not None:
        handles.append(Line2D([], [], ls="", marker="o", color=palette[0],
                              label=f"node colour: {len(class_names)} "
                                    + (co.unit if aggregate else "groups")))
    if num <= 30:
        names = class_names if aggregate else [str(i) for i in range(num)]
        for i in range(num):
            ax.annotate(names[i], xy[i], fontsize=7, ha="center", va="center", zorder=4)
    ax.set_xlim(-1.08, 1.08)
    ax.set_ylim(-1.08, 1.08)
    if not edge_index.size(1):
        title += "\n(no edges: no off-diagonal weight above the uniform share)"
    ax.set_title(title)
    ax.axis("off")
    fig.legend(handles=handles, loc="lower center", ncol=2 if len(handles) > 3 else 1,
               fontsize=7, frameon=False)
    rows = math.ceil(len(handles) / (2 if len(handles) > 3 else 1))
    fig.tight_layout(rect=(0, 0.035 * rows + 0.01, 1, 1))
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
        ax.set_xlabel("client j", fontsize=7)
    axes[0][0].set_ylabel("client i (row = weights it gives)", fontsize=7)
    if im is not None:
        fig.colorbar(im, ax=list(axes[0]), fraction=0.02).set_label(
            r"weight $\alpha^{(l)}_{ij}$ client i gives client j", fontsize=7)
    fig.suptitle(title + (" (clients ordered by group)" if groups is not None else ""))
    return fig
