r"""The traffic dataset: sliding windows over a :math:`(T, N)` speed series,
one client per road sensor."""
from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.data.objective import Objective
from pyg_fedgraph.datasets.traffic.io import SpeedTable, adjacency_to_edges
from pyg_fedgraph.train.traffic_metrics import pack_targets, traffic_objective

if TYPE_CHECKING:  # pandas is optional: only DataFrame conversions need it
    import pandas

__all__ = ["TrafficDataset", "dcrnn_split_sizes"]

log = logging.getLogger(__name__)

Normalization = Literal["global", "sensor"]


def dcrnn_split_sizes(num_windows: int, fractions: Sequence[float] = (0.7, 0.1, 0.2)
                      ) -> tuple[int, int, int]:
    r"""Chronological split of ``num_windows`` windows as DCRNN's
    ``generate_training_data.py`` does it: ``test = round(0.2 W)``,
    ``train = round(0.7 W)``, ``val`` the rest (Python's ``round``).
    METR-LA: 34,249 windows -> 23,974 / 3,425 / 6,850, Panacea's Table I."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6:
        raise ValueError(f"fractions must be three non-negative shares summing to 1, "
                         f"got {tuple(fractions)}")
    num_test = round(num_windows * fractions[2])
    num_train = round(num_windows * fractions[0])
    return num_train, num_windows - num_train - num_test, num_test


# ------------------------------------------------------------------ dataset


class TrafficDataset(FederatedDataset):
    r"""Traffic-speed forecasting with one client per road sensor (Panacea,
    Lin, Lan, He and Li, Sec. IV; windows and splits as in DCRNN, Li et al. 2018).

    From a speed series :math:`\mathbf{V} \in \mathbb{R}^{T \times N}` (mph,
    0 = missing) the :math:`W = T - T_{in} - T_{out} + 1` windows
    :math:`k = 0, \ldots, W - 1` of sensor :math:`i` are

    .. math::
        \mathbf{x}_{ik} = \big[(V_{k+t,i} - \mu_i) / \sigma_i,\;
        \tau_{k+t}\big]_{t=0}^{T_{in}-1} \in \mathbb{R}^{T_{in} \times 2},
        \qquad
        \mathbf{y}_{ik} = \big[V_{k+T_{in}+h,i}\big]_{h=0}^{T_{out}-1},

    with :math:`\tau` the time of day in :math:`[0, 1)`. The windows are split
    chronologically 70 / 10 / 20 (:func:`dcrnn_split_sizes`). :math:`\mu,
    \sigma` are z-score statistics of the non-missing readings under the
    training windows' inputs (time steps :math:`0 .. W_{train} + T_{in} - 2`):
    one pair for all sensors (``normalization="global"``, DCRNN's
    ``StandardScaler`` and the CNFGNN / Panacea setup; in a federation the
    sums behind them are the only statistics clients share) or one per sensor
    (``"sensor"``, purely local; a sensor without training readings takes the
    global mean, one whose readings do not vary the global std). DCRNN
    computes them with the zeros included; they are left out here. A missing
    input reading stays :math:`(0 - \mu) / \sigma`, as in DCRNN's data.

    **Storage.** ``splits[s].x`` :math:`(N, W_s, T_{in}, 2)` and
    ``splits[s].y`` :math:`(N, W_s, T_{out})` (raw mph, DCRNN's ``x`` and
    ``y``) are zero-copy strided views of the series: they overlap in
    memory, so never modify them in place. :meth:`batch` gathers the
    requested windows and returns the targets *packed* with their mask
    weights and normalization constants, :math:`(S, B, 4, T_{out})`, the
    layout :func:`~pyg_fedgraph.train.traffic_metrics.traffic_objective`
    reads (:attr:`objective`), so that the masked metrics come out in mph.

    Args:
        name (str): dataset name.
        speed (torch.Tensor or numpy.ndarray): speeds :math:`(T, N)` in mph,
            ``0`` (or NaN) for missing readings.
        timestamps (numpy.ndarray): :math:`(T,)` ``datetime64`` stamps,
            strictly increasing (5-minute steps for the real data).
        sensor_ids (list of str, optional): one id per column (default:
            ``"0" .. "N-1"``).
        edge_index (torch.Tensor, optional): prior client graph :math:`(2, E)`.
        edge_weight (torch.Tensor, optional): its weights :math:`(E,)`.
        input_steps (int, optional): :math:`T_{in}` (default: :obj:`12`)
        output_steps (int, optional): :math:`T_{out}` (default: :obj:`12`)
        fractions (tuple, optional): train / val / test shares of the windows
            (default: :obj:`(0.7, 0.1, 0.2)`)
        normalization (str, optional): ``"global"`` or ``"sensor"``
            (default: :obj:`"global"`)
        horizons (tuple, optional): steps reported by :attr:`objective`
            (those beyond ``output_steps`` are dropped)
            (default: :obj:`(3, 6, 12)`)
        mean (torch.Tensor, optional): fixed :math:`\mu` :math:`(N,)`
            instead of the training statistics (used by :meth:`subset`).
        std (torch.Tensor, optional): fixed :math:`\sigma` :math:`(N,)`.
        info (dict, optional): free-form facts; ``info["synthetic"]`` says
            whether the speeds are synthetic (default: :obj:`False`).

    Shapes:
        - **batch input:** :math:`(S, B, T_{in}, 2)`.
        - **batch target:** :math:`(S, B, 4, T_{out})` (target mph, weight,
          :math:`\mu`, :math:`\sigma`).
    """

    def __init__(self, name: str, speed: Tensor | np.ndarray, timestamps: np.ndarray, *,
                 sensor_ids: Sequence[str] | None = None,
                 edge_index: Tensor | None = None, edge_weight: Tensor | None = None,
                 input_steps: int = 12, output_steps: int = 12,
                 fractions: Sequence[float] = (0.7, 0.1, 0.2),
                 normalization: Normalization = "global",
                 horizons: Sequence[int] = (3, 6, 12),
                 mean: Tensor | None = None, std: Tensor | None = None,
                 info: dict | None = None) -> None:
        if normalization not in ("global", "sensor"):
            raise ValueError(f"normalization must be 'global' or 'sensor', got "
                             f"{normalization!r}")
        if input_steps < 1 or output_steps < 1:
            raise ValueError(f"input_steps and output_steps must be positive, got "
                             f"{input_steps} and {output_steps}")
        v = torch.as_tensor(np.asarray(speed), dtype=torch.float32).clone()
        if v.dim() != 2:
            raise ValueError(f"speed must be a (T, N) series, got shape {tuple(v.shape)}")
        # Row-major storage: the windows below are strided views that assume it
        # (pandas hands out column-major arrays).
        v = torch.nan_to_num(v, nan=0.0).contiguous()
        if bool((v < 0).any()) or not bool(torch.isfinite(v).all()):
            raise ValueError("speeds must be finite and non-negative (0 marks a missing reading)")
        num_steps, n = v.shape
        ts = np.asarray(timestamps).astype("datetime64[ns]")
        if ts.shape != (num_steps,):
            raise ValueError(f"{ts.shape[0] if ts.ndim else 0} timestamps for {num_steps} "
                             f"time steps")
        step = np.diff(ts)
        if step.size and not bool((step > np.timedelta64(0, "ns")).all()):
            raise ValueError("timestamps must be strictly increasing")
        if step.size and not bool((step == step[0]).all()):
            log.warning("%s: time steps are not evenly spaced; windows assume a regular series",
                        name)
        ids = [str(i) for i in range(n)] if sensor_ids is None else [str(s) for s in sensor_ids]
        if len(ids) != n:
            raise ValueError(f"{len(ids)} sensor ids for {n} speed columns")

        num_windows = num_steps - input_steps - output_steps + 1
        sizes = dcrnn_split_sizes(max(num_windows, 0), fractions)
        if min(sizes) < 1:
            raise ValueError(f"{num_steps} time steps give {max(num_windows, 0)} windows of "
                             f"{input_steps} + {output_steps} steps, split {sizes}: every "
                             f"split needs at least one window; use a longer series")
        starts = (0, sizes[0], sizes[0] + sizes[1])
        self.speed = v
        self.timestamps = ts
        self.time_of_day = torch.as_tensor(
            (ts - ts.astype("datetime64[D]")) / np.timedelta64(1, "D"), dtype=torch.float32)
        self.sensor_ids = ids
        self.input_steps = input_steps
        self.output_steps = output_steps
        self.fractions = tuple(float(f) for f in fractions)
        self.normalization = normalization
        self.horizons = tuple(h for h in horizons if h <= output_steps)
        self.split_windows = {s: (starts[k], sizes[k])
                              for k, s in enumerate(("train", "val", "test"))}

        valid = v > 0
        span = slice(0, sizes[0] + input_steps - 1)  # inputs of the training windows
        if mean is None or std is None:
            mean, std = self._statistics(v[span], valid[span], normalization)
        self.mean = torch.as_tensor(mean, dtype=torch.float32).reshape(n).clone()
        self.std = torch.as_tensor(std, dtype=torch.float32).reshape(n).clone()
        if not bool((self.std > 0).all()):
            raise ValueError("normalization std must be positive for every sensor")

        # (T, N, 2) features; windows are strided views into it.
        self.features = torch.stack([(v - self.mean) / self.std,
                                     self.time_of_day.unsqueeze(1).expand(num_steps, n)],
                                    dim=-1).contiguous()
        # Share of valid targets per split, sensor and horizon, from cumulative counts.
        cum = torch.cat([torch.zeros(1, n), valid.to(torch.float64).cumsum(0)])
        self.valid_fraction = {}
        for s, (start, count) in self.split_windows.items():
            first = start + input_steps + torch.arange(output_steps)  # target time, window 0
            hits = cum[first + count] - cum[first]                   # (T_out, N)
            self.valid_fraction[s] = (hits / count).t().to(torch.float32).contiguous()
        merged = {"synthetic": False, **(info or {})}
        super().__init__(name=name, task="regression", splits=self._window_splits(),
                         edge_index=edge_index, edge_weight=edge_weight, info=merged)

    def _window_splits(self) -> dict[str, ClientSplit]:
        r"""Each split's windows as strided views of :attr:`features` and
        :attr:`speed` (no copy)."""
        n, t_in, t_out = self.speed.size(1), self.input_steps, self.output_steps
        splits = {}
        for s, (start, count) in self.split_windows.items():
            x = self.features.as_strided((n, count, t_in, 2), (2, 2 * n, 2 * n, 1),
                                         start * 2 * n)
            y = self.speed.as_strided((n, count, t_out), (1, n, n), (start + t_in) * n)
            splits[s] = ClientSplit(x, y, torch.full((n,), count, dtype=torch.long))
        return splits

    def to(self, device: torch.device | str) -> TrafficDataset:
        r"""A copy whose series live on ``device``: the speed and feature
        series move once (:math:`T 	imes N` values, not the overlapping
        windows, which stay views of them), with the normalization and the
        valid-target shares that :meth:`batch` reads."""
        device = torch.device(device)
        if self.device == device or (device.index is None and self.device.type == device.type):
            return self
        out = copy.copy(self)
        out.speed = self.speed.to(device)
        out.features = self.features.to(device)
        out.mean, out.std = self.mean.to(device), self.std.to(device)
        out.valid_fraction = {k: v.to(device) for k, v in self.valid_fraction.items()}
        out.splits = out._window_splits()
        return out

    @staticmethod
    def _statistics(v: Tensor, valid: Tensor, normalization: str) -> tuple[Tensor, Tensor]:
        n = v.size(1)
        count = valid.sum().clamp(min=1)
        g_mean = (v * valid).sum() / count
        g_std = (((v - g_mean) * valid).pow(2).sum() / count).sqrt()
        if not float(g_std) > 0:
            g_std = torch.tensor(1.0)
        if normalization == "global":
            return g_mean.expand(n), g_std.expand(n)
        c = valid.sum(0)
        mean = (v * valid).sum(0) / c.clamp(min=1)
        std = (((v - mean) * valid).pow(2).sum(0) / c.clamp(min=1)).sqrt()
        # A sensor without training readings takes the global mean, one whose
        # readings do not vary (fewer than two, or constant) the global std.
        return (torch.where(c > 0, mean, g_mean),
                torch.where((c > 1) & (std > 1e-6), std, g_std))

    # ------------------------------------------------------------ construction
    @classmethod
    def from_table(cls, table: SpeedTable, name: str = "traffic", *,
                   adj: np.ndarray | Tensor | None = None,
                   sensor_ids: Sequence[str] | None = None, **kwargs: Any) -> TrafficDataset:
        r"""A dataset from a :class:`SpeedTable` (:func:`read_speed_h5`,
        :func:`synthetic_traffic`); columns are put in ``sensor_ids`` order,
        ``adj`` (:math:`(N, N)`, same order) becomes the prior graph (see
        :func:`adjacency_to_edges`). A synthetic table (``table.info``) marks
        the dataset synthetic. Further keyword arguments go to
        :class:`TrafficDataset`."""
        if sensor_ids is not None:
            table = table.select(sensor_ids)
        ids = table.sensor_ids
        if adj is not None:
            if tuple(np.shape(adj)) != (len(ids), len(ids)):
                raise ValueError(f"adjacency of shape {tuple(np.shape(adj))} for {len(ids)} "
                                 f"sensors")
            kwargs["edge_index"], kwargs["edge_weight"] = adjacency_to_edges(adj)
        info = dict(kwargs.pop("info", None) or {})
        if table.info.get("synthetic"):
            info.setdefault("synthetic", True)
            info.setdefault("source", table.info.get("source", "synthetic speeds"))
        return cls._plain(name, table.speed, table.timestamps, sensor_ids=ids, info=info,
                          **kwargs)

    @classmethod
    def from_dataframe(cls, df: pandas.DataFrame, name: str = "traffic", *,
                       adj: np.ndarray | Tensor | None = None,
                       sensor_ids: Sequence[str] | None = None, **kwargs: Any
                       ) -> TrafficDataset:
        r"""A dataset from a DCRNN-format DataFrame (DatetimeIndex, one column
        per sensor, mph, 0 = missing), as :meth:`from_table` (needs pandas;
        ``df.attrs["synthetic"]`` marks the dataset synthetic)."""
        return cls.from_table(SpeedTable.from_dataframe(df), name, adj=adj,
                              sensor_ids=sensor_ids, **kwargs)

    @classmethod
    def _plain(cls, *args: Any, **kwargs: Any) -> TrafficDataset:
        # Subclasses (METRLA, PEMSBAY) have file-reading constructors.
        obj = TrafficDataset.__new__(TrafficDataset)
        TrafficDataset.__init__(obj, *args, **kwargs)
        return obj

    # ------------------------------------------------------------ data access
    @property
    def objective(self) -> Objective:
        r"""The masked traffic objective matching :meth:`batch`'s targets."""
        return traffic_objective(horizons=self.horizons)

    def batch(self, split: str, index: Tensor, clients: Tensor | None = None
              ) -> tuple[Tensor, Tensor]:
        r"""Windows ``index[s, b]`` (0-based within ``split``) of sensors
        ``clients[s]``: inputs :math:`(S, B, T_{in}, 2)` and packed targets
        :math:`(S, B, 4, T_{out})`. The weight row is
        :math:`m / p_h`, :math:`m` the valid-target mask and :math:`p_h` the
        sensor's share of valid targets at that horizon in ``split`` (NaN
        when it has none)."""
        x, target = self.splits[split].gather(index, clients)
        rows = (torch.arange(self.num_clients, device=x.device) if clients is None
                else clients.to(device=x.device, dtype=torch.long))
        share = self.valid_fraction[split][rows].unsqueeze(1)            # (S, 1, T_out)
        weight = (target > 0).to(target.dtype) / share                   # 0 / 0 = NaN
        mean = self.mean[rows].view(-1, 1, 1)
        std = self.std[rows].view(-1, 1, 1)
        return x, pack_targets(target, weight, mean, std)

    def subset(self, clients: Tensor) -> TrafficDataset:
        r"""The sensors ``clients`` only (prior graph restricted and
        relabelled, normalization statistics kept)."""
        from torch_geometric.utils import subgraph
        clients = torch.as_tensor(clients, dtype=torch.long)
        ei, ew = self.edge_index, self.edge_weight
        if ei is not None:
            ei, ew = subgraph(clients, ei, ew, relabel_nodes=True, num_nodes=self.num_clients)
        return TrafficDataset._plain(
            self.name, self.speed[:, clients], self.timestamps,
            sensor_ids=[self.sensor_ids[i] for i in clients.tolist()], edge_index=ei,
            edge_weight=ew, input_steps=self.input_steps, output_steps=self.output_steps,
            fractions=self.fractions, normalization=self.normalization,
            horizons=self.horizons, mean=self.mean[clients], std=self.std[clients],
            info=dict(self.info))

    def __repr__(self) -> str:
        kind = "synthetic speeds" if self.info.get("synthetic") else "recorded speeds"
        sizes = "/".join(str(c) for _, c in self.split_windows.values())
        return (f"{type(self).__name__}({self.name}, sensors={self.num_clients}, "
                f"steps={self.speed.size(0)}, windows={sizes}, {kind})")
