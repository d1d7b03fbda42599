"""The record cache: interrupted runs resume to the uninterrupted record; records and
checkpoints written before the runner keep their keys and resume; a checkpoint of
``pyg-fedgraph run`` resumes under the cache and the other way round."""
from __future__ import annotations

import csv
import dataclasses
import json
import shutil
from array import array
from pathlib import Path

import pytest
import torch

from pyg_fedgraph.cli import main
from pyg_fedgraph.experiment import ExperimentConfig, RecordCache
from pyg_fedgraph.experiment.records import config_key, run_identity
from pyg_fedgraph.simulation import simulator as simulator_module
from pyg_fedgraph.simulation.checkpoint import load_checkpoint

BEFORE = Path(__file__).resolve().parents[1] / "fixtures" / "before_runner"
OVERRIDES = {"steps": 3, "model.hidden_channels": 8}


def configs(seed: int = 0, strategy: str = "fedavg"):
    cfg = ExperimentConfig(dataset="digits", strategy=strategy, clients=3, rounds=4,
                           partition="pathological", seed=seed, overrides=dict(OVERRIDES))
    twin = dataclasses.replace(cfg, strategy="fedavg-ft",
                               overrides={**cfg.overrides, "finetune_from": "local"})
    return cfg, twin


def cli_args(cfg: ExperimentConfig, out: Path) -> list[str]:
    return ["run", "--dataset", cfg.dataset, "--strategy", cfg.strategy, "--clients",
            str(cfg.clients), "--rounds", str(cfg.rounds), "--partition", str(cfg.partition),
            "--seed", str(cfg.seed), *(a for k, v in OVERRIDES.items()
                                       for a in ("--set", f"{k}={v}")),
            "--out", str(out), "--quiet"]


def same(a: dict, b: dict) -> None:
    assert a["val"] == b["val"] and a["test"] == b["test"]
    assert a["summary"] == b["summary"] and a["test_clients"] == b["test_clients"]


class Crash(KeyboardInterrupt):
    r"""Stands for a kill in round 3 (a KeyboardInterrupt: what a second Ctrl-C raises)."""


@pytest.fixture
def crash_in_round_3(monkeypatch):
    step = simulator_module.Simulator.step

    def crashing(self):
        if self.round == 2:
            raise Crash
        return step(self)
    monkeypatch.setattr(simulator_module.Simulator, "step", crashing)
    return lambda: monkeypatch.setattr(simulator_module.Simulator, "step", step)


def history_of(folder: Path) -> list[tuple[str, str]]:
    with open(folder / "history.csv") as f:
        rows = list(csv.DictReader(f))
    return [(r["round"], r["test_accuracy"]) for r in rows]


def test_an_interrupted_run_resumes_to_the_uninterrupted_records(tmp_path, crash_in_round_3):
    cfg, twin = configs()
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    with pytest.raises(Crash):
        cache.run(cfg, local_models_as=twin)
    assert cache.checkpoint_round(cfg) == 2 and cache.load(cfg) is None
    crash_in_round_3()  # the machine is back
    entry = cache.run(cfg, local_models_as=twin)
    assert not cache.checkpoint_path(cfg).exists()  # removed once the record is stored
    fresh = RecordCache(tmp_path / "fresh", tmp_path / "fresh-ckpt")
    same(entry, fresh.run(cfg, local_models_as=twin))
    same(cache.load(twin), fresh.load(twin))
    assert entry["config"] == json.loads(json.dumps(cfg.to_dict()))
    # The default device, auto, is CUDA where a GPU is.
    assert entry["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert entry["torch"] == torch.__version__
    # On the CPU the numbers can move with the instruction set torch's kernels use.
    assert entry["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert cache.run(cfg) is not None  # read back at once


def test_compile_is_how_a_run_executes_not_which_run_it_is(tmp_path, crash_in_round_3,
                                                          monkeypatch):
    cfg, _ = configs()
    compiled = dataclasses.replace(cfg, overrides={**cfg.overrides, "compile": True})
    other = dataclasses.replace(cfg, overrides={**cfg.overrides, "steps": 4})
    assert config_key(compiled) == config_key(cfg) != config_key(other)
    assert run_identity(compiled.to_dict()) == run_identity(cfg.to_dict())
    assert run_identity(compiled.to_dict())["overrides"] == json.loads(json.dumps(OVERRIDES))
    # A run stopped in round 3 without compile goes on compiled from its checkpoint (here
    # torch.compile is the function itself: the test is about finding the run, not speed).
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    with pytest.raises(Crash):
        cache.run(cfg)
    assert cache.checkpoint_round(compiled) == 2 and cache.checkpoint_round(other) is None
    crash_in_round_3()
    resumed = []
    monkeypatch.setattr(simulator_module.Simulator, "load_state_dict",
                        lambda self, state, f=simulator_module.Simulator.load_state_dict:
                        resumed.append(state["round"]) or f(self, state))
    entry = cache.run(compiled)
    assert resumed == [2]
    assert entry["config"]["overrides"]["compile"] is True  # the record says how it ran
    same(entry, RecordCache(tmp_path / "fresh", tmp_path / "fresh-ckpt").run(cfg))
    assert cache.load(cfg) == entry and cache.load(other) is None  # one run, two ways


def test_records_and_checkpoints_written_before_the_runner_keep_their_keys(tmp_path):
    keys = json.loads((BEFORE / "keys.json").read_text())
    cfg, twin = configs()
    # Keys did not move (settings added since are left out of to_dict at their defaults).
    assert config_key(cfg) == keys["record"] and config_key(twin) == keys["twin"]
    cache = RecordCache(BEFORE / "records", tmp_path / "unused")
    old = json.loads((BEFORE / "records" / f"{keys['record']}.json").read_text())
    assert cache.load(cfg) == old and cache.load(twin) is not None
    # The in-flight checkpoint of the benchmarks (format 1) resumes at round 2 and ends
    # with the records an uninterrupted run gives, the FedAvg-FT twin included.
    cfg2, twin2 = configs(seed=1)
    assert config_key(cfg2) == keys["inflight"]
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    cache.checkpoints.mkdir()
    shutil.copy(BEFORE / "inflight" / f"{keys['inflight']}.ckpt.pt", cache.checkpoint_path(cfg2))
    assert cache.checkpoint_round(cfg2) == 2
    resumed = cache.run(cfg2, local_models_as=twin2)
    fresh = RecordCache(tmp_path / "fresh", tmp_path / "fresh-ckpt")
    same(resumed, fresh.run(cfg2, local_models_as=twin2))
    same(cache.load(twin2), fresh.load(twin2))


def test_a_cli_checkpoint_written_before_the_runner_resumes(tmp_path):
    keys = json.loads((BEFORE / "keys.json").read_text())
    cfg = ExperimentConfig(**keys["cli_config"])
    out = tmp_path / "old"
    out.mkdir()
    shutil.copy(BEFORE / "cli" / "checkpoint.pt", out / "checkpoint.pt")
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert main(cli_args(cfg, tmp_path / "fresh")) == 0
    assert history_of(out) == history_of(tmp_path / "fresh") and len(history_of(out)) == 4


def test_checkpoints_move_between_the_cli_and_the_record_cache(tmp_path, crash_in_round_3):
    cfg, _ = configs(strategy="pfedgraph")
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    # 1. pyg-fedgraph run, killed in round 3 after checkpointing round 2 ...
    out = tmp_path / "cli"
    assert main([*cli_args(cfg, out), "--checkpoint-every", "1"]) == 130
    assert int(load_checkpoint(out)["round"]) == 2
    # 2. ... while the record cache's run of the same settings crashes there too.
    with pytest.raises(Crash):
        cache.run(cfg)
    crash_in_round_3()
    # Swap the two checkpoints: each resumes from the other's.
    cli_ckpt, cache_ckpt = out / "checkpoint.pt", cache.checkpoint_path(cfg)
    shutil.copy(cli_ckpt, tmp_path / "from-cli.pt")
    shutil.copy(cache_ckpt, cli_ckpt)
    shutil.copy(tmp_path / "from-cli.pt", cache_ckpt)
    assert cache.checkpoint_round(cfg) == 2
    entry = cache.run(cfg)
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    fresh = RecordCache(tmp_path / "fresh", tmp_path / "fresh-ckpt").run(cfg)
    same(entry, fresh)
    assert [float(t) for _, t in history_of(out)] == pytest.approx(fresh["test"], abs=0)


def test_a_record_keeps_every_metric_of_the_reported_and_the_novel_clients(tmp_path):
    cfg = dataclasses.replace(configs()[0], clients=5, novel_clients=0.4)
    entry = RecordCache(tmp_path / "records", tmp_path / "ckpt").run(cfg)
    metrics, novel = entry["test_client_metrics"], entry["novel_client_metrics"]
    primary = entry["summary"]["metric"]
    # Three training clients are reported, the two held out are the novel ones.
    assert metrics[primary] == entry["test_clients"] and len(entry["test_clients"]) == 3
    assert set(novel) == set(metrics) and all(len(v) == 2 for v in novel.values())
    # The summary's means, computed from the histories, are the means of these values.
    assert sum(metrics[primary]) / 3 == pytest.approx(entry["summary"]["test"])
    assert sum(novel[primary]) / 2 == pytest.approx(entry["summary"]["test_novel"])
    # Written to disk and read back alike.
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    assert cache.load(cfg)["novel_client_metrics"] == novel


def test_a_record_without_held_out_clients_has_no_novel_metrics(tmp_path):
    entry = RecordCache(tmp_path / "records", tmp_path / "ckpt").run(configs()[0])
    assert "novel_client_metrics" not in entry
    assert len(entry["test_client_metrics"]) >= 1


class RoundsSeen:
    r"""A trace: the rounds it was called in, kept by checkpoints."""

    def __init__(self):
        self.rounds = []

    def __call__(self, sim, record):
        self.rounds.append(record.round)

    def state_dict(self):
        return {"rounds": list(self.rounds)}

    def load_state_dict(self, state):
        self.rounds = list(state["rounds"])


def test_a_trace_is_kept_in_the_record_across_a_resume(tmp_path, crash_in_round_3):
    cfg, _ = configs()
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    with pytest.raises(Crash):
        cache.run(cfg, traces={"seen": RoundsSeen()})
    crash_in_round_3()
    entry = cache.run(cfg, traces={"seen": RoundsSeen()})  # a fresh trace, resumed
    assert entry["traces"] == {"seen": {"rounds": [1, 2, 3, 4]}}
    assert cache.load(cfg)["traces"] == entry["traces"]


# ------------------------------------------------------------- tables of records


def made_up(cfg: ExperimentConfig, test: float, **extra) -> dict:
    r"""A record of ``cfg`` as a run stores it (numbers made up)."""
    from pyg_fedgraph.experiment.runner import plain_settings

    return {"config": plain_settings(cfg.to_dict()), "summary": {"test": test},
            "test": [test / 2, test], "seconds": 1.5, "load": [0.5, 0.25], **extra}


def legacy(cache: RecordCache, key: str, entry: dict) -> Path:
    r"""A record in the earlier format, one file, as the cache wrote them."""
    cache.records.mkdir(parents=True, exist_ok=True)
    path = cache.records / f"{key}.json"
    path.write_text(json.dumps(entry, default=float, sort_keys=True) + "\n")
    return path


def test_a_record_names_every_rejected_upload_across_a_resume(tmp_path, crash_in_round_3):
    # An absurd learning rate: every local training ends in Inf/NaN or an absurd norm.
    cfg = dataclasses.replace(configs()[0], overrides={**OVERRIDES, "lr": 1e30,
                                                       "eval_every": 3})
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    with pytest.raises(Crash):
        cache.run(cfg)
    crash_in_round_3()
    entry = cache.run(cfg)
    fresh = RecordCache(tmp_path / "fresh", tmp_path / "fresh-ckpt").run(cfg)
    assert entry["rejections"] == fresh["rejections"]
    assert entry["rejections"]["from_round"] == 1
    uploads = entry["rejections"]["uploads"]
    # Rounds 1 and 2 come from the checkpoint; rounds 1, 2 and 4 were not evaluated.
    assert sorted({r for r, _, _ in uploads}) == [1, 2, 3, 4]
    assert all(0 <= c < 3 and ("non-finite" in why or "absurd norm" in why)
               for _, c, why in uploads)
    json.dumps(entry["rejections"], allow_nan=False)


def test_records_of_one_family_share_one_table_a_line_each_sorted_by_key(tmp_path):
    a, b = configs(seed=0)[0], configs(seed=1)[0]
    image = dataclasses.replace(a, dataset="fashion-mnist")
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    for cfg, test in ((b, 0.75), (image, 0.5), (a, 0.25)):
        cache._store(cfg, made_up(cfg, test))
    assert sorted(p.name for p in cache.records.iterdir()) == ["digits.jsonl",
                                                               "fashion-mnist.jsonl"]
    assert cache.table_path(a) == cache.records / "digits.jsonl"
    lines = (cache.records / "digits.jsonl").read_text().splitlines()
    keys = [json.loads(line)["key"] for line in lines]
    assert keys == sorted([config_key(a), config_key(b)]) and len(lines) == 2
    assert lines[0].startswith('{"key":"digits-fedavg-pathological-3-')
    # Read back equal by another cache object.
    fresh = RecordCache(tmp_path / "records", tmp_path / "unused")
    for cfg, test in ((a, 0.25), (b, 0.75), (image, 0.5)):
        assert fresh.load(cfg) == made_up(cfg, test)
    assert set(fresh.used) == {config_key(a), config_key(b), config_key(image)}
    # The same records written in another order give the same bytes.
    other = RecordCache(tmp_path / "other", tmp_path / "ckpt")
    for cfg, test in ((a, 0.25), (b, 0.75)):
        other._store(cfg, made_up(cfg, test))
    assert (other.records / "digits.jsonl").read_bytes() == \
        (cache.records / "digits.jsonl").read_bytes()


def test_the_table_rule_and_an_explicit_table():
    from pyg_fedgraph.experiment.records import record_table

    assert [record_table({"dataset": d}) for d in (
        "fl60", "fl60-grda-file-graph", "digits", "topology", "cora", "citeseer", "metr-la",
        "pems-bay", "tu", "fashion-mnist", "My data/set")] == [
        "fl60", "fl60-grda-file-graph", "digits", "digits", "planetoid-cora-none",
        "planetoid-citeseer-none", "traffic-metr-la-none", "traffic-pems-bay-none",
        "tu", "fashion-mnist", "my-data-set"]
    # The traffic records split by dataset and rounds, to keep tables under 2 MB.
    assert [record_table({"dataset": d, "rounds": r}) for d, r in (
        ("metr-la", 800), ("pems-bay", 20), ("metr-la", 400))] == [
        "traffic-metr-la-800", "traffic-pems-bay-20", "traffic-metr-la-400"]
    # Planetoid's records split by dataset and partition, to keep tables under 2 MB.
    assert [record_table({"dataset": d, "partition": p}) for d, p in (
        ("cora", "metis"), ("citeseer", "overlapping"), ("pubmed", "random-nodes"),
        ("digits", "group"))] == [
        "planetoid-cora-metis", "planetoid-citeseer-overlapping", "planetoid-pubmed-random-nodes",
        "digits"]
    cache = RecordCache("r", "c", table="mine")
    assert cache.table_of({"dataset": "cora"}) == "mine"
    assert RecordCache("r", "c", table=lambda c: c["dataset"] + "-x").table_of(
        {"dataset": "cora"}) == "cora-x"
    with pytest.raises(ValueError, match="'../up' is not a table name"):
        RecordCache("r", "c", table="../up")


def test_a_record_under_its_key_with_other_settings_is_not_returned(tmp_path):
    cfg, twin = configs()
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    cache._put(config_key(cfg), made_up(twin, 0.5))  # cfg's key, twin's settings
    cache._put(cache.study_key(cfg, "s"), {**made_up(cfg, 0.5), "study": "other"})
    assert (cache.records / "digits.jsonl").read_text().count("\n") == 2
    assert cache.load(cfg) is None and cache.load_study(cfg, "s") is None and not cache.used
    cache._put(cache.study_key(cfg, "s"), {**made_up(cfg, 0.5), "study": "s"})
    assert cache.load_study(cfg, "s")["study"] == "s"


def test_a_legacy_file_is_read_then_folded_once(tmp_path):
    from math import isnan

    cfg, twin = configs()
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    cache._store(twin, made_up(twin, 0.5))
    old = made_up(cfg, 0.25, test_clients=[0.5, float("nan")])
    path = legacy(cache, config_key(cfg), old)
    study = legacy(cache, cache.study_key(cfg, "s"), {**made_up(cfg, 0.75), "study": "s"})
    entry = cache.load(cfg)
    assert entry["summary"] == {"test": 0.25} and isnan(entry["test_clients"][1])
    assert cache.load_study(cfg, "s")["summary"] == {"test": 0.75}
    # Folded: the files are gone, the table holds both records, read back alike.
    assert cache.fold() == sorted([config_key(cfg), cache.study_key(cfg, "s")])
    assert not path.exists() and not study.exists()
    assert sorted(p.name for p in cache.records.iterdir()) == ["digits.jsonl"]
    table = (cache.records / "digits.jsonl").read_text()
    assert table.count("\n") == 3 and config_key(cfg) in table
    fresh = RecordCache(cache.records, tmp_path / "ckpt")
    assert json.dumps(fresh.load(cfg)) == json.dumps(entry)  # NaN != NaN: compare the text
    assert fresh.load_study(cfg, "s")["summary"] == {"test": 0.75}
    assert fresh.load(twin) == made_up(twin, 0.5)
    # Again: nothing to do, nothing rewritten.
    assert fresh.fold() == [] and (cache.records / "digits.jsonl").read_text() == table
    # A file newer than the table's record of its key replaces it, read first and folded.
    legacy(cache, config_key(twin), made_up(twin, 0.125))
    assert fresh.load(twin)["summary"] == {"test": 0.125}
    assert fresh.fold() == [config_key(twin)]
    assert RecordCache(cache.records, "c").load(twin)["summary"] == {"test": 0.125}
    # A record stored while an old file of its key lies there replaces the file too.
    legacy(cache, config_key(twin), made_up(twin, 0.0))
    cache._store(twin, made_up(twin, 1.0))
    assert not (cache.records / f"{config_key(twin)}.json").exists()
    assert RecordCache(cache.records, "c").load(twin)["summary"] == {"test": 1.0}


def test_a_graph_is_packed_in_its_line_and_read_back_exactly(tmp_path):
    import random

    from pyg_fedgraph.experiment.records import _line

    cfg, twin = configs()
    rng = random.Random(0)
    # float32 values (a graph as the records hold it: torch float32 made Python floats),
    # a zero, a negative zero, NaN and infinity among them.
    graph = [[float(array("f", [rng.random()])[0]) for _ in range(60)] for _ in range(60)]
    graph[0][:4] = [0.0, -0.0, float("nan"), float("inf")]
    wide = [[0.1, 1e-300], [2.0, -3.5]]  # 0.1 and 1e-300 are no float32: kept as float64
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    cache._store(cfg, made_up(cfg, 0.5, graph=graph))
    cache._store(twin, made_up(twin, 0.5, graph=wide))
    fresh = RecordCache(cache.records, "c")
    back, back_wide = fresh.load(cfg)["graph"], fresh.load(twin)["graph"]
    assert json.dumps(back) == json.dumps(graph) and back_wide == wide
    assert str(back[0][1]) == "-0.0"
    # The line holds the graph packed: about a quarter of the decimals' text.
    line = next(t for t in (cache.records / "digits.jsonl").read_text().splitlines()
                if config_key(cfg) in t)
    plain = json.dumps(made_up(cfg, 0.5, graph=graph))
    assert '"dtype":"float32"' in line and len(line) < len(plain) / 3
    assert '"dtype":"float64"' in _line("k", {"graph": wide})
    # What is not a rectangular list of floats stays as it is.
    for other in (None, [], [[1.0, 2.0], [3.0]], [[1, 2], [3, 4]], [[1.0, None]]):
        assert json.loads(_line("k", {"graph": other}))["graph"] == other


def test_the_fold_rewrites_lines_of_the_earlier_table_format(tmp_path):
    from pyg_fedgraph.experiment.records import _line_key

    cfg, twin = configs()
    fl60 = ExperimentConfig(dataset="fl60-grda-file", strategy="fedavg", clients=4)
    graph = [[0.5, 0.25], [0.125, 1.0]]
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    cache._store(twin, made_up(twin, 0.75))
    # Lines as the earlier format wrote them: graphs in decimals, every FL-60 variant in fl60.
    old = {config_key(cfg): made_up(cfg, 0.5, graph=graph), config_key(fl60): made_up(fl60, 0.25)}
    with open(cache.records / "digits.jsonl", "a") as f:
        f.write(json.dumps({"key": config_key(cfg), **old[config_key(cfg)]}) + "\n")
    (cache.records / "fl60.jsonl").write_text(
        json.dumps({"key": config_key(fl60), **old[config_key(fl60)]}) + "\n")
    before = [RecordCache(cache.records, "c").load(c) for c in (cfg, twin, fl60)]
    assert before[0] == old[config_key(cfg)]
    assert cache.fold() == sorted([config_key(cfg), config_key(fl60)])
    assert sorted(p.name for p in cache.records.iterdir()) == ["digits.jsonl",
                                                                "fl60-grda-file.jsonl"]
    lines = (cache.records / "digits.jsonl").read_text().splitlines()
    assert [_line_key(t) for t in lines] == sorted([config_key(cfg), config_key(twin)])
    assert any('"zlib_base64"' in t for t in lines)
    fresh = RecordCache(cache.records, "c")
    assert [fresh.load(c) for c in (cfg, twin, fl60)] == before
    assert fresh.fold() == []


def test_records_of_another_checkout_are_taken_where_this_one_lacks_them(tmp_path):
    a, b = configs(seed=0)[0], configs(seed=1)[0]
    c = configs(seed=2)[0]
    home = RecordCache(tmp_path / "home", tmp_path / "ckpt")
    away = RecordCache(tmp_path / "away", tmp_path / "ckpt")
    home._store(a, made_up(a, 0.25))
    away._store(a, made_up(a, 0.75))  # both hold a: home keeps its own
    away._store(b, made_up(b, 0.5))
    legacy(away, config_key(c), made_up(c, 0.125))  # the earlier format, as a pinned tree writes
    assert home.take(away.records) == sorted([config_key(b), config_key(c)])
    fresh = RecordCache(home.records, "c")
    assert [fresh.load(x)["summary"]["test"] for x in (a, b, c)] == [0.25, 0.5, 0.125]
    assert sorted(p.name for p in home.records.iterdir()) == ["digits.jsonl"]
    assert home.take(away.records) == []  # again: nothing to take
    with pytest.raises(ValueError, match="is not a folder of records"):
        home.take(tmp_path / "nowhere")


def test_a_file_that_is_not_a_record_stops_the_fold_with_its_name(tmp_path):
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    cache.records.mkdir()
    (cache.records / "broken.json").write_text('{"config": ')
    with pytest.raises(ValueError, match=r"broken.json is not a record"):
        cache.fold()
    assert (cache.records / "broken.json").exists()


def test_a_cache_object_sees_a_table_another_one_rewrote(tmp_path):
    a, b = configs(seed=0)[0], configs(seed=1)[0]
    reader = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    writer = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    assert reader.load(a) is None
    writer._store(a, made_up(a, 0.25))
    assert reader.load(a)["summary"] == {"test": 0.25}
    writer._store(b, made_up(b, 0.5))
    writer._store(a, made_up(a, 0.75))  # the same key rewritten
    assert reader.load(a)["summary"] == {"test": 0.75}
    assert reader.load(b)["summary"] == {"test": 0.5}
    (tmp_path / "records" / "digits.jsonl").unlink()
    assert reader.load(a) is None


def _write_many(folder: str, seed: int, start) -> None:
    r"""One process's share of the concurrent writers: 12 records of its own."""
    start.wait()
    cache = RecordCache(folder, folder + "-ckpt")
    for clients in range(2, 14):
        cfg = ExperimentConfig(dataset="digits", strategy="fedavg", clients=clients, seed=seed)
        cache._store(cfg, made_up(cfg, clients / 100))


def test_two_processes_writing_one_table_lose_no_record(tmp_path):
    import multiprocessing

    context = multiprocessing.get_context("fork" if "fork" in
                                          multiprocessing.get_all_start_methods() else "spawn")
    start = context.Barrier(2)
    workers = [context.Process(target=_write_many, args=(str(tmp_path / "records"), seed, start))
               for seed in (0, 1)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    lines = (tmp_path / "records" / "digits.jsonl").read_text().splitlines()
    assert len(lines) == 24
    cache = RecordCache(tmp_path / "records", tmp_path / "ckpt")
    for seed in (0, 1):
        for clients in range(2, 14):
            cfg = ExperimentConfig(dataset="digits", strategy="fedavg", clients=clients,
                                   seed=seed)
            assert cache.load(cfg) == made_up(cfg, clients / 100)


def test_the_hypernetwork_trace_reads_panaceas_clients_each_evaluated_round():
    from pyg_fedgraph.experiment import build_simulator
    from pyg_fedgraph.experiment.records import HypernetworkTrace

    cfg = ExperimentConfig(dataset="fl60", strategy="panacea", rounds=3, clients=12,
                           novel_clients=0.25, overrides={"steps": 2, "eval_every": 2})
    trace = HypernetworkTrace()
    sim = build_simulator(cfg, callbacks=[trace])
    sim.run()
    state = trace.state_dict()
    assert state["rounds"] == [2, 3]                    # the evaluated rounds only
    assert bool(sim.strategy.hypernetwork.held_out.any())
    assert all(len(state[k]) == len(state["rounds"]) for k in HypernetworkTrace.FIELDS)
    # The last evaluation, recomputed another way: the encoder's outputs over the prior
    # graph, and the models the strategy hands its clients (held-out ones included).
    strategy = sim.strategy
    with torch.no_grad():
        z = strategy.hypernetwork.embed(strategy.ctx.edge_index, strategy.ctx.edge_weight)
        theta = strategy.personalized_params(torch.arange(sim.dataset.num_clients))
    norms = z.norm(dim=1)
    assert state["embedding_norm_max"][-1] == pytest.approx(float(norms.max()), abs=1e-5)
    assert state["embedding_norm_mean"][-1] == pytest.approx(float(norms.mean()), abs=1e-5)
    assert state["model_norm_mean"][-1] == pytest.approx(float(theta.norm(dim=1).mean()),
                                                         abs=1e-4)
    spread = sum(float((t - theta.mean(dim=0)).norm()) for t in theta) / len(theta)
    assert state["model_spread"][-1] == pytest.approx(spread, abs=1e-4) and spread > 0
    resumed = HypernetworkTrace()
    resumed.load_state_dict(json.loads(json.dumps(state)))   # as a checkpoint keeps it
    assert resumed.state_dict() == state
    fedavg = build_simulator(dataclasses.replace(cfg, strategy="fedavg", rounds=1))
    with pytest.raises(TypeError, match="reads a GCNHypernetwork .*FedAvg has NoneType"):
        HypernetworkTrace()(fedavg, sim.history.records[-1])
    # A diverged hypernetwork: its figures are kept as None (JSON has no NaN), not NaN.
    with torch.no_grad():
        strategy.hypernetwork.embedding.fill_(float("nan"))
    diverged = HypernetworkTrace()
    diverged(sim, sim.history.records[-1])
    assert diverged.state_dict()["model_spread"] == [None]
    json.dumps(diverged.state_dict(), allow_nan=False)
    strategy.ctx = dataclasses.replace(strategy.ctx, edge_index=None, edge_weight=None)
    with pytest.raises(ValueError, match="GCN encoder needs the federation's prior client"):
        HypernetworkTrace()(sim, sim.history.records[-1])


def test_the_per_client_trace_counts_the_rounds_that_reach_each_embedding():
    from pyg_fedgraph.engine import Rejection
    from pyg_fedgraph.experiment import build_simulator
    from pyg_fedgraph.experiment.records import HypernetworkTrace

    cfg = ExperimentConfig(dataset="fl60", strategy="panacea", rounds=3, clients=12,
                           overrides={"steps": 2, "eval_every": 2,
                                      "num_gnn_layers": 2})
    trace = HypernetworkTrace(per_client=True)
    sim = build_simulator(cfg, callbacks=[trace])
    n = sim.dataset.num_clients
    # A directed path 0 -> 1 -> ... -> 11 as the prior graph: client i's loss reaches the
    # embeddings of i, i - 1 and i - 2 through 2 GCN layers (not those of i + 1, i + 2).
    path = torch.arange(n)
    sim.engine.ctx.edge_index = torch.stack([path[:-1], path[1:]])
    sim.engine.ctx.edge_weight = None
    first = sim.engine.sample(1).tolist()
    # A rejected upload (made up) does not reach anything through its client.
    sim.engine.rejections.append(Rejection(1, first[0], "made up"))
    sim.run(2)
    resumed = HypernetworkTrace(per_client=True)
    resumed.load_state_dict(json.loads(json.dumps(trace.state_dict())))
    sim.callbacks.append(resumed)
    sim.run()
    state = trace.state_dict()
    assert resumed.state_dict() == state            # a resumed trace goes on counting
    assert state["rounds"] == [2, 3]
    clients = state["clients"]
    assert all(len(clients[k]) == 2 and all(len(row) == n for row in clients[k])
               for k in HypernetworkTrace.CLIENT_FIELDS)
    # The reach by hand: (I + A)^L with A[i, j] = 1 for an edge j -> i.
    edge_index = sim.engine.ctx.edge_index.cpu()
    a = torch.eye(n)
    a[edge_index[1], edge_index[0]] = 1.0
    hops = torch.linalg.matrix_power(a, 2)
    counts, expected = torch.zeros(n), []
    for rnd in (1, 2, 3):
        sampled = [c for c in sim.engine.sample(rnd).tolist()
                   if (rnd, c) != (1, first[0])]
        counts += (hops[sampled].sum(dim=0) > 0).float()
        if rnd in (2, 3):
            expected.append(counts.tolist())
    assert clients["reached"] == expected
    assert len(set(expected[-1])) > 1 and set(expected[-1]) <= {0.0, 1.0, 2.0, 3.0}
    # The per-client columns against the summary figures and the strategy.
    last = {k: torch.tensor(v[-1]) for k, v in clients.items()}
    assert float(last["model_distance"].mean()) == pytest.approx(state["model_spread"][-1],
                                                                 abs=1e-3)
    assert float(last["embedding_norm"].max()) == pytest.approx(
        state["embedding_norm_max"][-1], abs=1e-3)
    hn = sim.strategy.hypernetwork
    assert torch.allclose(last["input_norm"], hn.embedding.detach().norm(dim=1), atol=1e-4)
    assert torch.allclose(last["val"], sim.history.records[-1].val[sim.history.metric],
                          atol=1e-4)
    assert "clients" not in HypernetworkTrace().state_dict()
    with pytest.raises(ValueError, match="state of a trace without per-client values"):
        HypernetworkTrace(per_client=True).load_state_dict(HypernetworkTrace().state_dict())
    # The direction, checked by autograd rather than by hand: the generated models of round
    # 3's clients have a gradient only on the embeddings the trace counts as reached.
    hn.zero_grad()
    sampled = sim.replied_clients(3)
    hn(sim.engine.ctx.edge_index, clients=sampled).sum().backward()
    touched = (hn.embedding.grad != 0).any(dim=1)
    counted = torch.tensor(expected[-1]) > torch.tensor(expected[0])  # reached in round 3
    assert torch.equal(touched, counted) and bool(touched[sampled].all())


def test_replied_clients_are_the_sample_less_the_dropped_ones():
    from pyg_fedgraph.experiment import build_simulator

    seen: dict[int, list[int]] = {}
    cfg = ExperimentConfig(dataset="digits", strategy="fedavg", clients=8, rounds=6,
                           dropout=0.5, overrides={"steps": 1, "sample_fraction": 0.5})
    sim = build_simulator(cfg)
    aggregate = sim.strategy.aggregate_train

    def spy(rnd, graph):
        seen[rnd] = graph.client_id.tolist()
        aggregate(rnd, graph)
    sim.strategy.aggregate_train = spy
    sim.run()
    replied = {r: sim.replied_clients(r).tolist() for r in range(1, 7)}
    assert seen == {r: c for r, c in replied.items() if c}
    assert any(len(c) < len(sim.engine.sample(r)) for r, c in replied.items())


def test_the_novel_client_probe_against_the_run_and_by_hand():
    from pyg_fedgraph.experiment import build_simulator
    from pyg_fedgraph.experiment.records import NovelClientProbe

    cfg = ExperimentConfig(dataset="fl60", strategy="panacea", rounds=4, clients=10,
                           novel_clients=0.2, overrides={"steps": 2, "eval_every": 1})
    probe = NovelClientProbe("loss")  # continuous, unlike the primary metric (accuracy)
    sim = build_simulator(cfg, callbacks=[probe])
    sim.run(2)
    resumed = NovelClientProbe("loss")
    resumed.load_state_dict(json.loads(json.dumps(probe.state_dict())))
    sim.callbacks.append(resumed)
    sim.run()
    state = probe.state_dict()
    assert resumed.state_dict() == state                     # a resumed probe goes on
    json.dumps(state, allow_nan=False)
    held, trained = sim.held_out.tolist(), state["trained"]
    assert state["held_out"] == held and len(held) == 2
    assert sorted(held + trained) == list(range(10)) and state["rounds"] == [1, 2, 3, 4]
    metric = "loss"
    # "own" is what the run's novel-client history reports, round by round.
    for k, record in enumerate(sim.novel_history.records):
        for split, values in (("val", record.val), ("test", record.test)):
            assert getattr(probe, split)["own"][k] == pytest.approx(
                values[metric][held].tolist(), abs=1e-5)
    # "mean" by hand: the trained clients' generated models averaged, evaluated on each.
    params, buffers = sim.personalized_models()
    mean = params[trained].mean(dim=0, keepdim=True).expand(len(held), -1)
    by_hand = sim.trainer.evaluate(torch.tensor(held), mean, buffers[held], "test")[metric]
    assert state["test"]["mean"][-1] == pytest.approx(by_hand.tolist(), abs=1e-5)
    # The strongest neighbours, from the prior graph by hand.
    ctx = sim.engine.ctx
    adj = torch.zeros(10, 10)
    w = torch.ones(ctx.edge_index.size(1)) if ctx.edge_weight is None else ctx.edge_weight
    adj.index_put_(tuple(ctx.edge_index.cpu()), w.cpu().float(), accumulate=True)
    for i, j in zip(held, state["neighbours"], strict=True):
        column = (adj + adj.t())[trained, i]
        assert j == (trained[int(column.argmax())] if bool((column > 0).any()) else None)
    # The cross table is that of the best round, and its rows agree with "neighbour".
    cross = state["cross"]
    assert cross["round"] == sim.history.records[sim.history.best_index].round
    at = state["rounds"].index(cross["round"])
    assert len(cross["test"]) == len(trained) and all(len(r) == 2 for r in cross["test"])
    for i, j in enumerate(state["neighbours"]):
        if j is not None:
            assert cross["val"][trained.index(j)][i] == pytest.approx(
                state["val"]["neighbour"][at][i], abs=1e-5)
    assert state["metric"] == "loss"
    with pytest.raises(ValueError, match="keeps 'accuracy'; the state given keeps 'loss'"):
        NovelClientProbe("accuracy").load_state_dict(state)
    with pytest.raises(ValueError, match="needs a run with held-out clients"):
        NovelClientProbe()(build_simulator(dataclasses.replace(cfg, novel_clients=0.0)),
                           sim.history.records[-1])


def test_the_strongest_neighbour_by_hand():
    from pyg_fedgraph.experiment.records import NovelClientProbe

    # 0 -> 1 (0.2), 2 -> 0 (0.5), 0 -> 3 (0.4), 3 -> 0 (0.4): for 0, client 3 (0.8) beats 2.
    edge_index = torch.tensor([[0, 2, 0, 3], [1, 0, 3, 0]])
    weight = torch.tensor([0.2, 0.5, 0.4, 0.4])
    pick = NovelClientProbe.strongest_neighbours
    assert pick(edge_index, weight, [0, 4], [1, 2, 3], 5) == [3, None]
    assert pick(edge_index, None, [0], [1, 2], 5) == [1]    # weight 1 each: the lowest index
    assert pick(None, None, [0, 4], [1, 2, 3], 5) == [None, None]


def test_the_novel_client_probe_keeps_each_models_buffers_and_the_runs_random_streams():
    from pyg_fedgraph.experiment import build_simulator
    from pyg_fedgraph.experiment.records import NovelClientProbe

    # FedAvg-FT fine-tunes every client's model to evaluate it (BatchNorm statistics of
    # their own); the probe reads the models each evaluation made.
    cfg = ExperimentConfig(dataset="digits", strategy="fedavg-ft", model="cnn-bn", clients=6,
                           rounds=4, novel_clients=0.34,
                           overrides={"steps": 3, "eval_every": 1})
    probe = NovelClientProbe("loss")
    sim = build_simulator(cfg, callbacks=[probe])
    sim.run()
    held, trained = torch.tensor(probe.held_out), torch.tensor(probe.trained)
    best = sim.history.records[sim.history.best_index].round
    assert probe.cross["round"] == best == 4 > probe.rounds[0]   # refreshed at a later best
    params, buffers = sim.personalized_models()                  # those of round 4 again
    assert sim.local_buffers.size(1) > 0 and not torch.equal(buffers[trained[0]],
                                                             buffers[trained[1]])
    for k, j in enumerate(trained.tolist()):
        rows = held
        by_hand = sim.trainer.evaluate(rows, params[j].expand(len(rows), -1),
                                       buffers[j].expand(len(rows), -1), "test")["loss"]
        assert probe.cross["test"][k] == pytest.approx(by_hand.tolist(), abs=1e-5)
    mean = sim.trainer.evaluate(held, params[trained].mean(0).expand(len(held), -1),
                                buffers[trained].mean(0).expand(len(held), -1), "val")["loss"]
    assert probe.val["mean"][-1] == pytest.approx(mean.tolist(), abs=1e-5)
    # A model with dropout, whose fine-tuning at evaluation draws masks from the global
    # stream: the probed run trains as the unprobed one. (Each built and run in turn:
    # building a simulator seeds that stream.)
    cfg = dataclasses.replace(cfg, model="mlp",
                              overrides={**cfg.overrides, "model.dropout": 0.5})
    probed = build_simulator(cfg, callbacks=[NovelClientProbe()])
    probed.run()
    plain = build_simulator(cfg)
    plain.run()
    assert probed.history == plain.history
    assert torch.equal(probed.local_params, plain.local_params)


def test_the_fine_tune_sweep_is_fedavg_ft_at_each_step_count():
    from pyg_fedgraph.experiment import build_simulator
    from pyg_fedgraph.experiment.records import FineTuneSweep

    # FedAvg's run with the sweep: 0 steps is FedAvg's last evaluation, the run's own
    # 3 local steps FedAvg-FT's (the same training, the same fine-tuning batches).
    cfg = ExperimentConfig(dataset="digits", strategy="fedavg", clients=6, rounds=3,
                           overrides={"steps": 3, "eval_every": 1})
    sweep = FineTuneSweep([0, 3, 12], "loss")
    sim = build_simulator(cfg, callbacks=[sweep])
    sim.run(2)
    assert sweep.round is None and sweep.val == []            # only at the last round
    resumed = FineTuneSweep([0, 3, 12], "loss")
    resumed.load_state_dict(json.loads(json.dumps(sweep.state_dict())))
    sim.callbacks = [resumed]
    sim.run()
    ft = build_simulator(dataclasses.replace(cfg, strategy="fedavg-ft"))
    ft.run()
    last, ft_last = sim.history.records[-1], ft.history.records[-1]
    state = resumed.state_dict()
    json.dumps(state, allow_nan=False)
    assert state["round"] == 3 and state["steps"] == [0, 3, 12] and state["metric"] == "loss"
    for row, split in ((state["val"], "val"), (state["test"], "test")):
        assert row[0] == pytest.approx(getattr(last, split)["loss"].tolist(), abs=1e-6)
        assert row[1] == pytest.approx(getattr(ft_last, split)["loss"].tolist(), abs=1e-6)
        assert row[2] != pytest.approx(row[1], abs=1e-6)      # more steps, other models
    # finetuned_models(None) is the model FedAvg-FT sends before fine-tuning: the global one.
    params, _ = ft.finetuned_models(None)
    assert torch.equal(params, ft.strategy.global_params.expand_as(params))
    with pytest.raises(ValueError, match="tries steps \\[0, 3\\]; the state given tried"):
        FineTuneSweep([0, 3]).load_state_dict(state)
    with pytest.raises(ValueError, match="keeps 'accuracy'; the state given keeps 'loss'"):
        FineTuneSweep([0, 3, 12], "accuracy").load_state_dict(state)
    for bad in ([], [3, 3], [-1]):
        with pytest.raises(ValueError, match="steps must be distinct step counts"):
            FineTuneSweep(bad)


def test_the_fine_tune_sweep_tries_each_rate():
    from pyg_fedgraph.experiment import build_simulator
    from pyg_fedgraph.experiment.records import FineTuneSweep

    # Plain SGD at rate 0.05: the run's own settings (None) and the rate 0.05 given are the
    # same fine-tuning; a rate of 1e-12 leaves the model as it is (the k = 0 row); 0.5
    # fine-tunes other models.
    cfg = ExperimentConfig(dataset="digits", strategy="fedavg", clients=6, rounds=2,
                           overrides={"steps": 3, "lr": 0.05, "momentum": 0.0})
    sweep = FineTuneSweep([0, 4], "loss", lrs=[None, 0.05, 1e-12, 0.5])
    assert sweep.rows == [(None, 0), (None, 4), (0.05, 0), (0.05, 4), (1e-12, 0), (1e-12, 4),
                          (0.5, 0), (0.5, 4)]
    sim = build_simulator(cfg, callbacks=[sweep])
    sim.run()
    state = json.loads(json.dumps(sweep.state_dict(), allow_nan=False))
    assert state["lrs"] == [None, 0.05, 1e-12, 0.5] and len(state["val"]) == 8
    last = sim.history.records[-1]
    for split in ("val", "test"):
        by = dict(zip(sweep.rows, state[split], strict=True))
        assert by[(None, 0)] == pytest.approx(getattr(last, split)["loss"].tolist(), abs=1e-6)
        assert all(by[(lr, 0)] == by[(None, 0)] for lr in sweep.lrs)
        assert by[(0.05, 4)] == pytest.approx(by[(None, 4)], abs=1e-6)
        assert by[(1e-12, 4)] == pytest.approx(by[(None, 0)], abs=1e-6)
        assert by[(None, 4)] != pytest.approx(by[(None, 0)], abs=1e-4)
        assert by[(0.5, 4)] != pytest.approx(by[(None, 4)], abs=1e-4)
    # A state of the rates given; one from before rates were swept is the run's own rate's.
    FineTuneSweep([0, 4], lrs=[None, 0.05, 1e-12, 0.5]).load_state_dict(state)
    old = {k: v for k, v in state.items() if k != "lrs"}
    FineTuneSweep([0, 4]).load_state_dict(old)
    with pytest.raises(ValueError, match="tries rates \\[0.05\\]; the state given tried \\[None"):
        FineTuneSweep([0, 4], lrs=[0.05]).load_state_dict(old)
    import numpy as np

    assert FineTuneSweep([0], lrs=[np.float32(0.5), None]).lrs == [0.5, None]  # JSON's floats
    for bad in ([], [0.1, 0.1], [0.0], [-1.0], [float("nan")], [True]):
        with pytest.raises(ValueError, match="lrs must be distinct positive rates or None"):
            FineTuneSweep([0], lrs=bad)


def test_the_fine_tune_sweep_leaves_the_run_as_it_was():
    from pyg_fedgraph.experiment import build_simulator
    from pyg_fedgraph.experiment.records import FineTuneSweep

    # Dropout masks come from the global stream, which fine-tuning draws from; a run whose
    # last round is not the end (run(2) of 3) goes on as an unswept one.
    cfg = ExperimentConfig(dataset="digits", strategy="fedavg", model="mlp", clients=6,
                           rounds=3, overrides={"steps": 2, "eval_every": 1,
                                                "model.dropout": 0.5})
    swept = build_simulator(dataclasses.replace(cfg, rounds=2), callbacks=[FineTuneSweep([5])])
    swept.run()
    swept.rounds = 3
    swept.run()
    plain = build_simulator(cfg)
    plain.run()
    assert swept.history == plain.history
    assert torch.equal(swept.local_params, plain.local_params)
