r"""Client work as declared data, and the one function that carries it out.

What the server asks of the :math:`S` clients sampled in a round is a
:class:`TrainPlan`: the main local training (starting parameters,
regularizer, local settings, update rule) plus further :class:`ClientJob` s of
the same clients, each with a named output that reaches the strategy on the
round's :class:`~pyg_fedgraph.data.FederationGraph` (Ditto's second,
personal training lands on ``graph.personal_x``; pFedGAT's held-out loss
gradient on ``graph.feedback``). Before an evaluation a strategy may ask for
a :class:`FineTune`.

:func:`run_plan` and :func:`evaluate_clients` carry the plan out on a
:class:`~pyg_fedgraph.train.ClientTrainer`; they are the only definition of
client work. The in-process simulator calls them for all sampled clients at
once; a Flower client calls them for its one client, after the plan has
travelled as a message (:mod:`pyg_fedgraph.integrations.flower.protocol`
encodes these dataclasses field by field: tensors marked ``per_client`` are
sent row by row, rules and jobs by their registered name).

Randomness: the batch order of client :math:`i` in round :math:`t` comes from
:func:`~pyg_fedgraph.utils.seeds.make_generator` ``(seed, "batches", t, i)``
(``"personal"`` and ``"finetune"`` for the other trainings), whoever runs it.

Two kinds of client work can be added (see CONTRIBUTING.md), each a
dataclass registered with :func:`register_job`:

* a :class:`ClientJob` runs after the main training from the same starting
  point (:meth:`ClientJob.run` returns its output for a batch of clients);
* a :class:`StartJob` runs before it and chooses where the training (or an
  evaluation) starts, e.g. IFCA's choice among cluster models
  (:class:`ChooseModel`): :meth:`StartJob.prepare` returns the starting
  parameters and its outputs. The clients then upload their update, since
  the server does not know where they started.

An :class:`Evaluator` (``EvaluatePlan.evaluator``) replaces the plain
evaluation of a model when a method's predictions are not the model's
outputs alone (kNN-Per's mixture with a nearest-neighbour vote,
:class:`~pyg_fedgraph.train.knn.KNNInterpolation`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, ClassVar, cast

import torch
from torch import Tensor

from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.train.embedding import functional_embeddings, proxy_inputs
from pyg_fedgraph.train.regularizers import Regularizer, per_client, select_rows
from pyg_fedgraph.train.rules import SGD, LocalRule
from pyg_fedgraph.train.trainer import ClientTrainer
from pyg_fedgraph.utils.registry import Registry

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
from pyg_fedgraph.utils.seeds import derive_seeds

__all__ = ["ClientStart", "Job", "ClientJob", "StartJob", "JOBS", "register_job", "per_client",
           "TrainPlan", "PersonalTraining", "LossGradient", "FunctionalEmbedding", "ChooseModel",
           "SharedBody",
           "FineTune",
           "EvaluatePlan", "ClientResult", "run_plan",
           "finetuned", "evaluate_clients", "select_rows", "Evaluator"]

#: Every job class a client may rebuild by name: ``@register_job("loss-gradient")``
#: adds a :class:`ClientJob` or :class:`StartJob` dataclass and sets its ``kind``.
JOBS: Registry[type[Job]] = Registry("client job", attribute="kind")
register_job = JOBS.register


@dataclass
class ClientStart:
    r"""Where :math:`S` clients stand when a round's work begins.

    Args:
        rows (torch.Tensor): their rows in the trainer's dataset :math:`(S,)`.
        ids (torch.Tensor): their client ids in the federation :math:`(S,)`
            (equal to ``rows`` in process; a Flower node's dataset holds one
            row, 0, for its client id).
        params (torch.Tensor): the parameters the main training starts from
            :math:`(S, D)`.
        buffers (torch.Tensor): their buffers (BatchNorm statistics) at the
            start of the round :math:`(S, B)`.
        local (torch.Tensor, optional): each client's own latest model
            :math:`(S, D)` (for start jobs that combine it with what the
            server sent).
        optimizer_state (dict, optional): the optimizer state each client
            kept from its previous local run (``keep_optimizer_state``),
            :math:`(S, \ldots)` each.
    """
    rows: Tensor
    ids: Tensor
    params: Tensor
    buffers: Tensor
    local: Tensor | None = None
    optimizer_state: dict[str, Tensor] | None = None


class Job:
    r"""Base class of declared client work (a dataclass, registered by name).

    Attributes:
        kind (str): the registered name.
        output (str): the :class:`~pyg_fedgraph.data.FederationGraph`
            attribute that receives the result, one row per client.
    """
    kind: ClassVar[str] = ""
    output: ClassVar[str] = ""

    def select(self, rows: Tensor) -> Job:
        r"""The job restricted to positions ``rows`` of its clients."""
        return select_rows(self, rows)


class ClientJob(Job):
    r"""Client work run after the main training, from the same starting point
    (or, when :attr:`on_trained`, on the trained model).

    Attributes:
        on_trained (bool): :meth:`run` gets the clients' models as the main
            training left them (``start.params`` and ``start.buffers`` the
            trained ones) instead of where it started.
        knows_private (bool): the job works with models that keep a private
            part on the client (:mod:`pyg_fedgraph.train.private`): it reads
            the client's full parameters and its output reveals nothing of
            the private part beyond what the server is meant to receive.
    """
    on_trained: ClassVar[bool] = False
    knows_private: ClassVar[bool] = False

    def run(self, trainer: ClientTrainer, start: ClientStart, *, seed: int, rnd: int) -> Tensor:
        r"""The job's result for the clients of ``start`` :math:`(S, \ldots)`."""
        raise NotImplementedError


class StartJob(Job):
    r"""Client work run before the main training (or an evaluation): it
    chooses where the clients start."""

    def prepare(self, trainer: ClientTrainer, start: ClientStart, *, seed: int, rnd: int
                ) -> tuple[Tensor, dict[str, Tensor]]:
        r"""The starting parameters :math:`(S, D)` and the job's outputs
        (``{output: (S, ...)}``) for the clients of ``start``."""
        raise NotImplementedError


class Evaluator(Job):
    r"""Client work that replaces the plain evaluation of a model: the
    clients' predictions are not the model's outputs alone (kNN-Per mixes
    them with a nearest-neighbour vote over the client's own data,
    :class:`~pyg_fedgraph.train.knn.KNNInterpolation`)."""

    def evaluate(self, trainer: ClientTrainer, rows: Tensor, params: Tensor, buffers: Tensor,
                 splits: tuple[str, ...]) -> dict[str, dict[str, Tensor]]:
        r"""Per-client metrics ``{split: {metric: (S,)}}`` of the clients at
        dataset ``rows`` :math:`(S,)` with models ``params`` :math:`(S, D)`
        and ``buffers`` :math:`(S, B)` (NaN where a split is empty)."""
        raise NotImplementedError


@register_job("personal-training")
@dataclass
class PersonalTraining(ClientJob):
    r"""A second local training of the same clients in the same round
    (Ditto's personalized models :math:`v_i`).

    It starts from ``params`` and from the clients' buffers as they were
    before the round's main training; its trained buffers are dropped (the
    clients keep those of the main training). The trained parameters land on
    ``graph.personal_x`` :math:`(S, D)`; the orchestration keeps no copy, so
    the strategy stores what it needs.

    Args:
        params (torch.Tensor): starting parameters :math:`(S, D)`.
        regularizer (Regularizer, optional): its extra loss term.
        config (LocalConfig, optional): its local settings (default: the run's).
        rule (LocalRule, optional): its update rule (default: SGD).
    """
    output: ClassVar[str] = "personal_x"
    knows_private: ClassVar[bool] = True
    params: Tensor = per_client()
    regularizer: Regularizer | None = per_client(None)
    config: LocalConfig | None = None
    rule: LocalRule | None = None

    def run(self, trainer: ClientTrainer, start: ClientStart, *, seed: int, rnd: int) -> Tensor:
        seeds = derive_seeds(seed, "personal", rnd, ids=start.ids.tolist())
        return trainer.train(start.rows, self.params.detach(), start.buffers.clone(),
                             regularizer=self.regularizer, config=self.config, rule=self.rule,
                             generator=seeds).params


@register_job("loss-gradient")
@dataclass
class LossGradient(ClientJob):
    r"""The gradient of each client's mean loss on ``split`` at the model it
    starts the round from, :math:`g_i = \nabla_\theta L_i(\theta_i^{start})`
    :math:`(S, D)`, with its buffers at the round start (pFedGAT's exact
    feedback). Lands on ``graph.feedback``; costs one extra :math:`D`-vector
    upload per client.

    Args:
        split (str, optional): ``"val"`` (held-out data) or ``"train"``
            (default: ``"val"``).
    """
    output: ClassVar[str] = "feedback"
    knows_private: ClassVar[bool] = True
    split: str = "val"

    def run(self, trainer: ClientTrainer, start: ClientStart, *, seed: int, rnd: int) -> Tensor:
        return trainer.loss_gradient(start.rows, start.params, start.buffers, self.split)[0]


@register_job("functional-embedding")
@dataclass
class FunctionalEmbedding(ClientJob):
    r"""Each client's functional embedding, FED-PUB's summary of what its
    model computes (Baek et al., `"Personalized Subgraph Federated Learning"
    <https://arxiv.org/abs/2206.10206>`_, ICML 2023, Sec. 4): the mean of
    its node embeddings on a random proxy graph that every client builds
    from the same seed (:mod:`pyg_fedgraph.train.embedding`),

    .. math::
        \mathbf{h}_i = \frac{1}{P} \sum_{v=1}^{P}
        f_v(\tilde{\mathcal{G}};\, \theta_i),

    with the model the round's training produced (FED-PUB's client computes
    it just before uploading), in evaluation mode, through the model's
    ``embed`` method (:meth:`GCN.embed <pyg_fedgraph.models.GCN.embed>`: the
    last layer's output before its activation). Lands on
    ``graph.embedding`` :math:`(S, H)`.

    Args:
        seed (int, optional): the seed of the proxy (the run's)
            (default: :obj:`0`).
        num_graphs (int, optional): blocks of the proxy graph (default:
            :obj:`5`, FED-PUB's ``--n-proxy``).
        nodes_per_graph (int, optional): nodes per block (default:
            :obj:`100`, FED-PUB's).
        p_in (float, optional): edge probability within a block (default:
            :obj:`0.1`, FED-PUB's).
    """
    output: ClassVar[str] = "embedding"
    on_trained: ClassVar[bool] = True
    knows_private: ClassVar[bool] = True
    seed: int = 0
    num_graphs: int = 5
    nodes_per_graph: int = 100
    p_in: float = 0.1

    def run(self, trainer: ClientTrainer, start: ClientStart, *, seed: int, rnd: int) -> Tensor:
        inputs = proxy_inputs(trainer.dataset, self.num_graphs, self.nodes_per_graph,
                              self.p_in, self.seed)
        home = start.params.device
        parts = [functional_embeddings(trainer.model, trainer.layout,
                                       start.params[c].to(trainer.device),
                                       start.buffers[c].to(trainer.device), inputs,
                                       batched=trainer.execution == "vmap")
                 for c in trainer.chunks(start.params.size(0))]
        return torch.cat(parts).to(home)


@register_job("choose-model")
@dataclass
class ChooseModel(StartJob):
    r"""Each client starts from the candidate model with the lowest mean
    loss on its ``split`` (IFCA's cluster estimate, Ghosh et al., 2020):

    .. math::
        \hat{k}_i = \arg\min_{k} L_i(\theta_k), \qquad
        \theta_i^{start} = \theta_{\hat{k}_i},

    with the client's buffers at the start of the round. The choices
    :math:`\hat{k}_i` land on ``graph.choice`` :math:`(S,)`; a client with no
    sample in ``split`` takes candidate 0. The candidates are evaluated one
    after the other, each for all clients at once (a loop over the
    :math:`K` candidates, not over clients).

    Args:
        candidates (torch.Tensor): the :math:`K` candidate models
            :math:`(K, D)`, the same for every client.
        split (str, optional): the data the losses are measured on
            (default: ``"train"``).
    """
    output: ClassVar[str] = "choice"
    candidates: Tensor
    split: str = "train"

    def prepare(self, trainer: ClientTrainer, start: ClientStart, *, seed: int, rnd: int
                ) -> tuple[Tensor, dict[str, Tensor]]:
        s = start.rows.numel()
        with torch.no_grad():
            losses = torch.stack([
                trainer.evaluate(start.rows, candidate.expand(s, -1), start.buffers,
                                 self.split)["loss"]
                for candidate in self.candidates.to(start.params)])  # (K, S)
        choice = losses.nan_to_num(float("inf")).argmin(dim=0)
        return self.candidates.to(start.params)[choice].clone(), {self.output: choice}


@register_job("shared-body")
@dataclass
class SharedBody(StartJob):
    r"""Each client starts from the server's shared body with its own head,
    then trains the head alone (FedRep's head phase, Collins et al., 2021,
    Algorithm 1):

    .. math::
        \theta_i^{start} = (\phi, h_i), \qquad
        h_i \leftarrow \mathrm{LocalSGD}_{h}(\phi, h_i) \quad
        (\text{``epochs`` epochs, } \phi \text{ frozen}),

    where :math:`\phi` is what the server sent (the coordinates outside
    ``head_mask``) and :math:`h_i` the head of the client's own latest model
    (:attr:`ClientStart.local`): the server never sends a head. The head
    phase uses the run's local settings with ``epochs`` epochs (or ``steps``
    steps), batch order ``(seed, "head", round, client)``; its BatchNorm
    statistics are not kept (the main training starts from the round's). The
    mean loss of the head phase lands on ``graph.head_loss`` :math:`(S,)`
    (zeros without a head phase, as in an evaluation).

    Args:
        body (torch.Tensor): the shared body :math:`(D - H,)`, the values of
            the coordinates outside ``head_mask`` in order.
        head_mask (torch.Tensor): :math:`(D,)` bool, ``True`` for the head.
        epochs (int, optional): epochs of head training (default: :obj:`0`).
        steps (int, optional): steps of head training instead, each on a
            fresh mini-batch; wins over ``epochs`` (default: :obj:`None`).
    """
    output: ClassVar[str] = "head_loss"
    body: Tensor
    head_mask: Tensor
    epochs: int = 0
    steps: int | None = None

    def prepare(self, trainer: ClientTrainer, start: ClientStart, *, seed: int, rnd: int
                ) -> tuple[Tensor, dict[str, Tensor]]:
        if start.local is None:
            raise ValueError("SharedBody needs each client's own model (ClientStart.local) "
                             "to take its head from")
        head = self.head_mask.to(device=start.local.device, dtype=torch.bool)
        if tuple(head.shape) != (start.local.size(1),) or \
                self.body.numel() != int((~head).sum()):
            raise ValueError(f"SharedBody: a body of {self.body.numel()} values and a head "
                             f"mask of shape {tuple(head.shape)} do not split a model of "
                             f"{start.local.size(1)} parameters")
        params = start.local.clone()
        params[:, ~head] = self.body.to(params)
        if (self.steps if self.steps is not None else self.epochs) == 0:
            return params, {self.output: params.new_zeros(params.size(0))}
        seeds = derive_seeds(seed, "head", rnd, ids=start.ids.tolist())
        config = dataclasses.replace(trainer.config, epochs=self.epochs, steps=self.steps)
        res = trainer.train(start.rows, params, start.buffers.clone(), config=config,
                            rule=SGD(mask=head), generator=seeds)
        return res.params, {self.output: res.loss}


@dataclass
class TrainPlan:
    r"""What the server sends to the :math:`S` clients sampled this round.

    Args:
        params (torch.Tensor, optional): starting parameters :math:`(S, D)`;
            ``None`` lets every client continue from its own local model.
        regularizer (Regularizer, optional): extra local loss term.
        config (LocalConfig, optional): overrides the local settings.
        rule (LocalRule, optional): the local update rule (default: SGD).
        jobs (tuple, optional): further :class:`ClientJob` s of the same
            clients this round (default: none).
        start_job (StartJob, optional): chooses where each client starts,
            before training (default: ``params``, or the client's own model).
    """
    params: Tensor | None = per_client(None)
    regularizer: Regularizer | None = per_client(None)
    config: LocalConfig | None = None
    rule: LocalRule | None = None
    jobs: tuple[ClientJob, ...] = ()
    start_job: StartJob | None = None

    @property
    def sends_start(self) -> bool:
        r"""The server knows where every client starts (``params`` given and
        no start job): otherwise the clients upload their update."""
        return self.params is not None and self.start_job is None

    @property
    def outputs(self) -> tuple[str, ...]:
        r"""The graph attributes the plan's jobs produce."""
        jobs: tuple[Job, ...] = self.jobs + ((self.start_job,) if self.start_job else ())
        rule = self.rule.outputs if self.rule is not None else ()
        return tuple(job.output for job in jobs) + rule

    def select(self, rows: Tensor) -> TrainPlan:
        r"""The plan restricted to positions ``rows`` of its clients."""
        return select_rows(self, rows)

    def check(self, num_clients: int, num_params: int, who: str = "the strategy") -> None:
        r"""Raises a :class:`ValueError` when a per-client field does not hold
        one :math:`D`-row per client."""
        want = (num_clients, num_params)
        if self.params is not None and tuple(self.params.shape) != want:
            raise ValueError(f"{who} sent parameters of shape {tuple(self.params.shape)} to "
                             f"{num_clients} clients with {num_params} parameters")
        if self.start_job is not None and (not isinstance(self.start_job, StartJob)
                                           or not self.start_job.kind):
            raise TypeError(f"{who} asked for the start job {self.start_job!r}, which is "
                            f"not a registered StartJob")
        for job in self.jobs:
            if not isinstance(job, ClientJob) or not job.kind:
                raise TypeError(f"{who} asked for {job!r}, which is not a registered "
                                f"ClientJob")
            for f in fields(cast("DataclassInstance", job)):  # registered jobs are dataclasses
                required = (f.default is dataclasses.MISSING
                            and f.default_factory is dataclasses.MISSING)
                if required and getattr(job, f.name) is None:
                    raise ValueError(f"{who} asked for a {job.kind} job without {f.name}")
            params = getattr(job, "params", None)
            if isinstance(params, Tensor) and tuple(params.shape) != want:
                raise ValueError(f"{who} sent {job.kind} parameters of shape "
                                 f"{tuple(params.shape)} to {num_clients} clients with "
                                 f"{num_params} parameters")
        regs = [self.regularizer] + [getattr(j, "regularizer", None) for j in self.jobs]
        for reg in regs:
            if reg is not None and any(r.size(0) != num_clients for r in reg.refs):
                raise ValueError(f"{who} sent a regularizer whose references do not have "
                                 f"one row per each of the {num_clients} clients")


@dataclass
class FineTune:
    r"""Local fine-tuning of the model to evaluate, before evaluating it
    (FedAvg-FT); the fine-tuned model is used for evaluation only.

    Args:
        epochs (int, optional): local epochs; ``None`` uses the run's local
            schedule (default: ``None``).
        steps (int, optional): a fixed number of local steps instead, each
            on a fresh mini-batch (Per-FedAvg's one step); wins over
            ``epochs`` (default: ``None``).
        lr (float, optional): its learning rate, taken as it is: no
            Nesterov momentum and no schedule of the run (Per-FedAvg's one
            personalization step of size :math:`\alpha`); ``None`` uses the
            run's settings, its schedule included (default: ``None``).
    """
    epochs: int | None = None
    steps: int | None = None
    lr: float | None = None

    def local_config(self, base: LocalConfig) -> LocalConfig:
        config = base
        if self.steps is not None:
            config = dataclasses.replace(config, steps=self.steps)
        elif self.epochs is not None:
            config = dataclasses.replace(config, epochs=self.epochs, steps=None)
        if self.lr is not None:
            config = dataclasses.replace(config, lr=self.lr, nesterov=False, warmup=0.0,
                                         lr_decay_to=None)
        return config


@dataclass
class EvaluatePlan:
    r"""What the server sends to the :math:`S` clients it evaluates.

    Args:
        params (torch.Tensor, optional): the models to evaluate :math:`(S, D)`;
            ``None`` evaluates each client's own local model.
        finetune (FineTune, optional): fine-tune them locally first.
        start_job (StartJob, optional): lets each client choose the model it
            is evaluated with (e.g. IFCA's lowest-loss cluster model).
        evaluator (Evaluator, optional): computes the clients' metrics in
            place of the model's own predictions (e.g. kNN-Per's mixture).
    """
    params: Tensor | None = per_client(None)
    finetune: FineTune | None = None
    start_job: StartJob | None = None
    evaluator: Evaluator | None = None

    def select(self, rows: Tensor) -> EvaluatePlan:
        return select_rows(self, rows)


@dataclass
class ClientResult:
    r"""What :math:`S` clients computed in a round.

    Attributes:
        params (torch.Tensor): trained parameters :math:`(S, D)`.
        buffers (torch.Tensor): trained buffers :math:`(S, B)`.
        loss (torch.Tensor): mean training loss :math:`(S,)`.
        steps (torch.Tensor): local steps taken :math:`(S,)`.
        outputs (dict): job outputs by graph attribute, :math:`(S, \ldots)` each.
        start (torch.Tensor): where the training started :math:`(S, D)` (the
            update is ``params - start``).
        optimizer_state (dict): the main training's optimizer state that the
            clients keep (``keep_optimizer_state``; empty otherwise),
            :math:`(S, \ldots)` each.
    """
    params: Tensor
    buffers: Tensor
    loss: Tensor
    steps: Tensor
    outputs: dict[str, Tensor]
    start: Tensor
    optimizer_state: dict[str, Tensor] = field(default_factory=dict)

    def select(self, rows: Tensor) -> ClientResult:
        return ClientResult(self.params[rows], self.buffers[rows], self.loss[rows],
                            self.steps[rows], {k: v[rows] for k, v in self.outputs.items()},
                            self.start[rows],
                            {k: v[rows] for k, v in self.optimizer_state.items()})


def run_plan(trainer: ClientTrainer, plan: TrainPlan, start: ClientStart, *, seed: int,
             rnd: int) -> ClientResult:
    r"""Carries out ``plan`` for the clients of ``start``: its start job,
    if any, which may move the starting point; the main training from there
    (batch order ``(seed, "batches", rnd, id)``); then every job of
    ``plan.jobs`` from the same starting point (on the trained models for a
    job that is :attr:`~ClientJob.on_trained`)."""
    outputs: dict[str, Tensor] = {}
    if plan.start_job is not None:
        params, outputs = plan.start_job.prepare(trainer, start, seed=seed, rnd=rnd)
        start = dataclasses.replace(start, params=params)
    seeds = derive_seeds(seed, "batches", rnd, ids=start.ids.tolist())
    result = trainer.train(start.rows, start.params, start.buffers, regularizer=plan.regularizer,
                           config=plan.config, rule=plan.rule, generator=seeds,
                           state=start.optimizer_state)
    outputs.update(result.extra)
    trained = dataclasses.replace(start, params=result.params, buffers=result.buffers)
    for job in plan.jobs:
        if job.output in outputs:
            raise ValueError(f"two pieces of client work write {job.output!r}")
        outputs[job.output] = job.run(trainer, trained if job.on_trained else start, seed=seed,
                                      rnd=rnd)
    return ClientResult(result.params, result.buffers, result.loss, result.steps, outputs,
                        start.params, result.state)


def finetuned(trainer: ClientTrainer, start: ClientStart, finetune: FineTune | None, *,
              seed: int = 0, rnd: int = 0) -> tuple[Tensor, Tensor]:
    r"""The models that are evaluated: ``(params, buffers)`` of ``start``
    after local fine-tuning (batch order ``(seed, "finetune", rnd, id)``)
    when ``finetune`` is given, else ``start``'s own."""
    if finetune is None:
        return start.params, start.buffers
    seeds = derive_seeds(seed, "finetune", rnd, ids=start.ids.tolist())
    res = trainer.train(start.rows, start.params, start.buffers,
                        config=finetune.local_config(trainer.config), generator=seeds)
    return res.params, res.buffers


def evaluate_clients(trainer: ClientTrainer, start: ClientStart, *,
                     finetune: FineTune | None = None, start_job: StartJob | None = None,
                     seed: int = 0, rnd: int = 0,
                     splits: tuple[str, ...] = ("val", "test"),
                     evaluator: Evaluator | None = None) -> dict[str, dict[str, Tensor]]:
    r"""Per-client metrics ``{split: {metric: (S,)}}`` of the models
    ``start.params`` with buffers ``start.buffers`` (or of the models a
    ``start_job`` chooses), after local fine-tuning when ``finetune`` is given
    (:func:`finetuned`), computed by ``evaluator`` when one is given."""
    if start_job is not None:
        params, _ = start_job.prepare(trainer, start, seed=seed, rnd=rnd)
        start = dataclasses.replace(start, params=params)
    params, buffers = finetuned(trainer, start, finetune, seed=seed, rnd=rnd)
    with torch.no_grad():
        if evaluator is not None:
            return evaluator.evaluate(trainer, start.rows, params, buffers, splits)
        return {split: trainer.evaluate(start.rows, params, buffers, split) for split in splits}
