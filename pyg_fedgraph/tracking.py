r"""Experiment tracking: simulator callbacks that log a run to
`TensorBoard <https://www.tensorflow.org/tensorboard>`_ or
`MLflow <https://mlflow.org>`_.

A tracker is a :class:`~pyg_fedgraph.simulation.Simulator` callback
(``Simulator(callbacks=[tracker])``), called after every evaluated round
:math:`t` with the round's record. It logs, at step :math:`t`:

* the mean over the evaluated clients :math:`\mathcal{C}` of every metric on
  each split, ``val/<metric>`` and ``test/<metric>``,
  :math:`\frac{1}{|\mathcal{C}|} \sum_{i \in \mathcal{C}} m_i^{(t)}` (the
  numbers of ``history.csv``: clients without a value are left out; under an
  attack :math:`\mathcal{C}` holds the benign clients only), and
  ``novel/test/<metric>`` over the held-out clients when there are some;
* ``train_loss``, ``seconds``, ``num_sampled`` and the record's extra
  entries (``num_dropped``, ``num_rejected``, a ``rand_index``, ...);
* every ``matrix_every`` rounds and at the last round, when the strategy has
  a collaboration graph
  (:meth:`~pyg_fedgraph.strategies.Strategy.collaboration_graph`), the matrix
  :math:`W` :math:`(N, N)` as an image (TensorBoard) and the mean self weight
  :math:`\frac{1}{N}\sum_i W_{ii}` as ``collaboration/self_weight``;
* once, at its first round, the run's hyper-parameters (:func:`run_hparams`:
  the strategy's, the local training's, the simulator's, plus those the
  caller adds);
* at :meth:`~Tracker.close`, the run's summary (``summary/test``, the test
  metric at the round of best validation, ``summary/val_best``, ...).

Trackers write only where they are told: :class:`TensorBoardTracker` into
its ``log_dir``, :class:`MLflowTracker` into its ``tracking_uri``. The
command line (``--tracker``) puts both under the run's ``--out``
(:func:`build_tracker`). They hold no state that a resumed run needs: a
TensorBoard tracker continuing a run drops the events of the rounds it logs
again (TensorBoard's ``purge_step``), an MLflow tracker continues the
unfinished MLflow run of the same name.

Optional dependencies: ``pip install 'pyg-fedgraph[tensorboard]'`` or
``'pyg-fedgraph[mlflow]'``. MLflow sends usage statistics of its own unless
``MLFLOW_DISABLE_TELEMETRY=true`` (or ``DO_NOT_TRACK=true``) is set.
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pyg_fedgraph.typing import WITH_MLFLOW, WITH_TENSORBOARD, TrackerName, require

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

    from pyg_fedgraph.engine.history import RoundRecord
    from pyg_fedgraph.simulation import Simulator

__all__ = ["Tracker", "TensorBoardTracker", "MLflowTracker", "TrackerName", "TRACKERS",
           "check_tracker", "build_tracker", "round_scalars", "run_hparams", "matrix_image"]

#: A tracker's name on the command line (``--tracker``).
#: The trackers, in the order ``--help`` lists them.
TRACKERS: tuple[TrackerName, ...] = ("tensorboard", "mlflow")
#: How a run ended, for :meth:`Tracker.close`.
RunStatus = Literal["finished", "stopped", "failed"]
#: A hyper-parameter value as the trackers log it.
Scalar = bool | int | float | str


def _client_mean(values: Tensor, clients: Tensor | None) -> float:
    import torch

    v = values if clients is None else values[clients.to(values.device)]
    v = v[~torch.isnan(v)]
    return float(v.mean()) if v.numel() else math.nan


def round_scalars(sim: Simulator, record: RoundRecord) -> dict[str, float]:
    r"""The numbers a tracker logs for an evaluated round: client means of
    every metric (``val/<metric>``, ``test/<metric>``, and
    ``novel/test/<metric>`` when clients are held out), ``train_loss``,
    ``seconds``, ``num_sampled`` and the record's extra entries.

    The means are those of :meth:`History.round_rows
    <pyg_fedgraph.engine.History.round_rows>` (the clients of
    ``history.eval_clients``, NaN left out), computed for this record only.
    """
    out = {"train_loss": float(record.train_loss), "seconds": float(record.seconds),
           "num_sampled": float(record.num_sampled)}
    for split in ("val", "test"):
        for name, values in getattr(record, split).items():
            out[f"{split}/{name}"] = _client_mean(values, sim.history.eval_clients)
    novel = sim.novel_history
    if novel is not None:
        for name, values in record.test.items():
            out[f"novel/test/{name}"] = _client_mean(values, novel.eval_clients)
    for key, value in record.extra.items():
        out[key] = float(value)
    return out


def _scalar(value: Any) -> Scalar:
    if isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "numel") and value.numel() == 1:  # a one-element tensor
        return value.item()
    return str(value)


def run_hparams(sim: Simulator) -> dict[str, Scalar]:
    r"""The hyper-parameters of a simulated run as flat ``name -> value``
    pairs (values that are no bool, int, float or str are written as text):
    ``strategy`` and its constructor options as ``strategy.<name>``, the
    local training settings as ``local.<name>``, and ``rounds``,
    ``sample_fraction``, ``eval_every``, ``seed``, ``num_clients``,
    ``dataset``, ``dropout``, ``model``."""
    out: dict[str, Scalar] = {
        "strategy": sim.strategy.name or type(sim.strategy).__name__,
        "dataset": sim.dataset.name, "num_clients": sim.dataset.num_clients,
        "model": type(sim.trainer.model).__name__, "rounds": sim.rounds,
        "sample_fraction": sim.sample_fraction, "eval_every": sim.eval_every,
        "seed": sim.seed, "dropout": sim.dropout}
    for key, value in sim.strategy.hparams().items():
        out[f"strategy.{key}"] = _scalar(value)
    for key, value in vars(sim.trainer.config).items():
        out[f"local.{key}"] = _scalar(value)
    return out


def _flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, Scalar]:
    out: dict[str, Scalar] = {}
    for key, value in params.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        elif value is not None:
            out[f"{prefix}{key}"] = _scalar(value)
    return out


def matrix_image(weight: Tensor, *, max_size: int = 512, min_size: int = 256,
                 cmap: str = "viridis") -> np.ndarray:
    r"""A collaboration matrix :math:`W` as an RGB picture: pixel
    :math:`(i, j)` shows :math:`W_{ij}` (row :math:`i` = the weights client
    :math:`i` gives), coloured on the scale from :math:`\min(0, \min W)` to
    :math:`\max W`.

    Above ``max_size`` clients each pixel is the mean of a block of entries
    (adaptive average pooling); below ``min_size`` each entry becomes a
    square of pixels, so that small federations stay visible.

    Args:
        weight (torch.Tensor): :math:`W` :math:`(N, N)`.
        max_size (int, optional): largest side in entries (default: ``512``).
        min_size (int, optional): smallest side in pixels (default: ``256``).
        cmap (str, optional): a matplotlib colour map (default: ``"viridis"``).

    Shapes:
        - **input:** :math:`(N, N)`
        - **output:** :math:`(H, H, 3)` ``float32`` in :math:`[0, 1]`.
    """
    import matplotlib
    import numpy as np
    import torch
    import torch.nn.functional as F

    if weight.dim() != 2 or weight.size(0) != weight.size(1) or weight.size(0) == 0:
        raise ValueError(f"the collaboration matrix must be (N, N) with N >= 1, got "
                         f"{tuple(weight.shape)}")
    w = weight.detach().to(device="cpu", dtype=torch.float32)
    if w.size(0) > max_size:
        w = F.adaptive_avg_pool2d(w[None, None], max_size)[0, 0]
    w = torch.nan_to_num(w, nan=0.0)
    low, high = min(0.0, float(w.min())), float(w.max())
    scaled = (w - low) / (high - low) if high > low else torch.zeros_like(w)
    rgb = matplotlib.colormaps[cmap](scaled.numpy())[..., :3].astype(np.float32)
    repeat = max(1, math.ceil(min_size / rgb.shape[0]))
    if repeat > 1:
        rgb = rgb.repeat(repeat, axis=0).repeat(repeat, axis=1)
    return rgb


class Tracker:
    r"""Base class of the trackers: a simulator callback that logs each
    evaluated round, the run's hyper-parameters once and its summary at
    :meth:`close` (see :mod:`pyg_fedgraph.tracking` for what is logged).

    Subclasses implement :meth:`_open`, :meth:`_log_scalars`,
    :meth:`_log_matrix` and :meth:`_close`. A tracker logs one run; use it
    as a context manager, or call :meth:`close` when the run ends.

    Args:
        hparams (dict, optional): hyper-parameters to log besides those of
            :func:`run_hparams` (nested dicts are flattened to
            ``outer.inner``; :obj:`None` values are left out)
            (default: :obj:`None`).
        matrix_every (int, optional): log the collaboration matrix at the
            evaluated rounds that are multiples of it, and at the last round;
            ``0`` never (default: ``10``).
    """

    def __init__(self, *, hparams: Mapping[str, Any] | None = None,
                 matrix_every: int = 10) -> None:
        if isinstance(matrix_every, bool) or not isinstance(matrix_every, int) \
                or matrix_every < 0:
            raise ValueError(f"matrix_every must be an int >= 0, got {matrix_every!r}")
        self.hparams = _flat(hparams or {})
        self.matrix_every = matrix_every
        self._sim: Simulator | None = None
        self._closed = False

    def __call__(self, sim: Simulator, record: RoundRecord) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed; a tracker logs one run")
        if self._sim is None:
            params = {**run_hparams(sim), **self.hparams}
            scalars = round_scalars(sim, record)
            self._open(sim, params, metrics=[k for k in scalars if "/" in k], first=record.round)
        else:
            scalars = round_scalars(sim, record)
        self._sim = sim
        self._log_scalars(scalars, record.round)
        every = self.matrix_every
        if every and (record.round % every == 0 or record.round == sim.rounds):
            weight = sim.strategy.collaboration_graph()
            if weight is not None:
                self._log_scalars({"collaboration/self_weight":
                                   float(weight.detach().diagonal().float().mean())},
                                  record.round)
                self._log_matrix(weight, record.round)

    def close(self, status: RunStatus = "finished") -> None:
        r"""Ends the run: logs its summary (unless it ``"failed"``) and
        closes the files or the MLflow run, marking it ``status``
        (``"finished"``, ``"stopped"`` by the user, or ``"failed"``).
        Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._sim is None:
            return
        if status != "failed":
            summary = self._sim.summary()
            scalars = {f"summary/{k}": float(v) for k, v in summary.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)}
            self._log_scalars(scalars, self._sim.round)
        self._close(status)

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, kind: type[BaseException] | None, *args: Any) -> None:
        self.close("finished" if kind is None
                   else "stopped" if issubclass(kind, KeyboardInterrupt) else "failed")

    # ------------------------------------------------------- for subclasses
    def _open(self, sim: Simulator, hparams: dict[str, Scalar], metrics: Sequence[str],
              first: int) -> None:
        raise NotImplementedError

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def _log_matrix(self, weight: Tensor, step: int) -> None:
        raise NotImplementedError

    def _close(self, status: RunStatus) -> None:
        raise NotImplementedError


class TensorBoardTracker(Tracker):
    r"""Logs a run as TensorBoard event files in ``log_dir`` (through
    :class:`torch.utils.tensorboard.SummaryWriter`): scalars per evaluated
    round, the collaboration matrix as the image ``collaboration/matrix``
    (:func:`matrix_image`), and the hyper-parameters for TensorBoard's
    HParams dashboard, with the per-round means and the summary as its
    metrics. View with ``tensorboard --logdir <log_dir or a parent>``.

    A tracker continuing a resumed run purges the events at and after the
    first round it logs, so that rounds logged by an aborted run before its
    last checkpoint are not shown twice.

    Args:
        log_dir (str or pathlib.Path): where the event files go (created).
        hparams (dict, optional): see :class:`Tracker`.
        matrix_every (int, optional): see :class:`Tracker` (default: ``10``).
    """

    def __init__(self, log_dir: str | Path, *, hparams: Mapping[str, Any] | None = None,
                 matrix_every: int = 10) -> None:
        require(WITH_TENSORBOARD, "tensorboard", "tensorboard")
        super().__init__(hparams=hparams, matrix_every=matrix_every)
        self.log_dir = Path(log_dir)
        self.writer: Any = None

    def _open(self, sim: Simulator, hparams: dict[str, Scalar], metrics: Sequence[str],
              first: int) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        self.writer = SummaryWriter(str(self.log_dir), purge_step=first)
        metric_dict = {name: math.nan for name in (*metrics, "summary/test", "summary/val_best")}
        for summary in hparams_summary(hparams, metric_dict):
            # At the purge step: a step-0 event after a resumed run's purge reads
            # as out of order to TensorBoard, which then drops the earlier rounds.
            self.writer.file_writer.add_summary(summary, global_step=first)

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)

    def _log_matrix(self, weight: Tensor, step: int) -> None:
        self.writer.add_image("collaboration/matrix", matrix_image(weight), step,
                              dataformats="HWC")

    def _close(self, status: RunStatus) -> None:
        self.writer.close()

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({str(self.log_dir)!r})"


class MLflowTracker(Tracker):
    r"""Logs a run to MLflow: the hyper-parameters as the run's parameters,
    scalars per evaluated round as metrics with ``step`` = round, the
    summary as metrics at the last round; the run ends ``FINISHED``,
    ``KILLED`` (stopped) or ``FAILED``.

    The store ``tracking_uri`` and the experiment ``experiment`` are opened
    (created when missing) by the constructor, so that a new store's setup
    is not counted in the first round's time. The run is found or created
    at the first evaluated round: an unfinished run named ``run_name`` (a
    run that was stopped and is now resumed) is continued; otherwise a new
    run starts.

    Args:
        tracking_uri (str): the MLflow store, e.g. ``"sqlite:///runs/x/mlflow.db"``
            (a local file), a plain-directory store ``"file:///..."`` (in
            maintenance mode in MLflow 3, which accepts it only with
            ``MLFLOW_ALLOW_FILE_STORE=true`` set) or an MLflow server's
            ``http://`` address.
        experiment (str, optional): the experiment's name, created when
            missing (default: ``"pyg-fedgraph"``).
        run_name (str, optional): the run's name (default: the strategy's).
        artifact_location (str, optional): where a newly created experiment
            keeps artifacts (default: MLflow's, relative to the working
            directory for a local store; this tracker writes no artifact).
        tags (dict, optional): tags of a new run (default: :obj:`None`).
        hparams (dict, optional): see :class:`Tracker`.
        matrix_every (int, optional): see :class:`Tracker`; MLflow gets the
            mean self weight only (default: ``10``).
    """

    def __init__(self, tracking_uri: str, *, experiment: str = "pyg-fedgraph",
                 run_name: str | None = None, artifact_location: str | None = None,
                 tags: Mapping[str, str] | None = None,
                 hparams: Mapping[str, Any] | None = None, matrix_every: int = 10) -> None:
        require(WITH_MLFLOW, "mlflow", "mlflow")
        super().__init__(hparams=hparams, matrix_every=matrix_every)
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.run_name = run_name
        self.artifact_location = artifact_location
        self.tags = dict(tags or {})
        self.run_id: str | None = None

        from mlflow.tracking import MlflowClient

        self.client = client = MlflowClient(tracking_uri=tracking_uri)
        found = client.get_experiment_by_name(experiment)
        self.experiment_id: str = (
            found.experiment_id if found is not None
            else client.create_experiment(experiment, artifact_location=artifact_location))

    def _open(self, sim: Simulator, hparams: dict[str, Scalar], metrics: Sequence[str],
              first: int) -> None:
        from mlflow.entities import Param

        client = self.client
        name = self.run_name or str(hparams["strategy"])
        runs = client.search_runs(
            [self.experiment_id], filter_string=f"attributes.run_name = '{_quoted(name)}' and "
            f"attributes.status != 'FINISHED'", order_by=["attributes.start_time DESC"],
            max_results=1)
        if runs:
            self.run_id = runs[0].info.run_id
            client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = client.create_run(self.experiment_id, run_name=name,
                                            tags=self.tags).info.run_id
            params = [Param(k, str(v)) for k, v in hparams.items()]
            for i in range(0, len(params), 100):  # MLflow's limit per batch
                client.log_batch(self.run_id, params=params[i:i + 100])

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        assert self.run_id is not None
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in scalars.items()]
        for i in range(0, len(metrics), 1000):  # MLflow's limit per batch
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def _log_matrix(self, weight: Tensor, step: int) -> None:
        pass  # the self weight, logged by the base class, is MLflow's view of it

    def _close(self, status: RunStatus) -> None:
        assert self.run_id is not None
        self.client.set_terminated(self.run_id, status={
            "finished": "FINISHED", "stopped": "KILLED", "failed": "FAILED"}[status])

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.tracking_uri!r}, "
                f"experiment={self.experiment!r})")


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def check_tracker(name: str) -> None:
    r"""Raises a :class:`ValueError` when ``name`` is not one of
    :data:`TRACKERS`, an :class:`ImportError` naming the extra to install
    when its package is missing (so that the command line refuses before
    any work)."""
    if name not in TRACKERS:
        raise ValueError(f"unknown tracker {name!r}; choose one of {', '.join(TRACKERS)}")
    require(WITH_TENSORBOARD if name == "tensorboard" else WITH_MLFLOW, name, name)


def build_tracker(name: str, root: str | Path, *, run: str, experiment: str,
                  hparams: Mapping[str, Any] | None = None,
                  matrix_every: int = 10) -> Tracker:
    r"""The tracker ``name`` of the command line, writing under ``root``:

    * ``"tensorboard"``: event files in ``root / run``
      (``tensorboard --logdir root`` shows every run by its name);
    * ``"mlflow"``: the run ``run`` of the experiment ``experiment`` in the
      SQLite store ``root / "mlflow.db"`` (``mlflow ui --backend-store-uri
      sqlite:///root/mlflow.db``), new experiments keeping artifacts in
      ``root / "mlartifacts"``.

    A :class:`ValueError` names the known trackers for another ``name``; an
    :class:`ImportError` names the extra to install when the package is
    missing.
    """
    check_tracker(name)
    root = Path(root)
    if name == "tensorboard":
        return TensorBoardTracker(root / run, hparams=hparams, matrix_every=matrix_every)
    if name == "mlflow":
        absolute = root.resolve()
        return MLflowTracker(f"sqlite:///{absolute / 'mlflow.db'}", experiment=experiment,
                             run_name=run, artifact_location=(absolute / "mlartifacts").as_uri(),
                             hparams=hparams, matrix_every=matrix_every)
    raise AssertionError("unreachable: check_tracker knows every name")
