r"""``retain_freed_memory``: glibc's setting takes effect, calling it again
changes nothing, other C libraries are left alone, and the command line's
results do not depend on it. Every call that changes the allocator runs in a
subprocess: the setting is process-wide."""
from __future__ import annotations

import csv
import ctypes
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pyg_fedgraph.utils import KEEP_MEMORY_ENV, allocator, retain_freed_memory


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).gnu_get_libc_version  # noqa: B018 - the look-up is the check
    except (OSError, AttributeError):
        return False
    return sys.platform.startswith("linux")


needs_glibc = pytest.mark.skipif(not _glibc(), reason="glibc's mallopt only")

# Touches a 40 MB malloc block (over glibc's 32 MiB ceiling of its dynamic mmap
# threshold), frees it, and counts the page faults of doing so again.
_FAULTS = textwrap.dedent("""
    import ctypes, resource, sys
    from pyg_fedgraph.utils import retain_freed_memory
    if sys.argv[1] == "keep":
        print(retain_freed_memory(), retain_freed_memory())
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    n = 40_000_000
    def use():
        p = libc.malloc(n)
        ctypes.memset(p, 1, n)
        libc.free(p)
    use()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        use()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _run_faults(mode: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@needs_glibc
def test_freed_block_is_reused_without_page_faults():
    # Without the setting, each use maps 40 MB afresh: about 9,766 faults of 4 KiB
    # pages each time. With it, the freed block stays in the heap and is reused.
    pages = 40_000_000 // os.sysconf("SC_PAGE_SIZE")
    assert int(_run_faults("default")[-1]) >= 3 * pages * 0.9
    first, second, faults = _run_faults("keep")
    assert (first, second) == ("True", "True")  # accepted, and again when called twice
    assert int(faults) < 0.05 * 3 * pages


@pytest.mark.parametrize("value", [0, -1, 2 ** 31, 1.5, True, "1G"])
def test_bad_thresholds_are_refused(value):
    with pytest.raises(ValueError, match="mmap_threshold must be a number of bytes"):
        retain_freed_memory(mmap_threshold=value)
    with pytest.raises(ValueError, match="trim_threshold must be a number of bytes"):
        retain_freed_memory(trim_threshold=value)


def test_other_platforms_are_left_alone(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger=allocator.__name__)
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert retain_freed_memory() is False
    assert "not glibc (platform darwin)" in caplog.text


def test_a_c_library_without_glibc_symbols_is_left_alone(monkeypatch, caplog):
    # musl and others: no gnu_get_libc_version; mallopt is never called.
    class NoGlibc:
        def __init__(self, name: object) -> None:
            pass

        def __getattr__(self, name: str) -> object:
            raise AttributeError(f"undefined symbol: {name}")

    caplog.set_level(logging.DEBUG, logger=allocator.__name__)
    monkeypatch.setattr(allocator.sys, "platform", "linux")
    monkeypatch.setattr(allocator.ctypes, "CDLL", NoGlibc)
    assert retain_freed_memory() is False
    assert "undefined symbol: gnu_get_libc_version" in caplog.text


def _cli_run(out: Path, keep: str | None) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(KEEP_MEMORY_ENV, None)
    if keep is not None:
        env[KEEP_MEMORY_ENV] = keep
    done = subprocess.run(
        [sys.executable, "-m", "pyg_fedgraph.cli", "run", "--dataset", "planted-graphs",
         "--clients", "8", "--rounds", "2", "--strategy", "fedavg,pfedgraph", "--quiet",
         # The setting is about host memory; on CUDA, PyG's atomic scatter would move the
         # last bits from run to run whatever the setting.
         "--device", "cpu",
         "--log-level", "DEBUG", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    return done.stderr


def _table(path: Path) -> list[dict[str, str]]:
    with path.open() as f:  # every column but the round's seconds
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(f)]


@needs_glibc
def test_cli_results_do_not_depend_on_the_setting(tmp_path):
    kept = _cli_run(tmp_path / "kept", None)
    plain = _cli_run(tmp_path / "plain", "0")
    # The command line applies the setting by default, and not with the variable at 0.
    assert "retain_freed_memory: glibc" in kept and "keeps freed memory" in kept
    assert "retain_freed_memory" not in plain
    for name in ("fedavg", "pfedgraph"):
        for table in ("history.csv", "clients.csv"):
            a, b = _table(tmp_path / "kept" / name / table), _table(tmp_path / "plain" / name
                                                                     / table)
            assert a == b and len(a) >= 2, (name, table)
    with np.load(tmp_path / "kept" / "pfedgraph" / "collaboration.npz") as a, \
            np.load(tmp_path / "plain" / "pfedgraph" / "collaboration.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize(("value", "kept"), [(None, True), ("1", True), ("0", False),
                                             (" 0 ", False)])
def test_applications_keep_freed_memory_unless_the_variable_is_0(monkeypatch, value, kept):
    calls = []
    monkeypatch.setattr(allocator, "retain_freed_memory", lambda: calls.append(1) or True)
    if value is None:
        monkeypatch.delenv(KEEP_MEMORY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEEP_MEMORY_ENV, value)
    assert allocator.keep_freed_memory_at_start() is kept
    assert len(calls) == int(kept)
