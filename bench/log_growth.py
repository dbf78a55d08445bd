"""What a commit and a read cost as a table's ``_delta_log`` grows: one table on local storage,
grown by real commits (delta-rs appends of one row, as the ``ops`` tables and the speed layer's
panes are written), and measured at each size asked for.

On local storage both list the whole ``_delta_log`` folder, with a ``stat`` of every entry, to find
a table's latest commit: delta-rs through ``object_store``'s local file system when it opens a
table and again as it commits (about 5,800 ``statx`` calls an append at 1,700 entries), Spark
through Hadoop's ``listStatus`` at each snapshot update, which a job's query makes. So every commit
and every query costs more the more entries the log keeps, whatever the table's size: a commit
file per commit and a checkpoint every ten (``delta.checkpointInterval``), for
``delta.logRetentionDuration`` (Delta's default, 30 days). No baseline: the figure is the growth.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from bench.data import scratch_home, settings_for
from bench.measure import summary
from lakehouse.location import local_path
from lakehouse.storage.catalog import BATCH_COVERAGE, ensure_table
from lakehouse.storage.ops_tables import append_rows

ROW = {
    "pipeline": "log_growth",
    "range_start": datetime(2026, 1, 1, tzinfo=UTC),
    "range_end": datetime(2026, 1, 1, 1, tzinfo=UTC),
    "run_id": "bench",
    "source": "bronze",
    "written_at": datetime(2026, 1, 1, tzinfo=UTC),
    "input_fingerprint": "bench",
    "definition": "bench",
}


def _append_seconds(uri: str, settings, commits: int) -> list[float]:
    """Seconds of each of ``commits`` one-row appends."""
    seconds = []
    for _ in range(commits):
        began = time.perf_counter()
        append_rows(uri, BATCH_COVERAGE.arrow_schema, [ROW], settings)
        seconds.append(time.perf_counter() - began)
    return seconds


def _read_seconds(spark, uri: str, runs: int) -> list[float]:
    """Seconds of each of ``runs`` Spark queries of the table. Each lists the log first: with
    ``spark.databricks.delta.stalenessLimit`` 0 (a job's session) a query brings its snapshot up to
    the latest commit, and finds it by listing; none came since, so nothing else is read."""
    spark.read.format("delta").load(uri).limit(1).collect()  # the snapshot, built once and untimed
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        spark.read.format("delta").load(uri).limit(1).collect()
        seconds.append(time.perf_counter() - began)
    return seconds


def log_growth(spark, sizes: tuple[int, ...], runs: int) -> dict:
    """Per size (commits in the log), a one-row append through delta-rs and a Spark query of the
    table: their medians over ``runs`` (at least 10) and the log's entries.

    Args:
        spark: the bench's session, for the queries.
        sizes: the commits the table holds at each measurement, ascending.
        runs: timed appends and queries at each size.
    """
    home = scratch_home("log_growth")
    settings = settings_for(home)
    ensure_table(BATCH_COVERAGE, settings)
    uri = BATCH_COVERAGE.uri(settings)
    log = local_path(uri) / "_delta_log"
    measured: dict[str, dict] = {}
    runs = max(runs, 10)
    for size in sizes:
        grown = len(list(log.glob("*.json"))) - 1  # commit 0 created the table
        _append_seconds(uri, settings, max(0, size - grown))
        appends = _append_seconds(uri, settings, runs)
        reads = _read_seconds(spark, uri, runs)
        measured[str(size)] = {
            "log_entries": sum(1 for _ in log.iterdir()),
            "append_seconds": summary(appends),
            "read_seconds": summary(reads),
        }
    return {"sizes": measured, "per_1000_entries": _slopes(measured)}


def _slopes(measured: dict[str, dict]) -> dict:
    """Milliseconds each operation gains per 1,000 log entries, from the smallest to the largest size."""
    first, last = measured[min(measured, key=int)], measured[max(measured, key=int)]
    entries = last["log_entries"] - first["log_entries"]
    if entries <= 0:
        return {}
    return {
        kind.removesuffix("_seconds") + "_ms": round((last[kind]["median"] - first[kind]["median"]) * 1e6 / entries, 2)
        for kind in ("append_seconds", "read_seconds")
    }
