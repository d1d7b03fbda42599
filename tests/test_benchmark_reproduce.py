"""The smaller reproduction scripts of benchmarks/reproduce/ (compare_strategies.py,
default_job.py, graph_recovery.py, pfedgat_allocation.py, subgraph_t1.py) rebuilt from
their records: from records made up here, with nothing trained (any simulator or command
raises), each table by hand; and each committed results file rebuilt from the committed
records, identical but for its machine lines."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pyg_fedgraph.experiment import ExperimentConfig, RecordCache
from pyg_fedgraph.experiment.runner import plain_settings

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def no_training(monkeypatch, module: Any = None) -> None:
    r"""Makes any simulator construction or round, and any command run in
    another process, raise: what runs under it trains nothing."""
    from pyg_fedgraph.experiment import build
    from pyg_fedgraph.simulation.simulator import Simulator

    def refuse(*args, **kwargs):
        raise AssertionError("a rebuild from records trained a model")

    monkeypatch.setattr(Simulator, "__init__", refuse)
    monkeypatch.setattr(Simulator, "step", refuse)
    monkeypatch.setattr(build, "build_simulator", refuse)
    if module is not None and hasattr(module, "build_simulator"):
        monkeypatch.setattr(module, "build_simulator", refuse)
    if module is not None and hasattr(module, "subprocess"):  # default_job's commands
        monkeypatch.setattr(module, "subprocess", SimpleNamespace(run=refuse))


def load(monkeypatch, name: str) -> Any:
    r"""A fresh import of the script ``name``."""
    monkeypatch.syspath_prepend(str(BENCH / "reproduce"))
    sys.modules.pop(name, None)
    return importlib.import_module(name)


@pytest.fixture
def script(monkeypatch, tmp_path, request):
    r"""The script named by the test's parameter, its RUNS in ``tmp_path``,
    nothing trainable."""
    module = load(monkeypatch, request.param)
    monkeypatch.setattr(module, "RUNS", RecordCache(tmp_path / "records", tmp_path / "cache"))
    no_training(monkeypatch, module)
    yield module
    sys.modules.pop(request.param, None)


def store(runs: RecordCache, cfg: ExperimentConfig, test: float, seconds: float = 1.0,
          cpu: float = 1.0, date: str = "2026-01-01") -> None:
    r"""A made-up run record of ``cfg``."""
    runs._store(cfg, {"config": plain_settings(cfg.to_dict()), "summary": {"test": test},
                      "seconds": seconds, "cpu_seconds": cpu, "load": [0.0, 0.0],
                      "date": date, "torch": "9.9", "device": "cpu"})


class Finished:
    r"""What a made-up study hands back as its simulator."""
    device = torch.device("cpu")

    def __init__(self, test: float) -> None:
        self.test = test

    def summary(self) -> dict[str, float]:
        return {"test": self.test}


def study(runs: RecordCache, cfg: ExperimentConfig, name: str, test: float,
          refresh: bool = False, **figures: Any) -> None:
    r"""A made-up study record of ``cfg`` (through the cache's own writer)."""
    runs.run_study(cfg, name, lambda: (Finished(test), figures), refresh=refresh)


@pytest.mark.parametrize("script", ["compare_strategies"], indirect=True)
def test_compare_strategies_by_hand(script, tmp_path, run_main):
    args = script.parser().parse_args(["--seeds", "2", "--strategies", "local,fedavg,panacea"])
    local, fedavg = script.configs(args, "local"), script.configs(args, "fedavg")
    store(script.RUNS, local[0], 0.8, seconds=4.0, cpu=1.0, date="2026-01-01")
    store(script.RUNS, local[1], 0.9, seconds=6.0, cpu=2.0, date="2026-01-03")
    store(script.RUNS, fedavg[0], 0.5, seconds=2.0, cpu=4.0, date="2026-01-02")
    out = tmp_path / "compare.md"
    out.write_text("# old\n\n### Reading\nWritten by hand.\n")
    text = run_main(script, ["--seeds", "2", "--strategies", "local,fedavg,panacea",
                             "--cached-only", "--out", str(out)])
    # local: mean of 0.8 and 0.9; sample std 0.1 / sqrt(2); (4 / 20 + 6 / 20) / 2 s a round,
    # (1 / 20 + 2 / 20) / 2 CPU s a round.
    assert "| local | 0.8500 | 0.0707 | 0.2500 | 0.0750 | 2 |  |" in text
    assert "| fedavg | 0.5000 | 0.0000 | 0.1000 | 0.2000 | 1 |  |" in text
    assert ("| panacea | n/a |  |  |  |  | strategy 'panacea' needs a prior client graph |"
            in text)
    assert ("Records: 3 runs in `benchmarks/results/claims_runs/`, made with torch 9.9 on cpu, "
            "finished 2026-01-01 to 2026-01-03, 7 CPU seconds in all.") in text
    cmd = "python benchmarks/reproduce/compare_strategies.py"
    assert f"Command: `{cmd} --seeds 2 --strategies local,fedavg,panacea`" in text
    assert "## Not yet run (1 run)" in text
    assert f"| fedavg | 1 | `{cmd} --no-write --seeds 2 --strategies fedavg` |" in text
    assert "### Reading\nWritten by hand." in out.read_text()  # kept on rebuild
    assert not (tmp_path / "cache").exists()  # nothing ran


@pytest.mark.parametrize("script", ["default_job"], indirect=True)
def test_default_job_by_hand(script, tmp_path, run_main):
    names = ["local", "fedavg", "fedavg-ft", "pfedgraph"]
    for seed, tests, wall, cpu in ((0, [0.70, 0.30, 0.60, 0.75], 20.0, 10.0),
                                   (2, [0.72, 0.20, 0.50, 0.70], 30.0, 12.5)):
        study(script.RUNS, script.job_config(seed), script.STUDY, tests[-1],
              strategies=names, tests=dict(zip(names, tests, strict=True)),
              command_wall_seconds=wall, command_cpu_seconds=cpu,
              config_yaml=f"dataset: digits\nseed: {seed}\nprovenance:\n  git: abc\n")
    out = tmp_path / "default_job.md"
    text = run_main(script, ["--cached-only", "--out", str(out)])
    assert "| seed | local | fedavg | fedavg-ft | pfedgraph |" in text
    assert "| 0 | 0.7000 | 0.3000 | 0.6000 | 0.7500 | yes | 20.0 | 10.0 |" in text
    assert "| 1 | pending | pending | pending | pending |  | | |" in text
    assert "| 2 | 0.7200 | 0.2000 | 0.5000 | 0.7000 | NO | 30.0 | 12.5 |" in text
    assert "| mean | 0.7100 | 0.2500 | 0.5500 | 0.7250 | | | |" in text
    assert "(seed 2)" in text and "```yaml\ndataset: digits\nseed: 2\n```" in text
    assert "Not yet run: seeds 1 (`python benchmarks/reproduce/default_job.py --seeds 1`)." \
        in text
    assert out.read_text() == text
    # Without --cached-only, a recorded seed is read back, not run again.
    assert run_main(script, ["--seeds", "0,2", "--no-write", "--out", str(out)]).split(
        "## Machine")[0] == text.split("## Machine")[0]


def test_default_job_record_is_under_the_settings_the_cli_resolves(monkeypatch):
    module = load(monkeypatch, "default_job")
    cfg = module.job_config(2)
    assert (cfg.dataset, cfg.strategy, cfg.partition, cfg.clients, cfg.rounds, cfg.seed) == (
        "digits", "pfedgraph", "group", 40, 20, 2)
    assert cfg.overrides == {"data.fractions": [0.5, 0.2, 0.3]}


RECOVERY = {"ri": 1.0, "ari_components": 1.0, "series": [0.5, 0.95, 1.0], "rounds": [1, 2, 3],
            "self_weight": 0.2, "protocol": "gcn {}"}


@pytest.mark.parametrize("script", ["graph_recovery"], indirect=True)
def test_graph_recovery_by_hand(script, tmp_path, run_main):
    for seed, ari in ((0, 1.0), (1, 1.0), (2, 0.95)):
        study(script.RUNS, script.planted_config("pfedgraph", 1.0, seed), script.STUDY, 0.9,
              ari=ari, **RECOVERY)
    study(script.RUNS, script.cora_config("pfedgraph"), script.STUDY, 0.8, ari=1.0,
          **RECOVERY)
    text = run_main(script, ["--cached-only", "--out", str(tmp_path / "recovery.md")])
    # Rounds 2 and 3 of 1..3 reach 0.9; the seconds are the made-up studies' (instant).
    assert ("| s = 1.0 | pfedgraph | 1.000 / 1.000 / 0.950 | 1.000 / 1.000 / 1.000 | "
            "1.000 / 1.000 / 1.000 | 2 / 2 / 2 | 2 / 2 / 2 of 3 | 0.200 / 0.200 / 0.200 | "
            "90.0 | 0 |") in text
    assert "| cora overlapping | pfedgraph | 1.000 | 1.000 | 1.000 | 2 | 2 of 3 | 0.200 | 80.0 |" \
        in text
    assert "| s = 1.0 | fedaghn | pending |" in text
    assert ("- pfedgraph's final ARI >= 0.9 at s = 1.0 (every seed) and on Cora's overlapping "
            "split: **met** (s = 1.0: 1.000 / 1.000 / 0.950; Cora: 1.000).") in text
    assert "## Not yet run (35 runs)" in text and "- planted s = 0.0 pfedgraph seed 0" in text
    assert "- planted-graphs: gcn {}" in text
    study(script.RUNS, script.cora_config("pfedgraph"), script.STUDY, 0.8, refresh=True,
          ari=0.85, **RECOVERY)
    text = run_main(script, ["--cached-only", "--no-write"])
    assert "split: **not met** (s = 1.0: 1.000 / 1.000 / 0.950; Cora: 0.850)." in text


def allocation(same: float, within: float, between: float, own: float, dev: float) -> dict:
    return {"allocation": {"same": same, "chance": 0.28, "within": within, "between": between,
                           "self": own, "dev": dev, "min": 0.0, "max": 1.0, "max_dev": 0.9}}


@pytest.mark.parametrize("script", ["pfedgat_allocation"], indirect=True)
def test_pfedgat_allocation_by_hand(script, tmp_path, monkeypatch, run_main):
    variants = {v: script.VARIANTS[v] for v in ("local", "pfedgat", "pfedgat-paper")}
    # A variant the library refuses is named with its error, not listed as pending.
    variants["refused"] = ("pfedgat", {"no_such_option": 1})
    monkeypatch.setattr(script, "VARIANTS", variants)
    store(script.RUNS, script.config("local", "pathological", 0, 30), 0.90)
    store(script.RUNS, script.config("local", "pathological", 1, 30), 0.80)
    study(script.RUNS, script.config("pfedgat", "pathological", 0, 30), script.STUDY, 0.95,
          **allocation(0.9, 0.1, 0.01, 0.5, 0.1))
    study(script.RUNS, script.config("pfedgat", "pathological", 1, 30), script.STUDY, 0.80,
          **allocation(0.7, 0.2, 0.03, 0.3, 0.2))
    text = run_main(script, ["--seeds", "2", "--cached-only", "--out", str(tmp_path / "a.md")])
    assert "## pathological (uniform weights give a same-class share of 0.28)" in text
    # Means and sample stds of two seeds; 0.95 >= 0.90 and 0.80 >= 0.80: both reach Local.
    assert "| local | 85.00 ± 7.07 | - | - | - | - | - | - |" in text
    assert ("| pfedgat | 87.50 ± 10.61 | 2/2 | 0.800 ± 0.141 | 0.150 ± 0.071 | "
            "0.020 ± 0.014 | 0.400 ± 0.141 | 0.1500 ± 0.0707 |") in text
    assert "| pfedgat-paper | pending |" in text
    assert "| refused | n/a: the library refuses the run (--set no_such_option: " in text
    # iid: 3 variants x 2 seeds; pathological: pfedgat-paper's 2 seeds.
    assert "## Not yet run (8 runs)" in text and "- iid local seed 1" in text
    assert "refused seed" not in text
    assert ("`python benchmarks/reproduce/pfedgat_allocation.py --seeds 2 --cached-only` "
            "rebuilds") in text


@pytest.mark.parametrize("script", ["subgraph_t1"], indirect=True)
def test_subgraph_t1_by_hand(script, monkeypatch):
    monkeypatch.setattr(script, "PENDING", [])
    store(script.RUNS, script.config("cora", "metis-10", "local", 0), 0.80)
    store(script.RUNS, script.config("cora", "metis-10", "local", 1), 0.90)
    store(script.RUNS, script.config("cora", "metis-10", "fedpub", 0), 0.82)
    store(script.RUNS, script.config("cora", "metis-10", "pfedgraph", 0), 0.70)
    text = "\n".join(script.section(run_missing=False))
    # Population std over the seeds at hand, as the authors' notebook.
    assert "| local | pending / - | 85.00 ± 5.00 (n=2) / - |" in text
    assert "| fedpub | pending / - | 82.00 ± 0.00 (n=1) / nb 81.19 ± 0.26 |" in text
    assert ("- fedpub within 2 points of the authors' notebook (81.19): met, ours 82.00 "
            "(+0.81).") in text
    assert ("- a graph-based rule at or above FED-PUB on cora METIS 10: not met, by 12.00 "
            "points (best pfedgraph 70.00, FED-PUB 82.00; of pfedgraph).") in text
    assert f"Not yet run: {2 * 6 * 14 * 3 - 4} cells" in text


@pytest.mark.parametrize("script", ["subgraph_t1"], indirect=True)
def test_subgraph_t1_counts_equal_rows_and_costs_by_hand(script, monkeypatch):
    monkeypatch.setattr(script, "PENDING", [])
    cfg = script.config
    for seed, (avg, prox) in enumerate([(0.70, 0.70), (0.60, 0.60), (0.50, 0.55)]):
        store(script.RUNS, cfg("cora", "metis-10", "fedavg", seed), avg, cpu=10.0 * (seed + 1))
        store(script.RUNS, cfg("cora", "metis-10", "fedprox", seed), prox, cpu=40.0)
    store(script.RUNS, cfg("cora", "metis-5", "fedamp", 0), 0.8125)
    store(script.RUNS, cfg("cora", "metis-5", "local", 0), 0.8125)
    store(script.RUNS, cfg("cora", "metis-5", "fedamp", 1), 0.9)      # no local seed 1
    text = "\n".join(script.section(run_missing=False))
    assert ("- fedprox equals fedavg in 2 of 3 runs, and is at most 5.00 points from it in "
            "the others (cora metis-10, seed 2: 55.00 against 50.00): ") in text
    assert "- fedamp equals local in 1 of 1 runs: " in text
    assert "fedprox-ft equals" not in text            # no twin records made up here
    # CPU seconds: fedavg's mean over its seeds (10, 20, 30), fedprox 40 each.
    assert "| fedavg | - | 20 | - | - | - | - |" in text
    assert "| fedprox | - | 40 | - | - | - | - |" in text
    assert "| fedamp | 1 | - | - | - | - | - |" in text
    # No setting has every row recorded: no one-seed totals.
    assert "| one seed, all rows | - | - | - | - | - | - |" in text
    # 6 + 3 + 3 runs recorded: 60 + 120 + 3 CPU seconds.
    recorded = (60 + 120 + 3) / 3600
    assert f"Recorded: 9 runs, {recorded:.2f} CPU hours." in text
    # Left, cora: metis-10's 10 other rows x 3 seeds at metis-10's mean run (30 s),
    # metis-5: fedamp 1 seed at 1 s, local 2 at 1 s, the other 10 rows x 3 at 1 s;
    # citeseer: nothing recorded, so nothing to estimate from.
    left = (10 * 3 * 30 + 1 + 2 + 10 * 3) / 3600
    assert f"Left: {10 * 3 + 1 + 2 + 30} runs, about {left:.1f} CPU hours" in text
    assert "One seed of the whole table" not in text


@pytest.mark.parametrize("script", ["subgraph_t1"], indirect=True)
def test_subgraph_t1_one_seed_of_the_whole_table(script, monkeypatch):
    monkeypatch.setattr(script, "PENDING", [])
    runners = [n for n in script.STRATEGIES if n not in script.TWINS]
    for dataset, cpu in (("cora", 2.0), ("citeseer", 3.0)):
        for setting in script.SETTINGS:
            for name in runners:
                store(script.RUNS, script.config(dataset, setting, name, 0), 0.5, cpu=cpu)
    text = "\n".join(script.section(run_missing=False))
    n = len(runners) * len(script.SETTINGS)
    assert f"| one seed, all rows | {2 * len(runners)} | " in text
    whole = 5 * n / 3600
    assert (f"One seed of the whole table: cora {2 * n:,} + citeseer {3 * n:,} CPU seconds = "
            f"{whole:.1f} CPU hours with the default allocator; its 3 seeds about "
            f"{3 * whole:.1f} CPU hours. Recorded") in text      # no kept runs: no kept total
    # Seeds 1 and 2 of every runner left, each at its own seed-0 cost.
    assert f"Left: {4 * n} runs, about {2 * 5 * n / 3600:.1f} CPU hours" in text


@pytest.mark.parametrize("script", ["subgraph_t1"], indirect=True)
def test_subgraph_t1_fedpub_against_the_best_graph_rule_by_hand(script, monkeypatch):
    monkeypatch.setattr(script, "PENDING", [])
    values = {  # test accuracy by seed
        ("metis-5", "fedpub"): (0.80, 0.82, 0.84),       # 82 ± 1.63
        ("metis-5", "pfedgraph"): (0.70, 0.70, 0.70),
        ("metis-5", "fedaghn"): (0.81, 0.81, 0.81),      # best rule: -1.00, within 1.63
        ("metis-5", "pfedgat"): (0.60, 0.60, 0.60),
        ("metis-5", "local"): (0.85, 0.85, 0.85),        # the best row
        ("metis-20", "fedpub"): (0.70, 0.70, 0.70),
        ("metis-20", "pfedgraph"): (0.72, 0.70, 0.74),   # +2.00: above
        ("metis-20", "fedaghn"): (0.50, 0.50, 0.50),
        ("metis-20", "pfedgat"): (0.50, 0.50, 0.50),
        ("metis-10", "fedpub"): (0.70, 0.70, 0.70),      # pfedgat missing a seed: left out
        ("metis-10", "pfedgraph"): (0.70, 0.70, 0.70),
        ("metis-10", "fedaghn"): (0.70, 0.70, 0.70),
        ("metis-10", "pfedgat"): (0.70, 0.70),
    }
    for (setting, name), tests in values.items():
        for seed, test in enumerate(tests):
            store(script.RUNS, script.config("cora", setting, name, seed), test)
    text = "\n".join(script.section(run_missing=False))
    assert ("| cora | metis-5 | 82.00 ± 1.63 | fedaghn 81.00 ± 0.00 | -1.00 (within the "
            "seeds' spread) | local 85.00 |") in text
    assert ("| cora | metis-20 | 70.00 ± 0.00 | pfedgraph 72.00 ± 1.63 | +2.00 | pfedgraph "
            "72.00 |") in text
    assert "| cora | metis-10 |" not in text
    assert ("A graph-based rule is at or above FED-PUB in 1 of these 2 settings, and under it "
            "within the seeds' spread in 1 more.") in text


@pytest.mark.parametrize("script", ["subgraph_t1"], indirect=True)
def test_subgraph_t1_costs_apart_by_allocator(script, monkeypatch):
    monkeypatch.setattr(script, "PENDING", [])
    runners = [n for n in script.STRATEGIES if n not in script.TWINS]
    after = "2026-11-27T08:00:00+00:00"          # 1 h 35 min 13 s after KEPT_SINCE
    for dataset in script.DATASETS:
        for setting in script.SETTINGS:
            for name in runners:
                store(script.RUNS, script.config(dataset, setting, name, 0), 0.5, cpu=40.0)
    cfg = script.config
    # fedavg on cora metis-5: seed 1 kept (20 s), seed 2 began before KEPT_SINCE (it ends
    # after it, but its 6,000 wall seconds reach back before it): default (60 s).
    store(script.RUNS, cfg("cora", "metis-5", "fedavg", 1), 0.5, cpu=20.0, seconds=30.0,
          date=after)
    store(script.RUNS, cfg("cora", "metis-5", "fedavg", 2), 0.5, cpu=60.0, seconds=6000.0,
          date=after)
    assert script.kept_memory({"date": after, "seconds": 5713.0})
    assert not script.kept_memory({"date": after, "seconds": 5714.0})
    text = "\n".join(script.section(run_missing=False))
    assert "| fedavg | 50 / 20 | 40 | 40 | 40 | 40 | 40 |" in text   # (40 + 60) / 2, 20
    n = len(runners)
    assert f"| one seed, all rows | {40 * n + 10:.0f} / {40 * n - 20:.0f} | {40 * n} |" in text
    whole = (2 * 6 * 40 * n + 10) / 3600
    kept = (2 * 6 * 40 * n - 20) / 3600
    assert f"= {whole:.1f} CPU hours with the default allocator" in text
    assert (f"Keeping freed memory where it was measured (and at the default's cost "
            f"elsewhere): cora {6 * 40 * n - 20:,} + citeseer {6 * 40 * n:,} CPU seconds = "
            f"{kept:.1f} CPU hours; 3 seeds about {3 * kept:.1f} CPU hours.") in text
    # Left: cora metis-5 fedavg is complete; every other run at 40 s.
    left_n = 2 * 6 * n * 2 - 2
    assert f"Left: {left_n} runs, about {left_n * 40 / 3600:.1f} CPU hours" in text



@pytest.mark.parametrize("script", ["subgraph_t1"], indirect=True)
def test_subgraph_t1_ablation_by_hand(script, monkeypatch):
    monkeypatch.setattr(script, "PENDING", [])
    monkeypatch.setattr(script, "ABLATION_PENDING", [])
    cfg = script.config
    assert cfg("cora", "metis-10", "pfedgat-masked", 0).model == "masked-gcn"
    assert cfg("cora", "metis-10", "fedpub-gcn", 0).model == "gcn"
    assert cfg("cora", "metis-10", "fedpub-gcn", 0).overrides["scale"] == 3.0
    store(script.RUNS, cfg("cora", "metis-10", "fedpub", 0), 0.80)
    store(script.RUNS, cfg("cora", "metis-10", "fedpub", 1), 0.82)
    store(script.RUNS, cfg("cora", "metis-10", "pfedgat", 0), 0.70)
    store(script.RUNS, cfg("cora", "metis-10", "pfedgat-masked", 0), 0.84)
    store(script.RUNS, cfg("cora", "metis-10", "fedaghn-masked", 0), 0.79)
    store(script.RUNS, cfg("cora", "metis-10", "fedaghn-masked", 1), 0.77)
    text = "\n".join(script.section(run_missing=False))
    # Rule x model: pFedGAT's plain row from the table, its masked row from the ablation.
    assert ("| pfedgat | 70.00 ± 0.00 (n=1) | 84.00 ± 0.00 (n=1) | pending | pending |"
            in text)
    assert ("| fedpub's similarity | pending | 81.00 ± 1.00 (n=2) | pending | pending |"
            in text)
    assert ("- cora: the best graph rule on the masked GCN, pfedgat-masked, 84.00 against "
            "FED-PUB's 81.00 (+3.00).") in text
    assert "- citeseer: the best graph rule" not in text
    # 7 rows x 3 seeds x 2 datasets wanted, 3 recorded; fedavg-ft-masked rides on
    # fedavg-masked, so the command names the six runners.
    assert "Ablation not yet run: 39 cells; " in text
    assert ("--settings metis-10 --strategies fedpub-gcn,local-masked,fedavg-masked,"
            "pfedgraph-masked,fedaghn-masked,pfedgat-masked` runs them.") in text


@pytest.mark.parametrize("script", ["subgraph_t1"], indirect=True)
def test_subgraph_t1_curves_figure(script, monkeypatch):
    monkeypatch.setattr(script, "PENDING", [])
    monkeypatch.setattr(script, "ABLATION_PENDING", [])
    script.section(run_missing=False)
    assert script.curves_figure(script.CELLS) is None          # nothing recorded
    for seed, val in ((0, [0.2, 0.4, 0.6]), (1, [0.4, 0.6, 0.8, 0.9])):
        cfg = script.config("cora", "metis-10", "pfedgat-masked", seed)
        script.RUNS._store(cfg, {"config": plain_settings(cfg.to_dict()),
                                 "summary": {"test": 0.5}, "val": val, "seconds": 1.0,
                                 "cpu_seconds": 1.0, "load": [0.0, 0.0], "date": "2026-01-01",
                                 "torch": "9.9", "device": "cpu"})
    script.section(run_missing=False)
    fig = script.curves_figure(script.CELLS)
    try:
        cora, citeseer = fig.axes
        assert not citeseer.lines
        (line,) = cora.lines
        # The mean over the seeds, in percent, over the rounds both recorded.
        assert line.get_xdata().tolist() == [1, 2, 3]
        assert line.get_ydata().tolist() == pytest.approx([30.0, 50.0, 70.0])
        assert line.get_linestyle() == "--"                   # a masked-GCN row
        assert line.get_label() == "pFedGAT, masked (2 seeds)"
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_subgraph_t1_fedavg_probe_runs_the_variants_it_names(monkeypatch):
    module = load(monkeypatch, "subgraph_t1")
    if not (module.ROOT / module.DATA_ROOT / "ind.cora.x").is_file():
        pytest.skip(f"{module.DATA_ROOT}/ind.cora.x not present")
    rows = [line.split(" | ") for line in module.probe_fedavg([0], rounds=1)
            if line.startswith("| ") and "seed" not in line]
    assert [r[0] for r in rows] == ["| " + v for v in module.PROBE_VARIANTS]
    as_run, no_dropout, fresh, uniform = (r[2] for r in rows)   # round 1: "global / local"
    # The first local epoch starts with no optimizer state, kept or not: the same numbers.
    assert fresh == as_run
    assert no_dropout.split(" / ")[1] != as_run.split(" / ")[1]   # dropout acts in training
    # Same local epoch from the same start; only the server's average differs.
    assert uniform.split(" / ")[1] == as_run.split(" / ")[1]
    # FedAvg's client weights n_i / sum n_j: ten METIS parts of Cora, none empty.
    low, high = map(float, rows[0][-1].rstrip(" |").split("-"))
    assert 0 < low <= 0.1 <= high < 1


COMMITTED = [
    ("compare_strategies", [], "compare_digits_pathological.md"),
    ("compare_strategies", ["--partition", "group", "--clients", "40", "--set",
                            "data.fractions=[0.5,0.2,0.3]", "--tag", "digits_default_job"],
     "compare_digits_default_job.md"),
    ("default_job", [], "default_job.md"),
    ("graph_recovery", [], "graph_recovery.md"),
    ("pfedgat_allocation", [], "pfedgat_allocation.md"),
    ("subgraph_t1", [], "subgraph_t1.md"),
]


@pytest.mark.parametrize(("name", "argv", "results"), COMMITTED,
                         ids=[c[2] for c in COMMITTED])
def test_committed_results_rebuild_from_the_committed_records(monkeypatch, name, argv, results,
                                                              run_main):
    module = load(monkeypatch, name)
    try:
        no_training(monkeypatch, module)
        text = run_main(module, [*argv, "--cached-only", "--no-write"])
        committed = (BENCH / "results" / results).read_text()
        assert "pending" not in text.split("## Machine")[0] or name == "subgraph_t1"
        assert text.split("## Machine")[0] == committed.split("## Machine")[0]
    finally:
        sys.modules.pop(name, None)
