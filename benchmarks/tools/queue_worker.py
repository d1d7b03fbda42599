"""A tiny job queue for the long reproduction runs (see README, "Reproducing the papers").

Each worker claims the next line of ``<queue>/jobs.txt`` (blank lines and ``#`` comments
skipped) that is not yet in ``<queue>/claimed.txt``, runs it with the shell in the
repository root, logs it into ``<queue>/<name>.log`` and goes on; with nothing left it checks
again every minute. ``touch <queue>/STOP`` stops the workers after their current job.
Claiming is serialized with a lock file, so several workers share one queue. The runs of
``claims.py`` record and checkpoint themselves: to continue after an interruption, delete
``claimed.txt`` and start the workers again (finished runs are read from their records at
once).

Usage: ``python benchmarks/tools/queue_worker.py NAME [--queue runs/queue] [--after PID]
[--background]`` (``--after``: wait for that process to end first; ``--background``: yield
the CPU to interactive work, see :func:`lower_priority`).
"""
from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def claim(queue: Path) -> str | None:
    r"""The next unclaimed job, recorded as claimed, or ``None``."""
    with open(queue / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        jobs = [line.strip() for line in (queue / "jobs.txt").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
        path = queue / "claimed.txt"
        claimed = set(path.read_text().splitlines()) if path.exists() else set()
        job = next((j for j in jobs if j not in claimed), None)
        if job is not None:
            with open(path, "a") as f:
                f.write(job + "\n")
        return job


def lower_priority() -> None:
    r"""Makes this worker and its runs yield the CPU to everything else: a
    session of its own (Linux puts each session in its own scheduling group,
    an *autogroup*, and ``nice`` only ranks processes inside one group), that
    group lowered to nice 19, and the process itself at nice 19.

    Done from inside the process on purpose: ``echo 19 > /proc/$!/autogroup``
    after ``setsid cmd &`` can miss, because ``setsid`` forks when it is
    started as a process-group leader and ``$!`` is then the parent, still in
    the caller's session, whose group is lowered instead."""
    if os.getsid(0) != os.getpid():
        try:
            os.setsid()
        except OSError:  # a process-group leader (an interactive shell's job) may not:
            if os.fork():  # go on in a child, which may
                os._exit(0)
            os.setsid()
    if os.getsid(0) == os.getpid():  # never lower the caller's own session
        try:
            Path("/proc/self/autogroup").write_text("19")
        except OSError:  # no autogroups (not Linux, or disabled): nice alone
            pass
    os.nice(19 - os.nice(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--queue", type=Path, default=ROOT / "runs" / "queue")
    parser.add_argument("--after", type=int, default=None)
    parser.add_argument("--background", action="store_true",
                        help="own session, scheduling group and nice 19 (see README)")
    args = parser.parse_args()
    if args.background:
        lower_priority()
    if args.after is not None:
        while Path(f"/proc/{args.after}").exists():
            time.sleep(30)
    while not (args.queue / "STOP").exists():
        job = claim(args.queue)
        if job is None:
            time.sleep(60)
            continue
        t0 = time.time()
        with open(args.queue / f"{args.name}.log", "a") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} {job}\n")
            log.flush()
            rc = subprocess.run(job, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                cwd=ROOT).returncode
            log.write(f"=== rc {rc} after {time.time() - t0:.0f} s\n")


if __name__ == "__main__":
    main()
