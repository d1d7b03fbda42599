r"""MNIST and Fashion-MNIST read from their four IDX files with :mod:`numpy`
(no torchvision), dealt to clients."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import torch

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.partition import Pairing, PartitionName
from pyg_fedgraph.datasets.idx import (
    IDX_IMAGES,
    IDX_LABELS,
    Fetch,
    IDXFile,
    download_idx,
    find_idx_files,
    read_idx,
)
from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.datasets.vision import IMAGE_ARGS_DOC, TestSet, federate_images

__all__ = ["fashion_mnist", "mnist", "read_mnist", "MNISTArrays", "DEBIAN_FASHION_MNIST"]

#: Where Debian's ``dataset-fashion-mnist`` package installs the four files.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
          "t10k-labels-idx1-ubyte")


@dataclass(frozen=True)
class _Variant:
    title: str
    torchvision_folder: str
    system_folders: tuple[Path, ...]
    mirrors: tuple[str, ...]
    files: tuple[IDXFile, ...]
    how_to_get: str


# md5: of the published .gz files (Fashion-MNIST: the table of its README;
# MNIST: as recorded by the mirrors). sha256: of the decompressed IDX data, so
# that a re-compressed copy (Debian's) has the same identity.
_VARIANTS = {
    "fashion-mnist": _Variant(
        title="Fashion-MNIST", torchvision_folder="FashionMNIST",
        system_folders=(DEBIAN_FASHION_MNIST,),
        mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                 "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/"
                 "data/fashion/"),
        files=(
            IDXFile(_NAMES[0], "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                    "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
            IDXFile(_NAMES[1], "25c81989df183df01b3e8a0aad5dffbe",
                    "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
            IDXFile(_NAMES[2], "bef4ecab320f06d8554ea6380940ec79",
                    "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
            IDXFile(_NAMES[3], "bb300cfdad3c16e7a12a480ee83cd310",
                    "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
        ),
        how_to_get="install them with 'apt-get install dataset-fashion-mnist' (Debian, "
                   f"into {DEBIAN_FASHION_MNIST}), or pass root=DIR and download=True"),
    "mnist": _Variant(
        title="MNIST", torchvision_folder="MNIST", system_folders=(),
        mirrors=("http://yann.lecun.com/exdb/mnist/",
                 "https://ossci-datasets.s3.amazonaws.com/mnist/"),
        files=(
            IDXFile(_NAMES[0], "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                    "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
            IDXFile(_NAMES[1], "d53e105ee54ea40749a09fcbcd1e9432",
                    "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
            IDXFile(_NAMES[2], "9fb629c4189551a2d022fa330f9573f3",
                    "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
            IDXFile(_NAMES[3], "ec29112dd5afa0611ce80d1b7f02629c",
                    "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
        ),
        how_to_get="pass root=DIR holding them, or root=DIR and download=True to fetch "
                   "them (no system package ships MNIST)"),
}
Variant = Literal["fashion-mnist", "mnist"]


class MNISTArrays(NamedTuple):
    r"""The official split of an MNIST-like data set: uint8 images
    :math:`(n, 28, 28)` and int64 labels :math:`(n,)`, plus the folder read."""
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    folder: Path


def _folders(variant: _Variant, root: str | Path | None) -> list[Path]:
    if root is None:
        return list(variant.system_folders)
    root = Path(root)
    return [root, root / variant.torchvision_folder / "raw"]


def _read_pair(images_path: Path, labels_path: Path, title: str
               ) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(images_path, IDX_IMAGES)
    labels = read_idx(labels_path, IDX_LABELS).astype(np.int64)
    if images.shape[1:] != (28, 28):
        raise ValueError(f"{images_path} holds {images.shape[1]}x{images.shape[2]} images; "
                         f"{title} images are 28x28: replace it with the published file")
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images_path} holds {images.shape[0]} images but {labels_path} "
                         f"holds {labels.shape[0]} labels: the files do not belong together; "
                         f"replace them with the published pair")
    if labels.size and int(labels.max()) > 9:
        raise ValueError(f"{labels_path} holds label {int(labels.max())} outside 0..9, so it "
                         f"is not a label file of {title}; replace it with the published one")
    return images, labels


def read_mnist(root: str | Path | None = None, variant: Variant = "fashion-mnist", *,
               download: bool = False, fetch: Fetch | None = None) -> MNISTArrays:
    r"""Reads the official train and test sets of MNIST or Fashion-MNIST from
    their four IDX files (raw or ``.gz``, standard names such as
    ``train-images-idx3-ubyte.gz``).

    Files are looked for in ``root`` itself, then in torchvision's layout
    ``<root>/FashionMNIST/raw`` (``<root>/MNIST/raw``); without ``root``, in
    the folder of Debian's ``dataset-fashion-mnist`` package
    (:data:`DEBIAN_FASHION_MNIST`). Each file's magic number, its size
    against its header, the image size (28x28), the image / label counts and
    the label range (0..9) are checked.

    Args:
        root (str or Path, optional): a folder holding the files (or
            receiving them with ``download=True``). (default: :obj:`None`)
        variant (str, optional): ``"fashion-mnist"`` or ``"mnist"``.
            (default: :obj:`"fashion-mnist"`)
        download (bool, optional): fetch missing files into ``root`` from the
            official URLs (then a mirror), verifying the md5 of each archive
            and the sha256 of its data. (default: :obj:`False`)
        fetch (callable, optional): ``fetch(url, dest)`` downloader.
            (default: :mod:`urllib.request`)

    Raises:
        FileNotFoundError: if no folder holds the four files (the message
            says how to get them).
        ValueError: naming the file, if a file is not a valid IDX file of
            the data set.
    """
    if variant not in _VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {sorted(_VARIANTS)}")
    spec = _VARIANTS[variant]
    if download and root is None:
        raise ValueError(f"download=True needs root=DIR, the folder to write the {spec.title} "
                         f"files into")
    folders = _folders(spec, root)
    paths, missing = find_idx_files(_NAMES, folders)
    if paths is None and download and root is not None:
        paths = download_idx(root, spec.files, spec.mirrors, fetch)
    if paths is None:
        where = ("in " + ", ".join(str(f) for f in folders) if folders
                 else "found: root=None and no system folder holds them")
        detail = f" ({missing})" if missing else ""
        raise FileNotFoundError(f"no {spec.title} IDX files ({', '.join(_NAMES)}, raw or .gz) "
                                f"{where}{detail}; {spec.how_to_get}")
    train = _read_pair(paths[_NAMES[0]], paths[_NAMES[1]], spec.title)
    test = _read_pair(paths[_NAMES[2]], paths[_NAMES[3]], spec.title)
    return MNISTArrays(*train, *test, folder=paths[_NAMES[0]].parent)


def _federate(variant: Variant, root: str | Path | None, download: bool, fetch: Fetch | None,
              **options) -> FederatedDataset:
    arrays = read_mnist(root, variant, download=download, fetch=fetch)
    x = torch.from_numpy(np.concatenate([arrays.train_images, arrays.test_images])).unsqueeze(1)
    y = torch.from_numpy(np.concatenate([arrays.train_labels, arrays.test_labels]))
    title = _VARIANTS[variant].title
    return federate_images(variant, x, y, 10, source=f"{title} IDX files in {arrays.folder}",
                           num_official_train=int(arrays.train_labels.size), **options)


@register_dataset("fashion-mnist")
def fashion_mnist(root: str | Path | None = None, num_clients: int = 10,
                  partition: PartitionName = "pathological", classes_per_client: int = 2,
                  beta: float = 0.5, seed: int = 0,
                  fractions: Sequence[float] | None = None, download: bool = False,
                  min_size: int = 10, num_groups: int = 5, iid_share: float = 0.2,
                  pairing: Pairing = "random", max_train_per_client: int | None = None,
                  max_val_per_client: int | None = None,
                  max_test_per_client: int | None = None, test_set: TestSet = "client",
                  fetch: Fetch | None = None) -> FederatedDataset:
    return _federate("fashion-mnist", root, download, fetch, num_clients=num_clients,
                     partition=partition, classes_per_client=classes_per_client, beta=beta,
                     seed=seed, fractions=fractions, min_size=min_size, num_groups=num_groups,
                     iid_share=iid_share, pairing=pairing,
                     max_train_per_client=max_train_per_client,
                     max_val_per_client=max_val_per_client,
                     max_test_per_client=max_test_per_client, test_set=test_set)


@register_dataset("mnist")
def mnist(root: str | Path | None = None, num_clients: int = 10,
          partition: PartitionName = "pathological", classes_per_client: int = 2,
          beta: float = 0.5, seed: int = 0, fractions: Sequence[float] | None = None,
          download: bool = False, min_size: int = 10, num_groups: int = 5,
          iid_share: float = 0.2, pairing: Pairing = "random",
          max_train_per_client: int | None = None, max_val_per_client: int | None = None,
          max_test_per_client: int | None = None, test_set: TestSet = "client",
          fetch: Fetch | None = None) -> FederatedDataset:
    return _federate("mnist", root, download, fetch, num_clients=num_clients,
                     partition=partition, classes_per_client=classes_per_client, beta=beta,
                     seed=seed, fractions=fractions, min_size=min_size, num_groups=num_groups,
                     iid_share=iid_share, pairing=pairing,
                     max_train_per_client=max_train_per_client,
                     max_val_per_client=max_val_per_client,
                     max_test_per_client=max_test_per_client, test_set=test_set)


_PIXELS = r"""Pixels are scaled to :math:`[0, 1]` and not standardized:

    .. math::
        \mathbf{x} = \mathbf{p} / 255 .

    pFedGraph's released code has data loaders for CIFAR only (standardized
    with per-channel mean and std, plus crop / flip augmentation) and
    pFedGAT's code is not public; NIID-Bench (Li et al., 2022), whose
    partitions and simple CNN pFedGraph's code follows, feeds MNIST-like
    images as :math:`[0, 1]` tensors, so no mean / std is applied here."""
_ROOT = """a folder holding the four IDX files (raw or
            ``.gz``), directly or in torchvision's ``<root>/{tv}/raw``;
            :obj:`None` looks in {system}. (default: :obj:`None`)"""
_RAISES = """        FileNotFoundError: if the files are not found (the message says how
            to get them).
        ValueError: naming the file, if a file is not a valid {title}
            IDX file, or a download fails its checksums."""
_FETCH = """
        fetch (callable, optional): ``fetch(url, dest)`` downloader for
            ``download=True``. (default: :mod:`urllib.request`)"""


def _doc(title: str, variant: _Variant, system: str) -> str:
    return title + IMAGE_ARGS_DOC.format(
        pixels=_PIXELS, root_optional=", optional",
        root=_ROOT.format(tv=variant.torchvision_folder, system=system), cpc="2",
        download="""fetch missing files into ``root`` from the
            official URLs (then a mirror), checking md5 and sha256.""",
        extra_args=_FETCH, shape="(1, 28, 28)", raises=_RAISES.format(title=variant.title))


fashion_mnist.__doc__ = _doc(r"""The Fashion-MNIST data set (Xiao et al., 2017; 70,000 grey
    :math:`28 \times 28` images of 10 kinds of clothing), read from its IDX
    files, dealt to clients (pFedGraph and pFedGAT, Sec. 4.1).
""", _VARIANTS["fashion-mnist"],
    "Debian's folder\n            ``/usr/share/datasets/fashion-mnist``")
mnist.__doc__ = _doc(r"""The MNIST data set (LeCun et al., 1998; 70,000 grey
    :math:`28 \times 28` images of handwritten digits), read from its IDX
    files, dealt to clients.
""", _VARIANTS["mnist"], "no folder (no system package\n            ships MNIST)")
