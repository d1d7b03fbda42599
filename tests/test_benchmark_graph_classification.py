"""benchmarks/reproduce/graph_classification_tu.py rebuilt from records (made up here): the ARI of a
grouping against the datasets, the goal's verdict, the norms of GCFL's criterion and the
commands of the runs not yet made, by hand."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from pyg_fedgraph.experiment import RecordCache
from pyg_fedgraph.experiment.records import client_grouping
from pyg_fedgraph.experiment.reporting import keep_readings
from pyg_fedgraph.experiment.runner import plain_settings

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
TRUTH = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


@pytest.fixture
def bench(monkeypatch, tmp_path):
    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(BENCH / "reproduce"))
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    module = importlib.import_module("graph_classification_tu")
    monkeypatch.setattr(module, "RUNS", RecordCache(tmp_path / "records", tmp_path / "cache"))
    yield module
    sys.modules.pop("graph_classification_tu", None)


def store(bench, strategy: str, seed: int, test: float, trace: dict | None = None,
          section: str = "G1") -> None:
    cfg = bench.CONFIGS[section](strategy, seed)
    entry = {"config": plain_settings(cfg.to_dict()),
             "summary": {"test": test, "test_per_client_best": test},
             "seconds": 10.0, "cpu_seconds": 5.0, "load": [1.0, 2.0], "device": "cpu",
             "torch": "x", "date": "today"}
    if trace is not None:
        entry["traces"] = {"grouping": trace}
    bench.RUNS._store(cfg, entry)


def test_grouping_prefers_clusters_and_else_clusters_the_graph(bench):
    class Clustered:
        cluster_of = torch.tensor(TRUTH)

    assert client_grouping(Clustered(), 4) == TRUTH

    class Graph:
        def collaboration_graph(self):
            same = torch.tensor(TRUTH).unsqueeze(0) == torch.tensor(TRUTH).unsqueeze(1)
            return same.double() / 3 + 0.01  # four blocks: spectral clustering finds them

    labels = client_grouping(Graph(), 4)
    assert len(set(labels)) == 4
    assert all(labels[i] == labels[3 * (i // 3)] for i in range(12))

    class Nothing:
        def collaboration_graph(self):
            return None

    assert client_grouping(Nothing(), 4) is None


def test_report_by_hand(bench):
    one = [0] * 12
    # GCFL+ splits the four datasets apart at round 30 (ARI 1), one cluster before (ARI 0).
    store(bench, "gcfl-plus", 0, 0.70, {
        "rounds": [21, 30], "labels": [one, TRUTH],
        "norms": [[[0.11, None], [0.26, None]], [[0.05, 0.04, 0.03, 0.02], [0.3, 0.2, 0.1, 0.1]]]})
    store(bench, "fedavg", 0, 0.74)
    store(bench, "local", 0, 0.76)
    store(bench, "local", 1, 0.72)  # Local's mean: 0.74
    # pFedGraph: above all three (0.80 > 0.74) but its grouping is half right.
    half = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    store(bench, "pfedgraph", 0, 0.80, {"rounds": [1, 200], "labels": [one, half]})
    text = bench.report()
    # ARI of the halves against the four datasets, computed by hand: pairs together in both
    # 12, in the truth 12, in the halves 30, of 66: (12 - 12 * 30 / 66) / ((12 + 30) / 2
    # - 12 * 30 / 66) = 0.421; one cluster has ARI 0, so the mean over rounds is 0.21.
    assert ("| pfedgraph | 80.0 (1 seed) | 80.0 (1 seed) | 0.42 | 0.42 (200) | 0.21 | 0 of 2 "
            "|") in text
    assert ("| gcfl-plus | 70.0 (1 seed) | 70.0 (1 seed) | 1.00 | 1.00 (30) | 0.50 | 1 of 2 "
            "|") in text
    assert "| local | 74.0 ± 2.0 (2 seeds) |" in text
    assert ("- gcfl-plus (seed 0): clusters changed at rounds 30; round 21: 1 cluster "
            "(0.110/0.260); round 30: 4 clusters (0.050/0.300, 0.040/0.200, 0.030/0.100, "
            "0.020/0.100)") in text
    assert ("  - pfedgraph: accuracy 80.0 (above), ARI 0.42 (at least 0.9 in 0 of 2 rounds; 1 "
            "seed): not met") in text
    assert "  - fedaghn: not run" in text
    assert "  - goal: **not met**" in text
    assert ("| fedaghn | 0 | `python benchmarks/reproduce/graph_classification_tu.py --run fedaghn "
            "--seed 0` |") in text
    # Finished runs are not listed as pending (in G1; G2 has no runs here).
    assert "| local | 1 |" not in text.split("## G2")[0]
    # The same grouping exactly right, above the baselines: the goal is met.
    store(bench, "fedaghn", 0, 0.75, {"rounds": [200], "labels": [TRUTH]})
    text = bench.report()
    assert ("  - fedaghn: accuracy 75.0 (above), ARI 1.00 (at least 0.9 in 1 of 1 rounds; 1 "
            "seed): met") in text
    assert "  - goal: **met**" in text


def test_the_one_dataset_section_by_hand(bench):
    # G1's records are not G2's: the same strategy and seed, another federation.
    store(bench, "local", 0, 0.50)
    store(bench, "local", 0, 0.70, section="G2")
    store(bench, "local", 1, 0.74, section="G2")
    # GCFL splits the ten clients in two at round 30.
    store(bench, "gcfl", 0, 0.71, {"rounds": [21, 30], "labels": [[0] * 10, [0] * 4 + [1] * 6],
                                   "norms": [[[0.02, None], [0.09, None]],
                                             [[0.01, 0.015], [0.05, 0.04]]]}, section="G2")
    text = bench.report()
    g1, g2 = text.split("## G2")
    assert "| local | 50.0 (1 seed) |" in g1 and "| local | 50.0" not in g2
    # GCFL's column: papers.toml's fractions in percent (self-train 0.5979 ± 0.028, GCFL
    # 0.6749 ± 0.023); strategies its table lacks read "-".
    assert "| local | 72.0 ± 2.0 (2 seeds) | 72.0 ± 2.0 (2 seeds) | 59.8 ± 2.8 | - |" in g2
    assert "| gcfl | 71.0 (1 seed) | 71.0 (1 seed) | 67.5 ± 2.3 | 2 |" in g2
    assert "| pfedgraph | pending | pending | - | - |" in g2
    assert ("- gcfl (seed 0): clusters changed at rounds 30; round 21: 1 cluster "
            "(0.020/0.090); round 30: 2 clusters (0.010/0.050, 0.015/0.040)") in g2
    assert ("| fedavg | 0 | `python benchmarks/reproduce/graph_classification_tu.py --run fedavg "
            "--seed 0 --section G2` |") in g2
    assert "| local | 0 |" not in g2 and "| local | 2 |" in g2
    cfg = bench.one_config("gcfl-plus", 1)
    assert cfg.overrides["data.names"] == "PROTEINS" and cfg.overrides["data.num_clients"] == 10
    assert (cfg.overrides["eps1"], cfg.overrides["eps2"], cfg.overrides["seq_length"]) == (
        0.03, 0.06, 10)


def test_the_committed_results_are_rebuilt_from_the_committed_records(monkeypatch):
    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(BENCH / "reproduce"))
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    module = importlib.import_module("graph_classification_tu")
    try:
        committed = (BENCH / "results" / "graph_classification_tu.md").read_text()
        rebuilt = module.report()
        # The tables are generated; the judgment is the file's hand-written readings.
        assert "### Reading" not in rebuilt and "**not met**. `benchmarks" not in rebuilt
        assert keep_readings(committed, rebuilt) == committed
    finally:
        sys.modules.pop("graph_classification_tu", None)
