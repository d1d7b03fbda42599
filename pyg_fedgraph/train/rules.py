r"""Local update rules: what one local step does, for :math:`S` clients at once.

A :class:`LocalRule` maps the clients' parameters :math:`\Theta \in
\mathbb{R}^{S \times D}` and its own per-client state to new parameters,
given a :class:`LocalProblem`, which evaluates every client's mini-batch
objective

.. math::
    f_i(\theta; \mathcal{B}) = \frac{1}{|\mathcal{B}|}\sum_{(x, y) \in
    \mathcal{B}} \ell(h_\theta(x), y) + r_i(\theta)

(loss plus the strategy's :class:`~pyg_fedgraph.train.Regularizer`) and its
gradient and Hessian-vector products for all clients in one batched call
(:func:`torch.vmap` over :mod:`torch.func`). Rules are written on whole
:math:`(S, D)` tensors, so they stay batched over clients; the trainer keeps
inactive clients (those whose schedule has no batch at this step) unchanged.

:class:`SGD` (with momentum, weight decay and an optional parameter mask) is
the default and reproduces :class:`torch.optim.SGD`. Rules of other methods
(pFedMe's inner problem, Per-FedAvg's two-batch meta step) take more than one
gradient, or more than one batch, per step.

Rules travel to Flower clients by name, like regularizers: a rule is a
dataclass registered with :func:`register_rule`, whose fields are scalars or
tensors shared by all clients.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from pyg_fedgraph.utils.registry import Registry

if TYPE_CHECKING:
    from pyg_fedgraph.data.federated_dataset import FederatedDataset
    from pyg_fedgraph.train.config import LocalConfig

__all__ = ["LocalProblem", "LocalRule", "SGD", "Adam", "default_rule", "RULES", "register_rule",
           "class_counts",
           "PerFedAvgStep", "PerFedAvgHFStep", "PFedMeStep", "FedRoDStep"]

#: Every rule class a client may rebuild by name: ``@register_rule("sgd")`` adds
#: a :class:`LocalRule` dataclass and sets its ``kind``, so that plans using it
#: can be sent to Flower clients, which rebuild it from the name and its fields
#: (code is never sent).
RULES: Registry[type[LocalRule]] = Registry("local rule", attribute="kind")
register_rule = RULES.register


class LocalProblem:
    r"""The local objectives of :math:`S` clients during one training.

    Built by :class:`~pyg_fedgraph.train.ClientTrainer`; rules call it.

    Args:
        grad (callable): ``grad(theta, batch) -> (g, loss)``: gradients
            :math:`(S, D)` of every client's objective on its rows ``batch``
            :math:`(S, B)`, and the objective values :math:`(S,)`.
        hvp (callable): ``hvp(theta, batch, v) -> Hv``: Hessian-vector
            products :math:`(S, D)`.
        class_counts (callable, optional): ``class_counts() -> (S, C)``, the
            clients' training samples per class (classification; FedRoD's
            balanced softmax). Called once, when a rule first asks.

    Attributes:
        active (torch.Tensor, optional): which clients take the current step
            :math:`(S,)`, bool, set by the trainer before each step (``None``:
            all). The others' results are discarded, so :meth:`grad` and
            :meth:`hvp` may leave their rows zero rather than compute them
            (clients that wait for the others in epoch mode).
    """

    def __init__(self, grad: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
                 hvp: Callable[[Tensor, Tensor, Tensor], Tensor],
                 class_counts: Callable[[], Tensor] | None = None) -> None:
        self._grad = grad
        self._hvp = hvp
        self._class_counts = class_counts
        self._counts: Tensor | None = None
        self.active: Tensor | None = None

    def class_counts(self) -> Tensor:
        r"""Each client's number of training samples of each class
        :math:`(S, C)` (what a client knows of its own data, never sent)."""
        if self._counts is None:
            if self._class_counts is None:
                raise ValueError("this local problem has no class counts: they exist for "
                                 "classification data trained by a ClientTrainer")
            self._counts = self._class_counts()
        return self._counts

    def grad(self, theta: Tensor, batch: Tensor) -> tuple[Tensor, Tensor]:
        r"""Gradients :math:`\nabla f_i(\theta_i; \mathcal{B}_i)` :math:`(S, D)`
        and values :math:`(S,)` on the batch rows ``batch`` :math:`(S, B)`."""
        return self._grad(theta, batch)

    def hvp(self, theta: Tensor, batch: Tensor, vector: Tensor) -> Tensor:
        r"""Hessian-vector products :math:`\nabla^2 f_i(\theta_i; \mathcal{B}_i)
        v_i` :math:`(S, D)`."""
        return self._hvp(theta, batch, vector)


class LocalRule:
    r"""Base class of local update rules (see the module docstring).

    Subclasses are dataclasses registered with :func:`register_rule`.

    Attributes:
        batches_per_step (int): mini-batches one step consumes (Per-FedAvg
            takes two or three); a step is taken by a client only when all of
            them exist in its schedule.
        outputs (tuple of str): the names of the extra per-client outputs
            :meth:`finish` returns (they become graph attributes, e.g.
            pFedMe's ``personal_x``).
        persistent (tuple of str): the entries of the state that a client
            keeps from one local run to its next with
            :attr:`~pyg_fedgraph.train.LocalConfig.keep_optimizer_state`
            (SGD's momentum buffer, Adam's moments and step count).
    """
    kind: ClassVar[str] = ""
    batches_per_step: ClassVar[int] = 1
    outputs: ClassVar[tuple[str, ...]] = ()
    persistent: ClassVar[tuple[str, ...]] = ()

    def init_state(self, theta: Tensor, config: LocalConfig) -> dict[str, Tensor]:
        r"""Per-client state :math:`(S, \ldots)` before the first step."""
        return {}

    def start_state(self, theta: Tensor, config: LocalConfig,
                    carried: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
        r"""The state the first step starts from: :meth:`init_state`, with the
        :attr:`persistent` entries of ``carried`` (the clients' state at the
        end of their previous local run, rows in client order) in place of
        the fresh ones."""
        state = self.init_state(theta, config)
        if carried:
            state.update({k: carried[k].to(theta.device) for k in self.persistent
                          if k in carried and k in state})
        return state

    def kept_state(self, state: dict[str, Tensor]) -> dict[str, Tensor]:
        r"""The :attr:`persistent` entries of the state after the last step."""
        return {k: state[k] for k in self.persistent if k in state}

    def step(self, problem: LocalProblem, theta: Tensor, state: dict[str, Tensor],
             batches: list[Tensor], config: LocalConfig
             ) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        r"""One local step: new parameters :math:`(S, D)`, new state, and the
        step's loss :math:`(S,)` (reported as the training loss)."""
        raise NotImplementedError

    def finish(self, theta: Tensor, state: dict[str, Tensor]
               ) -> tuple[Tensor, dict[str, Tensor]]:
        r"""The parameters the clients upload :math:`(S, D)` and extra
        per-client outputs (e.g. pFedMe's personalized models), after the
        last step."""
        return theta, {}

    def to(self, device: torch.device) -> LocalRule:
        r"""The rule with its tensor fields (shared by all clients, e.g. a
        parameter mask) on ``device``; itself when it holds none."""
        if not dataclasses.is_dataclass(self):
            return self
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), Tensor)}
        return dataclasses.replace(self, **moved) if moved else self


@register_rule("sgd")
@dataclass
class SGD(LocalRule):
    r"""Stochastic gradient descent, as :class:`torch.optim.SGD`:

    .. math::
        g \leftarrow \nabla f_i(\theta) + \lambda_{wd}\,\theta, \quad
        b \leftarrow \mu b + g \;(b = g \text{ at the first step}), \quad
        \theta \leftarrow \theta - \eta\, (b \odot m)

    (with ``nesterov=True``, :math:`\theta \leftarrow \theta - \eta\,
    ((g + \mu b) \odot m)`), with learning rate :math:`\eta`, momentum :math:`\mu` and weight decay
    :math:`\lambda_{wd}` from the :class:`~pyg_fedgraph.train.LocalConfig`,
    and an optional mask :math:`m` of the parameters that train (FedRep's
    head and body phases); masked-out parameters do not move.

    Args:
        mask (torch.Tensor, optional): :math:`(D,)` bool, ``True`` for the
            parameters that train (default: all).
    """
    mask: Tensor | None = None
    persistent: ClassVar[tuple[str, ...]] = ("momentum", "started")

    def init_state(self, theta: Tensor, config: LocalConfig) -> dict[str, Tensor]:
        if not config.momentum:
            return {}
        return {"momentum": torch.zeros_like(theta),
                "started": torch.zeros(theta.size(0), dtype=torch.bool, device=theta.device)}

    def step(self, problem: LocalProblem, theta: Tensor, state: dict[str, Tensor],
             batches: list[Tensor], config: LocalConfig
             ) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        g, loss = problem.grad(theta, batches[0])
        if config.weight_decay:
            g = g + config.weight_decay * theta
        if config.momentum:
            started = state["started"].unsqueeze(1)
            buf = torch.where(started, config.momentum * state["momentum"] + g, g)
            state = {"momentum": buf, "started": torch.ones_like(state["started"])}
            g = g + config.momentum * buf if config.nesterov else buf
        if self.mask is not None:
            g = g * self.mask.to(g.dtype)
        return theta - config.lr * g, state, loss


@register_rule("adam")
@dataclass
class Adam(LocalRule):
    r"""Adam from `"Adam: A Method for Stochastic Optimization"
    <https://arxiv.org/abs/1412.6980>`_ (Kingma and Ba, ICLR 2015), as
    :class:`torch.optim.Adam` (weight decay added to the gradient, no AMSGrad):

    .. math::
        g &\leftarrow \nabla f_i(\theta) + \lambda_{wd}\,\theta, \quad t \leftarrow t + 1,

        m &\leftarrow \beta_1 m + (1 - \beta_1)\, g, \quad
        v \leftarrow \beta_2 v + (1 - \beta_2)\, g^2,

        \theta &\leftarrow \theta - \frac{\eta}{1 - \beta_1^t}\,
        \frac{m}{\sqrt{v / (1 - \beta_2^t)} + \epsilon} \odot \mathrm{m}_{train}

    with :math:`\eta`, :math:`\lambda_{wd}`, :math:`\beta_1`,
    :math:`\beta_2`, :math:`\epsilon` from the
    :class:`~pyg_fedgraph.train.LocalConfig` and :math:`t` each client's own
    step count. Masked-out parameters (``mask``) neither move nor gather
    moments. With ``keep_optimizer_state`` a client's :math:`m, v, t` carry
    over to its next local run (FED-PUB's clients keep one Adam optimizer
    for the whole federation).

    Args:
        mask (torch.Tensor, optional): :math:`(D,)` bool, ``True`` for the
            parameters that train (default: all).
    """
    mask: Tensor | None = None
    persistent: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq", "step")

    def init_state(self, theta: Tensor, config: LocalConfig) -> dict[str, Tensor]:
        return {"exp_avg": torch.zeros_like(theta), "exp_avg_sq": torch.zeros_like(theta),
                "step": torch.zeros(theta.size(0), dtype=torch.float64, device=theta.device)}

    def step(self, problem: LocalProblem, theta: Tensor, state: dict[str, Tensor],
             batches: list[Tensor], config: LocalConfig
             ) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        g, loss = problem.grad(theta, batches[0])
        # In-place arithmetic on the temporaries this step made itself (never
        # on the gradient, which a compiled graph may own): on the CPU the
        # update of S clients' D parameters is bound by memory traffic, and
        # every avoided (S, D) temporary counts.
        if config.weight_decay:
            g = g.add(theta, alpha=config.weight_decay)
        mask = None if self.mask is None else self.mask.to(g.dtype)
        if mask is not None:
            g = g * mask
        step = state["step"] + 1
        exp_avg = state["exp_avg"].lerp(g, 1 - config.beta1)
        exp_avg_sq = state["exp_avg_sq"].mul(config.beta2).addcmul_(g, g,
                                                                    value=1 - config.beta2)
        # Bias corrections per client, in float64 as torch computes them in Python floats.
        correction1 = (1 - config.beta1 ** step).to(theta.dtype).unsqueeze(1)
        correction2 = (1 - config.beta2 ** step).sqrt().to(theta.dtype).unsqueeze(1)
        update = exp_avg_sq.sqrt().div_(correction2).add_(config.eps)
        update = torch.div(exp_avg, update, out=update).mul_(config.lr / correction1)
        if mask is not None:
            update = update.mul_(mask)
            exp_avg = torch.where(mask.bool(), exp_avg, state["exp_avg"])
            exp_avg_sq = torch.where(mask.bool(), exp_avg_sq, state["exp_avg_sq"])
        return theta - update, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq,
                                "step": step}, loss


def default_rule(config: LocalConfig) -> LocalRule:
    r"""The update rule of ``config.optimizer``: :class:`SGD` or :class:`Adam`."""
    return Adam() if config.optimizer == "adam" else SGD()


def class_counts(dataset: FederatedDataset, clients: Tensor, split: str = "train") -> Tensor:
    r"""Samples of each class held by each of ``clients`` in ``split``,
    :math:`(S, C)` (the default float dtype).

    Args:
        dataset (FederatedDataset): a classification data set.
        clients (torch.Tensor): client ids :math:`(S,)`.
        split (str, optional): the split counted (default: ``"train"``).
    """
    if dataset.task != "classification" or dataset.num_classes is None:
        raise ValueError(f"class counts need classification data; {dataset.name!r} is a "
                         f"{dataset.task} data set")
    part = dataset.splits[split]
    clients = clients.to(torch.long)
    y = part.y[clients].reshape(clients.numel(), -1).to(torch.long)
    # Labels stay where the split keeps them; the counts come to that device.
    valid = (torch.arange(y.size(1), device=y.device).unsqueeze(0)
             < part.counts[clients.to(part.counts.device)].to(y.device).unsqueeze(1))
    c = dataset.num_classes
    if bool(((y < 0) | (y >= c))[valid].any()):
        raise ValueError(f"{dataset.name!r} holds labels outside [0, {c})")
    out = torch.zeros(clients.numel(), c, device=y.device)
    return out.scatter_add_(1, torch.where(valid, y, 0), valid.to(out.dtype))


def _momentum_state(theta: Tensor, config: LocalConfig, *keys: str) -> dict[str, Tensor]:
    r"""Zero momentum buffers shaped like ``theta`` (none without momentum):
    :math:`\mu \cdot 0 + g = g` is torch's first step exactly."""
    if not config.momentum:
        return {}
    return {key: torch.zeros_like(theta) for key in keys}


def _sgd_step(theta: Tensor, g: Tensor, state: dict[str, Tensor], key: str,
              config: LocalConfig) -> tuple[Tensor, dict[str, Tensor]]:
    r"""One :class:`torch.optim.SGD` step of ``theta`` :math:`(S, \ldots)` with
    gradient ``g``, the run's learning rate, momentum (buffer ``state[key]``)
    and weight decay; returns the new parameters and the new buffer entry."""
    if config.weight_decay:
        g = g + config.weight_decay * theta
    if not config.momentum:
        return theta - config.lr * g, {}
    buf = config.momentum * state[key] + g
    step = g + config.momentum * buf if config.nesterov else buf
    return theta - config.lr * step, {key: buf}


@register_rule("per-fedavg")
@dataclass
class PerFedAvgStep(LocalRule):
    r"""The first-order meta step of Per-FedAvg from `"Personalized Federated
    Learning with Theoretical Guarantees: A Model-Agnostic Meta-Learning
    Approach" <https://arxiv.org/abs/2002.07948>`_ (Fallah et al., NeurIPS
    2020), Algorithm 1 with the first-order estimate, Per-FedAvg (FO): one step
    takes two mini-batches :math:`\mathcal{D}, \mathcal{D}'`,

    .. math::
        \tilde{\theta} = \theta - \alpha \nabla f(\theta; \mathcal{D}), \qquad
        \theta \leftarrow \theta - \beta\, \nabla f(\tilde{\theta}; \mathcal{D}'),

    with :math:`\beta` the run's learning rate; its momentum and weight decay
    apply to the outer (:math:`\beta`) update as in :class:`SGD`, the inner
    step is plain. With :math:`\alpha = 0` it is :class:`SGD` on the second
    batch of every pair. An epoch of :math:`T` batches makes
    :math:`\lfloor T / 2 \rfloor` steps. The reported loss is
    :math:`f(\tilde{\theta}; \mathcal{D}')`.

    Args:
        alpha (float, optional): the inner (personalization) step size
            :math:`\alpha` (default: :obj:`0.001`).
    """
    alpha: float = 0.001
    batches_per_step: ClassVar[int] = 2

    def init_state(self, theta: Tensor, config: LocalConfig) -> dict[str, Tensor]:
        return _momentum_state(theta, config, "momentum")

    def step(self, problem: LocalProblem, theta: Tensor, state: dict[str, Tensor],
             batches: list[Tensor], config: LocalConfig
             ) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        g, _ = problem.grad(theta, batches[0])
        meta, loss = problem.grad(theta - self.alpha * g, batches[1])
        meta = self.correct(problem, theta, meta, batches)
        new, buf = _sgd_step(theta, meta, state, "momentum", config)
        return new, buf, loss

    def correct(self, problem: LocalProblem, theta: Tensor, meta: Tensor,
                batches: list[Tensor]) -> Tensor:
        r"""The meta-gradient estimate from :math:`\nabla f(\tilde{\theta};
        \mathcal{D}')` (first order: itself)."""
        return meta


@register_rule("per-fedavg-hf")
@dataclass
class PerFedAvgHFStep(PerFedAvgStep):
    r"""The Hessian-free meta step of Per-FedAvg (Fallah et al., 2020,
    Algorithm 1 with the Hessian-free estimate, Per-FedAvg (HF)): a third mini-batch
    :math:`\mathcal{D}''` corrects the first-order gradient,

    .. math::
        \tilde{\theta} = \theta - \alpha \nabla f(\theta; \mathcal{D}), \qquad
        \theta \leftarrow \theta - \beta \left(I - \alpha \nabla^2 f(\theta;
        \mathcal{D}'')\right) \nabla f(\tilde{\theta}; \mathcal{D}').

    The Hessian-vector product is exact (forward-over-reverse automatic
    differentiation, :meth:`LocalProblem.hvp`), where the paper approximates
    it by a finite difference of two gradients at
    :math:`\theta \pm \delta\, \nabla f(\tilde{\theta}; \mathcal{D}')`: the
    estimate the paper stands in for, at the cost of one Jacobian-vector
    product. An epoch of :math:`T` batches makes :math:`\lfloor T / 3 \rfloor`
    steps.

    Args:
        alpha (float, optional): :math:`\alpha` (default: :obj:`0.001`).
    """
    batches_per_step: ClassVar[int] = 3

    def correct(self, problem: LocalProblem, theta: Tensor, meta: Tensor,
                batches: list[Tensor]) -> Tensor:
        return meta - self.alpha * problem.hvp(theta, batches[2], meta)


@register_rule("pfedme")
@dataclass
class PFedMeStep(LocalRule):
    r"""The local step of pFedMe from `"Personalized Federated Learning with
    Moreau Envelopes" <https://arxiv.org/abs/2006.08848>`_ (T. Dinh et al.,
    NeurIPS 2020), Algorithm 1: on one mini-batch :math:`\mathcal{D}`, the
    personalized model :math:`\hat{\theta}` approximately solves the
    Moreau-envelope problem with :math:`K` gradient steps of
    size :math:`\nu` (the "personal learning rate"),

    .. math::
        \hat{\theta} \leftarrow \hat{\theta} - \nu \left(\nabla f(\hat{\theta};
        \mathcal{D}) + \lambda (\hat{\theta} - w)\right) \quad (K \text{ times}),

    then the local model moves towards it with the run's learning
    rate :math:`\eta`:

    .. math::
        w \leftarrow w - \eta \lambda (w - \hat{\theta}).

    As in the authors' code, :math:`\hat{\theta}` starts the round at the
    received model and is carried from one step to the next (warm start);
    the run's weight decay is added to the inner gradient (their optimizer's
    :math:`\mu \hat{\theta}` term); momentum does not apply. The clients
    upload :math:`w`; :math:`\hat{\theta}` is the extra output
    ``personal_x``. The reported loss is :math:`f(\hat{\theta}; \mathcal{D})`
    at the last inner step.

    Args:
        lam (float, optional): :math:`\lambda` (default: :obj:`15.0`).
        inner_lr (float, optional): :math:`\nu` (default: :obj:`0.01`).
        inner_steps (int, optional): :math:`K` (default: :obj:`5`).
    """
    lam: float = 15.0
    inner_lr: float = 0.01
    inner_steps: int = 5
    outputs: ClassVar[tuple[str, ...]] = ("personal_x",)

    def init_state(self, theta: Tensor, config: LocalConfig) -> dict[str, Tensor]:
        return {"personal": theta.clone()}

    def step(self, problem: LocalProblem, theta: Tensor, state: dict[str, Tensor],
             batches: list[Tensor], config: LocalConfig
             ) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        personal = state["personal"]
        loss = theta.new_zeros(theta.size(0))
        for _ in range(self.inner_steps):
            g, loss = problem.grad(personal, batches[0])
            if config.weight_decay:
                g = g + config.weight_decay * personal
            personal = personal - self.inner_lr * (g + self.lam * (personal - theta))
        theta = theta - config.lr * self.lam * (theta - personal)
        return theta, {"personal": personal}, loss

    def finish(self, theta: Tensor, state: dict[str, Tensor]
               ) -> tuple[Tensor, dict[str, Tensor]]:
        return theta, {"personal_x": state["personal"]}


@register_rule("fedrod")
@dataclass
class FedRoDStep(LocalRule):
    r"""The local step of FedRoD from `"On Bridging Generic and Personalized
    Federated Learning for Image Classification"
    <https://arxiv.org/abs/2107.00778>`_ (Chen and Chao, ICLR 2022), Fed-RoD
    with the balanced-softmax (BSM) loss and a linear personalized head:
    a body :math:`\phi` and a generic head :math:`g` are trained with the
    balanced-softmax loss of the client's class counts :math:`n_{i,c}`, and
    a personal head :math:`p` with cross-entropy on the sum of the detached
    generic logits and its own:

    .. math::
        \mathcal{L} = \mathrm{CE}\big(g(z) + \log n_i,\, y\big)
            + \mathrm{CE}\big(\mathrm{sg}[g(z)] + p(\mathrm{sg}[z]),\, y\big),
        \qquad z = \phi(x),

    (:math:`\mathrm{sg}` stops gradients), both on the same mini-batch, one
    SGD step each with the run's settings.

    The head is the model's last layer, a :class:`~torch.nn.Linear` whose
    bias ends it (every classification model of :mod:`pyg_fedgraph.models`).
    Such a head is linear in its parameters, so :math:`g(z) + p(z)` is the
    model with head :math:`g + p`, and :math:`g(z) + \log n_i` the model with
    bias :math:`b_g + \log n_i`: both losses are the run's cross-entropy on
    the model at shifted parameters, and their gradients come from
    :meth:`LocalProblem.grad` (the personal head takes the head coordinates
    of the second). A class the client lacks has :math:`\log 0 = -\infty`:
    its generic logit drops out of the client's softmax, as in PFLlib's and
    FL-bench's code. With BatchNorm the two forward passes update the
    running statistics twice per step.

    The rule's iterate is the client's personalized model (body, head
    :math:`g + p`), which the server sends; the state keeps :math:`g` and
    :math:`p` apart. The clients upload the generic model (body, :math:`g`)
    and return :math:`p` as ``personal_head`` :math:`(S, H)`. The reported
    loss is :math:`\mathcal{L}`.

    Args:
        generic_head (torch.Tensor): the server's generic head :math:`(H,)`,
            the same for every client.
        head_start (int): the flat offset of the head layer (it ends the
            parameter vector).
        bias_start (int): the flat offset of its bias (:math:`C` entries).
    """
    generic_head: Tensor
    head_start: int
    bias_start: int
    outputs: ClassVar[tuple[str, ...]] = ("personal_head",)

    def _head(self, theta: Tensor) -> slice:
        end = self.head_start + self.generic_head.numel()
        if end != theta.size(1) or not self.head_start <= self.bias_start < end:
            raise ValueError(f"FedRoD's head [{self.head_start}, {end}) with its bias at "
                             f"{self.bias_start} does not end a model of {theta.size(1)} "
                             f"parameters")
        return slice(self.head_start, end)

    def init_state(self, theta: Tensor, config: LocalConfig) -> dict[str, Tensor]:
        head = self._head(theta)
        generic = self.generic_head.to(theta).expand(theta.size(0), -1).clone()
        state = {"generic": generic, "personal": theta[:, head] - generic}
        state.update(_momentum_state(theta, config, "momentum"))
        state.update(_momentum_state(generic, config, "momentum_personal"))
        return state

    def step(self, problem: LocalProblem, theta: Tensor, state: dict[str, Tensor],
             batches: list[Tensor], config: LocalConfig
             ) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        head = self._head(theta)
        generic = theta.clone()
        generic[:, head] = state["generic"]
        counts = problem.class_counts().to(theta)
        bias = slice(self.bias_start, self.bias_start + counts.size(1))
        if bias.stop != head.stop:
            raise ValueError(f"FedRoD: the data has {counts.size(1)} classes, the head's "
                             f"bias holds {head.stop - self.bias_start} values")
        shifted = generic.clone()
        shifted[:, bias] = shifted[:, bias] + counts.log()
        g_generic, loss_generic = problem.grad(shifted, batches[0])
        personalized = generic.clone()
        personalized[:, head] = state["generic"] + state["personal"]
        g_sum, loss_personal = problem.grad(personalized, batches[0])
        generic, buf = _sgd_step(generic, g_generic, state, "momentum", config)
        personal, buf_p = _sgd_step(state["personal"], g_sum[:, head], state,
                                    "momentum_personal", config)
        new = generic.clone()
        new[:, head] = generic[:, head] + personal
        return new, {"generic": generic[:, head], "personal": personal, **buf, **buf_p}, \
            loss_generic + loss_personal

    def finish(self, theta: Tensor, state: dict[str, Tensor]
               ) -> tuple[Tensor, dict[str, Tensor]]:
        head = self._head(theta)
        upload = theta.clone()
        upload[:, head] = state["generic"]
        return upload, {"personal_head": state["personal"]}
