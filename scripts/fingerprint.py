"""Fingerprints of every registered strategy's run, to show that a refactoring
changes no computation: 3 rounds on FL-60 and on digits, each strategy's
per-round history (mean validation / test metric, training loss, per-client
values) and its final personalized models, saved with ``torch.save``.

    python scripts/fingerprint.py OUT.pt            # this tree
    PYTHONPATH=OLD_TREE python OLD_TREE/scripts/fingerprint.py OLD.pt   # another tree
    python scripts/fingerprint.py --compare OLD.pt NEW.pt [--atol 0]

Run with ``OMP_NUM_THREADS=1``. ``--compare`` prints, per run, whether the two
files agree bit for bit (or within ``--atol``) and exits 1 when any differs.
Only the library's public API is used (``ExperimentConfig``,
``build_simulator``, ``Simulator.step``, ``personalized_models``), so the same
script runs on trees before and after a change.
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import torch

DATASETS = {"fl60": {"clients": 12}, "digits": {"clients": 10, "partition": "pathological"}}
ROUNDS = 3


def fingerprint() -> dict[str, Any]:
    from pyg_fedgraph.experiment import ExperimentConfig, build_simulator, check_config
    from pyg_fedgraph.strategies import STRATEGIES

    out: dict[str, Any] = {}
    for dataset, opts in DATASETS.items():
        for name in sorted(STRATEGIES):
            cfg = ExperimentConfig(dataset=dataset, strategy=name, rounds=ROUNDS, seed=0, **opts)
            key = f"{dataset}/{name}"
            try:
                sim = build_simulator(cfg)
                check_config(cfg, sim.dataset)
            except ValueError as err:  # a strategy the data cannot run (a prior graph, ...)
                out[key] = {"skipped": str(err)}
                print(f"{key}: skipped ({err})", file=sys.stderr)
                continue
            while sim.round < sim.rounds:
                sim.step()
            h = sim.history
            params, buffers = sim.personalized_models()
            out[key] = {
                "val": torch.tensor(h.mean("val"), dtype=torch.float64),
                "test": torch.tensor(h.mean("test"), dtype=torch.float64),
                "val_clients": torch.stack([r.val[h.metric] for r in h.records]),
                "test_clients": torch.stack([r.test[h.metric] for r in h.records]),
                "loss": torch.stack([torch.as_tensor(r.train_loss, dtype=torch.float64)
                                     for r in h.records]),
                "params": params, "buffers": buffers,
            }
            print(f"{key}: test {h.mean('test')[-1]:.6f}", file=sys.stderr)
    return out


def compare(old: dict[str, Any], new: dict[str, Any], atol: float) -> int:
    bad = 0
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a is None or b is None:
            print(f"{key}: only in {'new' if a is None else 'old'}")
            bad += 1
            continue
        if "skipped" in a or "skipped" in b:
            same = ("skipped" in a) == ("skipped" in b)
            print(f"{key}: skipped in {'both' if same else 'one'}")
            bad += not same
            continue
        diffs = []
        for field in a:
            x, y = a[field], b[field]
            if x.shape != y.shape:
                diffs.append(f"{field} shape {tuple(x.shape)} vs {tuple(y.shape)}")
            elif atol == 0 and not torch.equal(x, y):
                diffs.append(f"{field} max diff {float((x - y).abs().nan_to_num().max()):.3g}")
            elif atol > 0 and not torch.allclose(x, y, rtol=0, atol=atol, equal_nan=True):
                diffs.append(f"{field} max diff {float((x - y).abs().nan_to_num().max()):.3g}")
        verdict = "; ".join(diffs) or ("identical" if atol == 0 else f"equal to {atol:g}")
        print(f"{key}: {verdict}")
        bad += bool(diffs)
    print(f"{bad} run(s) differ" if bad else "all runs agree")
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    p.add_argument("--atol", type=float, default=0.0)
    args = p.parse_args()
    if args.compare:
        old, new = (torch.load(f, weights_only=True) for f in args.compare)
        return compare(old, new, args.atol)
    if not args.out:
        p.error("give OUT.pt or --compare OLD NEW")
    logging.getLogger("pyg_fedgraph").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    torch.save(fingerprint(), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
