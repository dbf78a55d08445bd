"""Stream-vs-batch reconciliation that explains every difference.

For every window in the range that the speed layer's watermark has closed, the audit recomputes
the truth from the raw retained log (the batch layer's transforms) and compares it with
``gold.<p>__speed``. Each event of the truth gets a cause from the speed layer's own records:

- ``on_time``: bronze holds it as on time, so the speed value must include it;
- ``late``: bronze holds it as late: the stream left it out on purpose (explained);
- ``not_yet_read``: its log file is not among the files the stream has processed (explained);
- ``missing``: the stream read its file but bronze does not hold it (unexplained).

``--target serving`` audits what SQL users see instead: the serving view ``gold.<p>`` (batch value
where the batch layer recomputed the window, speed value elsewhere), built by the view's own
definition over the pinned versions. A speed-served row is judged as above; a batch-served row is
explained when it equals exactly the events that were in bronze (or in the log) when it was
written, the rest having ``arrived_after_batch`` (the next correction run folds them in).

A window and key is **matched** when speed equals the truth, **explained** when the speed value
equals its on-time events and every other event has an explaining cause, and **unexplained**
otherwise (or whenever an event is ``missing``), with the event ids that account for it. The audit pins
what it read (Delta versions and the last log file), so re-running it with the same pins gives the same
result. Session windows, whose bounds move as events arrive, are compared by groups of overlapping
sessions instead of by (window, key) (``lakehouse.audit.sessions``).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse import eventtime
from lakehouse.audit import compare, sessions
from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.clocks import received_at
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.errors import LakehouseError
from lakehouse.eventtime import earliest_arrival_for, parse_duration
from lakehouse.layers.batch import event_span, events_between
from lakehouse.location import Scheme
from lakehouse.settings import Settings
from lakehouse.storage import kafka_log
from lakehouse.storage.archive import read_log
from lakehouse.storage.catalog import (
    BATCH_COVERAGE,
    CORRECTIONS,
    DIFFERENCES,
    MANUAL_CHANGES,
    RECONCILIATIONS,
    STREAM_PROGRESS,
    Table,
    ensure_table,
    pipeline_tables,
    require_table,
    serving_view_sql,
    table_exists,
    table_version,
)
from lakehouse.storage.dimensions import dimension_pins, pin_name, with_dimensions
from lakehouse.storage.frames import literal_frame
from lakehouse.storage.log import file_write_times, last_write
from lakehouse.storage.ops_tables import append_rows
from lakehouse.vocabulary import (
    EXPLAINING_CAUSES,
    AuditMode,
    AuditTarget,
    AuditUnit,
    Cause,
    CorrectionChange,
    Layer,
    Verdict,
    choices,
)


@dataclasses.dataclass(frozen=True)
class Scope:
    """Which closed windows an audit compares: all of the range, or those changed since ``since``."""

    mode: str  # full | incremental
    since: dict[str, str]  # the previous audit's table versions the changes are counted from
    windows: Column  # true on the windows in scope
    changed_windows: int | None
    start: datetime  # the earliest window start in scope: the log is read from there on


@dataclasses.dataclass
class AuditResult:
    run_id: str
    pins: dict[str, str]
    watermark: datetime | None
    windows_compared: int
    open_windows: int
    matched: int
    explained: dict[str, int]
    unexplained: list[dict]
    pipeline: str = ""
    range_start: datetime | None = None
    range_end: datetime | None = None
    newest_event_time: datetime | None = None  # in the log, for the range: what fresh speed results reach
    rows: list[dict] = dataclasses.field(default_factory=list, repr=False)  # every closed (window, key)
    mode: str = AuditMode.FULL
    changes_since: dict[str, str] = dataclasses.field(default_factory=dict)
    changed_windows: int | None = None
    target: str = AuditTarget.SPEED
    unit: str = AuditUnit.WINDOW_ROWS  # what each verdict is about

    @property
    def ok(self) -> bool:
        return not self.unexplained

    @classmethod
    def from_rows(cls, rows: list, **fields) -> AuditResult:
        """The result of the per-window verdict rows, counted by verdict and cause; ``fields`` give the rest."""
        return cls(
            windows_compared=len(rows),
            matched=sum(r.status == Verdict.MATCHED for r in rows),
            explained={
                cause: sum(r.status == Verdict.EXPLAINED and cause in r.causes for r in rows)
                for cause in EXPLAINING_CAUSES
            },
            unexplained=[r.asDict(recursive=True) for r in rows if r.status == Verdict.UNEXPLAINED],
            rows=[r.asDict(recursive=True) for r in rows],
            **fields,
        )


def current_pins(
    spark: SparkSession, settings: Settings, pipeline: Pipeline, arrived_from: datetime | None = None
) -> dict[str, str]:
    """The versions of what the audit reads: bronze, the speed table, stream progress, the log.

    The log is pinned by the newest write time among the files the audit will read (those that
    arrived from ``arrived_from``'s hour on), found by listing folders, never by reading files.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline the rows belong to.
        arrived_from: the log is pinned among files that arrived from this hour on (None: the whole log).
    """
    tables = pipeline_tables(pipeline)
    pins = {}
    for name, table in (("bronze", tables.bronze), ("speed", tables.speed), ("progress", STREAM_PROGRESS)):
        uri = require_table(spark, table, settings, "run the speed layer first")
        pins[name] = str(table_version(spark, uri))
    pins |= dimension_pins(settings, pipeline)  # the truth joins the version the pin names
    if table_exists(spark, tables.batch.uri(settings)):  # incremental audits follow its changes too
        pins["batch"] = str(table_version(spark, tables.batch.uri(settings)))
    for name, table in (("corrections", CORRECTIONS), ("coverage", BATCH_COVERAGE), ("manual_changes", MANUAL_CHANGES)):
        if table_exists(spark, table.uri(settings)):
            pins[name] = str(table_version(spark, table.uri(settings)))
    # Records are only ever added to the log: its newest file's write time, or a topic's end
    # offsets, pin its content.
    if settings.kafka_bootstrap:
        pins["log_until"] = kafka_log.log_pin(settings, pipeline.topic)
        return pins
    newest = last_write(spark, settings, pipeline.topic, arrived_from)
    pins["log_until"] = newest.isoformat() if newest else ""
    return pins


def _file_name(path):
    """Log files are named uniquely by arrival; names, not paths, survive moving the log."""
    return F.element_at(F.split(path, "/"), -1)


def _at(spark: SparkSession, table: Table, settings: Settings, version: str) -> DataFrame:
    return spark.read.format("delta").option("versionAsOf", int(version)).load(table.uri(settings))


def _previous_audit(spark: SparkSession, settings: Settings, pipeline: Pipeline):
    if not table_exists(spark, RECONCILIATIONS.uri(settings)):
        return None
    runs = spark.read.format("delta").load(RECONCILIATIONS.uri(settings))
    return runs.where(F.col("pipeline") == pipeline.name).orderBy(F.col("started_at").desc()).first()


def _changed_windows(
    spark: SparkSession, table_uri: str, since: str | None, until: str | None, window_range: Column
) -> set[datetime]:
    """Window starts in ``window_range`` whose rows changed in versions (since, until] (Change Data Feed)."""
    if until is None:
        return set()
    first = int(since) + 1 if since is not None else 0
    if first > int(until):
        return set()
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", first)
        .option("endingVersion", int(until))
        .load(table_uri)
    )
    return {row[0] for row in changes.where(window_range).select("window_start").distinct().collect()}


@dataclasses.dataclass(frozen=True)
class PinnedReads:
    """What an audit reads, each at the version its pins name: so a re-run with the same pins reads
    exactly the same rows, whatever was written since."""

    spark: SparkSession
    settings: Settings
    pipeline: Pipeline
    pins: dict[str, str]

    def stream_position(self) -> tuple[datetime | None, DataFrame]:
        """The speed layer's watermark now, and what it has read: files, and Kafka partitions to an
        offset (``read_unit``, ``read_through``)."""
        progress = _at(self.spark, STREAM_PROGRESS, self.settings, self.pins["progress"]).where(
            F.col("pipeline") == self.pipeline.name
        )
        max_event_time = progress.agg(F.max("max_event_time")).first()[0]
        delay = self.settings.watermark_delay or self.pipeline.watermark_delay
        lateness = self.settings.allowed_lateness or self.pipeline.allowed_lateness
        current = eventtime.watermark(max_event_time, parse_duration(delay), parse_duration(lateness))
        units = progress.select(F.explode("source_files").alias("unit"))
        unit, offset = kafka_log.read_position(F.col("unit"), _file_name(F.col("unit")))
        read = units.groupBy(unit.alias("read_unit")).agg(F.max(offset).alias("read_through"))
        return current, read

    def truth_events(self, start: datetime, end: datetime) -> DataFrame:
        """First copies of the valid events in windows starting in [start, end), from the pinned log,
        each in its window(s); for sessions, every event a session starting there can hold, each in
        its own window ``[t, t + gap)`` (``tx.window_values`` merges them)."""
        pipeline = self.pipeline
        first_event, last_event = event_span(pipeline, start, end)
        arrived_from, offsets = earliest_arrival_for(first_event), kafka_log.pinned_offsets(self.pins["log_until"])
        if offsets is not None:
            pinned = kafka_log.read_topic(self.spark, self.settings, pipeline.topic, arrived_from, until=offsets)
        else:
            raw = read_log(self.spark, self.settings, pipeline.topic, arrived_from)
            pinned = raw.where(F.col("written_at") <= F.lit(self.pins["log_until"]).cast("timestamp"))
        events = tx.first_copies(tx.valid_events(tx.parse_events(pinned, pipeline), pipeline), pipeline)
        joined = with_dimensions(self.spark, self.settings, pipeline, events, self.dimension_version())
        windowed = tx.assign_windows(joined, pipeline)
        if pipeline.window.is_session:
            return windowed.where(events_between(pipeline, first_event, last_event))
        return windowed.where(tx.in_window_range(start, end))

    def dimension_version(self) -> int | None:
        """The pinned version of the dimension the pipeline joins (None: no join)."""
        joins = self.pipeline.joins
        return int(self.pins[pin_name(joins.dimension)]) if joins else None

    def with_causes(self, events: DataFrame, read: DataFrame, start: datetime) -> DataFrame:
        """Each event's cause, plus when it reached the log (``written_at``) and bronze (``ingested_at``).

        The stream read an event's record when it read its file, or, on Kafka, its partition up to
        the record's offset. A file's ``written_at`` is when it was added to the log; a Kafka
        record's, its receive time."""
        pipeline = self.pipeline
        bronze = _at(self.spark, pipeline_tables(self.pipeline).bronze, self.settings, self.pins["bronze"]).select(
            pipeline.event_id, F.col("fate").alias("bronze_fate"), "ingested_at"
        )
        written = literal_frame(
            self.spark,
            "file_name string, file_written_at timestamp",
            sorted(file_write_times(self.spark, self.settings, pipeline.topic, earliest_arrival_for(start)).items()),
        )
        source = F.col("source_file")
        events = (
            events.withColumns(
                {
                    "file_name": _file_name(source),
                    "read_unit": kafka_log.record_unit(source, _file_name(source)),
                    "record_offset": kafka_log.record_offset(source),
                }
            )
            .join(written, on="file_name", how="left")
            .withColumn(
                "written_at", F.coalesce("file_written_at", F.when(Scheme.KAFKA.matches(source), received_at(source)))
            )
        )
        was_read = F.col("read_unit_matched") & (
            F.col("read_through").isNull() | (F.col("record_offset") <= F.col("read_through"))
        )
        cause = (
            F.when(F.col("bronze_fate").isNotNull(), F.col("bronze_fate"))
            .when(F.coalesce(was_read, F.lit(False)), F.lit(Cause.MISSING))
            .otherwise(F.lit(Cause.NOT_YET_READ))
        )
        return (
            events.join(bronze, on=pipeline.event_id, how="left")
            .join(read.withColumn("read_unit_matched", F.lit(True)), on="read_unit", how="left")
            .withColumn("cause", cause)
        )

    def audited_rows(self, target: str) -> DataFrame:
        """What the audit checks, at the pins: gold columns plus ``source`` and ``updated_at``."""
        speed = _at(self.spark, pipeline_tables(self.pipeline).speed, self.settings, self.pins["speed"])
        if target == AuditTarget.SPEED:
            return speed.select(*self.pipeline.gold_columns, F.lit(Layer.SPEED).alias("source"), "updated_at")
        batch = (
            _at(self.spark, pipeline_tables(self.pipeline).batch, self.settings, self.pins["batch"])
            if "batch" in self.pins
            else literal_frame(self.spark, pipeline_tables(self.pipeline).batch.columns, [])
        )
        coverage = (
            _at(self.spark, BATCH_COVERAGE, self.settings, self.pins["coverage"])
            if "coverage" in self.pins
            else literal_frame(self.spark, BATCH_COVERAGE.columns, [])
        )
        # The serving view's own definition, over temporary views of the pinned versions.
        names = {part: f"audit_{self.pipeline.name}_{part}" for part in ("speed", "batch", "coverage")}
        for part, frame in (("speed", speed), ("batch", batch), ("coverage", coverage)):
            frame.createOrReplaceTempView(names[part])
        served = self.spark.sql(serving_view_sql(self.pipeline, **names))
        return served.select(*self.pipeline.gold_columns, "source", "updated_at")

    def corrected(self) -> DataFrame | None:
        """The (window, key) rows a correction run has recomputed, as of the pins; None before any."""
        if "corrections" not in self.pins:
            return None
        return (
            _at(self.spark, CORRECTIONS, self.settings, self.pins["corrections"])
            .where((F.col("pipeline") == self.pipeline.name) & (F.col("change") == CorrectionChange.INSERT))
            .select("window_start", "window_end", F.to_json("key").alias("_key_json"))
            .distinct()
        )

    def manually_changed(self, target: str) -> DataFrame | None:
        """The (window, key) rows an operator's repair changed in what the audit checks, as of the pins."""
        if "manual_changes" not in self.pins:
            return None
        tables = pipeline_tables(self.pipeline)
        audited = [tables.speed] + ([tables.batch] if target == AuditTarget.SERVING else [])
        ordered_key = [part for k in self.pipeline.keys for part in (F.lit(k), F.col("key")[k])]
        return (
            _at(self.spark, MANUAL_CHANGES, self.settings, self.pins["manual_changes"])
            .where(
                (F.col("pipeline") == self.pipeline.name)
                & F.col("table_name").isin(*[table.qualified_name for table in audited])
            )
            # In the pipeline's key order, as the comparison spells it, whatever order the map was stored in.
            .select("window_start", "window_end", F.to_json(F.create_map(*ordered_key)).alias("_key_json"))
            .distinct()
        )


def check_request(pipeline: Pipeline, target: str, incremental: bool) -> None:
    """Refuse what an audit of ``pipeline`` cannot do, before anything is read (the CLI asks before
    it starts a JVM)."""
    if target not in choices(AuditTarget):
        raise LakehouseError(f"unknown audit target {target!r}: one of {', '.join(AuditTarget)}")
    if not pipeline.window.is_session:
        return
    if target != AuditTarget.SPEED:
        raise LakehouseError(
            f"--target {target}: {pipeline.name} has session windows, whose audit compares the speed "
            "table's sessions with the truth; audit --target speed (the default)"
        )
    if incremental:
        raise LakehouseError(
            f"--incremental: {pipeline.name} has session windows, whose bounds move as events arrive; "
            "its audit compares every session of the range (drop --incremental)"
        )


@dataclasses.dataclass(frozen=True)
class Comparison:
    """What an audit compared: a verdict row per closed (window, key) or session group, how many are
    still open, the newest event time of the truth, the scope, and the frames it cached (to free)."""

    verdicts: DataFrame
    watermark: datetime | None
    open_windows: int
    newest_event_time: datetime | None
    scope: Scope
    cached: tuple[DataFrame, ...]


class Auditor:
    def __init__(self, spark: SparkSession, settings: Settings, pipeline: Pipeline):
        self.spark, self.settings, self.pipeline = spark, settings, pipeline
        self.tables = pipeline_tables(pipeline)

    def reconcile(
        self,
        start: datetime,
        end: datetime,
        pins: dict[str, str] | None = None,
        record: bool = True,
        incremental: bool = False,
        target: str = AuditTarget.SPEED,
    ) -> AuditResult:
        """Audit the closed windows starting in ``[start, end)``; ``incremental``: only those changed
        since the previous audit (see :meth:`_scope`); ``target``: the speed
        table or the serving view. Session windows are compared by group (``lakehouse.audit.sessions``).

        Args:
            start: first window start audited.
            end: end of the range of window starts (exclusive).
            pins: table versions to read (None: the current ones).
            record: False to audit without writing ``audit.*``.
            incremental: only the windows changed since the previous audit.
            target: what is checked against the truth: the speed table or the serving view.
        """
        started = time.time()
        check_request(self.pipeline, target, incremental)
        reads = PinnedReads(self.spark, self.settings, self.pipeline, self._checked_pins(pins, start, end))
        if self.pipeline.window.is_session:
            comparison = self._compare_sessions(reads, start, end)
        else:
            comparison = self._compare_windows(reads, start, end, incremental, target)
        result = AuditResult.from_rows(
            comparison.verdicts.collect(),
            run_id=str(uuid.uuid4()),
            pins=reads.pins,
            watermark=comparison.watermark,
            pipeline=self.pipeline.name,
            open_windows=comparison.open_windows,
            range_start=start,
            range_end=end,
            newest_event_time=comparison.newest_event_time,
            mode=comparison.scope.mode,
            changes_since=comparison.scope.since,
            changed_windows=comparison.scope.changed_windows,
            target=target,
            unit=AuditUnit.SESSION_GROUPS if self.pipeline.window.is_session else AuditUnit.WINDOW_ROWS,
        )
        if record:
            record_audit(self.spark, self.settings, result, started)
        for frame in comparison.cached:
            frame.unpersist()
        return result

    def _compare_windows(
        self, reads: PinnedReads, start: datetime, end: datetime, incremental: bool, target: str
    ) -> Comparison:
        """Fixed windows: per closed (window, key), totals side by side (``lakehouse.audit.compare``).

        Args:
            reads: what the audit reads, at its pins.
            start: first window start audited.
            end: end of the range of window starts (exclusive).
            incremental: only the windows changed since the previous audit.
            target: the speed table or the serving view.
        """
        watermark, read = reads.stream_position()
        scope = self._scope(reads.pins, start, end, watermark, incremental)
        truth_events = reads.truth_events(scope.start, end).where(scope.windows)
        # Parsed once: the open-window count, the comparison and the recorded differences share it.
        caused = reads.with_causes(truth_events, read, scope.start).persist()
        closed = tx.closed_by(watermark)
        closed_rows = compare.closed_audited_rows(
            reads.audited_rows(target), self.pipeline, scope.start, end, scope.windows, watermark
        )
        joined = compare.joined_totals(caused.where(closed), closed_rows, self.pipeline)
        joined = compare.flagged(joined, reads.corrected(), "corrected", self.pipeline)
        joined = compare.flagged(joined, reads.manually_changed(target), "manually_changed", self.pipeline)
        return Comparison(
            verdicts=compare.per_window_verdicts(joined, self.pipeline),
            watermark=watermark,
            open_windows=caused.where(~closed).select("window_start", *self.pipeline.keys).distinct().count(),
            newest_event_time=caused.agg(F.max(self.pipeline.event_time)).first()[0],
            scope=scope,
            cached=(caused,),
        )

    def _compare_sessions(self, reads: PinnedReads, start: datetime, end: datetime) -> Comparison:
        """Session windows: per group of overlapping sessions starting in the range, the sessions side
        by side (``lakehouse.audit.sessions``), once the stream can no longer change the group."""
        watermark, read = reads.stream_position()
        first_event = event_span(self.pipeline, start, end)[0]
        caused = reads.with_causes(reads.truth_events(start, end), read, first_event).persist()
        groups = sessions.session_groups(caused, reads.audited_rows(AuditTarget.SPEED), self.pipeline, start, end)
        groups = sessions.flagged_by_overlap(groups, reads.corrected(), "corrected", self.pipeline)
        groups = sessions.flagged_by_overlap(
            groups, reads.manually_changed(AuditTarget.SPEED), "manually_changed", self.pipeline
        ).persist()
        closed = sessions.closed(watermark, self.pipeline)
        counts = groups.agg(F.count(F.when(~closed, 1)), F.max("newest_event_time")).first()
        return Comparison(
            verdicts=sessions.verdicts(groups.where(closed), self.pipeline),
            watermark=watermark,
            open_windows=counts[0],
            newest_event_time=counts[1],
            scope=Scope(AuditMode.FULL, {}, F.lit(True), None, first_event),
            cached=(caused, groups),
        )

    def _checked_pins(self, pins: dict[str, str] | None, start: datetime, end: datetime) -> dict[str, str]:
        """The pins to read at (the current versions unless given), once they are known to be complete."""
        first_event = event_span(self.pipeline, start, end)[0]
        pins = pins or current_pins(self.spark, self.settings, self.pipeline, earliest_arrival_for(first_event))
        joined = [pin_name(self.pipeline.joins.dimension)] if self.pipeline.joins else []
        missing_pins = {"bronze", "speed", "progress", "log_until", *joined} - set(pins)
        if missing_pins:
            raise LakehouseError(f"pins lack {', '.join(sorted(missing_pins))}")
        return pins

    def _scope(self, pins, start: datetime, end: datetime, watermark, incremental: bool) -> Scope:
        """Every window of the range; or, ``incremental``, the windows whose speed or batch rows changed
        since the previous audit, plus those the watermark closed since then (an unchanged window that
        was open then was never compared)."""
        if not incremental:
            return Scope(AuditMode.FULL, {}, F.lit(True), None, start)
        previous = _previous_audit(self.spark, self.settings, self.pipeline)
        if previous is None:
            return Scope(AuditMode.INCREMENTAL, {}, F.lit(True), None, start)
        since, in_range = dict(previous.pins), tx.in_window_range(start, end)
        changed = set()
        for part, table in (("speed", self.tables.speed), ("batch", self.tables.batch)):
            changed |= _changed_windows(self.spark, table.uri(self.settings), since.get(part), pins.get(part), in_range)
        closed_since = F.lit(True) if previous.watermark is None else F.col("window_end") > F.lit(previous.watermark)
        changed_in_range = F.col("window_start").isin(*sorted(changed)) if changed else F.lit(False)
        windows = changed_in_range | closed_since
        # The log holding those windows arrived no earlier than the earliest of them: read from there.
        earliest = [*changed, *([previous.watermark - self.pipeline.window.size_delta] if previous.watermark else [])]
        scoped_start = max(start, min(earliest)) if earliest and previous.watermark else start
        return Scope(
            AuditMode.INCREMENTAL,
            {k: since[k] for k in ("speed", "batch") if k in since},
            windows,
            len(changed),
            scoped_start,
        )


def record_audit(spark: SparkSession, settings: Settings, result: AuditResult, started: float) -> None:
    """Append the run's differences, then its summary row (so a summary row means every difference of
    its run is recorded). The rows are already on the driver (``result.rows``), so they go through
    delta-rs: two Spark appends took 1.0-1.2 s of a 6 s audit on a warm session, 2.1 s on a cold one.

    Args:
        spark: the session (it creates the tables the first time).
        settings: where the audit tables live.
        result: the audit's outcome (its pipeline, range, counts and per-window rows).
        started: when the audit started (``time.time()``), for its duration.
    """
    run = {
        "run_id": result.run_id,
        "pipeline": result.pipeline,
        "range_start": result.range_start,
        "range_end": result.range_end,
        "pins": result.pins,
        "watermark": result.watermark,
        "windows_compared": result.windows_compared,
        "open_windows": result.open_windows,
        "matched": result.matched,
        "explained_late": result.explained[Cause.LATE],
        "explained_not_yet_read": result.explained[Cause.NOT_YET_READ],
        "explained_corrected": result.explained[Cause.CORRECTED],
        "explained_after_batch": result.explained[Cause.ARRIVED_AFTER_BATCH],
        "target": result.target,
        "unexplained": len(result.unexplained),
        "mode": result.mode,
        "changes_since": result.changes_since,
        "changed_windows": result.changed_windows,
        "started_at": datetime.fromtimestamp(started, tz=UTC),
        "duration_ms": int((time.time() - started) * 1000),
    }
    differences = [
        {**row, "run_id": result.run_id, "pipeline": result.pipeline}
        for row in result.rows
        if row["status"] != Verdict.MATCHED
    ]
    append_audit_rows(spark, settings, run, differences)


def append_audit_rows(spark: SparkSession, settings: Settings, run: dict, differences: list[dict]) -> None:
    """An audit run's rows: its differences in ``audit.reconciliation_differences``, then its
    summary in ``audit.reconciliations``, last, so that a summary row means every difference of its
    run is recorded. Through delta-rs, as the rows are on the driver.

    Args:
        spark: the session (it creates the tables the first time).
        settings: where the audit tables live.
        run: the run's ``audit.reconciliations`` row.
        differences: its ``audit.reconciliation_differences`` rows (those that did not match).
    """
    for table in (RECONCILIATIONS, DIFFERENCES):
        ensure_table(table, settings)
    # append_rows merges schemas: a table made before a column existed gains it on the first write.
    if differences:
        append_rows(DIFFERENCES.uri(settings), DIFFERENCES.arrow_schema, differences, settings)
    append_rows(RECONCILIATIONS.uri(settings), RECONCILIATIONS.arrow_schema, [run], settings)


AUDITED = {AuditTarget.SPEED: "the speed table", AuditTarget.SERVING: "the serving view"}


def render_audit(result: AuditResult) -> str:
    lines = [
        f"audit {result.run_id} of {AUDITED[result.target]}: "
        f"{result.windows_compared} closed {result.unit} compared, "
        f"{result.open_windows} still open (watermark {result.watermark})",
        f"  matched          {result.matched}",
        f"  explained late   {result.explained[Cause.LATE]}",
        f"    of which already corrected {result.explained[Cause.CORRECTED]}",
        f"  explained unread {result.explained[Cause.NOT_YET_READ]}",
        *(
            [f"  explained after batch {result.explained[Cause.ARRIVED_AFTER_BATCH]}"]
            if result.target == AuditTarget.SERVING
            else []
        ),
        *([f"  explained manual {manual}"] if (manual := result.explained[Cause.MANUAL_CHANGE]) else []),
        f"  unexplained      {len(result.unexplained)}",
        f"  pins             {json.dumps(result.pins, sort_keys=True)}",
    ]
    for row in result.unexplained[:20]:
        lines.append(
            f"  UNEXPLAINED {row['window_start']} {row['key']}: truth {row['truth']} {row['source']} {row['speed']}; "
            f"value - events its layer counted {row['speed_minus_on_time']}; "
            f"events unaccounted: {row['unexplained_event_ids']}"
        )
    return "\n".join(lines)
