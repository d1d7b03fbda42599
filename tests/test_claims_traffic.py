"""Section O of benchmarks/reproduce/claims.py (Panacea's Tables II and III on the recorded traffic
fragments): its configurations, the rate choice, the cells, the goal line and the pending
runs, from records written by hand; and its sigma constants against the shared files."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pyg_fedgraph.engine.rounds import num_sampled

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def records(runs) -> Path:
    return runs.records


@pytest.fixture
def claims(claims, monkeypatch, tmp_path):
    r"""conftest's ``claims``, its traffic cost file in ``tmp_path``."""
    monkeypatch.setattr(claims, "TRAFFIC_COST", tmp_path / "traffic_rounds.json")
    return claims


def write(records: Path, cfg, summary: dict | None = None, metrics: dict | None = None,
          novel: dict | None = None, val: list[float] | None = None) -> None:
    r"""A record of ``cfg`` as the cache writes them (numbers made up for the test;
    ``val``: its validation curve)."""
    from pyg_fedgraph.experiment.records import config_key
    from pyg_fedgraph.experiment.runner import plain_settings

    records.mkdir(parents=True, exist_ok=True)
    entry = {"config": plain_settings(cfg.to_dict()), "seconds": 1.0, "cpu_seconds": 1.0,
             "load": [0.0, 0.0],
             "date": "today", "val": val or [], "test": [], "summary": summary or {},
             "test_client_metrics": metrics or {}}
    if novel is not None:
        entry["novel_client_metrics"] = novel
    (records / f"{config_key(cfg)}.json").write_text(json.dumps(entry))


def mph(mse: list[float]) -> dict[str, list[float]]:
    r"""Per-client metrics of a record: the MSE on z-scored speeds, MAE and
    MSE in mph at the three horizons (MAE 1, 2, 3 mph; MSE 4, 9, 16 mph^2)."""
    return {"mse_norm": mse, **{f"mae@{h}": [float(k)] * len(mse)
                                for k, h in enumerate((3, 6, 12), 1)},
            **{f"mse@{h}": [float(k * k)] * len(mse) for k, h in enumerate((3, 6, 12), 2)}}


def pfedhn_chose_003(claims, records: Path) -> None:
    r"""Records of pFedHN on METR-LA: its rate choice (0.03 has the lowest
    validation MSE, 0.2 against 0.5) and its Table II run at that rate."""
    for lr in claims.PANACEA_LR_GRID:
        write(records, claims.traffic_config("metr-la", "pfedhn", lr, rounds=200),
              {"val_best": 0.5 if lr != 0.03 else 0.2})
    write(records, claims.traffic_config("metr-la", "pfedhn", 0.03),
          metrics=mph([0.040, 0.060]))


@pytest.mark.parametrize("dataset, sensors, held", [("metr-la", 20, 4), ("pems-bay", 67, 13)])
def test_every_run_samples_five_clients_and_table_iii_holds_out_a_fifth(
        claims, dataset, sensors, held):
    for novel in (False, True):
        cfg = claims.traffic_config(dataset, "panacea", 0.01, novel=novel)
        # The simulator's rule for held-out clients (experiment/build.py).
        out = max(1, int(round(cfg.novel_clients * sensors))) if cfg.novel_clients else 0
        assert out == (held if novel else 0)
        assert num_sampled(sensors - out, cfg.overrides["sample_fraction"]) == 5
        assert cfg.model == "gru-seq2seq" and cfg.rounds == 800
        assert cfg.overrides["momentum"] == 0.0 and cfg.overrides["steps"] == 50
    assert claims.traffic_config(dataset, "fedavg", 0.1, rounds=200).rounds == 200


def test_the_rate_is_the_lowest_validation_mse_and_a_diverged_rate_never_wins(claims,
                                                                              records):
    vals = {0.001: 0.30, 0.003: 0.25, 0.01: 0.21, 0.03: 0.22, 0.1: math.nan}
    for lr, v in vals.items():
        write(records, claims.traffic_config("metr-la", "ditto", lr, rounds=200),
              {"val_best": v})
    lr, found = claims.traffic_rate("metr-la", "ditto", run_missing=False)
    assert lr == 0.01 and len(found) == 5
    assert claims.rate_text(lr) == "0.01" and claims.rate_text(None) == "pending"
    assert claims.rate_text(0.1) == "0.1 (top of the grid)"
    assert claims.rate_text(0.001) == "0.001 (bottom of the grid)"
    write(records, claims.traffic_config("metr-la", "sfl", 0.1, rounds=200), {"val_best": 0.1})
    assert claims.traffic_rate("metr-la", "sfl", run_missing=False)[0] is None  # 4 missing


def test_cells_pool_the_seeds_clients_and_give_mph_by_hand(claims):
    runs = [{"test_client_metrics": mph([0.010, 0.030])},
            {"test_client_metrics": mph([0.020, math.nan])}]
    # Clients 10, 30, 20 (x1e-3; the NaN one left out): mean 20, population sd 8.16.
    assert claims.traffic_cell(runs) == "20.0 ± 8.2 (seeds 20.0 / 20.0)"
    assert claims.traffic_cell(runs[:1]) == "20.0 ± 10.0"
    assert claims.traffic_cell(None) == "pending"
    assert claims.traffic_mph(runs[:1]) == ("1.00 / 2.00 / 3.00", "2.00 / 3.00 / 4.00")


def _paper_order(claims, dataset: str, swap: tuple[str, str] | None = None
                 ) -> dict[str, float]:
    r"""Means (z-scored MSE) in the paper's order of Table II, two of them swapped."""
    paper = {n: claims.PANACEA_TRAFFIC_T2[dataset][n][0] / 1e3 for n in claims.TRAFFIC_TABLE3}
    if swap is not None:
        a, b = swap
        paper[a], paper[b] = paper[b], paper[a]
    return paper


def test_the_goal_line_is_met_only_in_panaceas_order_and_names_the_pairs_that_differ(claims):
    assert claims.traffic_goal("metr-la", _paper_order(claims, "metr-la")).startswith("met: ")
    # FedAvg-FT best, Panacea second on PEMS-BAY: not met, that pair named with its figures.
    line = claims.traffic_goal("pems-bay", _paper_order(claims, "pems-bay",
                                                        ("panacea", "fedavg-ft")))
    assert line.startswith("not met: our order fedavg-ft 0.4, panacea 13.2,")
    assert "opposite order: fedavg-ft 0.4 vs panacea 13.2" in line
    # Ditto below pFedMe: pFedMe is no longer among the two worst.
    line = claims.traffic_goal("metr-la", _paper_order(claims, "metr-la", ("ditto", "pfedme")))
    assert line.startswith("not met") and "pfedme 71.5 vs ditto 315.8" in line
    assert claims.traffic_goal("metr-la", {"panacea": 0.001}).startswith(
        "pending (fedavg, fedavg-ft")


def test_the_section_reads_records_and_lists_what_is_missing_with_its_command(claims,
                                                                               records):
    pfedhn_chose_003(claims, records)
    write(records, claims.traffic_config("metr-la", "pfedhn", 0.03, novel=True),
          metrics=mph([0.050]), novel=mph([0.070, 0.090]))
    text = "\n".join(claims.traffic_section(run_missing=False))
    assert "| pfedhn | 500.0, 500.0, 500.0, 200.0, 500.0 | 0.03 |" in text
    assert ("| pfedhn | 0.03 | 67.3 ± 21.4 | 50.0 ± 10.0 | 64.5 ± 23.0 | 80.0 ± 10.0 | "
            "1.00 / 2.00 / 3.00 | 2.00 / 3.00 / 4.00 |") in text
    cmd = ("python benchmarks/reproduce/claims.py --no-write --only traffic --datasets {} "
           "--strategies {}")
    assert (f"| metr-la panacea, Tables II and III, 800 rounds (3 seeds), after its rate "
            f"choice | not started | `{cmd.format('metr-la', 'panacea')}` |") in text
    assert (f"| pems-bay local, rate choice, client lr 0.001, 200 rounds | not started | "
            f"`{cmd.format('pems-bay', 'local')}` |") in text
    missing = text.split("Not yet run")[1]
    assert "metr-la pfedhn, rate" not in missing
    # Its 800-round runs are in (the 20-round subset's are another matter).
    assert "metr-la pfedhn, Table II, client" not in missing
    assert "metr-la pfedhn, Table III, client" not in missing
    assert "- Goal (Panacea's ordering of Table II): pending" in text


def test_the_rate_choice_alone_runs_no_800_round_run_and_previews_the_goal(
        claims, records, monkeypatch):
    # pFedHN's grid recorded (0.03 best), FedAvg's missing its 0.1 run.
    for name in ("pfedhn", "fedavg"):
        for lr in claims.PANACEA_LR_GRID:
            if (name, lr) != ("fedavg", 0.1):
                write(records, claims.traffic_config("metr-la", name, lr, rounds=200),
                      {"val_best": 0.5 if lr != 0.03 else 0.2},
                      metrics=mph([0.060, 0.080] if name == "pfedhn" else [0.5]))
    ran: list = []

    def run(cfg, **kw):  # RecordCache.run without training: the record, or a new one
        if (entry := claims.RUNS.load(cfg)) is None:
            ran.append(cfg)
            entry = {"summary": {"val_best": 1.0}, "test_client_metrics": mph([1.0]),
                     "novel_client_metrics": mph([1.0])}
        return entry

    monkeypatch.setattr(claims.RUNS, "run", run)
    claims.traffic_section(run_missing=True, strategies=["pfedhn", "fedavg"],
                           datasets=["metr-la"], rate_only=True)
    assert [(c.strategy, c.rounds, c.overrides["lr"]) for c in ran] == [("fedavg", 200, 0.1)]
    ran.clear()  # with table2_only, pFedHN's Table II run (800 rounds) and not its Table III
    asked: dict[str, list[bool]] = {}  # whether the sections beyond the goal may run

    def spy(name):
        real = getattr(claims, name)

        def call(run_missing, *args, **kw):
            asked.setdefault(name, []).append(run_missing)
            return real(run_missing, *args, **kw)
        return call

    sections = ("traffic_novel_probe_lines", "traffic_sfl_lines", "traffic_ablation_lines")
    for name in sections:
        monkeypatch.setattr(claims, name, spy(name))
    claims.traffic_section(run_missing=True, strategies=["pfedhn", "sfl", "panacea-mlp",
                                                         "novel-probe"],
                           datasets=["metr-la"], table2_only=True)
    # SFL's rate choice and Table II (the goal's), not its lines' runs with our defaults.
    assert [(c.strategy, c.rounds, c.novel_clients) for c in ran] == [
        *[("sfl", 200, 0.0)] * 5, ("sfl", 800, 0.0), ("pfedhn", 800, 0.0)]
    assert all(c.overrides.get("test_at") != "every" for c in ran)
    assert asked == {name: [False] for name in sections}
    ran.clear()  # without either, pFedHN's Table II and III runs (none recorded here)
    claims.traffic_section(run_missing=True, strategies=["pfedhn"], datasets=["metr-la"])
    assert [(c.rounds, c.novel_clients) for c in ran] == [(800, 0.0), (800, 0.2)]
    assert asked == {name: [False, True] for name in sections}
    # The preview: pFedHN's 200-round run at its chosen rate, test MSE 70 x1e-3.
    claims.PENDING.clear()
    text = "\n".join(claims.traffic_section(run_missing=False))
    preview = text.split("- The same goal at the rate choice's 200 rounds")[1].splitlines()[0]
    assert preview.endswith("): pending (fedavg, fedavg-ft, per-fedavg, pfedme, ditto, sfl, "
                            "panacea not yet run)")
    write(records, claims.traffic_config("metr-la", "fedavg", 0.1, rounds=200),
          {"val_best": 0.9}, metrics=mph([0.5]))
    claims.PENDING.clear()
    text = "\n".join(claims.traffic_section(run_missing=False))
    preview = text.split("- The same goal at the rate choice's 200 rounds")[1].splitlines()[0]
    # FedAvg (lr 0.03: 500) above pFedHN (70), as in the paper: so far in its order.
    assert preview.endswith("so far in the paper's order: pfedhn 70.0, fedavg 500.0.")
    # With seeds, of FedAvg's three Table II runs (its rate now chosen) only those seeds'.
    ran.clear()
    claims.traffic_section(run_missing=True, strategies=["fedavg"], datasets=["metr-la"],
                           table2_only=True, seeds=[1])
    assert [(c.strategy, c.rounds, c.seed, c.novel_clients) for c in ran] == [
        ("fedavg", 800, 1, 0.0)]
    with pytest.raises(ValueError, match=r"section O runs seeds \[0, 1, 2\] \(Table III seed 0 "
                                         r"only\), not \[3\]"):
        claims.traffic_section(run_missing=True, seeds=[1, 3])
    ran.clear()  # Table III's run is seed 0's, so none without seed 0
    claims.traffic_section(run_missing=True, strategies=["fedavg"], datasets=["metr-la"],
                           seeds=[2])
    assert [(c.rounds, c.seed, c.novel_clients) for c in ran] == [(800, 2, 0.0)]
    ran.clear()
    claims.traffic_section(run_missing=True, strategies=["fedavg"], datasets=["metr-la"],
                           seeds=[0, 2])
    assert [(c.rounds, c.seed, c.novel_clients) for c in ran] == [
        (800, 0, 0.0), (800, 2, 0.0), (800, 0, 0.2)]


def test_runs_compile_and_still_read_the_records_made_without_it(claims, records):
    import dataclasses

    cfg = claims.traffic_config("metr-la", "sfl", 0.01, rounds=200)
    assert cfg.overrides["compile"] is True
    plain = dataclasses.replace(cfg, overrides={k: v for k, v in cfg.overrides.items()
                                                if k != "compile"})
    write(records, plain, {"val_best": 0.3})  # a record of the days before compile
    write(records, claims.traffic_config("metr-la", "sfl", 0.03, rounds=200),
          {"val_best": 0.2})
    lr, found = claims.traffic_rate("metr-la", "sfl", run_missing=False)
    assert lr is None and found[0.01] is not None and found[0.03] is not None
    text = "\n".join(claims.traffic_section(run_missing=False))
    assert "| sfl | pending, pending, 300.0, 200.0, pending | pending |" in text
    assert "Execution: 1 of the section's 2 records ran with `torch.compile`" in text
    assert claims.traffic_compiled_text([]).startswith("0 of the section's 0 records")


def test_a_compiled_run_starts_from_empty_compiler_caches(claims, records, monkeypatch):
    import dataclasses

    import torch

    resets: list[int] = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    monkeypatch.setattr(claims.RUNS, "run", lambda cfg, **kw: {"summary": {}})
    cfg = claims.traffic_config("metr-la", "sfl", 0.01, rounds=200)
    claims.fetch(cfg, True, "traffic", "what", "args")
    assert resets == [1]
    eager = dataclasses.replace(cfg, overrides={k: v for k, v in cfg.overrides.items()
                                                if k != "compile"})
    claims.fetch(eager, True, "traffic", "what", "args")
    write(records, cfg, {"val_best": 0.3})  # recorded: read back, nothing compiles
    claims.fetch(cfg, True, "traffic", "what", "args")
    assert resets == [1]


def test_no_compile_takes_it_out_of_the_runs(claims, run_main, monkeypatch, tmp_path):
    monkeypatch.setattr(claims, "TRAFFIC_EXECUTION", {"compile": True})
    run_main(claims, ["--cached-only", "--only", "traffic", "--no-compile",
                      "--out", str(tmp_path / "claims.md")])
    assert "compile" not in claims.traffic_config("pems-bay", "local", 0.1).overrides


@pytest.mark.parametrize("dataset, folder", [("metr-la", "METR-LA"), ("pems-bay", "PEMS-BAY")])
def test_the_sigmas_are_the_fragments(claims, dataset, folder, fragment_folder):
    from pyg_fedgraph.datasets import load_dataset

    data: Any = load_dataset(dataset, root=fragment_folder(folder))  # a TrafficDataset
    without, with_zeros = claims.TRAFFIC_SIGMA[dataset]
    train_steps = data.split_windows["train"][1] + data.input_steps - 1
    assert float(data.std[0]) == pytest.approx(without, abs=1e-3)
    assert float(data.speed[:train_steps].std(unbiased=False)) == pytest.approx(with_zeros,
                                                                                abs=1e-3)
    # The windows the hours of a run that skips the test split are priced by.
    counts = tuple(data.split_windows[k][1] for k in ("val", "test"))  # (start, count)
    assert counts == claims.TRAFFIC_EVAL_WINDOWS[dataset]


def test_the_mph_line_is_sqrt_of_the_mse_times_sigma(claims, monkeypatch):
    monkeypatch.setitem(claims.TRAFFIC_SIGMA, "metr-la", (10.0, 20.0))
    # Paper: 1.0e-3 -> sqrt(1e-3) x 10 = 0.316 mph (0.632 with sigma 20); ours 0.09 -> 3 mph.
    line = claims.traffic_meaning("metr-la", 0.09)
    assert "sigma = 0.32 mph with this fragment's sigma 10.00 mph" in line
    assert "0.63 mph with DCRNN's scaler" in line
    assert line.endswith("ours, 90.0 x1e-3, is 3.00 mph RMS over the 12 horizons (the mph "
                         "columns give it per horizon, masked).")
    assert claims.traffic_meaning("metr-la", None).endswith("(Li et al. 2018, Table 1).")


def test_the_subset_measured_here_reads_its_records_and_judges_the_goal(claims, records):
    dataset = "metr-la"
    rounds, lr = claims.TRAFFIC_REDUCED["rounds"], claims.TRAFFIC_REDUCED["lr"]
    # Every strategy but SFL recorded, in the paper's order of Table II.
    for name, value in _paper_order(claims, dataset).items():
        if name != "sfl":
            write(records, claims.traffic_reduced_config(dataset, name),
                  {"best_round": 40}, metrics=mph([value, value]))
    cfg = claims.traffic_reduced_config(dataset, "panacea")
    assert (cfg.rounds, cfg.overrides["lr"], cfg.seed, cfg.novel_clients) == (rounds, lr, 0, 0.0)
    text = "\n".join(claims.traffic_section(run_missing=False))
    assert ("| pfedhn | 67.3 ± 21.4 | 67.3 ± 0.0 | 1.00 / 2.00 / 3.00 | 2.00 / 3.00 / 4.00 "
            "| 40 | 1 |") in text
    assert "| sfl | 73.2 ± 23.0 | pending |" in text
    assert "- Goal on this subset: pending (sfl not yet run)" in text
    cmd = (f"python benchmarks/reproduce/claims.py --no-write --only traffic --datasets {dataset} "
           "--strategies sfl --traffic-reduced")
    assert f"seed 0 | not started | `{cmd}` |" in text
    write(records, claims.traffic_reduced_config(dataset, "sfl"), {"best_round": 40},
          metrics=mph([0.0732, 0.0732]))
    claims.PENDING.clear()
    text = "\n".join(claims.traffic_section(run_missing=False))
    assert "- Goal on this subset: met: our order panacea 1.0, fedavg-ft 20.0," in text
    # Table III: separate runs with 4 of the 20 sensors held out, for the paper's eight; the
    # novel sensors' MSE beside the paper's, and the order of those measured.
    held = claims.traffic_reduced_config(dataset, "ditto", novel=True)
    assert (held.novel_clients, held.rounds, held.overrides["lr"]) == (0.2, rounds, lr)
    assert held.overrides["sample_fraction"] == 5 / 16
    subset = text.split("### Measured here: METR-LA")[1].split("### Measured here")[0]
    rows = [line for line in subset.splitlines() if line.startswith("| ")][1:]  # no header
    # The paper's eight: no Table III run yet; Local and the graph rules: not in Table III.
    assert [r.split(" | ")[0][2:] for r in rows if r.endswith("| pending |")] == list(
        claims.TRAFFIC_TABLE3)
    assert [r.split(" | ")[0][2:] for r in rows if r.endswith("| - | - |")] == [
        "local", "pfedgraph", "fedaghn", "pfedgat"]
    assert "trains in one round of about 4, in Table III's runs one of about 3)" in subset
    assert (f"metr-la ditto, Table III, reduced budget: {rounds} rounds, client lr {lr}, seed 0 "
            f"| not started | `{cmd.replace('sfl', 'ditto')}` |") in text
    write(records, held, {"best_round": 20}, metrics=mph([0.1]), novel=mph([0.070, 0.090]))
    write(records, claims.traffic_reduced_config(dataset, "pfedme", novel=True),
          {"best_round": 20}, metrics=mph([0.1]), novel=mph([0.050]))
    claims.PENDING.clear()
    text = "\n".join(claims.traffic_section(run_missing=False))
    assert "| 40 | 1 | 68.0 ± 24.3 | 80.0 ± 10.0 |" in text
    assert ("- Table III on this subset, our order (novel sensors' MSE x1e-3): pfedme 50.0, "
            "ditto 80.0; the paper's: panacea 1.0, fedavg-ft 19.7,") in text


def test_a_measured_pair_against_the_goal_fails_it_before_all_eight_are_run(claims):
    means = _paper_order(claims, "metr-la")
    partial = {n: means[n] for n in ("panacea", "fedavg", "pfedme")}
    assert claims.traffic_goal("metr-la", partial).startswith(
        "pending (fedavg-ft, per-fedavg, ditto, sfl, pfedhn not yet run); so far in the "
        "paper's order: panacea 1.0, fedavg 112.4, pfedme 315.8.")
    partial["pfedme"] = 0.050  # pFedMe below FedAvg: it can no longer be among the worst two
    line = claims.traffic_goal("metr-la", partial)
    assert line.startswith("not met already on the 3 measured (fedavg-ft, per-fedavg, ditto, "
                           "sfl, pfedhn not yet run): our order panacea 1.0, pfedme 50.0")
    assert line.endswith("opposite order: fedavg 112.4 vs pfedme 50.0.")
    # Per-FedAvg and pFedMe may come in either order.
    means["per-fedavg"], means["pfedme"] = means["pfedme"], means["per-fedavg"]
    assert claims.traffic_goal("metr-la", means).startswith("met: ")


def test_the_hours_come_from_the_measured_costs_by_hand(claims, tmp_path):
    assert claims.traffic_hours_lines(tmp_path / "absent.json")[2].startswith(
        "pending: `python benchmarks/reproduce/claims.py --measure-traffic-cost`")
    path = tmp_path / "traffic_rounds.json"
    path.write_text(json.dumps({"cost": {"metr-la": {"fedavg": [4.0, 15.0, 2],
                                                     "pfedme": [20.0, 15.0, 1]}},
                                "date": "today", "machine": "here"}))
    text = "\n".join(claims.traffic_hours_lines(path))
    # 800 rounds of 4 s, and 40 evaluations of 15 s that skip the test split (test_at=best:
    # METR-LA's validation windows are 3,425 of 10,275, a third) and three test passes
    # (2/3 of 15 s each): 3,200 + (40 / 3 + 2) x 15 = 3,430 s = 0.95 h.
    assert claims.traffic_val_share("metr-la", 800) == 3425 / 10275
    assert "| metr-la | fedavg | 4.00 (2) | 15.0 | 0.95 |" in text
    # Rate choice (METR-LA's evaluates the test split every time): 5 x (200 x 4 + 10 x 15)
    # + 5 x (200 x 20 + 10 x 15) s = 7.08 h; Table II: FedAvg's three seeds 3 x 3,430 s +
    # pFedMe's 16,000 + 230 s = 7.37 h; Table III: one seed of each, 19,660 s = 5.46 h.
    assert "| metr-la | 2 measured | 7.1 | 7.4 | 5.5 | 19.9 |" in text
    assert "Total: 19.9 CPU hours of one core." in text
    # PEMS-BAY: FedAvg measured with 3x METR-LA's evaluation; pFedMe estimated as its
    # METR-LA round (20 s) and 3 x 15 s evaluations. Every PEMS-BAY run skips the test
    # split, whose share s is 5,209 of 15,628 windows: a rate-choice run is 200 x 20 +
    # (10 s + 3 (1 - s)) x 45 = 4,240.0 s, an 800-round run 16,000 + (40 s + 3 (1 - s))
    # x 45 = 16,690.0 s.
    path.write_text(json.dumps({"cost": {"metr-la": {"fedavg": [4.0, 15.0, 2],
                                                     "pfedme": [20.0, 15.0, 1]},
                                         "pems-bay": {"fedavg": [4.0, 45.0, 1]}},
                                "date": "today", "machine": "here"}))
    text = "\n".join(claims.traffic_hours_lines(path))
    # Rate choice 5 x 4,240.0 s = 5.89 h; Tables II and III 16,690.0 s each = 4.64 h.
    assert ("| pems-bay | 1 estimated from metr-la (evaluation x 3.00) | 5.9 | 4.6 | 4.6 "
            "| 15.2 |") in text
    assert "estimated rows included." in text
    assert "rounds; without `torch.compile` (the runs since 2026-11-27 compile" in text
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "execution": {"compile": True}}))
    assert "rounds; with `torch.compile` of the local gradient and the evaluation" in "\n".join(
        claims.traffic_hours_lines(path))


def test_the_hours_left_price_the_missing_runs_from_their_checkpoints(claims, records,
                                                                     monkeypatch):
    # pFedHN's rate choice and its Table II run are made; its Table III run has a
    # checkpoint at round 400; only pFedHN's METR-LA cost is measured.
    pfedhn_chose_003(claims, records)
    claims.TRAFFIC_COST.write_text(json.dumps({"cost": {"metr-la": {"pfedhn": [4.0, 15.0, 2]}},
                                               "date": "today", "machine": "here"}))
    novel = claims.traffic_config("metr-la", "pfedhn", 0.03, novel=True)
    monkeypatch.setattr(claims.RUNS, "checkpoint_round",
                        lambda cfg: 400 if cfg == novel else None)
    text = "\n".join(claims.traffic_section(run_missing=False))
    # Per dataset, 12 strategies: 5 rate runs each, 3 seeds for 3 of them and 1 for the
    # other 9, and Table III for 8: 86 runs; METR-LA's pFedHN lacks 1 of its 7. And
    # the 6 runs of SFL's lines (our defaults at 5 rates, with rows at 1), and Table IV's
    # two variants at 200 and 800 rounds on each dataset (8) and its three rows on the week of
    # all 207 sensors (8), and the code with uploads as its memory (1): 189.
    # Its Table III run: 400 rounds of 4 s, 20 evaluations of a third of 15 s and three
    # test passes of 10 s: 1,600 + 100 + 30 = 1,730 s; and pFedHN's two runs on the week,
    # priced as its METR-LA runs: 200 x 4 + 10 x 15 = 950 s and 3,430 s; 6,110 s = 1.7 h.
    assert ("Left to run (the list at the end of this section): 189 runs, 1.7 CPU hours of "
            "one core by the costs above (1 counted from the round of its checkpoint here); "
            "186 without a measured cost, not counted.") in text
    # Read again, the runs are not counted twice (SFL's rate choice is also in its lines,
    # Panacea's in Table IV's).
    assert "189 runs" in "\n".join(claims.traffic_section(run_missing=False))
    assert claims.traffic_left_line({}, []) == "Left to run: nothing."


def test_the_queue_holds_one_line_per_dataset_and_strategy_of_the_plan(claims):
    jobs = BENCH / "tools" / "reproduction_jobs.txt"
    lines = [line.split() for line in jobs.read_text().splitlines()
             if "--only traffic" in line and not line.startswith("#")]
    planned = [(line[line.index("--datasets") + 1], line[line.index("--strategies") + 1])
               for line in lines if "--traffic-reduced" not in line
               and "--traffic-rate-choice" not in line and "--traffic-table-ii" not in line]
    # The goal's lines first: the paper's eight on each dataset, before any full line.
    def pair(line: list[str]) -> tuple[str, str]:
        return line[line.index("--datasets") + 1], line[line.index("--strategies") + 1]

    goal = [pair(line) for line in lines if "--traffic-table-ii" in line and "--seeds" not in line]
    assert sorted(goal) == sorted((d, s) for d in claims.TRAFFIC_DATA
                                  for s in claims.TRAFFIC_TABLE3)
    # On PEMS-BAY, seed 0 of the eight first, each after every rate choice of the eight and
    # before any goal line whole.
    seed0 = [i for i, line in enumerate(lines) if "--seeds" in line]
    assert all(lines[i][lines[i].index("--seeds") + 1] == "0" for i in seed0)
    assert sorted(pair(lines[i]) for i in seed0) == sorted(
        ("pems-bay", s) for s in claims.TRAFFIC_TABLE3)
    rate = [i for i, line in enumerate(lines)
            if "--traffic-rate-choice" in line and pair(line)[0] == "pems-bay"]
    assert sorted(pair(lines[i])[1] for i in rate) == sorted(claims.TRAFFIC_TABLE3)
    whole = [i for i, line in enumerate(lines) if "--traffic-table-ii" in line
             and "--seeds" not in line and pair(line)[0] == "pems-bay"]
    assert max(rate) < min(seed0) and max(seed0) < min(whole)
    last_goal = max(i for i, line in enumerate(lines) if "--traffic-table-ii" in line)
    variants = ",".join(v for v in claims.TRAFFIC_ABLATION if v != "panacea")
    # Before the goal's last line, only rate choices, the goal's lines, METR-LA's Table IV
    # variants (which split pFedHN's lead over Panacea on METR-LA's Table II), FedAvg-FT's
    # fine-tuning budget (pFedHN's lead over FedAvg-FT) and, after PEMS-BAY's seed-0 lines,
    # PEMS-BAY's variants (whether Panacea's generator is why FedAvg-FT leads it there).
    early = [(i, line) for i, line in enumerate(lines[:last_goal])
             if "--traffic-table-ii" not in line and "--traffic-reduced" not in line
             and "--traffic-rate-choice" not in line]
    # Panacea's grids on PEMS-BAY come right after its rate choices, its variants after its
    # seed-0 lines.
    grid = [f"{claims.TRAFFIC_PANACEA_GRID}:{k}" for k in claims.TRAFFIC_PANACEA_GRID_VALUES]
    assert [pair(line) for _, line in early] == [
        ("metr-la", variants), ("metr-la", claims.TRAFFIC_FT_SWEEP),
        *(("pems-bay", g) for g in grid), ("pems-bay", variants)]
    assert max(rate) < early[-3][0] < early[-2][0] < min(seed0)
    assert max(seed0) < early[-1][0] < min(whole)
    week = [s for d, s in planned if d == claims.TRAFFIC_WEEK]
    probes = [p for p in planned if p[1].split(":")[0] in (
        claims.TRAFFIC_NOVEL_PROBE, claims.TRAFFIC_FT_SWEEP, claims.TRAFFIC_FT_RATES,
        claims.TRAFFIC_PANACEA_GRID)]
    assert probes == [
        *((d, claims.TRAFFIC_FT_SWEEP) for d in claims.TRAFFIC_FT_SWEEP_DATASETS),
        *((d, g) for d in claims.TRAFFIC_PANACEA_GRID_DATASETS for g in grid),
        *((d, claims.TRAFFIC_FT_RATES) for d in claims.TRAFFIC_FT_SWEEP_DATASETS),
        *((d, claims.TRAFFIC_NOVEL_PROBE) for d in claims.TRAFFIC_NOVEL_PROBE_DATASETS)]
    assert sorted(p for p in planned if p[0] != claims.TRAFFIC_WEEK and p not in probes) == sorted(
        (d, s) for d in claims.TRAFFIC_DATA for s in (*claims.TRAFFIC_STRATEGIES, variants))
    # The week's rows, each once over its lines, and its traced rows.
    assert sorted(r for s in week for r in s.split(",")) == sorted(
        [*claims.TRAFFIC_WEEK_ROWS, claims.TRAFFIC_TRACE, claims.TRAFFIC_CLIENT_TRACE])


def test_sensor_wins_count_the_sensors_where_one_is_below_the_other(claims):
    runs = {"panacea": {"test_client_metrics": {"mse_norm": [0.1, 0.5, 0.3, math.nan]}},
            "fedavg": {"test_client_metrics": {"mse_norm": [0.2, 0.4, 0.4, 0.1]}},
            "ditto": None}
    # Sensors 0 and 2 lower, sensor 1 higher, sensor 3 not evaluated: 2 of 3.
    assert claims.traffic_sensor_wins(runs, "panacea") == "panacea below fedavg 2/3"
    assert claims.traffic_sensor_wins(runs, "ditto") == ""
    runs["ditto"] = {"test_client_metrics": {"mse_norm": [0.1]}}
    with pytest.raises(ValueError, match="panacea's record has 4 sensors, ditto's 1"):
        claims.traffic_sensor_wins(runs, "panacea")


def test_sfl_runs_as_its_authors_code_and_only_sfl(claims):
    from pyg_fedgraph.strategies import SFL_AUTHORS_CODE

    code = claims.traffic_config("metr-la", "sfl", 0.01).overrides
    assert {k: code[k] for k in SFL_AUTHORS_CODE} == SFL_AUTHORS_CODE
    defaults = claims.traffic_config("metr-la", "sfl", 0.01, options={}).overrides
    assert not set(SFL_AUTHORS_CODE) & set(defaults)
    # Everything else is the protocol's, and no other strategy takes SFL's options.
    assert {k: v for k, v in code.items() if k not in SFL_AUTHORS_CODE} == defaults
    assert not set(SFL_AUTHORS_CODE) & set(claims.traffic_config("metr-la", "ditto", 0.01)
                                            .overrides)


@pytest.mark.parametrize("val, rises", [([1.0, 1.05, 0.9, 1.0], True),  # 1.0 > 1.1 x 0.9
                                        ([1.0, 1.09, 0.95, 1.04], False), ([], False)])
def test_a_validation_curve_rises_past_a_tenth_above_its_lowest_so_far(claims, val, rises):
    assert claims.val_rises({"val": val}) is rises


def test_the_sfl_lines_compare_defaults_rows_and_code_from_their_records(claims, records):
    def put(options, lr, val, graph, best_round):
        cfg = claims.traffic_config("metr-la", "sfl", lr, rounds=200, options=options)
        write(records, cfg, {"val_best": min(val), "best_round": best_round, "rounds": 200})
        from pyg_fedgraph.experiment.records import config_key

        file = records / f"{config_key(cfg)}.json"
        entry = json.loads(file.read_text())
        file.write_text(json.dumps({**entry, "val": val, "graph": graph}))

    # Our defaults: rows of the propagation summing to 0.8 and 1.4 (a zero row, a
    # client that receives nothing, is left out); the curve rises at 0.001 and 0.003.
    scaled = [[0.5, 0.3, 0.0], [0.6, 0.8, 0.0], [0.0, 0.0, 0.0]]
    for lr in claims.PANACEA_LR_GRID:
        val = [0.9, 0.5, 0.8] if lr in (0.001, 0.003) else [0.9, 0.6, 0.4]
        put({}, lr, val, scaled, 40 if lr in (0.001, 0.003) else 200)
    text = "\n".join(claims.traffic_sfl_lines(False, None, None))
    assert ("| our defaults (`normalization=sym`) | 500.0 (40), 500.0 (40), 400.0 (200), "
            "400.0 (200), 400.0 (200) | 0.80-1.40 |") in text
    assert "| our defaults but `normalization=row` | -, pending, -, -, - | pending |" in text
    assert "- Reading: pending (runs missing)." in text
    assert "metr-la sfl, our defaults but `normalization=row`, client lr 0.003" in str(
        claims.PENDING["traffic"])
    put({"normalization": "row"}, 0.003, [0.9, 0.45, 0.33], [[0.5, 0.5], [0.25, 0.75]], 200)
    reading = claims.traffic_sfl_lines(False, None, None)[-2]
    assert reading == (
        "- Reading: with the symmetric normalization (our default) the weights of a client's "
        "structure-aware model sum to 0.80-1.40, not one: every round scales the clients' GRU "
        "weights up or down. The validation MSE then rises during training, by more than 10% "
        "over its lowest so far, at client lr 0.001, 0.003 of the grid (with rows: nowhere), "
        "and at 0.003 it is 500.0 against 330.0 with only the normalization changed to rows "
        "(best round 200 of 200).")
    # The authors' code is the section's SFL: its rate choice's records, listed there.
    for lr in claims.PANACEA_LR_GRID:
        put(claims.TRAFFIC_OPTIONS["sfl"], lr, [0.9, 0.3 if lr == 0.1 else 0.35],
            [[1.0, 0.0], [0.5, 0.5]], 200)
    text = "\n".join(claims.traffic_sfl_lines(False, None, None))
    assert ("| the authors' code (the section's SFL) | 350.0 (200), 350.0 (200), 350.0 (200), "
            "350.0 (200), 300.0 (200) | 1.00-1.00 |") in text
    assert text.endswith("(best round 200 of 200). The authors' code row-normalizes too; at "
                         "its chosen rate 0.1 its validation MSE is 300.0 against our "
                         "defaults' best 400.0.\n")
    assert "| the authors' code but `memory=uploads` | -, -, -, -, pending | pending |" in text
    # The code with only its memory changed, at the code's rate.
    put({**claims.TRAFFIC_OPTIONS["sfl"], "memory": "uploads"}, 0.1, [0.9, 0.25],
        [[0.5, 0.5], [0.5, 0.5]], 200)
    text = "\n".join(claims.traffic_sfl_lines(False, None, None))
    assert ("| the authors' code but `memory=uploads` | -, -, -, -, 250.0 (200) | 1.00-1.00 |"
            in text)
    assert text.endswith("defaults' best 400.0. Propagating only the clients' latest uploads "
                         "each round (`memory=uploads`) instead of every stored model (the "
                         "code's propagated memory, which smooths the 15 models not sampled "
                         "again every round) gives 250.0 at 0.1.\n")


@pytest.mark.parametrize("dataset, rounds, best", [
    ("metr-la", None, True), ("metr-la", 200, False), ("metr-la", 20, False),
    ("pems-bay", None, True), ("pems-bay", 200, True), ("pems-bay", 20, False)])
def test_runs_begun_after_the_option_evaluate_the_test_split_at_their_best_rounds(
        claims, dataset, rounds, best):
    over = claims.traffic_config(dataset, "fedavg", 0.1, rounds=rounds).overrides
    assert over.get("test_at") == ("best" if best else None)
    assert claims.traffic_val_share(dataset, rounds or 800) == (
        1.0 if not best else {"metr-la": 3425 / 10275, "pems-bay": 5209 / 15628}[dataset])


def test_the_preview_compares_panacea_and_fedavg_ft_sensor_by_sensor(claims, records):
    # Both choose 0.1 (validation 0.2 against 0.5); at that rate Panacea is below
    # FedAvg-FT on sensors 0 and 2 of 3 and above it on sensor 1.
    tests = {"panacea": [0.1, 0.5, 0.2], "fedavg-ft": [0.2, 0.4, 0.3]}
    for name, mse in tests.items():
        for lr in claims.PANACEA_LR_GRID:
            write(records, claims.traffic_config("metr-la", name, lr, rounds=200),
                  {"val_best": 0.2 if lr == 0.1 else 0.5}, metrics=mph(mse))
    text = "\n".join(claims.traffic_section(run_missing=False))
    assert ("- Sensors where panacea below fedavg-ft 2/3 (the preview's 200 rounds; test MSE"
            in text)
    assert ("- Sensors where fedavg-ft below panacea 1/3 (the preview's 200 rounds; test MSE"
            in text)
    assert "(800 rounds, seed 0;" not in text  # no 800-round run recorded
    # Panacea's seed-0 800-round run of Table II in (its seeds 1 and 2 and Table III not).
    write(records, claims.traffic_config("metr-la", "panacea", 0.1, seed=0),
          {"val_best": 0.15}, metrics=mph([0.1, 0.3, 0.2]))
    text = "\n".join(claims.traffic_section(run_missing=False))
    assert "(800 rounds, seed 0;" not in text  # nothing to set it against yet
    assert ("- The same goal on the 800-round runs of seed 0 recorded so far (the table waits "
            "for each strategy's every seed; a preview, not the table's result): pending "
            "(fedavg, fedavg-ft, per-fedavg, pfedme, ditto, sfl, pfedhn not yet run)\n"
            in text)
    assert "| panacea | 0.1 | 1.0 ± 0.2 | pending |" in text
    write(records, claims.traffic_config("metr-la", "fedavg-ft", 0.1, seed=0),
          {"val_best": 0.15}, metrics=mph([0.2, 0.2, 0.3]))
    text = "\n".join(claims.traffic_section(run_missing=False))
    assert "- Sensors where panacea below fedavg-ft 2/3 (800 rounds, seed 0; test MSE" in text
    assert ("recorded so far (the table waits for each strategy's every seed; a preview, not "
            "the table's result): pending (fedavg, per-fedavg, pfedme, ditto, sfl, pfedhn not "
            "yet run); so far in the paper's order: panacea 200.0, fedavg-ft 233.3.\n") in text
    # Per-FedAvg, one of the goal's four, has a line of its own: its pair with FedAvg
    # (not one of them) is said sensor by sensor too.
    assert "Sensors where per-fedavg" not in text
    for name, mse in (("per-fedavg", [0.3, 0.1, 0.5]), ("fedavg", [0.4, 0.2, 0.1])):
        for lr in claims.PANACEA_LR_GRID:
            write(records, claims.traffic_config("metr-la", name, lr, rounds=200),
                  {"val_best": 0.2 if lr == 0.1 else 0.5}, metrics=mph(mse))
        write(records, claims.traffic_config("metr-la", name, 0.1, seed=0),
              {"val_best": 0.15}, metrics=mph(mse))
    text = "\n".join(claims.traffic_section(run_missing=False))
    assert ("- Sensors where per-fedavg below fedavg 2/3, fedavg-ft 1/3, panacea 1/3 (800 "
            "rounds, seed 0;") in text
    assert "- Sensors where fedavg below" not in text


def panacea_and_pfedhn_chose(claims, records: Path, tests: dict[str, list[float]],
                             rounds: int = 200) -> None:
    r"""Panacea's and pFedHN's rate choices on METR-LA (0.1 and 0.03 lowest), and
    the 200-round (or 800-round) runs of Table IV's rows with the test MSE ``tests``."""
    for name, best in (("panacea", 0.1), ("pfedhn", 0.03)):
        for lr in claims.PANACEA_LR_GRID:
            write(records, claims.traffic_config("metr-la", name, lr, rounds=200),
                  {"val_best": 0.2 if lr == best else 0.5},
                  metrics=mph(tests[name]) if lr == best and rounds == 200 else None)
    for variant in ("panacea-gn", "panacea-mlp"):
        write(records, claims.traffic_ablation_config("metr-la", variant, 0.1, rounds=rounds),
              {"val_best": 0.3}, metrics=mph(tests[variant]))
    if rounds == 800:
        write(records, claims.traffic_config("metr-la", "panacea", 0.1),
              metrics=mph(tests["panacea"]))
        write(records, claims.traffic_config("metr-la", "pfedhn", 0.03),
              metrics=mph(tests["pfedhn"]))


def test_table_iv_variants_differ_from_panacea_only_in_the_graph_they_use(claims):
    base = claims.traffic_config("metr-la", "panacea", 0.1, rounds=200)
    assert claims.traffic_ablation_config("metr-la", "panacea", 0.1, rounds=200) == base
    gn = claims.traffic_ablation_config("metr-la", "panacea-gn", 0.1)
    mlp = claims.traffic_ablation_config("metr-la", "panacea-mlp", 0.1)
    assert gn.strategy == mlp.strategy == "panacea" and gn.rounds == 800
    assert ({k: v for k, v in gn.overrides.items() if k != "graph_generator"}
            == claims.traffic_config("metr-la", "panacea", 0.1).overrides)
    assert gn.overrides["graph_generator"] is False
    assert (mlp.overrides["encoder"], mlp.overrides["graph_generator"]) == ("mlp", False)
    # The runs build: Panacea-MLP reads no graph, Panacea-GN only through its encoder.
    from pyg_fedgraph.strategies import build_strategy

    assert not build_strategy("panacea", encoder="mlp", graph_generator=False).needs_prior_graph
    assert build_strategy("panacea", graph_generator=False).needs_prior_graph


def test_table_iv_reads_its_records_and_says_what_the_graph_adds(claims, records):
    text = "\n".join(claims.traffic_ablation_lines(False, None, None))
    # Before any rate choice: every cell pending, the variants listed after Panacea's.
    assert "| metr-la | panacea-gn | GCN encoder only | pending | 3.2 ± 1.4 | pending | " \
           "pending |" in text
    assert "- METR-LA: pending (runs missing)." in text
    assert any(what == "metr-la panacea-mlp (Table IV), 200 and 800 rounds, after Panacea's "
               "rate choice" for what, *_ in claims.PENDING["traffic"])
    tests = {"panacea": [0.1, 0.5, 0.3], "panacea-gn": [0.2, 0.4, 0.3],
             "panacea-mlp": [0.3, 0.6, 0.3], "pfedhn": [0.2, 0.8, 0.5]}
    panacea_and_pfedhn_chose(claims, records, tests)
    claims.PENDING.clear()
    lines = claims.traffic_ablation_lines(False, None, None)
    text = "\n".join(lines)
    # Means and spreads across the three sensors, by hand (x1e-3): 300 ± 163.3 (sd of
    # 0.1, 0.5, 0.3), 300 ± 81.6, 400 ± 141.4; pFedHN at its own rate, 500 ± 244.9.
    assert ("| metr-la | panacea | GCN encoder and graph generator | 0.1 | 1.0 ± 0.2 | "
            "300.0 ± 163.3 | pending |") in text
    assert "| metr-la | panacea-gn | GCN encoder only | 0.1 | 3.2 ± 1.4 | 300.0 ± 81.6 | " \
           "pending |" in text
    assert "| metr-la | panacea-mlp | nowhere | 0.1 | 3.2 ± 1.7 | 400.0 ± 141.4 | pending |" \
           in text
    assert ("| metr-la | pfedhn (Table II) | nowhere (pFedHN's MLP and update) | 0.03 | "
            "67.3 ± 21.4 (Table II) | 500.0 ± 244.9 | pending |") in text
    # Sensor by sensor: Panacea below Panacea-MLP on 2 of 3 (a tie is not below), below
    # Panacea-GN on 1, Panacea-MLP below pFedHN on 2.
    assert ("- METR-LA: after 200 rounds (seed 0): the graph's part, panacea 300.0 against "
            "panacea-mlp 400.0, panacea below on 2/3 sensors (+100.0 without it); the "
            "generator's, panacea 300.0 against panacea-gn 300.0, panacea below on 1/3 "
            "sensors; the hypernetwork settings', panacea-mlp 400.0 against pfedhn 500.0, "
            "panacea-mlp below on 2/3 sensors. The paper: panacea 1.0, panacea-gn 3.2, "
            "panacea-mlp 3.2, pfedhn 67.3 (Table II).") in lines
    missing = [what for what, *_ in claims.PENDING["traffic"]
               if not what.startswith("metr-la-week")]
    assert missing == [f"metr-la {v} (Table IV), client lr 0.1, seed 0, 800 rounds"
                       for v in ("panacea-gn", "panacea-mlp")] + [
        f"pems-bay {v} (Table IV), 200 and 800 rounds, after Panacea's rate choice"
        for v in ("panacea-gn", "panacea-mlp")]
    # With the 800-round runs in, the reading is theirs.
    panacea_and_pfedhn_chose(claims, records, {k: v[::-1] for k, v in tests.items()},
                             rounds=800)
    reading = claims.traffic_ablation_lines(False, None, None)
    assert any(line.startswith("- METR-LA: after 800 rounds (seed 0): the graph's part, "
                               "panacea 300.0 against panacea-mlp 400.0, panacea below on "
                               "2/3 sensors") for line in reading)


def test_table_iv_runs_only_the_variants_named_and_with_the_rate_choice_only_the_short(
        claims, records, monkeypatch):
    tests = {"panacea": [0.1], "panacea-gn": [0.2], "panacea-mlp": [0.3], "pfedhn": [0.2]}
    for lr in claims.PANACEA_LR_GRID:
        write(records, claims.traffic_config("metr-la", "panacea", lr, rounds=200),
              {"val_best": 0.2 if lr == 0.1 else 0.5}, metrics=mph(tests["panacea"]))
    ran: list = []

    def run(cfg, **kw):  # RecordCache.run without training
        ran.append(cfg)
        return {"summary": {"val_best": 1.0}, "test_client_metrics": mph([1.0])}

    monkeypatch.setattr(claims.RUNS, "run", run)
    claims.traffic_ablation_lines(True, ["panacea-mlp"], ["metr-la"], rate_only=True)
    assert [(c.rounds, c.overrides["encoder"]) for c in ran] == [(200, "mlp")]
    ran.clear()
    claims.traffic_ablation_lines(True, ["panacea-gn", "panacea-mlp"], ["metr-la"])
    assert [(c.rounds, c.overrides.get("encoder")) for c in ran] == [
        (200, None), (800, None), (200, "mlp"), (800, "mlp")]
    ran.clear()  # nothing else runs them (nor PEMS-BAY's, whose rate is not chosen)
    claims.traffic_ablation_lines(True, ["panacea", "pfedhn"], ["metr-la", "pems-bay"])
    assert ran == []
    claims.traffic_ablation_lines(True, ["panacea", "pfedhn"], None)  # the week: only named
    assert ran == []
    # Panacea's own Table IV runs are the week's (pFedHN's rate is not chosen here).
    claims.traffic_ablation_lines(True, ["panacea", "pfedhn"], ["metr-la-week"])
    assert [(c.rounds, c.overrides["data.root"].rsplit("/", 1)[1]) for c in ran] == [
        (200, "t-gcn-los-loop"), (800, "t-gcn-los-loop")]


def test_the_plan_prices_table_iv_as_panaceas_runs(claims, tmp_path):
    path = tmp_path / "traffic_rounds.json"
    path.write_text(json.dumps({"cost": {"metr-la": {"panacea": [4.0, 15.0, 2]}},
                                "date": "today", "machine": "here"}))
    text = "\n".join(claims.traffic_hours_lines(path))
    # Two variants x (200 rounds, test every time: 800 + 10 x 15 = 950 s; 800 rounds with
    # test_at=best: 3,430 s, as FedAvg's in the hours test above) = 8,760 s = 2.43 h; the
    # plan: rate choice 5 x 950 s, Tables II 3 x 3,430 s and III 3,430 s = 18,470 s = 5.13 h.
    assert "| metr-la | 1 measured | 1.3 | 2.9 | 1.0 | 5.1 |" in text
    assert ("Beyond the plan, Panacea's Table IV on the recorded speeds (its variants, seed 0, "
            "200 and 800 rounds each, priced as Panacea's runs, the week's evaluations by their "
            "windows): metr-la 2.4 CPU hours; 7.6 in all.") in text


def test_the_selection_line_sets_the_best_round_against_the_second_halfs_median(claims):
    # FedAvg wobbles (its best, 0.25, is one low evaluation of the second half, whose
    # median is 0.30 of 0.30, 0.25, 0.32); SFL has flattened (best 0.29, median 0.295).
    runs = {"sfl": {"val": [0.36, 0.30, 0.30, 0.295, 0.29], "summary": {"best_round": 100}},
            "fedavg": {"val": [0.40, 0.31, 0.30, 0.25, 0.32], "summary": {"best_round": 80}},
            "ditto": {"val": [math.nan], "summary": {}}, "panacea": None}
    assert claims.traffic_val_selection(runs) == ("fedavg 250.0 (round 80) / 300.0, "
                                                  "sfl 290.0 (round 100) / 295.0")
    assert claims.traffic_val_selection({"panacea": None}) == ""


def test_the_week_rows_run_on_all_207_sensors_at_their_metr_la_rates(claims, records,
                                                                       monkeypatch):
    cfg = claims.traffic_week_config("panacea-mlp", 0.1, rounds=200)
    assert cfg.dataset == "metr-la" and cfg.strategy == "panacea" and cfg.rounds == 200
    over = cfg.overrides
    assert over["data.root"].endswith("traffic-fragments/t-gcn-los-loop")
    assert num_sampled(207, over["sample_fraction"]) == 5 and over["test_at"] == "best"
    assert (over["encoder"], over["graph_generator"]) == ("mlp", False)
    assert claims.traffic_week_config("pfedhn", 0.03).strategy == "pfedhn"
    # Panacea chose 0.1 on METR-LA, pFedHN 0.03; the week's runs, by hand: Panacea below
    # Panacea-MLP on 2 of 3 sensors, below Panacea-GN on 1, Panacea-MLP below pFedHN on 1.
    tests = {"panacea": [0.1, 0.2, 0.6], "panacea-gn": [0.3, 0.1, 0.5],
             "panacea-mlp": [0.2, 0.3, 0.4], "pfedhn": [0.1, 0.4, 0.3]}
    for name, best in (("panacea", 0.1), ("pfedhn", 0.03)):
        for lr in claims.PANACEA_LR_GRID:
            write(records, claims.traffic_config("metr-la", name, lr, rounds=200),
                  {"val_best": 0.2 if lr == best else 0.5})
    rows, reading = claims.traffic_week_rows(False, None, None)
    assert rows[3] == ("| metr-la, all 207 sensors, first week | pfedhn | nowhere (pFedHN's MLP "
                       "and update) | 0.03 | - | pending | pending |")
    assert reading == "- METR-LA, all 207 sensors, first week: pending (runs missing)."
    for name, mse in tests.items():
        write(records, claims.traffic_week_config(name, 0.03 if name == "pfedhn" else 0.1,
                                                  rounds=200), metrics=mph(mse))
    rows, reading = claims.traffic_week_rows(False, None, None)
    assert rows[0].endswith("| 0.1 | - | 300.0 ± 216.0 | pending |")
    assert reading == (
        "- METR-LA, all 207 sensors, first week: after 200 rounds (seed 0): the graph's part, "
        "panacea 300.0 against panacea-mlp 300.0, panacea below on 2/3 sensors (+0.0 without "
        "it); the generator's, panacea 300.0 against panacea-gn 300.0, panacea below on 1/3 "
        "sensors; the hypernetwork settings', panacea-mlp 300.0 against pfedhn 266.7, panacea-mlp "
        "below on 1/3 sensors.")
    ran: list = []

    def run(cfg, **kw):  # RecordCache.run without training: the record, or a new one
        if (entry := claims.RUNS.load(cfg)) is None:
            ran.append(cfg)
            entry = {"summary": {"val_best": 1.0}, "test_client_metrics": mph([1.0])}
        return entry

    monkeypatch.setattr(claims.RUNS, "run", run)
    claims.traffic_week_rows(True, ["panacea-mlp"], ["metr-la"])  # another dataset: nothing
    assert ran == []
    claims.traffic_week_rows(True, ["panacea-mlp"], ["metr-la-week"])
    assert [(c.rounds, c.overrides["encoder"]) for c in ran] == [(800, "mlp")]


def test_table_iv_reads_the_longer_runs_pairs_before_all_are_in_and_draws_the_curves(
        claims, records):
    # The week: Panacea's and pFedHN's METR-LA rates, the four 200-round rows, and of the
    # 800-round ones all but Panacea-MLP's, with validation curves (every 20 rounds).
    for name, best in (("panacea", 0.1), ("pfedhn", 0.03)):
        for lr in claims.PANACEA_LR_GRID:
            write(records, claims.traffic_config("metr-la", name, lr, rounds=200),
                  {"val_best": 0.2 if lr == best else 0.5})
    short = {"panacea": [0.1, 0.2, 0.6], "panacea-gn": [0.3, 0.1, 0.5],
             "panacea-mlp": [0.2, 0.3, 0.4], "pfedhn": [0.1, 0.4, 0.3]}
    for name, mse in short.items():
        write(records, claims.traffic_week_config(name, 0.03 if name == "pfedhn" else 0.1,
                                                  rounds=200),
              {"best_round": 20}, metrics=mph(mse), val=[0.30, 0.32])
    # 800 rounds: Panacea peaks early and wobbles (best 0.25 at round 20, second half's
    # median of 0.40, 0.80 is 0.60); Panacea-GN keeps falling (0.20 at its last round).
    curves = {"panacea": ([0.25, 0.30, 0.40, 0.80], 20, [0.5, 0.4, 0.6]),
              "panacea-gn": ([0.35, 0.30, 0.25, 0.20], 80, [0.2, 0.5, 0.2]),
              "pfedhn": ([0.40, 0.30, 0.30, 0.28], 80, [0.3, 0.3, 0.3])}
    for name, (val, at, mse) in curves.items():
        write(records, claims.traffic_week_config(name, 0.03 if name == "pfedhn" else 0.1),
              {"best_round": at}, metrics=mph(mse), val=val)
    lines = claims.traffic_ablation_lines(False, None, None)
    (reading,) = [line for line in lines if line.startswith("- METR-LA, all 207")]
    # By hand: Panacea 500.0 against Panacea-GN 300.0 at 800 rounds, below on 1 of 3
    # sensors (0.4 < 0.5); the 200-round runs' reading as before; each row's curve in its
    # longest run, the largest gap between best and late median first.
    assert reading == (
        "- METR-LA, all 207 sensors, first week: after 800 rounds (seed 0): the generator's, "
        "panacea 500.0 against panacea-gn 300.0, panacea below on 1/3 sensors (panacea-mlp "
        "pending). After 200 rounds (seed 0): the graph's part, panacea 300.0 against "
        "panacea-mlp 300.0, panacea below on 2/3 sensors (+0.0 without it); the generator's, "
        "panacea 300.0 against panacea-gn 300.0, panacea below on 1/3 sensors; the "
        "hypernetwork settings', panacea-mlp 300.0 against pfedhn 266.7, panacea-mlp below on "
        "1/3 sensors. Validation MSE x1e-3 at the best round (which) against the median of "
        "the second half's evaluations, in each row's longest run (800 rounds: panacea, "
        "panacea-gn, pfedhn; 200 rounds: panacea-mlp): panacea 250.0 (round 20) / 600.0, "
        "panacea-gn 200.0 (round 80) / 225.0, panacea-mlp 300.0 (round 20) / 320.0, pfedhn "
        "280.0 (round 80) / 290.0.")
    assert "![Validation curves of Table IV's rows](claims_traffic_table4.png)" in lines
    fig = claims.traffic_t4_figure(claims.TRAFFIC_T4_FOUND)
    try:
        assert [ax.get_title() for ax in fig.axes] == [
            "METR-LA, 20 sensors", "PEMS-BAY, 67 sensors", "METR-LA, all 207 sensors, first week"]
        week = fig.axes[-1]
        assert week.get_title() == "METR-LA, all 207 sensors, first week"
        lines = {line.get_label(): line for line in week.lines}
        assert list(lines) == ["panacea", "panacea-gn", "panacea-mlp", "pfedhn"]
        assert lines["panacea"].get_xdata().tolist() == [20, 40, 60, 80]
        assert lines["panacea"].get_ydata().tolist() == pytest.approx([250, 300, 400, 800])
        assert lines["panacea-mlp"].get_xdata().tolist() == [20, 40]  # its 200-round run
        assert not fig.axes[0].lines and fig.axes[0].texts[0].get_text() == (
            "no run recorded yet")
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    claims.TRAFFIC_T4_FOUND.clear()
    claims.TRAFFIC_T4_FOUND["METR-LA, 20 sensors"] = {200: {"panacea": None}}
    assert claims.traffic_t4_figure(claims.TRAFFIC_T4_FOUND) is None


def test_the_traced_rows_run_only_when_named_and_read_their_traces(claims, records,
                                                                  monkeypatch):
    lines = claims.traffic_trace_lines(False, None, None)
    assert "| panacea (lambda_d 0.01) | pending | pending | pending | pending |" in lines
    for lr in claims.PANACEA_LR_GRID:
        write(records, claims.traffic_config("metr-la", "panacea", lr, rounds=200),
              {"val_best": 0.2 if lr == 0.1 else 0.5})
    cfg = claims.traffic_trace_config("panacea (lambda_d 0.01)", 0.1)
    assert cfg.rounds == 400 and cfg.overrides["lambda_d"] == 0.01
    assert cfg.overrides["data.root"] == claims.traffic_week_config("panacea", 0.1).overrides[
        "data.root"]
    gn = claims.traffic_trace_config("panacea-gn (no generator)", 0.1)
    assert gn.overrides["graph_generator"] is False and "lambda_d" not in gn.overrides
    ran: list = []

    def run(cfg, **kw):  # RecordCache.run without training
        ran.append((cfg, sorted(kw.get("traces") or {})))
        return None

    monkeypatch.setattr(claims.RUNS, "run", run)
    for strategies, datasets in ((["hypernetwork-trace"], ["metr-la"]),
                                 (["panacea"], ["metr-la-week"]), (None, None)):
        claims.traffic_trace_lines(True, strategies, datasets)
    assert ran == []
    claims.traffic_trace_lines(True, ["hypernetwork-trace"], ["metr-la-week"])
    assert [(c.overrides.get("lambda_d"), c.overrides.get("graph_generator"), t)
            for c, t in ran] == [(None, None, ["hypernetwork"]),
                                 (0.01, None, ["hypernetwork"]),
                                 (0.0, None, ["hypernetwork"]),
                                 (None, False, ["hypernetwork"])]
    # A record with its trace (every 20 rounds): the best validation MSE 0.25 at round
    # 40, the highest after it 0.9 at round 60 (a NaN evaluation, round 80, skipped);
    # the trace's first values and highest (None, a diverged value, skipped).
    from pyg_fedgraph.experiment.records import config_key

    path = records / f"{config_key(cfg)}.json"
    write(records, cfg, {"best_round": 40, "val_best": 0.25},
          val=[0.3, 0.25, 0.9, math.nan, 0.4])
    entry = json.loads(path.read_text())
    entry["traces"] = {"hypernetwork": {
        "rounds": [20, 40, 60, 80, 100], "embedding_norm_max": [5.0, 6.0, 17.5, None, 9.0],
        "embedding_norm_mean": [2.0] * 5, "model_norm_mean": [16.0] * 5,
        "model_spread": [1.5, 2.0, 11.25, None, 3.0]}}
    path.write_text(json.dumps(entry))
    lines = claims.traffic_trace_lines(False, None, None)
    assert ("| panacea (lambda_d 0.01) | 250.0 (40) | 900.0 (round 60) | 5.00, 17.50 "
            "(round 60) | 1.50, 11.25 (round 60) |") in lines
    # The same run recorded without its trace: said, not left pending for ever.
    del entry["traces"]
    path.write_text(json.dumps(entry))
    assert ("| panacea (lambda_d 0.01) | no trace in its record | - | - | - |"
            in claims.traffic_trace_lines(False, None, None))
    # A run that stopped at a round between evaluations has its last one there.
    assert claims.evaluated_rounds({"config": {"rounds": 50, "overrides": {"eval_every": 20}},
                                    "val": [1.0, 1.0, 1.0]}) == [20, 40, 50]


def test_the_rejections_line_counts_each_strategys_uploads_and_old_records(claims):
    def record(uploads=None, start=1):
        if uploads is None:
            return {}
        return {"rejections": {"from_round": start,
                               "uploads": [[r, c, "non-finite values"] for r, c in uploads]}}

    assert claims.traffic_rejections({}) == ""
    line = claims.traffic_rejections({
        "panacea": [record([(366, 2), (383, 0), (383, 4)]), record([]), record(None)],
        "fedavg": [record([], start=461)],
        "ditto": [record(None), record(None)]})
    assert line == ("panacea 3 in 2 runs (rounds 366, 383); fedavg 0 in 1 run (counted from "
                    "round 461 on in 1 of them); not kept by the runs made before 2026-11-28 "
                    "(panacea 1, ditto 2)")
    many = claims.traffic_rejections({"pfedme": [record([(r, 0) for r in range(1, 11)])]})
    assert many == "pfedme 10 in 1 run (rounds 1, 2, 3, 4, 5, 6, 7, 8, ...)"


def test_spearman_ranks_with_ties_and_says_nan_for_a_constant(claims):
    assert claims.spearman([1.0, 2.0, 2.0, 3.0], [10.0, 20.0, 20.0, 30.0]) == pytest.approx(1.0)
    assert claims.spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    # Ranks 0, 2.5, 2.5, 1 against 0, 1, 2, 3 (means 1.5): covariance 1.5, variances
    # 4.5 and 5, so 1.5 / sqrt(22.5) = 0.316.
    assert claims.spearman([1.0, 5.0, 5.0, 2.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(
        1.5 / math.sqrt(4.5 * 5.0))
    assert math.isnan(claims.spearman([1.0, 1.0], [1.0, 2.0]))


def test_the_per_client_rows_find_who_ran_away_and_check_the_shared_training(
        claims, records, monkeypatch):
    row = "panacea (lambda_d 0.1)"
    lines = claims.traffic_client_trace_lines(False, None, None)
    assert f"| {row}" + " | pending" * 10 + " |" in lines
    for lr in claims.PANACEA_LR_GRID:
        write(records, claims.traffic_config("metr-la", "panacea", lr, rounds=200),
              {"val_best": 0.2 if lr == 0.1 else 0.5})
    from pyg_fedgraph.experiment.records import config_key

    cfg = claims.traffic_client_trace_config(row, 0.1)
    assert cfg.overrides["eval_every"] == 10 and cfg.rounds == 400
    assert config_key(cfg) != config_key(claims.traffic_trace_config(row, 0.1))
    ran: list = []

    def run(cfg, **kw):  # RecordCache.run without training
        ran.append((cfg.overrides.get("lambda_d"),
                    [t.per_client for t in (kw.get("traces") or {}).values()]))
        return None

    monkeypatch.setattr(claims.RUNS, "run", run)
    claims.traffic_client_trace_lines(True, ["hypernetwork-trace"], ["metr-la-week"])
    assert ran == []
    claims.traffic_client_trace_lines(True, ["hypernetwork-clients"], ["metr-la-week"])
    assert ran == [(None, [True]), (0.0, [True])]
    # Four clients, evaluated at rounds 10-40; best round 20, the spread highest at 30.
    # There, client 1 is the farthest (4.0), the least reached (1 round) and has the
    # largest input norm (3.0); it carries 0.6 of the validation rise of 0.8. Its encoder
    # output norm at round 20 is the second largest (rank 1); at round 30 the output
    # norms rank as the distances but for clients 2 and 3 swapped (rho 0.8).
    monkeypatch.setattr(claims, "TRAFFIC_FARTHEST", 1)
    write(records, cfg, {"best_round": 20, "val_best": 0.2}, val=[0.3, 0.2, 0.4, 0.3])
    path = records / f"{config_key(cfg)}.json"
    entry = json.loads(path.read_text())
    # The prior graph as the record keeps it (the GCN's propagation matrix): edges
    # 0 -> 1, 1 -> 0, 2 -> 3 (row i: the weights client i gives its neighbours).
    entry["graph"] = [[0.5, 0.5, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0],
                      [0.0, 0.0, 0.7, 0.3]]
    flat = [1.0] * 4
    entry["traces"] = {"hypernetwork": {
        "rounds": [10, 20, 30, 40], "embedding_norm_max": [1.0] * 4,
        "embedding_norm_mean": [1.0] * 4, "model_norm_mean": [1.0] * 4,
        "model_spread": [1.0, 2.0, 5.0, None], "counted": 40, "clients": {
            "model_distance": [flat, flat, [0.5, 4.0, 1.0, 2.0], flat],
            "reached": [flat, flat, [9.0, 1.0, 6.0, 3.0], flat],
            "input_norm": [flat, flat, [1.0, 3.0, 2.0, 1.5], flat],
            "embedding_norm": [flat, [1.0, 3.0, 4.0, 2.0], [0.5, 4.0, 2.0, 1.0], flat],
            "val": [flat, [0.2] * 4, [0.25, 0.8, 0.2, 0.35], flat]}}}
    path.write_text(json.dumps(entry))
    # The row's traced run, every 20 rounds: the same at round 20, not at 40.
    write(records, claims.traffic_trace_config(row, 0.1), {"best_round": 20, "val_best": 0.2},
          val=[0.2, 0.31])
    text = "\n".join(claims.traffic_client_trace_lines(False, None, None))
    # One farthest client: no pair, 0 edges among it, 0 expected.
    assert (f"| {row} | 200.0 (20) | 400.0 (round 30) | 5.00 (30) | 75% | 0 (0.0) | -1.00 | "
            "0.80 | 0.80 | 1 / 4.5 | 1 |") in text
    # The two farthest (1 and 3): no edge between them; 3 of the 12 ordered pairs are
    # edges, so 3 x 2 / 12 = 0.5 expected; their ranks by output norm 1 and 2 (median 1.5).
    monkeypatch.setattr(claims, "TRAFFIC_FARTHEST", 2)
    text = "\n".join(claims.traffic_client_trace_lines(False, None, None))
    assert (f"| {row} | 200.0 (20) | 400.0 (round 30) | 5.00 (30) | 94% | 0 (0.5) | -1.00 | "
            "0.80 | 0.80 | 2 / 4.5 | 1.5 |") in text
    assert f"- The same training as the traced rows above: {row}: 1 of 2 shared " in text
    assert "rho is Spearman's over the 4 clients with every value finite;" in text
    assert "within the 3 GCN layers' hops upstream" in text   # Panacea's default
    # With the best round at 30 no evaluation after it has a spread: no figures.
    entry["summary"]["best_round"] = 30
    path.write_text(json.dumps(entry))
    assert (f"| {row} | 200.0 (30) | 300.0 (round 40)" + " | -" * 8 + " |"
            in claims.traffic_client_trace_lines(False, None, None))
    del entry["traces"]["hypernetwork"]["clients"]
    path.write_text(json.dumps(entry))
    assert (f"| {row} | no per-client trace in its record" + " | -" * 9 + " |"
            in claims.traffic_client_trace_lines(False, None, None))


def test_the_novel_probe_runs_only_when_named_and_reads_its_best_round(claims, records,
                                                                      monkeypatch):
    assert "METR-LA: pending (after Panacea's rate choice)." in \
        claims.traffic_novel_probe_lines(False, None, None)
    for lr in claims.PANACEA_LR_GRID:
        for name in ("panacea", "fedavg-ft"):
            write(records, claims.traffic_config("metr-la", name, lr, rounds=200),
                  {"val_best": 0.2 if lr == 0.1 else 0.5})
    cfg = claims.traffic_novel_probe_config("metr-la", 0.1)
    table3 = claims.traffic_config("metr-la", "panacea", 0.1, novel=True)
    # The same training as Panacea's Table III run, every evaluation in full.
    assert cfg.overrides == {**table3.overrides, "test_at": "every"}
    assert table3.overrides["test_at"] == "best" and cfg.novel_clients == 0.2
    ran: list = []

    def run(cfg, **kw):  # RecordCache.run without training
        ran.append((cfg, sorted(kw.get("traces") or {})))
        return None

    monkeypatch.setattr(claims.RUNS, "run", run)
    for strategies, datasets in ((["panacea"], ["metr-la"]), (None, None),
                                 (["novel-probe"], ["pems-bay"])):
        claims.traffic_novel_probe_lines(True, strategies, datasets)
    assert ran == []
    claims.traffic_novel_probe_lines(True, ["novel-probe"], ["metr-la"])
    assert ran == [(cfg, ["novel"])]
    # A record of it: 2 novel sensors (3, 7), 3 trained (0, 1, 2), evaluated at rounds
    # 20 and 40, the best round 40 with its cross table.
    from pyg_fedgraph.experiment.records import config_key

    write(records, cfg, {"best_round": 40, "val_best": 0.2})
    path = records / f"{config_key(cfg)}.json"
    entry = json.loads(path.read_text())
    entry["traces"] = {"novel": {
        "metric": "mse_norm", "rounds": [20, 40], "held_out": [3, 7], "trained": [0, 1, 2],
        "neighbours": [2, None],
        "val": {"own": [[9, 9], [0.5, 0.6]], "mean": [[9, 9], [0.3, 0.3]],
                "neighbour": [[9, None], [0.2, None]]},
        "test": {"own": [[9, 9], [0.8, 1.0]], "mean": [[9, 9], [0.4, 0.2]],
                 "neighbour": [[9, None], [0.3, None]]},
        # trained-major: row j is trained client j's model on sensors 3 and 7.
        "cross": {"round": 40, "val": [[0.5, 0.1], [0.4, None], [0.2, 0.3]],
                  "test": [[0.6, 0.15], [0.1, 0.5], [0.3, 0.35]]}}}
    path.write_text(json.dumps(entry))
    write(records, table3, {"best_round": 760}, novel={"mse_norm": [0.7, 0.9]})
    write(records, claims.traffic_config("metr-la", "fedavg-ft", 0.1, novel=True),
          {"best_round": 780}, novel={"mse_norm": [0.25, 0.45]})
    lines = claims.traffic_novel_probe_lines(False, None, None)
    # Sensor 3: the best on validation is client 2 (0.2; test 0.3), the best on test
    # client 1 (0.1); sensor 7: client 0 (0.1 -> 0.15), client 1's None skipped.
    assert "| 3 | 800.0 | 400.0 | 300.0 (2) | 300.0 (2) | 100.0 | 250.0 |" in lines
    assert "| 7 | 1000.0 | 200.0 | - (-) | 150.0 (0) | 150.0 | 450.0 |" in lines
    assert "| mean | 900.0 | 300.0 | 300.0 (1 of 2) | 225.0 | 125.0 | 350.0 |" in lines
    assert any(line.endswith("neighbour), by evaluation: first (round 20) 9000.0 / 9000.0 / "
                             "9000.0; best (round 40) 900.0 / 300.0 / 300.0; last (round 40) "
                             "900.0 / 300.0 / 300.0; own below the mean model at 0 of 2 "
                             "evaluations.")
               for line in lines)
    assert any("own models: 900.0 at its best round 40; Panacea's Table III record: 800.0 "
               "(round 760)" in line for line in lines)
    # A sensor with no finite validation value in any trained model: no choice made.
    entry["traces"]["novel"]["cross"]["val"] = [[0.5, None], [0.4, None], [0.2, None]]
    path.write_text(json.dumps(entry))
    assert "| 7 | 1000.0 | 200.0 | - (-) | - (-) | 150.0 | 450.0 |" in \
        claims.traffic_novel_probe_lines(False, None, None)
    # A probe without the best round's cross table: said, not misread.
    entry["traces"]["novel"]["cross"]["round"] = 20
    path.write_text(json.dumps(entry))
    assert any("holds no probe of the best round" in line
               for line in claims.traffic_novel_probe_lines(False, None, None))


def test_the_fine_tuning_sweep_runs_only_when_named_and_reads_its_last_round(claims, records,
                                                                           monkeypatch):
    assert any("pending (after FedAvg's and FedAvg-FT's rate choices" in line
               for line in claims.traffic_ft_sweep_lines(False, None, None))
    for lr in claims.PANACEA_LR_GRID:
        for name in ("fedavg", "fedavg-ft", "pfedhn", "panacea"):
            write(records, claims.traffic_config("metr-la", name, lr, rounds=200),
                  {"val_best": 0.2 if lr == 0.1 else 0.5})
    cfg = claims.traffic_ft_sweep_config("metr-la", 0.1)
    table2 = claims.traffic_config("metr-la", "fedavg", 0.1)
    # FedAvg's Table II run again (the training FedAvg-FT's shares), evaluated in full.
    assert cfg.overrides == {**table2.overrides, "test_at": "every"} and cfg.seed == 0
    ran: list = []

    def run(cfg, **kw):  # RecordCache.run without training
        ran.append((cfg, {k: v.steps for k, v in (kw.get("traces") or {}).items()}))
        return None

    monkeypatch.setattr(claims.RUNS, "run", run)
    for strategies, datasets in ((["fedavg"], ["metr-la"]), (None, None),
                                 (["ft-sweep"], ["pems-bay"])):
        claims.traffic_ft_sweep_lines(True, strategies, datasets)
    assert ran == []
    claims.traffic_ft_sweep_lines(True, ["ft-sweep"], ["metr-la"])
    assert ran == [(cfg, {"finetune": list(claims.TRAFFIC_FT_SWEEP_STEPS)})]
    assert 0 in claims.TRAFFIC_FT_SWEEP_STEPS
    assert claims.TRAFFIC_PROTOCOL["steps"] in claims.TRAFFIC_FT_SWEEP_STEPS
    # A record: 3 sensors, steps 0, 50 and 200 at round 800; pFedHN's and Panacea's runs.
    from pyg_fedgraph.experiment.records import config_key

    write(records, cfg, {"best_round": 740})
    path = records / f"{config_key(cfg)}.json"
    entry = json.loads(path.read_text())
    entry["traces"] = {"finetune": {
        "metric": "mse_norm", "steps": [0, 50, 200], "round": 800,
        "val": [[0.4, 0.5, 0.6], [0.3, 0.3, 0.3], [0.2, 0.5, None]],
        "test": [[0.5, 0.5, 0.5], [0.2, 0.3, 0.4], [0.1, 0.2, 0.3]]}}
    path.write_text(json.dumps(entry))
    assert not any(line.startswith("Pending")
                   for line in claims.traffic_ft_sweep_lines(False, None, None))
    write(records, claims.traffic_config("metr-la", "pfedhn", 0.1),
          {"best_round": 660, "test_final": 0.26}, {"mse_norm": [0.25, 0.25, 0.25]})
    write(records, claims.traffic_config("metr-la", "panacea", 0.1),
          {"best_round": 800, "test_final": 0.7 / 3}, {"mse_norm": [0.15, 0.35, 0.2]})
    write(records, table2, {"test_final": 0.5})
    write(records, claims.traffic_config("metr-la", "fedavg-ft", 0.1),
          {"best_round": 780, "test_final": 0.3}, {"mse_norm": [0.2, 0.3, 0.3]})
    lines = claims.traffic_ft_sweep_lines(False, None, None)
    assert "| 0 (FedAvg) | 500.0 | 500.0 | 0/3 | 0/3 |" in lines
    assert "| 50 (FedAvg-FT) | 300.0 | 300.0 | 1/3 | 1/3 |" in lines
    # Sensor 2's validation value is missing (None) at 200 steps: the mean says so.
    assert "| 200 | 350.0 (2 of 3) | 200.0 | 2/3 | 2/3 |" in lines
    assert ("- The sweep is read at round 800, with no choice of round; the Table II runs "
            "(seed 0) beside it at their best validation rounds, which favours them: "
            "FedAvg-FT's 266.7 at its best round 780 (300.0 at round 800), below pFedHN on 1/3 "
            "sensors (both at their best); pFedHN's 250.0 at its best round 660 (260.0 at round "
            "800); Panacea's 233.3 at its best round 800 (233.3 at round 800).") in lines
    # Validation means over sensors 0 and 1 (sensor 2 has no value at 200 steps): 0 steps
    # 0.45, 50 steps 0.3, 200 steps 0.35.
    assert ("- The step count with the lowest validation MSE (over the 2 sensors every count "
            "evaluated): k = 50 (test 300.0).") in lines
    assert ("- The same training as the records (test MSE x1e-3 at round 800): k = 0: 500.0, "
            "FedAvg's Table II run (seed 0) at round 800: 500.0; k = 50: 300.0, FedAvg-FT's "
            "Table II run (seed 0) at round 800: 300.0.") in lines
    # Compared over the common sensors: 200 steps (0.25, 0.3: 0.275) beats 50 steps (0.3,
    # 0.3: 0.3) there, though 50's mean over all three (0.267) is below 200's over its two.
    entry["traces"]["finetune"]["val"][1] = [0.3, 0.3, 0.2]
    entry["traces"]["finetune"]["val"][2] = [0.25, 0.3, None]
    path.write_text(json.dumps(entry))
    assert any("evaluated): k = 200 (test 200.0)." in line
               for line in claims.traffic_ft_sweep_lines(False, None, None))
    # Rates chosen apart: FedAvg's run is not FedAvg-FT's training, and it says so.
    for lr in claims.PANACEA_LR_GRID:
        write(records, claims.traffic_config("metr-la", "fedavg", lr, rounds=200),
              {"val_best": 0.2 if lr == 0.03 else 0.5})
    assert "METR-LA: not run: FedAvg's and FedAvg-FT's chosen rates differ (0.03 and 0.1)." in \
        claims.traffic_ft_sweep_lines(False, None, None)


def test_the_fine_tuning_rates_run_only_when_named_and_choose_a_pair_on_validation(
        claims, records, monkeypatch):
    assert "METR-LA: pending (after FedAvg's and FedAvg-FT's rate choices)." in \
        claims.traffic_ft_rates_lines(False, None, None)
    for lr in claims.PANACEA_LR_GRID:
        for name in ("fedavg", "fedavg-ft", "pfedhn", "panacea"):
            write(records, claims.traffic_config("metr-la", name, lr, rounds=200),
                  {"val_best": 0.2 if lr == 0.1 else 0.5})
    cfg = claims.traffic_ft_rates_config("metr-la", 0.1)
    table2 = claims.traffic_config("metr-la", "fedavg", 0.1)
    # FedAvg's Table II run again, evaluated only at its last round: a key of its own.
    assert cfg.overrides == {**table2.overrides, "eval_every": 800} and cfg.rounds == 800
    ran: list = []

    def run(cfg, **kw):  # RecordCache.run without training
        ran.append((cfg, {k: (v.steps, v.lrs) for k, v in (kw.get("traces") or {}).items()}))
        return None

    monkeypatch.setattr(claims.RUNS, "run", run)
    for strategies, datasets in ((["fedavg"], ["metr-la"]), (None, None),
                                 (["ft-rates"], ["pems-bay"]), (["ft-sweep"], None)):
        claims.traffic_ft_rates_lines(True, strategies, datasets)
    assert ran == []
    claims.traffic_ft_rates_lines(True, ["ft-rates"], ["metr-la"])
    assert ran == [(cfg, {"finetune": (list(claims.TRAFFIC_FT_RATES_STEPS),
                                       list(claims.TRAFFIC_FT_RATES_LRS))})]
    # FedAvg-FT's own fine-tuning (the client rate, K_c steps) is one of the pairs.
    assert 0.1 in claims.TRAFFIC_FT_RATES_LRS and 0 in claims.TRAFFIC_FT_RATES_STEPS
    assert claims.TRAFFIC_PROTOCOL["steps"] in claims.TRAFFIC_FT_RATES_STEPS
    # A record: 3 sensors, rates 0.1 and 1.0 (diverged on sensor 2), steps 0 and 50.
    from pyg_fedgraph.experiment.records import config_key

    write(records, cfg)
    path = records / f"{config_key(cfg)}.json"
    entry = json.loads(path.read_text())
    entry["traces"] = {"finetune": {
        "metric": "mse_norm", "steps": [0, 50], "lrs": [0.1, 1.0], "round": 800,
        "val": [[0.4, 0.5, 0.6], [0.3, 0.3, 0.3], [0.4, 0.5, 0.6], [0.1, 0.2, None]],
        "test": [[0.5, 0.5, 0.5], [0.2, 0.3, 0.4], [0.5, 0.5, 0.5], [0.15, 0.15, None]]}}
    path.write_text(json.dumps(entry))
    write(records, claims.traffic_config("metr-la", "pfedhn", 0.1),
          {"best_round": 660, "test_final": 0.26}, {"mse_norm": [0.25, 0.25, 0.25]})
    write(records, claims.traffic_config("metr-la", "fedavg-ft", 0.1),
          {"best_round": 780, "test_final": 0.3}, {"mse_norm": [0.2, 0.3, 0.3]})
    write(records, table2, {"test_final": 0.5})
    lines = claims.traffic_ft_rates_lines(False, None, None)
    assert "| fine-tuning rate η | k = 50 |" in lines
    assert "| 0.1 (client rate) | 300.0 (300.0) |" in lines
    assert "| 1.0 | 150.0 (2 of 3) (150.0 (2 of 3)) |" in lines
    assert "- k = 0 (FedAvg, no fine-tuning): 500.0 (500.0)." in lines
    # Rate 1.0 has no value on sensor 2 (diverged): not chosen, though lowest on the other
    # two. Of the rest, (0.1, 50): 0.3 against k = 0's 0.5.
    assert ("- The pair with the lowest validation MSE: η = 0.1, k = 50: test 300.0; below "
            "pFedHN on 1/3 sensors, Panacea's run pending, below FedAvg-FT on 0/3 sensors "
            "(their Table II runs, seed 0, at their best validation rounds: pFedHN 250.0; "
            "FedAvg-FT 266.7); not chosen, a model without a value on some sensor: η = 1.0, "
            "k = 50.") in lines
    assert ("- The same training as the records (test MSE x1e-3 at round 800): k = 0: 500.0, "
            "FedAvg's Table II run (seed 0) at round 800: 500.0; η = 0.1, k = 50: 300.0, "
            "FedAvg-FT's Table II run (seed 0) at round 800: 300.0.") in lines
    # Not fine-tuning can be the best choice (k = 0 competes); with no validation value
    # before fine-tuning, nothing is chosen.
    trace = entry["traces"]["finetune"]
    trace["val"][0] = trace["val"][2] = [0.1, 0.1, 0.1]
    path.write_text(json.dumps(entry))
    assert any(line.startswith("- The pair with the lowest validation MSE: η = 0.1, k = 0: "
                               "test 500.0;") for line in claims.traffic_ft_rates_lines(
                                   False, None, None))
    trace["val"] = [[None] * 3] * 4
    path.write_text(json.dumps(entry))
    assert ("- No pair has a value on every sensor with a value before fine-tuning (over the "
            "0 sensors with a value before fine-tuning): none chosen.") in \
        claims.traffic_ft_rates_lines(False, None, None)
    # The chosen rate not among the swept ones: the FedAvg-FT check says so.
    trace["lrs"] = [0.05, 1.0]
    path.write_text(json.dumps(entry))
    assert any("η = 0.1, k = 50: not swept (FedAvg-FT's Table II run (seed 0) at round 800: "
               "300.0)" in line for line in claims.traffic_ft_rates_lines(False, None, None))



def test_the_exposure_round_is_where_a_sensor_has_trained_x_times(claims):
    # r = x N / 5 on the evaluation grid: METR-LA's 20 sensors train 60 times by round
    # 240; PEMS-BAY's 67 by round 804, within half an interval of the run's 800.
    assert claims.traffic_exposure_round(20, 60, 800, 20) == 240
    assert claims.traffic_exposure_round(67, 60, 800, 20) == 800
    assert claims.traffic_exposure_round(67, 15, 800, 20) == 200  # 201 -> 200
    assert claims.traffic_exposure_round(67, 61, 800, 20) is None  # 817.4, past 810
    assert claims.traffic_exposure_round(20, 1, 800, 20) == 20  # 4 -> the first evaluation
    entry = {"config": {"rounds": 100, "overrides": {"eval_every": 20}},
             "val": [0.5, 0.3, math.nan, 0.4, 0.2]}
    assert claims.traffic_val_until(entry, 20) == 0.5
    assert claims.traffic_val_until(entry, 80) == 0.3  # the NaN at round 60 skipped
    assert claims.traffic_val_until(entry, 100) == 0.2
    assert claims.traffic_val_until(None, 100) is None
    assert claims.traffic_val_until(entry, None) is None


def test_the_exposure_table_sets_both_datasets_side_by_side(claims, records):
    # Panacea and FedAvg-FT choose 0.1 on both; their 800-round curves (40 evaluations)
    # fall by 1e-3 an evaluation from 0.3 (Panacea) and 0.28 (FedAvg-FT), except that
    # Panacea's METR-LA curve dips to 0.1 at round 200 (evaluation 10).
    text = "\n".join(claims.traffic_exposure_lines())
    assert "Pending: the Table II runs of seed 0." in text
    for dataset in ("metr-la", "pems-bay"):
        for name, start in (("panacea", 0.3), ("fedavg-ft", 0.28)):
            for lr in claims.PANACEA_LR_GRID:
                write(records, claims.traffic_config(dataset, name, lr, rounds=200),
                      {"val_best": 0.2 if lr == 0.1 else 0.5})
            val = [start - 1e-3 * i for i in range(40)]
            if dataset == "metr-la" and name == "panacea":
                val[9] = 0.1
            write(records, claims.traffic_config(dataset, name, 0.1), val=val)
    text = "\n".join(claims.traffic_exposure_lines())
    assert ("| strategy | METR-LA x = 15 (round 60) | METR-LA x = 30 (round 120) | METR-LA x = "
            "60 (round 240) | METR-LA x = 200 (round 800) | PEMS-BAY x = 15 (round 200) | "
            "PEMS-BAY x = 30 (round 400) | PEMS-BAY x = 60 (round 800) |") in text
    # Round 60 is evaluation 3 (0.3 - 2e-3); round 240 evaluation 12, after the dip.
    assert "| fedavg-ft | 278.0 | 275.0 | 269.0 | 241.0 | 271.0 | 261.0 | 241.0 |" in text
    assert "| panacea | 298.0 | 295.0 | 100.0 | 100.0 | 291.0 | 281.0 | 261.0 |" in text
    assert ("- Order at x = 60: METR-LA panacea 100.0, fedavg-ft 269.0; PEMS-BAY fedavg-ft "
            "241.0, panacea 261.0.") in text
    assert "x = 200:" not in text  # PEMS-BAY's sensors never train 200 times


def test_panaceas_grids_run_only_when_named_and_choose_a_value_on_validation(
        claims, records, monkeypatch):
    assert "PEMS-BAY: pending (after Panacea's rate choice)." in \
        claims.traffic_panacea_grid_lines(False, None, None)
    # Panacea and FedAvg-FT choose 0.1 (validation 0.2 against 0.5); FedAvg-FT's run there
    # has test MSE 0.2, 0.3, 0.4 on three sensors.
    for lr in claims.PANACEA_LR_GRID:
        write(records, claims.traffic_config("pems-bay", "panacea", lr, rounds=200),
              {"val_best": 0.2 if lr == 0.1 else 0.5, "best_round": 200},
              {"mse_norm": [0.3, 0.3, 0.3]})
        write(records, claims.traffic_config("pems-bay", "fedavg-ft", lr, rounds=200),
              {"val_best": 0.15 if lr == 0.1 else 0.5}, {"mse_norm": [0.2, 0.3, 0.4]})
    # The defaults are Panacea's own and their runs the rate choice's (the same key).
    assert claims.panacea_default("lambda_d") == 0.1 and claims.panacea_default("hn_lr") == 1e-3
    rate_run = claims.traffic_config("pems-bay", "panacea", 0.1, rounds=200)
    assert claims.traffic_panacea_grid_config("pems-bay", 0.1, "lambda_d", 0.1) == rate_run
    cfg = claims.traffic_panacea_grid_config("pems-bay", 0.1, "hn_lr", 0.01)
    assert cfg.overrides == {**rate_run.overrides, "hn_lr": 0.01} and cfg.rounds == 200
    ran: list = []

    def run(cfg, **kw):  # RecordCache.run without training
        ran.append(cfg)
        return None

    monkeypatch.setattr(claims.RUNS, "run", run)
    for strategies, datasets in ((["panacea"], ["pems-bay"]), (None, None),
                                 (["panacea-grid"], ["metr-la"]), (["ft-sweep"], None)):
        claims.traffic_panacea_grid_lines(True, strategies, datasets)
    assert ran == []
    claims.traffic_panacea_grid_lines(True, ["panacea-grid"], ["pems-bay"])
    grids = claims.TRAFFIC_PANACEA_GRID_VALUES
    assert len(ran) == len(grids["lambda_d"]) + len(grids["hn_lr"]) - 2  # not the defaults
    assert rate_run not in ran and cfg in ran
    ran.clear()  # one setting's values alone
    claims.traffic_panacea_grid_lines(True, ["panacea-grid:hn_lr"], None)
    assert [c.overrides["hn_lr"] for c in ran] == [0.003, 0.01, 0.03, 0.1]
    assert all("lambda_d" not in c.overrides for c in ran)
    lines = claims.traffic_panacea_grid_lines(False, None, None)
    assert "| lambda_d | 0.1 (default) | 200.0 (200) | 300.0 | 1/3 |" in lines
    assert "| hn_lr | 0.01 | pending | pending | pending |" in lines
    assert "- The value validation chooses: pending (the grid's other runs)." in lines
    # Every value recorded: hn_lr 0.01 lowest on validation (0.1), below FedAvg-FT on
    # sensors 1 and 2 (0.25 and 0.1 against 0.3 and 0.4); lambda_d 1.0 diverged (NaN).
    for setting, values in grids.items():
        for value in values:
            if value == claims.panacea_default(setting):
                continue
            val = {("hn_lr", 0.01): 0.1, ("lambda_d", 1.0): math.nan}.get((setting, value), 0.3)
            write(records, claims.traffic_panacea_grid_config("pems-bay", 0.1, setting, value),
                  {"val_best": val, "best_round": 180}, {"mse_norm": [0.3, 0.25, 0.1]})
    lines = claims.traffic_panacea_grid_lines(False, None, None)
    assert "| hn_lr | 0.01 | 100.0 (180) | 216.7 | 2/3 |" in lines
    assert "| lambda_d | 1.0 | diverged (180) | 216.7 | 2/3 |" in lines
    assert ("- The value with the lowest validation MSE: hn_lr = 0.01: 100.0 on validation and "
            "216.7 on test, against FedAvg-FT's 150.0 on validation and 300.0 on test.") in lines
