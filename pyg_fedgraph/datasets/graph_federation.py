r"""Graph-level federations: the graphs of one or several graph classification
datasets dealt to clients, and each client's graphs split into train,
validation and test sets, in the settings of GCFL (Xie et al., "Federated
Graph Classification over Non-IID Graphs", NeurIPS 2021).

The rules of GCFL's two settings are taken from the paper (Sec. 6.1) and from
the authors' code (repository Oxfordblue7/GCFL, commit a6691ae,
``setupGC.py`` and ``utils.py``; read to learn the rules, none of it copied):

- **one dataset over clients** (:func:`one_dataset_federation`,
  ``partition="gcfl"``): :func:`gcfl_chunks`, their ``_randChunk``;
  or label skew (``partition="dirichlet"``, a Dirichlet draw over graph
  labels as :func:`~pyg_fedgraph.data.partition.dirichlet_partition` does
  for samples);
- **across datasets** (:func:`cross_dataset_federation`): every dataset
  held by ``clients_per_dataset`` clients (GCFL: one), the dataset being the
  client's true group;
- in both, every client's graphs split 80/10/10, stratified by graph label
  (:func:`stratified_split`; their ``split_data``, scikit-learn's
  ``train_test_split(..., stratify=y)`` applied twice, 0.8 / 0.2 then
  0.5 / 0.5 of the rest).
"""
from __future__ import annotations

import copy
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from pyg_fedgraph.data.partition import _check_fractions, _split_sizes, dirichlet_partition
from pyg_fedgraph.datasets.tu import TUGraphs, check_tu_names, read_tu
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["GraphSetClient", "GraphFederation", "GraphSplitName", "GRAPH_PARTITIONS",
           "GCFL_FRACTIONS", "gcfl_chunks", "stratified_split", "pad_node_features",
           "one_dataset_federation", "cross_dataset_federation"]

GraphSplitName = Literal["gcfl", "dirichlet"]
GRAPH_PARTITIONS = ("gcfl", "dirichlet")
#: GCFL's split of every client's graphs into train / validation / test.
GCFL_FRACTIONS = (0.8, 0.1, 0.1)
_SPLITS = ("train", "val", "test")


@dataclass(frozen=True, eq=False)
class GraphSetClient:
    r"""One client of a graph-level federation.

    Args:
        dataset (str): the dataset its graphs come from.
        group (int): that dataset's position in
            :attr:`GraphFederation.datasets` (the client's true group).
        num_classes (int): classes of its dataset (labels
            :math:`0..\text{num\_classes}-1`).
        train (tuple of Data): its training graphs.
        val (tuple of Data): its validation graphs.
        test (tuple of Data): its test graphs.
        train_index (torch.Tensor): positions of ``train`` in the dataset
            (one per graph, sorted; repeats only with GCFL's ``overlap``).
        val_index (torch.Tensor): positions of ``val``.
        test_index (torch.Tensor): positions of ``test``.
    """
    dataset: str
    group: int
    num_classes: int
    train: tuple[Data, ...]
    val: tuple[Data, ...]
    test: tuple[Data, ...]
    train_index: Tensor
    val_index: Tensor
    test_index: Tensor

    @property
    def num_graphs(self) -> int:
        return len(self.train) + len(self.val) + len(self.test)

    def __repr__(self) -> str:
        return (f"GraphSetClient({self.dataset}, train={len(self.train)}, val={len(self.val)}, "
                f"test={len(self.test)})")


@dataclass(frozen=True, eq=False)
class GraphFederation:
    r"""Clients that hold graphs, with what a model needs to take them all:
    one node-feature width (narrower datasets zero-padded) and one head
    size, the most classes of any dataset, with each client's absent classes
    marked by :meth:`class_mask`.

    Args:
        clients (tuple of GraphSetClient): the clients, grouped by dataset.
        datasets (tuple of str): dataset of each group.
        num_features (int): node-feature width of every graph (the widest
            dataset's).
        num_classes (int): the most classes of any dataset.
        dataset_num_features (tuple of int): each dataset's own width, before
            padding.
        dataset_num_classes (tuple of int): each dataset's classes.
    """
    clients: tuple[GraphSetClient, ...]
    datasets: tuple[str, ...]
    num_features: int
    num_classes: int
    dataset_num_features: tuple[int, ...]
    dataset_num_classes: tuple[int, ...]

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def group(self) -> Tensor:
        r"""Every client's true group (its dataset) :math:`(N,)`."""
        return torch.tensor([c.group for c in self.clients], dtype=torch.long)

    @property
    def client_num_classes(self) -> Tensor:
        r"""Classes of every client's dataset :math:`(N,)`."""
        return torch.tensor([c.num_classes for c in self.clients], dtype=torch.long)

    def class_mask(self) -> Tensor:
        r"""Which outputs of a head of :attr:`num_classes` units are classes
        of each client's dataset :math:`(N, C)`, bool: mask the others out of
        the loss (e.g. set their logits to :math:`-\infty`)."""
        classes = torch.arange(self.num_classes)
        return classes.unsqueeze(0) < self.client_num_classes.unsqueeze(1)

    def label_counts(self, split: str = "train") -> Tensor:
        r"""Graphs of each class held by each client in ``split``
        (``"train"``, ``"val"``, ``"test"`` or ``"all"``) :math:`(N, C)`."""
        splits = _SPLITS if split == "all" else (split,)
        if any(s not in _SPLITS for s in splits):
            raise ValueError(f"unknown split {split!r}; choose one of {_SPLITS + ('all',)}")
        ys: list[int] = []
        owner: list[int] = []
        for i, client in enumerate(self.clients):
            graphs = [g for s in splits for g in getattr(client, s)]
            ys.extend(int(g.y) for g in graphs)
            owner.extend([i] * len(graphs))
        flat = torch.tensor(owner, dtype=torch.long) * self.num_classes + torch.tensor(
            ys, dtype=torch.long)
        counts = torch.bincount(flat, minlength=self.num_clients * self.num_classes)
        return counts.view(self.num_clients, self.num_classes)

    def __len__(self) -> int:
        return len(self.clients)

    def __getitem__(self, index: int) -> GraphSetClient:
        return self.clients[index]

    def __iter__(self) -> Iterator[GraphSetClient]:
        return iter(self.clients)

    def __repr__(self) -> str:
        return (f"GraphFederation({self.num_clients} clients, datasets={list(self.datasets)}, "
                f"num_features={self.num_features}, num_classes={self.num_classes})")


# --------------------------------------------------------------------------- pure rules
def _check_clients(num_graphs: int, num_clients: int) -> None:
    if num_clients < 1:
        raise ValueError(f"num_clients must be at least 1, got {num_clients}")
    if num_graphs < num_clients:
        raise ValueError(f"cannot deal {num_graphs} graphs to {num_clients} clients: every "
                         f"client needs at least one graph; use fewer clients")


def gcfl_chunks(num_graphs: int, num_clients: int, *, generator: torch.Generator,
                overlap: bool = False, chunk_size: int = 50,
                overlap_sizes: tuple[int, int] = (50, 150), shuffle: bool = False
                ) -> list[Tensor]:
    r"""GCFL's split of one dataset over clients (Xie et al., NeurIPS 2021,
    Sec. 6.1; ``_randChunk`` in ``setupGC.py`` of the authors' code).

    Without overlap, client :math:`i` takes the graphs at positions
    :math:`[is, (i+1)s)` of the dataset and every graph left over goes to a
    client drawn uniformly at random:

    .. math::
        s = \min\!\big(\text{chunk\_size},\ \lfloor G / N \rfloor\big),
        \qquad k(g) \sim \mathcal{U}\{0, \dots, N-1\}\ \text{for}\ g \ge Ns.

    The authors' code takes the positions in the dataset's file order
    (``shuffle=False``, the default here); several TU files list their graphs
    sorted by label (PROTEINS, ENZYMES), so these "random chunks" are then
    label-skewed, and ``shuffle=True`` permutes the graphs first instead.
    With ``overlap=True`` every client draws a size
    :math:`n_i \sim \mathcal{U}\{a, \dots, b-1\}` (``overlap_sizes``
    :math:`= (a, b)`, the code's 50 and 150) and then :math:`n_i` graphs
    uniformly with replacement from the whole dataset (``random.choices``),
    so a graph may be held by several clients, or twice by one.

    Args:
        num_graphs (int): graphs :math:`G` of the dataset.
        num_clients (int): clients :math:`N`.
        generator (torch.Generator): source of randomness.
        overlap (bool, optional): GCFL's overlapping variant.
            (default: :obj:`False`)
        chunk_size (int, optional): most graphs of a client's chunk, before
            the left-over graphs are dealt. (default: :obj:`50`)
        overlap_sizes (tuple, optional): the range :math:`[a, b)` of client
            sizes with ``overlap=True``. (default: :obj:`(50, 150)`)
        shuffle (bool, optional): permute the graphs before cutting the
            chunks. (default: :obj:`False`)

    Returns:
        :math:`N` sorted index tensors; without overlap they are disjoint and
        cover :math:`0..G-1`.
    """
    if overlap:
        if num_clients < 1:
            raise ValueError(f"num_clients must be at least 1, got {num_clients}")
        low, high = overlap_sizes
        if not 1 <= low < high:
            raise ValueError(f"overlap_sizes must be (low, high) with 1 <= low < high, got "
                             f"{tuple(overlap_sizes)}")
        sizes = torch.randint(low, high, (num_clients,), generator=generator)
        draws = torch.randint(0, num_graphs, (int(sizes.sum()),), generator=generator)
        return [part.sort().values for part in draws.split(sizes.tolist())]
    _check_clients(num_graphs, num_clients)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    size = min(chunk_size, num_graphs // num_clients)
    order = (torch.randperm(num_graphs, generator=generator) if shuffle
             else torch.arange(num_graphs))
    owner = torch.empty(num_graphs, dtype=torch.long)
    owner[order[:num_clients * size]] = torch.arange(num_clients).repeat_interleave(size)
    rest = order[num_clients * size:]
    owner[rest] = torch.randint(0, num_clients, (rest.numel(),), generator=generator)
    return _owned(owner, num_clients)


def _owned(owner: Tensor, num_clients: int) -> list[Tensor]:
    r"""``owner[g]`` (client of graph ``g``) as sorted index tensors, one per
    client, without a loop over clients."""
    order = torch.argsort(owner, stable=True)
    return list(order.split(torch.bincount(owner, minlength=num_clients).tolist()))


def _evenly(count: int, picks: int) -> Tensor:
    r"""``picks`` of ``count`` positions spread evenly (Bresenham's rule):
    position :math:`p` is picked when :math:`\lfloor (p+1)k/n \rfloor >
    \lfloor pk/n \rfloor`, so every run of :math:`L` consecutive positions
    holds :math:`\lfloor Lk/n \rfloor` or :math:`\lceil Lk/n \rceil` picks."""
    p = torch.arange(count)
    return (p + 1) * picks // max(count, 1) > p * picks // max(count, 1)


def stratified_split(labels: Tensor, fractions: Sequence[float] = GCFL_FRACTIONS, *,
                     generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    r"""Train / validation / test split of one client's graphs, stratified
    by label (GCFL: 80/10/10, scikit-learn's ``train_test_split`` with
    ``stratify`` in the authors' ``split_data``).

    Sizes are :math:`n f_s` rounded by largest remainder (at least one graph
    in every split of positive fraction when :math:`n` allows it). The graphs
    are ordered class by class (classes in random order, graphs shuffled
    within each), and the test graphs, then the validation graphs among the
    rest, are picked at evenly spaced positions of that order, so class
    :math:`k` with :math:`n_k` graphs gets
    :math:`\lfloor n_k n_\text{test}/n \rfloor` or
    :math:`\lceil n_k n_\text{test}/n \rceil` test graphs (likewise for
    validation among the remaining ones):

    .. math::
        \big|\, |D^\text{test}_k| - n_k\, n_\text{test} / n \,\big| < 1 .

    Args:
        labels (torch.Tensor): the client's graph labels :math:`(n,)`.
        fractions (tuple, optional): ``(train, val, test)`` shares summing to
            1. (default: :obj:`(0.8, 0.1, 0.1)`)
        generator (torch.Generator): source of randomness.

    Returns:
        ``(train, val, test)``: sorted positions into ``labels``, disjoint,
        covering :math:`0..n-1`.
    """
    fractions = _check_fractions(fractions)
    labels = torch.as_tensor(labels).view(-1).long()
    n = labels.numel()
    _, num_val, num_test = _split_sizes(n, fractions)
    classes, y = torch.unique(labels, return_inverse=True)
    rank = torch.randperm(classes.numel(), generator=generator)
    perm = torch.randperm(n, generator=generator)
    order = perm[torch.argsort(rank[y[perm]], stable=True)]
    test_pick = _evenly(n, num_test)
    rest = order[~test_pick]
    val_pick = _evenly(rest.numel(), num_val)
    return (rest[~val_pick].sort().values, rest[val_pick].sort().values,
            order[test_pick].sort().values)


def pad_node_features(graphs: Sequence[Data], width: int) -> list[Data]:
    r"""Shallow copies of ``graphs`` whose ``x`` is zero-padded on the right
    to ``width`` columns (the inputs are not modified):

    .. math::
        \mathbf{x}'_v = \big[\, \mathbf{x}_v \,\|\, \mathbf{0}_{\text{width} - F} \,\big].

    Args:
        graphs (list of Data): graphs with ``x`` of one width :math:`F`.
        width (int): the width to pad to, at least :math:`F`.

    Shapes:
        - **input:** ``x`` :math:`(|V|, F)` per graph.
        - **output:** ``x`` :math:`(|V|, \text{width})` per graph.
    """
    out = []
    for graph in graphs:
        if graph.x.size(1) > width:
            raise ValueError(f"cannot pad node features of width {graph.x.size(1)} to "
                             f"{width}; pass at least the widest dataset's width")
        padded = copy.copy(graph)
        padded.x = F.pad(graph.x, (0, width - graph.x.size(1)))
        out.append(padded)
    return out


# --------------------------------------------------------------------------- federations
def _dataset_generator(seed: int, name: str) -> torch.Generator:
    # One stream per dataset: a dataset's clients do not depend on which others join.
    return make_generator(seed, "graph-federation", zlib.crc32(name.encode("utf-8")))


def _clients(data: TUGraphs, parts: Sequence[Tensor], group: int,
             fractions: tuple[float, float, float], generator: torch.Generator,
             graphs: Sequence[Data]) -> list[GraphSetClient]:
    # A loop over clients: one-off data preparation, a stratified split each.
    out = []
    for part in parts:
        positions = stratified_split(data.y[part], fractions, generator=generator)
        index = [part[p] for p in positions]
        split = [tuple(graphs[int(i)] for i in idx) for idx in index]
        out.append(GraphSetClient(dataset=data.name, group=group, num_classes=data.num_classes,
                               train=split[0], val=split[1], test=split[2],
                               train_index=index[0], val_index=index[1], test_index=index[2]))
    return out


def one_dataset_federation(data: TUGraphs, num_clients: int = 10, *,
                           partition: GraphSplitName = "gcfl", beta: float = 0.5,
                           min_size: int = 10, overlap: bool = False, chunk_size: int = 50,
                           shuffle: bool = False,
                           fractions: Sequence[float] = GCFL_FRACTIONS,
                           seed: int = 0) -> GraphFederation:
    r"""One dataset's graphs dealt to clients, GCFL's single-dataset setting
    (Xie et al., NeurIPS 2021, Sec. 6.1), each client's graphs then split by
    :func:`stratified_split`.

    With ``partition="gcfl"`` the graphs are cut by :func:`gcfl_chunks`;
    with ``partition="dirichlet"`` every label's graphs are shared out by
    proportions :math:`\mathbf{q}_k \sim \mathrm{Dir}_N(\beta)` (label skew,
    redrawn until every client holds ``min_size`` graphs):

    .. math::
        |D_i \cap \{y = k\}| \approx q_{k,i}\, n_k .

    Args:
        data (TUGraphs): the dataset (:func:`~pyg_fedgraph.datasets.read_tu`).
        num_clients (int, optional): clients :math:`N`. (default: :obj:`10`)
        partition (str, optional): ``"gcfl"`` or ``"dirichlet"``.
            (default: :obj:`"gcfl"`)
        beta (float, optional): Dirichlet concentration :math:`\beta > 0`;
            smaller is more skewed. (default: :obj:`0.5`)
        min_size (int, optional): fewest graphs of a client under
            ``"dirichlet"``. (default: :obj:`10`)
        overlap (bool, optional): GCFL's overlapping chunks (see
            :func:`gcfl_chunks`; a graph may then be in one client's train
            and another's test). (default: :obj:`False`)
        chunk_size (int, optional): GCFL's chunk size. (default: :obj:`50`)
        shuffle (bool, optional): shuffle before cutting GCFL's chunks
            instead of taking them in file order. (default: :obj:`False`)
        fractions (tuple, optional): ``(train, val, test)`` of every client.
            (default: :obj:`(0.8, 0.1, 0.1)`)
        seed (int, optional): the run's seed. (default: :obj:`0`)

    Raises:
        ValueError: one line, if ``num_clients < 1``, there are more clients
            than graphs, ``beta <= 0``, or the partition is unknown.
    """
    if partition not in GRAPH_PARTITIONS:
        raise ValueError(f"unknown partition {partition!r}; choose one of {GRAPH_PARTITIONS}")
    checked = _check_fractions(fractions)
    generator = _dataset_generator(seed, data.name)
    if partition == "gcfl":
        parts = gcfl_chunks(len(data), num_clients, generator=generator, overlap=overlap,
                            chunk_size=chunk_size, shuffle=shuffle)
    else:
        _check_clients(len(data), num_clients)
        parts = dirichlet_partition(data.y, num_clients, beta, generator=generator,
                                    min_size=min_size)
    clients = _clients(data, parts, 0, checked, generator, data.graphs)
    return GraphFederation(clients=tuple(clients), datasets=(data.name,),
                           num_features=data.num_node_features, num_classes=data.num_classes,
                           dataset_num_features=(data.num_node_features,),
                           dataset_num_classes=(data.num_classes,))


def cross_dataset_federation(datasets: Sequence[str | TUGraphs], clients_per_dataset: int = 1,
                             *, root: str | Path | None = None, download: bool = False,
                             use_node_attr: bool = False, graphs_per_client: int | None = None,
                             min_size: int = 10, fractions: Sequence[float] = GCFL_FRACTIONS,
                             seed: int = 0) -> GraphFederation:
    r"""Clients that hold different datasets: GCFL's cross-dataset setting
    (Xie et al., NeurIPS 2021, Sec. 6.1: one client per dataset, e.g. its
    "biochem" group of ten datasets, :data:`~pyg_fedgraph.datasets.tu.GCFL_GROUPS`)
    and its extension to ``clients_per_dataset`` clients per dataset, whose
    dataset is their true group.

    Every dataset's graphs are shuffled and cut into ``clients_per_dataset``
    parts whose sizes differ by at most one (all graphs, as GCFL's code does
    for its full groups; or ``graphs_per_client`` each, e.g. 150 as its
    ``*_tiny`` groups take per dataset, or 50 as the paper states), and every
    part is split by :func:`stratified_split`. Each dataset draws from its own
    random stream (the seed and the dataset's name), so its clients are the
    same whichever other datasets join.

    Datasets differ in node-feature width and in classes: every graph's
    ``x`` is zero-padded to the widest dataset's width
    (:func:`pad_node_features`), and :attr:`GraphFederation.num_classes` is
    the most classes of any dataset, with
    :meth:`GraphFederation.class_mask` marking each client's own.

    Args:
        datasets (list): dataset names (read from ``root`` by
            :func:`~pyg_fedgraph.datasets.read_tu`) or :class:`TUGraphs`.
        clients_per_dataset (int, optional): clients holding each dataset.
            (default: :obj:`1`)
        root (str or Path, optional): the folder of the datasets given by
            name. (default: :obj:`None`)
        download (bool, optional): fetch missing datasets into ``root``.
            (default: :obj:`False`)
        use_node_attr (bool, optional): read continuous node attributes too.
            (default: :obj:`False`)
        graphs_per_client (int, optional): graphs of every client (a random
            subset of its dataset); all graphs if :obj:`None`.
            (default: :obj:`None`)
        min_size (int, optional): fewest graphs a client may hold when all
            graphs are dealt (10 leaves one for validation and one for test at
            80/10/10). (default: :obj:`10`)
        fractions (tuple, optional): ``(train, val, test)`` of every client.
            (default: :obj:`(0.8, 0.1, 0.1)`)
        seed (int, optional): the run's seed. (default: :obj:`0`)

    Raises:
        ValueError: one line, for an unknown dataset name, a name given twice,
            ``clients_per_dataset < 1``, or a dataset with too few graphs for
            its clients (saying how many it has and how many each needs).
    """
    if clients_per_dataset < 1:
        raise ValueError(f"clients_per_dataset must be at least 1, got {clients_per_dataset}")
    if graphs_per_client is not None and graphs_per_client < 1:
        raise ValueError(f"graphs_per_client must be at least 1, got {graphs_per_client}")
    if min_size < 1:
        raise ValueError(f"min_size must be at least 1, got {min_size}")
    if not datasets:
        raise ValueError("cross_dataset_federation needs at least one dataset")
    checked = _check_fractions(fractions)
    names = [d if isinstance(d, str) else d.name for d in datasets]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"dataset {twice[0]!r} is listed twice; list every dataset once and "
                         f"set clients_per_dataset for more clients")
    by_name = [d for d in datasets if isinstance(d, str)]
    check_tu_names(by_name, root, download=download)
    datas: list[TUGraphs] = []
    for d in datasets:
        if isinstance(d, str):
            if root is None:  # check_tu_names let it through: download without a folder
                raise ValueError(f"reading {d} needs root=DIR, the folder holding the datasets")
            d = read_tu(d, root, download=download, use_node_attr=use_node_attr)
        datas.append(d)
    per_client = graphs_per_client or min_size
    for data in datas:
        if clients_per_dataset * per_client > len(data):
            what = ("graphs_per_client" if graphs_per_client is not None else "min_size")
            raise ValueError(f"{data.name} has {len(data)} graphs but clients_per_dataset="
                             f"{clients_per_dataset} clients need {per_client} each ({what}), "
                             f"{clients_per_dataset * per_client} in all; use at most "
                             f"{len(data) // per_client} clients per dataset")
    width = max(d.num_node_features for d in datas)
    clients: list[GraphSetClient] = []
    for group, data in enumerate(datas):
        generator = _dataset_generator(seed, data.name)
        order = torch.randperm(len(data), generator=generator)
        if graphs_per_client is not None:
            order = order[:clients_per_dataset * graphs_per_client]
        sizes = torch.full((clients_per_dataset,), order.numel() // clients_per_dataset)
        sizes[:order.numel() % clients_per_dataset] += 1
        parts = [part.sort().values for part in order.split(sizes.tolist())]
        padded = pad_node_features(data.graphs, width)
        clients.extend(_clients(data, parts, group, checked, generator, padded))
    return GraphFederation(clients=tuple(clients), datasets=tuple(names), num_features=width,
                           num_classes=max(d.num_classes for d in datas),
                           dataset_num_features=tuple(d.num_node_features for d in datas),
                           dataset_num_classes=tuple(d.num_classes for d in datas))
