r"""Helpers of the traffic tests: files in DCRNN's formats, and checks that bad
files give one clear error line."""
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

from pyg_fedgraph.cli import main as cli_main

# ../shared/data next to the project root (one level further up from a git worktree).
SHARED = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[3].parents
               if (p / "shared" / "data").is_dir()), Path("../shared/data"))
METR_GRAPH = SHARED / "metr-la" / "adj_mx.pkl"
needs_real_graph = pytest.mark.skipif(not METR_GRAPH.exists(),
                                      reason="../shared/data/metr-la/adj_mx.pkl not present")


def write_graph(path, ids, adj, protocol=2):
    with open(path, "wb") as f:
        pickle.dump([list(ids), {s: i for i, s in enumerate(ids)},
                     np.asarray(adj, dtype=np.float32)], f, protocol=protocol)


def speed_frame(num_steps, ids, seed=0, start="2012-03-01"):
    r"""Speeds in the real format: DatetimeIndex at 5 min, string sensor columns,
    float64 mph, zeros for missing readings."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    values = rng.uniform(20.0, 70.0, (num_steps, len(ids)))
    values[rng.random(values.shape) < 0.1] = 0.0
    index = pd.date_range(start, periods=num_steps, freq="5min")
    return pd.DataFrame(values, index=index, columns=[str(s) for s in ids])


def chain_adjacency(n):
    adj = np.eye(n, dtype=np.float32)
    for i in range(n - 1):
        adj[i, i + 1] = 0.8   # road i -> i + 1
    return adj


def write_h5(df, path, **kwargs):
    pytest.importorskip("tables", reason="pandas writes HDF5 files with PyTables")
    with warnings.catch_warnings():  # PyTables warns when it pickles object columns
        warnings.simplefilter("ignore")
        df.to_hdf(path, key="df", **kwargs)
    return path


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def one_line_error(call):
    r"""The message of the ValueError ``call()`` raises, checked to be one line."""
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


def run_cli(root, out, capfd, setting="root", extra=()):
    r"""``pyg-fedgraph run --dataset metr-la --set data.<setting>=ROOT`` (and ``--set`` each
    of ``extra``), expected to fail with exit code 2 and one line on stderr (returned)."""
    sets = [a for e in extra for a in ("--set", e)]
    code = cli_main(["run", "--dataset", "metr-la", "--strategy", "fedavg", "--rounds", "1",
                     "--set", f"data.{setting}={root}", *sets, "--out", str(out), "--quiet"])
    captured = capfd.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1, captured.err
    assert lines[0].startswith("pyg-fedgraph: error: ") and "Traceback" not in captured.err
    assert not out.exists()
    return lines[0]


FRAGMENTS = SHARED / "traffic-fragments" / "dcrnn-pytorch-modified"
needs_fragments = pytest.mark.skipif(
    not (FRAGMENTS / "METR-LA" / "train.npz").exists(),
    reason="../shared/data/traffic-fragments/dcrnn-pytorch-modified not present")
def time_of_day(stamps):
    r"""DCRNN's time-of-day channel: (stamp - midnight) / one day."""
    stamps = np.asarray(stamps, dtype="datetime64[ns]")
    return (stamps - stamps.astype("datetime64[D]")) / np.timedelta64(1, "D")


def five_minute_stamps(num_steps, start="2012-03-01", skip=None):
    r"""5-minute stamps from ``start``; ``skip=(t, k)`` leaves out k steps after step t."""
    steps = np.arange(num_steps)
    if skip is not None:
        t, k = skip
        steps = np.where(steps > t, steps + k, steps)
    return np.datetime64(start, "ns") + steps * np.timedelta64(5, "m")


def write_dcrnn_npz(folder, speed, stamps, input_steps=6, output_steps=6, ids=None,
                    channels=("speed", "time")):
    r"""DCRNN's ``generate_training_data.py`` output for a (T, N) series: window t takes
    steps t + x_offsets and t + y_offsets for every t with both inside the series, the
    windows split 70 / 10 / 20 (test = round(0.2 W), train = round(0.7 W)), each file
    holding x, y (windows, steps, sensors, channels) and the offsets as (steps, 1)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    speed = np.asarray(speed, dtype=np.float64)
    parts = [speed[..., None]]
    if "time" in channels:
        parts.append(np.broadcast_to(time_of_day(stamps)[:, None, None], speed.shape + (1,)))
    data = np.concatenate(parts, axis=-1)
    x_offsets = np.arange(-(input_steps - 1), 1)
    y_offsets = np.arange(1, output_steps + 1)
    xs, ys = [], []
    for t in range(-x_offsets.min(), data.shape[0] - y_offsets.max()):
        xs.append(data[t + x_offsets])
        ys.append(data[t + y_offsets])
    x, y = np.stack(xs), np.stack(ys)
    total = x.shape[0]
    num_test, num_train = round(total * 0.2), round(total * 0.7)
    num_val = total - num_test - num_train
    bounds = {"train": (0, num_train), "val": (num_train, num_train + num_val),
              "test": (total - num_test, total)}
    for name, (a, b) in bounds.items():
        np.savez_compressed(folder / f"{name}.npz", x=x[a:b], y=y[a:b],
                            x_offsets=x_offsets.reshape(-1, 1), y_offsets=y_offsets.reshape(-1, 1))
    if ids is not None:
        (folder / "sensor_ids.txt").write_text(",".join(str(s) for s in ids))
    return {name: b - a for name, (a, b) in bounds.items()}


def random_speeds(num_steps, num_sensors, seed=0, missing=0.1):
    rng = np.random.default_rng(seed)
    values = np.round(rng.uniform(20.0, 70.0, (num_steps, num_sensors)), 2)
    values[rng.random(values.shape) < missing] = 0.0
    return values
