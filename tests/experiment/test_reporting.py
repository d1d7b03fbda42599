"""pyg_fedgraph.experiment.reporting: the pieces of a results file, by hand."""
from __future__ import annotations

from pathlib import Path

import pytest

from pyg_fedgraph.experiment.reporting import (
    counted,
    keep_readings,
    made_with,
    pooled_clients,
    runs_table,
    save_report,
)

OLD = ("# Results\n\nintro\n\n## A. first\n\n| a | 1 |\n\n### Reading\n\nA is what we "
       "hoped.\n\n### Detail\n\nx\n\n## B. second\n\n| b |\n\n### Reading\n\nB is not.\n")


def test_a_rebuild_keeps_the_hand_written_readings_in_place():
    new = OLD.replace("| a | 1 |", "| a | 2 |")
    new = new.replace("A is what we hoped.", "(write the reading by hand)")
    out = keep_readings(OLD, new)
    assert "| a | 2 |" in out and "| a | 1 |" not in out
    assert out.index("A is what we hoped.") < out.index("### Detail")
    assert "(write the reading" not in out
    assert keep_readings(OLD, OLD) == OLD


def test_a_reading_goes_to_its_sections_end_and_is_never_lost():
    new = "# Results\n\nintro\n\n## A. first\n\n| a | 3 |\n\n## C. third\n\n| c |\n"
    out = keep_readings(OLD, new)
    a = out[out.index("## A. first"):out.index("## C. third")]
    assert a.rstrip().endswith("A is what we hoped.")
    # B is no longer built: its reading stays, under its heading, at the end.
    assert out.rstrip().endswith("## B. second\n\n### Reading\n\nB is not.")
    assert keep_readings("", new) == new


def test_runs_table_and_made_with_by_hand():
    entry = {"config": {"dataset": "digits", "strategy": "fedavg", "partition": "iid",
                        "clients": 5, "rounds": 3, "overrides": {"hn_rule": "code"}},
             "seconds": 12.4, "cpu_seconds": None, "load": [1.0, 2.25], "date": "d",
             "torch": "2.13.0+cpu", "device": "cpu", "cpu_capability": "AVX512"}
    rows = runs_table({"k": entry})
    assert rows[2] == "| digits fedavg iid N=5 hn_rule=code | 3 | 12 | - | 1.0 / 2.2 | d |"
    # A seed other than 0 is named (seed 0, or none recorded, is not).
    seeded = {**entry, "config": {**entry["config"], "seed": 2, "strategy": "cfl",
                                  "overrides": {"evaluate": "trained"}}}
    assert runs_table({"k": seeded})[2].startswith("| digits cfl iid N=5 evaluate=trained seed=2 |")
    assert runs_table({"k": {**entry, "config": {**entry["config"], "seed": 0}}})[2] == rows[2]
    assert made_with([entry, None]) == "torch 2.13.0+cpu on cpu (AVX512)"
    other = {**entry, "cpu_capability": "AVX2"}
    assert made_with([entry, other, entry]) == ("torch 2.13.0+cpu on cpu (AVX2) (1 run), "
                                                "torch 2.13.0+cpu on cpu (AVX512) (2 runs)")
    assert [counted(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert made_with([]) == "no records"


def test_pooled_clients_pools_every_clients_value():
    mean, sd = pooled_clients([{"test_clients": [0.5, float("nan")]},
                               {"test_clients": [1.0, 0.0]}])
    assert mean == pytest.approx(50.0) and sd == pytest.approx((2 / 3 * 2500 / 1) ** 0.5 * 1.0)


def test_save_report_writes_whole_files_only_when_asked(tmp_path):
    assert save_report("x", None) is None
    path = save_report("text\n", tmp_path / "new" / "r.md")
    assert path.read_text() == "text\n" and list(path.parent.iterdir()) == [path]


def test_records_are_one_json_line_per_results_file(tmp_path):
    from pyg_fedgraph.experiment.reporting import read_record, write_record

    path = tmp_path / "perf_records.jsonl"
    write_record(path, {"file": "b.md", "rows": [1.5, None]})
    write_record(path, {"file": "a.md", "rows": [float("nan")]})
    write_record(path, {"file": "b.md", "rows": [2.0]})  # replaces b's line
    lines = path.read_text().splitlines()
    assert [line[:14] for line in lines] == ['{"file":"a.md"', '{"file":"b.md"']
    assert read_record(path, "b.md") == {"file": "b.md", "rows": [2.0]}
    with pytest.raises(ValueError, match=r"no record of c\.md in .*perf_records\.jsonl"):
        read_record(path, "c.md")
    with pytest.raises(ValueError, match="needs a 'file' entry"):
        write_record(path, {"rows": []})
    path.write_text('{"file": "a.md"}\n[1, 2]\n')
    with pytest.raises(ValueError, match="line 2: a record is a JSON object"):
        read_record(path, "a.md")


def test_save_with_readings_keeps_the_hand_written_part(tmp_path):
    from pyg_fedgraph.experiment.reporting import save_with_readings

    path = tmp_path / "r.md"
    assert save_with_readings("# R\n| 1 |\n", None) == "# R\n| 1 |\n"  # nothing written
    assert not path.exists()
    save_with_readings("# R\n| 1 |\n", path)
    path.write_text(path.read_text() + "\n### Reading\n\nBy hand.\n")
    out = save_with_readings("# R\n| 2 |\n", path)
    assert out == path.read_text() == "# R\n| 2 |\n\n### Reading\n\nBy hand.\n"


def test_measured_report_writes_the_record_and_rebuilds_from_it(tmp_path):
    from pyg_fedgraph.experiment.reporting import RECORDS_NAME, measured_report, read_record

    def report(record):
        return f"# R\n| {record['x']} |\n"

    calls = []

    def measure():
        calls.append(1)
        return {"x": 3}

    out = tmp_path / "r.md"
    # Measuring without a file: the report only, nothing written.
    assert measured_report(None, report, measure, script="s.py") == "# R\n| 3 |\n"
    assert list(tmp_path.iterdir()) == []
    text = measured_report(out, report, measure, script="b/s.py", study="qp")
    assert text == out.read_text() == "# R\n| 3 |\n" and len(calls) == 2
    line = (tmp_path / RECORDS_NAME).read_text()
    # file, script, the tags, then source; the record's own entries last.
    assert line == '{"file":"r.md","script":"b/s.py","study":"qp","source":"measured","x":3}\n'
    assert read_record(tmp_path / RECORDS_NAME, "r.md")["x"] == 3
    # A rebuild measures nothing and keeps the readings written by hand.
    out.write_text(text + "\n### Reading\n\nBy hand.\n")
    rebuilt = measured_report(out, report, None, script="b/s.py")
    assert rebuilt == out.read_text() == "# R\n| 3 |\n\n### Reading\n\nBy hand.\n"
    assert len(calls) == 2
    with pytest.raises(ValueError, match="needs the results file"):
        measured_report(None, report, None, script="b/s.py")
    with pytest.raises(ValueError, match=r"no record of q\.md"):
        measured_report(tmp_path / "q.md", report, None, script="b/s.py")


def test_benchmark_records_are_the_checkouts_folders(tmp_path):
    from pyg_fedgraph.experiment import RecordCache
    from pyg_fedgraph.experiment.reporting import benchmark_records

    claims = benchmark_records(tmp_path)
    assert isinstance(claims, RecordCache)
    assert claims.records == tmp_path / "benchmarks" / "results" / "claims_runs"
    assert claims.checkpoints == tmp_path / "runs" / "claims_cache"
    own = benchmark_records(str(tmp_path), "graph_classification")
    assert own.records == tmp_path / "benchmarks" / "results" / "graph_classification_runs"
    assert own.checkpoints == tmp_path / "runs" / "graph_classification_cache"
    assert claims.checkpoint_seconds == 0.0
    assert benchmark_records(tmp_path, checkpoint_seconds=60.0).checkpoint_seconds == 60.0
    assert list(tmp_path.iterdir()) == []  # naming the folders makes none
    # The repository's own scripts read the records committed beside them.
    repo = Path(__file__).resolve().parents[2]
    assert (repo / "benchmarks" / "results" / "claims_runs").is_dir()
    assert benchmark_records(repo).records.is_dir()
