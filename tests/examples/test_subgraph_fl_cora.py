import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datasets"))
from planetoid_files import PLANETOID  # noqa: E402

from pyg_fedgraph.typing import WITH_PYMETIS  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "subgraph_fl_cora.py"


@pytest.fixture(scope="module")
def example():
    # Examples are scripts, not a package: load the file itself.
    spec = importlib.util.spec_from_file_location("subgraph_fl_cora", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cut_edge_matrix_and_the_pair_correlation(example):
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    cut = example.cut_edge_matrix(edge_index, torch.tensor([3.0, 3.0, 5.0, 5.0]), 3)
    assert cut.tolist() == [[0, 3, 0], [3, 0, 5], [0, 5, 0]]
    # Symmetrized, W gives the pairs (0,1), (0,2), (1,2) 0.25, 0.05, 0.55: the order of
    # their cut edges 3, 0, 5, a rank correlation of one; 0.25, 0.55, 0.05 reverses it.
    weight = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.3, 0.5], [0.0, 0.6, 0.4]])
    assert example.pair_correlation(weight, cut) == pytest.approx(1.0)
    weight = torch.tensor([[0.2, 0.3, 0.5], [0.2, 0.7, 0.1], [0.6, 0.0, 0.4]])
    assert example.pair_correlation(weight, cut) == pytest.approx(-1.0)


def test_without_a_folder_one_line_says_how_to_get_the_files(example, tmp_path):
    with pytest.raises(SystemExit, match=r"^subgraph_fl_cora.py: error: give the folder of "
                                         r"Planetoid's Cora files with --root DIR"):
        example.main(["--quick", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match=str(tmp_path / "none")):
        example.main(["--quick", "--root", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.slow
@pytest.mark.real_data
@pytest.mark.skipif(not (PLANETOID / "ind.cora.x").is_file(),
                    reason="../shared/data/planetoid (Cora raw files) not present")
@pytest.mark.skipif(not WITH_PYMETIS, reason="pymetis (extra 'metis') is not installed")
def test_quick_compares_four_strategies_and_draws_both_graphs(example, tmp_path, capsys):
    figures = example.main(["--quick", "--root", str(PLANETOID), "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert [r["strategy"] for r in figures["rows"]] == ["local", "fedavg", "fedpub",
                                                         "pfedgraph"]
    weight, cut = figures["weight"], figures["cut"]
    assert weight.shape == cut.shape == (10, 10)
    torch.testing.assert_close(weight.sum(dim=1), torch.ones(10))
    # The right panel is the cut-edge graph: symmetric, empty diagonal, and each
    # client's row adds up to the edges the partition report counts as cut from it
    # (disjoint clients covering the graph).
    assert torch.equal(cut, cut.t()) and not cut.diagonal().any()
    assert cut.sum(dim=1).long().tolist() == [r["edges_cut"] for r in figures["report"]]
    assert figures["figure"].is_file() and figures["figure"].stat().st_size > 10_000
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["rows"] == figures["rows"] and saved["cut_edges"] == cut.long().tolist()
    assert f"over the 45 pairs: {figures['spearman']:+.2f}" in printed
    # Every client's accuracy per strategy, as saved and drawn.
    per_client = figures["client_accuracy"]
    assert list(per_client) == ["local", "fedavg", "fedpub", "pfedgraph"]
    for name, row in zip(per_client, figures["rows"], strict=True):
        assert per_client[name].shape == (10,)
        # The table's value is the mean over clients of these (each client weighs one).
        assert float(per_client[name].mean()) == pytest.approx(row["test"], abs=1e-6)
    assert saved["client_accuracy"]["fedpub"] == per_client["fedpub"].tolist()
    assert figures["accuracy_figure"].is_file()
