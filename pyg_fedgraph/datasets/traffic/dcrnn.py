r"""METR-LA and PEMS-BAY as published with DCRNN (Li et al., ICLR 2018), and
their registered builders ``"metr-la"`` / ``"pems-bay"``."""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from pyg_fedgraph.datasets.registry import register_dataset
from pyg_fedgraph.datasets.traffic.dataset import Normalization, TrafficDataset
from pyg_fedgraph.datasets.traffic.io import (
    Fetch,
    PathLike,
    RemoteFile,
    SpeedTable,
    adjacency_to_edges,
    bundled_sensor_graph,
    download_file,
    load_sensor_graph,
    read_speed_csv,
    read_speed_h5,
    restrict_adjacency,
    verify_sha256,
)
from pyg_fedgraph.datasets.traffic.npz import (
    concat_tables,
    find_npz_folders,
    read_dcrnn_npz,
    read_sensor_ids,
)
from pyg_fedgraph.datasets.traffic.synthetic import synthetic_traffic
from pyg_fedgraph.hparams import Range

__all__ = ["METRLA", "PEMSBAY", "metr_la", "pems_bay", "choose_sensors"]

log = logging.getLogger(__name__)

#: What ``sensors`` may be: ids (a list, or one id), a comma-separated text, or
#: the path of a text file of ids.
SensorSelection = Sequence[str | int] | str | int


def _sensor_list(sensors: SensorSelection) -> list[str]:
    if isinstance(sensors, bool):
        raise ValueError(f"sensors must be sensor ids, got {sensors!r}")
    if isinstance(sensors, int):
        return [str(sensors)]
    if isinstance(sensors, str):
        if Path(sensors).is_file():
            return read_sensor_ids(sensors)
        return [s.strip() for s in sensors.split(",") if s.strip()]
    return [str(s) for s in sensors]


def choose_sensors(available: Sequence[str], sensors: SensorSelection | None = None,
                   num_sensors: int | None = None, where: str = "the data") -> list[str]:
    r"""The sensors a dataset keeps, in its client order: ``sensors`` in the
    order given, else the first ``num_sensors`` of ``available``, else all
    of ``available``.

    Args:
        available (list of str): the sensors there are, in their order.
        sensors (list or str or int, optional): ids to keep: a list, one id,
            a comma-separated text, or the path of a text file of ids
            (commas or newlines, e.g. DCRNN's ``graph_sensor_ids.txt`` or the
            ``sensor_ids.txt`` of an npz folder).
        num_sensors (int, optional): keep the first ones instead.
        where (str, optional): what ``available`` belongs to, for messages.
    """
    if sensors is not None and num_sensors is not None:
        raise ValueError("give sensors or num_sensors, not both")
    if num_sensors is not None:
        if isinstance(num_sensors, bool) or not isinstance(num_sensors, int) \
                or not 1 <= num_sensors <= len(available):
            raise ValueError(f"num_sensors must be between 1 and the {len(available)} sensors "
                             f"of {where}, got {num_sensors!r}")
        return list(available[:num_sensors])
    if sensors is None:
        return list(available)
    ids = _sensor_list(sensors)
    if not ids:
        raise ValueError("sensors names no sensor")
    repeated = sorted({s for s in ids if ids.count(s) > 1})
    if repeated:
        raise ValueError(f"sensors lists {', '.join(repeated)} more than once")
    known = set(available)
    missing = [s for s in ids if s not in known]
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more"
                                           if len(missing) > 10 else "")
        raise ValueError(f"{len(missing)} of the requested sensors are not in {where}: {shown}")
    return ids


class _DCRNNDataset(TrafficDataset):
    r"""A DCRNN dataset read from ``root`` (see :class:`METRLA`)."""

    NAME = ""
    SPEED_FILE = ""
    #: A speed table as CSV, read when neither the speed file nor npz windows
    #: are there (:func:`read_speed_csv`); ``""``: none.
    CSV_FILE = ""
    #: Who publishes :attr:`CSV_FILE`, for messages.
    CSV_SOURCE = ""
    GRAPH_FILE = ""
    FOLDER = ""
    START = ""
    RESOURCES: tuple[RemoteFile, ...] = ()
    SOURCE = ""

    def __init__(self, root: PathLike, download: bool = False, *,
                 graph_path: PathLike | None = None,
                 sensors: SensorSelection | None = None, num_sensors: int | None = None,
                 verify: bool = True, start: str | None = None,
                 normalization: Normalization = "global", input_steps: int = 12,
                 output_steps: int = 12, fractions: Sequence[float] = (0.7, 0.1, 0.2),
                 horizons: Sequence[int] = (3, 6, 12),
                 urls: Mapping[str, str] | None = None,
                 checksums: Mapping[str, str] | None = None,
                 fetch: Fetch | None = None) -> None:
        self.root = Path(root)
        speed_file = self.root / self.SPEED_FILE
        folders = [] if speed_file.exists() else find_npz_folders(self.root, self.FOLDER)
        # The CSV (one week for METR-LA) only where the full file is neither there nor asked for.
        csv_file = (self._csv_file(self.root)
                    if not speed_file.exists() and not folders and not download else None)
        fetched = False
        if not speed_file.exists() and not folders and csv_file is None:
            fetched = self._ensure_files(download, dict(urls or {}), dict(checksums or {}),
                                         fetch)
        if graph_path is None and (self.root / self.GRAPH_FILE).exists():
            graph_path = self.root
        graph_ids, adj, graph = self.road_graph(graph_path)
        info: dict[str, Any] = {"synthetic": False, "root": str(self.root), "graph": graph}
        if folders:
            table = self.read_npz(folders, start, graph_ids)
            info["source"] = (f"{self.SOURCE}, DCRNN's npz windows in "
                              f"{', '.join(str(f) for f in folders)}")
            if "groups" in table.info:
                info["groups"] = table.info["groups"]
            order, where = table.sensor_ids, "the npz files"
        elif csv_file is not None:
            table = read_speed_csv(csv_file, start or self.START)
            info["source"] = f"{self.SOURCE}, the speed table {csv_file}"
            log.info("%s: no %s or npz windows in %s; reading %s (%d steps)", self.NAME,
                     self.SPEED_FILE, self.root, csv_file.name, table.speed.shape[0])
            order, where = table.sensor_ids, str(csv_file)
        else:
            if verify and not fetched:
                self.verify_speed_file(speed_file)
            table = read_speed_h5(speed_file)
            info["source"] = self.SOURCE
            # The full file's clients are the graph's sensors, in the graph's order.
            order, where = graph_ids, f"the {self.NAME} road graph"
        ids = choose_sensors(order, sensors, num_sensors, where)
        sub = restrict_adjacency(graph_ids, adj, ids, f"{self.NAME} road graph ({graph})")
        table = table.select(ids)
        edge_index, edge_weight = adjacency_to_edges(sub)
        super().__init__(self.NAME, table.speed, table.timestamps, sensor_ids=ids,
                         edge_index=edge_index, edge_weight=edge_weight, input_steps=input_steps,
                         output_steps=output_steps, fractions=fractions,
                         normalization=normalization, horizons=horizons, info=info)

    @classmethod
    def holds_speeds(cls, root: PathLike) -> bool:
        r"""Whether ``root`` holds the speed file, DCRNN's npz windows or
        the dataset's speed CSV (:attr:`CSV_FILE`)."""
        root = Path(root)
        return ((root / cls.SPEED_FILE).exists() or bool(find_npz_folders(root, cls.FOLDER))
                or cls._csv_file(root) is not None)

    @classmethod
    def _other_sources(cls, root: Path) -> str:
        r"""The speed files other than :attr:`SPEED_FILE` that ``root`` could
        hold, for the message that finds none of them: DCRNN's npz windows
        and, where the dataset reads one, its speed CSV (:attr:`CSV_FILE`)."""
        text = (f"nor DCRNN's train.npz, val.npz and test.npz in {root} or its {cls.FOLDER} "
                f"folder")
        if cls.CSV_FILE:
            text += f", nor {cls.CSV_FILE} ({cls.CSV_SOURCE}) in {root}"
        return text

    @classmethod
    def _csv_file(cls, root: Path) -> Path | None:
        r"""The dataset's speed CSV in ``root`` (:attr:`CSV_FILE`), if any."""
        path = root / cls.CSV_FILE if cls.CSV_FILE else None
        return path if path is not None and path.is_file() else None

    @classmethod
    def read_npz(cls, folders: Sequence[PathLike], start: str | None = None,
                 graph_ids: Sequence[str] | None = None) -> SpeedTable:
        r"""The speeds behind DCRNN's npz windows in ``folders`` (one folder,
        or one per group of sensors joined into one federation), dated from
        ``start`` (default: the day the dataset starts); see
        :func:`~pyg_fedgraph.datasets.traffic.npz.read_dcrnn_npz`. A folder
        without a sensor-id file whose sensor count is the full graph's
        (``graph_ids``, default: the bundled graph's) is taken to be in the
        graph's order (DCRNN writes its npz files in the speed file's column
        order, the graph's)."""
        full = list(graph_ids) if graph_ids is not None else \
            bundled_sensor_graph(cls.NAME).sensor_ids
        tables = [read_dcrnn_npz(folder, start or cls.START, full_graph_ids=full)
                  for folder in folders]
        if len(tables) == 1:
            return tables[0]
        return concat_tables(tables, [Path(f).name for f in folders])

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

    @classmethod
    def verify_speed_file(cls, path: PathLike,
                          skip: str = "pass verify=False (command line: --set data.verify=false)"
                          ) -> None:
        r"""Checks that ``path`` is the published :attr:`SPEED_FILE` (its
        size, then its sha256, both known to pyg_fedgraph); raises a
        one-line :class:`ValueError` otherwise, ending with ``skip``: how
        to use a file of one's own."""
        path = Path(path)
        res = cls.resource(cls.SPEED_FILE)
        if res.sha256 is None:
            return
        own = f"; for a file of your own in DCRNN's format, {skip}"
        size = path.stat().st_size
        if res.size is not None and size != res.size:
            raise ValueError(f"{path} has {size:,} bytes, the published {res.name} "
                             f"{res.size:,}: a partial or different file; download it again "
                             f"(the Google Drive / Baidu links of DCRNN's README, "
                             f"github.com/liyaguang/DCRNN){own}")
        try:
            verify_sha256(path, res.sha256)
        except ValueError as err:
            raise ValueError(f"{err}{own}") from None
        log.info("%s: sha256 verified (the published %s)", path, res.name)

    def _ensure_files(self, download: bool, urls: dict[str, str], checksums: dict[str, str],
                      fetch: Fetch | None) -> bool:
        r"""Downloads the missing :attr:`RESOURCES` (``download=True``);
        returns whether it fetched any."""
        fetched = False
        for res in self.RESOURCES:
            path = self.root / res.name
            if path.exists():
                continue
            if not download:
                raise ValueError(
                    f"{path} not found, {self._other_sources(self.root)}: save DCRNN's "
                    f"{res.name} there (its "
                    f"README, github.com/liyaguang/DCRNN, links it), or download it with "
                    f"download=True (command line: --set data.download=true)")
            url, sha = urls.get(res.name, res.url), checksums.get(res.name, res.sha256)
            if url is None:
                raise ValueError(
                    f"no direct public URL of {res.name} is known to pyg_fedgraph: DCRNN "
                    f"shares it through the Google Drive / Baidu links of its README "
                    f"(github.com/liyaguang/DCRNN); save it as {path}, or, from Python, pass "
                    f"urls={{{res.name!r}: URL}} (its sha256 is known and checked)")
            if sha is None:
                raise ValueError(f"no sha256 of {res.name} is known to pyg_fedgraph; from Python, "
                                 f"pass checksums={{{res.name!r}: SHA256}} to download it from "
                                 f"{url}")
            download_file(url, path, sha, fetch)
            fetched = True
        return fetched


class METRLA(_DCRNNDataset):
    r"""METR-LA from the `"Diffusion Convolutional Recurrent Neural Network:
    Data-Driven Traffic Forecasting" <https://arxiv.org/abs/1707.01926>`_
    paper (Li et al., ICLR 2018): 207 loop detectors in Los Angeles, speeds
    every 5 minutes from March 1 to June 27, 2012 (34,272 steps), one client
    per sensor as in Panacea (Lin, Lan, He and Li, Table I: 23,974 / 3,425 /
    6,850 windows per client).

    Reads from ``root`` either the speed file ``metr-la.h5`` or DCRNN's
    processed windows ``train.npz``, ``val.npz``, ``test.npz`` (any window
    lengths: the series is rebuilt, checked window by window and windowed
    again here, see :func:`~pyg_fedgraph.datasets.traffic.npz.read_dcrnn_npz`)
    in ``root``, in its ``METR-LA`` folder (also one level deeper), or in
    several sub-folders, one per group of sensors, joined into one
    federation. The sensors of npz files are named by a ``sensor_ids.txt``
    beside them (see
    :func:`~pyg_fedgraph.datasets.traffic.npz.find_sensor_ids`). Without
    either, ``root`` may hold T-GCN's ``los_speed.csv`` (all 207 sensors,
    2,016 steps from March 1, missing readings imputed; T-GCN's
    ``los_adj.csv`` beside it is not read: the road graph is DCRNN's), read
    by :func:`~pyg_fedgraph.datasets.traffic.io.read_speed_csv`.

    The road graph becomes the directed prior client graph
    (:func:`adjacency_to_edges`), restricted to the dataset's sensors (its
    rows and columns for them, :func:`restrict_adjacency`). It is the graph
    bundled with pyg_fedgraph (:func:`bundled_sensor_graph`), unless
    ``graph_path`` or ``root`` holds DCRNN's ``adj_mx.pkl``. Clients are the
    sensors of the files (the npz files' order, the graph's order for the
    speed file), or ``sensors`` / the first ``num_sensors`` of them, so that
    the same experiment runs at any size.

    The speed file is checked against the published file's size and sha256
    (:attr:`RESOURCES`) unless ``verify=False`` (for a file of one's own in
    DCRNN's format). ``download=True`` fetches a missing speed file and
    checks it; DCRNN shares it through Google Drive, with no stable direct
    link, so its URL must be passed in ``urls``.

    .. math::
        N = 207, \quad T = 34{,}272, \quad W = T - T_{in} - T_{out} + 1

    Args:
        root (str or Path): folder holding (or receiving) the speed file, or
            holding npz windows.
        download (bool, optional): fetch a missing speed file
            (default: :obj:`False`)
        graph_path (str or Path, optional): DCRNN's graph pickle, or a folder
            holding it (default: ``root`` if it holds one, else the bundled
            graph)
        sensors (list of str or str, optional): the sensors to keep, in this
            order: ids, a comma-separated text, or a text file of ids (see
            :func:`choose_sensors`) (default: all)
        num_sensors (int, optional): keep the first sensors only
            (default: all)
        verify (bool, optional): check the speed file's size and sha256
            against the published file's (default: :obj:`True`)
        start (str, optional): the day the npz files' series starts
            (default: :attr:`START`)
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
    #: T-GCN's table of all 207 sensors over the first week (lehaifeng/T-GCN).
    CSV_FILE = "los_speed.csv"
    CSV_SOURCE = "T-GCN's week of all 207 sensors, github.com/lehaifeng/T-GCN"
    GRAPH_FILE = "adj_mx.pkl"
    FOLDER = "METR-LA"
    START = "2012-03-01"
    SOURCE = "METR-LA (DCRNN, Li et al. 2018)"
    #: The published speed file: size and sha256 as pinned by Git LFS in public
    #: mirrors of DCRNN's data; no stable direct URL.
    RESOURCES = (RemoteFile(
        "metr-la.h5", None, "64784b76d6fb8ec9bff4b6decafb354da2bb37840468fdccee5044e511277c05",
        57_038_056),)


class PEMSBAY(_DCRNNDataset):
    r"""PEMS-BAY from the `"Diffusion Convolutional Recurrent Neural Network:
    Data-Driven Traffic Forecasting" <https://arxiv.org/abs/1707.01926>`_
    paper (Li et al., ICLR 2018): 325 sensors in the Bay Area, speeds every 5
    minutes from January 1 to June 30, 2017 (52,116 steps, with 12 missing
    after 2017-03-12 01:55), one client per sensor (Panacea, Table I: 36,465
    / 5,209 / 10,419 windows per client). Reads ``pems-bay.h5`` or DCRNN's
    npz windows (in ``root``, its ``PEMS-BAY`` folder, or one sub-folder per
    highway joined into one federation), with ``adj_mx_bay.pkl`` if given,
    else the bundled graph; options as :class:`METRLA`.
    """
    NAME = "pems-bay"
    SPEED_FILE = "pems-bay.h5"
    GRAPH_FILE = "adj_mx_bay.pkl"
    FOLDER = "PEMS-BAY"
    START = "2017-01-01"
    SOURCE = "PEMS-BAY (DCRNN, Li et al. 2018)"
    RESOURCES = (RemoteFile(
        "pems-bay.h5", None, "65d69fb0a2323dba9867179eb7af47c8b814186bc459ff0a4937d21614153c8f",
        135_930_936),)


def _traffic_builder(cls: type[_DCRNNDataset], root: PathLike | None,
                     graph_path: PathLike | None, sensors: SensorSelection | None,
                     num_sensors: int | None, verify: bool, synthetic_steps: int, seed: int,
                     download: bool, **kwargs: Any) -> TrafficDataset:
    if root is not None:
        root = Path(root)
        if download or cls.holds_speeds(root):
            return cls(root, download=download, graph_path=graph_path, sensors=sensors,
                       num_sensors=num_sensors, verify=verify, **kwargs)
        if graph_path is None and not (root / cls.GRAPH_FILE).exists():
            raise ValueError(
                f"{root / cls.SPEED_FILE} not found, {cls._other_sources(root)}: save "
                f"DCRNN's {cls.SPEED_FILE} or npz files there for recorded speeds (the Google "
                f"Drive / Baidu links of DCRNN's README, github.com/liyaguang/DCRNN), or give no "
                f"root (command line: leave out --set data.root=DIR) for synthetic speeds on the "
                f"bundled road graph")
        if graph_path is None:  # a root with only the graph: synthetic speeds on it
            graph_path = root
    graph_ids, adj, graph = cls.road_graph(graph_path)
    ids = choose_sensors(graph_ids, sensors, num_sensors, f"the {cls.NAME} road graph")
    adj = restrict_adjacency(graph_ids, adj, ids, f"{cls.NAME} road graph ({graph})")
    table = synthetic_traffic(adj, num_steps=synthetic_steps, seed=seed, sensor_ids=ids,
                              start=cls.START)
    log.warning("%s: no %s given; using SYNTHETIC speeds on the real road graph (%d steps)",
                cls.NAME, cls.SPEED_FILE, synthetic_steps)
    return TrafficDataset.from_table(
        table, cls.NAME, adj=adj, sensor_ids=ids,
        info={"synthetic": True, "graph": graph,
              "source": f"synthetic speeds (synthetic_traffic, seed {seed}) on the "
                        f"{cls.SOURCE} road graph"}, **kwargs)


@register_dataset("metr-la")
def metr_la(root: PathLike | None = None, graph_path: PathLike | None = None,
            sensors: SensorSelection | None = None,
            num_sensors: Annotated[int | None, Range(ge=1)] = None, verify: bool = True,
            synthetic_steps: int = 4032, seed: int = 0, download: bool = False,
            normalization: Normalization = "global", input_steps: int = 12,
            output_steps: int = 12) -> TrafficDataset:
    r"""METR-LA, one client per sensor: :class:`METRLA` when ``root`` holds
    ``metr-la.h5`` or DCRNN's npz windows (or ``download=True``); otherwise
    **synthetic** speeds (:func:`synthetic_traffic`, ``synthetic_steps``
    steps, ``seed``) on the real road graph: DCRNN's ``adj_mx.pkl`` from
    ``graph_path`` (a folder or the file) or ``root``, else the graph bundled
    with pyg_fedgraph. With no argument at all, this runs offline.

    On the command line, the arguments are ``--set data.root=DIR``,
    ``--set data.num_sensors=20``, ``--set data.sensors=FILE`` ...

    Args:
        root (str, optional): folder with ``metr-la.h5`` or DCRNN's
            ``train/val/test.npz`` (in it, in its ``METR-LA`` folder, or in
            one sub-folder per group of sensors), and optionally
            ``adj_mx.pkl``.
        graph_path (str, optional): DCRNN's ``adj_mx.pkl`` or its folder
            (default: ``root``'s, else the bundled graph).
        sensors (list of str or str, optional): the sensors to keep, in this
            order: ids, a comma-separated text, or a text file of ids such
            as an npz folder's ``sensor_ids.txt`` (default: all).
        num_sensors (int, optional): keep the first sensors only (the
            graph's order for the speed file and synthetic speeds, the
            files' order for npz windows) (default: all).
        verify (bool, optional): check ``metr-la.h5`` against the published
            file's size and sha256; pass :obj:`False` for a file of one's own
            (default: :obj:`True`)
        synthetic_steps (int, optional): length of the synthetic series
            (default: :obj:`4032`, two weeks)
        seed (int, optional): seed of the synthetic speeds (default: :obj:`0`)
        download (bool, optional): see :class:`METRLA` (default: :obj:`False`)
        normalization (str, optional): ``"global"`` or ``"sensor"``
            (default: :obj:`"global"`)
        input_steps (int, optional): input window (default: :obj:`12`)
        output_steps (int, optional): forecast window (default: :obj:`12`)
    """
    return _traffic_builder(METRLA, root, graph_path, sensors, num_sensors, verify,
                            synthetic_steps, seed, download, normalization=normalization,
                            input_steps=input_steps, output_steps=output_steps)


@register_dataset("pems-bay")
def pems_bay(root: PathLike | None = None, graph_path: PathLike | None = None,
             sensors: SensorSelection | None = None,
             num_sensors: Annotated[int | None, Range(ge=1)] = None, verify: bool = True,
             synthetic_steps: int = 4032, seed: int = 0, download: bool = False,
             normalization: Normalization = "global", input_steps: int = 12,
             output_steps: int = 12) -> TrafficDataset:
    r"""PEMS-BAY, one client per sensor: :class:`PEMSBAY` when ``root`` holds
    ``pems-bay.h5`` or DCRNN's npz windows (e.g. a ``PEMS-BAY`` folder with
    one sub-folder per highway, joined into one federation), or
    ``download=True``; otherwise **synthetic** speeds on the real road graph
    (``adj_mx_bay.pkl`` from ``graph_path`` or ``root``, else the bundled
    graph). Arguments as :func:`metr_la`."""
    return _traffic_builder(PEMSBAY, root, graph_path, sensors, num_sensors, verify,
                            synthetic_steps, seed, download, normalization=normalization,
                            input_steps=input_steps, output_steps=output_steps)
