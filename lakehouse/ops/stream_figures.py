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
# Milliseconds by BatchStage of each batch: read when the table has the column (a table no stream
# has written since it was added lacks it).
STAGE_COLUMN = "stage_ms"


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
    stage_seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # summed over batches, by stage
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


def progress_figures(pipeline: str, rows, as_of: datetime, recent: int = 6) -> StreamFigures:
    """The figures ``ops.stream_progress`` gives, from a pipeline's rows (PROGRESS_COLUMNS, in any
    order; an Arrow table or dicts) as of ``as_of``. Summed in Arrow: a day of 5 s triggers is
    17,280 rows, and a scrape reads them all.

    Args:
        pipeline: the pipeline's name.
        rows: its progress rows.
        as_of: the moment; rows started after it are not counted.
        recent: how many of the last batches' lags to keep.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    as_of = naive_utc(as_of)
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    if table.num_rows:
        started = table["started_at"].cast(pa.timestamp("us"))  # UTC, as naive
        table = table.set_column(table.schema.get_field_index("started_at"), "started_at", started)
        table = table.filter(pc.less_equal(started, pa.scalar(as_of, pa.timestamp("us"))))
    if not table.num_rows:
        return StreamFigures(pipeline, as_of)
    table = table.take(pc.sort_indices(table["started_at"]))
    durations, panes = _numbers(table, "duration_ms") / 1000, _numbers(table, "panes_emitted")
    last_rows = table.slice(max(0, table.num_rows - recent)).to_pylist()
    wrote_speed = panes.nonzero()[0]
    return StreamFigures(
        pipeline,
        as_of,
        batches=table.num_rows,
        last_batch=last_rows[-1],
        recent_lags=tuple(
            (row["batch_id"], _seconds(row["started_at"], row["max_event_time"]))
            for row in last_rows
            if row.get("max_event_time") is not None
        ),
        events={str(fate): int(_numbers(table, column).sum()) for fate, column in FATE_COLUMNS.items()},
        duration_counts=tuple(int((durations <= bound).sum()) for bound in DURATION_BUCKETS),
        duration_sum=float(durations.sum()),
        stage_seconds=_stage_seconds(table),
        speed_written_at=(
            table["started_at"][int(wrote_speed[-1])].as_py() + timedelta(seconds=float(durations[wrote_speed[-1]]))
            if len(wrote_speed)
            else None
        ),
    )


def _stage_seconds(table) -> dict[str, float]:
    """Seconds by stage, summed over the batches' ``stage_ms`` maps (empty without the column)."""
    import pyarrow as pa

    if STAGE_COLUMN not in table.column_names:
        return {}
    stages = table[STAGE_COLUMN].combine_chunks()
    entries = pa.table({"stage": stages.keys, "ms": stages.items})
    summed = entries.group_by("stage").aggregate([("ms", "sum")]).to_pylist()
    return {row["stage"]: row["ms_sum"] / 1000 for row in sorted(summed, key=lambda row: row["stage"])}


def _numbers(table, column: str):
    """A column as a NumPy array of floats, nulls (and a column the rows lack) as 0."""
    import numpy as np
    import pyarrow.compute as pc

    if column not in table.column_names:
        return np.zeros(table.num_rows)
    return pc.fill_null(table[column], 0).to_numpy().astype(float)


class FileCache:
    """What a reader read of each data file of a table, kept: Delta never changes a file it wrote, so
    each read decodes only the files added since the one before. A scrape of a day-old stream reads
    17,280 progress rows; through the cache, the few of the last scrape interval."""

    def __init__(self):
        self.parts: dict[str, object] = {}

    def read(self, uri: str, columns: list[str], where, settings: Settings):
        """The table's rows matching ``where`` (an Arrow table; None when the table does not exist yet).

        Args:
            uri: the table's location.
            columns: the columns read.
            where: a ``pyarrow.dataset`` expression (the same at every read of this cache).
            settings: where the table's store is.
        """
        import pyarrow as pa

        from lakehouse.storage.ops_tables import dataset_at

        dataset = dataset_at(uri, settings)
        if dataset is None:
            return None
        parts = {}
        for fragment in dataset.get_fragments():
            known = self.parts.get(fragment.path)
            parts[fragment.path] = (
                known if known is not None else fragment.to_table(dataset.schema, columns=columns, filter=where)
            )
        self.parts = parts  # a file compaction removed is forgotten
        if not parts:
            return dataset.to_table(columns=columns, filter=where)
        # Files read before the table gained a column lack it: their rows read null there.
        return pa.concat_tables(parts.values(), promote_options="default")


def read_stream_figures(
    settings: Settings, pipeline: str, as_of: datetime, recent: int = 6, cache: FileCache | None = None
) -> StreamFigures:
    """Every figure of the pipeline's stream as of ``as_of``, read through delta-rs and listings.

    Args:
        settings: where the tables and the log live.
        pipeline: the pipeline's name.
        as_of: the moment.
        recent: how many of the last batches' lags to keep.
        cache: the progress rows read before (a metrics endpoint keeps one; None: read them all).
    """
    import pyarrow.dataset as ds

    from lakehouse.storage.ops_tables import arrow_at, dataset_at

    uri, mine = settings.table_uri("ops", "stream_progress"), ds.field("pipeline") == pipeline
    read = cache.read if cache is not None else arrow_at
    dataset = dataset_at(uri, settings)
    has_stages = dataset is not None and STAGE_COLUMN in dataset.schema.names
    columns = [*PROGRESS_COLUMNS, STAGE_COLUMN] if has_stages else [*PROGRESS_COLUMNS]
    figures = progress_figures(pipeline, (read(uri, columns, mine, settings) if dataset else None) or [], as_of, recent)
    runs = _rows(settings, "ops", "backfill_runs", ["status", "started_at"], pipeline)
    last_run = max(runs, key=lambda run: naive_utc(run["started_at"]) or datetime.min, default=None)
    return dataclasses.replace(
        figures,
        processing_lag=_processing_lag(settings, _units_read(settings, uri, mine, figures.last_batch)),
        quarantine_reasons=_quarantine_reasons(settings, pipeline),
        audit_unexplained=_last_audit_unexplained(settings, pipeline),
        backfill_runs={str(s): sum(1 for run in runs if run["status"] == s) for s in RunStatus},
        last_backfill_status=last_run["status"] if last_run else None,
    )


def _units_read(settings: Settings, uri: str, mine, last_batch: dict | None) -> list[str]:
    """What the last batch read (its ``source_files``), read for that row alone: a batch's list of
    files is the table's largest column."""
    import pyarrow.dataset as ds

    from lakehouse.storage.ops_tables import arrow_at

    if last_batch is None:
        return []
    newest = mine & (ds.field("app_id") == last_batch["app_id"]) & (ds.field("batch_id") == last_batch["batch_id"])
    rows = arrow_at(uri, ["source_files"], newest, settings).to_pylist()
    return (rows[0]["source_files"] if rows else None) or []


def _rows(settings: Settings, schema: str, name: str, columns: list[str], pipeline: str) -> list[dict]:
    from lakehouse.storage.ops_tables import read_rows

    return read_rows(settings, schema, name, columns, [("pipeline", "=", pipeline)])


def _processing_lag(settings: Settings, units_read: list[str]) -> float | None:
    """Seconds between the receive times of the log's newest file and the newest file the last batch
    read (``units_read``; 0 when it read the newest). The log's folder is the one that file is in; a
    Kafka log's figure is not computed here (None), nor one before any batch."""
    from lakehouse.storage.log_files import log_files, newest_file_name, received_in_name

    read = [unit for unit in units_read if received_in_name(unit)]
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
