r"""examples/metr_la_traffic.py: its data sources, and one-line errors instead of tracebacks."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from traffic_helpers import (
    FRAGMENTS,
    five_minute_stamps,
    needs_fragments,
    random_speeds,
    write_dcrnn_npz,
)

from pyg_fedgraph.datasets.traffic import bundled_sensor_graph

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "metr_la_traffic.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("metr_la_traffic", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args, block_h5py=False):
    r"""The example in a fresh interpreter (``block_h5py``: as on a plain install)."""
    code = ("import runpy, sys\n"
            + ("sys.modules['h5py'] = None\n" if block_h5py else "")
            + f"sys.argv = {[str(EXAMPLE), *args]!r}\n"
            + f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-W", "ignore::FutureWarning", "-c", code],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_without_h5py_the_h5_option_ends_with_the_install_hint(tmp_path):
    speed_file = tmp_path / "metr-la.h5"
    speed_file.write_bytes(b"\x89HDF\r\n\x1a\n")  # h5py is never reached for its content
    done = _run("--h5", str(speed_file), "--no-verify", "--quick", block_h5py=True)
    err = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(err) == 1, done.stderr[-2000:]
    assert err[0] == ("metr_la_traffic.py: error: this feature needs 'h5py': install it with "
                      "pip install 'pyg-fedgraph[traffic]'")


def test_a_speed_file_that_is_not_the_published_one_is_named_in_one_line(tmp_path):
    speed_file = tmp_path / "metr-la.h5"
    speed_file.write_bytes(b"\x00" * 100)
    done = _run("--h5", str(speed_file), "--quick")
    err = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(err) == 1, done.stderr[-2000:]
    assert f"{speed_file} has 100 bytes, the published metr-la.h5 57,038,056" in err[0]
    assert err[0].endswith("for a file of your own in DCRNN's format, pass --no-verify")


def test_the_npz_option_reads_dcrnns_windows(example, tmp_path):
    ids = bundled_sensor_graph("metr-la").sensor_ids[:3]
    speed = random_speeds(200, 3)
    write_dcrnn_npz(tmp_path / "METR-LA", speed, five_minute_stamps(200), ids=ids)
    args = example.build_parser().parse_args(["--npz", str(tmp_path), "--quick"])
    data = example.load_data(args, 300)
    assert data.sensor_ids == ids and data.info["synthetic"] is False
    assert np.array_equal(data.speed.numpy(), speed.astype(np.float32))
    both = example.build_parser().parse_args(["--npz", str(tmp_path), "--h5", "x.h5"])
    with pytest.raises(ValueError, match="--h5 or --npz, not both"):
        example.load_data(both, 300)


@needs_fragments
def test_the_npz_option_reads_the_shared_fragments(example):
    args = example.build_parser().parse_args(["--npz", str(FRAGMENTS / "METR-LA")])
    data = example.load_data(args, 300)
    assert data.num_clients == 20
    assert [c for _, c in data.split_windows.values()] == [23974, 3425, 6850]
