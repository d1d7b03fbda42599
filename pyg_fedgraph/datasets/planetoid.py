r"""The Planetoid citation graphs Cora, CiteSeer and PubMed (Yang, Cohen and
Salakhutdinov, `"Revisiting Semi-Supervised Learning with Graph Embeddings"
<https://arxiv.org/abs/1603.08861>`_, ICML 2016), read from the raw files of
the Planetoid repository (``kimiyoung/planetoid``, MIT licence) without
running any code they might hold.

Each data set is eight files ``ind.<name>.<suffix>``:

- ``x``, ``tx``, ``allx``: scipy CSR matrices of node features (the labelled
  training nodes, the test nodes, and all nodes but the test ones);
- ``y``, ``ty``, ``ally``: numpy arrays of one-hot labels, row for row;
- ``graph``: a ``defaultdict`` mapping each node to the list of its
  neighbours;
- ``test.index``: the node ids of the rows of ``tx``, one per line (text).

The pickles are Python 2 pickles; they are read with
:class:`~pyg_fedgraph.utils.safe_pickle.SparseArrayUnpickler`, which builds
only arrays, lists, dicts and CSR matrices from checked arrays.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from pyg_fedgraph.utils.safe_pickle import loads_sparse_pickle, read_pickle_file

__all__ = ["PLANETOID_URL", "PLANETOID_NAMES", "PLANETOID_SUFFIXES", "PlanetoidFile",
           "PLANETOID_FILES", "read_planetoid", "download_planetoid", "git_blob_sha1"]

log = logging.getLogger(__name__)

#: Where PyG's :class:`~torch_geometric.datasets.Planetoid` downloads the
#: raw files (the ``data/`` folder of ``kimiyoung/planetoid``).
PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"

#: The data sets, by lower-case name, with the folder name PyG gives them.
PLANETOID_NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}

#: The eight file suffixes of a data set, in PyG's reading order.
PLANETOID_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")

#: ``fetch(url, dest)`` writes the bytes found at ``url`` to the file ``dest``.
Fetch = Callable[[str, Path], None]


@dataclass(frozen=True)
class PlanetoidFile:
    r"""The checksums of one published raw file: its git blob id in the tree
    of ``kimiyoung/planetoid`` at commit ``af6abf46`` (the last commit of
    ``master``, which :data:`PLANETOID_URL` serves), and its sha256 where the
    file itself could be hashed (:obj:`None` otherwise)."""
    git_sha1: str
    sha256: str | None


def _table(rows: str) -> dict[str, PlanetoidFile]:
    r"""Triples ``suffix git_sha1 sha256`` (``-``: unknown), any spacing."""
    tokens = rows.split()
    return {suffix: PlanetoidFile(git_sha1, None if sha256 == "-" else sha256)
            for suffix, git_sha1, sha256 in zip(tokens[::3], tokens[1::3], tokens[2::3],
                                                strict=True)}


#: Checksums of the published raw files, by data set and suffix. The sha256
#: of Cora's and CiteSeer's files are those of the copies the project's tests
#: read (``shared/data/README.md``), equal to the published blobs. PubMed's
#: were computed from the blobs of the repository, except ``ind.pubmed.allx``
#: (7.2 MB), whose blob was not available: it is checked by its git blob id
#: alone, which the repository's tree pins (a git blob id is the SHA-1 of
#: ``b"blob <size>\0" + content``; forging a second file with a given SHA-1 is
#: not feasible, unlike SHA-1 collisions between two new files).
PLANETOID_FILES: dict[str, dict[str, PlanetoidFile]] = {
    "cora": _table("""
        x          c4a91d008245403e7f26aa616b437191509793c0
                   23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab
        tx         6e856d777401ee15dc8619db76c97d0a40ba2d60
                   b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a
        allx       44d53b1fece343538e45592caac521d73c6f98d6
                   9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543
        y          58e30ef120d3553cfaac33ff28c6b5436dbef661
                   94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1
        ty         da1734ab670b5c8ecee78a9c30b35566df916f4b
                   41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad
        ally       04fbd0b083d09341fcf16b395c642329637f0542
                   2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71
        graph      4d3bf85dfc8b1c105a2c995597a1b3eed6947925
                   58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d
        test.index ded8092db4cd767a367eebe09003b954a5316f24
                   297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875
    """),
    "citeseer": _table("""
        x          f094104a66f2689ffbd01085fe6a856689e9db9e
                   d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6
        tx         b2aff18aa1fc6f4f5e8c64db7643b59b24e42584
                   539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21
        allx       592091071ac35b78599c722d0e60b1c655711728
                   2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668
        y          e857ac49b611da98e101a068cf4855350274f68a
                   8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924
        ty         3795f79df0cd1123f4478b77c148a5fbacc4cefb
                   55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce
        ally       7503f81a0b6ac1cc21cb5a97073542a6b1dfe99c
                   f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95
        graph      a01dca663d0103c130f525017a4a9c313037e286
                   d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7
        test.index 62d9e3d5ed53c66b069125af98529d76c70d9b3e
                   2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4
    """),
    "pubmed": _table("""
        x          16c0eca8d2b3297014ff80327416f9332eda10d7
                   fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33
        tx         eee4f3c988fde0da87a9ec7b01ca5e7863c1b1f1
                   4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d
        allx       3b86bccf08111c37c632a9dd8ab63db25ea76361
                   -
        y          e86670576c85340eeb2271b3c918bfa89322b2cf
                   e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3
        ty         225a0bb9bb6430e3925d04688daf6a0da964c07a
                   ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd
        ally       4c8bcdc80882dd225fe4dd4fafd723baa616ac97
                   0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e
        graph      76eb87e628a6b9d43fc31ea42c8c6c8f3e52b404
                   5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9
        test.index 41f6befcb7750cc4858cb852f2b349a9598cb2f4
                   b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5
    """),
}


def git_blob_sha1(data: bytes) -> str:
    r"""The git blob id of ``data``: :math:`\mathrm{SHA1}(\texttt{blob }
    \langle\text{size}\rangle \texttt{\\0} \,\|\, \text{data})`, the id under
    which a git tree lists a file with these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _mismatch(name: str, suffix: str, data: bytes) -> str:
    r"""Why ``data`` is not the published file, or an empty string if it is."""
    known = PLANETOID_FILES[name][suffix]
    if known.sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        return "" if digest == known.sha256 else f"sha256 {digest}, not {known.sha256}"
    digest = git_blob_sha1(data)
    return "" if digest == known.git_sha1 else f"git blob id {digest}, not {known.git_sha1}"


def _key(name: str) -> str:
    key = str(name).lower()
    if key not in PLANETOID_NAMES:
        raise ValueError(f"unknown Planetoid data set {name!r}: expected one of "
                         f"{', '.join(PLANETOID_NAMES.values())}")
    return key


def _folders(key: str, root: Path) -> list[Path]:
    r"""Where the raw files may lie: ``root`` itself, or PyG's layout."""
    return [root, root / PLANETOID_NAMES[key] / "raw", root / key / "raw"]


def _find(key: str, root: Path) -> tuple[Path | None, Path, list[str]]:
    r"""The first folder holding all eight files (or :obj:`None`), the most
    complete folder (``root`` if none holds any), and what that one lacks."""
    everything = [f"ind.{key}.{s}" for s in PLANETOID_SUFFIXES]
    best: tuple[int, Path, list[str]] = (0, root, everything)
    for folder in _folders(key, root):
        missing = [name for name in everything if not (folder / name).is_file()]
        if not missing:
            return folder, folder, []
        if len(everything) - len(missing) > best[0]:
            best = (len(everything) - len(missing), folder, missing)
    return None, best[1], best[2]


def _urlopen(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=60) as response, open(dest, "wb") as f:
        shutil.copyfileobj(response, f)


def download_planetoid(name: str, root: str | Path, fetch: Fetch | None = None) -> Path:
    r"""Downloads the raw files of ``name`` that ``root`` lacks from
    :data:`PLANETOID_URL` into ``root`` (or into the folder of PyG's layout
    under it that holds some of them already), keeping each only if its checksum is
    the published one (:data:`PLANETOID_FILES`: sha256, or the git blob id
    where no sha256 is known, as for ``ind.pubmed.allx``, whose sha256 is
    logged so it can be recorded).

    Args:
        name (str): :obj:`"cora"`, :obj:`"citeseer"` or :obj:`"pubmed"`
            (any case).
        root (str or Path): the folder receiving the files (created if
            needed), as in :func:`read_planetoid`.
        fetch (callable, optional): ``fetch(url, dest)`` writing the bytes of
            ``url`` to the file ``dest``. (default: :mod:`urllib.request`)

    Returns:
        The folder holding the eight files.

    Raises:
        ValueError: if a file could not be fetched or does not match its
            checksum (nothing of it is left behind).
    """
    key = _key(name)
    folder, target, _ = _find(key, Path(root))
    if folder is not None:
        return folder
    target.mkdir(parents=True, exist_ok=True)
    fetch = fetch or _urlopen
    for suffix in PLANETOID_SUFFIXES:
        dest = target / f"ind.{key}.{suffix}"
        if dest.is_file():
            continue
        url = f"{PLANETOID_URL}/{dest.name}"
        part = dest.with_name(dest.name + ".part")
        try:
            fetch(url, part)
            data = part.read_bytes()
            problem = _mismatch(key, suffix, data)
            if problem:
                raise ValueError(f"{url} has {problem}")
        except BaseException as err:
            part.unlink(missing_ok=True)
            if isinstance(err, OSError | HTTPException):
                raise ValueError(f"could not download {url} into {target}: "
                                 f"{' '.join(str(err).split())}") from None
            raise
        part.replace(dest)
        log.info("downloaded %s to %s (sha256 %s; %s verified)", url, dest,
                 hashlib.sha256(data).hexdigest(),
                 "git blob id" if PLANETOID_FILES[key][suffix].sha256 is None else "sha256")
    return target


def read_planetoid(name: str, root: str | Path, *, download: bool = False,
                   fetch: Fetch | None = None) -> Data:
    r"""Cora, CiteSeer or PubMed as one :class:`~torch_geometric.data.Data`
    with the public split of Planetoid, equal to what PyG's
    :class:`~torch_geometric.datasets.Planetoid` builds from the same files
    (the tests check it), from `"Revisiting Semi-Supervised Learning with
    Graph Embeddings" <https://arxiv.org/abs/1603.08861>`_ (Yang et al.).

    With :math:`n_\ell` rows in ``x`` and :math:`n_a` in ``allx``, the nodes
    are the rows of ``allx`` followed by those of ``tx`` placed at the ids of
    ``test.index``:

    .. math::
        \mathbf{X} = \begin{bmatrix} \mathbf{X}_{\text{all}} \\
        \mathbf{X}_{\text{test}} \end{bmatrix}, \qquad
        \mathbf{X}_{t_i} \leftarrow \mathbf{X}_{\text{test}, i},

    with labels the arg-max of the one-hot rows. The public split trains on
    nodes :math:`0, \ldots, n_\ell - 1`, validates on the next 500 and tests
    on the ids of ``test.index``. Where the test ids do not form one range
    (CiteSeer's 15 ids without a row in ``tx``), the missing rows are zero
    features and label 0, as in PyG. The edges are those of ``graph``,
    without self loops, made undirected (a no-op for the published files,
    whose adjacency lists are symmetric), without duplicates, ordered as PyG
    orders them (by target, then source).

    Args:
        name (str): :obj:`"cora"`, :obj:`"citeseer"` or :obj:`"pubmed"`
            (any case).
        root (str or Path): a folder holding the eight files
            ``ind.<name>.*``, directly or in PyG's layout
            ``<root>/<Cora|CiteSeer|PubMed>/raw/``.
        download (bool, optional): if the files are not there, fetch them
            into ``root`` with :func:`download_planetoid` (checksums
            verified). (default: :obj:`False`)
        fetch (callable, optional): the downloader used by
            :func:`download_planetoid`. (default: :mod:`urllib.request`)

    Returns:
        ``Data(x, edge_index, y, train_mask, val_mask, test_mask)``.

    Raises:
        ValueError: one line, if files are missing (saying which, where, and
            how to get them), if a pickle asks for anything but arrays, lists,
            dicts and CSR matrices (naming the file), or if the files do not
            fit together.

    Shapes:
        - **x:** :math:`(|\mathcal{V}|, F)`, float32 (Cora: 2,708 x 1,433;
          CiteSeer: 3,327 x 3,703; PubMed: 19,717 x 500)
        - **edge_index:** :math:`(2, |\mathcal{E}|)`, both directions of each
          undirected edge (Cora: 10,556; CiteSeer: 9,104; PubMed: 88,648)
        - **y**, **masks:** :math:`(|\mathcal{V}|,)`
    """
    key = _key(name)
    root = Path(root)
    folder, _, missing = _find(key, root)
    if folder is None and download:
        folder = download_planetoid(key, root, fetch=fetch)
    if folder is None:
        looked = ", ".join(str(f) for f in _folders(key, root)[1:])
        raise ValueError(
            f"{PLANETOID_NAMES[key]} raw files missing in {root}: {', '.join(missing)} "
            f"(also looked in {looked}); get them with download=True (on the command "
            f"line --set data.download=true), or from "
            f"{PLANETOID_URL}/ind.{key}.<x|tx|allx|y|ty|ally|graph|test.index>")
    return _read_folder(key, folder)


def _read_folder(key: str, folder: Path) -> Data:
    raw: dict[str, Any] = {}
    differ = []
    for suffix in PLANETOID_SUFFIXES:
        path = folder / f"ind.{key}.{suffix}"
        data = read_pickle_file(path, f"a Planetoid file ({suffix})")
        if _mismatch(key, suffix, data):
            differ.append(path.name)
        raw[suffix] = (_read_index(path, data) if suffix == "test.index" else
                       loads_sparse_pickle(data, str(path), f"a Planetoid {suffix} pickle"))
    if differ:
        log.warning("%s: %s differ from the published files (read anyway)", folder,
                    ", ".join(differ))
    return _assemble(key, folder, raw)


def _read_index(path: Path, data: bytes) -> np.ndarray:
    try:
        values = [int(tok) for tok in data.decode("ascii").split()]
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{path} is not a list of node ids, one integer per line") from None
    if not values or min(values) < 0:
        raise ValueError(f"{path} holds no node ids, or negative ones")
    return np.asarray(values, dtype=np.int64)


def _dense(value: Any, path: Path, what: str) -> Tensor:
    import scipy.sparse as sp

    if sp.issparse(value):
        value = value.toarray()
    if not isinstance(value, np.ndarray) or value.ndim != 2 or value.dtype.kind not in "biuf":
        got = (f"a {value.ndim}-D {value.dtype} array" if isinstance(value, np.ndarray)
               else f"a {type(value).__name__}")
        raise ValueError(f"{path} holds {got}, expected {what} (a 2-D numeric matrix)")
    return torch.from_numpy(np.asarray(value, dtype=np.float32))


def _assemble(key: str, folder: Path, raw: dict[str, Any]) -> Data:
    def path(suffix: str) -> Path:
        return folder / f"ind.{key}.{suffix}"

    x, tx, allx = (_dense(raw[s], path(s), "node features") for s in ("x", "tx", "allx"))
    y, ty, ally = (_dense(raw[s], path(s), "one-hot labels") for s in ("y", "ty", "ally"))
    test_index = torch.from_numpy(raw["test.index"])
    for (a, sa), (b, sb) in [((x, "x"), (y, "y")), ((tx, "tx"), (ty, "ty")),
                             ((allx, "allx"), (ally, "ally"))]:
        if a.size(0) != b.size(0):
            raise ValueError(f"{path(sa)} has {a.size(0)} rows but {path(sb)} has {b.size(0)}")
    if len({x.size(1), tx.size(1), allx.size(1)}) != 1 or len(
            {y.size(1), ty.size(1), ally.size(1)}) != 1:
        raise ValueError(f"{folder}: the feature or label widths of ind.{key}.x/tx/allx "
                         f"and y/ty/ally differ")
    if test_index.numel() != tx.size(0):
        raise ValueError(f"{path('test.index')} lists {test_index.numel()} ids but "
                         f"{path('tx')} has {tx.size(0)} rows")
    if x.size(0) + 500 > allx.size(0):
        raise ValueError(f"{path('allx')} has {allx.size(0)} rows, fewer than the "
                         f"{x.size(0)} training and 500 validation nodes")

    sorted_test = test_index.sort().values
    lo, span = int(sorted_test[0]), int(sorted_test[-1] - sorted_test[0]) + 1
    if lo != allx.size(0) or len(torch.unique(test_index)) != test_index.numel():
        raise ValueError(f"{path('test.index')}: its ids must be distinct and start right "
                         f"after the {allx.size(0)} rows of allx, found {lo} first")
    if span != tx.size(0):  # CiteSeer: test ids without a row are zero rows (as PyG)
        tx_ext = tx.new_zeros(span, tx.size(1))
        tx_ext[sorted_test - lo] = tx
        ty_ext = ty.new_zeros(span, ty.size(1))
        ty_ext[sorted_test - lo] = ty
        tx, ty = tx_ext, ty_ext

    features = torch.cat([allx, tx], dim=0)
    features[test_index] = features[sorted_test]
    labels = torch.cat([ally, ty], dim=0).max(dim=1).indices
    labels[test_index] = labels[sorted_test]
    num_nodes = labels.numel()

    edge_index = _edges(raw["graph"], num_nodes, path("graph"))
    masks = {}
    for split, index in [("train_mask", torch.arange(y.size(0))),
                         ("val_mask", torch.arange(y.size(0), y.size(0) + 500)),
                         ("test_mask", test_index)]:
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[index] = True
        masks[split] = mask
    return Data(x=features, edge_index=edge_index, y=labels, **masks)


def _edges(graph: Any, num_nodes: int, path: Path) -> Tensor:
    if not isinstance(graph, dict):
        raise ValueError(f"{path} holds a {type(graph).__name__}, expected a dict of "
                         f"adjacency lists")
    try:
        keys = np.fromiter((int(k) for k in graph), dtype=np.int64, count=len(graph))
        lists = [np.asarray(v, dtype=np.int64).reshape(-1) for v in graph.values()]
    except (TypeError, ValueError):
        raise ValueError(f"{path} is not a dict from node ids to lists of node ids") from None
    counts = np.fromiter((len(v) for v in lists), dtype=np.int64, count=len(lists))
    row = np.repeat(keys, counts)
    col = np.concatenate(lists) if lists else np.zeros(0, dtype=np.int64)
    if row.size and (min(row.min(), col.min()) < 0 or max(row.max(), col.max()) >= num_nodes):
        raise ValueError(f"{path} links node ids outside 0..{num_nodes - 1}")
    edge_index = torch.from_numpy(np.stack([row, col]))
    edge_index, _ = remove_self_loops(edge_index)
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    return coalesce(edge_index, num_nodes=num_nodes, sort_by_row=False)
