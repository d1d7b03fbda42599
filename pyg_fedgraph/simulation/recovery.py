r"""Graph recovery per round: how well a strategy's collaboration graph (or
its clusters) recovers a federation's known client groups, in the history."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pyg_fedgraph.strategies.base import Strategy
from pyg_fedgraph.utils.recovery import (
    READING_RULES,
    ReadingRule,
    graph_recovery,
    partition_scores,
)

if TYPE_CHECKING:
    from pyg_fedgraph.data.federated_dataset import FederatedDataset
    from pyg_fedgraph.engine.history import RoundRecord
    from pyg_fedgraph.simulation.simulator import Simulator

__all__ = ["GroupRecoveryCallback", "strategy_clusters"]


def strategy_clusters(strategy: Strategy) -> tuple[Tensor, Tensor] | None:
    r"""A clustering strategy's own clusters as ``(clients, cluster)``: the
    ids of the clients it has placed in a cluster and their cluster ids
    (both :math:`(B,)`, CPU), or :obj:`None` for a strategy without explicit
    clusters. Read from ``last_assignment()``
    (:class:`~pyg_fedgraph.strategies.FedCEDAR`: the clients
    clustered in the last round) or ``clusters()``, one tensor of client ids
    per cluster (:class:`~pyg_fedgraph.strategies.CFL`,
    :class:`~pyg_fedgraph.strategies.IFCA`: the clients' last choices;
    clients never placed are in none)."""
    # Duck-typed: the methods are the strategies' own, not part of Strategy.
    last_assignment = getattr(strategy, "last_assignment", None)
    if callable(last_assignment):
        clients, cluster = last_assignment()
        return clients.cpu().long(), cluster.cpu().long()
    clusters = getattr(strategy, "clusters", None)
    if callable(clusters):
        members = [c.cpu().long() for c in clusters()]
        if not members:
            return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        clients = torch.cat(members)
        cluster = torch.cat([torch.full_like(c, k) for k, c in enumerate(members)])
        order = clients.argsort()
        return clients[order], cluster[order]
    return None


class GroupRecoveryCallback:
    r"""A :class:`~pyg_fedgraph.simulation.Simulator` round callback that
    scores, after every evaluated round, the client groups read from the
    strategy against the dataset's true groups (``client_labels``) with the
    Rand index and the adjusted Rand index
    (:func:`~pyg_fedgraph.utils.partition_scores`), setting
    ``record.extra["rand_index"]`` and ``record.extra["adjusted_rand_index"]``
    (columns of ``history.csv``; the run's summary carries the last round's).

    What is read, over the clients that train (held-out clients are left
    out: nothing of theirs was learned):

    * a clustering strategy (:func:`strategy_clusters`: FedCEDAR, CFL, IFCA)
      is scored on its own clusters, over the clients it has placed;
    * any other strategy on the groups read from its
      :meth:`~pyg_fedgraph.strategies.Strategy.collaboration_graph` by
      :func:`~pyg_fedgraph.utils.read_groups` with the true number
      of groups: spectral clustering of :math:`(|W| + |W|^\top)/2` by default,
      or the connected components of each client's top-:math:`k` links with
      ``rule="components"``.

    A round where the strategy has no graph (or has clustered fewer than two
    clients) sets nothing. The callback keeps no state: the scores live in
    the history, which checkpoints keep, so a resumed run has the same
    columns. The experiment layer adds it to every run whose dataset has
    ``client_labels`` and whose strategy has a graph or clusters
    (:meth:`applies`).

    Args:
        rule (str, optional): how groups are read from a graph:
            ``"spectral"`` or ``"components"`` (default: ``"spectral"``).
        k (int, optional): links per client of ``"components"``
            (default: :obj:`None`, the true mean group size minus one).
        seed (int, optional): seed of the spectral clustering
            (default: :obj:`0`).
    """

    def __init__(self, rule: ReadingRule = "spectral", k: int | None = None,
                 seed: int = 0) -> None:
        if rule not in READING_RULES:
            raise ValueError(f"unknown reading rule {rule!r}; choose one of {READING_RULES}")
        if k is not None and rule != "components":
            raise ValueError("k is the links per client of rule='components'")
        self.rule = rule
        self.k = k
        self.seed = seed

    @staticmethod
    def applies(dataset: FederatedDataset, strategy: Strategy) -> bool:
        r"""Whether runs of ``strategy`` on ``dataset`` can be scored: the
        dataset has ``client_labels`` that are true groups (not each
        client's dominant class, ``info["client_labels"]``) and the strategy has clusters
        (:func:`strategy_clusters`) or implements
        :meth:`~pyg_fedgraph.strategies.Strategy.collaboration_graph`."""
        if dataset.client_labels is None or \
                dataset.info.get("client_labels") == "dominant class":
            return False
        has_clusters = any(callable(getattr(strategy, name, None))
                           for name in ("last_assignment", "clusters"))
        return has_clusters or \
            type(strategy).collaboration_graph is not Strategy.collaboration_graph

    def scores(self, sim: Simulator) -> dict[str, float] | None:
        r"""The scores of the simulator's current state (:obj:`None` when
        there is nothing to score)."""
        truth = sim.dataset.client_labels
        if truth is None:
            raise ValueError(f"dataset {sim.dataset.name!r} has no client_labels (true client "
                             f"groups) to score the strategy's graph against")
        truth = truth.cpu().long()
        trained = torch.zeros(truth.numel(), dtype=torch.bool)
        trained[sim.train_clients.cpu()] = True
        clusters = strategy_clusters(sim.strategy)
        if clusters is not None:
            clients, cluster = clusters
            keep = trained[clients]
            clients, cluster = clients[keep], cluster[keep]
            if clients.numel() < 2:
                return None
            return partition_scores(cluster, truth[clients])
        weight = sim.strategy.collaboration_graph()
        if weight is None:
            return None
        if tuple(weight.shape) != (truth.numel(), truth.numel()):
            raise ValueError(f"strategy {sim.strategy.name!r} gave a collaboration matrix of "
                             f"shape {tuple(weight.shape)} for {truth.numel()} clients")
        index = trained.nonzero().view(-1)
        if index.numel() < 2:
            return None
        weight = weight.detach().cpu()[index][:, index]
        return graph_recovery(weight, truth[index], rule=self.rule, k=self.k, seed=self.seed)

    def __call__(self, sim: Simulator, record: RoundRecord) -> None:
        scores = self.scores(sim)
        if scores is not None:
            record.extra.update(scores)

    def __repr__(self) -> str:
        k = "" if self.k is None else f", k={self.k}"
        return f"{self.__class__.__name__}(rule={self.rule!r}{k}, seed={self.seed})"

