r"""Clients that hold graphs on the command line: bad input (one line on
stderr, exit code 2, before any training and before the output folder), and
the shipped ``configs/cora_metis10.yaml`` (offline on small files in
Planetoid's format, and on the real Cora where the shared files are)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pyg_fedgraph.cli import main
from pyg_fedgraph.experiment.files import load_config
from pyg_fedgraph.typing import WITH_PYMETIS
from tests.test_cli_input import no_training, one_error_line  # noqa: F401 (a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parent / "datasets"))
from planetoid_files import PLANETOID, make_planetoid, write_planetoid  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "cora_metis10.yaml"
needs_pymetis = pytest.mark.skipif(not WITH_PYMETIS,
                                   reason="pymetis (extra 'metis') is not installed")
needs_shared = pytest.mark.skipif(
    not (PLANETOID / "ind.cora.x").is_file(),
    reason="../shared/data/planetoid (Cora and CiteSeer raw files) not present")


@pytest.fixture(scope="module")
def small_cora(tmp_path_factory):
    r"""A folder of small Cora files in the published format: 556 nodes,
    545 in the largest connected component."""
    return write_planetoid(tmp_path_factory.mktemp("planetoid"), "cora", make_planetoid())


def refused(argv, tmp_path, capsys) -> str:
    r"""The one error line of ``pyg-fedgraph run argv``, after checking its exit
    code 2 and that no output folder was made."""
    out = tmp_path / "out"
    assert main(["run", *argv, "--rounds", "1", "--quiet", "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert line.startswith("pyg-fedgraph: error: ")
    assert not out.exists()
    return line


# --------------------------------------------------------------- models and data of another kind
@pytest.mark.usefixtures("no_training")
def test_a_gnn_on_images_and_an_image_model_on_a_graph(tmp_path, capsys):
    line = refused(["--dataset", "digits", "--model", "gcn"], tmp_path, capsys)
    assert ("model 'gcn' takes a client's graph, but dataset 'digits' gives a batch of samples: "
            "choose a model for its data with --model (mlp, cnn, cnn-bn, gru, gru-seq2seq)"
            in line)
    line = refused(["--dataset", "planted-graphs", "--clients", "4", "--model", "cnn"],
                   tmp_path, capsys)
    assert ("model 'cnn' takes a batch of samples, but dataset 'planted-graphs' gives a "
            "client's graph: choose a model for its data with --model "
            "(gcn, sage, gat, masked-gcn)" in line)


@pytest.mark.usefixtures("no_training")
@pytest.mark.parametrize("argv,message", [
    (["--dataset", "digits", "--partition", "metis"],
     "--partition metis splits one graph into subgraphs by its nodes, but the clients of "
     "dataset 'digits' hold samples: choose iid, pathological, dirichlet or group"),
    (["--dataset", "fl60", "--partition", "louvain"],
     "--partition louvain splits one graph into subgraphs by its nodes, but the clients of "
     "dataset 'fl60' hold samples: it takes no --partition"),
    (["--dataset", "planted-graphs", "--clients", "4", "--partition", "dirichlet"],
     "--partition dirichlet splits samples by their labels, but the clients of dataset "
     "'planted-graphs' hold subgraphs of one graph: it takes no --partition"),
    # Refused before the files are looked for: none are given.
    (["--dataset", "cora", "--partition", "dirichlet", "--set", "data.root=/nowhere"],
     "--partition dirichlet splits samples by their labels, but the clients of dataset 'cora' "
     "hold subgraphs of one graph: choose metis, overlapping, louvain or random-nodes"),
], ids=["metis-on-digits", "louvain-on-fl60", "dirichlet-on-planted", "dirichlet-on-cora"])
def test_a_partition_of_the_other_kind(argv, message, tmp_path, capsys):
    assert message in refused(argv, tmp_path, capsys)


# --------------------------------------------------------------- Planetoid files
@pytest.mark.usefixtures("no_training")
def test_cora_without_its_folder_says_how_to_get_the_files(tmp_path, capsys):
    line = refused(["--dataset", "cora", "--model", "gcn"], tmp_path, capsys)
    assert "Cora needs Planetoid's raw files ind.cora.*" in line
    assert "--set data.root=DIR" in line and "--set data.download=true" in line


@pytest.mark.usefixtures("no_training")
def test_cora_in_an_empty_folder_names_the_folder(tmp_path, capsys):
    empty = tmp_path / "planetoid"
    empty.mkdir()
    line = refused(["--dataset", "cora", "--set", f"data.root={empty}"], tmp_path, capsys)
    assert str(empty) in line and "ind.cora." in line


# --------------------------------------------------------------- METIS
# A fresh interpreter in which pymetis can be neither imported nor found (WITH_PYMETIS); each
# run's exit code and standard error come back as JSON.
HIDDEN_PYMETIS = """
import contextlib, io, json, sys
sys.modules["pymetis"] = None
from pyg_fedgraph.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


@pytest.mark.usefixtures("no_training")
def test_metis_without_pymetis_is_refused_before_the_data(tmp_path, capsys, monkeypatch):
    # The preflight's flag (the way tests/transforms/test_metis_partition.py hides pymetis from
    # the partitioner); the folder does not exist: the check comes first.
    import pyg_fedgraph.experiment.build as build

    monkeypatch.setattr(build, "WITH_PYMETIS", False)
    line = refused(["--dataset", "citeseer", "--partition", "overlapping", "--set",
                    "data.root=/nowhere"], tmp_path, capsys)
    assert line == ("pyg-fedgraph: error: --partition overlapping needs METIS through "
                    "'pymetis': install it with pip install 'pyg-fedgraph[metis]'")
    # Splits without METIS still run their checks as before.
    line = refused(["--dataset", "citeseer", "--partition", "louvain", "--set",
                    "data.root=/nowhere"], tmp_path, capsys)
    assert "CiteSeer raw files missing in /nowhere" in line


@pytest.mark.slow
def test_metis_without_pymetis_is_one_line_naming_the_extra(tmp_path, small_cora):
    out = tmp_path / "out"
    cases = [
        (["--partition", "metis"], "--partition metis needs METIS through 'pymetis': "
         "install it with pip install 'pyg-fedgraph[metis]'"),
        (["--partition", "overlapping"], "--partition overlapping needs METIS"),
        ([], "--partition metis (the default of dataset 'cora') needs METIS through "
         "'pymetis': install it with pip install 'pyg-fedgraph[metis]' or choose another "
         "--partition"),
    ]
    argvs = [["run", "--dataset", "cora", *given, "--set", f"data.root={small_cora}",
              "--rounds", "1", "--quiet", "--out", str(out)] for given, _ in cases]
    done = subprocess.run([sys.executable, "-W", "ignore::FutureWarning", "-c", HIDDEN_PYMETIS,
                           json.dumps(argvs)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    for (code, stderr), (_, message) in zip(json.loads(done.stdout), cases, strict=True):
        err = [line for line in stderr.splitlines() if line.strip()]
        assert code == 2 and len(err) == 1, stderr
        assert err[0].startswith("pyg-fedgraph: error: ") and message in err[0]
    assert not out.exists()


@needs_pymetis
@pytest.mark.usefixtures("no_training")
def test_more_clients_than_metis_gives_nonempty_parts(tmp_path, capsys, small_cora):
    # 400 parts of the 545 nodes: METIS leaves some empty.
    line = refused(["--dataset", "cora", "--set", f"data.root={small_cora}", "--clients",
                    "400"], tmp_path, capsys)
    assert "of the 400 parts asked for empty on a graph of 545 nodes" in line
    assert "ask for fewer parts (clients)" in line
    # More clients than nodes: refused before METIS runs.
    line = refused(["--dataset", "cora", "--set", f"data.root={small_cora}", "--clients",
                    "600"], tmp_path, capsys)
    assert "cannot split a graph of 545 nodes into 600 non-empty disjoint sets" in line


@needs_pymetis
@pytest.mark.usefixtures("no_training")
def test_more_overlapping_clients_per_part_than_its_nodes_allow(tmp_path, capsys, small_cora):
    # Two METIS parts of about 272 nodes for 300 clients each.
    line = refused(["--dataset", "cora", "--partition", "overlapping", "--set",
                    f"data.root={small_cora}", "--clients", "600", "--set",
                    "data.clients_per_part=300"], tmp_path, capsys)
    assert "METIS part 0 has" in line and "too few for 300 overlapping clients" in line
    # Samples of no node: the share is shown as given.
    line = refused(["--dataset", "cora", "--partition", "overlapping", "--set",
                    f"data.root={small_cora}", "--set", "data.sample_ratio=0.001"],
                   tmp_path, capsys)
    assert "too few for 5 overlapping clients holding 0.1% of them each" in line
    line = refused(["--dataset", "cora", "--partition", "overlapping", "--set",
                    f"data.root={small_cora}", "--set", "data.clients_per_part=3"],
                   tmp_path, capsys)
    assert "num_clients (10) must be a multiple of clients_per_part (3)" in line


# --------------------------------------------------------------- configs/cora_metis10.yaml
def test_the_cora_config_holds_the_readme_command():
    values = load_config(CONFIG)
    assert {k: values[k] for k in ("dataset", "partition", "clients", "model", "strategy")} == {
        "dataset": "cora", "partition": "metis", "clients": 10, "model": "gcn",
        "strategy": "local,fedavg,pfedgraph,fedaghn,pfedgat"}
    # The files' folder is the user's: the file names none.
    assert "data.root" not in values["set"]


@pytest.mark.usefixtures("no_training")
def test_the_cora_config_without_a_folder_is_one_line(tmp_path, capsys):
    line = refused(["--config", str(CONFIG)], tmp_path, capsys)
    assert "--set data.root=DIR" in line


def run_config(root, tmp_path) -> Path:
    out = tmp_path / "cora"
    assert main(["run", "--config", str(CONFIG), "--set", f"data.root={root}", "--rounds", "1",
                 "--quiet", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
@needs_pymetis
def test_the_cora_config_runs_a_round_on_files_in_planetoids_format(tmp_path, capsys,
                                                                    small_cora):
    out = run_config(small_cora, tmp_path)
    rows = json.loads((out / "comparison.json").read_text())
    assert [r["strategy"] for r in rows] == ["local", "fedavg", "pfedgraph", "fedaghn",
                                             "pfedgat"]
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert (resolved["dataset"], resolved["partition"], resolved["clients"]) == ("cora", "metis",
                                                                                10)
    assert resolved["set"]["data.root"] == str(small_cora)
    assert "clients=10, nodes=545" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.real_data
@needs_shared
@needs_pymetis
def test_the_cora_config_runs_a_round_on_cora(tmp_path, capsys):
    out = run_config(PLANETOID, tmp_path)
    printed = capsys.readouterr().out
    assert "GraphFederatedDataset(cora, clients=10, nodes=2485" in printed
    rows = json.loads((out / "comparison.json").read_text())
    assert len(rows) == 5 and all(0.0 <= r["test"] <= 1.0 for r in rows)
