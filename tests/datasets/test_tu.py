"""read_tu: the TUDataset text format read by hand-checked rules, in agreement
with PyG's TUDataset, with one line per malformed file; download_tu with
checksums."""
import hashlib
import logging
import shutil

import pytest
import torch
from torch_geometric.datasets import TUDataset
from tu_files import SHARED_TU, TOY, write_tu, zip_folder

from pyg_fedgraph.datasets import (
    TU_SHA256,
    TU_URL,
    check_tu_names,
    download_tu,
    known_tu_names,
    read_tu,
)

REAL = ("MUTAG", "PROTEINS", "ENZYMES", "AIDS")


def needs_shared(name):
    return pytest.mark.skipif(not (SHARED_TU / name).is_dir(),
                              reason=f"../shared/data/tu/{name} not present")


def assert_same_graphs(ours, theirs, edge_attr=False):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a.x, b.x)
        assert torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.y, b.y)
        if edge_attr:
            assert torch.equal(a.edge_attr, b.edge_attr)


def pyg(tmp_path, name, source, **flags):
    r"""PyG's TUDataset on a copy of ``source`` in its ``<root>/<name>/raw``."""
    root = tmp_path / "pyg"
    if not (root / name / "raw").is_dir():
        shutil.copytree(source, root / name / "raw")
    return TUDataset(str(root), name, **flags)


# ------------------------------------------------------------------ by hand
def test_toy_by_hand(tmp_path):
    data = read_tu("TOY", write_tu(tmp_path))
    assert len(data) == 3 and repr(data) == "TOY(3)"
    assert data.num_classes == 2 and data.y.tolist() == [0, 1, 1]  # -1, 1, 1 in sorted order
    assert (data.num_node_labels, data.num_node_attributes, data.num_node_features) == (3, 0, 3)
    g1, g2, g3 = data
    # labels 1 2 1 | 2 2 | 3 1, shifted to start at 0, one column per value up to the maximum
    assert g1.x.tolist() == [[1, 0, 0], [0, 1, 0], [1, 0, 0]]
    assert g2.x.tolist() == [[0, 1, 0], [0, 1, 0]]
    assert g3.x.tolist() == [[0, 0, 1], [1, 0, 0]]
    assert g1.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    assert g2.edge_index.shape == (2, 0) and g2.num_nodes == 2
    # graph 3: the self-loop dropped, the duplicate 6-7 merged, numbering local to the graph
    assert g3.edge_index.tolist() == [[0, 1], [1, 0]]
    assert g1.edge_attr is None and g1.y.tolist() == [0]


def test_a_last_graph_without_edges_is_kept(tmp_path):
    # PyG's reader cuts its edge slices at the last graph that has an edge, so it returns one
    # graph fewer here; every graph of the labels file is kept.
    files = dict(TOY, A=TOY["A"][:4], edge_labels=TOY["edge_labels"][:4])
    data = read_tu("TOY", write_tu(tmp_path, files=files), use_edge_labels=True)
    assert len(data) == 3 and data[2].edge_index.shape == (2, 0)
    assert data[2].edge_attr.shape == (0, 2) and data[2].y.tolist() == [1]


def test_toy_node_attributes_and_edge_labels_only_when_asked(tmp_path):
    data = read_tu("TOY", write_tu(tmp_path), use_node_attr=True, use_edge_labels=True)
    assert (data.num_node_attributes, data.num_node_features, data.num_edge_labels) == (1, 4, 3)
    assert data[0].x.tolist() == [[0.5, 1, 0, 0], [1.5, 0, 1, 0], [-2.0, 1, 0, 0]]
    # edge labels 0 0 1 1 | 2 2 (0) 1: the merged duplicate 6-7 sums its labels 2 and 1
    assert data[0].edge_attr.tolist() == [[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0]]
    assert data[1].edge_attr.shape == (0, 3)
    assert data[2].edge_attr.tolist() == [[0, 1, 1], [0, 0, 1]]
    # Without the flags the optional files are not even read.
    files = dict(TOY, edge_labels=["x"] * 8, node_attributes=["y"] * 7)
    plain = read_tu("TOY", write_tu(tmp_path / "bad", files=files))
    assert plain.num_node_features == 3 and plain[0].edge_attr is None


def test_a_dataset_without_node_labels_has_zero_width_features(tmp_path):
    data = read_tu("TOY", write_tu(tmp_path, skip=("node_labels",)))
    assert data.num_node_features == 0 and data[0].x.shape == (3, 0)
    with_attr = read_tu("TOY", tmp_path, use_node_attr=True)
    assert with_attr[0].x[:, 0].tolist() == [0.5, 1.5, -2.0]


@pytest.mark.parametrize("flags", [{}, {"use_node_attr": True}])
def test_toy_agrees_with_pyg(tmp_path, flags):
    folder = write_tu(tmp_path / "files")
    ours = read_tu("TOY", folder, use_edge_labels=True, **flags)
    # PyG always adds edge labels to edge_attr.
    assert_same_graphs(ours, pyg(tmp_path, "TOY", folder, **flags), edge_attr=True)


@pytest.mark.parametrize("layout", ["flat", "named", "pyg"])
def test_layouts(tmp_path, layout):
    folder = {"flat": tmp_path, "named": tmp_path / "TOY", "pyg": tmp_path / "TOY" / "raw"}[layout]
    write_tu(folder)
    assert read_tu("TOY", tmp_path).folder == folder


# ------------------------------------------------------------------ missing and malformed files
def test_missing_files_one_line_saying_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        read_tu("MUTAG", tmp_path)
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "MUTAG" / "raw") in message
    assert "MUTAG_A.txt" in message and "download=True" in message
    assert f"{TU_URL}/MUTAG.zip" in message


def test_an_incomplete_folder_says_what_it_lacks(tmp_path):
    write_tu(tmp_path / "TOY", skip=("graph_labels",))
    with pytest.raises(FileNotFoundError, match=r"TOY lacks TOY_graph_labels\.txt"):
        read_tu("TOY", tmp_path)


def test_a_misspelled_name_is_unknown_with_the_closest_name(tmp_path):
    with pytest.raises(FileNotFoundError,
                       match="unknown TU dataset 'MUTAGG'.*did you mean 'MUTAG'"):
        read_tu("MUTAGG", tmp_path)
    with pytest.raises(ValueError, match="is not a TU dataset name"):
        read_tu("../MUTAG", tmp_path)


def _with(part, index, line):
    lines = list(TOY[part])
    if line is None:
        del lines[index]
    elif index == len(lines):
        lines.append(line)
    else:
        lines[index] = line
    return dict(TOY, **{part: lines})


MALFORMED = [
    # (part, 0-based line, new text or None to delete, flags, expected message)
    ("A", 2, "2, 3, 4", {}, r"TOY_A\.txt, line 3: 3 columns, expected 2 \(in this file's format"),
    ("A", 1, "2, x", {}, r"TOY_A\.txt, line 2: 'x' is not a 64-bit integer"),
    ("A", 0, "1, 9", {}, r"TOY_A\.txt, line 1: node 9 out of range 1\.\.7"),
    ("A", 0, "1, 4", {}, r"TOY_A\.txt, line 1: edge 1, 4 joins graph 1 and graph 2"),
    ("graph_indicator", 6, "4", {},
     r"TOY_graph_indicator\.txt, line 7: graph 4 out of range 1\.\.3"),
    ("graph_indicator", 5, "1", {},
     r"TOY_graph_indicator\.txt, line 6: graph 1 after graph 2; nodes must be listed"),
    ("graph_indicator", 1, "", {}, r"TOY_graph_indicator\.txt, line 2: an empty field"),
    ("graph_labels", 3, "1", {}, r"TOY_graph_labels\.txt has 4 lines but "
     r"TOY_graph_indicator\.txt has nodes for 3 graphs: line 4 is the first one too many"),
    ("graph_labels", 2, None, {},
     r"TOY_graph_indicator\.txt, line 6: graph 3 out of range 1\.\.2 \(TOY_graph_labels"),
    ("node_labels", 6, None, {}, r"TOY_node_labels\.txt has 6 lines but "
     r"TOY_graph_indicator\.txt lists 7 nodes: line 7 is missing"),
    ("node_labels", 2, "2.5", {}, r"TOY_node_labels\.txt, line 3: '2\.5' is not a 64-bit integer"),
    ("node_labels", 4, "1" + "0" * 20, {}, r"TOY_node_labels\.txt, line 5: '10+' is not a 64-bit"),
    ("node_attributes", 1, "abc", {"use_node_attr": True},
     r"TOY_node_attributes\.txt, line 2: 'abc' is not a number"),
    ("node_attributes", 2, "1, 2", {"use_node_attr": True},
     r"TOY_node_attributes\.txt, line 3: 2 columns, expected 1 \(as on line 1\)"),
    ("edge_labels", 7, None, {"use_edge_labels": True}, r"TOY_edge_labels\.txt has 7 lines "
     r"but TOY_A\.txt lists 8 edges: line 8 is missing"),
]


@pytest.mark.parametrize("part,index,line,flags,expected", MALFORMED)
def test_a_malformed_file_is_one_line_naming_file_and_line(tmp_path, part, index, line, flags,
                                                           expected):
    folder = write_tu(tmp_path, files=_with(part, index, line))
    with pytest.raises(ValueError, match=expected) as err:
        read_tu("TOY", tmp_path, **flags)
    assert "\n" not in str(err.value) and str(folder) in str(err.value)


def test_an_empty_file(tmp_path):
    write_tu(tmp_path, files=dict(TOY, graph_labels=[""]))
    with pytest.raises(ValueError, match=r"TOY_graph_labels\.txt is empty"):
        read_tu("TOY", tmp_path)


# ------------------------------------------------------------------ the shared real files
@pytest.mark.real_data
@pytest.mark.parametrize("name", REAL)
def test_shared_files_have_the_checksums_of_the_module(name):
    if not (SHARED_TU / name).is_dir():
        pytest.skip(f"../shared/data/tu/{name} not present")
    for file, sha in TU_SHA256[name].items():
        assert hashlib.sha256((SHARED_TU / name / file).read_bytes()).hexdigest() == sha


# Published figures: graphs (README of ../shared/data and the TU collection), classes and
# node-feature widths as PyG reports them (its TUDataset docs: MUTAG 7 / 2, ENZYMES 3 / 6,
# PROTEINS 3 / 2; AIDS has 38 node labels), with use_node_attr=False / True.
KNOWN = {"MUTAG": (188, 2, 7, 7), "PROTEINS": (1113, 2, 3, 4), "ENZYMES": (600, 6, 3, 21),
         "AIDS": (2000, 2, 38, 42)}


@pytest.mark.real_data
@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_shared_datasets_agree_with_pyg(tmp_path, name):
    if not (SHARED_TU / name).is_dir():
        pytest.skip(f"../shared/data/tu/{name} not present")
    graphs, classes, width, width_attr = KNOWN[name]
    for use_node_attr, expected_width in ((False, width), (True, width_attr)):
        ours = read_tu(name, SHARED_TU, use_node_attr=use_node_attr, use_edge_labels=True)
        theirs = pyg(tmp_path, name, SHARED_TU / name, use_node_attr=use_node_attr)
        assert (len(ours), ours.num_classes, ours.num_node_features) == (
            len(theirs), theirs.num_classes, theirs.num_node_features)
        assert (len(ours), ours.num_classes, ours.num_node_features) == (
            graphs, classes, expected_width)
        assert_same_graphs(ours, theirs, edge_attr=theirs[0].edge_attr is not None)


# ------------------------------------------------------------------ download
def serving(archive):
    calls = []

    def fetch(url, dest):
        calls.append(url)
        dest.write_bytes(archive)
    return fetch, calls


def test_download_of_an_unknown_name_keeps_what_reads_cleanly(tmp_path, caplog):
    archive = zip_folder(write_tu(tmp_path / "src"), "TOY",
                         extra={"TOY/../../evil.txt": b"x", "TOY/notes.bin": b"y"})
    fetch, calls = serving(archive)
    with caplog.at_level(logging.WARNING, logger="pyg_fedgraph.datasets.tu"):
        data = read_tu("TOY", tmp_path / "root", download=True, fetch=fetch)
    assert calls == [f"{TU_URL}/TOY.zip"] and len(data) == 3
    raw = tmp_path / "root" / "TOY" / "raw"
    assert data.folder == raw
    assert sorted(p.name for p in raw.iterdir()) == sorted(f"TOY_{p}.txt" for p in TOY)
    assert sorted(p.name for p in (tmp_path / "root" / "TOY").iterdir()) == ["raw"]
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "root" / "evil.txt").exists()
    sha = hashlib.sha256((raw / "TOY_A.txt").read_bytes()).hexdigest()
    assert f"TOY_A.txt sha256={sha}" in caplog.text and "no known checksums" in caplog.text
    # Second read: found, not fetched again.
    read_tu("TOY", tmp_path / "root", download=True, fetch=fetch)
    assert len(calls) == 1


def test_download_of_an_unknown_name_that_does_not_read_keeps_nothing(tmp_path):
    fetch, _ = serving(zip_folder(write_tu(tmp_path / "src", files=_with("A", 0, "1, 99")), "TOY"))
    with pytest.raises(ValueError, match=r"TOY_A\.txt, line 1: node 99 out of range"):
        download_tu("TOY", tmp_path / "root", fetch=fetch)
    assert list((tmp_path / "root" / "TOY").iterdir()) == []


def test_download_with_wrong_checksums_keeps_nothing(tmp_path):
    # A toy archive served as MUTAG: MUTAG's known checksums reject it.
    toy = write_tu(tmp_path / "src", name="MUTAG")
    fetch, _ = serving(zip_folder(toy, "MUTAG"))
    with pytest.raises(ValueError, match=r"sha256 [0-9a-f]{64} of MUTAG_A\.txt in .*MUTAG\.zip "
                                         r"is not the expected") as err:
        read_tu("MUTAG", tmp_path / "root", download=True, fetch=fetch)
    assert "\n" not in str(err.value)
    assert list((tmp_path / "root" / "MUTAG").iterdir()) == []
    # Pinned checksums of the caller: one wrong digest is enough.
    fetch, _ = serving(zip_folder(write_tu(tmp_path / "toy"), "TOY"))
    with pytest.raises(ValueError, match=r"sha256 [0-9a-f]{64} of TOY_A\.txt .* not the expected "
                                         r"0{64}"):
        download_tu("TOY", tmp_path / "root", fetch=fetch, checksums={"TOY_A.txt": "0" * 64})


def test_download_with_pinned_checksums_keeps_only_the_pinned_files(tmp_path):
    folder = write_tu(tmp_path / "src")
    pins = {f"TOY_{p}.txt": hashlib.sha256((folder / f"TOY_{p}.txt").read_bytes()).hexdigest()
            for p in ("A", "graph_indicator", "graph_labels")}
    fetch, _ = serving(zip_folder(folder, "TOY"))
    raw = download_tu("TOY", tmp_path / "root", fetch=fetch, checksums=pins)
    assert sorted(p.name for p in raw.iterdir()) == sorted(pins)


@needs_shared("MUTAG")
def test_download_of_the_published_mutag_is_verified_and_kept(tmp_path):
    fetch, _ = serving(zip_folder(SHARED_TU / "MUTAG", "MUTAG"))
    data = read_tu("MUTAG", tmp_path, download=True, fetch=fetch)
    assert len(data) == 188 and data.folder == tmp_path / "MUTAG" / "raw"
    assert sorted(p.name for p in data.folder.iterdir()) == sorted(TU_SHA256["MUTAG"])


def test_download_failures_are_one_line(tmp_path):
    def offline(url, dest):
        raise OSError("network unreachable")
    with pytest.raises(ValueError, match=r"could not download .*/MUTAG\.zip \(network "
                                         r"unreachable\)"):
        download_tu("MUTAG", tmp_path, fetch=offline)
    fetch, _ = serving(b"not a zip")
    with pytest.raises(ValueError, match=r"MUTAG\.zip is not a zip archive"):
        download_tu("MUTAG", tmp_path, fetch=fetch)
    assert list((tmp_path / "MUTAG").iterdir()) == []


# ------------------------------------------------------------------ names
def test_check_tu_names(tmp_path):
    write_tu(tmp_path / "TOY")
    check_tu_names(["TOY"], tmp_path)                      # present under root
    check_tu_names(["NCI1"], tmp_path, download=True)      # will be fetched
    assert {"MUTAG", "PROTEINS", "ENZYMES", "AIDS", "NCI1", "IMDB-BINARY"} <= set(
        known_tu_names())
    with pytest.raises(ValueError, match=r"unknown dataset 'PROTIENS' \(did you mean "
                                         r"'PROTEINS'\?\): no PROTIENS_A\.txt under") as err:
        check_tu_names(["TOY", "PROTIENS"], tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(FileNotFoundError, match="no TU dataset MUTAG in .*download=True"):
        check_tu_names(["MUTAG"], tmp_path)
