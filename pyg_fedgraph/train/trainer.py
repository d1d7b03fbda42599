"""Client-parallel local training and evaluation.

All sampled clients train in one batched computation: their flat parameters
are stacked into an :math:`(S, D)` matrix and the per-client loss gradient is
evaluated with ``torch.vmap(torch.func.grad(...))`` over
:func:`torch.func.functional_call`. A plain per-client loop with
:class:`torch.optim.SGD` (or :class:`torch.optim.Adam`) is kept as the
reference implementation (``ClientTrainer(..., parallel=False)``); both
consume the same mini-batch schedule, so they give the same parameters up to
float rounding.
"""
from __future__ import annotations

import copy
import functools
import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast, get_args

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap
from torch.utils.hooks import RemovableHandle

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.data.objective import Objective
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.execution import (
    CUDA_GRAPH_MODES,
    CompileMode,
    Execution,
    ExecutionName,
    auto_chunk,
    choose_execution,
    model_family,
)
from pyg_fedgraph.train.regularizers import Regularizer
from pyg_fedgraph.train.rules import SGD, Adam, LocalProblem, LocalRule, class_counts, default_rule
from pyg_fedgraph.utils.device import Precision, amp_dtype, autocast, resolve_device

__all__ = ["TrainResult", "ClientTrainer", "batch_schedule", "StepHook", "model_args",
           "client_rows"]

log = logging.getLogger(__name__)

#: fp16 loss scaling (as :class:`torch.amp.GradScaler`): the initial scale,
#: and its growth per step without overflow (doubling every 2000 steps).
FP16_INIT_SCALE = 2.0 ** 16
FP16_GROWTH = 2.0 ** (1 / 2000)


#: A mini-batch's model inputs: one tensor :math:`(S, B, \ldots)`, or a tuple of
#: them for models of several inputs (clients that hold graphs:
#: :meth:`GraphFederatedDataset.batch <pyg_fedgraph.data.GraphFederatedDataset.batch>`).
Inputs = Tensor | tuple[Tensor, ...]


def model_args(xb: Inputs, row: int | None = None) -> tuple[Tensor, ...]:
    r"""The positional arguments of a model for the inputs ``xb`` (of client
    ``row`` when given, else as they are)."""
    args = xb if isinstance(xb, tuple) else (xb,)
    return args if row is None else tuple(t[row] for t in args)


def client_rows(xb: Inputs, row: int) -> Inputs:
    r"""Client ``row``'s part of batched inputs ``xb``."""
    return tuple(t[row] for t in xb) if isinstance(xb, tuple) else xb[row]


#: ``hook(phase, done, total)``: called by a :class:`ClientTrainer` as its
#: work advances (``phase`` ``"train"``: ``done`` of ``total`` local steps of
#: the current training; ``"evaluate"``: batches of an evaluation). A hook may
#: raise to abandon the work (a runner stopping a long round).
StepHook = Callable[[str, int, int], None]


@dataclass
class TrainResult:
    r"""Output of local training for :math:`S` clients.

    Attributes:
        params (torch.Tensor): trained flat parameters :math:`(S, D)`.
        buffers (torch.Tensor): trained flat buffers :math:`(S, B)`.
        loss (torch.Tensor): mean training loss over each client's steps :math:`(S,)`.
        steps (torch.Tensor): local steps each client took :math:`(S,)`.
        extra (dict): the rule's extra per-client outputs (e.g. pFedMe's
            ``personal_x``), :math:`(S, \ldots)` each.
        state (dict): the rule's persistent optimizer state after the last
            step, :math:`(S, \ldots)` each (empty unless
            ``keep_optimizer_state``).
    """
    params: Tensor
    buffers: Tensor
    loss: Tensor
    steps: Tensor
    extra: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)


#: Where a schedule's random draws come from: one generator for all clients,
#: one per client, or one seed per client (an int, e.g. from
#: :func:`~pyg_fedgraph.utils.seeds.derive_seeds`), which draws exactly what a
#: generator seeded with it would, from one reseeded generator instead of a
#: generator object (and its 5 KB state) per client.
Generators = torch.Generator | Sequence[torch.Generator] | Sequence[int] | None


def _client_generators(generator: Generators, s: int
                       ) -> Iterator[torch.Generator | None]:
    r"""The generator each of ``s`` clients draws from, in client order (a
    per-client seed reseeds one shared generator when its client's turn
    comes, so each must be used before the next is taken)."""
    if generator is None or isinstance(generator, torch.Generator):
        return itertools.repeat(generator, s)
    sources = list(generator)
    if len(sources) != s:
        raise ValueError(f"{len(sources)} generators given for {s} clients; pass one per client "
                         f"(or a single generator for all)")
    kinds = {type(g) for g in sources}
    if kinds <= {torch.Generator}:
        return iter(cast("list[torch.Generator]", sources))
    if kinds <= {int}:
        shared = torch.Generator()
        return map(shared.manual_seed, cast("list[int]", sources))
    raise TypeError(f"pass torch.Generator objects or Python int seeds, one per client, not a "
                    f"mix; got {sorted(k.__name__ for k in kinds)}")


def _argsort_head(values: Tensor, k: int) -> Tensor:
    r"""``values.argsort(dim=-1)[..., :k]``: the places of each row's
    :math:`k` smallest values, smallest first, without sorting whole rows.

    :func:`torch.topk` finds the :math:`k + 1` smallest of each row; where
    they are all distinct, the first :math:`k` places are the only order
    any sort can give. Rows with a tie among them (float32 draws repeat:
    about one row in 20 for :math:`k = 64` of 24,000 uniform draws) are
    sorted whole by :func:`torch.argsort`, so their ties fall exactly as
    they did before this shortcut. Steps mode needs only the head of each
    permutation; sorting every draw took a fifth of a compiled METR-LA
    training round (``benchmarks/results/perf_before_after.md``, section S).

    Args:
        values (torch.Tensor): :math:`(\ldots, n)` floats, no NaN.
        k (int): :math:`0 \le k \le n`.

    Returns:
        :math:`(\ldots, k)` long indices.
    """
    n = values.size(-1)
    if 4 * (k + 1) > n:  # a head this long: the whole sort costs about as much
        return values.argsort(dim=-1)[..., :k]
    flat = values.reshape(-1, n)
    low, head = flat.topk(k + 1, dim=-1, largest=False, sorted=True)
    tied = (low.diff(dim=-1) <= 0).any(dim=-1)
    head = head[:, :k].clone()
    if bool(tied.any()):
        head[tied] = flat[tied].argsort(dim=-1)[:, :k]
    return head.reshape(*values.shape[:-1], k)


def batch_schedule(counts: Tensor, batch_size: int, *, epochs: int | None = None,
                   steps: int | None = None, generator: Generators = None,
                   full_batch: bool = False) -> tuple[Tensor, Tensor]:
    r"""The mini-batches every client visits, as one index tensor.

    Full-batch mode (``full_batch``): every step (``epochs`` steps, or
    ``steps``) takes each client's whole split, its :math:`n_i` samples in
    order; positions past :math:`n_i` (up to :math:`n_{max}`) hold ``-1``
    and do not enter the loss (the trainer takes the mean over the others).
    No random draw is made.

    Epoch mode: each epoch, client :math:`i` walks a fresh permutation of its
    :math:`n_i` samples in :math:`\lceil n_i / B \rceil` batches; the last
    batch of an epoch (and every batch of a client with :math:`n_i < B`) is
    filled up by wrapping around the permutation, so every batch holds
    exactly :math:`B` real samples (no padding enters a loss or BatchNorm).
    Clients with fewer batches wait (inactive) for the others. Steps mode:
    every step draws a fresh random batch (without replacement within it).

    Client :math:`i`'s permutations are drawn from ``generator[i]`` alone and
    depend only on :math:`n_i`, so a client gets the same batches whether it
    trains alone (a Flower node) or batched with others (the simulator). This
    is one small draw per client (a loop over clients, cheap next to
    training; clients with equal :math:`n_i` are then sorted together, in
    steps mode only as far as the first :math:`B` places of each
    permutation, the only ones a step visits); a single generator is drawn
    from client after client.

    Args:
        counts (torch.Tensor): samples per client :math:`(S,)`.
        batch_size (int): :math:`B`.
        epochs (int, optional): epoch mode.
        steps (int, optional): steps mode (wins over ``epochs``).
        generator (torch.Generator or list, optional): one generator per
            client, one int seed per client (see :data:`Generators`), or one
            generator for all.

    Returns:
        ``index`` :math:`(T, S, B)` and ``active`` :math:`(T, S)` (bool).
    """
    counts = counts.to(torch.long)
    s = counts.numel()
    n_max = int(counts.max()) if s else 0
    if full_batch:
        rounds = steps if steps is not None else epochs
        if rounds is None:
            raise ValueError("batch_schedule needs epochs or steps")
        pos = torch.arange(max(n_max, 1))
        one = torch.where(pos.unsqueeze(0) < counts.unsqueeze(1), pos, -1)  # (S, n_max)
        active = (counts > 0).unsqueeze(0).expand(rounds, s).clone()
        return one.unsqueeze(0).expand(rounds, s, -1).clone(), active
    empty = (torch.zeros(0, s, batch_size, dtype=torch.long), torch.zeros(0, s, dtype=torch.bool))
    if s == 0 or n_max == 0:
        return empty
    gens = _client_generators(generator, s)
    rounds = steps if steps is not None else epochs
    if rounds is None:
        raise ValueError("batch_schedule needs epochs or steps")
    if rounds == 0:
        return empty
    # perm[i, r, :n_i]: client i's r-th permutation of range(n_i), the argsort of
    # uniform draws. The draws are made client after client (the order matters when
    # one generator serves all); clients with equal n_i are sorted in one call.
    # Steps mode visits only the first min(n_i, B) places of each permutation:
    # _argsort_head finds them without sorting all n_i draws (the same indices).
    length = batch_size if steps is not None else -(-n_max // batch_size) * batch_size
    width = min(n_max, length) if steps is not None else n_max
    draws: dict[int, tuple[list[int], list[Tensor]]] = {}
    for i, (n, gen) in enumerate(zip(counts.tolist(), gens, strict=True)):
        if n:
            rows, values = draws.setdefault(n, ([], []))
            rows.append(i)
            values.append(torch.rand(rounds, n, generator=gen))
    uniform = len(draws) == 1 and len(draws[n_max][0]) == s  # every client holds n_max
    if uniform:  # the usual case: one sort, nothing to place
        perm = _argsort_head(torch.stack(draws[n_max][1]), width)
    else:
        perm = torch.zeros(s, rounds, width, dtype=torch.long)
        for n, (rows, values) in draws.items():
            k = min(n, width)
            perm[rows, :, :k] = _argsort_head(torch.stack(values), k)
    # Batches hold B real samples: client i's positions past n_i wrap around to the
    # beginning of its permutation (every batch of a client with n_i < B, the last
    # batch of an epoch otherwise).
    if uniform and length == width:  # no position wraps around
        visits = perm
    else:
        pos = torch.arange(length).unsqueeze(0) % counts.clamp(min=1).unsqueeze(1)  # (S, L)
        visits = perm.gather(2, pos.unsqueeze(1).expand(s, rounds, length))  # (S, R, L)
    if steps is not None:
        active = (counts > 0).unsqueeze(0).expand(steps, s).clone()
        return visits.transpose(0, 1).contiguous(), active
    per_epoch = length // batch_size
    n_batches = -(-counts // batch_size)  # (S,)
    index = visits.view(s, rounds, per_epoch, batch_size).permute(1, 2, 0, 3) \
        .reshape(rounds * per_epoch, s, batch_size)
    active = (torch.arange(per_epoch).unsqueeze(1) < n_batches.unsqueeze(0)).repeat(rounds, 1)
    return index, active


def _compiled(fn: Callable[..., Any], mode: CompileMode) -> Callable[..., Any]:
    r"""``fn`` through :func:`torch.compile` in ``mode``. In the modes that
    record CUDA graphs the outputs live in the graph's memory, which the next
    replay overwrites: each call starts a new step
    (:func:`torch.compiler.cudagraph_mark_step_begin`) and returns copies of
    its tensors (a tensor or a tuple of them)."""
    compiled = torch.compile(fn, mode=mode)
    if mode not in CUDA_GRAPH_MODES:
        return compiled

    def call(*args: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(*args)
        return out.clone() if isinstance(out, Tensor) else tuple(t.clone() for t in out)
    return call


class ClientTrainer:
    r"""Trains and evaluates many clients of one model architecture at once.

    **Where and how.** Local work runs on ``device`` (the dataset's samples
    and the model move there once); tensors passed in may live anywhere (for
    instance a client table kept on the host) and results come back on the
    device of the parameters passed in. The sampled clients train in chunks of
    at most ``parallel_clients`` clients per batched computation, which bounds
    the memory (``1`` uses the per-client loop's); every chunk draws the same
    batches as it would in one piece, so results agree to float rounding.
    Within a chunk, ``execution`` says how the clients' gradients are
    computed: ``"vmap"`` (one :func:`torch.vmap` call over the chunk) or
    ``"loop"`` (the same functional gradient, client after client, which is
    faster for convolutions on the CPU, where it also passes convolution
    weights in channels-last memory format); ``"auto"`` takes the choice of
    :func:`~pyg_fedgraph.train.execution.choose_execution`, a table measured
    by ``benchmarks/perf/devices.py``, never a measurement at run time. Both give
    the same results to float rounding. ``precision`` runs the forward passes
    under autocast (``"bf16"``, ``"fp16"``); parameters, gradients and the
    update rule's state stay float32, and with ``"fp16"`` the loss is scaled
    (a per-client scale halved whenever a client's gradient overflows, whose
    step is then skipped, as :class:`torch.amp.GradScaler` does).
    ``compile=True`` passes the ``"vmap"`` execution's batched gradient, and
    the batched forward pass of :meth:`evaluate`,
    through :func:`torch.compile` (built once per trainer; the first step
    compiles, tens of seconds): operations fuse, so a step launches far fewer
    kernels, which is what bounds small recurrent models on a GPU
    (``benchmarks/results/devices_h100.md``, section e). A mode name
    (``"reduce-overhead"``, ``"max-autotune"``, ...) is passed as
    :func:`torch.compile`'s ``mode``: on a GPU ``"reduce-overhead"`` also
    records the step as a CUDA graph, replayed with one launch instead of
    one per kernel (the gradient is then copied out of the graph's memory
    before the next replay overwrites it). Results agree with
    the eager path to float rounding, not bit for bit. One process keeps at
    most ``torch._dynamo.config.cache_size_limit`` compiled variants (all
    vmapped functions share one cache); beyond that torch runs them eagerly.

    For classification, the trainer runs the model once when it is built, on
    two training samples, and raises a :class:`ValueError` naming both sizes
    when its output is not one score per class, :math:`(B, C)`.

    Args:
        model (torch.nn.Module): the client architecture (its values are not
            used: parameters come from the flat matrices passed in).
        dataset (FederatedDataset): all clients' data.
        objective (Objective, optional): loss and metrics (default: the
            dataset's :attr:`~pyg_fedgraph.data.FederatedDataset.objective`).
        config (LocalConfig, optional): local SGD settings.
        eval_batch_size (int, optional): rows per client evaluated at once
            (default: ``1024``).
        device (str or torch.device, optional): where local work runs
            (default: where the dataset's samples are; see
            :func:`~pyg_fedgraph.utils.device.resolve_device`).
        parallel_clients (int, optional): clients per batched computation
            (default: all on the CPU; on a GPU chosen from the model and batch
            size to fit, see :func:`~pyg_fedgraph.train.execution.auto_chunk`).
        execution (str, optional): ``"auto"``, ``"vmap"`` or ``"loop"``
            (default: ``"auto"``).
        precision (str, optional): ``"fp32"``, ``"bf16"`` or ``"fp16"``
            (default: ``"fp32"``).
        compile (bool or str, optional): compile the batched gradient (and
            the evaluation's batched forward pass) with
            :func:`torch.compile`: :obj:`True` (mode ``"default"``) or a mode
            of :data:`~pyg_fedgraph.train.execution.CompileMode`; needs the
            ``"vmap"`` execution (default: :obj:`False`).
        parallel (bool, optional): the batched path (chunks of
            ``parallel_clients``, ``execution``); :obj:`False` trains one
            client after the other in the reference loop with
            :class:`torch.optim.SGD` or :class:`torch.optim.Adam`
            (default: :obj:`True`).

    Progress: :meth:`register_step_hook` adds a :data:`StepHook` called as
    the work advances (a runner shows it and may stop a long round there).
    """

    def __init__(self, model: nn.Module, dataset: FederatedDataset,
                 objective: Objective | None = None, config: LocalConfig | None = None,
                 eval_batch_size: int = 1024, *, device: str | torch.device | None = None,
                 parallel_clients: int | None = None, execution: ExecutionName = "auto",
                 precision: Precision = "fp32", compile: bool | CompileMode = False,
                 parallel: bool = True) -> None:
        self.parallel = bool(parallel)
        self._step_hooks: OrderedDict[int, StepHook] = OrderedDict()
        self.device = dataset.device if device is None else resolve_device(device)
        if parallel_clients is not None and (isinstance(parallel_clients, bool)
                                             or parallel_clients < 1):
            raise ValueError(f"parallel_clients must be a positive integer, got "
                             f"{parallel_clients!r}")
        amp_dtype(precision)  # checks the name
        self.model = copy.deepcopy(model).to(self.device)
        self.layout = ParamLayout.from_module(self.model)
        self.dataset = dataset.to(self.device)
        self.objective = objective or dataset.objective
        self.config = config or LocalConfig()
        self.eval_batch_size = eval_batch_size
        self.precision: Precision = precision
        self.execution: Execution = choose_execution(self.model, self.device, execution)
        if not isinstance(compile, bool) and compile not in get_args(CompileMode):
            raise ValueError(f"compile must be True, False or a torch.compile mode ("
                             f"{', '.join(map(repr, get_args(CompileMode)))}), got "
                             f"{compile!r}")
        if compile is not False and self.execution != "vmap":
            raise ValueError(f"compile={compile!r} compiles the 'vmap' execution, but this trainer "
                             f"uses {self.execution!r} (execution={execution!r} for a "
                             f"{model_family(self.model)} model on {self.device.type}); "
                             f"set execution='vmap'")
        self.compile: bool | CompileMode = compile
        #: :func:`torch.compile`'s mode, ``None`` when not compiling.
        self.compile_mode: CompileMode | None = (None if compile is False else
                                                 "default" if compile is True else compile)
        # The compiled batched gradients, one per call signature (regularizer, loss
        # scale, number of reference tensors): built once, so torch.compile's cache
        # serves every round.
        self._compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self.parallel_clients = parallel_clients if parallel_clients is not None else \
            auto_chunk(self.model, self.dataset.input_shape, self.config.batch_size, self.device,
                       example=self._graph_example() if self.device.type == "cuda" else None)
        # Integer buffers (BatchNorm's num_batches_tracked) are bookkeeping, not
        # federated state: fresh zeros are passed so functional_call can mutate them.
        self._int_buffers = {n: b for n, b in self.model.named_buffers()
                             if not b.is_floating_point()}
        self._check_output_size()
        self._channels_last = self._channels_last_weights()
        # Buffers a forward pass in training changes (BatchNorm's running statistics),
        # which full batches would fill with their filler rows; constant buffers (GINConv's
        # epsilon) are not.
        self._running_statistics = any(
            isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
            for m in self.model.modules())
        #: The model's own term of the local loss, ``local_penalty(params)`` of its
        #: named parameters (FED-PUB's L1 norm of the masks), or ``None``.
        self.local_penalty: Callable[[dict[str, Tensor]], Tensor] | None = getattr(
            self.model, "local_penalty", None)

    def _graph_example(self) -> tuple[Tensor, ...] | None:
        r"""For clients that hold graphs, one client's model inputs as
        training passes them (its padded graph and a batch of node
        positions, all training nodes in full-batch mode), for
        :func:`~pyg_fedgraph.train.execution.auto_chunk`'s estimate: a graph
        model propagates over the whole graph, however few nodes the batch
        holds. ``None`` for other data (a batch of samples of
        ``input_shape``)."""
        if self.dataset.input_kind != "graph":
            return None
        counts = self.dataset.num_samples("train")
        size = int(counts.max()) if self.config.full_batch else self.config.batch_size
        index = torch.zeros(1, max(size, 1), dtype=torch.long, device=self.device)
        client = counts.argmax().view(1).to(self.device)
        xb, _ = self.dataset.batch("train", index, client)
        return model_args(xb, 0)

    def _check_output_size(self) -> None:
        r"""For classification, a probe forward on two training samples: the
        model must output one score per class, :math:`(B, C)`. Otherwise
        training would stop at its first step with an indexing error of the
        loss that names neither size."""
        if self.dataset.task != "classification" or self.dataset.num_classes is None:
            return
        counts = self.dataset.num_samples("train")
        have = (counts > 0).nonzero().view(-1)
        if not have.numel():
            return
        client = have[:1]
        index = torch.tensor([[0, min(1, int(counts[client]) - 1)]])
        xb, _ = self.dataset.batch("train", index.to(self.device), client.to(self.device))
        was_training = self.model.training
        self.model.eval()
        try:
            # Under the trainer's autocast, as training runs it (forward hooks see the same).
            with torch.no_grad(), autocast(self.device, self.precision):
                out = self.model(*model_args(xb, 0))
        finally:
            self.model.train(was_training)
        c = self.dataset.num_classes
        if not isinstance(out, Tensor) or out.dim() != 2 or out.size(1) != c:
            got = (f"output of type {type(out).__name__}" if not isinstance(out, Tensor)
                   else f"{out.size(1)} outputs per sample" if out.dim() == 2
                   else f"outputs of shape {tuple(out.shape)} for 2 samples")
            raise ValueError(f"the model gives {got}, but dataset {self.dataset.name!r} has "
                             f"{c} classes: a classification model must output one score per "
                             f"class, shape (batch, {c}); build its last layer with {c} outputs")

    def _channels_last_weights(self) -> frozenset[str]:
        r"""The 2-D convolution weights that the ``"loop"`` execution passes
        in channels-last memory format on the CPU.

        With channels-last weights the convolutions write channels-last
        outputs, and on the CPU the convolutions and above all the
        max-pooling after them run faster in that layout (about 1.5x for the
        simple CNN, see ``benchmarks/results/cnn_batching.md``); the values
        are the same up to float rounding. Used only where a probe forward
        on two random inputs gives the same output both ways (a model that
        ``view``\ s its activations as if they were contiguous would fail or
        differ); otherwise, and on other devices and executions, the set is
        empty and nothing changes."""
        if self.device.type != "cpu" or self.execution != "loop":
            return frozenset()
        names = frozenset(f"{prefix}.weight" if prefix else "weight"
                          for prefix, m in self.model.named_modules()
                          if isinstance(m, nn.Conv2d)) & {e.name for e in self.layout.params}
        if not names:
            return frozenset()
        probe = torch.randn(2, *self.dataset.input_shape,
                            generator=torch.Generator().manual_seed(0)).to(self.device)
        flat = self.layout.flatten(self.model).detach()
        bufs = {k: v.detach().clone() for k, v in self.model.named_buffers()}
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                plain = functional_call(self.model, (self.layout.unflatten(flat), bufs),
                                        (probe,))
                fast = functional_call(self.model, (_to_channels_last(
                    self.layout.unflatten(flat), names), bufs), (probe,))
            same = bool(torch.allclose(plain, fast, rtol=1e-4, atol=1e-5))
        except RuntimeError as err:  # e.g. a .view() of a channels-last activation
            log.debug("channels-last convolution weights not used: %s", err)
            same = False
        finally:
            self.model.train(was_training)
        return names if same else frozenset()

    # ------------------------------------------------------------- progress
    def register_step_hook(self, hook: StepHook) -> RemovableHandle:
        r"""Calls ``hook(phase, done, total)`` as local training (``"train"``,
        after every local step of every chunk of clients) and evaluation
        (``"evaluate"``, after every batch) advance; returns a handle whose
        ``remove()`` removes it, as :meth:`torch.nn.Module.register_forward_hook`."""
        handle = RemovableHandle(self._step_hooks)
        self._step_hooks[handle.id] = hook
        return handle

    def _advance(self, phase: str, done: int, total: int) -> None:
        for hook in tuple(self._step_hooks.values()):
            hook(phase, done, total)

    # ------------------------------------------------------------- helpers
    def _buffer_dict(self, buffers: Tensor) -> dict[str, Tensor]:
        out = {k: v.clone() for k, v in self.layout.unflatten_buffers(buffers).items()}
        s = buffers.size(0)
        out.update({k: torch.zeros(s, *v.shape, dtype=v.dtype, device=buffers.device)
                    for k, v in self._int_buffers.items()})
        return out

    def _flat_buffers(self, d: dict[str, Tensor], s: int) -> Tensor:
        if not self.layout.buffers:
            return torch.zeros(s, 0, device=self.device)
        return torch.cat([d[e.name].reshape(s, -1).to(torch.get_default_dtype())
                          for e in self.layout.buffers], dim=1)

    def _check(self, clients: Tensor, params: Tensor, buffers: Tensor | None) -> Tensor:
        s = clients.numel()
        if params.dim() != 2 or params.size(0) != s or params.size(1) != self.layout.num_params:
            raise ValueError(f"params must be ({s}, {self.layout.num_params}) for {s} clients, "
                             f"got {tuple(params.shape)}")
        if buffers is None:
            buffers = self.initial_buffers(s).to(params.device)
        if tuple(buffers.shape) != (s, self.layout.num_buffers):
            raise ValueError(f"buffers must be ({s}, {self.layout.num_buffers}), "
                             f"got {tuple(buffers.shape)}")
        return buffers

    def initial_buffers(self, num_clients: int) -> Tensor:
        r"""The template model's buffers repeated for ``num_clients`` clients
        (on the CPU)."""
        return self.layout.flatten_buffers(self.model).cpu().unsqueeze(0) \
            .repeat(num_clients, 1) if self.layout.num_buffers else torch.zeros(num_clients, 0)

    def chunks(self, num_clients: int) -> list[slice]:
        r"""The positions of ``num_clients`` clients in batched computations
        of at most :attr:`parallel_clients` each."""
        k = self.parallel_clients or max(num_clients, 1)
        return [slice(i, min(i + k, num_clients)) for i in range(0, num_clients, k)]

    def _forward(self, theta: Tensor, buffers: dict[str, Tensor], xb: Inputs) -> Tensor:
        params: dict[str, Tensor] = self.layout.unflatten(theta)
        if self._channels_last and self.execution == "loop":  # one client at a time
            params = _to_channels_last(params, self._channels_last)
        if self.precision == "fp32":  # no autocast, nothing to cast back (the common case)
            return functional_call(self.model, (params, buffers), model_args(xb))
        with autocast(self.device, self.precision):
            out = functional_call(self.model, (params, buffers), model_args(xb))
        return out.float() if out.is_floating_point() else out

    def _client_loss(self, theta: Tensor, buffers: dict[str, Tensor], xb: Inputs, yb: Tensor,
                     w: Tensor | None, reg_fn: Callable[..., Tensor] | None,
                     scale: Tensor | None, *refs: Tensor) -> Tensor:
        r"""One client's mini-batch loss (times the fp16 ``scale``) as a
        function of its flat parameters ``theta`` :math:`(D,)`. The model sees
        ``theta`` through :meth:`ParamLayout.unflatten`, one split into views,
        so the gradient with respect to ``theta`` is one concatenation of the
        parameter tensors' gradients (plus the regularizer's) in the backward
        pass, and the function transforms see a single input tensor. With
        sample weights ``w`` (full batches: 1 for a sample, 0 for a filler) the
        loss is the mean over the weighted samples. A model with a
        ``local_penalty(params)`` method (a pure function of its named
        parameters, e.g. :class:`~pyg_fedgraph.models.MaskedGCN`'s L1 norm of
        its masks) adds it to every client's loss, here and in the
        per-client loop."""
        per_sample = self.objective.loss(self._forward(theta, buffers, xb), yb)
        loss = per_sample.mean() if w is None else (per_sample * w).sum() / w.sum().clamp(min=1)
        if reg_fn is not None:
            loss = loss + reg_fn(theta, *refs)
        if self.local_penalty is not None:
            loss = loss + self.local_penalty(self.layout.unflatten(theta))
        return loss if scale is None else loss * scale

    # ---------------------------------------------------------------- train
    def train(self, clients: Tensor, params: Tensor, buffers: Tensor | None = None, *,
              regularizer: Regularizer | None = None, config: LocalConfig | None = None,
              rule: LocalRule | None = None, generator: Generators = None,
              state: dict[str, Tensor] | None = None) -> TrainResult:
        r"""Local training of clients ``clients`` starting from ``params``.

        Args:
            clients (torch.Tensor): client ids :math:`(S,)`.
            params (torch.Tensor): starting flat parameters :math:`(S, D)`.
            buffers (torch.Tensor, optional): flat buffers :math:`(S, B)`.
            regularizer (Regularizer, optional): extra loss term per client.
            config (LocalConfig, optional): overrides the trainer's config.
            rule (LocalRule, optional): the local update rule (default: the
                config's optimizer, :class:`~pyg_fedgraph.train.SGD` or
                :class:`~pyg_fedgraph.train.Adam`).
            generator (torch.Generator or list, optional): source of the batch
                order, one per client or one for all (see :func:`batch_schedule`).
            state (dict, optional): the clients' optimizer state kept from
                their previous local run (``TrainResult.state`` of that run,
                rows in the order of ``clients``); used only with
                ``keep_optimizer_state``.
        """
        cfg = config or self.config
        rule = (rule or default_rule(cfg)).to(self.device)
        clients = clients.to(torch.long).cpu()
        home = params.device
        buffers = self._check(clients, params, buffers)
        if regularizer is not None and any(r.size(0) != clients.numel() for r in regularizer.refs):
            raise ValueError("every regularizer reference needs one row per trained client")
        counts = self.dataset.num_samples("train")[clients]
        if cfg.full_batch and self._running_statistics:
            raise ValueError("full_batch=True would count the filler rows of smaller clients "
                             "in the model's buffers (BatchNorm statistics): use mini-batches "
                             "with this model")
        index, active = batch_schedule(counts, cfg.batch_size, epochs=cfg.epochs,
                                       steps=cfg.steps, generator=generator,
                                       full_batch=cfg.full_batch)
        theta = params.detach().to(self.device, copy=True)
        buffers = buffers.detach().to(self.device, copy=True)
        if regularizer is not None:
            regularizer = regularizer.to(self.device)
        carried = ({k: v.to(self.device) for k, v in state.items()}
                   if state and cfg.keep_optimizer_state else None)

        def rows(c: slice) -> dict[str, Tensor] | None:
            return None if carried is None else {k: v[c] for k, v in carried.items()}

        def reg_rows(c: slice) -> Regularizer | None:
            return None if regularizer is None else regularizer.select(
                torch.arange(c.start, c.stop, device=self.device))

        chunks = self.chunks(clients.numel())
        if not self.parallel:
            # The reference loop: torch's own optimizers where the rule has one; other
            # rules run the batched code one client at a time.
            chunks = [slice(i, i + 1) for i in range(clients.numel())]
        progress = _Progress(self, "train", len(chunks) * (index.size(0) // rule.batches_per_step))
        if not self.parallel and isinstance(rule, (SGD, Adam)) and type(rule) in (SGD, Adam) \
                and rule.mask is None:
            parts = [self._train_loop(clients[c], theta[c], buffers[c], index[:, c], active[:, c],
                                      reg_rows(c), cfg, rule, rows(c), progress)
                     for c in chunks]
        else:
            parts = [self._train_batched(clients[c], theta[c], buffers[c], index[:, c],
                                         active[:, c], reg_rows(c), cfg, rule, rows(c), progress)
                     for c in chunks]
        out = _concat(parts, home)
        if not cfg.keep_optimizer_state:
            out.state = {}
        return out

    def problem(self, clients: Tensor, bufs: dict[str, Tensor],
                regularizer: Regularizer | None, split: str = "train",
                scale: Tensor | None = None, full_batch: bool = False) -> LocalProblem:
        r"""The clients' mini-batch objectives on ``split`` as a
        :class:`~pyg_fedgraph.train.LocalProblem` (BatchNorm statistics in
        ``bufs`` are updated in place by every forward in training mode),
        computed as :attr:`execution` says. With a loss ``scale``
        :math:`(S,)` (fp16), gradients are of the scaled loss divided back.
        With ``full_batch``, batches hold ``-1`` past each client's samples
        (:func:`batch_schedule`), which do not enter its loss."""
        reg_fn = regularizer.penalty if regularizer is not None else None
        refs = regularizer.refs if regularizer is not None else ()
        value_and_grad = grad_and_value(self._client_loss)

        def one_hvp(theta: Tensor, b: dict[str, Tensor], xb: Inputs, yb: Tensor,
                    w: Tensor | None, v: Tensor, *r: Tensor) -> Tensor:
            def g(t: Tensor) -> Tensor:
                return torch.func.grad(self._client_loss)(t, b, xb, yb, w, reg_fn, None, *r)
            return torch.func.jvp(g, (theta,), (v,))[1]

        if self.execution == "vmap":
            in_dims = ((0, 0, 0, 0, 0 if full_batch else None, None, None if scale is None else 0)
                       + (0,) * len(refs))
            key = (None if regularizer is None else regularizer.key(), scale is None, len(refs),
                   full_batch)
            batched_grad = self._compiled.get(key)  # filled only when compiling
            if batched_grad is None:
                batched_grad = vmap(value_and_grad, in_dims=in_dims, randomness="different")
                if self.compile_mode is not None:
                    batched_grad = self._compiled[key] = _compiled(batched_grad,
                                                                   self.compile_mode)
            batched_hvp = vmap(one_hvp, in_dims=(0, 0, 0, 0, 0 if full_batch else None, 0)
                               + (0,) * len(refs), randomness="different")

            def grads(theta: Tensor, b: dict[str, Tensor], xb: Inputs, yb: Tensor,
                      w: Tensor | None, sc: Tensor | None, rs: tuple[Tensor, ...]
                      ) -> tuple[Tensor, Tensor]:
                return batched_grad(theta, b, xb, yb, w, reg_fn, sc, *rs)

            def hvps(theta: Tensor, b: dict[str, Tensor], xb: Inputs, yb: Tensor,
                     w: Tensor | None, v: Tensor, rs: tuple[Tensor, ...]) -> Tensor:
                return batched_hvp(theta, b, xb, yb, w, v, *rs)
        else:
            def one_grad(theta_i: Tensor, b: dict[str, Tensor], xb: Inputs, yb: Tensor,
                         w_i: Tensor | None, scale_i: Tensor | None, *r: Tensor
                         ) -> tuple[Tensor, Tensor]:
                # Plain autograd, no function transform: the cheapest per-client gradient.
                with torch.enable_grad():
                    flat = theta_i.detach().requires_grad_()
                    loss = self._client_loss(flat, b, xb, yb, w_i, reg_fn, scale_i, *r)
                    (g,) = torch.autograd.grad(loss, flat)
                return g, loss.detach()

            def grads(theta: Tensor, b: dict[str, Tensor], xb: Inputs, yb: Tensor,
                      w: Tensor | None, sc: Tensor | None, rs: tuple[Tensor, ...]
                      ) -> tuple[Tensor, Tensor]:
                out = [one_grad(theta[i], {k: v[i] for k, v in b.items()}, client_rows(xb, i),
                                yb[i], None if w is None else w[i],
                                None if sc is None else sc[i], *(r[i] for r in rs))
                       for i in range(theta.size(0))]
                return torch.stack([g for g, _ in out]), torch.stack([lo for _, lo in out])

            def hvps(theta: Tensor, b: dict[str, Tensor], xb: Inputs, yb: Tensor,
                     w: Tensor | None, v: Tensor, rs: tuple[Tensor, ...]) -> Tensor:
                return torch.stack([one_hvp(theta[i], {k: u[i] for k, u in b.items()},
                                            client_rows(xb, i), yb[i],
                                            None if w is None else w[i], v[i],
                                            *(r[i] for r in rs))
                                    for i in range(theta.size(0))])

        def weights(batch: Tensor) -> tuple[Tensor, Tensor | None]:
            if not full_batch:
                return batch, None
            return batch.clamp(min=0), (batch >= 0).to(self.device, torch.get_default_dtype())

        def taking() -> Tensor | None:
            r"""The rows of the clients taking the current step, or ``None``
            for all (see :attr:`LocalProblem.active`). A compiled gradient
            keeps every row: a new number of rows would recompile it."""
            active = problem.active
            if active is None or self.compile_mode is not None or bool(active.all()):
                return None
            return active.nonzero().view(-1)

        def on_rows(rows: Tensor | None, batch: Tensor
                    ) -> tuple[Inputs, Tensor, Tensor | None, dict[str, Tensor],
                               Tensor | None, tuple[Tensor, ...]]:
            r"""The inputs of the clients ``rows`` (all when ``None``): their
            batches, buffers, loss scales and regularizer references."""
            if rows is None:
                batch, w = weights(batch)
                xb, yb = self.dataset.batch(split, batch, clients)
                return xb, yb, w, bufs, scale, tuple(refs)
            batch, w = weights(batch[rows.to(batch.device)])
            xb, yb = self.dataset.batch(split, batch, clients[rows.cpu()])
            return (xb, yb, w, {k: v[rows] for k, v in bufs.items()},
                    None if scale is None else scale[rows], tuple(r[rows] for r in refs))

        def grad(theta: Tensor, batch: Tensor) -> tuple[Tensor, Tensor]:
            rows = taking()
            xb, yb, w, b, sc, rs = on_rows(rows, batch)
            if rows is None:
                g, loss = grads(theta, b, xb, yb, w, sc, rs)
            else:  # the others' results are discarded: leave them zero
                g_rows, loss_rows = grads(theta[rows], b, xb, yb, w, sc, rs)
                for k, v in b.items():  # BatchNorm statistics updated by the forward
                    bufs[k][rows] = v
                g = theta.new_zeros(theta.shape).index_copy_(0, rows, g_rows)
                loss = loss_rows.new_zeros(theta.size(0)).index_copy_(0, rows, loss_rows)
            if scale is not None:
                g, loss = g / scale.unsqueeze(1), loss / scale
            return g, loss.detach()

        def hvp(theta: Tensor, batch: Tensor, vector: Tensor) -> Tensor:
            rows = taking()
            xb, yb, w, b, _, rs = on_rows(rows, batch)
            if rows is None:
                return hvps(theta, b, xb, yb, w, vector, rs)
            out = hvps(theta[rows], b, xb, yb, w, vector[rows], rs)
            for k, v in b.items():
                bufs[k][rows] = v
            return theta.new_zeros(theta.shape).index_copy_(0, rows, out)

        counts = (functools.partial(class_counts, self.dataset, clients, split)
                  if self.dataset.task == "classification" else None)
        problem = LocalProblem(grad, hvp, counts)
        return problem

    def _train_batched(self, clients: Tensor, theta: Tensor, buffers: Tensor, index: Tensor,
                       active: Tensor, reg: Regularizer | None, cfg: LocalConfig,
                       rule: LocalRule, carried: dict[str, Tensor] | None,
                       progress: _Progress) -> TrainResult:
        s = clients.numel()
        self.model.train()
        bufs = self._buffer_dict(buffers)
        scale = (torch.full((s,), FP16_INIT_SCALE, device=self.device)
                 if self.precision == "fp16" else None)
        problem = self.problem(clients, bufs, reg, scale=scale, full_batch=cfg.full_batch)
        state = rule.start_state(theta, cfg, carried)
        loss_sum = theta.new_zeros(s)
        k = rule.batches_per_step
        num_steps = index.size(0) // k
        steps = torch.zeros(s, dtype=torch.long)
        # A client steps only when its schedule holds all k batches of the step.
        step_active = active[:num_steps * k].view(num_steps, k, s).all(dim=1)  # (T', S)
        anyone = step_active.any(dim=1).tolist()
        # With every client active (equal sample counts, the usual case) and no fp16
        # skips, the masks below would select every row: take the new values as they are.
        all_active = step_active.all(dim=1).tolist()
        step_batches = index[:num_steps * k].view(num_steps, k, *index.shape[1:])
        # Each client's own number of steps, the length of its schedule.
        total = step_active.sum(dim=0) if cfg.scheduled else None
        for t in range(num_steps):
            progress.step()
            if not anyone[t]:
                continue
            everyone = scale is None and all_active[t]
            act = step_active[t]
            act_dev = act.to(self.device)
            old = {name: v.clone() for name, v in bufs.items()} if bufs and not everyone else {}
            step_cfg = cfg
            if total is not None:  # step `steps[i]` of client i's own schedule
                step_cfg = cfg.with_lr(
                    (cfg.lr * cfg.lr_factor(steps, total)).to(theta.device, theta.dtype)
                    .unsqueeze(1))
            # Clients that wait this step are left out of the computation (their results
            # would be discarded below).
            problem.active = None if all_active[t] else act_dev
            new, new_state, loss = rule.step(problem, theta, state,
                                             list(step_batches[t].unbind(0)), step_cfg)
            if everyone:
                theta, state = new, new_state
                loss_sum += loss
                steps += 1
                continue
            if scale is not None:
                # fp16: a client whose scaled gradient overflowed skips the step and halves
                # its scale; the others grow theirs slowly (torch.amp.GradScaler's rule).
                finite = torch.isfinite(new).all(dim=1) & torch.isfinite(loss)
                act_dev = act_dev & finite
                scale.copy_(torch.where(finite, scale * FP16_GROWTH, scale * 0.5))
            theta = torch.where(act_dev.unsqueeze(1), new, theta)
            state = {name: _keep_inactive(act_dev, v, state.get(name))
                     for name, v in new_state.items()}
            loss_sum += torch.where(act_dev, loss, loss_sum.new_zeros(()))
            steps += act_dev.cpu().to(steps.dtype)
            for name in bufs:  # inactive clients keep their BatchNorm statistics
                bufs[name] = _keep_inactive(act_dev, bufs[name], old[name])
        params, extra = rule.finish(theta, state)
        return TrainResult(params, self._flat_buffers(bufs, s),
                           loss_sum / steps.to(loss_sum.device).clamp(min=1), steps, extra,
                           rule.kept_state(state))

    def _train_loop(self, clients: Tensor, theta: Tensor, buffers: Tensor, index: Tensor,
                    active: Tensor, reg: Regularizer | None, cfg: LocalConfig, rule: LocalRule,
                    carried: dict[str, Tensor] | None, progress: _Progress) -> TrainResult:
        s = clients.numel()
        out_p, out_b, losses, kept = [], [], [], []
        k = rule.batches_per_step
        for i in range(s):  # reference implementation: deliberately one client at a time
            model = copy.deepcopy(self.model)
            self.layout.load_into(model, theta[i], buffers[i])
            model.train()
            opt = _torch_optimizer(model, cfg)
            if carried is not None:
                _load_optimizer_state(opt, model, self.layout, rule,
                                      {key: v[i] for key, v in carried.items()})
            factors = cfg.lr_factors(int(active[:, i].sum())) if cfg.scheduled else None
            total, taken = 0.0, 0
            for t in range(index.size(0)):
                if t % k == 0:
                    progress.step()
                if not bool(active[t, i]):
                    continue
                if factors is not None:  # this client's own clock
                    opt.param_groups[0]["lr"] = cfg.lr * factors[taken]
                taken += 1
                rows = index[t, i:i + 1]
                if cfg.full_batch:  # the client's samples, without the fillers of others
                    rows = rows[:, rows[0] >= 0]
                xb, yb = self.dataset.batch("train", rows, clients[i:i + 1])
                opt.zero_grad()
                with autocast(self.device, self.precision):
                    out = model(*model_args(xb, 0))
                loss = self.objective.loss(out.float(), yb[0]).mean()
                if reg is not None:
                    flat = torch.cat([p.reshape(-1) for p in model.parameters()])
                    loss = loss + reg.penalty(flat, *(r[i] for r in reg.refs))
                if self.local_penalty is not None:
                    loss = loss + self.local_penalty(dict(model.named_parameters()))
                loss.backward()
                opt.step()
                total += float(loss.detach())
            out_p.append(self.layout.flatten(model))
            out_b.append(self.layout.flatten_buffers(model) if self.layout.num_buffers
                         else theta.new_zeros(0))
            losses.append(total)
            kept.append(_optimizer_state(opt, model, self.layout, rule, cfg, theta[i]))
        steps = active.sum(0)
        state = {key: torch.stack([d[key] for d in kept]) for key in kept[0]} if kept else {}
        return TrainResult(torch.stack(out_p), torch.stack(out_b),
                           torch.tensor(losses, dtype=theta.dtype, device=theta.device)
                           / steps.to(theta.device).clamp(min=1), steps, state=state)

    # ------------------------------------------------------------- evaluate
    @torch.no_grad()
    def evaluate(self, clients: Tensor, params: Tensor, buffers: Tensor | None = None,
                 split: str = "test") -> dict[str, Tensor]:
        r"""Per-client metrics on ``split``: ``{name: (S,)}`` (NaN for a client
        with no samples in that split), on the device of ``params``. Each is
        the mean over the client's samples, or the weighted mean when the split
        carries evaluation weights (:attr:`~pyg_fedgraph.data.ClientSplit.weight`)."""
        clients = clients.to(torch.long).cpu()
        buffers = self._check(clients, params, buffers)
        home = params.device
        parts = [self._evaluate(clients[c], params[c].to(self.device),
                                buffers[c].to(self.device), split)
                 for c in self.chunks(clients.numel())]
        if not parts:
            return {k: params.new_zeros(0) for k in self.objective.all_metrics()}
        return {k: torch.cat([p[k] for p in parts]).to(home) for k in parts[0]}

    def _evaluate(self, clients: Tensor, params: Tensor, buffers: Tensor, split: str
                  ) -> dict[str, Tensor]:
        self.model.eval()
        bufs = self._buffer_dict(buffers)
        counts = self.dataset.num_samples(split)[clients]
        fns = self.objective.all_metrics()
        sums = {k: params.new_zeros(clients.numel()) for k in fns}
        n_max = int(counts.max()) if counts.numel() else 0
        counts_dev = counts.to(self.device)
        fwd = self._evaluation_forward()
        # Splits with evaluation weights (ClientSplit.weight) report weighted means.
        weighted = False
        denom = params.new_zeros(clients.numel())
        for start in range(0, n_max, self.eval_batch_size):
            if self._step_hooks:
                self._advance("evaluate", start // self.eval_batch_size,
                              -(-n_max // self.eval_batch_size))
            pos = torch.arange(start, min(start + self.eval_batch_size, n_max))
            valid = pos.unsqueeze(0) < counts.unsqueeze(1)  # (S, b)
            index = torch.where(valid, pos.unsqueeze(0), torch.zeros_like(pos).unsqueeze(0))
            xb, yb = self.dataset.batch(split, index, clients)
            wb = self.dataset.batch_weight(split, index, clients)
            valid_dev = valid.to(self.device)
            w = (valid_dev.to(params.dtype) if wb is None
                 else wb.to(self.device, params.dtype) * valid_dev)
            weighted = weighted or wb is not None
            denom += w.sum(1)
            out = fwd(params, bufs, xb)
            for k, fn in fns.items():
                vals = vmap(fn)(out, yb)
                sums[k] += (vals * w).sum(1)
        if not weighted:
            denom = counts_dev.to(params.dtype)
        return {k: torch.where((counts_dev > 0) & (denom > 0), v / denom.clamp(min=1e-30),
                               torch.nan)
                for k, v in sums.items()}

    def _evaluation_forward(self) -> Callable[..., Tensor]:
        r"""The batched forward pass of :meth:`evaluate`: all clients of a
        chunk at once under ``"vmap"``, compiled when the trainer compiles
        (built once, like the gradients)."""
        if self.execution != "vmap":
            return self._forward_each
        if self.compile_mode is None:
            return vmap(self._forward)
        fwd = self._compiled.get(("forward",))
        if fwd is None:
            fwd = self._compiled[("forward",)] = _compiled(vmap(self._forward),
                                                           self.compile_mode)
        return fwd

    def _forward_each(self, params: Tensor, bufs: dict[str, Tensor], xb: Inputs) -> Tensor:
        return torch.stack([self._forward(params[i], {k: v[i] for k, v in bufs.items()},
                                          client_rows(xb, i))
                            for i in range(params.size(0))])

    def loss_gradient(self, clients: Tensor, params: Tensor, buffers: Tensor | None = None,
                      split: str = "val") -> tuple[Tensor, Tensor]:
        r"""Gradient of each client's mean loss on ``split`` at its own
        parameters, :math:`g_i = \nabla_{\theta} L_i(\theta_i)` :math:`(S, D)`,
        and the losses :math:`(S,)`. Used for pFedGAT's exact feedback."""
        clients = clients.to(torch.long).cpu()
        buffers = self._check(clients, params, buffers)
        home = params.device
        parts = [self._loss_gradient(clients[c], params[c].to(self.device),
                                     buffers[c].to(self.device), split)
                 for c in self.chunks(clients.numel())]
        if not parts:
            return params.new_zeros(0, params.size(1)), params.new_zeros(0)
        return (torch.cat([g for g, _ in parts]).to(home),
                torch.cat([lo for _, lo in parts]).to(home))

    def _loss_gradient(self, clients: Tensor, params: Tensor, buffers: Tensor, split: str
                       ) -> tuple[Tensor, Tensor]:
        self.model.eval()
        bufs = self._buffer_dict(buffers)
        counts = self.dataset.num_samples(split)[clients]
        n_max = int(counts.max()) if counts.numel() else 0
        pos = torch.arange(n_max)
        valid = pos.unsqueeze(0) < counts.unsqueeze(1)
        index = torch.where(valid, pos.unsqueeze(0), torch.zeros_like(pos).unsqueeze(0))
        xb, yb = self.dataset.batch(split, index, clients)
        w = (valid.to(params.dtype) / counts.clamp(min=1).to(params.dtype).unsqueeze(1)
             ).to(self.device)

        def loss_fn(theta: Tensor, b: dict[str, Tensor], x: Inputs, y: Tensor,
                    wi: Tensor) -> Tensor:  # of the flat parameters, see _client_loss
            return (self.objective.loss(self._forward(theta, b, x), y) * wi).sum()

        one = grad_and_value(loss_fn)
        if self.execution == "vmap":
            return vmap(one)(params, bufs, xb, yb, w)
        out = [one(params[i], {k: v[i] for k, v in bufs.items()}, client_rows(xb, i), yb[i], w[i])
               for i in range(params.size(0))]
        return torch.stack([g for g, _ in out]), torch.stack([lo for _, lo in out])

    def __repr__(self) -> str:
        extra = "" if self.device.type == "cpu" else f", device={self.device}"
        return (f"{self.__class__.__name__}({type(self.model).__name__}, "
                f"clients={self.dataset.num_clients}, D={self.layout.num_params}{extra})")


def _to_channels_last(params: dict[str, Tensor], names: frozenset[str]) -> dict[str, Tensor]:
    r"""``params`` with the tensors named in ``names`` copied into
    channels-last memory format (``clone``, not ``contiguous``: a weight with
    one input channel counts as contiguous in both formats and would keep its
    strides, and the convolution would then pick the plain layout)."""
    return {k: v.clone(memory_format=torch.channels_last) if k in names else v
            for k, v in params.items()}


def _concat(parts: list[TrainResult], device: torch.device) -> TrainResult:
    r"""The chunks' results in order, on ``device``."""
    if len(parts) == 1:
        p = parts[0]
        return TrainResult(p.params.to(device), p.buffers.to(device), p.loss.to(device),
                           p.steps, {k: v.to(device) for k, v in p.extra.items()},
                           {k: v.to(device) for k, v in p.state.items()})
    if not parts:
        raise ValueError("no clients to train")
    return TrainResult(torch.cat([p.params for p in parts]).to(device),
                       torch.cat([p.buffers for p in parts]).to(device),
                       torch.cat([p.loss for p in parts]).to(device),
                       torch.cat([p.steps for p in parts]),
                       {k: torch.cat([p.extra[k] for p in parts]).to(device)
                        for k in parts[0].extra},
                       {k: torch.cat([p.state[k] for p in parts]).to(device)
                        for k in parts[0].state})


def _keep_inactive(active: Tensor, new: Tensor, old: Tensor | None) -> Tensor:
    r"""``new`` for active clients (rows), ``old`` for the others."""
    if old is None:
        return new
    return torch.where(active.view((-1,) + (1,) * (new.dim() - 1)), new, old)


class _Progress:
    r"""Counts the local steps of one :meth:`ClientTrainer.train` call for the
    trainer's step hooks (nothing to do without hooks)."""

    def __init__(self, trainer: ClientTrainer, phase: str, total: int) -> None:
        self.trainer, self.phase, self.total, self.done = trainer, phase, total, 0

    def step(self) -> None:
        if self.trainer._step_hooks:
            self.trainer._advance(self.phase, self.done, self.total)
        self.done += 1


def _torch_optimizer(model: nn.Module, cfg: LocalConfig) -> torch.optim.Optimizer:
    r"""The reference loop's optimizer: :class:`torch.optim.SGD` or
    :class:`torch.optim.Adam`, as ``cfg`` says."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                eps=cfg.eps, weight_decay=cfg.weight_decay, foreach=False)
    return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                           weight_decay=cfg.weight_decay, nesterov=cfg.nesterov)


#: The torch optimizer's per-parameter state entry of each flat rule's entry.
_TORCH_STATE = {"momentum": "momentum_buffer", "exp_avg": "exp_avg",
                "exp_avg_sq": "exp_avg_sq"}


def _load_optimizer_state(opt: torch.optim.Optimizer, model: nn.Module, layout: ParamLayout,
                          rule: LocalRule, carried: dict[str, Tensor]) -> None:
    r"""One client's kept flat state (``rule``'s entries) into ``opt``."""
    named = dict(model.named_parameters())
    if isinstance(rule, SGD) and not bool(carried.get("started", torch.zeros(())).item()):
        return  # torch's momentum buffer starts empty
    for key, torch_key in _TORCH_STATE.items():
        if key not in carried:
            continue
        for name, t in layout.unflatten(carried[key]).items():
            opt.state[named[name]][torch_key] = t.detach().clone()
    if "step" in carried:
        for name in layout.param_names:
            opt.state[named[name]]["step"] = torch.tensor(float(carried["step"]))


def _optimizer_state(opt: torch.optim.Optimizer, model: nn.Module, layout: ParamLayout,
                     rule: LocalRule, cfg: LocalConfig, like: Tensor) -> dict[str, Tensor]:
    r"""One client's state in ``opt`` as the flat entries ``rule`` keeps
    under ``cfg`` (zeros where torch holds none yet)."""
    named = dict(model.named_parameters())
    out: dict[str, Tensor] = {}
    for key in rule.kept_state(rule.init_state(like.unsqueeze(0), cfg)):
        if key == "started":
            out[key] = torch.tensor(bool(opt.state), device=like.device)
        elif key == "step":
            first = opt.state.get(named[layout.param_names[0]], {})
            out[key] = torch.tensor(float(first.get("step", 0.0)), dtype=torch.float64,
                                    device=like.device)
        else:
            parts = [opt.state.get(named[name], {}).get(_TORCH_STATE[key])
                     for name in layout.param_names]
            if all(p is None for p in parts):
                out[key] = torch.zeros_like(like)
            else:
                out[key] = torch.cat([p.reshape(-1) if p is not None
                                      else torch.zeros(named[name].numel(), device=like.device)
                                      for p, name in zip(parts, layout.param_names, strict=True)])
    return out
