r"""Graph classification federations of the ``tu`` dataset: tiny files in the
TUDataset format (offline), the shared real datasets when present, and the
command line's refusals before training."""
import sys
from pathlib import Path

import pytest
from small_graph_sets import write_tu_group

from pyg_fedgraph.cli import main
from pyg_fedgraph.datasets import load_dataset, read_tu, tu, tu_names

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datasets"))
from tu_files import SHARED_TU  # noqa: E402

needs_shared = pytest.mark.skipif(not (SHARED_TU / "MUTAG").exists(),
                                  reason="../shared/data/tu (MUTAG ...) not present")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_tu_group(tmp_path_factory.mktemp("tu"))


def test_clients_across_datasets_keep_their_dataset_graphs_and_classes(root):
    data = tu("TOYA,TOYB,TOYC", root=str(root), clients_per_dataset=2)
    assert data.num_clients == 6 and data.input_kind == "graph-set"
    assert data.client_labels.tolist() == [0, 0, 1, 1, 2, 2]  # the dataset of origin
    assert data.info["datasets"] == ["TOYA", "TOYB", "TOYC"]
    assert data.input_shape == (5,) and data.num_classes == 3  # the widest, the most classes
    assert data.class_mask.sum(1).tolist() == [2, 2, 3, 3, 2, 2]
    sizes = {"TOYA": 40, "TOYB": 45, "TOYC": 40}
    for k, name in enumerate(["TOYA", "TOYB", "TOYC"]):
        total = sum(int(data.num_samples(s)[2 * k:2 * k + 2].sum())
                    for s in ("train", "val", "test"))
        assert total == sizes[name]  # every graph of the dataset, once
    # Every graph a client holds is one of its dataset's, zero-padded to 5 features.
    toyc = read_tu("TOYC", root)
    stored = {data.store.graph(int(g)).x[:, :2].numpy().tobytes()
              for s in ("train", "val", "test")
              for g in data.splits[s].x[4, :int(data.num_samples(s)[4])]}
    own = {g.x.numpy().tobytes() for g in toyc}
    assert stored <= own
    pad = data.store.x[data.store.node_ptr[int(data.splits["train"].x[4, 0])]]
    assert not pad[2:].any()
    assert data.defaults.model == "gin" and data.defaults.local["optimizer"] == "adam"


def test_one_dataset_over_clients_is_gcfls_single_dataset_setting(root):
    data = load_dataset("tu", names="TOYB", root=str(root), num_clients=3, seed=1)
    assert data.num_clients == 3 and data.client_labels is None
    assert sum(int(data.num_samples(s).sum()) for s in ("train", "val", "test")) == 45
    assert data.class_mask.all()
    skewed = tu("TOYB", root=str(root), num_clients=3, partition="dirichlet", beta=0.3)
    assert skewed.num_clients == 3


def test_names_and_settings_are_checked_in_one_line(root):
    assert tu_names(" MUTAG, PROTEINS ") == ["MUTAG", "PROTEINS"]
    assert tu_names(["AIDS"]) == ["AIDS"]
    with pytest.raises(ValueError, match="expected dataset names separated by commas"):
        tu_names("MUTAG,,AIDS")
    with pytest.raises(ValueError, match=r"unknown dataset 'MUTAGG' \(did you mean 'MUTAG'\?\)"):
        tu("TOYA,MUTAGG", root=str(root))
    with pytest.raises(ValueError, match="TOYA has 40 graphs but clients_per_dataset=5 clients "
                                         "need 10 each"):
        tu("TOYA,TOYB", root=str(root), clients_per_dataset=5)
    with pytest.raises(ValueError, match="num_clients=4 deals one dataset to clients"):
        tu("TOYA,TOYB", root=str(root), num_clients=4)
    with pytest.raises(FileNotFoundError, match="--set data.root=DIR"):
        tu("TOYA")


RUN = ["run", "--dataset", "tu", "--rounds", "1", "--quiet"]


@pytest.mark.parametrize("extra,message", [
    (["--set", "data.names=TOYA,NOPE", "--model", "gin"], "unknown dataset 'NOPE'"),
    (["--set", "data.names=TOYA,TOYB", "--set", "data.clients_per_dataset=9", "--model", "gin"],
     "TOYA has 40 graphs but clients_per_dataset=9 clients need 10 each"),
    (["--set", "data.names=TOYA,TOYB", "--model", "gcn"],
     "model 'gcn' takes a client's graph, but dataset 'tu' gives a batch of a client's graphs: "
     "choose a model for its data with --model (gin, gcn-pool)"),
], ids=["unknown-name", "too-many-clients", "node-model-on-graph-sets"])
def test_the_command_line_refuses_before_training(extra, message, root, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(RUN + ["--set", f"data.root={root}", "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert message in err
    assert not out.exists() or not any(out.iterdir())


def test_a_graph_set_model_on_a_node_level_federation_is_refused(tmp_path, capsys):
    code = main(["run", "--dataset", "planted-graphs", "--model", "gin", "--rounds", "1",
                 "--quiet", "--out", str(tmp_path / "o"), "--set", "data.num_clients=4",
                 "--set", "data.num_nodes=120"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert ("model 'gin' takes a batch of a client's graphs, but dataset 'planted-graphs' "
            "gives a client's graph: choose a model for its data with --model (gcn, sage, "
            "gat, masked-gcn)") in err


@pytest.mark.slow
def test_the_command_line_compares_strategies_on_tiny_files(root, tmp_path, capsys):
    code = main(RUN + ["--set", f"data.root={root}", "--set", "data.names=TOYA,TOYB,TOYC",
                       "--set", "data.clients_per_dataset=2", "--model", "gin",
                       "--strategy", "local,fedavg,gcfl,gcfl-plus,pfedgraph", "--rounds", "2",
                       "--set", "batch_size=8", "--out", str(tmp_path / "o")])
    assert code == 0, capsys.readouterr().err
    for name in ("local", "fedavg", "gcfl", "gcfl-plus", "pfedgraph"):
        assert (tmp_path / "o" / name).is_dir()


@pytest.mark.real_data
@needs_shared
def test_the_four_shared_datasets_over_twelve_clients():
    data = tu("MUTAG,PROTEINS,ENZYMES,AIDS", root=str(SHARED_TU), clients_per_dataset=3)
    assert data.num_clients == 12
    assert data.client_labels.tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    total = sum(int(data.num_samples(s).sum()) for s in ("train", "val", "test"))
    assert total == 188 + 1113 + 600 + 2000
    # Widths (node labels): MUTAG 7, PROTEINS 3, ENZYMES 3, AIDS 38; classes 2, 2, 6, 2.
    assert data.input_shape == (38,) and data.num_classes == 6
    assert data.class_mask.sum(1).tolist() == [2] * 6 + [6] * 3 + [2] * 3
    assert data.store.num_graphs == 188 + 1113 + 600 + 2000


def test_a_strategy_that_needs_whole_models_is_told_how_to_share_them(root, tmp_path, capsys):
    args = RUN + ["--set", f"data.root={root}", "--set", "data.names=TOYA,TOYB", "--model",
                  "gin", "--out", str(tmp_path / "o")]
    assert main(args + ["--strategy", "fedrep"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("strategy 'fedrep' works on whole models and cannot leave parameters ['pre', "
            "'post', 'classifier'] private to the clients; the model keeps them private: "
            "--set model.share=all federates all of it") in err
    assert main(args + ["--strategy", "fedrep", "--set", "model.share=all",
                        "--set", "batch_size=8"]) == 0


@pytest.mark.slow
@pytest.mark.real_data
@needs_shared
def test_the_issues_command_runs_offline_on_the_shared_datasets(tmp_path, capsys):
    code = main(["run", "--dataset", "tu", "--set", "data.names=MUTAG,PROTEINS,ENZYMES,AIDS",
                 "--set", "data.clients_per_dataset=3", "--model", "gin",
                 "--strategy", "local,fedavg,cfl,pfedgraph", "--set", f"data.root={SHARED_TU}",
                 "--rounds", "1", "--set", "execution=loop", "--quiet",
                 "--out", str(tmp_path / "o")])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if p.is_dir()) == [
        "cfl", "fedavg", "local", "pfedgraph"]
