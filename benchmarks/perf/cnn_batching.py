r"""Why batched CNN training is not faster than a per-client loop on one CPU thread (issue 17).

One gradient of the papers' simple CNN (:class:`~pyg_fedgraph.models.SimpleCNN`, 28x28 inputs,
3x3 convolutions 16/32/64, batch 64) for each of ``--clients`` clients, six ways, alternated
and timed side by side (min and median of ``--repeats``):

* ``loop``: one ``torch.autograd.grad`` per client (what the reference per-client loop
  computes);
* ``loop (channels-last)``: the same with the convolution weights in channels-last memory
  format, so that every activation is channels-last (what the ``"loop"`` execution of
  :class:`~pyg_fedgraph.train.ClientTrainer` does on the CPU);
* ``vmap(grad)``: :func:`torch.vmap` over :func:`torch.func.grad` (the ``"vmap"`` execution):
  vmap turns each convolution over :math:`S` clients into one grouped convolution and moves
  the client dimension into the channels and back around every layer;
* ``grouped``: a hand-written batched forward that keeps the grouped layout
  :math:`(B, S \cdot C, H, W)` through all three convolutions (one transpose in, one out) and
  uses batched matrix products for the fully-connected layers, with plain autograd;
* ``grouped (channels-last)``: the same in channels-last memory format (faster max-pooling);
* ``unfold + bmm``: convolutions as im2col and batched matrix products.

Also the share of the loop's time spent in each kind of operation (torch profiler), which shows
where time goes: the convolutions and max-pooling, the same work in every variant.
Every variant's gradients are compared with the loop's (max abs difference). Asserts nothing.

The results file is rebuilt from the measurements, kept as one line of
``perf_records.jsonl`` beside it (``--report-only``: nothing is measured); its
"### Reading" blocks are written by hand and kept.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/perf/cnn_batching.py [--clients 10] [--repeats 9]
[--out benchmarks/results/cnn_batching.md]``; ``python benchmarks/perf/cnn_batching.py
--report-only`` rebuilds ``benchmarks/results/cnn_batching.md`` from its record.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import grad, vmap

from pyg_fedgraph.experiment.reporting import (
    RECORDS_NAME,
    machine_lines,
    measured_report,
)
from pyg_fedgraph.models import SimpleCNN

SCRIPT = "benchmarks/perf/cnn_batching.py"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "cnn_batching.md"
Params = dict[str, Tensor]
#: The operations whose share of the loop's CPU time is reported, and the profiler
#: keys that belong to each.
KINDS = {"convolutions (forward and backward)": ("convolution", "conv2d"),
         "max-pooling (forward and backward)": ("max_pool",),
         "linear layers": ("addmm", "aten::mm", "linear")}


def _fc(p: Params, z: Tensor) -> Tensor:
    z = F.relu(F.linear(z, p["fc1.weight"], p["fc1.bias"]))
    z = F.relu(F.linear(z, p["fc2.weight"], p["fc2.bias"]))
    return F.linear(z, p["fc3.weight"], p["fc3.bias"])


def forward(p: Params, x: Tensor, conv: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Tensor:
    r"""One client's logits :math:`(B, 10)` from images :math:`(B, 1, 28, 28)`."""
    z = x
    for i in (1, 2, 3):
        z = F.max_pool2d(F.relu(conv(z, p[f"conv{i}.weight"], p[f"conv{i}.bias"])), 2)
    return _fc(p, z.flatten(1))


def conv_plain(z: Tensor, w: Tensor, b: Tensor) -> Tensor:
    return F.conv2d(z, w, b, padding=1)


def conv_channels_last(z: Tensor, w: Tensor, b: Tensor) -> Tensor:
    # clone, not contiguous: conv1's weight has one input channel and counts as
    # contiguous in both formats, so contiguous() would keep its plain strides.
    return F.conv2d(z, w.clone(memory_format=torch.channels_last), b, padding=1)


def conv_unfold(z: Tensor, w: Tensor, b: Tensor) -> Tensor:
    n, _, h, wd = z.shape
    cols = F.unfold(z, kernel_size=3, padding=1)  # (N, C*9, H*W)
    return (w.reshape(w.size(0), -1) @ cols + b.view(1, -1, 1)).view(n, -1, h, wd)


def grouped_losses(p: Params, x: Tensor, y: Tensor, channels_last: bool) -> Tensor:
    r"""Per-client mean losses :math:`(S,)` with the grouped layout kept throughout."""
    s, b = x.shape[:2]
    z = x.transpose(0, 1).reshape(b, -1, *x.shape[-2:])  # (B, S*C, H, W)
    if channels_last:
        z = z.contiguous(memory_format=torch.channels_last)
    for i in (1, 2, 3):
        w = p[f"conv{i}.weight"]
        z = F.conv2d(z, w.reshape(-1, *w.shape[2:]), p[f"conv{i}.bias"].reshape(-1),
                     padding=1, groups=s)
        z = F.max_pool2d(F.relu(z), 2)
    z = z.reshape(b, s, -1).transpose(0, 1)  # (S, B, F)
    for k in (1, 2):
        z = F.relu(torch.baddbmm(p[f"fc{k}.bias"].unsqueeze(1), z,
                                 p[f"fc{k}.weight"].transpose(1, 2)))
    out = torch.baddbmm(p["fc3.bias"].unsqueeze(1), z, p["fc3.weight"].transpose(1, 2))
    return F.cross_entropy(out.reshape(s * b, -1), y.reshape(-1), reduction="none") \
        .view(s, b).mean(1)


def measure(clients: int, batch: int, repeats: int) -> dict[str, Any]:
    r"""Every variant's gradient times (alternated) and largest difference to
    the loop's gradients, and the loop's profile shares."""
    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    torch.manual_seed(0)
    s, b = clients, batch
    model = SimpleCNN(1, 10, 28)
    params = {n: torch.stack([p.detach() + 0.01 * torch.randn_like(p) for _ in range(s)])
              for n, p in model.named_parameters()}
    x, y = torch.randn(s, b, 1, 28, 28), torch.randint(0, 10, (s, b))
    names = list(params)

    def leaves() -> Params:
        return {k: v.detach().requires_grad_() for k, v in params.items()}

    def loop(conv: Callable[[Tensor, Tensor, Tensor], Tensor] = conv_plain) -> Params:
        out = []
        for i in range(s):
            pi = {k: v[i].detach().requires_grad_() for k, v in params.items()}
            loss = F.cross_entropy(forward(pi, x[i], conv), y[i])
            out.append(torch.autograd.grad(loss, list(pi.values())))
        return {k: torch.stack([g[j] for g in out]) for j, k in enumerate(names)}

    def loss_of(conv: Callable[[Tensor, Tensor, Tensor], Tensor]
                ) -> Callable[[Params, Tensor, Tensor], Tensor]:
        return lambda p, xb, yb: F.cross_entropy(forward(p, xb, conv), yb)

    vmap_grad = vmap(grad(loss_of(conv_plain)))
    vmap_unfold = vmap(grad(loss_of(conv_unfold)))

    def grouped(channels_last: bool) -> Callable[[], Params]:
        def run() -> Params:
            p = leaves()
            gs = torch.autograd.grad(grouped_losses(p, x, y, channels_last).sum(),
                                     list(p.values()))
            return dict(zip(names, gs, strict=True))
        return run

    variants: dict[str, Callable[[], Params]] = {
        "loop": loop,
        "loop (channels-last)": lambda: loop(conv_channels_last),
        "vmap(grad)": lambda: vmap_grad(params, x, y),
        "grouped": grouped(False),
        "grouped (channels-last)": grouped(True),
        "unfold + bmm": lambda: vmap_unfold(params, x, y),
    }
    reference = loop()
    diffs = {name: max(float((f()[k] - reference[k]).abs().max()) for k in names)
             for name, f in variants.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, f in variants.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
        print(".", end="", flush=True)
    print()
    base = min(times["loop"])
    rows = [{"variant": name, "min s": min(ts), "median s": statistics.median(ts),
             "loop / variant": base / min(ts), "max grad diff": diffs[name]}
            for name, ts in times.items()]

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loop()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    shares = {label: sum(e.self_cpu_time_total for e in events
                         if any(k in e.key for k in keys)) / max(total, 1)
              for label, keys in KINDS.items()}
    return {"clients": s, "batch": b, "repeats": repeats, "rows": rows, "shares": shares,
            "machine": machine_lines(load_start)}


def report(record: dict[str, Any]) -> str:
    r"""The markdown of a run's record (``results/cnn_batching.md``)."""
    rows = ["| variant | min s | median s | loop / variant (min) | max grad diff to loop |",
            "|---|---:|---:|---:|---:|"]
    rows += [f"| {r['variant']} | {r['min s']:.4f} | {r['median s']:.4f} | "
             f"{r['loop / variant']:.2f} | {r['max grad diff']:.1e} |" for r in record["rows"]]
    return "\n".join([
        "# Batched CNN training on one CPU thread (issue 17)", "",
        f"One gradient of the simple CNN (28x28, convolutions 16/32/64, batch "
        f"{record['batch']}) for each of {record['clients']} clients, six ways, alternated, "
        f"{record['repeats']} repeats (`{SCRIPT}`; the docstring describes each variant). "
        "\"loop / variant\" > 1: the variant is faster than the per-client loop.", "",
        *rows, "",
        "Share of the loop's own CPU time by operation (torch profiler, one run):", "",
        *[f"- {label}: {100 * share:.0f}%" for label, share in record["shares"].items()], "",
        "## Machine", "", *record["machine"], "",
        f"Command: `{record['command']}`", ""])


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--report-only", action="store_true",
                        help=f"rebuild the results file from its record in {RECORDS_NAME} "
                             f"beside it, measuring nothing (default file: {RESULTS})")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"markdown output (default: print only); the record goes to "
                             f"{RECORDS_NAME} in the same folder")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)

    def measured() -> dict[str, Any]:
        record = measure(args.clients, args.batch, args.repeats)
        return {**record, "command": " ".join([f"python {SCRIPT}", *argv])}

    text = measured_report((args.out or RESULTS) if args.report_only else args.out, report,
                           None if args.report_only else measured, script=SCRIPT)
    print(text)
    return text


if __name__ == "__main__":
    main()
