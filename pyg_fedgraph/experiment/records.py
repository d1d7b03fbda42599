r"""Finished runs kept as records: the cache of long reproduction runs.

A reproduction run on real data takes minutes to hours, so each finished
run's outcome is kept as a record: its settings, the summary, the mean
validation and test metric per round, the clients' test values, the final
collaboration graph, timing, machine load, torch version, device and the
CPU's vector instruction set that torch's kernels used. A record is reused
only when its settings are identical; its key is :func:`config_key`, a hash
of :meth:`ExperimentConfig.to_dict() <pyg_fedgraph.experiment.ExperimentConfig.to_dict>`
(settings added later leave that dict while at their defaults, so that keys
never move).

The records of a folder live in a few tables, ``<records>/<table>.jsonl``:
JSON lines, one record a line (the record's fields and its ``"key"``), the
lines sorted by key, so that a new record is one new line of a diff and a
rewrite of the same records gives the same bytes. The collaboration graph,
an :math:`(N, N)` matrix and the one large field (a 60-client graph is about
70 kB of JSON decimals), is kept packed in its line: its float32 (or, where
a value needs it, float64) bytes, compressed and base64-encoded, with its
shape (about a quarter of the text); reading unpacks it to the same numbers.
A record's table is :func:`record_table` of its settings (the dataset's
family: ``digits`` with the ``topology`` studies, ``fashion-mnist``,
``planetoid-<dataset>-<partition>`` for Cora, CiteSeer and PubMed,
``traffic`` for METR-LA and PEMS-BAY, ``tu`` for the TU graph sets, any
other dataset, each FL-60 variant included, its own name), or the ``table``
a :class:`RecordCache` is given. A key is
found in whichever table holds it. A table is rewritten whole (a temporary
file moved over it) under an exclusive lock of the table (``fcntl``; none
where the platform has no ``fcntl``), reading it again under the lock, so
that two processes finishing runs at the same moment keep both records.
Records of the earlier format, one file ``<records>/<key>.json`` each, are
still read (before the tables); :meth:`RecordCache.fold` moves them into the
tables, and rewrites the lines of an earlier table format (an unpacked
graph, a table the rule no longer gives).

A run in progress is carried out by the :class:`~pyg_fedgraph.experiment.Runner`
with a checkpoint, ``<checkpoints>/<key>.ckpt.pt``, written after every round
(at most once per ``checkpoint_seconds``): running the same configuration
again, after a crash, a kill or a restart, continues from that round and
ends with the history an uninterrupted run gives. The checkpoint is the
runner's one format, so a checkpoint of ``pyg-fedgraph run`` resumes here and
the other way round. It is removed once the record is stored.
"""
from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import json
import logging
import math
import numbers
import os
import re
import sys
import tempfile
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyg_fedgraph.experiment.runner import RoundProgress, Runner, plain_settings
from pyg_fedgraph.experiment.settings import ExperimentConfig

if TYPE_CHECKING:
    from pyg_fedgraph.engine.history import History, RoundRecord
    from pyg_fedgraph.simulation.simulator import Simulator

__all__ = ["RecordCache", "LocalModelsCallback", "GroupingTrace", "HypernetworkTrace",
           "NovelClientProbe", "FineTuneSweep", "client_grouping", "rejections_entry",
           "config_key", "run_identity", "record_table",
           "EXECUTION_OVERRIDES", "RECORD_FIELDS", "TABLES"]

log = logging.getLogger(__name__)

#: The fields of a record (``derived_from`` and ``note`` only in a record made
#: inside another run, ``novel_client_metrics`` only when clients are held out,
#: ``traces`` only with :meth:`RecordCache.run`'s ``traces``, ``final_self_weight``
#: and the like from
#: :meth:`Strategy.diagnostics <pyg_fedgraph.strategies.Strategy.diagnostics>`;
#: ``rejections``, every upload the run rejected, in records made since
#: 2026-11-28: see :func:`rejections_entry`).
RECORD_FIELDS = ("config", "summary", "val", "test", "test_clients", "test_client_metrics",
                 "graph", "seconds", "cpu_seconds", "load", "torch_threads", "torch", "device",
                 "cpu_capability", "date")


#: ``--set`` keys that say how a run executes, not what it computes (the same
#: arithmetic, up to floating-point rounding): :func:`config_key` and
#: :func:`run_identity` leave them out, so that a run's record and its
#: checkpoint are found however it was, or is now, executed; a record's
#: ``config`` keeps them, saying how it was made. ``compile``
#: (:func:`torch.compile` of the batched local gradient and evaluation) runs
#: the traffic model's rounds about twice as fast on one CPU thread, so a long
#: series of runs may switch it on midway.
EXECUTION_OVERRIDES = frozenset({"compile"})


def _without_execution(settings: dict[str, Any]) -> dict[str, Any]:
    over = settings.get("overrides")
    if not isinstance(over, dict) or not EXECUTION_OVERRIDES & over.keys():
        return settings
    return {**settings, "overrides": {k: v for k, v in over.items()
                                      if k not in EXECUTION_OVERRIDES}}


def run_identity(settings: Mapping[str, Any]) -> dict[str, Any]:
    r"""The settings that make a run what it is: ``settings`` (a
    configuration's :meth:`~ExperimentConfig.to_dict` or a record's
    ``config``) as plain JSON types, without :data:`EXECUTION_OVERRIDES`.
    Two runs with equal identities are the same experiment."""
    return _without_execution(plain_settings(settings))


def config_key(cfg: ExperimentConfig) -> str:
    r"""A short stable name of a configuration (dataset, strategy, partition,
    clients, and a hash of all its settings but :data:`EXECUTION_OVERRIDES`)."""
    text = json.dumps(_without_execution(cfg.to_dict()), sort_keys=True, default=str)
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    return f"{cfg.dataset}-{cfg.strategy}-{cfg.partition}-{cfg.clients}-{digest}"


#: The table of each dataset's records where it is not the dataset's own name
#: (see :func:`record_table`).
TABLES: dict[str, str] = {"digits": "digits", "topology": "digits",
                          "fashion-mnist": "fashion-mnist", "cora": "planetoid",
                          "citeseer": "planetoid", "pubmed": "planetoid",
                          "metr-la": "traffic", "pems-bay": "traffic", "tu": "tu"}

#: Families whose records split further by dataset and partition (a FED-PUB grid
#: of 2 datasets x 12 settings x 14 strategies x 3 seeds holds about 3.7 MB of
#: records, over the 2 MB a table should stay under).
BY_PARTITION = frozenset({"planetoid"})
#: Families whose records split further by dataset and number of rounds (the traffic
#: reproduction's 20-, 200-, 400- and 800-round runs of METR-LA and PEMS-BAY: a PEMS-BAY
#: record of 67 sensors' metrics holds about 20 kB, a traced run of all 207 METR-LA
#: sensors 60-350 kB, 3.8 MB planned in all).
BY_ROUNDS = frozenset({"traffic"})

_TABLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_KEY_HEAD = '{"key":'
_KEY_START = re.compile(r'\{\s*"key"\s*:\s*')  # a line by _line, or one made by hand
_DECODER = json.JSONDecoder()


def record_table(config: Mapping[str, Any]) -> str:
    r"""The table of a record whose settings are ``config`` (a record's
    ``"config"``, as :meth:`ExperimentConfig.to_dict` gives it): the
    dataset's family in :data:`TABLES` (for a family of
    :data:`BY_PARTITION`, ``<family>-<dataset>-<partition>``, e.g.
    ``planetoid-cora-metis``; for a family of :data:`BY_ROUNDS`,
    ``<family>-<dataset>-<rounds>``, e.g. ``traffic-metr-la-800``), else the
    dataset's own name (lower case, runs
    of other characters than letters, digits and ``.`` made one ``-``): each
    FL-60 variant (``fl60``, ``fl60-grda-file``, ...) has its own table,
    which keeps every table of the repository's records under 2 MB."""
    dataset = str(config.get("dataset") or "")
    if dataset in TABLES:
        family = TABLES[dataset]
        if family in BY_PARTITION:
            partition = str(config.get("partition") or "none")
            return f"{family}-{_name(dataset)}-{_name(partition)}"
        if family in BY_ROUNDS:
            return f"{family}-{_name(dataset)}-{_name(str(config.get('rounds') or 'none'))}"
        return family
    return _name(dataset)


def _name(text: str) -> str:
    r"""``text`` as a table name's part: lower case, runs of other characters
    than letters, digits and ``.`` made one ``-``."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "records"


#: The fields a table line keeps packed (:func:`_pack`).
PACKED_FIELDS = ("graph",)
_PACK_KEYS = frozenset({"dtype", "shape", "zlib_base64"})


def _shape(value: Any) -> list[int] | None:
    r"""The shape of ``value`` when it is a rectangular nested list of floats
    (at least one level), else ``None``."""
    if not isinstance(value, list) or not value:
        return None
    if all(type(v) is float for v in value):
        return [len(value)]
    inner = [_shape(v) for v in value]
    if inner[0] is None or any(s != inner[0] for s in inner):
        return None
    return [len(value), *inner[0]]


def _flat(value: Any, depth: int) -> Iterator[float]:
    if depth == 1:
        yield from value
    else:
        for v in value:
            yield from _flat(v, depth - 1)


def _pack(value: Any) -> Any:
    r"""A rectangular nested list of floats as ``{"dtype", "shape",
    "zlib_base64"}``: its values' little-endian float32 bytes (float64 when a
    value is not a float32, so that :func:`_unpack` gives every value back
    exactly), compressed with zlib and base64-encoded. Anything else is
    returned as it is."""
    shape = _shape(value)
    if shape is None:
        return value
    flat = list(_flat(value, len(shape)))
    data = array("f", flat)
    # A value float32 does not hold exactly (NaN counts as equal to NaN here).
    if any(a != b and (a == a or b == b) for a, b in zip(data, flat, strict=True)):
        data = array("d", flat)
    if sys.byteorder == "big":
        data.byteswap()
    return {"dtype": "float32" if data.typecode == "f" else "float64", "shape": shape,
            "zlib_base64": base64.b64encode(zlib.compress(data.tobytes(), 9)).decode("ascii")}


def _unpack(value: Any) -> Any:
    r"""The nested list of floats :func:`_pack` packed (anything else as it
    is)."""
    if not isinstance(value, dict) or set(value) != _PACK_KEYS:
        return value
    data = array("f" if value["dtype"] == "float32" else "d")
    data.frombytes(zlib.decompress(base64.b64decode(value["zlib_base64"])))
    if sys.byteorder == "big":
        data.byteswap()
    out: list[Any] = data.tolist()
    for size in reversed(value["shape"][1:]):
        out = [out[i:i + size] for i in range(0, len(out), size)]
    return out


def _line(key: str, entry: Mapping[str, Any]) -> str:
    r"""The table line of record ``entry`` under ``key``: the key first, then
    the record's fields sorted (those of :data:`PACKED_FIELDS` packed),
    compact JSON on one line."""
    if "key" in entry:
        raise ValueError(f"the record {key} has a field 'key', which its table line keeps "
                         "for the key")
    entry = {name: _pack(value) if name in PACKED_FIELDS else value
             for name, value in entry.items()}
    body = json.dumps(entry, default=float, sort_keys=True, separators=(",", ":"))
    return _KEY_HEAD + json.dumps(key) + ("}" if body == "{}" else "," + body[1:])


def _line_key(line: str) -> str:
    r"""The key of a table line (read without parsing the whole record when
    the line starts with it, as :func:`_line` writes it)."""
    head = _KEY_START.match(line)
    if head:
        key, _ = _DECODER.raw_decode(line, head.end())
    else:
        record = json.loads(line)
        key = record.get("key") if isinstance(record, dict) else None
    if not isinstance(key, str):
        raise ValueError('no string "key"')
    return key


def _entry_of(line: str) -> dict[str, Any]:
    r"""The record of a table line (its fields without the key, packed
    fields unpacked)."""
    entry = json.loads(line)
    entry.pop("key", None)
    for name in PACKED_FIELDS:
        if name in entry:
            entry[name] = _unpack(entry[name])
    return entry


def _canonical(entry: Any) -> str:
    r"""One JSON text per JSON value (keys sorted; NaN written alike)."""
    return json.dumps(entry, default=float, sort_keys=True)


def _read_table(path: Path) -> dict[str, str]:
    r"""The lines of a table by key (none for a missing file; a key written
    twice, as a merge can leave it, keeps its last line)."""
    lines: dict[str, str] = {}
    try:
        f = open(path, encoding="utf-8")
    except FileNotFoundError:
        return lines
    with f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            try:
                lines[_line_key(line)] = line
            except ValueError as err:
                raise ValueError(f"{path}:{number} is not a record line ({err})") from None
    return lines


def _rewrite(path: Path, lines: Mapping[str, str]) -> None:
    r"""Writes a table's lines sorted by key into a temporary file of its
    folder and moves that over the table (readers see the old or the new
    table, never a part)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(lines[key] + "\n" for key in sorted(lines))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    r"""Holds an exclusive lock of the table ``path`` (created empty when
    missing). A writer that waited on a table another one has since moved
    over or deleted locks the new file instead, so that each rewrite starts
    from the table the last one left."""
    try:
        import fcntl
    except ImportError:  # no advisory locks on this platform (Windows): one writer at a time
        yield
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                yield
                return
        finally:
            os.close(fd)


class LocalModelsCallback:
    r"""Evaluates every client's own model after its last local training
    (:attr:`Simulator.local_params`) each evaluated round, into a second
    :class:`~pyg_fedgraph.engine.History`. During a FedAvg run this is,
    round for round, what ``FedAvgFT(finetune_from="local")`` evaluates: its
    training is FedAvg's (same plans, same per-client random streams), only
    its evaluation differs, so one run yields both records. Its history is
    saved with the run's checkpoints (a :class:`~pyg_fedgraph.experiment.runner.
    StatefulCallback`)."""

    def __init__(self, history: History) -> None:
        self.history = history

    def __call__(self, sim: Simulator, record: RoundRecord) -> None:
        import torch

        from pyg_fedgraph.engine import RoundRecord
        from pyg_fedgraph.train.jobs import ClientStart, evaluate_clients

        everyone = torch.arange(sim.dataset.num_clients)
        start = ClientStart(everyone, everyone, sim.local_params, sim.local_buffers)
        metrics = evaluate_clients(sim.trainer, start, seed=sim.seed, rnd=sim.round)
        self.history.append(RoundRecord(record.round, record.train_loss, metrics["val"],
                                        metrics["test"], record.seconds, record.num_sampled))

    def state_dict(self) -> dict[str, Any]:
        return self.history.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.load_state_dict(state)


def client_grouping(strategy: Any, k: int) -> list[int] | None:
    r"""A strategy's grouping of the clients :math:`(N,)`: its clusters where
    it keeps some (a 1-D ``cluster_of``: CFL, GCFL, IFCA, FedCEDAR; ``-1`` for
    a client in none), else the ``k`` groups its collaboration graph shows
    (:func:`~pyg_fedgraph.utils.recovery.read_groups`, spectral rule);
    ``None`` without either. (Before this function moved here from
    ``benchmarks/reproduce/graph_classification_tu.py``, its graph reading
    kept the diagonal and cut negative weights to 0 instead; the records of
    that script were made so.)"""
    import torch

    from pyg_fedgraph.utils.recovery import read_groups

    clusters = getattr(strategy, "cluster_of", None)
    if isinstance(clusters, torch.Tensor) and clusters.dim() == 1 and clusters.numel():
        return [int(c) for c in clusters.tolist()]
    graph = strategy.collaboration_graph()
    if graph is None:
        return None
    return [int(v) for v in read_groups(graph.detach(), k).tolist()]


def _rounded(values: Any, digits: int) -> list[float | None]:
    r"""``values`` as floats rounded to ``digits`` decimals, ``None`` where
    not finite (as JSON can keep them)."""
    return [round(v, digits) if math.isfinite(v) else None for v in (float(x) for x in values)]


class GroupingTrace:
    r"""Round callback: the strategy's grouping of the clients
    (:func:`client_grouping`, ``k`` groups for a graph) after every evaluated
    round, and for CFL-like strategies the norms their split criterion
    compared with the thresholds (per cluster: the mean update's and the
    largest client update's; ``None`` for a cluster without uploads). Kept by
    the run's checkpoints (a :class:`~pyg_fedgraph.experiment.runner.
    StatefulCallback`) and, through :meth:`RecordCache.run`'s ``traces``, in
    the run's record.

    Example:
        >>> from pyg_fedgraph.experiment.records import GroupingTrace
        >>> trace = GroupingTrace(3)
        >>> trace.state_dict()
        {'rounds': [], 'labels': [], 'norms': []}
    """

    def __init__(self, k: int) -> None:
        self.k = k
        self.rounds: list[int] = []
        self.labels: list[list[int]] = []
        self.norms: list[list[list[float | None]]] = []

    def __call__(self, sim: Simulator, record: RoundRecord) -> None:
        import torch

        labels = client_grouping(sim.strategy, self.k)
        if labels is not None:
            self.rounds.append(int(record.round))
            self.labels.append(labels)
            mean = getattr(sim.strategy, "last_mean_norm", None)
            peak = getattr(sim.strategy, "last_max_norm", None)
            if isinstance(mean, torch.Tensor) and isinstance(peak, torch.Tensor):
                self.norms.append([[None if v != v else round(float(v), 5) for v in t.tolist()]
                                   for t in (mean, peak)])

    def state_dict(self) -> dict[str, Any]:
        return {"rounds": list(self.rounds), "labels": [list(x) for x in self.labels],
                "norms": self.norms}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds = list(state["rounds"])
        self.labels = [list(x) for x in state["labels"]]
        self.norms = list(state.get("norms", []))


class HypernetworkTrace:
    r"""Round callback: the clients of a graph hypernetwork
    (:class:`~pyg_fedgraph.nn.GCNHypernetwork`, the ``hypernetwork`` of
    :class:`~pyg_fedgraph.strategies.Panacea` and its variants) after every
    evaluated round, to see whether the generated models run apart before a
    jump of the validation curve: the largest and the mean norm of the encoder
    outputs :math:`\lVert\mathbf{z}_i\rVert` over the clients (their
    embeddings after the encoder; ``embedding_norm_*``), the mean
    norm of the generated models :math:`\lVert\theta_i\rVert`, and their
    spread :math:`\frac{1}{N}\sum_i \lVert\theta_i - \bar\theta\rVert`
    (:math:`\bar\theta` the mean model; held-out clients included; a value
    that is not finite is kept as ``None``). Kept by
    the run's checkpoints (a :class:`~pyg_fedgraph.experiment.runner.
    StatefulCallback`) and, through :meth:`RecordCache.run`'s ``traces``, in
    the run's record.

    With ``per_client=True`` it also keeps, under ``clients``, one list of
    :math:`N` values per evaluated round for each of
    :attr:`CLIENT_FIELDS` (4 decimals; ``None`` where not finite): the norm of
    each client's initial embedding :math:`\lVert\mathbf{e}_i\rVert` (the
    encoder's input), of its encoder output :math:`\lVert\mathbf{z}_i
    \rVert`, the distance of its model to the mean model
    :math:`\lVert\theta_i - \bar\theta\rVert`, its validation value of the
    run's primary metric, and ``reached``: in how many rounds so far the
    clients' feedback reached its embedding. The server step's loss on the
    models of the clients whose upload it accepted in round :math:`t`
    (:math:`S_t`) reaches :math:`\mathbf{e}_j` when :math:`j` lies within
    :math:`L` hops upstream of :math:`S_t` on the prior graph (:math:`L` the
    number of GCN layers; :math:`j \in S_t` only with the MLP encoder); the
    rounds' clients are the simulator's seeded draws
    (:meth:`~pyg_fedgraph.Simulator.replied_clients`), less the rejected
    uploads. ``reached`` follows only that gradient path: the graph
    generator's loss (``lambda_d > 0``) reaches nearly every embedding at
    every server step, an optimizer with momentum (Adam) keeps moving an
    embedding in rounds that do not reach it, held-out clients' embeddings
    never train although they may be counted, and before the engine's
    ``rejections_from`` (a resumed old checkpoint) rejected uploads count as
    accepted.

    Args:
        per_client (bool, optional): keep the per-client values too
            (default: :obj:`False`).

    Example:
        >>> from pyg_fedgraph.experiment.records import HypernetworkTrace
        >>> sorted(HypernetworkTrace().state_dict())
        ['embedding_norm_max', 'embedding_norm_mean', 'model_norm_mean', 'model_spread', 'rounds']
        >>> sorted(HypernetworkTrace(per_client=True).state_dict()["clients"])
        ['embedding_norm', 'input_norm', 'model_distance', 'reached', 'val']
    """

    FIELDS = ("embedding_norm_max", "embedding_norm_mean", "model_norm_mean", "model_spread")
    CLIENT_FIELDS = ("input_norm", "embedding_norm", "model_distance", "val", "reached")

    def __init__(self, per_client: bool = False) -> None:
        self.per_client = per_client
        self.rounds: list[int] = []
        self.values: dict[str, list[float | None]] = {name: [] for name in self.FIELDS}
        self.clients: dict[str, list[list[float | None]]] = {
            name: [] for name in self.CLIENT_FIELDS}
        self._reached: list[int] | None = None  # rounds each client was reached, so far
        self._counted = 0  # the last round counted in _reached

    def _count_reach(self, sim: Simulator, strategy: Any, upto: int) -> list[int]:
        r"""Adds to each client's count the rounds up to ``upto`` whose
        accepted clients reach its embedding (see the class docstring)."""
        import torch

        n = sim.dataset.num_clients
        reached = torch.tensor(self._reached or [0] * n)
        hn = strategy.hypernetwork
        edge_index = None
        if hn.encoder == "gcn" and sim.engine.ctx.edge_index is not None:
            edge_index = sim.engine.ctx.edge_index.cpu()
        rejected: dict[int, set[int]] = {}
        for r in sim.engine.rejections:  # those of the rounds not yet counted
            if self._counted < r.round <= upto:
                rejected.setdefault(r.round, set()).add(r.client)
        for rnd in range(self._counted + 1, upto + 1):
            mark = torch.zeros(n, dtype=torch.bool)
            sampled = [c for c in sim.replied_clients(rnd).tolist()
                       if c not in rejected.get(rnd, set())]
            mark[sampled] = True
            if edge_index is not None:
                for _ in range(hn.num_gnn_layers):  # messages flow source -> target
                    mark = mark.clone().index_fill_(0, edge_index[0][mark[edge_index[1]]], True)
            reached += mark.long()
        self._counted = upto
        return reached.tolist()

    def __call__(self, sim: Simulator, record: RoundRecord) -> None:
        import torch

        from pyg_fedgraph.nn import GCNHypernetwork
        from pyg_fedgraph.strategies.panacea import Panacea

        strategy = sim.strategy
        hn = getattr(strategy, "hypernetwork", None)
        if not isinstance(hn, GCNHypernetwork) or not isinstance(strategy, Panacea):
            raise TypeError(f"HypernetworkTrace reads a GCNHypernetwork (Panacea's); strategy "
                            f"{type(strategy).__name__} has {type(hn).__name__}")
        z = strategy.client_embeddings()
        with torch.no_grad():
            theta = hn.generate(z)
            norms = z.norm(dim=1)
            distance = (theta - theta.mean(dim=0)).norm(dim=1)
            figures = (norms.max(), norms.mean(), theta.norm(dim=1).mean(), distance.mean())
        self.rounds.append(int(record.round))
        # NaN or Inf (a diverged hypernetwork) kept as None, as JSON can.
        for name, v in zip(self.FIELDS, _rounded(figures, 5), strict=True):
            self.values[name].append(v)
        if self.per_client:
            self._reached = self._count_reach(sim, strategy, int(record.round))
            columns = {"input_norm": hn.embedding.detach().norm(dim=1), "embedding_norm": norms,
                       "model_distance": distance, "val": record.val[sim.history.metric]}
            for name, column in columns.items():
                self.clients[name].append(_rounded(column.cpu().tolist(), 4))
            self.clients["reached"].append([float(c) for c in self._reached])

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"rounds": list(self.rounds),
                                 **{k: list(v) for k, v in self.values.items()}}
        if self.per_client:
            state["clients"] = {k: [list(row) for row in v] for k, v in self.clients.items()}
            state["counted"] = self._counted
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds = list(state["rounds"])
        self.values = {name: list(state[name]) for name in self.FIELDS}
        if self.per_client:
            if "clients" not in state:
                raise ValueError("this HypernetworkTrace(per_client=True) was given the state "
                                 "of a trace without per-client values; build it with "
                                 "per_client=False to read that state")
            self.clients = {name: [list(row) for row in state["clients"][name]]
                            for name in self.CLIENT_FIELDS}
            self._counted = int(state["counted"])
            last = self.clients["reached"][-1] if self.clients["reached"] else None
            self._reached = None if last is None else [int(c or 0) for c in last]


class NovelClientProbe:
    r"""Round callback for runs with held-out (novel) clients
    (``novel_clients``, the Table III protocol of Panacea): whether the models
    a strategy gives the clients it never trained are worse than models it
    trained for others. After every evaluated round it evaluates each novel
    client :math:`i \in \mathcal{H}` on its validation and test splits with
    three models, keeping ``metric`` (default: the run's primary one):

    - ``own``: the model the strategy gives :math:`i` (for a hypernetwork,
      the one it generates for :math:`i`; what the run's novel-client history
      reports, unless the strategy evaluates with more than its models, as
      kNN-Per's evaluator does: the probe evaluates the models alone);
    - ``mean``: the mean :math:`\frac{1}{|\mathcal{T}|}\sum_{j \in
      \mathcal{T}} \theta_j` of the models of the trained clients
      :math:`\mathcal{T}` (a model of the federation as a whole; its buffers,
      such as BatchNorm statistics, the mean of theirs);
    - ``neighbour``: the model (and buffers) of :math:`i`'s strongest trained
      neighbour on the prior graph, :math:`\arg\max_{j \in \mathcal{T}}
      (w_{ji} + w_{ij})` (edge weights, 1 where the graph has none; ``None``
      for a client with no trained neighbour or a federation without a graph).

    At the first evaluated round and at every round the run's history makes
    its best (the round whose figures are reported), it also evaluates every
    trained client's model, with its own buffers, on every novel client
    (``cross``: :math:`|\mathcal{T}| \times |\mathcal{H}|` values per
    split, row :math:`j` the :math:`j`-th trained client's model), from which
    the best trained model for a novel client can be chosen on validation.
    Values are rounded to 6 decimals, ``None`` where not finite. The models
    are those the round has just evaluated
    (:meth:`~pyg_fedgraph.simulation.Simulator.personalized_models` in a
    callback: a fine-tuning strategy does not fine-tune again), and the probe
    runs inside :meth:`~pyg_fedgraph.simulation.Simulator.forked_rng`, so a
    probed run trains as an unprobed one. Kept by the run's checkpoints
    and, through :meth:`RecordCache.run`'s ``traces``, in the run's record.

    Args:
        metric (str, optional): the metric kept (default: the run's primary
            metric, the ``metric`` of its :class:`~pyg_fedgraph.engine.History`).

    Example:
        >>> from pyg_fedgraph.experiment.records import NovelClientProbe
        >>> sorted(NovelClientProbe().state_dict())
        ['cross', 'held_out', 'metric', 'neighbours', 'rounds', 'test', 'trained', 'val']
    """

    MODELS = ("own", "mean", "neighbour")

    def __init__(self, metric: str | None = None) -> None:
        self.metric = metric
        self.rounds: list[int] = []
        self.held_out: list[int] = []
        self.trained: list[int] = []
        self.neighbours: list[int | None] = []
        self.val: dict[str, list[list[float | None]]] = {m: [] for m in self.MODELS}
        self.test: dict[str, list[list[float | None]]] = {m: [] for m in self.MODELS}
        self.cross: dict[str, Any] = {}

    @staticmethod
    def strongest_neighbours(edge_index: Any, edge_weight: Any, held_out: Any,
                             trained: Any, num_nodes: int) -> list[int | None]:
        r"""For each client of ``held_out``, the client of ``trained`` with the
        largest :math:`w_{ji} + w_{ij}` on the graph (``edge_weight``
        ``None``: weight 1 per edge; the lowest index among equals), or
        ``None`` where no trained client is adjacent. Memory :math:`O(|H| N)`."""
        import torch

        held = torch.as_tensor(held_out, dtype=torch.long)
        if edge_index is None:
            return [None] * held.numel()
        src, dst = edge_index.cpu()
        weight = (torch.ones(src.numel()) if edge_weight is None
                  else edge_weight.detach().cpu().float())
        row = torch.full((num_nodes,), -1, dtype=torch.long)
        row[held] = torch.arange(held.numel())
        score = torch.zeros(held.numel(), num_nodes)
        for mine, other in ((dst, src), (src, dst)):  # w_ji (into i), then w_ij (out of i)
            keep = row[mine] >= 0
            score.index_put_((row[mine][keep], other[keep]), weight[keep], accumulate=True)
        trained = torch.as_tensor(trained, dtype=torch.long)
        w = score[:, trained]
        return [int(trained[int(w[k].argmax())]) if bool((w[k] > 0).any()) else None
                for k in range(held.numel())]

    def _setup(self, sim: Simulator) -> None:
        import torch

        held = sim.held_out.cpu()
        if held.numel() == 0:
            raise ValueError("NovelClientProbe needs a run with held-out clients "
                             "(novel_clients > 0); this one holds none out")
        n = sim.dataset.num_clients
        mask = torch.ones(n, dtype=torch.bool)
        mask[held] = False
        self.held_out = held.tolist()
        self.trained = mask.nonzero().view(-1).tolist()
        ctx = sim.engine.ctx
        self.neighbours = self.strongest_neighbours(ctx.edge_index, ctx.edge_weight,
                                                    self.held_out, self.trained, n)

    def __call__(self, sim: Simulator, record: RoundRecord) -> None:
        if not self.held_out:
            self._setup(sim)
        with sim.forked_rng():
            self._probe(sim, int(record.round))

    def _probe(self, sim: Simulator, rnd: int) -> None:
        import torch

        params, buffers = sim.personalized_models()
        held = torch.tensor(self.held_out)
        trained = torch.tensor(self.trained)
        h = held.numel()
        has = torch.tensor([j is not None for j in self.neighbours], dtype=torch.bool)
        near = torch.tensor([j for j in self.neighbours if j is not None], dtype=torch.long)
        models = torch.cat([params[held], params[trained].mean(dim=0).expand(h, -1),
                            params[near]])
        bufs = torch.cat([buffers[held], buffers[trained].mean(dim=0).expand(h, -1),
                          buffers[near]])
        rows = torch.cat([held, held, held[has]])
        metric = self.metric = self.metric or sim.history.metric
        self.rounds.append(rnd)
        for split, out in (("val", self.val), ("test", self.test)):
            values = _rounded(sim.trainer.evaluate(rows, models, bufs, split)[metric].cpu(), 6)
            out["own"].append(values[:h])
            out["mean"].append(values[h:2 * h])
            found = iter(values[2 * h:])
            out["neighbour"].append([next(found) if ok else None for ok in has.tolist()])
        if len(self.rounds) == 1 or sim.history.best_index == len(sim.history) - 1:
            # Every trained model on every novel client: |T| x |H| rows, trained-major.
            t = trained.numel()
            rows = held.repeat(t)
            models = params[trained].repeat_interleave(h, dim=0)
            bufs = buffers[trained].repeat_interleave(h, dim=0)
            cross: dict[str, Any] = {"round": rnd}
            for split in ("val", "test"):
                values = _rounded(
                    sim.trainer.evaluate(rows, models, bufs, split)[metric].cpu(), 6)
                cross[split] = [values[k * h:(k + 1) * h] for k in range(t)]
            self.cross = cross

    def state_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "rounds": list(self.rounds),
                "held_out": list(self.held_out),
                "trained": list(self.trained), "neighbours": list(self.neighbours),
                "val": {m: [list(r) for r in v] for m, v in self.val.items()},
                "test": {m: [list(r) for r in v] for m, v in self.test.items()},
                "cross": dict(self.cross)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.metric is not None and state["metric"] not in (None, self.metric):
            raise ValueError(f"this NovelClientProbe keeps {self.metric!r}; the state given "
                             f"keeps {state['metric']!r}")
        self.metric = state["metric"] or self.metric
        self.rounds = list(state["rounds"])
        self.held_out = list(state["held_out"])
        self.trained = list(state["trained"])
        self.neighbours = list(state["neighbours"])
        self.val = {m: [list(r) for r in state["val"][m]] for m in self.MODELS}
        self.test = {m: [list(r) for r in state["test"][m]] for m in self.MODELS}
        self.cross = dict(state["cross"])


class FineTuneSweep:
    r"""Round callback: how much local fine-tuning buys, measured once at the
    run's last round. Every client's model as the strategy sends it for
    evaluation is fine-tuned on the client's training split for each number
    of local steps :math:`k` in ``steps`` (:math:`k = 0`: not fine-tuned) at
    each learning rate :math:`\eta` in ``lrs`` (``None``: the run's rate and
    schedule; a number: that rate, without the run's Nesterov momentum,
    warm-up or decay, the ``lr`` of :class:`~pyg_fedgraph.train.jobs.FineTune`:
    its optimizer, momentum and weight decay stay the run's), with the run's
    batch size
    (:meth:`~pyg_fedgraph.simulation.Simulator.finetuned_models`), and
    evaluated on its validation and test splits, keeping ``metric``
    (default: the run's primary one). Under FedAvg, step count :math:`k` at
    the run's rate is FedAvg-FT fine-tuning :math:`k` steps, with FedAvg-FT's
    own batches: for a model whose training draws nothing from the global
    random stream (no dropout), the row of the run's local step count is
    FedAvg-FT's evaluation (its default fine-tuning) value for value. The run
    itself is not changed (inside
    :meth:`~pyg_fedgraph.simulation.Simulator.forked_rng`). Values are
    rounded to 6 decimals, ``None`` where not finite; ``val`` and ``test``
    hold one row of :math:`N` values per pair :math:`(\eta, k)` of
    :attr:`rows`, the step counts varying fastest (a model not fine-tuned is
    evaluated once, its row repeated for every rate).

    Args:
        steps (sequence of int): the step counts, each at least 0.
        metric (str, optional): the metric kept (default: the run's primary
            metric, the ``metric`` of its :class:`~pyg_fedgraph.engine.History`).
        lrs (sequence of float or None, optional): the fine-tuning rates,
            each positive or ``None`` (default: ``[None]``, the run's own).

    Example:
        >>> from pyg_fedgraph.experiment.records import FineTuneSweep
        >>> FineTuneSweep([0, 10], lrs=[0.01, None]).rows
        [(0.01, 0), (0.01, 10), (None, 0), (None, 10)]
    """

    def __init__(self, steps: Sequence[int], metric: str | None = None,
                 lrs: Sequence[float | None] | None = None) -> None:
        steps = list(steps)
        if (not steps or any(isinstance(k, bool) or not isinstance(k, int) or k < 0
                             for k in steps) or len(set(steps)) != len(steps)):
            raise ValueError(f"steps must be distinct step counts of at least 0, got {steps}")
        rates: list[float | None] = [None] if lrs is None else list(lrs)
        if (not rates or len(set(rates)) != len(rates)
                or any(r is not None and (isinstance(r, bool) or not isinstance(r, numbers.Real)
                                          or not math.isfinite(r) or r <= 0) for r in rates)):
            raise ValueError(f"lrs must be distinct positive rates or None, got {rates}")
        self.steps = steps
        self.lrs = [None if r is None else float(r) for r in rates]  # as JSON keeps them
        self.metric = metric
        self.round: int | None = None
        self.val: list[list[float | None]] = []
        self.test: list[list[float | None]] = []

    @property
    def rows(self) -> list[tuple[float | None, int]]:
        r"""The pairs :math:`(\eta, k)` of the rows of ``val`` and ``test``."""
        return [(lr, k) for lr in self.lrs for k in self.steps]

    def __call__(self, sim: Simulator, record: RoundRecord) -> None:
        if int(record.round) < sim.rounds:
            return
        with sim.forked_rng():
            self._sweep(sim, int(record.round))

    def _sweep(self, sim: Simulator, rnd: int) -> None:
        import torch

        from pyg_fedgraph.train.jobs import FineTune

        metric = self.metric = self.metric or sim.history.metric
        everyone = torch.arange(sim.dataset.num_clients)
        # Per pair, the validation and test rows; k = 0 (no fine-tuning) once for every rate.
        done: dict[tuple[float | None, int], list[list[float | None]]] = {}
        for lr, k in self.rows:
            if (key := (lr, k) if k else (None, 0)) not in done:
                params, buffers = sim.finetuned_models(FineTune(steps=k, lr=lr) if k else None)
                done[key] = [_rounded(sim.trainer.evaluate(everyone, params, buffers, split)
                                      [metric].cpu(), 6) for split in ("val", "test")]
        rows = [done[(lr, k) if k else (None, 0)] for lr, k in self.rows]
        self.round = rnd
        self.val = [list(val) for val, _ in rows]
        self.test = [list(test) for _, test in rows]

    def state_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "steps": list(self.steps), "lrs": list(self.lrs),
                "round": self.round, "val": [list(r) for r in self.val],
                "test": [list(r) for r in self.test]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["steps"]) != self.steps:
            raise ValueError(f"this FineTuneSweep tries steps {self.steps}; the state given "
                             f"tried {list(state['steps'])}")
        if list(state.get("lrs", [None])) != self.lrs:  # states before rates: the run's own
            raise ValueError(f"this FineTuneSweep tries rates {self.lrs}; the state given "
                             f"tried {list(state.get('lrs', [None]))}")
        if self.metric is not None and state["metric"] not in (None, self.metric):
            raise ValueError(f"this FineTuneSweep keeps {self.metric!r}; the state given "
                             f"keeps {state['metric']!r}")
        self.metric = state["metric"] or self.metric
        self.round = state["round"]
        self.val = [list(r) for r in state["val"]]
        self.test = [list(r) for r in state["test"]]


def rejections_entry(sim: Simulator) -> dict[str, Any]:
    r"""A record's ``rejections``: ``{"from_round": r, "uploads": [[round,
    client, reason], ...]}``, every upload of ``sim``'s run rejected from
    round ``r`` on (:attr:`~pyg_fedgraph.engine.RoundEngine.rejections`; ``r``
    is 1 unless the run resumed a checkpoint written before they were kept).
    The history's ``num_rejected`` counts only evaluated rounds.

    Example:
        >>> from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
        >>> sim = build_simulator(ExperimentConfig(dataset="digits", strategy="fedavg",
        ...                                        rounds=2))
        >>> _ = sim.run()
        >>> rejections_entry(sim)
        {'from_round': 1, 'uploads': []}
    """
    return {"from_round": sim.engine.rejections_from,
            "uploads": [list(r) for r in sim.rejections]}


def _clients_at_best(history: History, metric: str | None = None,
                     at: History | None = None) -> list[float]:
    r"""The test values of ``metric`` (default: the primary one) at the best
    round of ``at`` (default: ``history``) of the clients ``history`` is
    over."""
    if not len(history):
        return []
    best = (at or history).best_index
    values = history.records[best].test[metric or history.metric]
    if history.eval_clients is not None:
        values = values[history.eval_clients]
    return [float(v) for v in values]


def _metrics_at_best(history: History, at: History | None = None) -> dict[str, list[float]]:
    r"""Every test metric of :func:`_clients_at_best`, by name."""
    if not len(history):
        return {}
    return {name: _clients_at_best(history, name, at)
            for name in history.records[0].test}


class RecordCache:
    r"""Records of finished runs in ``records`` and checkpoints of runs in
    progress in ``checkpoints`` (see the module docstring).

    Args:
        records (str or pathlib.Path): the folder of the records' tables
            (tracked in a repository: a few kB a record).
        checkpoints (str or pathlib.Path): the folder of the checkpoints
            (large; untracked).
        checkpoint_seconds (float, optional): least seconds between two
            checkpoints of a run (``0.0``: after every round) (default: ``0.0``).
        progress (RoundProgress, optional): the display of the runs
            (default: a line per evaluated round on standard error).
        table (str or callable, optional): the table of every record this
            cache writes, or a function of a record's settings that names
            it (letters, digits, ``.``, ``_`` and ``-``) (default:
            :func:`record_table`). Reading finds a key in any table.
    """

    def __init__(self, records: str | Path, checkpoints: str | Path, *,
                 checkpoint_seconds: float = 0.0, progress: RoundProgress | None = None,
                 table: str | Callable[[Mapping[str, Any]], str] | None = None) -> None:
        self.records = Path(records)
        self.checkpoints = Path(checkpoints)
        self.checkpoint_seconds = checkpoint_seconds
        self.progress = progress or RoundProgress(terminal=False)
        if isinstance(table, str):
            self._check_table(table)
        self.table = table
        #: Every record read or written by this cache, by key (for a table of runs).
        self.used: dict[str, dict[str, Any]] = {}
        # The tables as last read: their lines by key, and the file each was read from
        # (inode, modification time, size), to read a table again once it has changed.
        self._tables: dict[str, dict[str, str]] = {}
        self._seen: dict[str, tuple[int, int, int]] = {}

    @staticmethod
    def _check_table(name: str) -> str:
        if not _TABLE_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a table name (letters, digits, '.', '_' and "
                             "'-', starting with a letter or digit)")
        return name

    def table_of(self, config: Mapping[str, Any]) -> str:
        r"""The table a record whose settings are ``config`` is written to
        (the cache's ``table``, else :func:`record_table`)."""
        if self.table is None:
            return self._check_table(record_table(config))
        if isinstance(self.table, str):
            return self.table
        return self._check_table(self.table(config))

    def table_path(self, cfg: ExperimentConfig) -> Path:
        r"""The table file the records of ``cfg`` (its run's and its studies')
        are written to."""
        return self.records / f"{self.table_of(plain_settings(cfg.to_dict()))}.jsonl"

    def checkpoint_path(self, cfg: ExperimentConfig) -> Path:
        r"""Where a run of ``cfg`` in progress keeps its checkpoint."""
        return self.checkpoints / f"{config_key(cfg)}.ckpt.pt"

    def load(self, cfg: ExperimentConfig) -> dict[str, Any] | None:
        r"""The record of ``cfg``, or ``None`` when it has none (or the record
        under its key holds other settings)."""
        key = config_key(cfg)
        entry = self._read(key)
        if entry is None or run_identity(entry.get("config", {})) != run_identity(
                cfg.to_dict()):
            return None
        self.used[key] = entry
        return entry

    def checkpoint_round(self, cfg: ExperimentConfig) -> int | None:
        r"""The round an interrupted run of ``cfg`` reached (its checkpoint's),
        or ``None`` when there is no checkpoint of that configuration."""
        from pyg_fedgraph.simulation.checkpoint import load_checkpoint

        path = self.checkpoint_path(cfg)
        if not path.is_file():
            return None
        state = load_checkpoint(path)
        if run_identity(state.get("run", {}).get("config", {})) != run_identity(cfg.to_dict()):
            return None
        return int(state["round"])

    def _read(self, key: str) -> dict[str, Any] | None:
        r"""The record under ``key``: its file of the earlier format where
        there is one, else its line in whichever table holds it."""
        try:
            return json.loads((self.records / f"{key}.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            pass
        self._refresh()
        for lines in self._tables.values():
            if key in lines:
                return _entry_of(lines[key])
        return None

    def _refresh(self) -> None:
        r"""Reads again every table whose file changed since this cache read
        it (another process or cache object wrote it), and forgets those
        gone."""
        present: dict[str, tuple[int, int, int]] = {}
        if self.records.is_dir():
            for path in self.records.glob("*.jsonl"):
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                present[path.stem] = (st.st_ino, st.st_mtime_ns, st.st_size)
        for name in [name for name in self._tables if name not in present]:
            del self._tables[name], self._seen[name]
        for name, seen in present.items():
            if self._seen.get(name) != seen:
                # Read after the stat: a table replaced in between is read new under
                # the old stamp, and read once more next time (never missed).
                self._tables[name] = _read_table(self.records / f"{name}.jsonl")
                self._seen[name] = seen

    def _update(self, name: str, add: Mapping[str, str], drop: Iterable[str] = ()) -> None:
        r"""Adds (or replaces) lines of table ``name`` and drops keys from it,
        under its lock, from the table as it is on disk then; a table left
        empty is deleted."""
        self.records.mkdir(parents=True, exist_ok=True)
        path = self.records / f"{name}.jsonl"
        with _locked(path):
            lines = _read_table(path)
            lines.update(add)
            for key in drop:
                lines.pop(key, None)
            if lines:
                _rewrite(path, lines)
                st = path.stat()
                self._tables[name] = lines
                self._seen[name] = (st.st_ino, st.st_mtime_ns, st.st_size)
            else:
                path.unlink(missing_ok=True)
                self._tables.pop(name, None)
                self._seen.pop(name, None)

    def _write(self, entries: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
        r"""Writes records by key into their tables (one rewrite per table),
        drops those keys from any other table, and returns each key's table."""
        home: dict[str, str] = {}
        by_table: dict[str, dict[str, str]] = {}
        for key, entry in entries.items():
            home[key] = self.table_of(entry.get("config") or {})
            by_table.setdefault(home[key], {})[key] = _line(key, entry)
        for name, add in sorted(by_table.items()):
            self._update(name, add)
        self._refresh()
        for name, lines in sorted(self._tables.items()):
            stale = [key for key, table in home.items() if table != name and key in lines]
            if stale:
                self._update(name, {}, stale)
        return home

    def _put(self, key: str, entry: dict[str, Any]) -> None:
        r"""Stores one record (replacing a file of the earlier format under
        its key, which would otherwise be read before it)."""
        self._write({key: entry})
        (self.records / f"{key}.json").unlink(missing_ok=True)

    def _store(self, cfg: ExperimentConfig, entry: dict[str, Any]) -> None:
        self._put(config_key(cfg), entry)
        self.used[config_key(cfg)] = entry

    def take(self, source: str | Path) -> list[str]:
        r"""Copies into this folder's tables the records of another record
        folder ``source`` (its tables and its files of the earlier format)
        whose keys this folder has no record of: how the records of runs made
        in another checkout (a worktree pinned for long runs) come home. A key
        both folders hold keeps this folder's record.

        Returns:
            list[str]: the keys copied, sorted.
        """
        source = Path(source)
        if not source.is_dir():
            raise ValueError(f"{source} is not a folder of records")
        other = RecordCache(source, self.checkpoints)
        other._refresh()
        found = {path.stem: path for path in sorted(source.glob("*.json"))}
        keys = sorted({*found, *(key for lines in other._tables.values() for key in lines)})
        entries = {}
        for key in keys:
            if self._read(key) is not None:
                continue
            entry = other._read(key)
            if not isinstance(entry, dict):
                raise ValueError(f"{found.get(key, source)} holds no record under {key}")
            entries[key] = entry
        if entries:
            self._write(entries)
        log.info("took %d records from %s", len(entries), source)
        return sorted(entries)

    def fold(self) -> list[str]:
        r"""Moves the records of the earlier format, one file
        ``<records>/<key>.json`` each, into their tables and deletes those
        files, and rewrites the table lines of an earlier table format (a
        line that :func:`_line` would now write otherwise, e.g. with its
        graph unpacked, or in a table other than its settings' one). A file
        is deleted only once its record reads back from its table equal to
        it (the same JSON, written with sorted keys); a table's record of the
        same key is replaced by the file's (a file there is newer: the
        tables never write one). Records read back the same before and
        after. Running it again does nothing. Run it while no run writes
        records into the folder.

        Returns:
            list[str]: the keys folded or rewritten, sorted.

        Raises:
            ValueError: when a file is not a record (not a JSON object).
            RuntimeError: when a record does not read back equal (its file is
                kept; the others are folded).
        """
        if not self.records.is_dir():
            return []
        self._refresh()
        restated = {key: entry for name, lines in sorted(self._tables.items())
                    for key, line in lines.items()
                    for entry in [_entry_of(line)]
                    if self.table_of(entry.get("config") or {}) != name
                    or _line(key, entry) != line}
        files = {path.stem: path for path in sorted(self.records.glob("*.json"))}
        entries: dict[str, dict[str, Any]] = {}
        for key, path in files.items():
            try:
                entry = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as err:
                raise ValueError(f"{path} is not a record ({err})") from None
            if not isinstance(entry, dict):
                raise ValueError(f"{path} is not a record (not a JSON object)")
            entries[key] = entry
        if not entries and not restated:
            return []
        home = self._write({**restated, **entries})
        tables = {name: _read_table(self.records / f"{name}.jsonl")
                  for name in set(home.values())}
        folded, kept = [], []
        for key, path in files.items():
            line = tables[home[key]].get(key)
            if line is None or _canonical(_entry_of(line)) != _canonical(entries[key]):
                kept.append(path.name)
                continue
            path.unlink()
            folded.append(key)
        if kept:
            raise RuntimeError(f"{len(kept)} records do not read back from their tables as "
                               f"their files hold them; kept: {', '.join(kept)}")
        rewritten = [key for key in restated if key not in files]
        log.info("folded %d records and rewrote %d into %s", len(folded), len(rewritten),
                 ", ".join(sorted(tables)))
        return sorted([*folded, *rewritten])

    @staticmethod
    def _entry(cfg: ExperimentConfig, summary: dict, history: History, graph: Any,
               seconds: float, cpu_seconds: float, load_start: float, device: str,
               novel: History | None = None, **extra: Any) -> dict[str, Any]:
        import torch

        if novel is not None and len(novel):
            # The held-out clients at the round the summary reports (its test_novel).
            extra["novel_client_metrics"] = _metrics_at_best(novel, at=history)
        return {
            "config": plain_settings(cfg.to_dict()),
            "summary": summary,
            "val": history.mean("val"),
            "test": history.mean("test"),
            # The test value at the best mean-validation round of every client the
            # summary's mean is over (the benign ones under attack; NaN where one was
            # not evaluated): the spread across clients the papers report.
            "test_clients": _clients_at_best(history),
            # Every metric of those clients at that round (the primary one too), e.g.
            # a forecast's errors in mph per horizon beside its normalized MSE.
            "test_client_metrics": _metrics_at_best(history),
            "graph": None if graph is None else graph.float().tolist(),
            "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "load": [load_start, os.getloadavg()[0]],
            "torch_threads": torch.get_num_threads(),
            # What ran it: results can move with the torch version and the device, and on
            # the CPU with the vector instructions torch's kernels use (AVX2, AVX512, ...:
            # the same code and torch give other numbers on a CPU without AVX-512).
            "torch": torch.__version__,
            "device": device,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            **extra,
        }

    @staticmethod
    def study_key(cfg: ExperimentConfig, study: str) -> str:
        r"""The key of the record of study ``study`` of a run of ``cfg``:
        :func:`config_key` and the study's name (never a plain run's key)."""
        return f"{config_key(cfg)}-{study}"

    def load_study(self, cfg: ExperimentConfig, study: str) -> dict[str, Any] | None:
        r"""The record of study ``study`` of ``cfg`` (see :meth:`run_study`),
        or ``None`` when it has none (or the record under its key holds other
        settings)."""
        key = self.study_key(cfg, study)
        entry = self._read(key)
        if entry is None or entry.get("study") != study or run_identity(
                entry.get("config", {})) != run_identity(cfg.to_dict()):
            return None
        self.used[key] = entry
        return entry

    def run_study(self, cfg: ExperimentConfig, study: str,
                  measure: Callable[[], tuple[Simulator, dict[str, Any]]], *,
                  refresh: bool = False) -> dict[str, Any]:
        r"""The record of study ``study`` of ``cfg``: read back when it
        exists (unless ``refresh``), else measured and stored.

        A study is a run whose reader needs more than a run record's summary
        (weights per round, statistics of the final graph, a score per round):
        ``measure()`` trains the run of ``cfg`` its own way and returns the
        simulator and the figures to keep (plain JSON values). The record
        holds them with the settings, the simulator's summary, timing,
        machine load, torch version, device and CPU instruction set, as a run
        record does; it is returned as read back, so that a reader sees the
        same with or without the run. Studies are short (seconds to
        minutes): no checkpoint."""
        import time

        import torch

        if not refresh:
            entry = self.load_study(cfg, study)
            if entry is not None:
                return entry
        load_start = os.getloadavg()[0]
        t0, cpu0 = time.perf_counter(), time.process_time()
        sim, figures = measure()
        entry = {
            "config": plain_settings(cfg.to_dict()),
            "study": study,
            "summary": sim.summary(),
            **figures,
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - cpu0,
            "load": [load_start, os.getloadavg()[0]],
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "device": str(sim.device),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        }
        key = self.study_key(cfg, study)
        self._put(key, entry)
        found = self.load_study(cfg, study)
        if found is None:  # the settings do not survive JSON: a bug, not a user error
            raise RuntimeError(f"the record {key} in {self.records} does not read back as the "
                               f"settings of {study}")
        return found

    def run(self, cfg: ExperimentConfig, *, refresh: bool = False,
            local_models_as: ExperimentConfig | None = None,
            traces: dict[str, Any] | None = None) -> dict[str, Any]:
        r"""The record of ``cfg``: read back when it exists (unless
        ``refresh``), else run (or continued from its checkpoint) and stored.

        With ``local_models_as`` (a configuration whose training is that of
        ``cfg`` and which evaluates the clients' models after their local
        training: FedAvg-FT with ``finetune_from="local"`` for a FedAvg
        ``cfg``, ``CFL(evaluate="trained")`` for a CFL one), the same run also
        evaluates the clients' local models each round
        (:class:`LocalModelsCallback`) and stores that history as the record
        of ``local_models_as``. ``traces`` are further round callbacks with
        state (:class:`~pyg_fedgraph.experiment.runner.StatefulCallback`,
        kept by the checkpoints), such as a benchmark's per-round record of
        the clients' grouping: the record keeps each one's final
        ``state_dict()`` under ``traces[name]``."""
        from pyg_fedgraph.engine import History
        from pyg_fedgraph.experiment.build import build_simulator

        if not refresh:
            entry = self.load(cfg)
            if entry is not None and (local_models_as is None
                                      or self.load(local_models_as) is not None):
                return entry
        sim = build_simulator(cfg)
        callbacks: dict[str, Any] = dict(traces or {})
        second = None
        if local_models_as is not None:
            second = History(sim.history.metric, sim.history.higher_is_better,
                             eval_clients=sim.history.eval_clients)
            callbacks["local_models"] = LocalModelsCallback(second)
        checkpoint = self.checkpoint_path(cfg)
        runner = Runner(sim, name=f"{cfg.strategy} {cfg.partition or ''}".strip(),
                        checkpoint=checkpoint, checkpoint_seconds=self.checkpoint_seconds,
                        settings=cfg.to_dict(), progress=self.progress, callbacks=callbacks)
        if not refresh and runner.resume(
                strict=False, match=lambda saved, mine: run_identity(saved) == run_identity(mine)):
            log.warning("resuming %s at round %d of %d (%.0f s before)", cfg.strategy,
                        sim.round, sim.rounds, runner.seconds_before)
        result = runner.run()
        if result.status != "finished":
            raise RuntimeError(f"the run of {config_key(cfg)} was stopped at round "
                               f"{result.round}; its checkpoint is {result.checkpoint}")
        device = str(sim.device)
        extra = dict(sim.strategy.diagnostics())
        if traces:
            extra["traces"] = {name: trace.state_dict() for name, trace in traces.items()}
        rejections = rejections_entry(sim)
        entry = self._entry(cfg, sim.summary(), sim.history, sim.strategy.collaboration_graph(),
                            result.seconds, result.cpu_seconds, result.load_start, device,
                            novel=sim.novel_history, rejections=rejections, **extra)
        self._store(cfg, entry)
        if second is not None and local_models_as is not None:
            summary = second.summary()
            summary["test_per_client_best"] = second.test_at_best(protocol="per-client-best")
            if sim.attack is not None:
                summary["test_benign"] = summary["test"]
            self._store(local_models_as, self._entry(
                local_models_as, summary, second, None, result.seconds, result.cpu_seconds,
                result.load_start, device, rejections=rejections, derived_from=config_key(cfg),
                note=f"evaluated inside the {cfg.strategy} run (identical training), see "
                     "LocalModelsCallback"))
        checkpoint.unlink(missing_ok=True)
        s = entry["summary"]
        log.warning("[run] %s %s N=%s: test %.4f per-client-best %.4f (%.0f s)", cfg.strategy,
                    cfg.partition, cfg.clients, s["test"], s["test_per_client_best"],
                    result.seconds)
        return entry
