r"""Synthetic traffic, clearly labelled as such: speeds on a real road graph
(:func:`synthetic_traffic`), and forecasting windows of METR-LA's shape for
timing training (:func:`synthetic_windows`)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pyg_fedgraph.data.federated_dataset import ClientSplit, FederatedDataset
from pyg_fedgraph.datasets.traffic.io import SpeedTable, bundled_sensor_graph

__all__ = ["synthetic_traffic", "synthetic_windows"]

#: 5-minute steps in a day.
_STEPS_PER_DAY = 288


def _dense_adjacency(graph: Any) -> np.ndarray:
    if hasattr(graph, "edge_index"):
        n = int(graph.num_nodes)
        adj = np.zeros((n, n), dtype=np.float64)
        ei = graph.edge_index.cpu().numpy()
        w = getattr(graph, "edge_weight", None)
        adj[ei[0], ei[1]] = 1.0 if w is None else w.detach().cpu().numpy()
    else:
        adj = np.asarray(graph.detach().cpu() if isinstance(graph, Tensor) else graph,
                         dtype=np.float64)
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise ValueError(f"the road graph must be an (N, N) adjacency or an object with "
                         f"edge_index / num_nodes, got shape {adj.shape}")
    if (adj < 0).any():
        raise ValueError("road-graph weights must be non-negative")
    adj = adj.copy()
    np.fill_diagonal(adj, 0.0)
    return adj


def synthetic_traffic(graph: Any, num_steps: int = 4032, seed: int = 0, *,
                      sensor_ids: Sequence[str] | None = None, start: str = "2012-03-01",
                      missing_rate: float = 0.05, noise: float = 1.5,
                      incident_rate: float = 1.0 / 864) -> SpeedTable:
    r"""Synthetic 5-minute speeds (mph) on a road graph, in DCRNN's format.
    **The speeds are synthetic**: the returned table says so in
    ``table.info["synthetic"]``, and datasets built from it carry
    ``info["synthetic"] = True``.

    Sensor :math:`i` has a free-flow speed :math:`v_i`, a morning and an
    evening rush hour (amplitudes :math:`a_i, b_i`, peak hours, widths) and a
    weekend factor :math:`\omega_i`; these attributes are random fields
    smoothed over the graph, so neighbouring sensors behave alike. Its
    congestion level is

    .. math::
        c_{ti} = \min\Big(0.85,\;
        \rho_{d(t),i}\, \kappa_{ti} \big(a_i\, g_{am}(t) + b_i\, g_{pm}(t)\big)
        + s_{ti}\Big),
        \quad \kappa_{ti} = \omega_i \text{ on weekends, else } 1,

    with Gaussian daily bumps :math:`g`, a day-to-day intensity
    :math:`\rho_{d,i}` (also smooth over the graph) and incident shocks that
    spread upstream along the road graph and decay,

    .. math::
        \mathbf{s}_{t+1} = 0.97\,\big(0.7\,\mathbf{s}_t + 0.3\,
        \mathbf{P}\mathbf{s}_t\big) + \boldsymbol{\epsilon}_{t+1},
        \quad P_{ij} = \frac{A_{ij}}{\sum_k A_{ik}},

    (a jam at :math:`j` reaches the sensors :math:`i` with a road
    :math:`i \to j`; incidents start at rate ``incident_rate`` per sensor
    and step with size :math:`U(0.3, 0.6)`). The speed is
    :math:`v_i (1 - c_{ti})` plus AR(1) noise (coefficient 0.7, standard
    deviation ``noise``), clipped to :math:`[3, 80]`. Missing readings
    (zeros) are isolated drop-outs and outage blocks (mean 3 hours),
    about ``missing_rate`` of the readings in all.

    Args:
        graph (str, array, torch.Tensor, SensorGraph or Data): road graph:
            ``"metr-la"`` or ``"pems-bay"`` for the graph bundled with
            pyg_fedgraph (:func:`~.io.bundled_sensor_graph`), a dense
            :math:`(N, N)` adjacency (``adj[i, j]`` for the road
            :math:`i \to j`, as in DCRNN's ``adj_mx``) or an object with
            ``edge_index``, ``num_nodes`` and optional ``edge_weight`` (and
            ``sensor_ids``, used as default column names).
        num_steps (int, optional): time steps :math:`T` (default: :obj:`4032`,
            two weeks)
        seed (int, optional): seed of every random draw (default: :obj:`0`)
        sensor_ids (list of str, optional): column names (default: the
            graph's sensor ids, else ``"0" .. "N-1"``).
        start (str, optional): first time stamp (default: :obj:`"2012-03-01"`)
        missing_rate (float, optional): target share of missing readings
            (default: :obj:`0.05`)
        noise (float, optional): noise standard deviation in mph
            (default: :obj:`1.5`)
        incident_rate (float, optional): incidents per sensor and step
            (default: one per sensor every 3 days)

    Returns:
        A :class:`SpeedTable`: :math:`(T,)` time stamps 5 minutes apart,
        float32 speeds :math:`(T, N)`, the sensor ids and
        ``info = {"synthetic": True, "source": ..., "seed": seed}``
        (:meth:`SpeedTable.to_dataframe` gives DCRNN's DataFrame).
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be positive, got {num_steps}")
    if not 0.0 <= missing_rate < 1.0:
        raise ValueError(f"missing_rate must be in [0, 1), got {missing_rate}")
    if isinstance(graph, str):
        graph = bundled_sensor_graph(graph)
    if sensor_ids is None:
        sensor_ids = getattr(graph, "sensor_ids", None)
    adj = _dense_adjacency(graph)
    n = adj.shape[0]
    ids = [str(i) for i in range(n)] if sensor_ids is None else [str(s) for s in sensor_ids]
    if len(ids) != n:
        raise ValueError(f"{len(ids)} sensor ids for a graph of {n} sensors")
    rng = np.random.default_rng(seed)

    # Symmetric random-walk smoother: sensor attributes vary smoothly along roads.
    sym = adj + adj.T + np.eye(n)
    smoother = sym / sym.sum(1, keepdims=True)

    def field(size: tuple[int, ...] = ()) -> np.ndarray:
        z = rng.standard_normal(size + (n,))
        for _ in range(8):
            z = z @ smoother.T
        z = z - z.mean(-1, keepdims=True)
        return z / np.maximum(z.std(-1, keepdims=True), 1e-12)

    free = np.clip(63.0 + 4.0 * field(), 50.0, 72.0)
    am_amp = np.clip(0.30 + 0.15 * field(), 0.0, 0.7)
    pm_amp = np.clip(0.35 + 0.15 * field(), 0.0, 0.7)
    am_peak, pm_peak = 7.75 + 0.5 * field(), 17.5 + 0.6 * field()
    am_width = np.clip(1.0 + 0.2 * field(), 0.5, None)
    pm_width = np.clip(1.5 + 0.3 * field(), 0.7, None)
    weekend = np.clip(0.25 + 0.1 * field(), 0.0, 0.6)

    ts = np.datetime64(start, "ns") + np.arange(num_steps) * np.timedelta64(5, "m")
    day = ts.astype("datetime64[D]")
    hour = (ts - day) / np.timedelta64(1, "h")
    day_number = (day - day[0]).astype(np.int64)
    is_weekend = (day.astype(np.int64) + 3) % 7 >= 5          # 1970-01-01 was a Thursday
    intensity = np.clip(1.0 + 0.15 * field((int(day_number[-1]) + 1,)), 0.5, 1.5)

    def bump(peak: np.ndarray, width: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * ((hour[:, None] - peak[None]) / width[None]) ** 2)

    congestion = am_amp * bump(am_peak, am_width) + pm_amp * bump(pm_peak, pm_width)
    congestion *= np.where(is_weekend[:, None], weekend[None], 1.0) * intensity[day_number]

    out_degree = adj.sum(1, keepdims=True)
    upstream = np.divide(adj, out_degree, out=np.zeros_like(adj), where=out_degree > 0)
    starts = rng.random((num_steps, n)) < incident_rate
    sizes = rng.uniform(0.3, 0.6, (num_steps, n)) * starts
    white = rng.standard_normal((num_steps, n)) * noise * np.sqrt(1.0 - 0.7 ** 2)
    shock, ar = np.zeros(n), rng.standard_normal(n) * noise
    shocks, ars = np.empty((num_steps, n)), np.empty((num_steps, n))
    for t in range(num_steps):  # a recursion in time: each step needs the previous one
        shock = 0.97 * (0.7 * shock + 0.3 * (upstream @ shock)) + sizes[t]
        ar = 0.7 * ar + white[t]
        shocks[t], ars[t] = shock, ar
    level = np.minimum(congestion + shocks, 0.85)
    speed = np.clip(free[None] * (1.0 - level) + ars, 3.0, 80.0)

    missing = rng.random((num_steps, n)) < 0.3 * missing_rate
    mean_len = 36
    for i in range(n):  # a handful of outage blocks per sensor
        for _ in range(rng.poisson(0.7 * missing_rate * num_steps / mean_len)):
            s = int(rng.integers(0, num_steps))
            missing[s:s + int(rng.geometric(1.0 / mean_len)), i] = True
    speed[missing] = 0.0

    return SpeedTable(ts, speed, ids, {
        "synthetic": True, "seed": seed,
        "source": "pyg_fedgraph.datasets.traffic.synthetic_traffic (synthetic speeds on a "
                  "road graph)"})


def synthetic_windows(num_clients: int, windows: int, *, steps_in: int = 12,
                      steps_out: int = 12, eval_windows: int = 16,
                      seed: int = 0) -> FederatedDataset:
    r"""Forecasting windows of the shape of METR-LA's, without a road graph
    or recorded speeds: for timing local training of forecasters (the
    benchmarks' GRU clients), not for judging a forecast. **The data are
    synthetic** (``info["synthetic"] = True``).

    Client :math:`i` sees a noisy daily wave with its own level
    :math:`\ell_i \sim U(0, 1)` and phase :math:`\phi_i \sim U(0, 2\pi)`,

    .. math::
        v_{ti} = \ell_i + \tfrac{1}{2} \sin(2 \pi t / 288 + \phi_i)
        + 0.05\, \epsilon_{ti}, \quad \epsilon_{ti} \sim \mathcal{N}(0, 1),

    in 5-minute steps (288 a day). A window starts at a uniform time of day;
    its input is :math:`(v_t, \text{time of day})` over ``steps_in`` steps and
    its target the next ``steps_out`` values of :math:`v`.

    Args:
        num_clients (int): clients :math:`N`.
        windows (int): training windows per client.
        steps_in (int, optional): input steps (default: :obj:`12`)
        steps_out (int, optional): predicted steps (default: :obj:`12`)
        eval_windows (int, optional): validation and test windows per client
            (default: :obj:`16`)
        seed (int, optional): seed of every draw (default: :obj:`0`)

    Shapes:
        - **train inputs:** :math:`(N, \text{windows}, \text{steps\_in}, 2)`
        - **train targets:** :math:`(N, \text{windows}, \text{steps\_out})`
    """
    if min(num_clients, windows, steps_in, steps_out, eval_windows) < 1:
        raise ValueError(f"synthetic_windows needs positive sizes, got num_clients="
                         f"{num_clients}, windows={windows}, steps_in={steps_in}, "
                         f"steps_out={steps_out}, eval_windows={eval_windows}")
    gen = torch.Generator().manual_seed(seed)
    total = steps_in + steps_out
    splits = {}
    for split, count in (("train", windows), ("val", eval_windows), ("test", eval_windows)):
        start = torch.rand(num_clients, count, 1, generator=gen) * _STEPS_PER_DAY
        t = start + torch.arange(total).view(1, 1, total)
        phase = torch.rand(num_clients, 1, 1, generator=gen) * 2 * math.pi
        level = torch.rand(num_clients, 1, 1, generator=gen)
        speed = level + 0.5 * torch.sin(2 * math.pi * t / _STEPS_PER_DAY + phase)
        speed = speed + 0.05 * torch.randn(speed.shape, generator=gen)
        day = (t % _STEPS_PER_DAY) / _STEPS_PER_DAY
        x = torch.stack([speed[..., :steps_in], day[..., :steps_in]], dim=-1)
        splits[split] = ClientSplit(x, speed[..., steps_in:],
                                    torch.full((num_clients,), count, dtype=torch.long))
    return FederatedDataset("synthetic-windows", "regression", splits,
                            info={"synthetic": True, "seed": seed})
