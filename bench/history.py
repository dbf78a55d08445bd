"""``bench/history.jsonl``: every figure ``make bench`` measured, one JSON object a line, oldest first.

Each run appends its lines and never rewrites earlier ones, so the file is the benchmarks' history, to
plot one ``metric`` (with its ``events``) over ``date`` or ``commit``. A line holds ``date``,
``commit`` (null outside git), ``suite``, ``metric``, ``value``, ``unit``, ``baseline``, ``ratio``,
``target``, ``events``, ``runs`` and ``note``; lines from before the file existed (taken from the
README's dated sections) have the same fields, null where a figure was not given.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

HISTORY = Path(__file__).with_name("history.jsonl")
FIELDS = ("date", "commit", "suite", "metric", "value", "unit", "baseline", "ratio", "target", "events", "runs", "note")


def records(
    figures: dict[str, list[dict]], *, date: str, commit: str | None, events: int, runs: int, note: str = ""
) -> list[dict]:
    """One line per figure, each under the suite that measured it.

    Args:
        figures: each suite's rows of the summary table (``bench.run.headline`` of that suite alone).
        date: the day the run finished, ``YYYY-MM-DD`` in UTC.
        commit: the commit measured, or None outside git.
        events: the data set's size (``BENCH_EVENTS``).
        runs: runs per figure (``BENCH_RUNS``); each value is their median.
        note: what else a reader needs to compare the line (the machine, say).
    """
    return [
        {
            "date": date,
            "commit": commit,
            "suite": suite,
            "metric": row["figure"],
            "value": row["value"],
            "unit": row["unit"],
            "baseline": row["baseline"],
            "ratio": row["ratio"],
            "target": row["target"] or None,
            "events": events,
            "runs": runs,
            "note": note,
        }
        for suite, rows in figures.items()
        for row in rows
    ]


def append(path: Path, lines: list[dict]) -> None:
    """Add ``lines`` at the end of ``path``, one JSON object each. What the file holds is never read
    back or rewritten; a last line left without its newline (a hand edit) gets one first."""
    if not lines:
        return
    with path.open("ab") as out:
        if out.tell() and not _ends_with_newline(path):
            out.write(b"\n")
        out.write("".join(json.dumps(line, default=str) + "\n" for line in lines).encode())


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as existing:
        existing.seek(-1, 2)
        return existing.read(1) == b"\n"


def current_commit(where: Path = HISTORY.parent) -> str | None:
    """The commit checked out at ``where`` (``git rev-parse HEAD``), or None outside git."""
    try:
        found = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() or None
