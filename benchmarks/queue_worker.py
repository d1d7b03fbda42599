"""A tiny job queue for the long reproduction runs (see README, "Reproducing the papers").

Each worker claims the next line of ``<queue>/jobs.txt`` (blank lines and ``#`` comments
skipped) that is not yet in ``<queue>/claimed.txt``, runs it with the shell in the
repository root, logs it into ``<queue>/<name>.log`` and goes on; with nothing left it checks
again every minute. ``touch <queue>/STOP`` stops the workers after their current job.
Claiming is serialized with a lock file, so several workers share one queue. The runs of
``claims.py`` cache and checkpoint themselves: to continue after an interruption, delete
``claimed.txt`` and start the workers again (finished runs are read from the cache at once).

Usage: ``python benchmarks/queue_worker.py NAME [--queue runs/queue] [--after PID]``
(``--after``: wait for that process to end first).
"""
from __future__ import annotations

import argparse
import fcntl
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--queue", type=Path, default=ROOT / "runs" / "queue")
    parser.add_argument("--after", type=int, default=None)
    args = parser.parse_args()
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
