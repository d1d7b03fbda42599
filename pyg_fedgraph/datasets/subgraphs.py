r"""Subgraph federated learning: one graph split over clients, each client
holding the subgraph of its nodes (Cora, CiteSeer, PubMed, and a synthetic
graph with planted client groups).

The graph is prepared as FED-PUB prepares it (largest connected component,
row-normalized features, a random 20 / 40 / 40 node split over the whole
graph: :class:`~pyg_fedgraph.transforms.FedPubPreprocess`), then split by a
partitioner of :mod:`pyg_fedgraph.transforms` (``partition``):

* ``"metis"``: FED-PUB's disjoint setting, one METIS part per client;
* ``"overlapping"``: FED-PUB's overlapping setting, ``num_clients /
  clients_per_part`` METIS parts and ``clients_per_part`` clients sampling
  half of each part's nodes, so the clients of a part form a known group;
* ``"louvain"``: Louvain communities packed into clients;
* ``"random-nodes"``: every node to a random client.

The federation's prior client graph links clients by the edges the split
cut (:func:`~pyg_fedgraph.transforms.cut_edge_graph`: the number of original
edges between their subgraphs), so Panacea and SFL run on a graph that comes
from the data. Where clients have true groups (the overlapping setting's
parts, the synthetic graph's communities) they are the data set's
``client_labels``, which the graph-recovery metric compares a strategy's
collaboration graph with (:class:`~pyg_fedgraph.simulation.recovery.GroupRecoveryCallback`).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import torch
from torch_geometric.data import Data

from pyg_fedgraph.data.federated_dataset import DatasetDefaults
from pyg_fedgraph.data.graph_dataset import GraphFederatedDataset
from pyg_fedgraph.datasets.planetoid import PLANETOID_NAMES, read_planetoid
from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.datasets.synthetic_graphs import contextual_sbm
from pyg_fedgraph.transforms import (
    CommunityPartition,
    FedPubPreprocess,
    LouvainPartition,
    MetisPartition,
    OverlappingPartition,
    RandomNodePartition,
    cut_edge_graph,
    partition_report,
)

__all__ = ["GraphSplitName", "GRAPH_SPLITS", "federate_graph", "cora", "citeseer", "pubmed",
           "planted_graphs", "SUBGRAPH_DEFAULTS"]

log = logging.getLogger(__name__)

#: How a graph is split over clients (``--partition``).
GraphSplitName = Literal["metis", "overlapping", "louvain", "random-nodes"]
GRAPH_SPLITS: tuple[str, ...] = ("metis", "overlapping", "louvain", "random-nodes")

#: FED-PUB's client protocol (Baek et al., ICML 2023, its released code): a
#: two-layer GCN of width 128 with dropout 0.5 and a linear classifier, Adam
#: (lr 0.01, weight decay 1e-6) whose state each client keeps across rounds,
#: one local epoch of full-batch training on its subgraph, 100 rounds.
SUBGRAPH_DEFAULTS = DatasetDefaults(
    "gcn", {"hidden_channels": 128, "num_layers": 2, "dropout": 0.5},
    {"optimizer": "adam", "lr": 0.01, "weight_decay": 1e-6, "full_batch": True, "epochs": 1,
     "keep_optimizer_state": True},
    rounds=100)


def federate_graph(data: Data, name: str, num_clients: int = 10,
                   partition: GraphSplitName = "metis", seed: int = 0, *,
                   clients_per_part: int = 5, sample_ratio: float = 0.5,
                   defaults: DatasetDefaults | None = SUBGRAPH_DEFAULTS,
                   info: dict | None = None) -> GraphFederatedDataset:
    r"""``data`` (with ``x``, ``edge_index``, ``y`` and node masks) split over
    ``num_clients`` clients by ``partition`` (see the module docstring), with
    the cut-edge prior graph; ``client_labels`` are the clients' groups where
    the partition gives true ones (``"overlapping"``)."""
    if partition not in GRAPH_SPLITS:
        raise ValueError(f"a graph is split over clients by partition "
                         f"{', '.join(GRAPH_SPLITS)}; got {partition!r}")
    if partition == "metis":
        splitter = MetisPartition(num_clients, seed=seed)
    elif partition == "overlapping":
        splitter = OverlappingPartition(num_clients, clients_per_part=clients_per_part,
                                        sample_ratio=sample_ratio, seed=seed)
    elif partition == "louvain":
        splitter = LouvainPartition(num_clients, seed=seed)
    else:
        splitter = RandomNodePartition(num_clients, seed=seed)
    clients = splitter(data)
    edge_index, edge_weight = cut_edge_graph(data, clients)
    groups = (torch.tensor([int(c.group) for c in clients])
              if partition == "overlapping" else None)
    report = partition_report(data, clients)
    empty = [i for i, c in enumerate(clients) if int(c.train_mask.sum()) == 0]
    if empty:
        shown = ", ".join(map(str, empty[:5])) + (", ..." if len(empty) > 5 else "")
        raise ValueError(f"{len(empty)} of the {len(clients)} clients of the {partition} split "
                         f"hold no training node ({shown}); use fewer clients")
    num_classes = int(data.y.max()) + 1
    return GraphFederatedDataset.from_clients(
        name, clients, num_classes, edge_index=edge_index, edge_weight=edge_weight,
        client_labels=groups, defaults=defaults,
        info={"partition": partition, "report": report, **(info or {})})


def _planetoid(name: str, root: str | Path | None, num_clients: int, partition: GraphSplitName,
               seed: int, download: bool, clients_per_part: int, sample_ratio: float
               ) -> GraphFederatedDataset:
    title = PLANETOID_NAMES[name]
    if root is None:
        raise FileNotFoundError(
            f"{title} needs Planetoid's raw files ind.{name}.*: give their folder with "
            f"--set data.root=DIR (Python: {name}(root=DIR)), and add --set data.download=true "
            f"to fetch them there from https://github.com/kimiyoung/planetoid (checked)")
    data = read_planetoid(name, root, download=download)
    data = FedPubPreprocess(seed=seed)(data)
    return federate_graph(data, name, num_clients, partition, seed,
                          clients_per_part=clients_per_part, sample_ratio=sample_ratio)


@register_dataset("cora")
def cora(root: str | None = None, num_clients: int = 10, partition: GraphSplitName = "metis",
         seed: int = 0, download: bool = False, clients_per_part: int = 5,
         sample_ratio: float = 0.5) -> GraphFederatedDataset:
    r"""Cora (2,708 papers, 7 classes; Planetoid's files) split over clients,
    prepared as FED-PUB prepares it (see the module docstring).

    Args:
        root (str): the folder of Planetoid's raw files ``ind.cora.*``
            (or PyG's ``<root>/Cora/raw/``).
        num_clients (int, optional): clients (default: :obj:`10`).
        partition (str, optional): ``"metis"``, ``"overlapping"``,
            ``"louvain"`` or ``"random-nodes"`` (default: ``"metis"``).
        seed (int, optional): seed of the node split and the partition
            (default: :obj:`0`).
        download (bool, optional): fetch the files into ``root`` when they
            are missing, checksums verified (default: :obj:`False`).
        clients_per_part (int, optional): clients per METIS part of the
            overlapping setting (default: :obj:`5`, FED-PUB's).
        sample_ratio (float, optional): share of its part's nodes an
            overlapping client samples (default: :obj:`0.5`, FED-PUB's).
    """
    return _planetoid("cora", root, num_clients, partition, seed, download, clients_per_part,
                      sample_ratio)


@register_dataset("citeseer")
def citeseer(root: str | None = None, num_clients: int = 10,
             partition: GraphSplitName = "metis", seed: int = 0, download: bool = False,
             clients_per_part: int = 5, sample_ratio: float = 0.5) -> GraphFederatedDataset:
    r"""CiteSeer (3,327 papers, 6 classes; Planetoid's files) split over
    clients, as :func:`cora`."""
    return _planetoid("citeseer", root, num_clients, partition, seed, download,
                      clients_per_part, sample_ratio)


@register_dataset("pubmed")
def pubmed(root: str | None = None, num_clients: int = 10,
           partition: GraphSplitName = "metis", seed: int = 0, download: bool = False,
           clients_per_part: int = 5, sample_ratio: float = 0.5) -> GraphFederatedDataset:
    r"""PubMed (19,717 papers, 3 classes; Planetoid's files) split over
    clients, as :func:`cora`."""
    return _planetoid("pubmed", root, num_clients, partition, seed, download,
                      clients_per_part, sample_ratio)


@register_dataset("planted-graphs")
def planted_graphs(num_clients: int = 20, num_groups: int = 4, separation: float = 1.0,
                   num_nodes: int = 800, num_features: int = 16, seed: int = 0
                   ) -> GraphFederatedDataset:
    r"""A synthetic graph with planted communities, offline: a contextual
    stochastic block model (:func:`~pyg_fedgraph.datasets.contextual_sbm`,
    ``num_groups`` communities whose label distributions and class
    means move apart with ``separation`` :math:`s \in [0, 1]`) split so that
    each client's nodes lie in one community, ``num_clients / num_groups``
    clients each: the communities are the true client groups
    (``client_labels``). The prior client graph is the cut-edge graph.

    Args:
        num_clients (int, optional): clients, a multiple of ``num_groups``
            (default: :obj:`20`).
        num_groups (int, optional): communities :math:`K` (default: :obj:`4`).
        separation (float, optional): :math:`s` (default: :obj:`1.0`).
        num_nodes (int, optional): nodes of the graph (default: :obj:`800`).
        num_features (int, optional): node features (default: :obj:`16`).
        seed (int, optional): seed of the graph and the split
            (default: :obj:`0`).
    """
    if num_groups < 1 or num_clients % num_groups:
        raise ValueError(f"num_clients={num_clients} must be a multiple of num_groups="
                         f"{num_groups} (clients are split evenly over the communities)")
    data = contextual_sbm(num_nodes=num_nodes, num_communities=num_groups,
                          num_classes=num_groups, num_features=num_features,
                          separation=separation, seed=seed)
    clients = CommunityPartition(num_clients, seed=seed)(data)
    edge_index, edge_weight = cut_edge_graph(data, clients)
    defaults = DatasetDefaults("gcn", {"hidden_channels": 32},
                               {"optimizer": "adam", "lr": 0.01, "full_batch": True,
                                "epochs": 1}, rounds=30)
    return GraphFederatedDataset.from_clients(
        "planted-graphs", clients, num_groups, edge_index=edge_index, edge_weight=edge_weight,
        client_labels=torch.tensor([int(c.group) for c in clients]), defaults=defaults,
        info={"partition": "community", "separation": separation, "synthetic": True,
              "report": partition_report(data, clients)})
