"""Tiny MNIST-like data sets written in the IDX format, for loader tests."""
import gzip
import struct

import numpy as np

NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte")


def idx_bytes(array):
    # Magic 0x0000 08 <ndim> (unsigned bytes), big-endian uint32 dims, then the data.
    array = np.asarray(array)
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx(path, array, compress=False):
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def labelled_images(per_class):
    # Every pixel of an image equals 20 * its label: alignment is checkable.
    labels = np.repeat(np.arange(10), per_class)
    images = np.broadcast_to((20 * labels)[:, None, None], (labels.size, 28, 28))
    return np.ascontiguousarray(images), labels


def write_mnist(folder, per_class_train=4, per_class_test=2, compress=False):
    r"""Writes the four files (``.gz`` names when ``compress``) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if compress else ""
    for prefix, per_class in (("train", per_class_train), ("t10k", per_class_test)):
        images, labels = labelled_images(per_class)
        write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images, compress)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels, compress)
    return folder
