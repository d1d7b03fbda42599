r"""FL-60: the synthetic binary classification federation of Panacea."""
from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor
from torch_geometric.utils import coalesce, to_undirected

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.partition import build_federated_dataset
from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.utils.safe_pickle import loads_array_pickle, read_pickle_file

__all__ = ["fl60", "angle_knn_graph", "read_grda_toy", "grda_dg60_file", "GraphName",
           "PAPER_GRAPH_MAX_CLIENTS", "GRDA_DG60_SHA256", "GRDA_DG60_ENV", "FL60_VARIANTS"]

log = logging.getLogger(__name__)

GraphName = Literal["auto", "paper", "grda", "knn", "none", "file"]

#: Largest federation for which ``graph="auto"`` draws the paper's dense
#: Bernoulli graph (about :math:`N^2 / 2` edges: 2 million at 2,000 clients);
#: larger ones get the sparse ``"knn"`` graph.
PAPER_GRAPH_MAX_CLIENTS = 2000


@register_dataset("fl60")
def fl60(num_clients: int = 60, samples_per_client: int = 100, seed: int = 0,
         fractions: Sequence[float] = (0.64, 0.16, 0.2),
         recipe: Literal["grda", "paper"] = "grda", graph: GraphName = "auto",
         graph_k: int = 10, path: str | Path | None = None) -> FederatedDataset:
    r"""The FL-60 synthetic federation of Panacea, from the `"Graph-Relational
    Federated Learning: Enhanced Personalization and Robustness"` paper (Lin
    et al., Sec. IV-A), whose distribution is borrowed from GRDA (Xu et al., "Graph-
    Relational Domain Adaptation", ICLR 2022).

    Client :math:`t` draws a random 2-D unit vector :math:`(a_t, b_t)` (angle
    uniform on the circle) with angle :math:`\omega_t = \mathrm{atan2}(b_t,
    a_t)` (the paper writes :math:`\arcsin`; ``atan2`` is the angle of the
    vector on the whole circle), then draws balanced labels and inputs

    .. math::
        \mathbf{x} \mid y = 1 \sim \mathcal{N}(\boldsymbol{\mu}_t, \mathbf{I}),
        \quad \mathbf{x} \mid y = 0 \sim \mathcal{N}(-\boldsymbol{\mu}_t, \mathbf{I}),
        \quad \boldsymbol{\mu}_t = \tfrac{\omega_t}{\pi} (a_t, b_t).

    The prior client graph is symmetric without self loops:

    .. math::
        A_{uv} = A_{vu} \sim \mathrm{Bern}(0.5\, a_u a_v + 0.5\, b_u b_v + 0.5),
        \quad u < v,

    so clients with close angles are likely linked.

    **Prior graph at scale.** The Bernoulli graph is dense: every pair is
    linked with probability :math:`0.5 + 0.5 \cos(\omega_u - \omega_v)`, 1/2
    on average, so it holds about :math:`N^2 / 2` directed edges (12.5
    million, 200 MB of ``edge_index``, at :math:`N = 5000`) and drawing it
    visits all :math:`N (N - 1) / 2` pairs. ``graph="knn"`` instead links
    every client to the ``graph_k`` clients nearest to it in angle order,
    :math:`k / 2` on each side around the circle
    (:func:`~pyg_fedgraph.datasets.angle_knn_graph`: symmetric, exactly :math:`k` neighbours each,
    :math:`k N` edges, no random draw); ``graph="none"`` builds no prior
    graph, for strategies that do not use one (Panacea and SFL need one).
    ``graph="auto"`` (default) is the paper's graph up to 2,000 clients
    (``PAPER_GRAPH_MAX_CLIENTS``), so the paper-sized federations are
    unchanged, and ``"knn"`` above (logged). Inputs and labels do not
    depend on the graph; the train / val / test split is drawn after the
    paper's graph, so it differs between ``"paper"`` and the other two.

    **GRDA's graph.** ``graph="grda"`` links clients as GRDA's generator
    links its 60 domains (Wang-ML-Lab/GRDA, ``dataset_generator.py``): an
    edge between :math:`u` and :math:`v` with probability
    :math:`\cos(\omega_u - \omega_v)` where that cosine is at least 0.2,
    none elsewhere, so that clients of opposite boundaries are never linked.
    It is drawn from a stream of its own (seed ``seed + 1``) after the draw of
    the paper's graph, so that inputs and splits are those of
    ``graph="paper"`` and runs on the two graphs differ by the graph alone.

    **Two recipes.** With ``recipe="paper"`` the inputs follow the text above.
    Its classes overlap: the mean norm :math:`|\omega_t|/\pi \le 1` under unit
    noise caps the Bayes accuracy near 68% on average, so the paper's reported
    ~100% (Table II) cannot come from it. The generator of GRDA's public code,
    which Panacea says it borrows, differs: client :math:`t` draws an angle
    :math:`\phi_t \sim U[0, 2\pi)`, its class means are
    :math:`\pm r_t (\cos\phi_t, \sin\phi_t)` on a spiral of radius
    :math:`r_t = 1 + 6\,\phi_t / (2\pi)`, and the noise is
    :math:`\mathcal{N}(0, \mathbf{I})` restricted to the unit disk (rejection
    sampling), so each client's classes are separable.
    ``recipe="grda"`` (default) uses those inputs with the same unit vectors
    :math:`(a_t, b_t) = (\cos\phi_t, \sin\phi_t)` and the Panacea graph above.

    **GRDA's data file.** GRDA publishes the DG-60 draw it used,
    ``data/toy_d60_spiral.pkl`` in Wang-ML-Lab/GRDA (a dict of numpy arrays:
    ``data`` :math:`(6000, 2)`, ``label``, ``domain``, the graph ``A``
    :math:`(60, 60)` and ``angle`` :math:`(60,)`). With ``path`` set to that
    file (or one of its format, read without running code, see
    :func:`read_grda_toy`), inputs, labels and client angles are the file's
    instead of drawn; the clients and their sample counts are the file's
    (``num_clients`` and ``samples_per_client`` must be left at their defaults
    or equal them) and ``recipe`` must be ``"grda"``. Its labels are GRDA's:
    0 for the samples around :math:`+\boldsymbol{\mu}_t`, 1 around
    :math:`-\boldsymbol{\mu}_t` (the opposite of the drawn recipes; accuracy
    does not depend on it). ``graph="file"`` takes the file's graph (GRDA's:
    an edge with probability :math:`\cos(\phi_u - \phi_v)` where that is at
    least 0.2, none elsewhere); ``"auto"`` and ``"paper"`` draw Panacea's
    Bernoulli graph on the file's angles. ``info["file_sha256"]`` records the
    file read.

    The paper splits each
    client 80% / 20% into train / test; a validation split is carved from the
    training part: the default ``fractions=(0.64, 0.16, 0.2)`` is the paper's
    80/20 with 20% of the training part held out (64 / 16 / 20 samples).

    Args:
        num_clients (int, optional): clients :math:`N` (paper: 60). (default: :obj:`60`)
        samples_per_client (int, optional): samples per client, half of each
            class (class 1 gets the odd one out). (default: :obj:`100`)
        seed (int, optional): seed of every random draw. (default: :obj:`0`)
        fractions (tuple, optional): per-client ``(train, val, test)`` shares;
            val must be positive. (default: :obj:`(0.64, 0.16, 0.2)`)
        recipe (str, optional): ``"grda"`` (GRDA's generator, separable
            classes) or ``"paper"`` (the Panacea text). (default: :obj:`"grda"`)
        graph (str, optional): the prior client graph: ``"paper"``
            (Bernoulli), ``"grda"`` (GRDA's), ``"knn"`` (nearest in angle),
            ``"none"``, ``"file"`` (GRDA's data file's, with ``path``), or
            ``"auto"`` (``"paper"`` up to 2,000 clients, else ``"knn"``).
            (default: :obj:`"auto"`)
        graph_k (int, optional): neighbours per client of the ``"knn"``
            graph, even and below :math:`N`. (default: :obj:`10`)
        path (str or Path, optional): GRDA's DG-60 file to read the
            federation from instead of drawing it (see above); ``graph="file"``
            needs it. (default: :obj:`None`)

    Returns:
        A :class:`~pyg_fedgraph.data.FederatedDataset` with 2-D float32 inputs,
        long labels in :math:`\{0, 1\}`, ``edge_index`` (both directions) and
        unit ``edge_weight`` (both :obj:`None` for ``graph="none"``;
        ``info["graph"]`` names the graph built). ``client_labels`` is :obj:`None` (clients form a
        continuum, not groups); ``info["client_embedding"]`` holds
        :math:`(a_t, b_t)` :math:`(N, 2)` and ``info["client_angle"]``
        :math:`\omega_t` :math:`(N,)` for the full federation (not updated by
        :meth:`~pyg_fedgraph.data.FederatedDataset.subset`).
    """
    if recipe not in ("grda", "paper"):
        raise ValueError(f"recipe must be 'grda' or 'paper', got {recipe!r}")
    if num_clients < 2:
        raise ValueError(f"FL-60 needs at least 2 clients to form a graph, got {num_clients}")
    if samples_per_client < 3:
        raise ValueError(f"samples_per_client must be at least 3 (one per split), got "
                         f"{samples_per_client}")
    if len(fractions) != 3 or fractions[1] <= 0:
        raise ValueError(f"FL-60 needs a positive validation fraction, got fractions={fractions}")
    if graph not in ("auto", "paper", "grda", "knn", "none", "file"):
        raise ValueError(f"graph must be 'auto', 'paper', 'grda', 'knn', 'none' or 'file', "
                         f"got {graph!r}")
    if graph == "file" and path is None:
        raise ValueError("graph='file' takes the graph of GRDA's data file: pass path= too")
    toy = None if path is None else _read_file_federation(Path(path), num_clients,
                                                          samples_per_client, recipe)
    if toy is not None:
        num_clients = toy["angle"].numel()
    if graph == "auto":
        graph = "paper" if num_clients <= PAPER_GRAPH_MAX_CLIENTS else "knn"
        if graph == "knn":
            log.info("fl60: %d clients is more than %d, so the prior graph is the sparse knn "
                     "graph (k=%d) instead of the paper's dense Bernoulli graph; pass "
                     "graph='paper' to draw that one", num_clients, PAPER_GRAPH_MAX_CLIENTS,
                     graph_k)
    if graph == "knn":
        _check_k(graph_k, num_clients)
    generator = torch.Generator().manual_seed(seed)
    if toy is None:
        angle, x, y = _draw_inputs(num_clients, samples_per_client, recipe, generator)
        partition = list(torch.arange(num_clients * samples_per_client)
                         .view(num_clients, samples_per_client))
        info = {"recipe": recipe, "graph": graph,
                "source": "Panacea (Lin et al.) FL-60, inputs from the GRDA generator"
                if recipe == "grda" else "Panacea (Lin et al.) FL-60, paper text"}
    else:
        angle, x, y, partition = toy["angle"], toy["data"], toy["label"], toy["partition"]
        info = {"recipe": "grda-file", "graph": graph, "source": toy["source"],
                "file_sha256": toy["sha256"]}
    embedding = torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)
    omega = torch.atan2(embedding[:, 1], embedding[:, 0])
    edge_index = (toy["A"].nonzero().t().contiguous() if graph == "file" and toy is not None
                  else _prior_graph(graph, embedding, omega, graph_k, generator, seed))
    edge_weight = None if edge_index is None else torch.ones(edge_index.size(1))
    return build_federated_dataset(
        "fl60", x.float(), y, partition, task="classification",
        num_classes=2, fractions=fractions, generator=generator, edge_index=edge_index,
        edge_weight=edge_weight,
        info={"synthetic": True, **info,
              "client_embedding": embedding.float(), "client_angle": omega.float()})


def _draw_inputs(num_clients: int, samples_per_client: int, recipe: str,
                 generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    r"""The drawn federation: client angles :math:`(N,)`, inputs
    :math:`(N n, 2)` and labels :math:`(N n,)`, client after client."""
    angle = (2 * torch.rand(num_clients, generator=generator, dtype=torch.float64) - 1) * math.pi
    embedding = torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)
    omega = torch.atan2(embedding[:, 1], embedding[:, 0])
    mean = omega.unsqueeze(1) / math.pi * embedding                       # (N, 2), class 1

    num_pos = (samples_per_client + 1) // 2
    y = (torch.arange(samples_per_client) < num_pos).long().repeat(num_clients, 1)  # (N, n)
    sign = 2.0 * y.to(torch.float64) - 1.0
    if recipe == "grda":
        phi = torch.remainder(angle, 2 * math.pi)
        mean = (1.0 + 6.0 * phi / (2 * math.pi)).unsqueeze(1) * embedding
        noise = _unit_disk_normal(num_clients * samples_per_client, generator) \
            .view(num_clients, samples_per_client, 2)
    else:
        noise = torch.randn(num_clients, samples_per_client, 2, generator=generator,
                            dtype=torch.float64)
    x = sign.unsqueeze(-1) * mean.unsqueeze(1) + noise                     # (N, n, 2)
    return angle, x.view(-1, 2), y.view(-1)


def _prior_graph(graph: str, embedding: Tensor, omega: Tensor, graph_k: int,
                 generator: torch.Generator, seed: int) -> Tensor | None:
    r"""``edge_index`` of the prior graph ``"paper"`` (Panacea's Bernoulli
    graph on the clients' unit vectors ``embedding`` :math:`(N, 2)`, drawn
    from ``generator``), ``"grda"`` (GRDA's, drawn from a generator seeded
    ``seed + 1`` after the paper's draw), ``"knn"`` (nearest in angle
    ``omega``) or ``None`` (``"none"``)."""
    n = embedding.size(0)
    if graph in ("paper", "grda"):
        prob = 0.5 * embedding @ embedding.t() + 0.5
        row, col = torch.triu_indices(n, n, offset=1)
        draw = torch.rand(row.numel(), generator=generator, dtype=torch.float64)
        if graph == "paper":
            keep = draw < prob[row, col]
            return to_undirected(torch.stack([row[keep], col[keep]]), num_nodes=n)
        # The cosines of the unit vectors as the dataset stores them (float32), and
        # the edges in the order the records of fl60-grda-graph were made with.
        stored = embedding.float().double()
        cos = (stored @ stored.t())[row, col]
        own = torch.Generator().manual_seed(seed + 1)
        keep = (cos >= 0.2) & (torch.rand(cos.numel(), generator=own, dtype=torch.float64)
                               < cos)
        return torch.stack([torch.cat([row[keep], col[keep]]),
                            torch.cat([col[keep], row[keep]])])
    if graph == "knn":
        return angle_knn_graph(omega, graph_k)
    return None


#: The arrays of GRDA's toy data files and what each holds.
GRDA_KEYS = {"data": "inputs (M, 2)", "label": "labels (M,) in {0, 1}",
             "domain": "client ids (M,) in [0, K)", "A": "graph (K, K)",
             "angle": "client angles (K,)"}


def read_grda_toy(path: str | Path) -> dict[str, Tensor]:
    r"""Reads a toy data file of GRDA (``toy_d60_spiral.pkl``,
    ``toy_d15_spiral_tight_boundary.pkl``: a pickled dict of numpy arrays)
    with an allow-list unpickler that builds only plain data and numpy arrays
    (:func:`~pyg_fedgraph.utils.safe_pickle.load_array_pickle`), and checks
    it.

    Returns:
        ``{"data": (M, 2) float64, "label": (M,) long, "domain": (M,) long,
        "A": (K, K) float64, "angle": (K,) float64}``.

    Raises:
        ValueError: naming the file, if it asks for any Python object, is not
            a pickle, or its arrays are missing or inconsistent.
    """
    return _read_grda_toy(Path(path))[0]


def _read_grda_toy(path: Path) -> tuple[dict[str, Tensor], str]:
    r""":func:`read_grda_toy` and the sha256 of the bytes it read."""
    import numpy as np

    raw = read_pickle_file(path, "a GRDA toy data pickle")
    obj = loads_array_pickle(raw, str(path), "a GRDA toy data pickle",
                             "GRDA's toy_d60_spiral.pkl, a dict of the numpy arrays "
                             + ", ".join(GRDA_KEYS))
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a dict of numpy arrays {sorted(GRDA_KEYS)}, got "
                         f"{type(obj).__name__}")
    missing = [k for k in GRDA_KEYS if not isinstance(obj.get(k), np.ndarray)]
    if missing:
        raise ValueError(f"{path}: missing numpy arrays {missing} (a GRDA toy file holds "
                         + "; ".join(f"{k}: {v}" for k, v in GRDA_KEYS.items()) + ")")
    odd = [k for k in GRDA_KEYS if obj[k].dtype.kind not in "biuf"]
    if odd:
        raise ValueError(f"{path}: arrays {odd} must hold real numbers, got dtypes "
                         f"{[str(obj[k].dtype) for k in odd]}")
    data, label, domain, adj, angle = (obj[k].astype(np.float64) for k in
                                       ("data", "label", "domain", "A", "angle"))
    m, k = data.shape[0] if data.ndim == 2 else -1, angle.shape[0] if angle.ndim == 1 else -1
    if data.ndim != 2 or data.shape[1] != 2 or m == 0:
        raise ValueError(f"{path}: data must have shape (M, 2), got {data.shape}")
    if label.shape != (m,) or domain.shape != (m,):
        raise ValueError(f"{path}: label and domain must have shape ({m},) like data, got "
                         f"{label.shape} and {domain.shape}")
    if k < 2 or adj.shape != (k, k):
        raise ValueError(f"{path}: angle must have shape (K,) with K >= 2 and A (K, K), got "
                         f"{angle.shape} and {adj.shape}")
    with np.errstate(over="ignore"):
        finite = np.isfinite(data.astype(np.float32)).all() and np.isfinite(angle).all()
    if not finite:
        raise ValueError(f"{path}: data must be finite in float32 and angle finite")
    if not np.isin(label, (0.0, 1.0)).all():
        raise ValueError(f"{path}: labels must be 0 or 1, got values "
                         f"{sorted(set(np.unique(label).tolist()) - {0.0, 1.0})[:5]}")
    if (domain != np.round(domain)).any() or domain.min() < 0 or domain.max() >= k:
        raise ValueError(f"{path}: domain must hold client ids 0..{k - 1}")
    if not np.isin(adj, (0.0, 1.0)).all() or (adj != adj.T).any() or np.diag(adj).any():
        raise ValueError(f"{path}: A must be a symmetric 0/1 matrix with a zero diagonal")
    out = {"data": torch.from_numpy(data), "label": torch.from_numpy(label).long(),
           "domain": torch.from_numpy(domain).long(), "A": torch.from_numpy(adj),
           "angle": torch.from_numpy(angle)}
    counts = torch.bincount(out["domain"], minlength=k)
    if int(counts.min()) < 3:
        raise ValueError(f"{path}: every client needs at least 3 samples (one per split); "
                         f"client {int(counts.argmin())} has {int(counts.min())}")
    return out, hashlib.sha256(raw).hexdigest()


def _read_file_federation(path: Path, num_clients: int, samples_per_client: int,
                          recipe: str) -> dict:
    r"""GRDA's data file checked against :func:`fl60`'s arguments: its arrays
    (:func:`read_grda_toy`), each client's sample indices (``"partition"``),
    the file's sha256 and a ``"source"`` line."""
    if recipe != "grda":
        raise ValueError(f"recipe={recipe!r} draws the inputs, path= reads them from a file: "
                         "pass one of the two")
    toy, digest = _read_grda_toy(path)
    k = toy["angle"].numel()
    counts = torch.bincount(toy["domain"], minlength=k)
    if num_clients not in (60, k):
        raise ValueError(f"{path} holds {k} clients, got num_clients={num_clients} (leave it "
                         f"at its default with path=)")
    if samples_per_client != 100 and not bool((counts == samples_per_client).all()):
        raise ValueError(f"{path} holds {counts.min()}-{counts.max()} samples per client, got "
                         f"samples_per_client={samples_per_client} (leave it at its default "
                         f"with path=)")
    order = torch.argsort(toy["domain"], stable=True)
    return {**toy, "partition": list(order.split(counts.tolist())), "sha256": digest,
            "source": f"GRDA's data file {path.name} (sha256 {digest[:12]})"}


#: sha256 of GRDA's published DG-60 draw (Wang-ML-Lab/GRDA, ``data/toy_d60_spiral.pkl``),
#: the file behind the datasets ``fl60-grda-file`` and ``fl60-grda-file-graph``.
GRDA_DG60_SHA256 = "b3bb65f047fda93d68e641eb8ea6bd9edcc32bf38279f4409161f35b5d6a6f18"
#: The environment variable naming that file for those two datasets when no
#: ``path`` is given (their records were made without one in their settings).
GRDA_DG60_ENV = "PYG_FEDGRAPH_GRDA_FILE"


def grda_dg60_file(path: str | Path | None = None) -> Path:
    r"""The path of GRDA's published DG-60 draw (``toy_d60_spiral.pkl`` from
    Wang-ML-Lab/GRDA, ``data/``; not part of pyg_fedgraph), checked against
    :data:`GRDA_DG60_SHA256`: ``path``, else the file named by the environment
    variable :data:`GRDA_DG60_ENV`.

    Raises:
        ValueError: one line, when neither names a file, the file is missing,
            or its bytes are not that file's.
    """
    given = path if path is not None else os.environ.get(GRDA_DG60_ENV)
    if not given:
        raise ValueError(f"GRDA's DG-60 draw is read from a file of yours: download "
                         f"toy_d60_spiral.pkl from Wang-ML-Lab/GRDA (data/) and pass path=PATH "
                         f"(command line: --set data.path=PATH) or set {GRDA_DG60_ENV}=PATH")
    file = Path(given)
    if not file.is_file():
        raise ValueError(f"{file} not found: expected GRDA's toy_d60_spiral.pkl "
                         f"(Wang-ML-Lab/GRDA, data/)")
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    if digest != GRDA_DG60_SHA256:
        raise ValueError(f"{file} is not GRDA's toy_d60_spiral.pkl (sha256 {digest[:16]}..., "
                         f"expected {GRDA_DG60_SHA256[:16]}...); read another file of its "
                         f"format with fl60(path=...)")
    return file


#: FL-60 with one of its options set, registered under the dataset names that
#: the records of ``benchmarks/reproduce/fl60_protocol.py`` were made with
#: before these options existed (a record's key holds the dataset's name):
#: name -> the :func:`fl60` call it stands for. They take FL-60's model and
#: local-training defaults.
FL60_VARIANTS: dict[str, str] = {
    "fl60-paper-inputs": "fl60(recipe='paper'): the inputs of Panacea's text",
    "fl60-grda-graph": "fl60(graph='grda'): GRDA's client graph",
    "fl60-grda-file": "fl60(path=grda_dg60_file(path), graph='paper'): GRDA's published draw "
                      "with Panacea's graph drawn on its angles",
    "fl60-grda-file-graph": "fl60(path=grda_dg60_file(path), graph='file'): GRDA's published "
                            "draw and its graph",
}


@register_dataset("fl60-paper-inputs")
def _fl60_paper_inputs(num_clients: int = 60, seed: int = 0) -> FederatedDataset:
    r"""FL-60 with the inputs of Panacea's text: :func:`fl60` with
    ``recipe="paper"``."""
    return fl60(num_clients=num_clients, seed=seed, recipe="paper")


@register_dataset("fl60-grda-graph")
def _fl60_grda_graph(num_clients: int = 60, seed: int = 0) -> FederatedDataset:
    r"""FL-60 with GRDA's client graph: :func:`fl60` with ``graph="grda"``."""
    return fl60(num_clients=num_clients, seed=seed, graph="grda")


@register_dataset("fl60-grda-file")
def _fl60_grda_file(num_clients: int = 60, seed: int = 0,
                    path: str | Path | None = None) -> FederatedDataset:
    r"""GRDA's published DG-60 draw with Panacea's graph drawn on its angles:
    :func:`fl60` with ``path=grda_dg60_file(path)`` and ``graph="paper"``."""
    return fl60(num_clients=num_clients, seed=seed, path=grda_dg60_file(path), graph="paper")


@register_dataset("fl60-grda-file-graph")
def _fl60_grda_file_graph(num_clients: int = 60, seed: int = 0,
                          path: str | Path | None = None) -> FederatedDataset:
    r"""GRDA's published DG-60 draw and its graph: :func:`fl60` with
    ``path=grda_dg60_file(path)`` and ``graph="file"``."""
    return fl60(num_clients=num_clients, seed=seed, path=grda_dg60_file(path), graph="file")


def angle_knn_graph(angle: Tensor, k: int) -> Tensor:
    r"""Links every client to the :math:`k` clients nearest to it in angle
    order around the circle, :math:`k / 2` on each side: with clients sorted
    by angle, :math:`\pi(0), \ldots, \pi(N - 1)`,

    .. math::
        \mathcal{E} = \{(\pi(r), \pi((r + j) \bmod N)) : 0 \le r < N,\;
        1 \le |j| \le k / 2\} .

    The graph is symmetric, has no self loops and gives every client exactly
    :math:`k` neighbours (:math:`k N` directed edges); it is built with one
    sort, :math:`O(N \log N)` time and :math:`O(k N)` memory.

    Args:
        angle (torch.Tensor): each client's angle :math:`(N,)` (radians; any
            period-:math:`2\pi` representation orders the same circle).
        k (int): neighbours per client, even and below :math:`N`.

    Shapes:
        - **input:** angle :math:`(N,)`
        - **output:** ``edge_index`` :math:`(2, k N)`, sorted by source.
    """
    n = angle.numel()
    _check_k(k, n)
    order = torch.remainder(angle.double(), 2 * math.pi).argsort()
    rank = torch.arange(n).unsqueeze(1)                                    # (N, 1)
    half = torch.arange(1, k // 2 + 1)
    offsets = torch.cat([half, -half]).unsqueeze(0)                       # (1, k)
    src = order[rank.expand(n, k)]
    dst = order[torch.remainder(rank + offsets, n)]
    return coalesce(torch.stack([src.reshape(-1), dst.reshape(-1)]), num_nodes=n)


def _check_k(k: int, num_clients: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 2 or k % 2 or k >= num_clients:
        raise ValueError(f"graph_k must be an even number of neighbours (k/2 on each side in "
                         f"angle order) from 2 to {num_clients - 1} for {num_clients} clients, "
                         f"got {k!r}")


def _unit_disk_normal(count: int, generator: torch.Generator) -> torch.Tensor:
    r"""``count`` draws of :math:`\mathcal{N}(0, \mathbf{I}_2)` conditioned on
    norm at most 1 (rejection sampling; about 39% of draws are kept)."""
    out = torch.empty(0, 2, dtype=torch.float64)
    while out.size(0) < count:
        z = torch.randn(max(4 * (count - out.size(0)), 64), 2, generator=generator,
                        dtype=torch.float64)
        out = torch.cat([out, z[z.norm(dim=1) <= 1.0]])
    return out[:count]
