"""The baselines of issue 21 run from the command line on the data sets the
papers use: fl60 and digits, pathological and IID."""
import json

import pytest

from pyg_fedgraph.cli import main

CASES = {
    "per-fedavg-fo": ["--strategy", "per-fedavg", "--set", "variant=fo"],
    "per-fedavg-hf": ["--strategy", "per-fedavg", "--set", "variant=hf"],
    "pfedme": ["--strategy", "pfedme"],
    "fedrep": ["--strategy", "fedrep", "--set", "head_steps=2"],
    "fedrod": ["--strategy", "fedrod"],
    "ifca": ["--strategy", "ifca"],
    "knn-per": ["--strategy", "knn-per"],
    "fedala": ["--strategy", "fedala"],
    "pfedla": ["--strategy", "pfedla", "--set", "embedding_dim=25"],
}


@pytest.mark.parametrize("dataset, partition", [("fl60", None), ("digits", "pathological"),
                                                ("digits", "iid")])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_runs(tmp_path, case, dataset, partition):
    args = ["run", "--dataset", dataset, *CASES[case], "--rounds", "2", "--set", "steps=2",
            "--out", str(tmp_path), "--quiet"]
    if partition:
        args += ["--partition", partition]
    assert main(args) == 0
    # The run wrote its summary: a test accuracy for the strategy it was asked for.
    summaries = list(tmp_path.rglob("*.json"))
    assert summaries, "the run wrote no JSON"
    text = " ".join(p.read_text() for p in summaries)
    assert CASES[case][1] in text
    assert any("accuracy" in json.dumps(json.loads(p.read_text())) for p in summaries)
