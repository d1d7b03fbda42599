r"""METR-LA and PEMS-BAY as published with DCRNN (Li et al., ICLR 2018), and
their registered builders ``"metr-la"`` / ``"pems-bay"``."""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.datasets.traffic.dataset import Normalization, TrafficDataset
from pyg_fedgraph.datasets.traffic.io import (
    Fetch,
    PathLike,
    RemoteFile,
    adjacency_to_edges,
    bundled_sensor_graph,
    download_file,
    load_sensor_graph,
    read_speed_h5,
)
from pyg_fedgraph.datasets.traffic.synthetic import synthetic_traffic

__all__ = ["METRLA", "PEMSBAY", "metr_la", "pems_bay"]

log = logging.getLogger(__name__)

class _DCRNNDataset(TrafficDataset):
    r"""A DCRNN dataset read from ``root`` (see :class:`METRLA`)."""

    NAME = ""
    SPEED_FILE = ""
    GRAPH_FILE = ""
    RESOURCES: tuple[RemoteFile, ...] = ()
    SOURCE = ""

    def __init__(self, root: PathLike, download: bool = False, *,
                 graph_path: PathLike | None = None,
                 normalization: Normalization = "global", input_steps: int = 12,
                 output_steps: int = 12, fractions: Sequence[float] = (0.7, 0.1, 0.2),
                 horizons: Sequence[int] = (3, 6, 12),
                 urls: Mapping[str, str] | None = None,
                 checksums: Mapping[str, str] | None = None,
                 fetch: Fetch | None = None) -> None:
        self.root = Path(root)
        self._ensure_files(download, dict(urls or {}), dict(checksums or {}), fetch)
        if graph_path is None and (self.root / self.GRAPH_FILE).exists():
            graph_path = self.root
        ids, adj, graph = self.road_graph(graph_path)
        table = read_speed_h5(self.root / self.SPEED_FILE).select(ids)
        edge_index, edge_weight = adjacency_to_edges(adj)
        super().__init__(self.NAME, table.speed, table.timestamps, sensor_ids=ids,
                         edge_index=edge_index, edge_weight=edge_weight, input_steps=input_steps,
                         output_steps=output_steps, fractions=fractions,
                         normalization=normalization, horizons=horizons,
                         info={"synthetic": False, "source": self.SOURCE,
                               "root": str(self.root), "graph": graph})

    @classmethod
    def road_graph(cls, graph_path: PathLike | None = None
                   ) -> tuple[list[str], np.ndarray, str]:
        r"""Sensor ids, ``adj_mx`` :math:`(N, N)` and where they come from:
        DCRNN's graph pickle in ``graph_path`` (a folder holding
        :attr:`GRAPH_FILE`, or the file), or the graph bundled with
        pyg_fedgraph (:func:`bundled_sensor_graph`) when it is :obj:`None`."""
        if graph_path is None:
            graph = bundled_sensor_graph(cls.NAME)
            return graph.sensor_ids, graph.to_dense(), "bundled"
        graph_file = Path(graph_path)
        if graph_file.is_dir():
            graph_file = graph_file / cls.GRAPH_FILE
        if not graph_file.exists():
            raise ValueError(f"{graph_file} not found: expected DCRNN's {cls.GRAPH_FILE} there; "
                             f"give no graph path (command line: leave out --set "
                             f"data.graph_path=DIR) to use the road graph bundled with "
                             f"pyg_fedgraph")
        ids, adj = load_sensor_graph(graph_file)
        return ids, adj, str(graph_file)

    @classmethod
    def resource(cls, name: str) -> RemoteFile:
        for r in cls.RESOURCES:
            if r.name == name:
                return r
        raise KeyError(name)

    def _ensure_files(self, download: bool, urls: dict[str, str], checksums: dict[str, str],
                      fetch: Fetch | None) -> None:
        for res in self.RESOURCES:
            path = self.root / res.name
            if path.exists():
                continue
            if not download:
                raise ValueError(f"{path} not found: save DCRNN's {res.name} there (its README, "
                                 f"github.com/liyaguang/DCRNN, links it), or download it with "
                                 f"download=True (command line: --set data.download=true)")
            url, sha = urls.get(res.name, res.url), checksums.get(res.name, res.sha256)
            if url is None:
                raise ValueError(
                    f"no direct public URL of {res.name} is known to pyg_fedgraph: DCRNN "
                    f"shares it through the Google Drive / Baidu links of its README "
                    f"(github.com/liyaguang/DCRNN); save it as {path}, or, from Python, pass "
                    f"urls={{{res.name!r}: URL}} and checksums={{{res.name!r}: SHA256}}")
            if sha is None:
                raise ValueError(f"no sha256 of {res.name} is known to pyg_fedgraph; from Python, "
                                 f"pass checksums={{{res.name!r}: SHA256}} to download it from "
                                 f"{url}")
            download_file(url, path, sha, fetch)


class METRLA(_DCRNNDataset):
    r"""METR-LA from the `"Diffusion Convolutional Recurrent Neural Network:
    Data-Driven Traffic Forecasting" <https://arxiv.org/abs/1707.01926>`_
    paper (Li et al., ICLR 2018): 207 loop detectors in Los Angeles, speeds
    every 5 minutes from March 1 to June 27, 2012 (34,272 steps), one client
    per sensor as in Panacea (Chen et al., Table I: 23,974 / 3,425 / 6,850
    windows per client).

    Reads ``metr-la.h5`` from ``root`` and builds a :class:`TrafficDataset`
    (all its options apply); the road graph becomes the directed prior client
    graph (:func:`adjacency_to_edges`). The road graph is the one bundled with
    pyg_fedgraph (:func:`bundled_sensor_graph`), unless ``graph_path`` or
    ``root`` holds DCRNN's ``adj_mx.pkl``. ``download=True`` fetches a missing
    speed file and checks its sha256; the speeds have no stable direct link
    (DCRNN shares them on Google Drive), so their URL and checksum must be
    passed in ``urls`` / ``checksums``.

    .. math::
        N = 207, \quad T = 34{,}272, \quad W = T - 23

    Args:
        root (str or Path): folder holding (or receiving) the speed file.
        download (bool, optional): fetch a missing speed file
            (default: :obj:`False`)
        graph_path (str or Path, optional): DCRNN's graph pickle, or a folder
            holding it (default: ``root`` if it holds one, else the bundled
            graph)
        normalization (str, optional): ``"global"`` or ``"sensor"`` z-score
            (default: :obj:`"global"`)
        input_steps (int, optional): input window (default: :obj:`12`)
        output_steps (int, optional): forecast window (default: :obj:`12`)
        fractions (tuple, optional): train / val / test shares
            (default: :obj:`(0.7, 0.1, 0.2)`)
        horizons (tuple, optional): reported horizons (default: :obj:`(3, 6, 12)`)
        urls (dict, optional): file name -> URL overriding :attr:`RESOURCES`.
        checksums (dict, optional): file name -> sha256 overriding them.
        fetch (callable, optional): ``fetch(url, dest)`` downloader
            (default: :mod:`urllib.request`).
    """
    NAME = "metr-la"
    SPEED_FILE = "metr-la.h5"
    GRAPH_FILE = "adj_mx.pkl"
    SOURCE = "METR-LA (DCRNN, Li et al. 2018)"
    RESOURCES = (RemoteFile("metr-la.h5", None, None),)


class PEMSBAY(_DCRNNDataset):
    r"""PEMS-BAY from the `"Diffusion Convolutional Recurrent Neural Network:
    Data-Driven Traffic Forecasting" <https://arxiv.org/abs/1707.01926>`_
    paper (Li et al., ICLR 2018): 325 sensors in the Bay Area, speeds every 5
    minutes from January 1 to June 30, 2017 (52,116 steps), one client per
    sensor (Panacea, Table I: 36,465 / 5,209 / 10,419 windows per client).
    Reads ``pems-bay.h5`` (and ``adj_mx_bay.pkl`` if given, else the bundled
    graph); options as :class:`METRLA`.
    """
    NAME = "pems-bay"
    SPEED_FILE = "pems-bay.h5"
    GRAPH_FILE = "adj_mx_bay.pkl"
    SOURCE = "PEMS-BAY (DCRNN, Li et al. 2018)"
    RESOURCES = (RemoteFile("pems-bay.h5", None, None),)


def _traffic_builder(cls: type[_DCRNNDataset], root: PathLike | None,
                     graph_path: PathLike | None, synthetic_steps: int, seed: int,
                     download: bool, **kwargs: Any) -> TrafficDataset:
    if root is not None:
        root = Path(root)
        if download or (root / cls.SPEED_FILE).exists():
            return cls(root, download=download, graph_path=graph_path, **kwargs)
        if graph_path is None and not (root / cls.GRAPH_FILE).exists():
            raise ValueError(
                f"{root / cls.SPEED_FILE} not found: save DCRNN's {cls.SPEED_FILE} in {root} "
                f"for recorded speeds (the Google Drive / Baidu links of DCRNN's README, "
                f"github.com/liyaguang/DCRNN), or give no root (command line: leave out --set "
                f"data.root=DIR) for synthetic speeds on the bundled road graph")
        if graph_path is None:  # a root with only the graph: synthetic speeds on it
            graph_path = root
    ids, adj, graph = cls.road_graph(graph_path)
    table = synthetic_traffic(adj, num_steps=synthetic_steps, seed=seed, sensor_ids=ids,
                              start="2017-01-01" if cls is PEMSBAY else "2012-03-01")
    log.warning("%s: no %s given; using SYNTHETIC speeds on the real road graph (%d steps)",
                cls.NAME, cls.SPEED_FILE, synthetic_steps)
    return TrafficDataset.from_table(
        table, cls.NAME, adj=adj, sensor_ids=ids,
        info={"synthetic": True, "graph": graph,
              "source": f"synthetic speeds (synthetic_traffic, seed {seed}) on the "
                        f"{cls.SOURCE} road graph"}, **kwargs)


@register_dataset("metr-la")
def metr_la(root: PathLike | None = None, graph_path: PathLike | None = None,
            synthetic_steps: int = 4032, seed: int = 0, download: bool = False,
            normalization: Normalization = "global", input_steps: int = 12,
            output_steps: int = 12) -> TrafficDataset:
    r"""METR-LA, one client per sensor: :class:`METRLA` when ``root`` holds
    ``metr-la.h5`` (or ``download=True``); otherwise **synthetic** speeds
    (:func:`synthetic_traffic`, ``synthetic_steps`` steps, ``seed``) on the
    real road graph: DCRNN's ``adj_mx.pkl`` from ``graph_path`` (a folder or
    the file) or ``root``, else the graph bundled with pyg_fedgraph. With no
    argument at all, this runs offline.

    On the command line, the arguments are ``--set data.root=DIR``,
    ``--set data.graph_path=DIR``, ``--set data.synthetic_steps=T`` ...

    Args:
        root (str, optional): folder with ``metr-la.h5`` (and optionally
            ``adj_mx.pkl``).
        graph_path (str, optional): DCRNN's ``adj_mx.pkl`` or its folder
            (default: ``root``'s, else the bundled graph).
        synthetic_steps (int, optional): length of the synthetic series
            (default: :obj:`4032`, two weeks)
        seed (int, optional): seed of the synthetic speeds (default: :obj:`0`)
        download (bool, optional): see :class:`METRLA` (default: :obj:`False`)
        normalization (str, optional): ``"global"`` or ``"sensor"``
            (default: :obj:`"global"`)
        input_steps (int, optional): input window (default: :obj:`12`)
        output_steps (int, optional): forecast window (default: :obj:`12`)
    """
    return _traffic_builder(METRLA, root, graph_path, synthetic_steps, seed, download,
                            normalization=normalization, input_steps=input_steps,
                            output_steps=output_steps)


@register_dataset("pems-bay")
def pems_bay(root: PathLike | None = None, graph_path: PathLike | None = None,
             synthetic_steps: int = 4032, seed: int = 0, download: bool = False,
             normalization: Normalization = "global", input_steps: int = 12,
             output_steps: int = 12) -> TrafficDataset:
    r"""PEMS-BAY, one client per sensor: :class:`PEMSBAY` when ``root`` holds
    ``pems-bay.h5`` (or ``download=True``); otherwise **synthetic** speeds on
    the real road graph (``adj_mx_bay.pkl`` from ``graph_path`` or ``root``,
    else the bundled graph). Arguments as :func:`metr_la`."""
    return _traffic_builder(PEMSBAY, root, graph_path, synthetic_steps, seed, download,
                            normalization=normalization, input_steps=input_steps,
                            output_steps=output_steps)
