r"""Pieces of a results file made from run records: the machine a benchmark
ran on, which torch, device and CPU instruction set made a set of records,
a table of the runs behind a file, the clients' values pooled over runs, and
the measurement records of the speed benchmarks (one JSON line per results
file: :func:`read_record`, :func:`write_record`).

The benchmark scripts of the repository (``benchmarks/perf/``,
``benchmarks/reproduce/``) share these instead of importing one another;
they take records as :class:`~pyg_fedgraph.experiment.RecordCache` returns
them and return Markdown lines. Nothing here prints; files are written only
by the functions that say so, where they are told to.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from pyg_fedgraph.experiment.records import RecordCache

__all__ = ["READING", "keep_readings", "save_report", "save_with_readings", "read_record",
           "write_record", "write_measured", "measured_report", "benchmark_records",
           "RECORDS_NAME", "machine_lines", "made_with", "counted",
           "runs_table", "RUNS_HEADER", "RUNS_RULE",
           "client_accuracies", "pooled_clients"]


#: The heading of the hand-written part of a section of a results file.
READING = "### Reading"


def _sections(text: str) -> list[tuple[str, list[str]]]:
    r"""``text`` cut at its ``## `` headings: (heading, lines) pairs, the
    lines before the first heading under the heading ``""``."""
    blocks: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines():
        if line.startswith("## "):
            blocks.append((line, []))
        blocks[-1][1].append(line)
    return blocks


def _reading(lines: list[str]) -> list[str]:
    r"""The :data:`READING` block of a section's lines (up to the next
    heading of level 2 or 3), or ``[]``."""
    if READING not in lines:
        return []
    start = lines.index(READING)
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith(("## ", "### "))), len(lines))
    block = lines[start:end]
    while block and not block[-1].strip():
        block.pop()
    return block


def keep_readings(old: str, new: str) -> str:
    r"""``new`` (a results file as a script generated it, tables and figures)
    with the hand-written readings of ``old`` (the file as it stands) kept.

    A reading is the block under a ``### Reading`` heading (:data:`READING`)
    of a ``## `` section, up to the next heading of level 2 or 3: the
    judgment a person wrote about the generated tables, which no script
    rewrites. Each of ``old``'s readings replaces the reading of the section
    of ``new`` with the same heading (or is added at that section's end);
    a reading whose section ``new`` no longer has is kept at the end of the
    file under its heading, so that nothing written by hand is lost.

    Example:
        >>> old = "# R\n## A. x\n| 1 |\n### Reading\nGood.\n"
        >>> print(keep_readings(old, "# R\n## A. x\n| 2 |\n"), end="")
        # R
        ## A. x
        | 2 |
        <BLANKLINE>
        ### Reading
        Good.
    """
    readings = {h: _reading(lines) for h, lines in _sections(old)}
    readings = {h: r for h, r in readings.items() if r}
    out: list[str] = []
    for heading, lines in _sections(new):
        own = _reading(lines)
        hand = readings.pop(heading, own)
        if own:  # a generated placeholder: the hand-written reading in its place
            start = lines.index(READING)
            lines = [*lines[:start], *hand, *lines[start + len(own):]]
        elif hand:
            while lines and not lines[-1].strip():
                lines = lines[:-1]
            lines = [*lines, "", *hand, ""]
        out += lines
    for heading, hand in readings.items():
        out += ["", heading, "", *hand, ""] if heading else ["", *hand, ""]
    return "\n".join(out).rstrip("\n") + "\n"


def save_report(text: str, path: str | Path | None) -> Path | None:
    r"""Writes the results file ``path`` (its folder made where missing) with
    ``text``, through a temporary file so that an interrupted write never
    leaves half a file; returns the path (``None``, writing nothing, when
    ``path`` is ``None``)."""
    if path is None:
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def save_with_readings(text: str, path: str | Path | None) -> str:
    r"""Writes ``text`` (a results file as a script generated it) to ``path``
    with the hand-written readings of the file already there kept
    (:func:`keep_readings`, :func:`save_report`), and returns what it wrote;
    with ``path`` ``None`` it writes nothing and returns ``text``."""
    if path is None:
        return text
    path = Path(path)
    text = keep_readings(path.read_text() if path.exists() else "", text)
    save_report(text, path)
    return text


#: The JSON-lines file of measurement records beside a folder's results files.
RECORDS_NAME = "perf_records.jsonl"


def _record_lines(records: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not records.exists():
        return out
    for number, line in enumerate(records.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{records}, line {number}: not a JSON record ({err.msg})") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            raise ValueError(f"{records}, line {number}: a record is a JSON object with a "
                             f"'file' entry naming its results file")
        out[entry["file"]] = entry
    return out


def read_record(records: str | Path, name: str) -> dict[str, Any]:
    r"""The measurement record of the results file ``name`` (e.g.
    ``"devices.md"``) in the JSON-lines file ``records``: the line whose
    ``"file"`` entry is ``name``.

    A benchmark that keeps its measurements this way rebuilds its results
    file from the record without measuring again (its ``--report-only``).
    A missing record is one line naming both files.
    """
    records = Path(records)
    found = _record_lines(records).get(name)
    if found is None:
        raise ValueError(f"no record of {name} in {records}: run the benchmark that writes "
                         f"{name} (without --report-only) first")
    return found


def write_record(records: str | Path, record: Mapping[str, Any]) -> Path:
    r"""Writes ``record`` (a JSON-able mapping with a ``"file"`` entry naming
    its results file) as one line of the JSON-lines file ``records``,
    replacing the line of the same file and keeping the others, ordered by
    file name (through a temporary file, as :func:`save_report`)."""
    name = record.get("file")
    if not isinstance(name, str):
        raise ValueError("a record needs a 'file' entry naming its results file")
    records = Path(records)
    entries = _record_lines(records)
    entries[name] = dict(record)
    text = "".join(json.dumps(entries[k], separators=(",", ":")) + "\n" for k in sorted(entries))
    save_report(text, records)
    return records


def write_measured(out: str | Path | None, record: Mapping[str, Any], *, script: str,
                   **tags: Any) -> Path | None:
    r"""Writes ``record``, just measured by the benchmark ``script`` (its path
    in the repository, e.g. ``"benchmarks/perf/dispatch.py"``), as the record
    of the results file ``out`` in :data:`RECORDS_NAME` beside it
    (:func:`write_record`): ``{"file": out.name, "script": script, **tags,
    "source": "measured", **record}``. Returns the records file; with ``out``
    ``None`` (a run that only prints) it writes nothing and returns ``None``."""
    if out is None:
        return None
    out = Path(out)
    return write_record(out.parent / RECORDS_NAME,
                        {"file": out.name, "script": script, **tags, "source": "measured",
                         **record})


def measured_report(out: str | Path | None, report: Callable[[dict[str, Any]], str],
                    measure: Callable[[], dict[str, Any]] | None, *, script: str,
                    **tags: Any) -> str:
    r"""The results file ``out`` of a speed benchmark made from its
    measurement record, written with its hand-written readings kept; returns
    its text.

    With ``measure`` ``None`` (a script's ``--report-only``) the record is
    read from :data:`RECORDS_NAME` beside ``out`` (:func:`read_record`) and
    nothing is measured; otherwise ``measure()`` makes the record and
    :func:`write_measured` writes it (with ``script`` and ``tags``) when
    ``out`` is not ``None``. Either way ``report(record)`` is the file's
    generated text, saved through :func:`save_with_readings` (only returned
    when ``out`` is ``None``).

    Args:
        out (str or Path, optional): the results file, or ``None`` to write
            nothing (only with ``measure``).
        report (callable): the record to the file's Markdown.
        measure (callable, optional): measures and returns the record;
            ``None`` rebuilds from the stored one.
        script (str): the benchmark's path in the repository, stored in the
            record.
        **tags: further entries stored before ``"source"`` (e.g. a study's
            name).
    """
    if measure is None:
        if out is None:
            raise ValueError("a rebuild from the measurement record needs the results file "
                             "(out is None)")
        out = Path(out)
        record = read_record(out.parent / RECORDS_NAME, out.name)
    else:
        record = measure()
        write_measured(out, record, script=script, **tags)
    return save_with_readings(report(record), out)


def benchmark_records(checkout: str | Path, name: str = "claims", *,
                      checkpoint_seconds: float = 0.0) -> RecordCache:
    r"""The record cache of the reproduction benchmarks of the repository
    checkout ``checkout`` (the folder holding ``benchmarks/``): the records of
    finished runs in ``benchmarks/results/<name>_runs`` (tracked) and the
    checkpoints of runs in progress in ``runs/<name>_cache`` (untracked).

    ``"claims"`` (the default) is the cache of ``claims.py`` and of every
    script that reuses its runs; a study with runs of its own names its own
    (e.g. ``"graph_classification"``). ``checkpoint_seconds`` is the least
    time between two checkpoints of a run (:class:`RecordCache`; ``0.0``:
    every round; runs whose rounds take under a second spend a good share of
    their time writing a checkpoint every round).

    Example:
        >>> cache = benchmark_records("/src/repo")
        >>> cache.records.as_posix()
        '/src/repo/benchmarks/results/claims_runs'
        >>> cache.checkpoints.as_posix()
        '/src/repo/runs/claims_cache'
    """
    checkout = Path(checkout)
    return RecordCache(checkout / "benchmarks" / "results" / f"{name}_runs",
                       checkout / "runs" / f"{name}_cache",
                       checkpoint_seconds=checkpoint_seconds)


def machine_lines(load_start: float) -> list[str]:
    r"""Markdown bullet lines describing this machine: date, platform, CPUs
    and torch threads, versions, and the 1-minute load average at the start
    (``load_start``, e.g. ``os.getloadavg()[0]`` taken then) and now."""
    load = os.getloadavg()
    return [
        f"- date: {dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- platform: {platform.platform()} ({platform.machine()}, "
        f"{platform.processor() or 'n/a'})",
        f"- CPUs: {os.cpu_count()}; torch threads: {torch.get_num_threads()} "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})",
        f"- python {platform.python_version()}, torch {torch.__version__}",
        f"- 1-minute load average: {load_start:.1f} at the start, {load[0]:.1f} at the end "
        f"(5/15 min: {load[1]:.1f}, {load[2]:.1f})",
    ]


def counted(n: int, noun: str) -> str:
    r"""``n`` and the noun, plural (an added ``s``) unless ``n`` is 1:
    ``counted(1, "run") == "1 run"``, ``counted(3, "run") == "3 runs"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def made_with(entries: Iterable[Mapping[str, Any] | None]) -> str:
    r"""Which torch version(s), device(s) and, on the CPU, vector instruction
    set(s) made these records, e.g. ``"torch 2.13.0+cpu on cpu (AVX512)"``
    (with the count of each where they differ; ``"no records"`` without any)."""
    found: dict[str, int] = {}
    for e in entries:
        if e is not None:
            what = f"torch {e.get('torch', 'unrecorded')} on {e.get('device', 'unrecorded')}"
            if e.get("cpu_capability") and e.get("device") == "cpu":
                what += f" ({e['cpu_capability']})"
            found[what] = found.get(what, 0) + 1
    if len(found) <= 1:
        return next(iter(found), "no records")
    return ", ".join(f"{what} ({counted(n, 'run')})" for what, n in sorted(found.items()))


#: The header of :func:`runs_table`.
RUNS_HEADER = "| run | rounds | wall (s) | CPU (s) | load start / end | finished |"
#: The table's alignment row, below :data:`RUNS_HEADER`.
RUNS_RULE = "|---|---:|---:|---:|---|---|"


def runs_table(used: Mapping[str, Mapping[str, Any]]) -> list[str]:
    r"""Markdown table of the records ``used`` (by key, as
    :attr:`RecordCache.used <pyg_fedgraph.experiment.RecordCache.used>` holds
    them): what ran, wall and CPU time, load average at its start and end,
    date; ordered by key. A run names its seed when it is not 0."""
    rows = [RUNS_HEADER, RUNS_RULE]
    for _key, e in sorted(used.items()):
        c = e["config"]
        what = " ".join(str(v) for v in (c["dataset"], c["strategy"], c.get("partition") or "",
                                         f"N={c['clients']}" if c.get("clients") else "",
                                         f"attack={c['attack']}" if c.get("attack") else "",
                                         " ".join(f"{k}={v}" for k, v in c["overrides"].items()
                                                  if k in ("alpha_rule", "hn_rule", "evaluate")),
                                         f"seed={c['seed']}" if c.get("seed") else "")
                        if v)
        cpu = e.get("cpu_seconds")
        derived = " (inside the run " + e["derived_from"] + ")" if "derived_from" in e else ""
        derived += f" (study: {e['study']})" if "study" in e else ""
        rows.append(f"| {what}{derived} | {c['rounds']} | {e['seconds']:.0f} | "
                    f"{'-' if cpu is None else f'{cpu:.0f}'} | {e['load'][0]:.1f} / "
                    f"{e['load'][1]:.1f} | {e['date']} |")
    return rows


def client_accuracies(entry: Mapping[str, Any]) -> torch.Tensor:
    r"""The test value, in percent, of every client a run record's summary
    is over (its ``test_clients``, those not evaluated dropped).

    Shapes:
        - **output:** :math:`(N',)` float64, :math:`N'` the evaluated clients.
    """
    acc = torch.tensor(entry["test_clients"], dtype=torch.float64)
    return 100 * acc[~acc.isnan()]


def pooled_clients(entries: Iterable[Mapping[str, Any]]) -> tuple[float, float]:
    r"""Mean and population standard deviation, in points, of the clients of
    all run records ``entries`` taken together."""
    acc = torch.cat([client_accuracies(e) for e in entries])
    return float(acc.mean()), float(acc.std(unbiased=False))
