r"""Graph classification over clients: the TUDataset collection's graphs
dealt to clients in GCFL's settings (Xie et al., "Federated Graph
Classification over Non-IID Graphs", NeurIPS 2021), as federations whose
clients hold sets of graphs
(:class:`~pyg_fedgraph.data.GraphSetFederatedDataset`).

* one dataset over clients (``num_clients``): GCFL's chunks or label skew,
  :func:`~pyg_fedgraph.datasets.one_dataset_federation`;
* across datasets (``clients_per_dataset``): every dataset held by that many
  clients, :func:`~pyg_fedgraph.datasets.cross_dataset_federation`, the
  dataset being each client's true group (``client_labels``). Node features
  are zero-padded to the widest dataset and the head has the most classes of
  any dataset, each client's own classes in the federation's ``class_mask``.

The client protocol is GCFL's (its code, ``main_multiDS.py`` and
``setupGC.py`` of Oxfordblue7/GCFL, commit a6691ae): the GIN of
:class:`~pyg_fedgraph.models.GIN` with only its GIN layers federated, Adam
(lr 0.001, weight decay 5e-4) whose state each client keeps across rounds,
batches of 128 graphs, one local epoch, 200 rounds.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyg_fedgraph.data.federated_dataset import DatasetDefaults
from pyg_fedgraph.data.graph_set_dataset import GraphSetFederatedDataset
from pyg_fedgraph.datasets.graph_federation import (
    GraphFederation,
    GraphSplitName,
    cross_dataset_federation,
    one_dataset_federation,
)
from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.datasets.tu import check_tu_names, read_tu

__all__ = ["GCFL_DEFAULTS", "federate_graph_sets", "tu", "tu_names"]

#: GCFL's client protocol (see the module docstring).
GCFL_DEFAULTS = DatasetDefaults(
    "gin", {"hidden_channels": 64, "num_layers": 3, "dropout": 0.5},
    {"optimizer": "adam", "lr": 0.001, "weight_decay": 5e-4, "batch_size": 128, "epochs": 1,
     "keep_optimizer_state": True},
    rounds=200)


def tu_names(names: str | Sequence[str]) -> list[str]:
    r"""Dataset names from a comma-separated string or a list, each once, in
    order."""
    items = names.split(",") if isinstance(names, str) else list(names)
    out = [n.strip() for n in items if isinstance(n, str) and n.strip()]
    if not out or len(out) != len(items):
        raise ValueError(f"data.names: expected dataset names separated by commas, e.g. "
                         f"MUTAG,PROTEINS; got {names!r}")
    return out


def federate_graph_sets(federation: GraphFederation, name: str, *,
                        defaults: DatasetDefaults | None = GCFL_DEFAULTS,
                        info: dict | None = None) -> GraphSetFederatedDataset:
    r"""The federation of ``federation``'s clients, each holding its train,
    validation and test graphs, with the class mask of its dataset; the
    dataset of every client is its true group (``client_labels``) when the
    federation holds several datasets."""
    several = len(federation.datasets) > 1
    return GraphSetFederatedDataset.from_clients(
        name, [(c.train, c.val, c.test) for c in federation], federation.num_classes,
        class_mask=federation.class_mask(),
        client_labels=federation.group if several else None, defaults=defaults,
        info={"datasets": list(federation.datasets),
              "dataset_num_features": list(federation.dataset_num_features),
              "dataset_num_classes": list(federation.dataset_num_classes),
              "client_dataset": [c.dataset for c in federation], **(info or {})})


@register_dataset("tu")
def tu(names: str | list[str] = "MUTAG,PROTEINS,ENZYMES,AIDS", root: str | None = None,
       clients_per_dataset: int = 1, num_clients: int | None = None,
       partition: GraphSplitName = "gcfl", beta: float = 0.5,
       graphs_per_client: int | None = None, use_node_attr: bool = False,
       download: bool = False, seed: int = 0) -> GraphSetFederatedDataset:
    r"""Graph classification datasets of the TUDataset collection over
    clients, in GCFL's settings (see the module docstring).

    With ``num_clients``, the one dataset of ``names`` is dealt to that many
    clients (GCFL's single-dataset setting, ``partition`` ``"gcfl"`` or
    ``"dirichlet"``); otherwise every dataset of ``names`` is held by
    ``clients_per_dataset`` clients (GCFL's cross-dataset setting has one).
    Every client's graphs are split 80/10/10, stratified by label.

    Args:
        names (str or list): dataset names, comma-separated or a list, e.g.
            ``"MUTAG,PROTEINS,ENZYMES,AIDS"`` (the default: four of the ten
            datasets of GCFL's "biochem" group).
        root (str): the folder holding the datasets' files (the files of
            ``NAME`` in ``root``, ``root/NAME`` or ``root/NAME/raw``).
        clients_per_dataset (int, optional): clients holding each dataset
            (default: :obj:`1`).
        num_clients (int, optional): clients sharing one dataset
            (default: :obj:`None`, the cross-dataset setting).
        partition (str, optional): ``"gcfl"`` (GCFL's chunks) or
            ``"dirichlet"`` (label skew), with ``num_clients``
            (default: ``"gcfl"``).
        beta (float, optional): the Dirichlet concentration
            (default: :obj:`0.5`).
        graphs_per_client (int, optional): graphs of every client across
            datasets (default: all of its dataset's share).
        use_node_attr (bool, optional): continuous node attributes too
            (default: :obj:`False`, as GCFL).
        download (bool, optional): fetch missing datasets into ``root``
            (default: :obj:`False`).
        seed (int, optional): seed of the split (default: :obj:`0`).

    Raises:
        ValueError: one line, for an unknown dataset name, more clients than
            a dataset's graphs allow, or ``num_clients`` with several
            datasets; FileNotFoundError, one line, for missing files.
    """
    listed = tu_names(names)
    if root is None:
        raise FileNotFoundError(f"the tu datasets need their files: give the folder holding "
                                f"{', '.join(listed)} with --set data.root=DIR (Python: "
                                f"tu(root=DIR)), and add --set data.download=true to fetch "
                                f"them there")
    if num_clients is None:
        federation = cross_dataset_federation(listed, clients_per_dataset, root=root,
                                              download=download, use_node_attr=use_node_attr,
                                              graphs_per_client=graphs_per_client, seed=seed)
        setting = "cross-dataset"
    else:
        if len(listed) != 1:
            raise ValueError(f"num_clients={num_clients} deals one dataset to clients (GCFL's "
                             f"single-dataset setting), but names lists {len(listed)}: give one "
                             f"name, or data.clients_per_dataset for several datasets")
        check_tu_names(listed, root, download=download)
        data = read_tu(listed[0], Path(root), download=download, use_node_attr=use_node_attr)
        federation = one_dataset_federation(data, num_clients, partition=partition, beta=beta,
                                            seed=seed)
        setting = "one-dataset"
    return federate_graph_sets(federation, "tu", info={"setting": setting})
