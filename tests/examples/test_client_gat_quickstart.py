import importlib.util
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "client_gat_quickstart.py"


@pytest.fixture(scope="module")
def quickstart():
    # Examples are scripts, not a package: load the file itself.
    spec = importlib.util.spec_from_file_location("client_gat_quickstart", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart_shows_what_it_says(quickstart, capsys):
    figures = quickstart.main(["--quick"])
    printed = capsys.readouterr().out
    held_out, test = figures["held-out"], figures["test"]
    # pFedGAT beats training alone and averaging over everyone, on the data the
    # GAT is trained on and on fresh data.
    for losses in (held_out, test):
        assert losses["pFedGAT"] < losses["Local"]
        assert losses["pFedGAT"] < losses["FedAvg"]
    # Most of every client's off-diagonal weight stays inside its group
    # (uniform weights: 3/7).
    share = figures["in_group_share"]
    assert share.shape == (8,) and (share > 0.5).all()
    allocation = figures["allocation"]
    torch.testing.assert_close(allocation.sum(dim=1), torch.ones(8))
    torch.testing.assert_close(figures["self_weight"], allocation.diagonal())
    # The returned figures are the printed ones.
    assert f"held-out pFedGAT {held_out['pFedGAT']:.3f}  Local {held_out['Local']:.3f}" in printed
    assert f"test     pFedGAT {test['pFedGAT']:.3f}" in printed


def test_quickstart_paper_gat_stays_uniform(quickstart, capsys):
    # The docstring's claim about the paper's GAT (similarity=False) here.
    figures = quickstart.main(["--quick", "--paper-gat"])
    capsys.readouterr()
    assert figures["in_group_share"].mean().item() == pytest.approx(3 / 7, abs=0.02)
    assert figures["held-out"]["pFedGAT"] == pytest.approx(figures["held-out"]["FedAvg"],
                                                           rel=0.01)
