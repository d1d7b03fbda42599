"""In-process simulation of a federation: rounds, sampling, local training, evaluation."""
from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.utils import subgraph
from tqdm.auto import tqdm

from pyg_fedgraph.attacks import Attack, triggered_test_split
from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.simulation.history import History, RoundRecord
from pyg_fedgraph.simulation.validation import (
    DEFAULT_MAX_NORM,
    RejectPolicy,
    UpdateValidator,
    check_dataset,
)
from pyg_fedgraph.strategies.base import FederationContext, Strategy, TrainPlan
from pyg_fedgraph.train.engine import ClientTrainer, LocalConfig, Regularizer
from pyg_fedgraph.train.objective import Objective

__all__ = ["Simulator", "sample_clients"]

log = logging.getLogger(__name__)

Callback = Callable[["Simulator", RoundRecord], None]

#: Version of the layout of :meth:`Simulator.state_dict`.
STATE_FORMAT = 1
# Independent per-round random streams, derived from (seed, round): they need no
# saved state, and switching one feature on does not shift the others.
_STREAM_DROPOUT, _STREAM_ATTACK = 1, 2


def sample_clients(candidates: Tensor, fraction: float, generator: torch.Generator) -> Tensor:
    r"""A uniformly random subset of ``max(1, round(fraction * len))`` of
    ``candidates``, sorted (all of them when ``fraction >= 1``)."""
    n = candidates.numel()
    if fraction >= 1.0 or n == 0:
        return candidates.clone()
    k = max(1, int(round(fraction * n)))
    pick = torch.randperm(n, generator=generator)[:k]
    return candidates[pick].sort().values


class Simulator:
    r"""Runs a strategy on a federated dataset, all clients in one process.

    Each round: sample clients, ask the strategy for their starting models
    (:meth:`Strategy.configure_train`), train them all at once
    (:class:`~pyg_fedgraph.train.ClientTrainer`), hand the results to the
    strategy as a :class:`~pyg_fedgraph.data.FederationGraph`
    (:meth:`Strategy.aggregate_train`), and evaluate every client's
    personalized model on its own validation and test split. The reported
    result follows the papers' protocol: the mean test metric at the round of
    best mean validation metric.

    Randomness (sampling, batch order, fine-tuning) comes from generators
    seeded by ``seed``, so a run is reproducible bit for bit on CPU.

    **Robustness.** Each round a ``dropout`` share of the sampled clients
    (each independently) returns nothing: they keep their previous local
    model and the strategy only sees the survivors; if nobody survives, the
    round skips aggregation but is still evaluated. Uploads are checked
    before aggregation (:class:`~pyg_fedgraph.simulation.validation.UpdateValidator`:
    NaN/Inf, wrong length, absurd norm); a rejected client is left out of the
    aggregation and keeps its previous local model (``reject_policy="raise"``
    stops the run instead). With an :class:`~pyg_fedgraph.attacks.Attack`,
    its malicious clients (chosen once from ``seed``) upload poisoned
    parameters (model attacks, applied before the checks) or train on
    corrupted data (data attacks, applied once here); :attr:`history` then
    averages over the benign clients only, as the papers report.

    **Resuming.** :meth:`state_dict` holds the whole run (round, every
    client's model and buffers, the generators, the global torch RNG, the
    history and the strategy's state with its optimizers);
    :meth:`load_state_dict` on a simulator built with the same settings
    continues bit for bit as if the run had never stopped.

    Args:
        dataset (FederatedDataset): the clients' data.
        model (torch.nn.Module): the client architecture; its current
            parameters are the common initial model.
        strategy (Strategy): the server algorithm.
        rounds (int, optional): communication rounds (default: ``50``).
        sample_fraction (float, optional): share of clients sampled per round
            (default: ``1.0``).
        local (LocalConfig, optional): local SGD settings.
        eval_every (int, optional): evaluate every k rounds; the last round
            is always evaluated (default: ``1``).
        seed (int, optional): seed of all randomness (default: ``0``).
        parallel (bool, optional): train clients in one batched computation
            (default: ``True``); ``False`` runs the per-client reference loop.
        objective (Objective, optional): loss and metrics (default: by task).
        held_out (torch.Tensor, optional): clients that never train (novel
            clients); evaluated with the models the strategy generates for them.
        progress (bool, optional): show a progress bar (default: ``True``).
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
    """

    def __init__(self, dataset: FederatedDataset, model: nn.Module, strategy: Strategy, *,
                 rounds: int = 50, sample_fraction: float = 1.0,
                 local: LocalConfig | None = None, eval_every: int = 1, seed: int = 0,
                 parallel: bool = True, objective: Objective | None = None,
                 held_out: Tensor | None = None, progress: bool = True,
                 callbacks: Sequence[Callback] = (), dropout: float = 0.0,
                 attack: Attack | None = None, reject_policy: RejectPolicy = "drop",
                 max_update_norm: float | None = DEFAULT_MAX_NORM) -> None:
        if rounds < 0:
            raise ValueError(f"rounds must be >= 0, got {rounds}")
        if not 0.0 < sample_fraction <= 1.0:
            raise ValueError(f"sample_fraction must be in (0, 1], got {sample_fraction}")
        if eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {eval_every}")
        if isinstance(dropout, bool) or not 0.0 <= float(dropout) <= 1.0:
            raise ValueError(f"dropout must be a probability in [0, 1], got {dropout!r}")
        if attack is not None and not isinstance(attack, Attack):
            raise TypeError(f"attack must be a pyg_fedgraph.attacks.Attack, got "
                            f"{type(attack).__name__}")
        self.strategy = strategy
        self.rounds = rounds
        self.sample_fraction = sample_fraction
        self.eval_every = eval_every
        self.seed = seed
        self.parallel = parallel
        self.progress = progress
        self.callbacks = list(callbacks)
        self.dropout = float(dropout)
        self.attack = attack
        n = dataset.num_clients
        self.held_out = (torch.zeros(0, dtype=torch.long) if held_out is None
                         else torch.as_tensor(held_out, dtype=torch.long).unique())
        if self.held_out.numel() and int(self.held_out.max()) >= n:
            raise ValueError(f"held_out names client {int(self.held_out.max())}, "
                             f"the dataset has {n} clients")
        mask = torch.ones(n, dtype=torch.bool)
        mask[self.held_out] = False
        self.train_clients = mask.nonzero().view(-1)
        if self.train_clients.numel() == 0:
            raise ValueError("every client is held out; nothing would train")
        self.malicious = torch.zeros(0, dtype=torch.long)
        self._trigger: Tensor | None = None
        if attack is not None:
            gen = torch.Generator().manual_seed(seed * 1_000_003 + 7_919)
            self.malicious = attack.select(self.train_clients, gen)
            if attack.kind == "backdoor":
                self._trigger = attack.trigger_for(dataset)
            dataset = attack.poison_dataset(dataset, self.malicious, gen)
            log.info("%s attack by clients %s", attack.kind, self.malicious.tolist())
        self.benign = self.train_clients[~torch.isin(self.train_clients, self.malicious)]
        check_dataset(dataset)
        self.dataset = dataset
        self.trainer = ClientTrainer(model, dataset, objective, local or LocalConfig())
        self.layout = self.trainer.layout
        self.validator = UpdateValidator(self.layout.num_params, policy=reject_policy,
                                         max_norm=max_update_norm)

        init = self.layout.flatten(model)
        self.local_params = init.unsqueeze(0).repeat(n, 1)
        self.local_buffers = self.trainer.initial_buffers(n)
        self.generator = torch.Generator().manual_seed(seed)
        self.round = 0
        obj = self.trainer.objective
        self.history = History(obj.primary, obj.higher_is_better, eval_clients=self.benign)
        self.novel_history = (History(obj.primary, obj.higher_is_better,
                                      eval_clients=self.held_out)
                              if self.held_out.numel() else None)
        self.strategy.setup(FederationContext(
            num_clients=n, layout=self.layout, init_params=init,
            num_samples=dataset.num_samples("train").clone(), edge_index=dataset.edge_index,
            edge_weight=dataset.edge_weight, seed=seed,
            extra={"held_out": self.held_out, "task": dataset.task,
                   "local": self.trainer.config}))

    # ---------------------------------------------------------------- rounds
    def run(self, rounds: int | None = None) -> History:
        r"""Runs up to round ``rounds`` (default: the constructor's) and
        returns the :class:`History`. Calling it again continues."""
        last = self.rounds if rounds is None else rounds
        bar = tqdm(range(self.round + 1, last + 1), desc=f"{self.strategy.name or 'run'}",
                   disable=not self.progress, leave=False)
        for _rnd in bar:
            record = self.step()
            if record is not None:
                value = self.history._mean(record.test[self.history.metric])
                bar.set_postfix({self.history.metric: f"{value:.4f}"})
        return self.history

    def step(self) -> RoundRecord | None:
        r"""One communication round; returns its record when it was evaluated."""
        t0 = time.perf_counter()
        self.round += 1
        rnd = self.round
        sampled = sample_clients(self.train_clients, self.sample_fraction, self.generator)
        plan = self.strategy.configure_train(rnd, sampled)
        start = self.local_params[sampled] if plan.params is None else plan.params.detach()
        if start.shape != (sampled.numel(), self.layout.num_params):
            raise ValueError(f"strategy {self.strategy.name!r} sent parameters of shape "
                             f"{tuple(start.shape)} to {sampled.numel()} clients with "
                             f"{self.layout.num_params} parameters")
        start_buffers = self.local_buffers[sampled]  # a copy (advanced indexing)
        # Clients that drop out return nothing and keep their local model.
        rows = self._survivors(rnd, sampled.numel())
        clients, start, start_buffers = sampled[rows], start[rows], start_buffers[rows]
        loss, num_kept = math.nan, 0
        if clients.numel():
            result = self.trainer.train(clients, start, start_buffers,
                                        regularizer=_select_regularizer(plan.regularizer, rows,
                                                                        sampled.numel()),
                                        config=plan.config, generator=self.generator,
                                        parallel=self.parallel)
            uploaded = self._poison(rnd, clients, result.params, start)
            kept = self.validator(uploaded, reference=start, client_id=clients,
                                  rnd=rnd).nonzero().view(-1)
            num_kept = kept.numel()
            trained = clients[kept]
            # Rejected clients keep their previous local model, like dropped ones.
            self.local_params[trained] = result.params[kept]
            self.local_buffers[trained] = result.buffers[kept]
            if num_kept:
                x, x0, b0 = uploaded[kept], start[kept], start_buffers[kept]
                graph = self._graph(trained, x, x - x0)
                if getattr(self.strategy, "needs_feedback_gradient", False):
                    # Exact held-out feedback (pFedGAT): each client's val-loss
                    # gradient at its start.
                    graph.feedback, _ = self.trainer.loss_gradient(trained, x0, b0, "val")
                if plan.personal is not None:
                    graph.personal_x = self._train_personal(
                        trained, _select_plan(plan.personal, rows[kept], sampled.numel()), b0)
                self.strategy.aggregate_train(rnd, graph)
                loss = float(result.loss[kept].mean())
        if not num_kept:
            log.info("round %d: no client returned a usable update (%d sampled); "
                     "aggregation skipped", rnd, sampled.numel())
        log.debug("round %d: %d of %d sampled clients aggregated, loss %.4f", rnd, num_kept,
                  sampled.numel(), loss)
        if rnd % self.eval_every and rnd != self.rounds:
            return None
        val, test = self.evaluate(rnd)
        record = RoundRecord(rnd, loss, val, test, time.perf_counter() - t0, sampled.numel(),
                             extra={"num_dropped": sampled.numel() - clients.numel(),
                                    "num_rejected": clients.numel() - num_kept})
        self.history.append(record)
        if self.novel_history is not None:
            self.novel_history.append(record)
        for cb in self.callbacks:
            cb(self, record)
        return record

    def _train_personal(self, clients: Tensor, plan: TrainPlan, buffers: Tensor) -> Tensor:
        r"""The second local training of :attr:`TrainPlan.personal` (Ditto's
        personalized models) for the same clients; returns their trained
        parameters :math:`(S, D)`. It starts from the clients' buffers as they
        were before this round's main training, and its trained buffers
        (BatchNorm statistics) are dropped: the local buffers stay those of
        the main job, which evaluation also uses."""
        if plan.params is None:
            raise ValueError(f"strategy {self.strategy.name!r} asked for a personal training "
                             f"without starting parameters; set TrainPlan.personal.params")
        if plan.personal is not None:
            raise ValueError("a personal TrainPlan cannot itself hold a personal plan")
        start = plan.params.detach()
        if start.shape != (clients.numel(), self.layout.num_params):
            raise ValueError(f"strategy {self.strategy.name!r} sent personal parameters of "
                             f"shape {tuple(start.shape)} to {clients.numel()} clients with "
                             f"{self.layout.num_params} parameters")
        result = self.trainer.train(clients, start, buffers.clone(),
                                    regularizer=plan.regularizer, config=plan.config,
                                    generator=self.generator, parallel=self.parallel)
        return result.params

    def _round_generator(self, rnd: int, stream: int) -> torch.Generator:
        return torch.Generator().manual_seed((self.seed * 1_000_003 + rnd) * 8 + stream)

    def _survivors(self, rnd: int, num_sampled: int) -> Tensor:
        r"""Positions among the sampled clients of those that do not drop out."""
        if self.dropout == 0.0:
            return torch.arange(num_sampled)
        draw = torch.rand(num_sampled, generator=self._round_generator(rnd, _STREAM_DROPOUT))
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
            generator=self._round_generator(rnd, _STREAM_ATTACK)).to(out.dtype)
        return out

    def _graph(self, clients: Tensor, params: Tensor, delta: Tensor) -> FederationGraph:
        ei, ew = self.dataset.edge_index, self.dataset.edge_weight
        if ei is not None:
            ei, ew = subgraph(clients, ei, ew, relabel_nodes=True,
                              num_nodes=self.dataset.num_clients)
        return FederationGraph(x=params, delta=delta,
                               num_samples=self.dataset.num_samples("train")[clients],
                               client_id=clients, layout=self.layout, edge_index=ei,
                               edge_weight=ew)

    # ------------------------------------------------------------- evaluate
    def personalized_models(self) -> tuple[Tensor, Tensor]:
        r"""Every client's model as it would be evaluated now: flat parameters
        :math:`(N, D)` and buffers (after fine-tuning for FT strategies)."""
        n = self.dataset.num_clients
        everyone = torch.arange(n)
        params = self.strategy.personalized_params(everyone)
        params = self.local_params.clone() if params is None else params.detach().clone()
        buffers = self.local_buffers.clone()
        if self.strategy.finetune:
            cfg = self.trainer.config
            epochs = getattr(self.strategy, "finetune_epochs", None)
            if epochs is not None:
                cfg = LocalConfig(**{**vars(cfg), "epochs": epochs, "steps": None})
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.round)
            res = self.trainer.train(everyone, params, buffers, config=cfg, generator=gen,
                                     parallel=self.parallel)
            params, buffers = res.params, res.buffers
        return params, buffers

    def evaluate(self, rnd: int | None = None) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        r"""Per-client validation and test metrics of the personalized models."""
        params, buffers = self.personalized_models()
        everyone = torch.arange(self.dataset.num_clients)
        val = self.trainer.evaluate(everyone, params, buffers, "val")
        test = self.trainer.evaluate(everyone, params, buffers, "test")
        return val, test

    def summary(self) -> dict:
        r"""The history's summary, plus ``test_novel`` when clients are held out."""
        out = self.history.summary()
        if self.novel_history is not None and len(self.novel_history):
            out["test_novel"] = self.novel_history.mean("test")[self.history.best_index]
            out["test_novel_final"] = self.novel_history.mean("test")[-1]
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
                                self.trainer.config)
        params, buffers = self.personalized_models()
        everyone = torch.arange(self.dataset.num_clients)
        return trainer.evaluate(everyone, params, buffers, "test")["accuracy"]

    # ------------------------------------------------------------ resuming
    def state_dict(self) -> dict[str, Any]:
        r"""The whole run as tensors, dicts, lists, numbers and strings (a
        deep copy; loadable with ``torch.load(weights_only=True)``): round,
        every client's parameters and buffers, the sampling/batch generator,
        the global torch RNG (some strategies draw from it, e.g. PyG's
        ``negative_sampling``), the histories, the malicious and held-out
        clients, and :meth:`Strategy.state_dict` (with optimizers)."""
        return _clone_tree({
            "format": STATE_FORMAT,
            "round": self.round,
            "seed": self.seed,
            "strategy_name": self.strategy.name or type(self.strategy).__name__,
            "num_clients": self.dataset.num_clients,
            "num_params": self.layout.num_params,
            "local_params": self.local_params,
            "local_buffers": self.local_buffers,
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "history": self.history.state_dict(),
            "novel_history": (None if self.novel_history is None
                              else self.novel_history.state_dict()),
            "malicious": self.malicious,
            "held_out": self.held_out,
            "strategy": self.strategy.state_dict(),
        })

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Restores a :meth:`state_dict` taken from a simulator built with the
        same data, model, strategy and settings (the strategy is already set
        up by the constructor), so that :meth:`run` continues that run."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"unsupported simulator state format {state.get('format')!r}; "
                             f"this version reads format {STATE_FORMAT}")
        mine = {"num_clients": self.dataset.num_clients, "num_params": self.layout.num_params,
                "strategy_name": self.strategy.name or type(self.strategy).__name__,
                "seed": self.seed}
        for key, value in mine.items():
            if state[key] != value:
                raise ValueError(f"the saved run has {key}={state[key]!r} but this simulator "
                                 f"has {value!r}; build it with the saved run's settings")
        for key in ("malicious", "held_out"):
            if not torch.equal(state[key], getattr(self, key)):
                raise ValueError(f"the saved run's {key} clients {state[key].tolist()} differ "
                                 f"from this simulator's {getattr(self, key).tolist()}; build "
                                 f"it with the saved run's attack / novel-client settings")
        if (state["novel_history"] is None) != (self.novel_history is None):
            raise ValueError("the saved run and this simulator disagree on held-out clients")
        state = _clone_tree(state)
        self.strategy.load_state_dict(state["strategy"])
        self.local_params = state["local_params"]
        self.local_buffers = state["local_buffers"]
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.history.load_state_dict(state["history"])
        if self.novel_history is not None:
            self.novel_history.load_state_dict(state["novel_history"])
        self.round = int(state["round"])

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.dataset.name}, strategy={self.strategy.name}, "
                f"clients={self.dataset.num_clients}, rounds={self.rounds})")


def _select_regularizer(reg: Regularizer | None, rows: Tensor, total: int
                        ) -> Regularizer | None:
    r"""``reg`` restricted to positions ``rows`` of the ``total`` sampled clients."""
    if reg is None or rows.numel() == total:
        return reg
    return reg.select(rows)


def _select_plan(plan: TrainPlan, rows: Tensor, total: int) -> TrainPlan:
    r"""A (personal) plan restricted to positions ``rows`` of ``total`` clients."""
    if rows.numel() == total:
        return plan
    return TrainPlan(params=None if plan.params is None else plan.params[rows],
                     regularizer=_select_regularizer(plan.regularizer, rows, total),
                     config=plan.config, personal=plan.personal)


def _clone_tree(obj: Any) -> Any:
    r"""Deep copy of nested dicts / lists / tuples, cloning tensors (state
    dicts keep their ``_metadata``)."""
    if isinstance(obj, Tensor):
        return obj.detach().clone()
    if isinstance(obj, OrderedDict):
        out = OrderedDict((k, _clone_tree(v)) for k, v in obj.items())
        meta = getattr(obj, "_metadata", None)
        if meta is not None:
            out._metadata = _clone_tree(meta)  # type: ignore[attr-defined]
        return out
    if isinstance(obj, dict):
        return {k: _clone_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clone_tree(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_clone_tree(v) for v in obj)
    return obj
