"""Sections P and Q of benchmarks/reproduce/claims.py (FedCEDAR's Figure 3 and FedAGHN's
Table 9 on Fashion-MNIST, issue 36 items 3 and 4): their configurations, rows, figure
lines and pending runs, rebuilt from study records written by hand without training."""
from __future__ import annotations

from test_benchmark_runs import block, no_training, write_study


def rand_index_study(claims, runs, k: int, ri: list[float], ari: list[float]) -> None:
    cfg = claims.fedcedar_fmnist_config(k)
    write_study(runs, cfg, "rand-index", {
        "rand_index": ri, "adjusted_rand_index": ari,
        "scored_rounds": list(range(1, len(ri) + 1)), "num_clustered": [6 * k] * len(ri),
        "test_accuracy": [0.5] * len(ri), "cpu_seconds": 60.0 * k, "torch": "9.1+cpu",
        "device": "cpu", "summary": {"test": 0.81, "test_per_client_best": 0.84}})


def test_fedcedar_fmnist_configs_follow_the_papers_protocol(claims):
    cfg = claims.fedcedar_fmnist_config(4)
    assert (cfg.dataset, cfg.strategy, cfg.clients, cfg.rounds) == ("topology", "fedcedar",
                                                                   80, 40)
    over = cfg.overrides
    assert over["data.base"] == "fashion-mnist" and over["data.num_groups"] == 4
    assert over["num_clusters"] == 4 and over["model"] == "cnn" and over["data.image"]
    paper = claims.FEDCEDAR_FIG3["protocol"]
    # The paper's settings, reduced only in rounds.
    assert (over["sample_fraction"], over["lr"], over["batch_size"], over["epochs"],
            over["num_steps"]) == (paper["active_ratio"], paper["lr"], paper["batch_size"],
                                   paper["local_epochs"], paper["propagation_steps"])
    assert cfg.clients == 4 * paper["clients_per_node"] and cfg.rounds < paper["rounds"]


def test_fedcedar_fmnist_section_from_study_records_by_hand(claims, runs, monkeypatch):
    no_training(monkeypatch)
    rounds = claims.FEDCEDAR_FMNIST_ROUNDS
    # K = 3: 0.6 at round 1, 0.8 at round 2, then 1.0; the last round 0.92.
    ri3 = [0.6, 0.8] + [1.0] * (rounds - 3) + [0.92]
    rand_index_study(claims, runs, 3, ri3, [v - 0.5 for v in ri3])
    # K = 4: 1.0 every round but round 5 (0.72).
    ri4 = [1.0] * rounds
    ri4[4] = 0.72
    rand_index_study(claims, runs, 4, ri4, [1.0] * rounds)
    text = "\n".join(claims.fedcedar_fmnist_section(run_missing=False))
    # K = 3: mean (0.6 + 0.8 + 37 + 0.92) / 40 = 0.983, ARI 0.483; last 10: 9.92 / 10.
    assert (f"| 3 | 60 | 3 | 37 of {rounds} | 0.60 (1) | 0.983 / 0.483 | 0.992 | "
            "81.0 / 84.0 |") in text
    # K = 4: mean (39 + 0.72) / 40 = 0.993.
    assert f"| 4 | 80 | 1 | 39 of {rounds} | 0.72 (5) | 0.993 / 1.000 | 1.000 |" in text
    assert "| 5 | 100 | pending | - | - | - | - | - |" in text
    assert "| 3 | Rand index | 0.60 0.80 1.00 " in text and "| 3 | ARI | 0.10 0.30 0.50 " in text
    assert "- Figure 3 against ours: lowest Rand index at K = 3: 0.60 (paper 0.73)." in text
    assert "paper's order" not in text  # K = 5 is missing
    assert "CPU time of the runs: 3.0, 4.0 minutes." in text
    assert "Records made with torch 9.1+cpu on cpu (2 runs)" not in text  # one release
    assert "Records made with torch 9.1+cpu on cpu." in text
    assert ("| fedcedar, Fashion-MNIST, K = 5 | not started | `python benchmarks/reproduce/"
            "claims.py --no-write --only fedcedar-fmnist` |") in text
    # With K = 5 below K = 4 but above K = 3, the paper's order does not hold.
    claims.PENDING.clear()
    rand_index_study(claims, runs, 5, [0.985] * rounds, [0.9] * rounds)
    text = "\n".join(claims.fedcedar_fmnist_section(run_missing=False))
    assert ("- Mean Rand index over the rounds, K = 3 / 4 / 5: 0.983 / 0.993 / 0.985; the "
            "paper's order (K = 3 highest, K = 5 lowest): does not hold.") in text
    claims.PENDING.clear()
    rand_index_study(claims, runs, 4, [0.99] * rounds, [0.9] * rounds)
    text = "\n".join(claims.fedcedar_fmnist_section(run_missing=False))
    assert "0.983 / 0.990 / 0.985; the paper's order (K = 3 highest, K = 5 lowest): does not " \
        "hold." in text
    rand_index_study(claims, runs, 3, [0.995] * rounds, [0.9] * rounds)
    text = "\n".join(claims.fedcedar_fmnist_section(run_missing=False))
    assert "0.995 / 0.990 / 0.985; the paper's order (K = 3 highest, K = 5 lowest): holds." \
        in text
    assert "Not yet run" not in text


def relation_study(claims, runs, cfg, rounds: int, layers: int = 3) -> None:
    # Round r: Self 0.05, Similar 0.2 + r / 100, Other r / 100; layer l at every
    # round: Similar 0.1 * (l + 1), Other 0.05.
    write_study(runs, cfg, "relation-weights", {
        "relation_weights": [[0.05, 0.2 + r / 100, r / 100] for r in range(1, rounds + 1)],
        "layer_relation_weights": [[[0.05, 0.1 * (layer + 1), 0.05] for layer in range(layers)]
                                   for _ in range(rounds)],
        "self_weight": {"mean": 0.1, "at_zero": 1, "count": 20 * layers},
        "summary": {"test": 0.7, "test_per_client_best": 0.75}, "torch": "9.1+cpu",
        "device": "cpu", "cpu_seconds": 900.0})


def test_fedaghn_fmnist_section_from_study_records_by_hand(claims, runs, monkeypatch):
    no_training(monkeypatch)
    rounds = claims.FEDAGHN_FMNIST_ROUNDS
    cfg = claims.fedaghn_fmnist_config("code")
    assert (cfg.dataset, cfg.partition, cfg.clients) == ("fashion-mnist", "group", 20)
    assert (cfg.overrides["epochs"], cfg.overrides["batch_size"], cfg.overrides["lr"]) == (
        claims.FEDAGHN_CASE["local_epochs"], claims.FEDAGHN_CASE["batch_size"],
        claims.FEDAGHN_CASE["lr"])
    relation_study(claims, runs, cfg, rounds)
    # Section D's digits run of the same sign, 20 rounds: its column at the same rounds.
    relation_study(claims, runs, claims.fedaghn_config(20, 20, "code"), 20)
    text = "\n".join(claims.fedaghn_fmnist_section(run_missing=False))
    # The paper's rows: Table 9 and Table 10's whole model, 0.1436 / 0.0338 = 4.25.
    assert "| paper, Table 9 | final | 0.0126 | 0.0733 | 0.0480 | 1.53 | - |" in text
    assert "| paper, Table 10 | first | 0.0291 | 0.1436 | 0.0338 | 4.25 | - |" in text
    # Rounds 2, 8 and 15: 0.22 / 0.02, 0.28 / 0.08, 0.35 / 0.15; digits the same rounds.
    assert "| code | 2 | 0.0500 | 0.2200 | 0.0200 | 11.00 | 11.00 |" in text
    assert "| code | 8 | 0.0500 | 0.2800 | 0.0800 | 3.50 | 3.50 |" in text
    assert f"| code | {rounds} | 0.0500 | 0.3500 | 0.1500 | 2.33 | 2.33 |" in text
    assert "| pfedhn | - | pending | pending | pending | - | - |" in text
    # Layers: 0.1 / 0.05, 0.2 / 0.05, 0.3 / 0.05; the paper's final shallow 0.0586 / 0.0505,
    # deep 0.0880 / 0.0454.
    assert (f"Similar / Other per layer at round {rounds} (first layer to last): `code` "
            "2.00, 4.00, 6.00; paper, final round: shallow layers 1.16, deep layers 1.94."
            ) in text
    assert ("`code`: test 70.0 (best-round) / 75.0 (per-client-best), final mean q 0.100 "
            "(1 of 60 at the threshold 0)") in text
    assert (f"- Table 9 against ours: Similar / Other at round {rounds}: code 2.33; paper "
            "1.53 (final round of 200).") in text
    assert "CPU time of the runs: 15.0 minutes." in text
    assert ("| fedaghn, Fashion-MNIST, hn_rule=pfedhn | not started | `python benchmarks/"
            "reproduce/claims.py --no-write --only fedaghn-fmnist` |") in text


def test_sections_p_and_q_rebuild_without_training_and_keep_their_reading(claims, runs,
                                                                          monkeypatch, tmp_path,
                                                                          run_main):
    no_training(monkeypatch)
    rounds = claims.FEDCEDAR_FMNIST_ROUNDS
    for k in (3, 4, 5):
        rand_index_study(claims, runs, k, [1.0] * rounds, [1.0] * rounds)
    out = tmp_path / "claims.md"
    heading = "## P. FedCEDAR Figure 3 on Fashion-MNIST: Rand index over rounds"
    out.write_text(f"# Paper claims\n\n## A. Kept as it is\n\nold A\n\n{heading}\n\n"
                   "old table\n\n### Reading\n\nWritten by hand.\n")
    run_main(claims, ["--cached-only", "--update", "--only", "fedcedar-fmnist,fedaghn-fmnist",
                      "--out", str(out)])
    text = out.read_text()
    assert "old A" in text and "old table" not in text
    p, q = block(text, "P"), block(text, "Q")
    assert "| 5 | 100 | 1 | 40 of 40 | 1.00 (1) | 1.000 / 1.000 | 1.000 |" in p
    assert "### Reading\n\nWritten by hand." in p and "Not yet run" not in p
    assert "1.000 / 1.000 / 1.000; the paper's order (K = 3 highest, K = 5 lowest): all " \
        "equal, so not seen." in p
    assert "Not yet run (2 runs;" in q
    assert "This command rebuilt section(s) P, Q" in text
    assert not runs.checkpoints.exists()
