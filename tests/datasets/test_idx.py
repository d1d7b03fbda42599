import gzip
import hashlib
import re

import numpy as np
import pytest
from idx_files import NAMES, idx_bytes, write_idx

from pyg_fedgraph.datasets.idx import (
    IDX_IMAGES,
    IDX_LABELS,
    IDXFile,
    download_idx,
    find_idx_files,
    read_idx,
)

IMAGES = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
LABELS = np.array([3, 1, 4], dtype=np.uint8)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)


# ------------------------------------------------------------------ read_idx
@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_raw_and_gzip(tmp_path, compress):
    # gzip is recognized by content: the name need not end with .gz.
    images = read_idx(write_idx(tmp_path / "img", IMAGES, compress), IDX_IMAGES)
    labels = read_idx(write_idx(tmp_path / "lab", LABELS, compress), IDX_LABELS)
    assert images.dtype == np.uint8 and images.shape == (2, 3, 4)
    assert np.array_equal(images, IMAGES) and np.array_equal(labels, LABELS)
    images[0, 0, 0] = 7  # writable, not a view of the file's bytes


def test_read_idx_header_bytes_by_hand(tmp_path):
    # magic 0x00000801 (2049), one dimension: 2 labels, then 5 and 9.
    path = tmp_path / "lab"
    path.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 2, 5, 9]))
    assert read_idx(path, IDX_LABELS).tolist() == [5, 9]


def test_read_idx_wrong_kind_names_the_file(tmp_path):
    path = write_idx(tmp_path / "labels-as-images", LABELS)
    with pytest.raises(ValueError, match=re.escape(
            f"{path} is not an IDX images file (magic number 0x00000801, expected 0x00000803)")):
        read_idx(path, IDX_IMAGES)


@pytest.mark.parametrize("content,what", [
    (PNG, "magic number 0x89504e47"),
    (b"garbage bytes, not an IDX file", "magic number 0x67617262"),
    (b"\x00\x00", "2 bytes only"),
])
def test_read_idx_foreign_file_names_the_file(tmp_path, content, what):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"{path} is not an IDX images file ({what}")):
        read_idx(path, IDX_IMAGES)


def test_read_idx_truncated_and_trailing_bytes(tmp_path):
    data = idx_bytes(IMAGES)  # 16-byte header + 24 bytes
    path = tmp_path / "img"
    path.write_bytes(data[:-5])
    with pytest.raises(ValueError, match=re.escape(
            f"{path} is truncated: its header promises 2 x 3 x 4 bytes of images (40 bytes in "
            f"all) but it holds 35")):
        read_idx(path, IDX_IMAGES)
    path.write_bytes(data + b"\x00")
    with pytest.raises(ValueError, match=re.escape(f"{path} has trailing bytes")):
        read_idx(path, IDX_IMAGES)
    path.write_bytes(data[:10])  # the header itself is cut
    with pytest.raises(ValueError, match=re.escape(f"{path} is truncated: its 3-dimensional "
                                                   f"IDX header needs 16 bytes")):
        read_idx(path, IDX_IMAGES)


def test_read_idx_truncated_gzip_names_the_file(tmp_path):
    path = tmp_path / "img.gz"
    path.write_bytes(gzip.compress(idx_bytes(IMAGES))[:-10])
    with pytest.raises(ValueError, match=re.escape(f"{path} is not a readable gzip file")):
        read_idx(path, IDX_IMAGES)


def test_read_idx_bad_magic_argument(tmp_path):
    with pytest.raises(ValueError, match="magic must be 2051 .* or 2049"):
        read_idx(write_idx(tmp_path / "x", LABELS), 2050)


# ------------------------------------------------------------------ find_idx_files
def test_find_idx_files_order_and_preference(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for name in NAMES[:2]:
        (a / name).write_bytes(b"")
    for name in NAMES:
        (b / f"{name}.gz").write_bytes(b"")
    (b / NAMES[0]).write_bytes(b"")  # raw and .gz: the raw file wins
    paths, missing = find_idx_files(NAMES, [tmp_path / "absent", a, b])
    assert missing == ""
    assert paths == {NAMES[0]: b / NAMES[0], **{n: b / f"{n}.gz" for n in NAMES[1:]}}
    paths, missing = find_idx_files(NAMES, [tmp_path / "absent", a])
    assert paths is None
    assert missing == f"{a} lacks {NAMES[2]}[.gz], {NAMES[3]}[.gz]"


# ------------------------------------------------------------------ download_idx
def published(name, array):
    archive = gzip.compress(idx_bytes(array))
    return archive, IDXFile(name, hashlib.md5(archive).hexdigest(),
                            hashlib.sha256(idx_bytes(array)).hexdigest())


class Server:
    r"""An offline stand-in for the network: URL -> bytes, recording requests."""

    def __init__(self, files):
        self.files, self.requests = dict(files), []

    def __call__(self, url, dest):
        self.requests.append(url)
        if url not in self.files:
            raise OSError(f"HTTP Error 404: {url}")
        dest.write_bytes(self.files[url])


def test_download_idx_verifies_and_writes(tmp_path):
    img, img_file = published("img-idx3-ubyte", IMAGES)
    lab, lab_file = published("lab-idx1-ubyte", LABELS)
    server = Server({"https://one/img-idx3-ubyte.gz": img, "https://two/lab-idx1-ubyte.gz": lab})
    paths = download_idx(tmp_path / "root", [img_file, lab_file], ["https://one/", "https://two/"],
                         fetch=server)
    assert paths == {"img-idx3-ubyte": tmp_path / "root" / "img-idx3-ubyte.gz",
                     "lab-idx1-ubyte": tmp_path / "root" / "lab-idx1-ubyte.gz"}
    assert np.array_equal(read_idx(paths["lab-idx1-ubyte"], IDX_LABELS), LABELS)
    # The label file was missing on the first mirror, found on the second.
    assert server.requests == ["https://one/img-idx3-ubyte.gz", "https://one/lab-idx1-ubyte.gz",
                               "https://two/lab-idx1-ubyte.gz"]
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == [
        "img-idx3-ubyte.gz", "lab-idx1-ubyte.gz"]
    # Files already there are not fetched again.
    again = Server({})
    assert download_idx(tmp_path / "root", [img_file, lab_file], ["https://one/"],
                        fetch=again) == paths
    assert again.requests == []


def test_download_idx_tampered_file_leaves_nothing(tmp_path):
    img, img_file = published("img-idx3-ubyte", IMAGES)
    tampered = gzip.compress(idx_bytes(IMAGES[:, ::-1]))
    server = Server({"https://bad/img-idx3-ubyte.gz": tampered,
                     "https://good/img-idx3-ubyte.gz": img})
    # A mirror serving other bytes is skipped for the next one.
    path = download_idx(tmp_path, [img_file], ["https://bad/", "https://good/"], fetch=server)
    assert np.array_equal(read_idx(path["img-idx3-ubyte"], IDX_IMAGES), IMAGES)
    (tmp_path / "img-idx3-ubyte.gz").unlink()
    bad_md5 = hashlib.md5(tampered).hexdigest()
    with pytest.raises(ValueError, match=re.escape(
            f"could not download a verified img-idx3-ubyte.gz into {tmp_path}: "
            f"https://bad/img-idx3-ubyte.gz: md5 {bad_md5} of https://bad/img-idx3-ubyte.gz is "
            f"not the published {img_file.md5}; https://none/img-idx3-ubyte.gz: HTTP Error 404")):
        download_idx(tmp_path, [img_file], ["https://bad/", "https://none/"], fetch=server)
    assert list(tmp_path.iterdir()) == []


def test_download_idx_checks_the_decompressed_data(tmp_path):
    # Right archive md5 but a wrong sha256 of the data: refused too.
    img, img_file = published("img-idx3-ubyte", IMAGES)
    wrong = IDXFile(img_file.name, img_file.md5, "0" * 64)
    with pytest.raises(ValueError, match="sha256 [0-9a-f]{64} of the IDX data in "
                                         "https://one/img-idx3-ubyte.gz is not the expected 0+"):
        download_idx(tmp_path, [wrong], ["https://one/"],
                     fetch=Server({"https://one/img-idx3-ubyte.gz": img}))
    assert list(tmp_path.iterdir()) == []


def test_download_idx_interrupted_fetch_leaves_nothing(tmp_path):
    _, img_file = published("img-idx3-ubyte", IMAGES)

    def interrupted(url, dest):
        dest.write_bytes(b"partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        download_idx(tmp_path, [img_file], ["https://one/"], fetch=interrupted)
    assert list(tmp_path.iterdir()) == []
