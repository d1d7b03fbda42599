r"""The checks only a GPU can make, as one short script for a lent GPU session:
the METR-LA round goal with ``torch.compile(mode="reduce-overhead")`` (row (e)
of ``devices.py``: 207 GRU clients, one local epoch), and GNN clients on CUDA
(GCN and GAT on synthetic planted-community graphs: the ``vmap`` and ``loop``
executions and the per-client reference loop, side by side).

    python benchmarks/perf/gpu_checks.py --out benchmarks/results/gpu_checks_h100.json
    python benchmarks/perf/gpu_checks.py --report benchmarks/results/gpu_checks_h100.json

The first writes the measurements (JSON, after each case, so that a run cut
short keeps what it measured) and the markdown beside it; ``--report`` only
rewrites the markdown from a JSON file.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: (clients, nodes, node features) of the GNN cases.
GNN_CASES = ((100, 4000, 16), (400, 16000, 64))


def measure(out: Path) -> dict[str, Any]:
    import torch

    sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location("devices", HERE / "devices.py")
    devices = importlib.util.module_from_spec(spec)
    sys.modules["devices"] = devices
    spec.loader.exec_module(devices)
    res: dict[str, Any] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    t0 = time.perf_counter()
    res["metr_la"] = devices.metr_la_rows(torch.device("cuda"), False, 3, None,
                                         compile="reduce-overhead")
    res["metr_seconds"] = time.perf_counter() - t0
    out.write_text(json.dumps(res, indent=1, default=str))

    from pyg_fedgraph.datasets import planted_graphs
    from pyg_fedgraph.models import build_model
    from pyg_fedgraph.train import ClientTrainer, LocalConfig

    rows = []
    for n, nodes, feats in GNN_CASES:
        data = planted_graphs(num_clients=n, num_nodes=nodes, num_features=feats)
        torch.manual_seed(0)
        for name in ("gcn", "gat"):
            model = build_model(name, data.input_shape, data.num_classes, hidden_channels=64)
            cfg = LocalConfig(optimizer="adam", lr=0.01, full_batch=True, epochs=5)
            row: dict[str, Any] = {"clients": n, "nodes": nodes, "features": feats,
                                   "model": name}
            ref = None
            for key, kw in (("vmap", {"execution": "vmap"}), ("loop", {"execution": "loop"}),
                            ("reference", {"parallel": False})):
                trainer = ClientTrainer(model, data, config=cfg, device="cuda", **kw)
                params = trainer.layout.flatten(model).repeat(n, 1).cuda()
                buffers = trainer.initial_buffers(n).cuda()
                clients = torch.arange(n)
                trainer.train(clients, params, buffers)  # warm-up
                torch.cuda.synchronize()
                times = []
                for _ in range(3):
                    t = time.perf_counter()
                    result = trainer.train(clients, params, buffers)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t)
                row[key + " s"] = sorted(times)[1]
                if ref is None:
                    ref = result.params
                else:
                    row[key + " max diff"] = float((result.params - ref).abs().max())
            row["auto"] = ClientTrainer(model, data, config=cfg, device="cuda").execution
            rows.append(row)
            print(row, flush=True)
            res["gnn"] = rows
            out.write_text(json.dumps(res, indent=1, default=str))
    return res


def report(res: dict[str, Any]) -> str:
    lines = ["# GPU checks", "",
             f"`python benchmarks/perf/gpu_checks.py` on one {res['gpu']} (torch {res['torch']}), "
             "one CPU thread for the CPU side (`OMP_NUM_THREADS=1`).", "",
             "## METR-LA round goal (207 GRU clients, one local epoch)", "",
             "Row (e) of `devices.py`: local training of all 207 clients for one epoch of the "
             "training split (375 steps of batch 64, GRU hidden 100, synthetic speeds on the "
             "real road graph), eager and through `torch.compile(mode=\"reduce-overhead\")` "
             "(the step recorded as a CUDA graph); the CPU side trains 3 steps on one thread, "
             "scaled to the epoch. Goal: under 5 s on one H100, at least 50x one CPU thread.",
             "", "| eager s | compiled s | compile s (once) | cpu 1-thread s | eager speed-up "
             "| compiled speed-up | goal |", "|---|---|---|---|---|---|---|"]
    for r in res.get("metr_la", []):
        best = min(r["device s"], r["compiled s"] or float("inf"))
        met = best < 5 and r["cpu 1-thread s"] / best >= 50
        lines.append(f"| {r['device s']:.2f} | {r['compiled s']:.2f} | {r['compile s']:.1f} | "
                     f"{r['cpu 1-thread s']:.0f} | {r['speed-up']:.0f}x | "
                     f"{r['cpu 1-thread s'] / r['compiled s']:.0f}x | "
                     f"{'met' if met else 'not met'} ({best:.2f} s) |")
    lines += ["", "## GNN clients on CUDA", "",
              "`planted-graphs` (one graph of `nodes` nodes split over the clients), 5 local "
              "full-batch Adam steps, hidden width 64; seconds of one local training of all "
              "clients, median of 3 after a warm-up. `reference`: the per-client loop with "
              "`torch.optim.Adam` (`parallel=False`). \"max diff\": max |parameter "
              "difference| to vmap: on CUDA PyG's scatter sums messages with atomic adds, in "
              "a different order each run, and Adam's normalized steps enlarge the "
              "difference.", "",
              "| clients | nodes | features | model | vmap s | loop s | reference s | "
              "loop / vmap | reference / vmap | max diff (loop, reference) | auto |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res.get("gnn", []):
        lines.append(f"| {r['clients']} | {r['nodes']} | {r['features']} | {r['model']} | "
                     f"{r['vmap s']:.3f} | {r['loop s']:.2f} | {r['reference s']:.2f} | "
                     f"{r['loop s'] / r['vmap s']:.0f}x | "
                     f"{r['reference s'] / r['vmap s']:.0f}x | "
                     f"{r['loop max diff']:.1e}, {r['reference max diff']:.1e} | {r['auto']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "gpu_checks.json")
    parser.add_argument("--report", type=Path, default=None,
                        help="only rewrite the markdown of this JSON file")
    args = parser.parse_args(argv)
    source = args.report or args.out
    res = json.loads(source.read_text()) if args.report else measure(args.out)
    text = report(res)
    source.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
