r"""FedAGHN's group case study (paper Sec. 6.1-6.3, Tables 9 and 10) on digits.

Clients are split into 5 groups; 80% of the data is dealt by class group
(group g owns classes 2g and 2g + 1), the remaining 20% IID to everyone
(``partition="group"``). Every round FedAGHN computes layer-wise collaboration
weights alpha (L, N, N). For each client i we average

* Self:    alpha_ii,
* Similar: alpha_ij over the other clients j of i's group,
* Other:   alpha_ij over the clients of the other groups,

then average over clients, as in the paper's Table 9 (FedAGHN on CIFAR-10
with 20 clients: Self 0.0126, Similar 0.0733, Other 0.0480). Round 1 has no
update yet, so its weights are uniform; "first" below is round 2, the first
round with weights computed from updates.

The setting is ``configs/fedaghn_group_case_study.yaml`` (the same file
``benchmarks/reproduce/claims.py`` reads); options given here win over it.

Runs in about a minute on a CPU:
    python examples/fedaghn_group_case_study.py [--clients 20] [--rounds 20] [--quick]
"""
import argparse
from pathlib import Path

from pyg_fedgraph.experiment.files import load_config  # torch-free: --help reads the file

SETTING = load_config(Path(__file__).resolve().parents[1] / "configs"
                      / "fedaghn_group_case_study.yaml")


def build_parser() -> argparse.ArgumentParser:
    r"""The example's options, defaults from :data:`SETTING` (argparse only:
    ``--help`` needs no torch)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=SETTING["clients"])
    parser.add_argument("--rounds", type=int, default=SETTING["rounds"])
    parser.add_argument("--sharpness", type=float,
                        default=SETTING["set"]["sharpness"])
    parser.add_argument("--self-weight", type=float,
                        default=SETTING["set"]["self_weight"])
    parser.add_argument("--hn-momentum", type=float,
                        default=SETTING["set"]["hn_momentum"])
    parser.add_argument("--hn-rule", choices=("pfedhn", "code"), default="pfedhn",
                        help="sign of the hypernetwork step: pFedHN's (default) or the "
                             "authors' released code's (opposite)")
    parser.add_argument("--seed", type=int, default=SETTING["seed"])
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 10 clients, 3 rounds (a few seconds)")
    return parser


if __name__ == "__main__":  # --help and bad options answer before torch is imported
    build_parser().parse_args()


from pyg_fedgraph.experiment import ExperimentConfig, build_simulator  # noqa: E402
from pyg_fedgraph.utils import relation_weights  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.clients, args.rounds = 10, 3

    cfg = ExperimentConfig(dataset=SETTING["dataset"], strategy="fedaghn",
                           partition=SETTING["partition"],
                           clients=args.clients, rounds=args.rounds, seed=args.seed,
                           overrides={"sharpness": args.sharpness,
                                      "self_weight": args.self_weight,
                                      "hn_momentum": args.hn_momentum,
                                      "hn_rule": args.hn_rule,
                                      "eval_every": args.rounds})
    sim = build_simulator(cfg)
    group = sim.dataset.client_labels
    strategy = sim.strategy

    per_round = []
    for _ in range(args.rounds):
        sim.step()
        per_round.append(strategy.layer_graphs().cpu())  # weights used this round (L, N, N)

    stages = {"first": 2, "middle": (args.rounds + 2) // 2, "final": args.rounds}
    names = strategy.ctx.layout.layer_names
    views = {"whole model": lambda a: a.mean(0), f"first layer ({names[0]})": lambda a: a[0],
             f"last layer ({names[-1]})": lambda a: a[-1]}
    print(f"FedAGHN on digits, {args.clients} clients in {int(group.max()) + 1} groups, "
          f"p={args.sharpness}, q={args.self_weight}, hn momentum {args.hn_momentum}, "
          f"hn rule {args.hn_rule}, "
          f"{args.rounds} rounds; "
          f"final test accuracy {sim.summary()['test_final']:.4f}")
    print(f"uniform weight 1/N = {1 / args.clients:.4f}")
    print()
    print("| layers | round | Self | Similar | Other |")
    print("|---|---|---|---|---|")
    for view, pick in views.items():
        for stage, rnd in stages.items():
            s, sim_w, oth = relation_weights(pick(per_round[rnd - 1]), group)
            print(f"| {view} | {stage} ({rnd}) | {s:.4f} | {sim_w:.4f} | {oth:.4f} |")
    p = strategy.conv.sharpness.detach()
    q = strategy.conv.self_weight.detach()
    print()
    print(f"after training: mean p per layer {[round(v, 4) for v in p.mean(0).tolist()]}, "
          f"mean q per layer {[round(v, 4) for v in q.mean(0).tolist()]}")


if __name__ == "__main__":
    main()
