"""The figures an operator watches a stream by, computed once: ``lakehouse health``, the
stream-health DAG and the stream's metrics endpoint (lakehouse.ops.metrics) all read them from here,
so the three never disagree.

Most come from ``ops.stream_progress`` (a row per micro-batch); the rest from the log's newest file,
the quarantine table, the last audit and the backfill runs. All are read through delta-rs and file
listings: no JVM, a few milliseconds each.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from lakehouse.settings import Settings
from lakehouse.vocabulary import Fate, RunStatus

# The upper bounds (seconds) of the batch-duration histogram's buckets: a warm micro-batch takes 1-5 s,
# a cold one or a catch-up batch up to a minute.
DURATION_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# ops.stream_progress's count column for each fate.
FATE_COLUMNS = {
    Fate.QUARANTINED: "quarantined",
    Fate.DUPLICATE: "duplicates",
    Fate.LATE: "late",
    Fate.ON_TIME: "on_time",
}
PROGRESS_COLUMNS = (
    "app_id",
    "batch_id",
    "started_at",
    "duration_ms",
    "watermark",
    "max_event_time",
    "panes_emitted",
    *FATE_COLUMNS.values(),
)


def naive_utc(moment: datetime | None) -> datetime | None:
    """Rows from delta-rs carry UTC zones, Spark's none: compare them all as naive UTC."""
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    return None if later is None or earlier is None else (naive_utc(later) - naive_utc(earlier)).total_seconds()


@dataclasses.dataclass(frozen=True)
class StreamFigures:
    """A stream's figures as of a moment (naive UTC). The progress rows started after it are not
    counted, so judging an earlier moment again gives the same figures."""

    pipeline: str
    as_of: datetime
    batches: int = 0
    last_batch: dict | None = None  # the newest progress row
    recent_lags: tuple[
        tuple[int, float], ...
    ] = ()  # (batch id, its start less the newest event time seen), oldest first
    events: dict[str, int] = dataclasses.field(default_factory=lambda: {str(fate): 0 for fate in Fate})
    duration_counts: tuple[int, ...] = (0,) * len(DURATION_BUCKETS)  # cumulative, per DURATION_BUCKETS bound
    duration_sum: float = 0.0
    speed_written_at: datetime | None = None  # the end of the last batch that changed __speed
    processing_lag: float | None = None  # seconds: the log's newest file received after the newest file read
    quarantine_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    audit_unexplained: int | None = None  # the last audit's
    backfill_runs: dict[str, int] = dataclasses.field(default_factory=dict)  # runs by status
    last_backfill_status: str | None = None

    @property
    def last_batch_age(self) -> float | None:
        """Seconds since the last micro-batch started."""
        return _seconds(self.as_of, self.last_batch["started_at"]) if self.last_batch else None

    @property
    def event_lag(self) -> float | None:
        """Seconds between the newest event time read and now."""
        return _seconds(self.as_of, self.last_batch["max_event_time"]) if self.last_batch else None

    @property
    def watermark_lag(self) -> float | None:
        """Seconds between the last batch's watermark and now."""
        return _seconds(self.as_of, self.last_batch["watermark"]) if self.last_batch else None

    @property
    def speed_age(self) -> float | None:
        """Seconds since the stream last changed ``__speed`` (its freshness)."""
        return _seconds(self.as_of, self.speed_written_at)


def progress_figures(pipeline: str, rows: list[dict], as_of: datetime, recent: int = 6) -> StreamFigures:
    """The figures ``ops.stream_progress`` gives, from a pipeline's rows (PROGRESS_COLUMNS, in any
    order) as of ``as_of``.

    Args:
        pipeline: the pipeline's name.
        rows: its progress rows.
        as_of: the moment; rows started after it are not counted.
        recent: how many of the last batches' lags to keep.
    """
    as_of = naive_utc(as_of)
    ordered = sorted(
        (row for row in rows if naive_utc(row["started_at"]) <= as_of), key=lambda row: naive_utc(row["started_at"])
    )
    if not ordered:
        return StreamFigures(pipeline, as_of)
    durations = [(row.get("duration_ms") or 0) / 1000 for row in ordered]
    wrote_speed = [row for row in ordered if row.get("panes_emitted")]
    return StreamFigures(
        pipeline,
        as_of,
        batches=len(ordered),
        last_batch=ordered[-1],
        recent_lags=tuple(
            (row["batch_id"], _seconds(row["started_at"], row["max_event_time"]))
            for row in ordered[-recent:]
            if row.get("max_event_time") is not None
        ),
        events={str(fate): sum(row.get(column) or 0 for row in ordered) for fate, column in FATE_COLUMNS.items()},
        duration_counts=tuple(sum(1 for d in durations if d <= bound) for bound in DURATION_BUCKETS),
        duration_sum=sum(durations),
        speed_written_at=_batch_end(wrote_speed[-1]) if wrote_speed else None,
    )


def _batch_end(row: dict) -> datetime:
    return naive_utc(row["started_at"]) + timedelta(milliseconds=row.get("duration_ms") or 0)


def read_stream_figures(settings: Settings, pipeline: str, as_of: datetime, recent: int = 6) -> StreamFigures:
    """Every figure of the pipeline's stream as of ``as_of``, read through delta-rs and listings.

    Args:
        settings: where the tables and the log live.
        pipeline: the pipeline's name.
        as_of: the moment.
        recent: how many of the last batches' lags to keep.
    """
    rows = _progress_rows(settings, pipeline)
    figures = progress_figures(pipeline, rows, as_of, recent)
    runs = _rows(settings, "ops", "backfill_runs", ["status", "started_at"], pipeline)
    last_run = max(runs, key=lambda run: naive_utc(run["started_at"]) or datetime.min, default=None)
    return dataclasses.replace(
        figures,
        processing_lag=_processing_lag(settings, figures.last_batch),
        quarantine_reasons=_quarantine_reasons(settings, pipeline),
        audit_unexplained=_last_audit_unexplained(settings, pipeline),
        backfill_runs={str(s): sum(1 for run in runs if run["status"] == s) for s in RunStatus},
        last_backfill_status=last_run["status"] if last_run else None,
    )


def _progress_rows(settings: Settings, pipeline: str) -> list[dict]:
    """The pipeline's progress rows, the newest with the units it read (only its own: a batch's list
    of files is the table's largest column)."""
    import pyarrow.dataset as ds

    from lakehouse.storage.ops_tables import arrow_at

    uri = settings.table_uri("ops", "stream_progress")
    mine = ds.field("pipeline") == pipeline
    table = arrow_at(uri, [*PROGRESS_COLUMNS], mine, settings)
    if table is None or not table.num_rows:
        return []
    rows = table.to_pylist()
    last = max(rows, key=lambda row: naive_utc(row["started_at"]))
    newest = mine & (ds.field("app_id") == last["app_id"]) & (ds.field("batch_id") == last["batch_id"])
    last.update(arrow_at(uri, ["source_files"], newest, settings).to_pylist()[0])
    return rows


def _rows(settings: Settings, schema: str, name: str, columns: list[str], pipeline: str) -> list[dict]:
    from lakehouse.storage.ops_tables import read_rows

    return read_rows(settings, schema, name, columns, [("pipeline", "=", pipeline)])


def _processing_lag(settings: Settings, last_batch: dict | None) -> float | None:
    """Seconds between the receive times of the log's newest file and the newest file the last batch
    read (0 when it read the newest). The log's folder is the one that file is in; a Kafka log's
    figure is not computed here (None), nor one before any batch."""
    from lakehouse.storage.log_files import log_files, newest_file_name, received_in_name

    read = [unit for unit in (last_batch or {}).get("source_files") or [] if received_in_name(unit)]
    if not read:
        return None
    newest_read = max(read, key=received_in_name)
    topic_uri = newest_read.rsplit("/", 3)[0]  # <log>/<topic>/ingest_date=.../ingest_hour=.../<file>
    newest = newest_file_name(log_files(settings, topic_uri))
    if newest is None:
        return None
    return max(0.0, _seconds(received_in_name(newest), received_in_name(newest_read)))


def _quarantine_reasons(settings: Settings, pipeline: str) -> dict[str, int]:
    from lakehouse.storage.ops_tables import arrow_at

    table = arrow_at(settings.table_uri("quarantine", f"{pipeline}_events"), ["reason"], settings=settings)
    if table is None:
        return {}
    counted = table.group_by("reason").aggregate([("reason", "count")]).to_pylist()
    return {row["reason"]: row["reason_count"] for row in counted}


def _last_audit_unexplained(settings: Settings, pipeline: str) -> int | None:
    runs = _rows(settings, "audit", "reconciliations", ["unexplained", "started_at"], pipeline)
    last = max(runs, key=lambda run: naive_utc(run["started_at"]), default=None)
    return last["unexplained"] if last else None
