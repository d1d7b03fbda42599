"""IFCA: clients choose among K cluster models by their own loss."""
from __future__ import annotations

import logging
from typing import Annotated, ClassVar

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.nn.functional import cluster_mean
from pyg_fedgraph.strategies.base import FederationContext, Strategy
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.jobs import ChooseModel, EvaluatePlan, TrainPlan
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["IFCA"]

log = logging.getLogger(__name__)


@register_strategy("ifca")
class IFCA(Strategy):
    r"""The Iterative Federated Clustering Algorithm from `"An Efficient
    Framework for Clustered Federated Learning"
    <https://arxiv.org/abs/2006.04088>`_ (Ghosh et al., NeurIPS 2020),
    with model averaging (the paper's Algorithm 2, option II).

    The server keeps :math:`K` cluster models :math:`\theta_1, \ldots,
    \theta_K` and sends all of them to the sampled clients. Client :math:`i`
    estimates its cluster by its own training loss and trains that model
    (the :class:`~pyg_fedgraph.train.jobs.ChooseModel` client job):

    .. math::
        \hat{k}_i = \arg\min_k F_i(\theta_k), \qquad
        \tilde{\theta}_i = \mathrm{LocalSGD}_i(\theta_{\hat{k}_i}),

    and the server averages the trained models within each cluster
    (:func:`~pyg_fedgraph.nn.functional.cluster_mean`):

    .. math::
        \theta_k = \frac{\sum_{i \in S_k} w_i \tilde{\theta}_i}
                        {\sum_{i \in S_k} w_i},
        \qquad S_k = \{i : \hat{k}_i = k\},

    a cluster no sampled client chose keeping its model. Evaluation lets
    every client choose again, by its training loss, among the current
    cluster models.

    Implementation choices:

    * Weights :math:`w_i = n_i` (``weighted=True``, FedAvg's convention, so
      that :math:`K = 1` is FedAvg exactly); ``weighted=False`` is the
      paper's plain average.
    * Initialization: the paper draws the :math:`K` models at random. Here
      :math:`\theta_1` is the common initial model and every other
      :math:`\theta_k` adds Gaussian noise to it, per layer with the
      standard deviation of that layer's initial parameters times
      ``init_scale`` (drawn from the run's seed); identical models would all
      be chosen alike. Small perturbations make the first choice follow each
      client's gradient (clients whose gradients point apart choose apart).
      Like the paper's algorithm, the outcome depends on the initialization:
      all clients may settle on one cluster, which no later round undoes
      (on the two-group toy of the tests, 1 seed in 4); try other seeds.

    Args:
        num_clusters (int, optional): :math:`K` (default: :obj:`2`).
        init_scale (float, optional): spread of the initial cluster models
            (default: :obj:`0.1`).
        weighted (bool, optional): average weighted by sample counts
            (default: :obj:`True`).

    Shapes:
        - **state:** cluster models ``cluster_params`` :math:`(K, D)`, each
          client's last choice ``cluster_of`` :math:`(N,)` (:math:`-1` before
          its first round).
    """
    supports_private_parameters: ClassVar[bool] = False  # works on whole models

    def __init__(self, num_clusters: Annotated[int, Range(ge=1), Search(2, 8)] = 2,
                 init_scale: Annotated[float, Range(ge=0.0)] = 0.1,
                 weighted: bool = True) -> None:
        super().__init__()
        self.num_clusters = num_clusters
        self.init_scale = init_scale
        self.weighted = weighted
        self.register_buffer("cluster_params", torch.empty(0))
        self.register_buffer("cluster_of", torch.empty(0, dtype=torch.long))

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        init = ctx.init_params.detach()
        models = init.unsqueeze(0).repeat(self.num_clusters, 1)
        if self.num_clusters > 1 and self.init_scale > 0:
            gen = make_generator(ctx.seed, "ifca-init")
            noise = torch.randn(self.num_clusters - 1, init.numel(), generator=gen,
                                dtype=init.dtype)
            ptr = ctx.layout.ptr.tolist()
            for a, b in zip(ptr[:-1], ptr[1:], strict=True):  # a loop over layers
                std = float(init[a:b].std()) if b - a > 1 else 0.0
                noise[:, a:b] *= self.init_scale * std
            models[1:] += noise.to(init.device)
        self.cluster_params = models
        self.cluster_of = torch.full((ctx.num_clients,), -1, dtype=torch.long,
                                     device=init.device)

    # --------------------------------------------------------------- rounds
    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        return TrainPlan(start_job=ChooseModel(self.cluster_params.clone()))

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        self._require_setup()
        if "choice" not in graph:
            raise ValueError("IFCA needs each client's cluster choice as graph.choice: the "
                             "output of the ChooseModel start job of its plan")
        ids = graph.client_id.to(torch.long)
        choice = graph.choice.to(torch.long)
        weight = graph.num_samples if self.weighted else None
        means, total = cluster_mean(graph.x.detach().to(self.cluster_params.dtype), choice,
                                    self.num_clusters, weight)
        chosen = total > 0
        self.cluster_params[chosen] = means[chosen]
        self.cluster_of[ids] = choice
        log.debug("round %d: cluster sizes %s", rnd,
                  torch.bincount(choice, minlength=self.num_clusters).tolist())

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        r"""The cluster model each client chose in its last round (the first
        cluster model before it trained). Evaluation lets clients choose
        again (:meth:`configure_evaluate`)."""
        self._require_setup()
        last = self.cluster_of[clients.to(torch.long)].clamp(min=0)
        return self.cluster_params[last].clone()

    def configure_evaluate(self, clients: Tensor) -> EvaluatePlan:
        r"""Every evaluated client takes the current cluster model with the
        lowest loss on its training data, as in training."""
        self._require_setup()
        return EvaluatePlan(start_job=ChooseModel(self.cluster_params.clone()))

    def collaboration_graph(self) -> Tensor | None:
        r"""Within-cluster averaging weights :math:`(N, N)` of the clients'
        last choices: :math:`A_{ij} = w_j / \sum_{l \in S_{c(i)}} w_l` for
        :math:`j` in client :math:`i`'s cluster (uniform :math:`w` with
        ``weighted=False``); rows of clients that never trained are zero."""
        ctx = self._require_setup()
        c = self.cluster_of
        w = (ctx.num_samples if self.weighted else torch.ones_like(ctx.num_samples)).to(
            self.cluster_params.dtype)
        same = (c.unsqueeze(1) == c.unsqueeze(0)) & (c >= 0).unsqueeze(1) & (c >= 0).unsqueeze(0)
        a = same.to(w.dtype) * w.unsqueeze(0)
        return a / a.sum(dim=1, keepdim=True).clamp(min=torch.finfo(a.dtype).tiny)

    def clusters(self) -> list[Tensor]:
        r"""The client ids that chose each cluster in their last round."""
        self._require_setup()
        return [(self.cluster_of == k).nonzero().view(-1) for k in range(self.num_clusters)]
