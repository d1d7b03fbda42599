"""In-process simulation of a federation: the simulated clients of a round
train in one batched computation, over the shared round engine."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from pyg_fedgraph.attacks import Attack, triggered_test_split
from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.objective import Objective
from pyg_fedgraph.engine.history import History, RoundRecord
from pyg_fedgraph.engine.rounds import (
    STATE_FORMAT,
    Rejection,
    RoundEngine,
    sample_clients,
    snapshot,
)
from pyg_fedgraph.engine.validation import (
    DEFAULT_MAX_NORM,
    RejectPolicy,
    UpdateValidator,
    check_dataset,
)
from pyg_fedgraph.simulation.config import SIM_SCHEMA, TestAt
from pyg_fedgraph.strategies.base import Strategy
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.jobs import (
    ClientStart,
    EvaluatePlan,
    FineTune,
    evaluate_clients,
    finetuned,
    run_plan,
)
from pyg_fedgraph.train.private import PrivateParameters, private_prefixes
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.typing import CompileMode, ExecutionName, Precision
from pyg_fedgraph.utils.device import resolve_device
from pyg_fedgraph.utils.recovery import RECOVERY_KEYS
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["Simulator", "sample_clients"]

log = logging.getLogger(__name__)

Callback = Callable[["Simulator", RoundRecord], None]


class Simulator:
    r"""Runs a strategy on a federated dataset, all clients in one process.

    The in-process transport of the :class:`~pyg_fedgraph.engine.RoundEngine`,
    which owns the server side (sampling, the strategy, checks of uploads, the
    client table, the evaluation protocol). Each round the engine samples
    clients and asks the strategy for their
    :class:`~pyg_fedgraph.train.jobs.TrainPlan`; the simulator carries the
    plan out for all of them in one batched computation
    (:func:`~pyg_fedgraph.train.jobs.run_plan` on a
    :class:`~pyg_fedgraph.train.ClientTrainer`, the same code a Flower client
    runs for itself), and hands the uploads back to the engine. Every client's
    personalized model is then evaluated on its own validation and test
    split; the reported result follows the papers' protocol: the mean test
    metric at the round of best mean validation metric.

    The simulator plays the clients, so it keeps their own state: each
    client's local model and buffers (:attr:`local_params`,
    :attr:`local_buffers`), which the clients continue from when a strategy
    sends no starting model and which are evaluated when it personalizes
    nothing.

    Randomness: every stream (sampling, each client's batch order, dropout,
    attacks, fine-tuning) is derived from ``(seed, purpose, round, client)``
    (:mod:`pyg_fedgraph.utils.seeds`), so a run is reproducible bit for bit on
    CPU and a client draws the same batches here as on a Flower node.

    **Robustness.** Each round a ``dropout`` share of the sampled clients
    (each independently) returns nothing: they keep their previous local
    model and the strategy only sees the survivors; if nobody survives, the
    round skips aggregation but is still evaluated. Uploads are checked
    before aggregation (:class:`~pyg_fedgraph.engine.UpdateValidator`:
    NaN/Inf, wrong length, absurd norm); a rejected client is left out of the
    aggregation and keeps its previous local model (``reject_policy="raise"``
    stops the run instead). With an :class:`~pyg_fedgraph.attacks.Attack`,
    its malicious clients (chosen once from ``seed``) upload poisoned
    parameters (model attacks, applied before the checks) or train on
    corrupted data (data attacks, applied once here); :attr:`history` then
    averages over the benign clients only, as the papers report.

    **Resuming.** :meth:`state_dict` is a snapshot of the whole run;
    :meth:`load_state_dict` on a simulator built with the same settings
    continues bit for bit as if the run had never stopped.

    Args:
        dataset (FederatedDataset): the clients' data.
        model (torch.nn.Module): the client architecture; its current
            parameters are the common initial model.
        strategy (Strategy): the server algorithm.
        rounds (int, optional): communication rounds (default: ``50``).
        sample_fraction (float, optional): share of clients sampled per round
            (default: the strategy's
            :meth:`~pyg_fedgraph.strategies.Strategy.default_sample_fraction`,
            the paper's setting: all clients for most, 5 for Panacea, 30%
            for FedCEDAR).
        local (LocalConfig, optional): local SGD settings.
        eval_every (int, optional): evaluate every k rounds; the last round
            is always evaluated (default: ``1``).
        seed (int, optional): seed of all randomness (default: ``0``).
        parallel (bool, optional): train clients in one batched computation
            (default: ``True``); ``False`` runs the per-client reference loop.
        objective (Objective, optional): loss and metrics (default: the
            dataset's :attr:`~pyg_fedgraph.data.FederatedDataset.objective`,
            e.g. the masked loss of the traffic datasets).
        held_out (torch.Tensor, optional): clients that never train (novel
            clients); evaluated with the models the strategy generates for them.
        callbacks (list, optional): ``fn(simulator, record)`` after each
            evaluated round.
        dropout (float, optional): probability that a sampled client returns
            nothing in a round (default: ``0.0``).
        attack (Attack, optional): malicious clients and what they do
            (default: ``None``).
        reject_policy (str, optional): ``"drop"`` bad uploads (logged) or
            ``"raise"`` a :class:`ValueError` (default: ``"drop"``).
        max_update_norm (float, optional): uploads whose update norm
            :math:`\|\theta_i - \theta_i^{start}\|` exceeds it are rejected;
            ``None`` disables the bound (default: ``1e6``).
        device (str or torch.device, optional): where local training and
            evaluation run: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``,
            ``"mps"`` (default: where the dataset's samples are, usually the
            CPU). The dataset and model move there once.
        state_device (str or torch.device, optional): where the client table,
            the clients' own models and the strategy live (default:
            ``device``); ``"cpu"`` keeps an :math:`N \times D` table larger than
            the device's memory on the host (pinned for CUDA) and moves only
            the sampled clients.
        parallel_clients (int, optional): clients per batched computation
            (default: all on the CPU, an estimate that fits on a GPU; see
            :class:`~pyg_fedgraph.train.ClientTrainer`).
        execution (str, optional): ``"auto"`` (the measured table of
            :mod:`pyg_fedgraph.train.execution`), ``"vmap"`` or ``"loop"``.
        precision (str, optional): ``"fp32"``, ``"bf16"`` or ``"fp16"``
            autocast for local training and evaluation (default: ``"fp32"``).
        compile (bool or str, optional): compile the batched local gradient
            and the evaluation's batched forward pass
            with :func:`torch.compile` (``--set compile=true``, or a mode:
            ``--set compile=reduce-overhead`` records CUDA graphs on a GPU;
            needs the ``"vmap"`` execution; see
            :class:`~pyg_fedgraph.train.ClientTrainer`) (default: :obj:`False`).
        private (str or sequence of str, optional): parameter-name prefixes
            of the part of every client's model that stays on the client
            (:mod:`pyg_fedgraph.train.private`): the strategy, the client
            table and every upload see the rest only; :attr:`local_params`
            keeps whole models (default: the model's ``private_parameters``
            attribute, usually none).
        test_at (str, optional): where the test split is evaluated:
            ``"every"`` evaluated round (default), or ``"best"``, only where
            the reported figures read it. Then an evaluated round evaluates
            the validation split and records NaN test metrics, and the
            simulator keeps the models it evaluated at the round of best mean
            validation (``History.best_round``) and, per client, at the
            client's own best validation round (two :math:`N \times D`
            tables, in :meth:`state_dict`); the last round (:attr:`rounds`)
            is evaluated in full, and :meth:`complete_test` then evaluates the
            kept models on the test split and writes their values into the
            records of those rounds. The summary's ``test``, ``test_final``
            and per-client-best figures, the held-out clients' included, are
            those of ``"every"``, bit for bit, for the cost of the validation
            split alone at the other rounds (a third of it on METR-LA, whose
            test split is twice its validation split); a round's mean test
            value is NaN but at the best and the last round (its record's
            ``pending`` names the clients not evaluated); a run stopped before
            its last round reports NaN for a figure still owed a test value,
            until :meth:`complete_test`. A strategy with an evaluator of
            its own (``EvaluatePlan.evaluator``) is evaluated in full at
            every round.
    """

    def __init__(self, dataset: FederatedDataset, model: nn.Module, strategy: Strategy, *,
                 rounds: int = 50,
                 sample_fraction: float | None = None,
                 local: LocalConfig | None = None,
                 eval_every: int = 1, seed: int = 0,
                 parallel: bool = True, objective: Objective | None = None,
                 held_out: Tensor | None = None,
                 callbacks: Sequence[Callback] = (), dropout: float = 0.0,
                 attack: Attack | None = None, reject_policy: RejectPolicy = "drop",
                 max_update_norm: float | None = DEFAULT_MAX_NORM,
                 device: str | torch.device | None = None,
                 state_device: str | torch.device | None = None,
                 parallel_clients: int | None = None,
                 execution: ExecutionName = "auto", precision: Precision = "fp32",
                 compile: bool | CompileMode = False,
                 private: str | Sequence[str] | None = None,
                 test_at: TestAt = "every") -> None:
        # The checks of the declared settings, the same the command line makes.
        rounds = SIM_SCHEMA["rounds"].check(rounds)
        dropout = SIM_SCHEMA["dropout"].check(dropout)
        for name, value in (("sample_fraction", sample_fraction), ("eval_every", eval_every),
                            ("parallel", parallel), ("parallel_clients", parallel_clients),
                            ("execution", execution), ("compile", compile),
                            ("test_at", test_at)):
            SIM_SCHEMA[name].check(value)
        if attack is not None and not isinstance(attack, Attack):
            raise TypeError(f"attack must be a pyg_fedgraph.attacks.Attack, got "
                            f"{type(attack).__name__}")
        n = dataset.num_clients
        held = (torch.zeros(0, dtype=torch.long) if held_out is None
                else torch.as_tensor(held_out, dtype=torch.long).unique())
        if held.numel() and int(held.max()) >= n:
            raise ValueError(f"held_out names client {int(held.max())}, the dataset has {n} "
                             f"clients")
        trainable = torch.ones(n, dtype=torch.bool)
        trainable[held] = False
        self.seed = seed
        self.callbacks = list(callbacks)
        #: Where the test split is evaluated (``"every"`` or ``"best"``).
        self.test_at: TestAt = test_at
        # test_at="best": the models evaluated at the best rounds (see complete_test),
        # and those of the round just evaluated until the history has its record.
        self._kept: dict[str, Tensor] = {}
        self._evaluated: tuple[Tensor, Tensor] | None = None
        # The models the round just evaluated, while its callbacks run
        # (personalized_models gives them instead of rebuilding them).
        self._round_models: tuple[Tensor, Tensor] | None = None
        self.dropout = float(dropout)
        self.attack = attack
        self.malicious = torch.zeros(0, dtype=torch.long)
        self._trigger: Tensor | None = None
        if attack is not None:
            self.malicious = attack.select(trainable.nonzero().view(-1),
                                           make_generator(seed, "malicious"))
            if attack.kind == "backdoor":
                self._trigger = attack.trigger_for(dataset)
            dataset = attack.poison_dataset(dataset, self.malicious,
                                            make_generator(seed, "data-attack"))
            log.info("%s attack by clients %s", attack.kind, self.malicious.tolist())
        benign = trainable.clone()
        benign[self.malicious] = False
        self.benign = benign.nonzero().view(-1)
        check_dataset(dataset)
        self.trainer = ClientTrainer(model, dataset, objective, local or LocalConfig(),
                                     device=device, parallel_clients=parallel_clients,
                                     execution=execution, precision=precision,
                                     compile=compile, parallel=parallel)
        #: Where local training and evaluation run.
        self.device = self.trainer.device
        #: Where the client table, the clients' own models and the strategy live.
        self.state_device = self.device if state_device is None else resolve_device(
            state_device)
        self.dataset = self.trainer.dataset
        self.layout = self.trainer.layout
        prefixes = private_prefixes(model, private)
        #: The private part of the clients' models (``None``: all is shared).
        self.private = PrivateParameters(self.layout, prefixes) if prefixes else None
        if self.private is not None and not strategy.supports_private_parameters:
            raise ValueError(f"strategy {strategy.name!r} works on whole models and cannot "
                             f"leave parameters {list(prefixes)} private to the clients")
        init = self.layout.flatten(model).to(self.state_device)
        # The simulated clients' own state: each client's local model and buffers
        # (the whole model, its private part included).
        self.local_params = self._host(init.unsqueeze(0).repeat(n, 1))
        self.local_buffers = self._host(self.trainer.initial_buffers(n).to(self.state_device))
        #: The optimizer state each client keeps between its local runs
        #: (``keep_optimizer_state``): name -> :math:`(N, \ldots)`, made when a
        #: training first returns some.
        self.optimizer_state: dict[str, Tensor] = {}
        place = self.state_device
        self.engine = RoundEngine(
            strategy, layout=self.layout if self.private is None else self.private.shared_layout,
            init_params=init if self.private is None else self.private.share(init),
            num_samples=dataset.num_samples("train"), task=dataset.task,
            objective=self.trainer.objective, local=self.trainer.config,
            edge_index=None if dataset.edge_index is None else dataset.edge_index.to(place),
            edge_weight=None if dataset.edge_weight is None else dataset.edge_weight.to(place),
            held_out=held, sample_fraction=sample_fraction, seed=seed, rounds=rounds,
            eval_every=eval_every, eval_clients=self.benign, reject_policy=reject_policy,
            max_update_norm=max_update_norm, device=place)

    def _host(self, t: Tensor) -> Tensor:
        # A table kept on the host for a GPU run is pinned: its rows copy to the device
        # without staging.
        if self.state_device.type == "cpu" and self.device.type == "cuda":
            return t.pin_memory()
        return t

    @property
    def parallel(self) -> bool:
        r"""Whether clients train batched (:obj:`False`: the reference loop)."""
        return self.trainer.parallel

    @property
    def execution(self) -> str:
        r"""How a chunk of clients computes (``"vmap"`` or ``"loop"``)."""
        return self.trainer.execution

    @property
    def parallel_clients(self) -> int | None:
        r"""Clients per batched computation (``None``: all sampled clients)."""
        return self.trainer.parallel_clients

    # ------------------------------------------------- views of the engine
    @property
    def strategy(self) -> Strategy:
        return self.engine.strategy

    @property
    def round(self) -> int:
        return self.engine.round

    @property
    def rounds(self) -> int:
        assert self.engine.rounds is not None
        return self.engine.rounds

    @rounds.setter
    def rounds(self, value: int) -> None:
        self.engine.rounds = SIM_SCHEMA["rounds"].check(value)

    @property
    def sample_fraction(self) -> float:
        return self.engine.sample_fraction

    @property
    def eval_every(self) -> int:
        return self.engine.eval_every

    @property
    def held_out(self) -> Tensor:
        return self.engine.held_out

    @property
    def train_clients(self) -> Tensor:
        return self.engine.trainable

    @property
    def history(self) -> History:
        return self.engine.history

    @property
    def novel_history(self) -> History | None:
        return self.engine.novel_history

    @property
    def validator(self) -> UpdateValidator:
        return self.engine.validator

    @property
    def rejections(self) -> list[Rejection]:
        r"""Every upload rejected so far (round, client, reason), evaluated
        round or not: :attr:`RoundEngine.rejections
        <pyg_fedgraph.engine.RoundEngine.rejections>`."""
        return self.engine.rejections

    def replied_clients(self, rnd: int) -> Tensor:
        r"""The clients that trained and replied in round ``rnd`` :math:`(K,)`:
        the engine's sample less those that dropped out, both drawn from the
        run's seeded streams, so any round's set is known without running it
        (their uploads may still be rejected: :attr:`rejections`)."""
        sampled, rows = self._sampled_and_replied(rnd)
        return sampled[rows]

    def _sampled_and_replied(self, rnd: int) -> tuple[Tensor, Tensor]:
        r"""Round ``rnd``'s seeded sample :math:`(S,)` and the rows of it that
        did not drop out :math:`(K,)`."""
        sampled = self.engine.sample(rnd)
        return sampled, self._survivors(rnd, sampled.numel())

    # ---------------------------------------------------------------- rounds
    def run(self, rounds: int | None = None) -> History:
        r"""Runs up to round ``rounds`` (default: the constructor's) and
        returns the :class:`History`; calling it again continues. A plain
        loop of :meth:`step`: for a progress display, checkpoints, Ctrl-C
        and resuming, run the simulator with
        :class:`~pyg_fedgraph.experiment.Runner`."""
        last = self.rounds if rounds is None else rounds
        while self.round < last:
            self.step()
        return self.history

    def step(self) -> RoundRecord | None:
        r"""One communication round; returns its record when it was evaluated
        (after the round :attr:`callbacks` have seen it, with the round's
        evaluated models at hand: :meth:`personalized_models`)."""
        t0 = time.perf_counter()
        engine = self.engine
        rnd = engine.round + 1
        # Clients that drop out return nothing and keep their local model.
        sampled, rows = self._sampled_and_replied(rnd)
        plan = engine.configure_train(rnd, sampled)
        if rows.numel() != sampled.numel():
            plan = plan.select(rows)
        clients = sampled[rows]
        if clients.numel():
            local = self.local_params[clients]
            if self.private is None:
                work, start = plan, local if plan.params is None else plan.params
            else:  # the server's shared part completed with each client's private one
                work, start = self.private.lift_plan(plan, local, local)
            kept = {k: v[clients] for k, v in self.optimizer_state.items()}
            result = run_plan(self.trainer, work,
                              ClientStart(clients, clients, start, self.local_buffers[clients],
                                          local, kept or None),
                              seed=self.seed, rnd=rnd)
            if self.private is None:
                trained, started, outputs = result.params, result.start, result.outputs
            else:
                trained, started, outputs = self.private.share_result(result)
            uploaded = self._poison(rnd, clients, trained, started)
            update = engine.aggregate_train(rnd, clients, uploaded, started, outputs,
                                            result.loss)
            # Rejected clients keep their previous local model, like dropped ones.
            accepted = update.accepted.nonzero().view(-1)
            self.local_params[clients[accepted]] = result.params[accepted]
            self.local_buffers[clients[accepted]] = result.buffers[accepted]
            self._keep_optimizer_state(clients[accepted], result.optimizer_state, accepted)
        else:
            nothing = self.local_params.new_zeros(0, engine.layout.num_params)
            update = engine.aggregate_train(rnd, clients, nothing, nothing)
        if not engine.should_evaluate(rnd):
            return None
        val, test = self._evaluate_round(rnd)
        try:
            record = engine.record(rnd, val, test, train_loss=update.loss,
                                   seconds=time.perf_counter() - t0,
                                   num_sampled=sampled.numel(),
                                   extra={"num_dropped": sampled.numel() - clients.numel(),
                                          "num_rejected": clients.numel() - update.num_accepted})
            if self._keep_evaluated() and rnd < self.rounds:
                # No client's test values evaluated (complete_test fills some in later).
                record.pending = torch.ones(self.dataset.num_clients, dtype=torch.bool)
            if self._kept and rnd >= self.rounds:
                self.complete_test()
            for cb in self.callbacks:
                cb(self, record)
        finally:  # the round's models are for its callbacks only
            self._round_models = None
        return record

    def _keep_optimizer_state(self, clients: Tensor, state: dict[str, Tensor],
                              rows: Tensor) -> None:
        r"""Stores rows ``rows`` of a training's kept optimizer state as the
        state of ``clients`` (whose update was accepted)."""
        n = self.dataset.num_clients
        for key, value in state.items():
            table = self.optimizer_state.get(key)
            if table is None:
                table = self.optimizer_state[key] = self._host(value.new_zeros(
                    (n, *value.shape[1:])).to(self.state_device))
            table[clients] = value[rows].to(table)

    def _survivors(self, rnd: int, num_sampled: int) -> Tensor:
        r"""Positions among the sampled clients of those that do not drop out."""
        if self.dropout == 0.0:
            return torch.arange(num_sampled)
        draw = torch.rand(num_sampled, generator=make_generator(self.seed, "dropout", rnd))
        return (draw >= self.dropout).nonzero().view(-1)

    def _poison(self, rnd: int, clients: Tensor, params: Tensor, start: Tensor) -> Tensor:
        r"""What ``clients`` upload: their trained ``params``, poisoned for
        the malicious ones under a model attack."""
        if self.attack is None or not self.attack.poisons_model or self.malicious.numel() == 0:
            return params
        bad = torch.isin(clients, self.malicious)
        if not bool(bad.any()):
            return params
        out = params.clone()
        out[bad] = self.attack.poison_params(
            params[bad], start[bad],
            generator=make_generator(self.seed, "attack", rnd)).to(out.dtype)
        return out

    # ------------------------------------------------------------- evaluate
    def _evaluation_start(self) -> tuple[ClientStart, EvaluatePlan]:
        everyone = torch.arange(self.dataset.num_clients)
        plan = self.engine.configure_evaluate(everyone)
        if self.private is not None:
            plan, params = self.private.lift_evaluate(plan, self.local_params)
        else:
            params = self.local_params if plan.params is None else plan.params
        return ClientStart(everyone, everyone, params, self.local_buffers,
                           self.local_params), plan

    def _evaluated_models(self, start: ClientStart, plan: EvaluatePlan
                          ) -> tuple[Tensor, Tensor]:
        r"""The models ``plan`` evaluates from ``start``: after the strategy's
        choice of model and fine-tuning, as :func:`evaluate_clients` makes them."""
        if plan.start_job is not None:
            params, _ = plan.start_job.prepare(self.trainer, start, seed=self.seed,
                                               rnd=self.round)
            start = dataclasses.replace(start, params=params)
        return finetuned(self.trainer, start, plan.finetune, seed=self.seed, rnd=self.round)

    def personalized_models(self) -> tuple[Tensor, Tensor]:
        r"""Every client's model as it is evaluated now: flat parameters
        :math:`(N, D)` and buffers, after the strategy's choice of model and
        fine-tuning, if any. Called by a round callback, the models the
        round has just evaluated (copies; not built again: a strategy that
        fine-tunes at evaluation, such as FedAvg-FT, does not fine-tune a
        second time, and they are exactly the models of the round's
        figures)."""
        if self._round_models is not None:
            params, buffers = self._round_models
        else:
            params, buffers = self._evaluated_models(*self._evaluation_start())
        return params.clone(), buffers.clone()

    def finetuned_models(self, finetune: FineTune | None) -> tuple[Tensor, Tensor]:
        r"""The models the strategy sends its clients for evaluation now
        (after its choice of model, if any), fine-tuned locally by
        ``finetune`` in place of the strategy's own fine-tuning (``None``:
        not fine-tuned): flat parameters :math:`(N, D)` and buffers.
        Fine-tuning draws its batches as the strategy's does (order
        ``(seed, "finetune", round, client)``), so
        ``finetuned_models(FineTune())`` is FedAvg-FT's evaluated models
        under FedAvg (FedAvg-FT's default fine-tuning, for a model whose
        training draws nothing from the global random stream, such as one
        without dropout: FedAvg-FT's fine-tuning at every evaluation then
        leaves its training FedAvg's). It does not change the run: it draws
        from the global random streams inside :func:`torch.random.fork_rng`.

        Example:
            >>> from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
            >>> from pyg_fedgraph.train.jobs import FineTune
            >>> sim = build_simulator(ExperimentConfig(dataset="digits", strategy="fedavg",
            ...                                        rounds=2))
            >>> _ = sim.run()
            >>> params, _ = sim.finetuned_models(FineTune(steps=3))
            >>> params.shape == sim.local_params.shape
            True
        """
        start, plan = self._evaluation_start()
        plan = dataclasses.replace(plan, finetune=finetune)
        with self.forked_rng():
            params, buffers = self._evaluated_models(start, plan)
        return params.clone(), buffers.clone()

    def forked_rng(self) -> contextlib.AbstractContextManager[Any]:
        r""":func:`torch.random.fork_rng` over the CPU's global random stream
        and, on CUDA, the run's device's: what is drawn inside leaves the
        run's random streams as they were."""
        devices = [self.device] if self.device.type == "cuda" else []
        return torch.random.fork_rng(devices=devices)

    def _evaluate_round(self, rnd: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        r"""Round ``rnd``'s validation and test metrics; with ``test_at="best"``
        the test ones are NaN but at the last round, and the evaluated models
        wait in ``_evaluated`` for :meth:`_keep_evaluated`."""
        start, plan = self._evaluation_start()
        params, buffers = self._evaluated_models(start, plan)
        if self.test_at == "every" or plan.evaluator is not None:
            # (an evaluator's metrics are not those of the models alone)
            metrics = self._metrics(start, plan, params, buffers)
            self._round_models = (params, buffers)
            return metrics
        val = self.trainer.evaluate(start.rows, params, buffers, "val")
        if rnd >= self.rounds:  # the last round (or past it: any may be the last)
            test = self.trainer.evaluate(start.rows, params, buffers, "test")
        else:
            test = {k: torch.full_like(v, math.nan) for k, v in val.items()}
        self._evaluated = self._round_models = (params, buffers)
        return val, test

    def _keep_evaluated(self) -> bool:
        r"""Keeps the models just evaluated (``test_at="best"``) where the
        history's new record is the best round, or a client's own best one
        (the rules of :class:`~pyg_fedgraph.engine.History`); whether the
        round was evaluated so."""
        if self._evaluated is None:
            return False
        params, buffers = (t.detach() for t in self._evaluated)
        self._evaluated = None
        history = self.history
        last, rnd = len(history) - 1, history.records[-1].round
        place = self.state_device
        if not self._kept:
            n = params.size(0)
            self._kept = {"best_round": torch.tensor(-1),
                          "best_params": params.new_zeros(params.shape, device=place),
                          "best_buffers": buffers.new_zeros(buffers.shape, device=place),
                          "client_round": torch.full((n,), -1),
                          "client_params": params.new_zeros(params.shape, device=place),
                          "client_buffers": buffers.new_zeros(buffers.shape, device=place)}
        kept = self._kept
        if history.best_index == last:
            kept["best_round"] = torch.tensor(rnd)
            kept["best_params"] = params.to(place, copy=True)
            kept["best_buffers"] = buffers.to(place, copy=True)
        new = (history.per_client_best_index() == last).nonzero().view(-1)
        if new.numel():  # only the rows kept travel to the state device
            rows = new.to(params.device)
            kept["client_params"][new.to(place)] = params[rows].to(place)
            kept["client_buffers"][new.to(place)] = buffers[rows].to(place)
            kept["client_round"][new] = rnd
        return True

    def complete_test(self) -> None:
        r"""With ``test_at="best"``, evaluates the test split where the
        reported figures read it and the rounds recorded NaN: the models kept
        at the best round (written into its record) and each client's model
        at its own best round (written into that record's column of the
        client). Runs by itself after the last round; call it to read the
        figures of a run stopped before. Rounds evaluated in full are left
        as they are."""
        history = self.history
        if not self._kept or not len(history):
            return
        kept = self._kept
        everyone = torch.arange(self.dataset.num_clients)
        records = history.records

        def owed(j: int, i: int | None = None) -> bool:  # a test value not evaluated
            pending = records[j].pending
            if pending is None:
                return False
            return bool(pending.any() if i is None else pending[i])

        def test_of(params: Tensor, buffers: Tensor) -> dict[str, Tensor]:
            return {k: v.cpu() for k, v in self.trainer.evaluate(
                everyone, params.to(self.device), buffers.to(self.device), "test").items()}

        # Only the rounds whose models are kept (a round evaluated in full is owed nothing).
        # The held-out clients' history holds the same rounds (the same records, but
        # for a resumed run, whose two histories were loaded apart).
        both = [history.records] + ([] if self.novel_history is None
                                    else [self.novel_history.records])
        b = history.best_index
        if owed(b) and int(kept["best_round"]) == records[b].round:
            values = test_of(kept["best_params"], kept["best_buffers"])
            for recs in both:
                recs[b].test = {k: v.clone() for k, v in values.items()}
                recs[b].pending = None
        index = history.per_client_best_index()
        clients = [(i, j) for i, j in enumerate(index.tolist()) if j >= 0 and owed(j, i)
                   and int(kept["client_round"][i]) == records[j].round]
        if clients:
            values = test_of(kept["client_params"], kept["client_buffers"])
            for recs in both:
                for i, j in clients:
                    for name, v in recs[j].test.items():
                        v[i] = values[name][i]
                    pending = recs[j].pending
                    if pending is not None:  # (the same tensor in both, but after a resume)
                        pending[i] = False

    def evaluate(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        r"""Per-client validation and test metrics :math:`(N,)` of the
        personalized models (after the strategy's fine-tuning, if any)."""
        start, plan = self._evaluation_start()
        return self._metrics(start, plan, *self._evaluated_models(start, plan))

    def _metrics(self, start: ClientStart, plan: EvaluatePlan, params: Tensor,
                 buffers: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        r"""Validation and test metrics of the models ``plan`` evaluates,
        already made from ``start`` (:meth:`_evaluated_models`)."""
        made = dataclasses.replace(start, params=params, buffers=buffers)
        metrics = evaluate_clients(self.trainer, made, seed=self.seed, rnd=self.round,
                                   evaluator=plan.evaluator)
        return metrics["val"], metrics["test"]

    def summary(self) -> dict:
        r"""The engine's summary (the papers' protocol; ``test_novel`` when
        clients are held out), plus the attack's figures under attack, and
        the last evaluated round's graph recovery (``rand_index``,
        ``adjusted_rand_index``) when a round callback recorded it
        (:class:`~pyg_fedgraph.simulation.recovery.GroupRecoveryCallback`)."""
        out = self.engine.summary()
        if len(self.history):
            last = self.history.records[-1].extra
            out.update({k: float(last[k]) for k in RECOVERY_KEYS if k in last})
        if self.attack is not None and len(self.history):
            # The history already averages over benign clients only.
            out["test_benign"] = out["test"]
            out["test_benign_final"] = out["test_final"]
            out["num_malicious"] = int(self.malicious.numel())
            if self.attack.kind == "backdoor":
                asr = self.backdoor_success_rate()[self.benign]
                asr = asr[~torch.isnan(asr)]
                out["backdoor_asr"] = float(asr.mean()) if asr.numel() else math.nan
        return out

    def backdoor_success_rate(self) -> Tensor:
        r"""Per-client attack success rate :math:`(N,)` of a backdoor attack
        with the current personalized models: the share of each client's
        test samples not of the target class that, with the trigger blended
        in, are classified as the target (Panacea Table V, "ASR")."""
        if self.attack is None or self._trigger is None:
            raise ValueError("backdoor_success_rate needs a simulator built with "
                             "Attack('backdoor', ...)")
        split = triggered_test_split(self.dataset, self._trigger, self.attack.target,
                                     self.attack.blend)
        data = FederatedDataset(self.dataset.name, self.dataset.task,
                                {"train": split, "val": split, "test": split},
                                self.dataset.num_classes)
        trainer = ClientTrainer(self.trainer.model, data, self.trainer.objective,
                                self.trainer.config, device=self.device,
                                parallel_clients=self.trainer.parallel_clients,
                                execution=self.trainer.execution,
                                precision=self.trainer.precision, parallel=self.parallel)
        params, buffers = self.personalized_models()
        everyone = torch.arange(self.dataset.num_clients)
        return trainer.evaluate(everyone, params, buffers, "test")["accuracy"]

    # ------------------------------------------------------------ resuming
    def state_dict(self) -> dict[str, Any]:
        r"""A snapshot of the whole run (a deep copy, loadable with
        ``torch.load(weights_only=True)``): the engine's state (round, client
        table, histories, the strategy's state with its optimizers), the
        simulated clients' own models, buffers and kept local optimizer
        state, the malicious clients and
        the global torch RNG (some strategies draw from it, e.g. PyG's
        ``negative_sampling``). Every other random stream is derived from
        ``(seed, purpose, round)`` and needs no saved state."""
        return snapshot({
            **self.engine.state_dict(),
            "local_params": self.local_params,
            "local_buffers": self.local_buffers,
            "optimizer_state": dict(self.optimizer_state),
            "malicious": self.malicious,
            "torch_rng": torch.get_rng_state(),
            **({"kept_for_test": dict(self._kept)} if self._kept else {}),
        })

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Restores a :meth:`state_dict` taken from a simulator built with the
        same data, model, strategy and settings (the strategy is already set
        up by the constructor), so that :meth:`run` continues that run."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"unsupported simulator state format {state.get('format')!r}; "
                             f"this version reads format {STATE_FORMAT}")
        if not torch.equal(state["malicious"], self.malicious):
            raise ValueError(f"the saved run's malicious clients {state['malicious'].tolist()} "
                             f"differ from this simulator's {self.malicious.tolist()}; build it "
                             f"with the saved run's attack settings")
        state = snapshot(state)
        self.engine.load_state_dict(state)
        self.local_params = self._host(state["local_params"].to(self.state_device))
        self.local_buffers = self._host(state["local_buffers"].to(self.state_device))
        # Checkpoints written before clients kept optimizer state hold none.
        self.optimizer_state = {k: self._host(v.to(self.state_device))
                                for k, v in state.get("optimizer_state", {}).items()}
        torch.set_rng_state(state["torch_rng"])
        # test_at="best": the models kept for complete_test (none in a run evaluated in full).
        self._kept = {k: v.to(self.state_device) if v.dim() > 1 else v
                      for k, v in state.get("kept_for_test", {}).items()}

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.dataset.name}, strategy={self.strategy.name}, "
                f"clients={self.dataset.num_clients}, rounds={self.rounds})")
