r"""Dispatch cost of one local step of METR-LA's GRU clients: eager against
``torch.compile`` (issue 17).

On one H100 a METR-LA local epoch took 12.2 s against the goal of 5 s
(``results/devices_h100.md``, section e): each step launched about 1,065
small kernels, which kept the GPU busy 4.2 ms of a 25 ms step. The time went
to dispatching operations, not to computing them. This script measures the
host's side of that where it can be measured without a GPU, per local step:
"aten calls" (every ``aten::`` call in :mod:`torch.profiler`, nested calls
included: each costs the host a dispatch), "compute ops" (the innermost
calls that are not views or allocations, plus the fused kernels of compiled
code: what runs a kernel; the closest the host's profile comes to a kernel
count), kernel launches on CUDA (the runtime's launch calls, one per kernel
and one per CUDA-graph replay), and the seconds of a model so small that the
arithmetic is negligible ("tiny": hidden 4, batch 2), so that what remains is
the framework's per-operation cost. The same with the real size (hidden 100,
batch 64) where it is affordable (CUDA; on the CPU with ``--sizes tiny
real``). Modes: ``eager`` (``ClientTrainer``'s ``vmap`` execution),
``default`` (``compile=True``) and, on CUDA, ``reduce-overhead``
(``compile="reduce-overhead"``: the compiled gradient is recorded as a CUDA
graph and replayed; the batch gather and the SGD update around it stay eager).
Compiled code runs with inductor's kernel profiling on
(``torch._inductor.config.cpp.enable_kernel_profile``), so that its fused CPU
kernels appear in the profile.

Per-step figures are differences, so that what a training does once (batch
schedule, set-up, final copies) drops out: seconds as ``(t(1 + k) - t(1)) / k``
steps (median of ``--repeats``), counts as ``(n(3) - n(1)) / 2``. "max diff":
the largest parameter difference to the eager run after ``1 + k`` steps.
"graphs" and "graph breaks": what ``torch.compile`` made of the gradient
(``torch._dynamo``'s counters; one graph and no break is what lets
``reduce-overhead`` replay the whole gradient at once).

The results file is rebuilt from the measurements, kept as one line of
``perf_records.jsonl`` beside it (``--report-only``: nothing is measured); its
"### Reading" blocks are written by hand and kept.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/perf/dispatch.py  # writes benchmarks/results/dispatch.md
    OMP_NUM_THREADS=1 python benchmarks/perf/dispatch.py --quick  # fewer steps, prints only
    python benchmarks/perf/dispatch.py --device cuda --out benchmarks/results/dispatch_h100.md
    python benchmarks/perf/dispatch.py --report-only [--out FILE]   # the markdown from the record
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from pyg_fedgraph.datasets import synthetic_windows
from pyg_fedgraph.experiment.reporting import (
    RECORDS_NAME,
    machine_lines,
    measured_report,
)
from pyg_fedgraph.models import GRUForecaster
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.utils.timing import timed

SCRIPT = "benchmarks/perf/dispatch.py"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "dispatch.md"
#: METR-LA's clients: one per road sensor.
CLIENTS = 207
#: name: (GRU hidden size, batch size).
SIZES = {"tiny": (4, 2), "real": (100, 64)}


def _trainer(model: torch.nn.Module, data: Any, device: torch.device, mode: str,
             batch: int) -> ClientTrainer:
    compile_arg: bool | str = False if mode == "eager" else True if mode == "default" else mode
    return ClientTrainer(model, data, config=LocalConfig(lr=0.1, momentum=0.9, batch_size=batch,
                                                         epochs=None, steps=1),
                         device=device, execution="vmap", compile=compile_arg)  # type: ignore[arg-type]


def _train(trainer: ClientTrainer, params: torch.Tensor, steps: int, batch: int
           ) -> tuple[float, torch.Tensor]:
    r"""Seconds and parameters of ``steps`` local steps of all clients, from the
    same batches in every mode."""
    config = LocalConfig(lr=0.1, momentum=0.9, batch_size=batch, epochs=None, steps=steps)
    gen = torch.Generator().manual_seed(0)
    clients = torch.arange(params.size(0))
    seconds, out = timed(lambda: trainer.train(clients, params, generator=gen, config=config),
                         trainer.device)
    return seconds, out.params


#: Operators that only describe memory (views, metadata, allocation): they run
#: no kernel, on any device.
NO_KERNEL = frozenset(f"aten::{n}" for n in (
    "alias", "as_strided", "chunk", "detach", "detach_", "empty", "empty_like",
    "empty_strided", "expand", "expand_as", "flatten", "lift_fresh", "narrow", "permute",
    "reshape", "_reshape_alias", "resolve_conj", "resolve_neg", "select", "slice", "split",
    "split_with_sizes", "squeeze", "t", "transpose", "unbind", "unflatten", "unsqueeze",
    "_unsafe_view", "view", "view_as"))
#: CUDA runtime calls that start work on the device, as the profiler records them on the
#: host: one per kernel, one per replay of a recorded CUDA graph.
LAUNCHES = frozenset(("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                      "cuLaunchKernelEx", "cudaGraphLaunch"))


def _counts(trainer: ClientTrainer, params: torch.Tensor, steps: int, batch: int
            ) -> dict[str, int]:
    r"""What one training of ``steps`` dispatches: ``calls``, every ``aten::``
    call (nested ones included: each costs the host a dispatch); ``compute``,
    the ``aten::`` calls that are not views or allocations (:data:`NO_KERNEL`)
    and call no other such call, plus the fused kernels of compiled code: what
    runs a kernel, the closest the host's profile comes to the kernel count; on CUDA
    ``launches`` (:data:`LAUNCHES`)."""
    activities = [ProfilerActivity.CPU]
    if trainer.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        _train(trainer, params, steps, batch)
    return count_ops(prof.events())


def count_ops(events: Any) -> dict[str, int]:
    r"""The counts of :func:`_counts` from a profile's events."""
    events = list(events)
    # Calls that call another that runs a kernel (views inside do not count: bmm
    # calling resolve_conj is still where the kernel runs).
    parents = {e.cpu_parent.id for e in events
               if e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::")
               and e.name.startswith("aten::") and e.name not in NO_KERNEL}
    out = {"calls": 0, "compute": 0, "launches": 0}
    for e in events:
        if e.name.startswith("aten::"):
            out["calls"] += 1
            out["compute"] += e.id not in parents and e.name not in NO_KERNEL
        elif "_fused_" in e.name and e.name.startswith("graph_"):  # inductor's kernels
            out["compute"] += 1
        elif e.name in LAUNCHES:
            out["launches"] += 1
    return out


def measure_size(device: torch.device, size: str, modes: list[str], steps: int,
                 repeats: int) -> list[dict[str, Any]]:
    r"""The rows of one model size, one per mode; the modes' timings alternate."""
    from torch._dynamo.utils import counters

    hidden, batch = SIZES[size]
    data = synthetic_windows(CLIENTS, batch * (steps + 1))
    torch.manual_seed(0)
    model = GRUForecaster(in_channels=2, hidden_channels=hidden, out_steps=12)
    trainers = {mode: _trainer(model, data, device, mode, batch) for mode in modes}
    params = trainers[modes[0]].layout.flatten(model).repeat(CLIENTS, 1).to(device)
    rows: dict[str, dict[str, Any]] = {}
    for mode, trainer in trainers.items():
        counters.clear()
        first, _ = _train(trainer, params, 2, batch)  # warm-up; compiles when compiling
        rows[mode] = {"device": str(device), "size": f"{size} (hidden {hidden}, batch {batch})",
                      "mode": mode, "first 2 steps s": first, "per step": [],
                      "graphs": counters["stats"].get("unique_graphs", 0),
                      "graph breaks": sum(counters["graph_break"].values())}
    last = {}
    for _ in range(repeats):
        for mode, trainer in trainers.items():
            t1, _ = _train(trainer, params, 1, batch)
            tk, last[mode] = _train(trainer, params, 1 + steps, batch)
            rows[mode]["per step"].append((tk - t1) / steps)
    for mode, trainer in trainers.items():
        row = rows[mode]
        one, three = _counts(trainer, params, 1, batch), _counts(trainer, params, 3, batch)
        per = {k: (three[k] - one[k]) / 2 for k in one}
        per_step = row.pop("per step")
        row.update({"ms/step": 1e3 * statistics.median(per_step),
                    "range": (1e3 * min(per_step), 1e3 * max(per_step)),
                    "aten calls/step": per["calls"], "compute ops/step": per["compute"],
                    "launches/step": per["launches"] if device.type == "cuda" else None,
                    "max diff": (None if mode == "eager" else
                                 float((last[mode].cpu() - last["eager"].cpu()).abs().max()))})
        if mode == "eager":
            row["graphs"] = row["graph breaks"] = None
        print(f"[dispatch] {device} {size} {mode}: {row['ms/step']:.3g} ms/step, "
              f"{row['aten calls/step']:.0f} aten calls/step", flush=True)
    for row in rows.values():
        row["eager / mode"] = rows["eager"]["ms/step"] / row["ms/step"]
        row["calls: eager / mode"] = rows["eager"]["aten calls/step"] / row["aten calls/step"]
        row["compute: eager / mode"] = (rows["eager"]["compute ops/step"]
                                        / row["compute ops/step"])
    return list(rows.values())


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (tuple, list)):  # a range: (min, max)
        return "-".join(fmt(x) for x in v)
    if isinstance(v, float) and abs(v) >= 1000:
        return f"{v:,.0f}"
    if isinstance(v, float):
        return "0" if v == 0 else f"{v:.3g}" if abs(v) >= 1e-3 else f"{v:.1e}"
    return str(v)


def report(record: dict[str, Any]) -> str:
    r"""The markdown of a run's record (``results/dispatch.md``)."""
    steps, repeats = record["steps"], record["repeats"]
    cols = ["device", "size", "mode", "ms/step", "range", "eager / mode", "aten calls/step",
            "calls: eager / mode", "compute ops/step", "compute: eager / mode", "launches/step",
            "first 2 steps s", "graphs", "graph breaks", "max diff"]
    lines = ["# Dispatch cost of a METR-LA local step: eager and torch.compile", "",
             f"`{record['command']}`. Modes timed alternately.", "",
             f"{CLIENTS} GRU forecasters (`GRUForecaster(2, hidden)`, 12 input steps, 12 "
             "outputs) on synthetic windows of METR-LA's shape, trained together in one "
             "`vmap` call per step (SGD, momentum 0.9). \"ms/step\": per local step, "
             f"(t(1 + {steps}) - t(1)) / {steps}, median of {repeats} (\"range\": min-max); "
             "\"aten calls/step\": operator calls per step in `torch.profiler`, nested calls "
             "included (each costs the host a dispatch); \"compute ops/step\": the innermost "
             "calls that are not views or allocations, plus compiled code's fused kernels "
             "(what runs a kernel); \"launches/step\": the CUDA runtime's kernel and graph "
             "launches (CUDA only); \"first 2 steps s\": "
             "the warm-up training, which compiles; \"graphs\", \"graph breaks\": "
             "`torch._dynamo`'s counters after compiling; \"max diff\": max |parameter "
             f"difference| to eager after 1 + {steps} steps. \"tiny\" makes the arithmetic "
             "negligible, so its time per step is the cost of dispatching the step's "
             "operations.", ""]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in record["rows"]]
    if not record["cuda"]:
        lines += ["", "CUDA rows (launches per step, `reduce-overhead`, the real size): not "
                  "measured: the machine of this run has no CUDA device."]
    lines += ["", "## Machine", "", *record["machine"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=None,
                        help="model sizes (default: tiny on the CPU, tiny and real on CUDA)")
    parser.add_argument("--steps", type=int, default=10, help="k: timed steps per training")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="2 steps, 1 repeat; prints only unless --out")
    parser.add_argument("--report-only", action="store_true",
                        help=f"rebuild the results file from its record in {RECORDS_NAME} "
                             "beside it, measuring nothing")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"markdown output (default: {RESULTS} unless --quick); the "
                             f"record goes to {RECORDS_NAME} in the same folder")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    out = args.out if args.out is not None else (None if args.quick else RESULTS)
    if args.report_only and out is None:
        parser.error("--report-only rebuilds a file: drop --quick or give --out")

    def measured() -> dict[str, Any]:
        if args.steps < 1 or args.repeats < 1:
            parser.error(f"--steps and --repeats must be >= 1, got {args.steps} and "
                         f"{args.repeats}")
        device = torch.device(args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            parser.error("--device cuda: this machine has no CUDA device")
        record = measure(device, args.sizes, (2, 1) if args.quick else (args.steps,
                                                                         args.repeats))
        return {**record, "command": " ".join([f"python {SCRIPT}", *argv])}

    text = measured_report(out, report, None if args.report_only else measured, script=SCRIPT)
    print(text)
    return text


def measure(device: torch.device, sizes: list[str] | None, steps_repeats: tuple[int, int]
            ) -> dict[str, Any]:
    r"""The record of one run: every size's rows on ``device``."""
    import torch._inductor.config as inductor_config

    steps, repeats = steps_repeats
    sizes = sizes or (["tiny"] if device.type == "cpu" else ["tiny", "real"])
    modes = ["eager", "default"] + (["reduce-overhead"] if device.type == "cuda" else [])
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    # Fused CPU kernels show in the profile; torch's setting is restored afterwards.
    with inductor_config.patch({"cpp.enable_kernel_profile": True}):
        rows = [row for size in sizes for row in measure_size(device, size, modes, steps,
                                                              repeats)]
    return {"steps": steps, "repeats": repeats, "cuda": device.type == "cuda", "rows": rows,
            "machine": [*machine_lines(load_start),
                        f"- total time: {time.perf_counter() - start:.0f} s"]}


if __name__ == "__main__":
    main()
