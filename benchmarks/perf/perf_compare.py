"""The side-by-side table of ``perf_alternate.sh``'s output: seconds per round of each FL-60
strategy in the two trees, as the ratio of the minima over the repetitions and as the median of
the per-alternation ratios (the two runs of one alternation see nearly the same machine load),
with their geometric means.

With ``--steady`` or ``--operators`` output (``OUT_DIR/steady.txt``, lines ``tree name
seconds`` from ``steady_rounds.py`` or ``operator_speed.py``) the same two readings for warm
rounds or operator calls.

Usage::

    python benchmarks/perf/perf_compare.py OUT_DIR            # OUT_DIR of perf_alternate.sh
"""
from __future__ import annotations

import math
import re
import statistics
import sys
from pathlib import Path

ROW = re.compile(r"^\| fl60 \| (?P<name>[\w-]+) \| \d+ \| (?P<sec>[0-9.eE+-]+) \|")


def read(path: Path) -> dict[str, float]:
    r"""``{strategy: seconds per round}`` of one ``perf.py --quick`` report."""
    out = {}
    for line in path.read_text().splitlines():
        m = ROW.match(line)
        if m:
            out[m["name"]] = float(m["sec"])
    return out


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _table(pairs: list[tuple[dict[str, float], dict[str, float]]], label: str) -> list[str]:
    names = sorted(set.intersection(*(set(o) & set(t) for o, t in pairs)))
    lines = [f"{len(pairs)} alternations.", "",
             "| case | before min s | now min s | now / before (min) "
             "| now / before (median of paired runs) |", "|---|---:|---:|---:|---:|"]
    by_min, by_pair = [], []
    for name in names:
        lo_o = min(o[name] for o, _ in pairs)
        lo_t = min(t[name] for _, t in pairs)
        paired = statistics.median(t[name] / o[name] for o, t in pairs)
        by_min.append(lo_t / lo_o)
        by_pair.append(paired)
        lines.append(f"| {label}{name} | {lo_o:.4f} | {lo_t:.4f} | {lo_t / lo_o:.2f} "
                     f"| {paired:.2f} |")
    lines += ["", f"Geometric mean of now / before over {len(names)} rows: "
              f"**{geomean(by_min):.3f}** for the minima, **{geomean(by_pair):.3f}** for the "
              "paired medians."]
    return lines


def read_steady(path: Path) -> list[tuple[dict[str, float], dict[str, float]]]:
    r"""The alternations of a ``steady.txt``: each tree's block of ``name seconds``
    lines, paired in order (``other`` first)."""
    blocks: list[tuple[str, dict[str, float]]] = []
    for line in path.read_text().splitlines():
        tree, name, sec = line.split()
        if not blocks or blocks[-1][0] != tree:
            blocks.append((tree, {}))
        blocks[-1][1][name] = float(sec)
    others = [b for t, b in blocks if t == "other"]
    these = [b for t, b in blocks if t == "this"]
    return list(zip(others, these, strict=False))


def compare(out_dir: Path) -> list[str]:
    r"""Markdown table of ``this`` against ``other`` over the repetitions in ``out_dir``."""
    reps = sorted({int(p.name.split(".")[1]) for p in out_dir.glob("this.*.md")})
    pairs = [(read(out_dir / f"other.{i}.md"), read(out_dir / f"this.{i}.md")) for i in reps
             if (out_dir / f"other.{i}.md").exists()]
    if not pairs:
        raise SystemExit(f"no pairs of other.N.md / this.N.md in {out_dir}")
    return _table(pairs, "fl60 ")


def compare_steady(out_dir: Path) -> list[str]:
    r"""Markdown table of warm rounds or operator calls (``perf_alternate.sh ... --steady``
    or ``--operators``)."""
    pairs = read_steady(out_dir / "steady.txt")
    if not pairs:
        raise SystemExit(f"no alternations in {out_dir / 'steady.txt'}")
    return _table(pairs, "")


if __name__ == "__main__":
    out = Path(sys.argv[1])
    print("\n".join(compare_steady(out) if (out / "steady.txt").exists() else compare(out)))
