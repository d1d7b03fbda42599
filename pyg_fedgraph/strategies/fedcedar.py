"""FedCEDAR: clustering, a dynamic graph over cluster centres, propagation, distribution."""
from __future__ import annotations

import logging
from typing import Annotated, Literal

import torch
from torch import Tensor

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.nn.cluster_propagation import (
    ClusterGraphPropagation,
    client_clusters,
    cluster_graph,
    distribute,
)
from pyg_fedgraph.strategies.base import FederationContext, Strategy, TrainPlan
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.utils.clustering import kmeans
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["FedCEDAR"]

log = logging.getLogger(__name__)

EvaluateName = Literal["distributed", "local"]



@register_strategy("fedcedar")
class FedCEDAR(Strategy):
    r"""FedCEDAR from "Rethinking Personalized Federated Learning with
    Clustering-based Dynamic Graph Propagation" (Wang et al., PAKDD 2024).

    Each round :math:`t` the :math:`B` sampled clients upload their trained
    models :math:`w_{t,b}`. The server clusters them with Euclidean k-means
    into :math:`K` clusters with centres :math:`C_t` (Sec. 3.2, Eq. 1;
    :func:`~pyg_fedgraph.utils.clustering.kmeans`, best of ``num_init``
    restarts), builds the centre graph
    :math:`R_{kj} \propto \max(0, \cos(c_k, c_j))` with rows summing to one
    (Sec. 3.3; :func:`~pyg_fedgraph.nn.cluster_propagation.cluster_graph`),
    propagates :math:`P` times (Sec. 3.4, Eq. 2;
    :class:`~pyg_fedgraph.nn.ClusterGraphPropagation`) and distributes at
    round :math:`t + 1` (Sec. 3.5;
    :func:`~pyg_fedgraph.nn.cluster_propagation.distribute`):

    .. math::
        \hat{C}_t = R_t^{P}\, C_t, \qquad
        \theta_n^{t+1} = \begin{cases}
            \hat{c}_{t, k_n} & n \in S_t \text{ (cluster } k_n
                \text{ at round } t\text{)} \\
            \frac{1}{K} \sum_{k=1}^{K} \hat{c}_{t, k} & \text{otherwise.}
        \end{cases}

    Round 1 starts every client from the initial model; held-out clients
    always receive the mean. :meth:`collaboration_graph` gives the implied
    client-to-client weights, :meth:`cluster_graph_matrix` the centre graph.
    Restarts, seeding, evaluation, the collaboration graph, the near-uniform
    :math:`R` and the paper's settings: :doc:`/methods/fedcedar`.

    Args:
        num_clusters (int, optional): clusters :math:`K` (default: :obj:`5`,
            paper Sec. 4.1).
        num_steps (int, optional): propagation steps :math:`P`; :obj:`0`
            disables propagation (the paper's ablation AS-2)
            (default: :obj:`2`, paper Sec. 4.1).
        num_init (int, optional): k-means restarts per round; the one with
            the lowest objective :math:`J` is kept (default: :obj:`10`, as
            scikit-learn's ``n_init`` before version 1.4).
        evaluate (str, optional): ``"distributed"`` (the model each client
            would receive next round) or ``"local"`` (its own model after its
            last local training), which model :meth:`personalized_params`
            reports (default: :obj:`"distributed"`).

    Shapes:
        - **state:** propagated centres :math:`(K, D)` (the first
          ``num_centres`` rows are valid), centre graph :math:`(K, K)`,
          ``cluster_of`` :math:`(N,)` (:math:`-1` = not sampled last round).

    Example:
        >>> from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
        >>> cfg = ExperimentConfig(dataset="digits", strategy="fedcedar", rounds=3,
        ...                        overrides={"num_clusters": 3})
        >>> history = build_simulator(cfg).run()
    """

    def __init__(self,
                 num_clusters: Annotated[int, Range(ge=1), Search(3, 7)] = 5,
                 num_steps: Annotated[int, Range(ge=0), Search(1, 5)] = 2,
                 num_init: Annotated[int, Range(ge=1)] = 10,
                 evaluate: EvaluateName = "distributed") -> None:
        super().__init__()
        self.num_clusters = num_clusters
        self.num_steps = num_steps
        self.num_init = num_init
        self.evaluate = evaluate
        self.propagation = ClusterGraphPropagation(num_steps)
        self.register_buffer("centres", torch.empty(0))
        self.register_buffer("centre_graph", torch.empty(0))
        self.register_buffer("num_centres", torch.zeros((), dtype=torch.long))
        self.register_buffer("cluster_of", torch.empty(0, dtype=torch.long))

    def check_federation(self, num_clients: int, num_sampled: int,
                         has_prior_graph: bool) -> None:
        super().check_federation(num_clients, num_sampled, has_prior_graph)
        if self.num_clusters > num_clients:
            raise ValueError(f"fedcedar: num_clusters={self.num_clusters} exceeds the "
                             f"{num_clients} clients of the federation; use at most "
                             f"{num_sampled}, the clients sampled per round")
        if self.num_clusters > num_sampled:
            # kmeans keeps at most one cluster per uploaded client: allowed, but
            # the clustering then separates nothing.
            log.warning("fedcedar: num_clusters=%d exceeds the %d clients sampled per round "
                        "(of %d): every sampled client is a cluster of its own",
                        self.num_clusters, num_sampled, num_clients)

    def default_sample_fraction(self, num_clients: int) -> float:
        # Paper Sec. 4.1: 30% of the clients upload each round.
        return 0.3

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        init = ctx.init_params.detach()
        k = self.num_clusters
        # Before round 1 the server holds one centre, the common initial model.
        self.centres = init.new_zeros(k, init.numel())
        self.centres[0] = init
        self.centre_graph = init.new_zeros(k, k)
        self.centre_graph[0, 0] = 1.0
        self.num_centres = torch.ones((), dtype=torch.long)
        self.cluster_of = torch.full((ctx.num_clients,), -1, dtype=torch.long)

    # ------------------------------------------------------------------ rounds
    def _distribute(self, clients: Tensor) -> Tensor:
        k = int(self.num_centres)
        return distribute(self.centres[:k], self.cluster_of[clients.to(torch.long)])

    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        self._require_setup()
        return TrainPlan(params=self._distribute(clients))

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        ctx = self._require_setup()
        if graph.num_clients == 0:
            # Nobody uploaded: keep the centres; nobody was "sampled last round".
            self.cluster_of = torch.full_like(self.cluster_of, -1)
            return
        centres, assignment = self._cluster(graph.x.detach(),
                                            make_generator(ctx.seed, "kmeans", rnd))
        k = centres.size(0)
        self.centre_graph.zero_()
        self.centre_graph[:k, :k] = cluster_graph(centres)
        self.centres.zero_()
        self.centres[:k] = self.propagation(centres)
        self.num_centres.fill_(k)
        self.cluster_of = client_clusters(assignment, graph.client_id, ctx.num_clients)
        log.debug("round %d: %d clients in %d clusters of sizes %s", rnd, graph.num_clients, k,
                  torch.bincount(assignment, minlength=k).tolist())

    def _cluster(self, x: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        # Restarts run one after the other from one generator (a loop over restarts, not
        # over clients); the lowest k-means objective J (Eq. 1) wins, the first on ties.
        best = kmeans(x, self.num_clusters, generator=generator)
        best_cost = float(((x - best[0][best[1]]) ** 2).sum())
        for _ in range(self.num_init - 1):
            centres, assignment = kmeans(x, self.num_clusters, generator=generator)
            cost = float(((x - centres[assignment]) ** 2).sum())
            if cost < best_cost:
                best, best_cost = (centres, assignment), cost
        return best

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        self._require_setup()
        if self.evaluate == "local":
            return None
        return self._distribute(clients)

    # -------------------------------------------------------------- inspection
    def last_assignment(self) -> tuple[Tensor, Tensor]:
        r"""The latest clustering: ids of the clients clustered in the last
        round :math:`(B,)` (sorted) and their clusters :math:`(B,)`, values in
        ``[0, num_centres)``. Both are empty before the first round."""
        self._require_setup()
        clients = (self.cluster_of >= 0).nonzero().view(-1)
        return clients, self.cluster_of[clients]

    def cluster_graph_matrix(self) -> Tensor:
        r"""The latest centre graph :math:`R` :math:`(K', K')` (row
        :math:`k` = weights centre :math:`k` gives, rows sum to one), before
        the :math:`P` propagation steps."""
        self._require_setup()
        k = int(self.num_centres)
        return self.centre_graph[:k, :k].clone()

    def collaboration_graph(self) -> Tensor | None:
        r"""Weight :math:`A_{ij}` of client :math:`j`'s last upload in the
        model client :math:`i` receives next round :math:`(N, N)` (see the
        class docstring); ``None`` before the first round."""
        self._require_setup()
        clients, assignment = self.last_assignment()
        if clients.numel() == 0:
            return None
        k = int(self.num_centres)
        mix = torch.linalg.matrix_power(self.centre_graph[:k, :k], self.num_steps)
        # Each row of ``table`` says what a receiver of centre k (or of the mean, row K)
        # takes from each cluster; dividing by cluster sizes spreads it over the members.
        table = torch.cat([mix, mix.mean(dim=0, keepdim=True)], dim=0)
        sizes = torch.bincount(assignment, minlength=k).to(table.dtype)
        receiver = torch.where(self.cluster_of >= 0, self.cluster_of,
                               torch.full_like(self.cluster_of, k))
        n = self.cluster_of.numel()
        out = table.new_zeros(n, n)
        out[:, clients] = table[receiver][:, assignment] / sizes[assignment]
        return out
