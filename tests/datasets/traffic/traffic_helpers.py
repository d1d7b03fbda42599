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
