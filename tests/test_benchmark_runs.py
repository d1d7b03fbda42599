"""The reproduction scripts around the record cache (claims.py,
perf_compare.py, dispatch.py): their tables and rules, by hand. The cache itself (resuming
interrupted runs, record keys) is the library's: tests/experiment/test_records.py."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

from pyg_fedgraph.experiment import ExperimentConfig, RecordCache
from pyg_fedgraph.experiment.reporting import made_with, pooled_clients, runs_table

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def write_record(runs, cfg: ExperimentConfig, entry: dict) -> None:
    r"""A record of ``cfg`` in the benchmarks' record folder, as the cache writes them."""
    from pyg_fedgraph.experiment.records import config_key
    from pyg_fedgraph.experiment.runner import plain_settings

    runs.records.mkdir(parents=True, exist_ok=True)
    entry = {"config": plain_settings(cfg.to_dict()), **entry}
    (runs.records / f"{config_key(cfg)}.json").write_text(json.dumps(entry))


def test_cached_only_lists_missing_runs_with_their_command(claims, runs):
    cfg = claims.fmnist_config("extreme", "local", "full")
    # A finished run of one cell (numbers made up for the test).
    write_record(runs, cfg, {"seconds": 1.0, "load": [0.0, 0.0],
                      "date": "today", "val": [0.9], "test": [0.9],
                      "summary": {"test": 0.9, "test_per_client_best": 0.95}})
    text = "\n".join(claims.fmnist_t1_section(["local", "fedavg-ft"], None, run_missing=False))
    assert "| local | 90.0 / 95.0 (full) / 99.46 | pending / 99.32 |" in text
    assert "| extreme / local | 95.00 | 99.46 | -4.46 |" in text
    assert "| extreme / fedavg | pending | 96.15 | - |" in text
    cmd = ("python benchmarks/reproduce/claims.py --no-write --only fmnist-t1 --levels {} "
           "--strategies {}")
    assert f"| local, severe | not started | `{cmd.format('severe', 'local')}` |" in text
    assert f"`{cmd.format('extreme', 'local')}`" not in text  # cached: not listed
    # FedAvg-FT comes from the FedAvg run: its command is FedAvg's.
    assert (f"| fedavg-ft, modest (in the fedavg run) | not started | "
            f"`{cmd.format('modest', 'fedavg')}` |") in text
    assert text.count("not started") == 3 + 4  # local: 3 levels; fedavg-ft: 4


def _row(what: str, wall: float, cpu: str, date: str) -> str:
    return f"| {what} | 8 | {wall:.0f} | {cpu} | 1.0 / 1.0 | {date} |"


def test_update_rewrites_only_the_named_sections(claims):
    head = claims.RUNS_HEADER + "\n|---|---:|---:|---:|---|---|"
    shared = _row("fmnist fedavg iid", 3600, "3240", "d1")
    old = "\n".join([
        "# Paper claims", "", "old header", "",
        "## A. Panacea", "", "old A", "",
        "## B. pFedGraph", "", "old B", "",
        "## Runs", "", "old totals", "", head, shared,
        _row("fmnist local iid", 7200, "-", "d0"),
        _row("fmnist fedavg-ft iid (inside the run x)", 3600, "3240", "d1"), "",
        "## Machine", "", "old machine", ""])
    new = "\n".join([
        "# Paper claims", "", "new header", "",
        "## A. Panacea", "", "new A", "",
        "## C. Poisoning", "", "new C", "",
        "## Runs", "", "new totals", "", head, shared,
        _row("fl60 panacea", 1800, "1080", "d2"), "",
        "## Machine", "", "new machine", ""])
    text = claims.merge_sections(old, new, {"A", "C"}, "note")
    lines = text.splitlines()
    # A replaced, B kept, C inserted after B; the new header and machine; the note last.
    assert [line for line in lines if line.startswith("## ")] == [
        "## A. Panacea", "## B. pFedGraph", "## C. Poisoning", "## Runs", "## Machine"]
    assert "new A" in lines and "old A" not in lines and "old B" in lines and "new C" in lines
    assert "new header" in lines and "new machine" in lines and "old machine" not in lines
    assert lines[-1] == "note"
    # Every run once; totals over the runs not read off another run: 3600 + 7200 + 1800 s
    # of wall time, 3240 + 1080 s of CPU time (the run without one counts for wall only).
    assert text.count(shared) == 1 and _row("fl60 panacea", 1800, "1080", "d2") in lines
    assert sum(line.startswith("| fmnist") or line.startswith("| fl60") for line in lines) == 4
    assert "Total: 3.5 h of wall time, 1.2 h of CPU time" in text
    # A section named but absent from both files is simply not there.
    assert claims.merge_sections(old, new, {"K"}, "n").count("## ") == 4


def _report(rows: dict[str, float]) -> str:
    lines = ["| dataset | strategy | clients | s/round | note |", "|---|---|---|---|---|"]
    lines += [f"| fl60 | {name} | 60 | {sec} | 2 rounds incl. 1 evaluation |"
              for name, sec in rows.items()]
    return "\n".join(["# Performance suite (--quick)", "", *lines, ""])


def test_perf_compare_ratios_by_hand(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH / "reproduce"))
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    perf_compare = importlib.import_module("perf_compare")
    # Two alternations; fedavg: before 0.010 / 0.020, now 0.012 / 0.018 -> ratio of the
    # minima 1.2, paired ratios 1.2 and 0.9 (median 1.05). sfl: only in one tree: left out.
    (tmp_path / "other.1.md").write_text(_report({"fedavg": 0.010, "local": 0.004}))
    (tmp_path / "this.1.md").write_text(_report({"fedavg": 0.012, "local": 0.002,
                                                  "sfl": 0.5}))
    (tmp_path / "other.2.md").write_text(_report({"fedavg": 0.020, "local": 0.008}))
    (tmp_path / "this.2.md").write_text(_report({"fedavg": 0.018, "local": 0.004}))
    lines = perf_compare.compare(tmp_path)
    assert lines[0] == "2 alternations."
    assert "| fl60 fedavg | 0.0100 | 0.0120 | 1.20 | 1.05 |" in lines
    assert "| fl60 local | 0.0040 | 0.0020 | 0.50 | 0.50 |" in lines
    assert not any("sfl" in line for line in lines)
    # geometric means: sqrt(1.2 * 0.5) = 0.775, sqrt(1.05 * 0.5) = 0.725
    assert "**0.775** for the minima, **0.725** for the paired medians" in lines[-1]
    sys.modules.pop("perf_compare", None)


def test_perf_compare_steady_pairs_blocks_in_order(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH / "reproduce"))
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    perf_compare = importlib.import_module("perf_compare")
    # steady_rounds.py's lines, prefixed by the tree; alternation 1 then 2.
    (tmp_path / "steady.txt").write_text("other fedavg 0.0200\nother local 0.0100\n"
                                         "this fedavg 0.0100\nthis local 0.0100\n"
                                         "other fedavg 0.0100\nother local 0.0200\n"
                                         "this fedavg 0.0200\nthis local 0.0100\n")
    lines = perf_compare.compare_steady(tmp_path)
    assert lines[0] == "2 alternations."
    # fedavg: minima 0.01 / 0.01; paired 0.5 and 2.0 (median 1.25). local: 1.0 and 0.5.
    assert "| fedavg | 0.0100 | 0.0100 | 1.00 | 1.25 |" in lines
    assert "| local | 0.0100 | 0.0100 | 1.00 | 0.75 |" in lines
    sys.modules.pop("perf_compare", None)


def test_steady_rounds_reads_its_settings(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    steady = importlib.import_module("steady_rounds")
    assert [steady.parse_value(v) for v in ("50", "0.25", "True", "false", "../x/METR-LA")] \
        == [50, 0.25, True, False, "../x/METR-LA"]
    with pytest.raises(SystemExit):  # argparse's error: --set needs KEY=VALUE
        steady.main(["fedavg", "--set", "steps"])
    sys.modules.pop("steady_rounds", None)


def test_pooled_clients_by_hand(runs):
    # Two run records; the second has a client that was not evaluated (NaN),
    # which is dropped: the pooled clients are 100, 0, 50 and 100 points.
    entries = [{"test_clients": [1.0, 0.0]}, {"test_clients": [0.5, float("nan"), 1.0]}]
    mean, std = pooled_clients(entries)
    assert mean == pytest.approx(62.5)
    assert std == pytest.approx((((37.5 ** 2) * 2 + 62.5 ** 2 + 12.5 ** 2) / 4) ** 0.5)
    # One record alone gives that run's own mean and spread.
    assert pooled_clients(entries[:1]) == pytest.approx((50.0, 50.0))


def test_full_level_findings_by_hand(claims, runs):
    # Section L from made-up records (test = per-client-best = v), reduced protocol first.
    def store(protocol, values):
        for n, v in values.items():
            cfg = claims.fmnist_config("homogeneous", n, protocol)
            write_record(runs, cfg, {"seconds": 1.0, "load": [0.0, 0.0],
                              "date": "today", "val": [v], "test": [v],
                              "summary": {"test": v, "test_per_client_best": v}})

    assert claims.FULL_LEVEL == "homogeneous"  # the paper's largest pFedGraph - Local margin
    store("reduced", {"local": 0.60, "fedavg": 0.70, "fedavg-ft": 0.55, "pfedgat": 0.65,
                      "pfedgraph": 0.62})
    text = "\n".join(claims.fmnist_full_section(run_missing=False))
    # Paper (pFedGraph Table 1, homogeneous): local 84.88, fedavg 87.27 (+2.39),
    # fedavg-ft 86.23 (+1.35), pfedgraph 87.25 (+2.37); pFedGAT has no pFedGraph row.
    assert ("- Reduced protocol, per-client-best, over Local (60.0; paper 84.88): "
            "fedavg +10.0 (paper +2.39), pfedgat +5.0, pfedgraph +2.0 (paper +2.37), "
            "fedavg-ft -5.0 (paper +1.35). Order: fedavg, pfedgat, pfedgraph, local, "
            "fedavg-ft.") in text
    assert "Full protocol" not in text  # its runs are missing: no line, but pending rows
    assert "| pfedgat | 65.0 / 65.0 | pending | 89.76 (pFedGAT Table 1) | - |" in text
    assert ("| fedavg-ft, homogeneous full (in the fedavg run) | not started | "
            "`python benchmarks/reproduce/claims.py --no-write --only fmnist-full "
            "--strategies fedavg`"
            in text)
    assert claims.full_level_done() == 0
    store("full", {"local": 0.85, "fedavg": 0.88, "fedavg-ft": 0.86, "pfedgat": 0.90,
                   "pfedgraph": 0.875})
    claims.PENDING.clear()  # what the first call listed (one call per process otherwise)
    text = "\n".join(claims.fmnist_full_section(run_missing=False))
    assert ("- Full protocol, per-client-best, over Local (85.0; paper 84.88): pfedgat +5.0, "
            "fedavg +3.0 (paper +2.39), pfedgraph +2.5 (paper +2.37), fedavg-ft +1.0 "
            "(paper +1.35). Order: pfedgat, fedavg, pfedgraph, fedavg-ft, local.") in text
    # full - paper: 87.5 - 87.25 for pFedGraph's table, 90.0 - 89.76 for pFedGAT's.
    assert "| pfedgraph | 62.0 / 62.0 | 87.5 / 87.5 | 87.25 | +0.25 |" in text
    assert "| pfedgat | 65.0 / 65.0 | 90.0 / 90.0 | 89.76 (pFedGAT Table 1) | +0.24 |" in text
    assert "not started" not in text and claims.full_level_done() == 5
    # Against the papers: local +0.12, fedavg +0.73, fedavg-ft -0.23, pfedgat +0.24,
    # pfedgraph +0.25.
    assert ("- The full-protocol cells against their papers: all within 3 points (largest "
            "difference: fedavg +0.73).") in text


def test_dispatch_counts_calls_and_kernels_by_hand(monkeypatch):
    # (x @ x.T).view(-1).sigmoid(): matmul calls mm (one kernel), t and view are
    # views, sigmoid is one kernel: 2 compute ops among the aten calls.
    from torch.profiler import ProfilerActivity, profile
    monkeypatch.syspath_prepend(str(BENCH / "reproduce"))
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    dispatch = importlib.import_module("dispatch")
    x = torch.randn(3, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ x.t()).view(-1).sigmoid()
    names = [e.name for e in prof.events() if e.name.startswith("aten::")]
    counts = dispatch.count_ops(prof.events())
    assert counts["calls"] == len(names) and {"aten::t", "aten::view", "aten::mm"} <= set(names)
    assert counts["compute"] == 2 and counts["launches"] == 0
    assert dispatch.fmt(2378.0) == "2,378" and dispatch.fmt(6.0e-8) == "6.0e-08"


# ---------------------------------------------- sections B-F: built from records only
DIGITS_ONLY = "t1,t3,fedaghn,pfedgat,fedcedar"


def no_training(monkeypatch) -> None:
    r"""Makes any simulator construction or round raise: what runs under it
    trains nothing."""
    from pyg_fedgraph.experiment import build
    from pyg_fedgraph.simulation.simulator import Simulator

    def refuse(*args, **kwargs):
        raise AssertionError("a rebuild from records trained a model")

    monkeypatch.setattr(Simulator, "__init__", refuse)
    monkeypatch.setattr(Simulator, "step", refuse)
    monkeypatch.setattr(build, "build_simulator", refuse)


def block(text: str, letter: str) -> str:
    r"""The characters of section ``letter`` of a results file, from its
    heading up to the next heading."""
    start = text.index(f"\n## {letter}. ")
    return text[start:text.index("\n## ", start + 1)]


@pytest.fixture
def committed(monkeypatch):
    r"""``claims`` on the repository's own records (``claims_runs/``)."""
    monkeypatch.syspath_prepend(str(BENCH / "reproduce"))
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    sys.modules.pop("claims", None)
    module = importlib.import_module("claims")
    monkeypatch.setattr(module, "PENDING", {})
    monkeypatch.setattr(module, "RUNS", RecordCache(module.RUNS.records, module.RUNS.checkpoints))
    yield module
    sys.modules.pop("claims", None)


def test_committed_sections_b_to_f_rebuild_identical_from_their_records(committed,
                                                                        monkeypatch, tmp_path,
                                                                        run_main):
    results = BENCH / "results" / "claims.md"
    no_training(monkeypatch)
    out = tmp_path / "claims.md"
    out.write_text(results.read_text())  # its hand-written readings stay
    run_main(committed, ["--cached-only", "--only", DIGITS_ONLY, "--out", str(out)])
    rebuilt, kept = out.read_text(), results.read_text()
    for letter in "BCDEF":
        assert block(rebuilt, letter) == block(kept, letter), f"section {letter}"
        assert "pending" not in block(rebuilt, letter)
    assert "Records made with torch " in block(rebuilt, "B")


def test_cached_only_without_records_trains_nothing_and_lists_commands(claims, runs,
                                                                       monkeypatch, tmp_path,
                                                                       run_main):
    no_training(monkeypatch)
    out = tmp_path / "claims.md"
    run_main(claims, ["--cached-only", "--only", DIGITS_ONLY, "--out", str(out)])
    text = out.read_text()
    assert not runs.records.exists() and not runs.checkpoints.exists()  # nothing run, nothing kept
    cmd = "`python benchmarks/reproduce/claims.py --no-write --only {}`"
    # 15 strategies x 4 levels; 13 strategies x 4 attacks; 2 signs; 2 splits; 3 values of K.
    for letter, count, row in [
            ("B", 60, "| fedavg, extreme | not started | "
                      f"{cmd.format('t1 --strategies fedavg')} |"),
            ("C", 52, "| pfedgraph, attack gaussian | not started | "
                      f"{cmd.format('t3 --strategies pfedgraph')} |"),
            ("D", 2, f"| fedaghn hn_rule=code | not started | {cmd.format('fedaghn')} |"),
            ("E", 2, f"| pfedgat, pathological | not started | {cmd.format('pfedgat')} |"),
            ("F", 3, f"| fedcedar, K = 4 | not started | {cmd.format('fedcedar')} |")]:
        section = block(text, letter)
        assert f"Not yet run ({count} runs;" in section and row in section, letter
        assert "Records made with" not in section
    assert "| local | pending | pending | pending | pending | pending | 95.02 | 80.39 |" in text
    assert "Best average here: **pending**." in block(text, "B")
    # The commands of --quick (and of another --rounds) repeat them.
    claims.PENDING.clear()
    run_main(claims, ["--cached-only", "--quick", "--rounds", "3", "--only", "t1",
                      "--out", str(out)])
    assert (f"| cfl, modest | not started | "
            f"{cmd.format('t1 --strategies cfl --quick --rounds 3')} |") in out.read_text()


def write_study(runs, cfg: ExperimentConfig, study: str, entry: dict) -> None:
    r"""A study record of ``cfg`` in the benchmarks' record folder, as
    ``RecordCache.run_study`` writes them."""
    from pyg_fedgraph.experiment.runner import plain_settings

    runs.records.mkdir(parents=True, exist_ok=True)
    entry = {"config": plain_settings(cfg.to_dict()), "study": study, "seconds": 1.0,
             "load": [0.0, 0.0], "date": "today", **entry}
    (runs.records / f"{runs.study_key(cfg, study)}.json").write_text(json.dumps(entry))


def test_fedaghn_section_from_study_records_by_hand(claims, runs, monkeypatch):
    no_training(monkeypatch)
    rounds = 20
    summary = {"test": 0.8, "test_per_client_best": 0.75}
    for rule, version in (("pfedhn", "9.1+cpu"), ("code", "9.2+cpu")):
        # Round r: Self 0.1, Similar 0.2 + r / 100, Other r / 100.
        weights = [[0.1, 0.2 + r / 100, r / 100] for r in range(1, rounds + 1)]
        write_study(runs, claims.fedaghn_config(rounds, 20, rule), "relation-weights",
                    {"relation_weights": weights, "summary": summary, "torch": version,
                     "device": "cpu", "self_weight": {"mean": 0.1, "at_zero": 2, "count": 60}})
    text = "\n".join(claims.fedaghn_section(rounds, 20, run_missing=False))
    # Rounds 2, 11 and 20: Similar / Other = 0.22 / 0.02, 0.31 / 0.11, 0.40 / 0.20.
    assert "| pfedhn | 2 | 0.1000 | 0.2200 | 0.0200 | 11.00 |" in text
    assert "| code | 11 | 0.1000 | 0.3100 | 0.1100 | 2.82 |" in text
    assert "| code | 20 | 0.1000 | 0.4000 | 0.2000 | 2.00 |" in text
    assert ("`code`: test 80.0 (best-round) / 75.0 (per-client-best), final mean q 0.100 "
            "(2 of 60 at the threshold 0)") in text
    assert "Records made with torch 9.1+cpu on cpu (1 run), torch 9.2+cpu on cpu (1 run)." \
        in text
    # A record under the key whose settings differ is not this run's.
    write_study(runs, claims.fedaghn_config(rounds, 20, "code"), "relation-weights",
                {"config": {"dataset": "other"}})
    assert runs.load_study(claims.fedaghn_config(rounds, 20, "code"), "relation-weights") is None


def test_study_run_records_what_made_it_and_reads_back(runs):
    cfg = ExperimentConfig(dataset="digits", strategy="fedavg", clients=3, rounds=2)
    measured = []

    class Finished:  # what a study hands back: the simulator of its run
        device = torch.device("cpu")

        def summary(self):
            return {"test": 0.5}

    def measure():
        measured.append(cfg)
        return Finished(), {"series": [0.25, 1.0]}

    entry = runs.run_study(cfg, "series", measure)
    assert entry["series"] == [0.25, 1.0] and entry["summary"] == {"test": 0.5}
    assert entry["torch"] == torch.__version__ and entry["device"] == "cpu"
    assert entry["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert runs.study_key(cfg, "series") in runs.table_path(cfg).read_text()
    # Read back, not measured again; the run's own record (another key) is untouched.
    assert runs.run_study(cfg, "series", measure) == entry and len(measured) == 1
    assert runs.load(cfg) is None and runs.load_study(cfg, "other") is None
    assert "| digits fedavg N=3 (study: series) | 2 |" in "\n".join(runs_table(runs.used))
    assert made_with([entry, None]) == (f"torch {torch.__version__} on cpu "
                                             f"({torch.backends.cpu.get_cpu_capability()})")
@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_subgraph_speed_loop_trains_what_the_library_trains(monkeypatch, model):
    # benchmarks/perf/subgraph_speed.py compares the library's round with a per-client PyG
    # loop (PyG's layers at their defaults): both must compute the same round. From the
    # same start, one round each: the clients' parameters agree, and the loop's server
    # model is their FedAvg (weights: training nodes).
    from pyg_fedgraph.datasets import planted_graphs
    from pyg_fedgraph.models import build_model
    from pyg_fedgraph.simulation import Simulator
    from pyg_fedgraph.strategies import build_strategy

    monkeypatch.syspath_prepend(str(BENCH / "reproduce"))
    monkeypatch.syspath_prepend(str(BENCH / "perf"))
    speed = importlib.import_module("subgraph_speed")
    data = planted_graphs(num_clients=4, num_nodes=120)
    torch.manual_seed(0)
    net = build_model(model, data.input_shape, data.num_classes, **speed.MODELS[model][0])
    sim = Simulator(data, net, build_strategy("fedavg"), rounds=10, local=speed.FEDPUB,
                    eval_every=10, seed=0)
    loop = speed.PerClientLoop(data, model, net.state_dict(), speed.FEDPUB)
    sim.step()
    loop.round()
    local = loop.local_params(sim.layout)
    torch.testing.assert_close(local, sim.local_params, rtol=0, atol=1e-5)
    assert float((local - sim.layout.flatten(net)).abs().max()) > 1e-4  # they did train
    counts = data.num_samples("train").to(local.dtype)
    server = torch.cat([s.reshape(-1) for s in loop.server])
    torch.testing.assert_close(server, (counts / counts.sum()) @ local, rtol=0, atol=1e-6)
    assert set(loop.clock.seconds) == {"gradients", "training", "round"}
    sys.modules.pop("subgraph_speed", None)
