"""The speed benchmarks (benchmarks/perf/): every results file they write rebuilds from its
record in benchmarks/results/perf_records.jsonl without measuring, identical to the committed
file; a report from a made-up record, by hand; and the scripts' imports (no script imports
another, none writes a library global)."""
from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from pyg_fedgraph.experiment.reporting import RECORDS_NAME, keep_readings, read_record

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
RESULTS = BENCH / "results"
#: results file -> (script, the options of its --report-only besides --out)
REBUILT = {
    "perf.md": ("perf", []),
    "perf_e2e_traffic.md": ("perf", []),
    "pfedgraph_qp.md": ("perf", ["--study", "qp"]),
    "client_parallel.md": ("perf", ["--study", "parallel"]),
    "devices.md": ("devices", []),
    "devices_compile_cpu.md": ("devices", []),
    "devices_h100.md": ("devices", []),
    "gpu_checks_h100.md": ("devices", ["--gpu-checks"]),
    "dispatch.md": ("dispatch", []),
    "dispatch_h100.md": ("dispatch", []),
    "subgraph_speed.md": ("subgraph_speed", []),
    "report_scaling.md": ("report_scaling", []),
    "cnn_batching.md": ("cnn_batching", []),
    "graph_classification_batching.md": ("graph_classification_batching", []),
}


@pytest.fixture
def script(monkeypatch):
    r"""A benchmark script of benchmarks/perf/ imported by name (as the other benchmark
    tests import them), forgotten again afterwards."""
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    loaded = []

    def load(name: str):
        loaded.append(name)
        return importlib.import_module(name)

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


def test_every_record_belongs_to_a_committed_file_and_says_where_it_came_from():
    lines = (RESULTS / RECORDS_NAME).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert sorted(r["file"] for r in records) == sorted(REBUILT)
    for r in records:
        assert (RESULTS / r["file"]).is_file()
        assert r["script"] == f"benchmarks/perf/{REBUILT[r['file']][0]}.py"
        assert r["source"] == "measured" or r["source"].startswith("taken from the committed")


@pytest.mark.parametrize("name", sorted(REBUILT))
def test_report_only_rebuilds_the_committed_file(name, script, tmp_path, capsys):
    module, options = REBUILT[name]
    committed = (RESULTS / name).read_text()
    shutil.copy(RESULTS / RECORDS_NAME, tmp_path / RECORDS_NAME)
    (tmp_path / name).write_text(committed)  # its readings, kept by the rebuild
    script(module).main(["--report-only", *options, "--out", str(tmp_path / name)])
    assert (tmp_path / name).read_text() == committed
    # The same without the file's readings: the generated part alone is the file minus its
    # "### Reading" blocks (nothing hand-written is generated, nothing generated is lost).
    (tmp_path / name).unlink()
    script(module).main(["--report-only", *options, "--out", str(tmp_path / name)])
    generated = (tmp_path / name).read_text()
    assert keep_readings(committed, generated) == committed
    assert "### Reading" not in generated
    capsys.readouterr()


def test_suite_report_from_a_made_up_record_by_hand(script):
    perf = script("perf")
    record = {"quick": False, "threads": 1, "copy_bw": 16.4e9, "peak_flops": 91.1e9,
              "agg_budget": 2e9, "traffic": "run",
              "sections": {
                  "qp": [{"N": 50, "fast s": 0.0002, "ref s": 1.4, "speed-up": 7000.0,
                          "max diff": 3.2e-12, "note": ""}],
                  "agg": [{"N": 207, "D": 60000, "graph": "knn8", "E": 1863,
                           "fast s": 0.08, "of copy bw": 0.075, "of peak": None,
                           "note": "x"}],
                  "e2e": [{"dataset": "fl60", "strategy": "fedavg", "clients": 60,
                           "s/round": 0.0252, "note": "5 rounds incl. 1 evaluation"}]},
              "machine": ["- date: today"], "seconds": 185.4,
              "command": "python benchmarks/perf/perf.py"}
    text = perf.suite_report(record)
    assert "**16.4 GB/s**" in text and "**91.1 GFLOP/s**" in text
    # speed-up with an x, max diff in e-notation, shares in percent, missing cells as '-'.
    assert "| 50 | 0.0002 | 1.4 | 7e+03x | 3.2e-12 |  |" in text
    assert "| 207 | 60000 | knn8 | 1863 | 0.08 | - | - | - | - | - | 7.5% | - | - | x |" in text
    assert "| fl60 | fedavg | 60 | 0.0252 | 5 rounds incl. 1 evaluation |" in text
    assert "under 2 GB" in text and "## 2." not in text and "## 3." not in text
    assert "METR-LA (207 GRU clients) is not run by default" not in text  # traffic was run
    assert text.endswith("Total wall time 185 s. Command: `python benchmarks/perf/perf.py`\n")


def test_a_measured_record_goes_beside_its_results_file(script, tmp_path, monkeypatch,
                                                        capsys):
    # report_scaling with its measuring replaced by a made-up case: the record is written to
    # perf_records.jsonl in the --out folder, and --report-only reproduces the file from it.
    scaling = script("report_scaling")
    case = {"n": 1000, "case": "groups", "total": 4.671, "range": (4.63, 6.59),
            "parts": {"matrix files": 0.31, "client order": 0.001, "matrix png": 2.49,
                      "graph png": 1.83},
            "sizes": {"collaboration.npz": 70_000, "collaboration_topk.csv": 210_000,
                      "clients.csv": 8_000}}
    monkeypatch.setattr(scaling, "run_case", lambda n, groups, repeats: case)
    out = tmp_path / "scaling.md"
    scaling.main(["--sizes", "1000", "--repeats", "3", "--out", str(out)])
    text = out.read_text()
    assert "| 1,000 | groups | 4.67 (4.63-6.59) | 0.31 | 0.00 | 2.49 | 1.83 | 0.07 | 0.21 | " \
           "0.0080 |" in text
    record = read_record(tmp_path / RECORDS_NAME, "scaling.md")
    assert record["source"] == "measured" and record["repeats"] == 3
    out.write_text(text + "\n### Reading\n\nBy hand.\n")
    scaling.main(["--report-only", "--out", str(out)])
    assert out.read_text() == text + "\n### Reading\n\nBy hand.\n"
    capsys.readouterr()
