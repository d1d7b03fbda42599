"""Planetoid's Cora, CiteSeer and PubMed: the reader against PyG's on files in
the published format, crafted pickles refused, missing files, downloads with
checksums, and the real Cora and CiteSeer when the shared copies are present."""
import hashlib
import logging
import pickle
import shutil
import warnings

import numpy as np
import pytest
import torch
from planetoid_files import (
    PLANETOID,
    SUFFIXES,
    Exploit,
    globals_of,
    make_planetoid,
    py2_csr,
    py2_dumps,
    write_planetoid,
)

from pyg_fedgraph.datasets import planetoid as planetoid_module
from pyg_fedgraph.datasets import read_planetoid
from pyg_fedgraph.datasets.planetoid import (
    PLANETOID_FILES,
    PLANETOID_URL,
    PlanetoidFile,
    download_planetoid,
    git_blob_sha1,
)
from pyg_fedgraph.transforms import undirected_edges

needs_shared = pytest.mark.skipif(
    not (PLANETOID / "ind.cora.x").is_file(),
    reason="../shared/data/planetoid (Cora and CiteSeer raw files) not present")

PROPER = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}


def pyg_planetoid(root, name):
    r"""PyG's reading of ``<root>/<Name>/raw`` (plain pickle.load: only ever
    given files this test wrote or whose sha256 it checked)."""
    from torch_geometric.datasets import Planetoid

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy.core / scipy.sparse.csr deprecations
        return Planetoid(str(root), PROPER[name])[0]


def assert_same_data(ours, theirs):
    assert sorted(ours.keys()) == sorted(theirs.keys())
    for key in theirs.keys():
        assert ours[key].dtype == theirs[key].dtype, key
        assert torch.equal(ours[key], theirs[key]), key


@pytest.mark.parametrize("name", ["pubmed", "cora", "citeseer"])
def test_small_files_in_the_published_format_read_as_pyg_reads_them(tmp_path, name):
    objects = make_planetoid(seed=len(name))
    raw = write_planetoid(tmp_path / PROPER[name] / "raw", name, objects)
    # The files carry exactly the globals of the published ones.
    assert globals_of((raw / f"ind.{name}.x").read_bytes()) == {
        "scipy.sparse.csr csr_matrix", "numpy.core.multiarray _reconstruct",
        "numpy ndarray", "numpy dtype"}
    assert globals_of((raw / f"ind.{name}.graph").read_bytes()) == {
        "collections defaultdict", "__builtin__ list"}

    data = read_planetoid(name.upper(), tmp_path)  # PyG's layout, any case
    assert_same_data(data, pyg_planetoid(tmp_path, name))
    assert_same_data(read_planetoid(name, raw), data)  # the files directly in root

    # By hand: labelled rows first, the test rows at the ids of test.index.
    num_all = objects["allx"].shape[0]
    assert data.num_nodes == num_all + 30
    assert torch.equal(data.x[:num_all], torch.from_numpy(objects["allx"].toarray()))
    first_test = objects["test.index"][0]
    assert torch.equal(data.x[first_test], torch.from_numpy(objects["tx"][[0]].toarray()[0]))
    assert data.y[first_test] == int(np.argmax(objects["ty"][0]))
    assert data.train_mask.sum() == 6 and data.val_mask[6:506].all()
    assert data.val_mask.sum() == 500 and data.test_mask.sum() == 30
    # No self loop, no duplicate, both directions of every listed edge.
    listed = {(min(u, v), max(u, v)) for u, vs in objects["graph"].items() for v in vs if u != v}
    assert data.edge_index.size(1) == 2 * len(listed)
    assert not (data.edge_index[0] == data.edge_index[1]).any()


def test_test_ids_without_a_row_are_zero_features_label_zero_as_pyg(tmp_path):
    objects = make_planetoid(gaps=(3, 11), seed=5)
    write_planetoid(tmp_path / "CiteSeer" / "raw", "citeseer", objects)
    data = read_planetoid("citeseer", tmp_path)
    assert_same_data(data, pyg_planetoid(tmp_path, "citeseer"))
    num_all = objects["allx"].shape[0]
    assert data.num_nodes == num_all + 32
    for gap in (3, 11):
        assert not data.x[num_all + gap].any() and data.y[num_all + gap] == 0
        assert not data.test_mask[num_all + gap]


def test_a_crafted_pickle_in_place_of_ind_cora_x_runs_no_code(tmp_path):
    folder = write_planetoid(tmp_path, "cora", make_planetoid())
    marker = tmp_path / "marker"
    for protocol in (0, 2, 5):
        (folder / "ind.cora.x").write_bytes(pickle.dumps(Exploit(marker), protocol=protocol))
        with pytest.raises(ValueError) as err:
            read_planetoid("cora", tmp_path)
        assert not marker.exists()
        message = str(err.value)
        assert "\n" not in message and str(folder / "ind.cora.x") in message
        assert "system" in message and "refusing" in message


def test_allowed_names_used_otherwise_are_refused(tmp_path):
    folder = write_planetoid(tmp_path, "cora", make_planetoid())
    # defaultdict with another factory than list.
    bad = py2_dumps(make_planetoid()["graph"]).replace(b"__builtin__\nlist", b"numpy\ndtype")
    (folder / "ind.cora.graph").write_bytes(bad)
    with pytest.raises(ValueError, match="ind.cora.graph is not .*default factory"):
        read_planetoid("cora", tmp_path)


def test_a_csr_matrix_with_inconsistent_arrays_is_refused(tmp_path):
    objects = make_planetoid()
    folder = write_planetoid(tmp_path, "cora", objects)
    for key, value, problem in [
            ("indices", lambda m: m.indices + 7, "column indices outside 0..6"),
            ("indptr", lambda m: m.indptr[::-1].copy(), "row pointers that do not rise"),
            ("data", lambda m: m.data.reshape(1, -1), "'data' is a 2-D float32 array"),
            ("_shape", lambda m: (6, "7"), "shape (6, '7')")]:
        matrix = py2_csr(objects["x"])
        matrix.__dict__[key] = value(objects["x"])
        (folder / "ind.cora.x").write_bytes(py2_dumps(matrix))
        with pytest.raises(ValueError) as err:
            read_planetoid("cora", tmp_path)
        message = str(err.value)
        assert "\n" not in message and problem in message
        assert message.startswith(f"{folder / 'ind.cora.x'} is not a Planetoid x pickle")


def test_files_that_do_not_fit_together_give_one_line(tmp_path):
    objects = make_planetoid()
    objects["ty"] = objects["ty"][:-1]
    write_planetoid(tmp_path, "pubmed", objects)
    with pytest.raises(ValueError, match=r"ind.pubmed.tx has 30 rows but .*ind.pubmed.ty has 29"):
        read_planetoid("pubmed", tmp_path)


def test_missing_files_say_which_where_and_how_to_get_them(tmp_path):
    with pytest.raises(ValueError) as err:
        read_planetoid("pubmed", tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert f"PubMed raw files missing in {tmp_path}: ind.pubmed.x" in message
    assert "download=True" in message and PLANETOID_URL in message
    # A partial folder names what it lacks only.
    objects = make_planetoid()
    folder = write_planetoid(tmp_path / "PubMed" / "raw", "pubmed", objects)
    (folder / "ind.pubmed.allx").unlink()
    with pytest.raises(ValueError, match=r"missing in .*: ind.pubmed.allx \(also"):
        read_planetoid("pubmed", tmp_path)
    with pytest.raises(ValueError, match="unknown Planetoid data set 'reddit'"):
        read_planetoid("reddit", tmp_path)


def test_git_blob_id_is_the_one_git_computes():
    # `printf 'hello\n' | git hash-object --stdin`
    assert git_blob_sha1(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert git_blob_sha1(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def _fixture_table(folder, name, git_only=("allx",)):
    r"""Checksums of the files in ``folder``, as the module keeps them: sha256
    for all but ``git_only``, which are checked by their git blob id."""
    table = {}
    for suffix in SUFFIXES:
        data = (folder / f"ind.{name}.{suffix}").read_bytes()
        table[suffix] = PlanetoidFile(git_blob_sha1(data), None if suffix in git_only
                                      else hashlib.sha256(data).hexdigest())
    return table


def test_download_keeps_only_files_whose_checksums_match(tmp_path, monkeypatch, caplog):
    source = write_planetoid(tmp_path / "published", "pubmed", make_planetoid())
    monkeypatch.setitem(PLANETOID_FILES, "pubmed", _fixture_table(source, "pubmed"))
    fetched = []

    def fetch(url, dest):
        fetched.append(url)
        shutil.copyfile(source / url.rsplit("/", 1)[1], dest)

    root = tmp_path / "root"
    with caplog.at_level(logging.INFO, logger=planetoid_module.__name__):
        data = read_planetoid("PubMed", root, download=True, fetch=fetch)
    assert fetched == [f"{PLANETOID_URL}/ind.pubmed.{s}" for s in SUFFIXES]
    assert "git blob id verified" in caplog.text  # allx: no sha256 known
    assert_same_data(data, read_planetoid("pubmed", source))
    assert sorted(p.name for p in root.iterdir()) == sorted(f"ind.pubmed.{s}" for s in SUFFIXES)

    # Present files are not fetched again.
    fetched.clear()
    read_planetoid("pubmed", root, download=True, fetch=fetch)
    assert fetched == []

    # A partial folder in PyG's layout gets what it lacks, there.
    pyg_raw = tmp_path / "pyg" / "PubMed" / "raw"
    shutil.copytree(source, pyg_raw)
    (pyg_raw / "ind.pubmed.allx").unlink()
    fetched.clear()
    assert_same_data(read_planetoid("pubmed", tmp_path / "pyg", download=True, fetch=fetch),
                     data)
    assert fetched == [f"{PLANETOID_URL}/ind.pubmed.allx"]
    assert (pyg_raw / "ind.pubmed.allx").is_file()

    # A tampered allx (checked by git blob id) and a tampered graph (sha256).
    for suffix, check in [("allx", "git blob id"), ("graph", "sha256")]:
        bad_root = tmp_path / f"bad-{suffix}"

        def tampered(url, dest, suffix=suffix):
            fetch(url, dest)
            if url.endswith(f".{suffix}"):
                dest.write_bytes(dest.read_bytes() + b"\0")

        with pytest.raises(ValueError) as err:
            read_planetoid("pubmed", bad_root, download=True, fetch=tampered)
        assert "\n" not in str(err.value)
        assert f"ind.pubmed.{suffix} has {check}" in str(err.value)
        assert not (bad_root / f"ind.pubmed.{suffix}").exists()
        assert not list(bad_root.glob("*.part"))


def test_download_failure_is_one_line(tmp_path):
    def offline(url, dest):
        raise OSError("[Errno -3] Temporary failure in name resolution")

    with pytest.raises(ValueError, match=r"could not download .*ind.cora.x into .*name "
                                         r"resolution$"):
        download_planetoid("cora", tmp_path, fetch=offline)
    assert not list(tmp_path.iterdir())


def test_files_other_than_the_published_ones_are_read_with_a_warning(tmp_path, caplog):
    write_planetoid(tmp_path, "cora", make_planetoid())
    with caplog.at_level(logging.WARNING, logger=planetoid_module.__name__):
        read_planetoid("cora", tmp_path)
    assert "ind.cora.x" in caplog.text and "differ from the published files" in caplog.text


# The real files (shared copies of the published ones).

def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.real_data
@needs_shared
@pytest.mark.parametrize("name, nodes, edges, features, classes", [
    ("cora", 2708, 5278, 1433, 7), ("citeseer", 3327, 4552, 3703, 6)])
def test_real_files_have_the_published_sizes_and_agree_with_pyg(tmp_path, name, nodes, edges,
                                                                  features, classes, caplog):
    with caplog.at_level(logging.WARNING, logger=planetoid_module.__name__):
        data = read_planetoid(name, PLANETOID)
    assert caplog.text == ""  # the published files, checksums equal
    assert data.x.shape == (nodes, features) and data.y.max() + 1 == classes
    assert undirected_edges(data.edge_index, nodes).size(1) == edges
    assert data.edge_index.size(1) == 2 * edges

    # PyG unpickles with plain pickle: hand it only files whose sha256 we checked.
    raw = tmp_path / PROPER[name] / "raw"
    raw.mkdir(parents=True)
    for suffix in SUFFIXES:
        copy = raw / f"ind.{name}.{suffix}"
        shutil.copyfile(PLANETOID / copy.name, copy)
        assert _sha256(copy) == PLANETOID_FILES[name][suffix].sha256
    assert_same_data(data, pyg_planetoid(tmp_path, name))


@pytest.mark.real_data
@needs_shared
def test_git_blob_ids_of_the_table_are_those_of_the_real_files():
    for name in ("cora", "citeseer"):
        for suffix in SUFFIXES:
            data = (PLANETOID / f"ind.{name}.{suffix}").read_bytes()
            assert git_blob_sha1(data) == PLANETOID_FILES[name][suffix].git_sha1


@pytest.mark.real_data
@needs_shared
def test_download_of_cora_checks_sha256(tmp_path):
    def fetch(url, dest):
        shutil.copyfile(PLANETOID / url.rsplit("/", 1)[1], dest)

    folder = download_planetoid("cora", tmp_path, fetch=fetch)
    assert folder == tmp_path
    assert all(_sha256(tmp_path / f"ind.cora.{s}") == PLANETOID_FILES["cora"][s].sha256
               for s in SUFFIXES)

    def corrupt(url, dest):
        fetch(url, dest)
        if url.endswith(".ty"):
            dest.write_bytes(dest.read_bytes()[:-1])

    with pytest.raises(ValueError, match=r"ind.cora.ty has sha256 [0-9a-f]{64}, not 41f5ac"):
        download_planetoid("cora", tmp_path / "other", fetch=corrupt)
