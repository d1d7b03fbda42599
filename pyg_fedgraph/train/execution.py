r"""How a chunk of clients computes its gradients, and how many clients
share one batched computation.

Two executions give the same results to float rounding:

* ``"vmap"``: one :func:`torch.vmap` call over the chunk's clients (one
  kernel launch per layer for all of them: what GPUs reward);
* ``"loop"``: the same functional gradient client after client. On the CPU,
  :func:`torch.vmap` turns a convolution over :math:`S` clients into a
  grouped form that is slower than :math:`S` ordinary ones, so the loop wins
  there for convolutional models.

:data:`EXECUTION_TABLE` holds the choice per model family and device type.
It is written from the measurements of ``benchmarks/perf/devices.py`` (section
"execution", every candidate timed side by side; the committed results are
in ``benchmarks/results/devices.md``), never measured at run time, so that a
run's results do not depend on the machine's load. A run records the choice
in its config.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn
from torch_geometric.nn.conv import MessagePassing

from pyg_fedgraph.typing import CompileMode, ExecutionName

__all__ = ["Execution", "ExecutionName", "CompileMode", "CUDA_GRAPH_MODES", "EXECUTION_TABLE",
           "model_family", "choose_execution", "auto_chunk"]

log = logging.getLogger(__name__)

Execution = Literal["vmap", "loop"]
#: The modes that record CUDA graphs on a GPU (on the CPU they compile as
#: ``"default"`` does, plus autotuning for ``"max-autotune"``).
CUDA_GRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})

#: ``(model family, device type) -> execution``, from
#: ``benchmarks/results/devices.md`` (CPU rows measured on a 2-core machine,
#: one thread), ``benchmarks/results/subgraph_speed.md`` (the ``gnn`` CPU
#: row: GCN, GraphSAGE and GAT clients on Cora and a synthetic federation,
#: one thread), ``benchmarks/results/devices_h100.md`` (CUDA rows, one
#: H100: vmap is 4-26x faster than the loop for every family there) and
#: ``benchmarks/results/gpu_checks_h100.md`` (the ``gnn`` CUDA row: GCN and
#: GAT clients, vmap 15-46x faster than the loop) and
#: ``benchmarks/results/graph_classification_batching.md`` (the
#: ``graph-set`` CPU row: 12 GIN clients across four TU datasets, one
#: thread, vmap 0.41x and loop 0.89x the per-client loop). Pairs without a
#: measured row take ``"vmap"`` (``graph-set`` on CUDA: not measured).
EXECUTION_TABLE: dict[tuple[str, str], Execution] = {
    ("mlp", "cpu"): "vmap",
    ("cnn", "cpu"): "loop",
    ("rnn", "cpu"): "vmap",
    ("gnn", "cpu"): "vmap",
    ("graph-set", "cpu"): "loop",
    ("mlp", "cuda"): "vmap",
    ("cnn", "cuda"): "vmap",
    ("rnn", "cuda"): "vmap",
    ("gnn", "cuda"): "vmap",
}


def model_family(model: nn.Module) -> str:
    r"""The family a model declares in its ``execution_family`` attribute
    (the graph classifiers of :mod:`pyg_fedgraph.models`: ``"graph-set"``,
    clients that hold sets of graphs), else ``"gnn"`` for models with
    message-passing layers (any
    :class:`~torch_geometric.nn.conv.MessagePassing`: clients that hold
    graphs), ``"cnn"`` for models with convolutions, ``"rnn"`` for recurrent
    ones, ``"mlp"`` otherwise."""
    declared = getattr(model, "execution_family", None)
    if isinstance(declared, str):
        return declared
    kinds = {type(m) for m in model.modules()}
    if any(issubclass(k, MessagePassing) for k in kinds):
        return "gnn"
    if any(issubclass(k, nn.modules.conv._ConvNd) for k in kinds):
        return "cnn"
    if any(issubclass(k, (nn.RNNBase, nn.RNNCellBase)) for k in kinds):
        return "rnn"
    return "mlp"


def choose_execution(model: nn.Module, device: torch.device,
                     execution: ExecutionName = "auto") -> Execution:
    r"""``execution`` itself, or for ``"auto"`` the entry of
    :data:`EXECUTION_TABLE` for the model's family on ``device``."""
    if execution in ("vmap", "loop"):
        return execution
    if execution != "auto":
        raise ValueError(f"execution must be 'auto', 'vmap' or 'loop', got {execution!r}")
    return EXECUTION_TABLE.get((model_family(model), device.type), "vmap")


def _activation_elements(model: nn.Module, inputs: Sequence[Tensor]) -> int:
    r"""Elements of every module output for the model's ``inputs`` (a
    meta-device forward: shapes only, no memory, no time). A message-passing
    layer also counts one message per edge of its output width (kept for
    the backward pass inside ``propagate``, no module's output)."""
    total = 0

    def count(module: nn.Module, inputs: tuple[object, ...], output: object) -> None:
        nonlocal total
        outs = output if isinstance(output, (tuple, list)) else (output,)
        total += sum(o.numel() for o in outs if isinstance(o, torch.Tensor))
        edges = inputs[1] if len(inputs) > 1 else None
        if isinstance(module, MessagePassing) and isinstance(edges, Tensor) \
                and isinstance(outs[0], Tensor):
            total += edges.size(-1) * outs[0].size(-1)

    import copy
    meta = copy.deepcopy(model).to("meta")
    hooks = [m.register_forward_hook(count) for m in meta.modules()]
    try:
        with torch.no_grad():
            meta(*(t.to("meta") for t in inputs))
    finally:
        for h in hooks:
            h.remove()
    return total


def auto_chunk(model: nn.Module, input_shape: Sequence[int], batch_size: int,
               device: torch.device, memory_share: float = 0.5,
               example: Sequence[Tensor] | None = None) -> int | None:
    r"""Clients per batched computation: ``None`` (all sampled clients) on
    the CPU; on a GPU as many as fit in ``memory_share`` of the free device
    memory by an estimate from the model, not a measurement:

    .. math::
        K = \left\lfloor \frac{\text{share} \cdot \text{free}}
        {4 \left(8 D + 3 A\right)} \right\rfloor

    with :math:`D` parameters (parameters, gradients, update-rule state and
    copies, 8 per parameter) and :math:`A` the elements of all layer outputs
    for one client's forward pass (kept for the backward pass and its
    gradients, 3 per element), in float32: :math:`A = B a` for a batch of
    :math:`B` samples of ``input_shape`` with :math:`a` elements per sample,
    or, for models whose inputs are not a batch of samples (clients that
    hold graphs, which propagate over the whole graph whatever the batch),
    counted on ``example``, one client's model inputs (with one message per
    edge for every message-passing layer)."""
    if device.type != "cuda":
        return None
    d = sum(p.numel() for p in model.parameters())
    try:
        if example is not None:
            a = _activation_elements(model, example)
        else:
            a = batch_size * _activation_elements(
                model, (torch.zeros(1, *input_shape, device="meta"),))
    except Exception as err:  # a model the meta device cannot run: be conservative
        log.info("auto_chunk: no meta forward for %s (%s); assuming 64 clients",
                 type(model).__name__, err)
        return 64
    free, _ = torch.cuda.mem_get_info(device)
    per_client = 4 * (8 * d + 3 * max(a, 1))
    return max(1, int(math.floor(memory_share * free / per_client)))
