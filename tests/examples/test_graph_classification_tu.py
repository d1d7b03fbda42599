r"""examples/graph_classification_tu.py --quick on tiny stand-ins of the four
datasets (TU-format files written here): it runs offline, prints what it
returns and draws the graph ordered by dataset."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graphs"))
from small_graph_sets import write_tu_dataset  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "graph_classification_tu.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("graph_classification_tu", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_quick_example_runs_offline_and_draws_the_graph(example, tmp_path, capsys):
    for k, (name, labels, classes) in enumerate([("MUTAG", 7, 2), ("PROTEINS", 3, 2),
                                                 ("ENZYMES", 3, 6), ("AIDS", 5, 2)]):
        write_tu_dataset(tmp_path / "tu", name, 126, labels, classes, seed=k, nodes=(3, 7))
    out = example.main(["--root", str(tmp_path / "tu"), "--quick", "--out",
                        str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert out["figure"].is_file() and out["figure"].stat().st_size > 10_000
    weight = out["weight"]
    assert weight.shape == (12, 12)
    torch.testing.assert_close(weight.sum(1), torch.ones(12, dtype=weight.dtype))
    assert -1.0 <= out["ari"] <= 1.0
    assert f"ARI {out['ari']:.2f}" in printed
    acc = out["accuracy"]
    assert set(acc) == {"local", "pfedgraph"}
    assert f"local {acc['local']:.3f}, pfedgraph {acc['pfedgraph']:.3f}" in printed
