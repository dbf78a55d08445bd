"""Stream-vs-batch reconciliation that explains every difference.

For every window in the range that the speed layer's watermark has closed, the audit recomputes
the truth from the raw retained log (the batch layer's transforms) and compares it with
``gold.<p>__speed``. Each event of the truth gets a cause from the speed layer's own records:

- ``on_time``: bronze holds it as on time, so the speed value must include it;
- ``late``: bronze holds it as late: the stream left it out on purpose (explained);
- ``not_yet_read``: its log file is not among the files the stream has processed (explained);
- ``missing``: the stream read its file but bronze does not hold it (unexplained).

A window and key is **matched** when speed equals the truth, **explained** when the speed value
equals its on-time events and every other event has an explaining cause, and **unexplained**
otherwise (or whenever an event is ``missing``), with the event ids that account for it. The audit pins what it read (Delta versions
and the last log file), so re-running it with the same pins gives the same result.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from datetime import datetime, timezone

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse import transforms as tx
from lakehouse.catalog import (
    CORRECTIONS, DIFFERENCES, RECONCILIATIONS, STREAM_PROGRESS, Table, ensure_table, pipeline_tables, require_table, table_exists,
)
from lakehouse.errors import LakehouseError
from lakehouse.frames import literal_frame
from lakehouse.log import earliest_arrival_for, last_write, read_log
from lakehouse.pipelines.base import Pipeline
from lakehouse.settings import Settings, parse_duration

ON_TIME, LATE, NOT_YET_READ, MISSING = "on_time", "late", "not_yet_read", "missing"
# A late difference whose window a correction run has already recomputed: the served value is right.
CORRECTED = "corrected"
EXPLAINING_CAUSES = (LATE, NOT_YET_READ, CORRECTED)

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
    mode: str = "full"
    changes_since: dict[str, str] = dataclasses.field(default_factory=dict)
    changed_windows: int | None = None

    @property
    def ok(self) -> bool:
        return not self.unexplained


def current_pins(spark: SparkSession, settings: Settings, pipeline: Pipeline,
                 arrived_from: datetime | None = None) -> dict[str, str]:
    """The versions of what the audit reads: bronze, the speed table, stream progress, the log.

    The log is pinned by the newest write time among the files the audit will read (those that
    arrived from ``arrived_from``'s hour on), found by listing folders, never by reading files.
    """
    from delta.tables import DeltaTable

    tables = pipeline_tables(pipeline)
    pins = {}
    for name, table in (("bronze", tables.bronze), ("speed", tables.speed), ("progress", STREAM_PROGRESS)):
        uri = require_table(spark, table, settings, "run the speed layer first")
        pins[name] = str(DeltaTable.forPath(spark, uri).history(1).select("version").first()[0])
    if table_exists(spark, tables.batch.uri(settings)):  # incremental audits follow its changes too
        pins["batch"] = str(DeltaTable.forPath(spark, tables.batch.uri(settings)).history(1).select("version").first()[0])
    if table_exists(spark, CORRECTIONS.uri(settings)):
        pins["corrections"] = str(DeltaTable.forPath(spark, CORRECTIONS.uri(settings)).history(1).select(
            "version").first()[0])
    # Files are only ever added to the log: the latest write time pins its content.
    newest = last_write(spark, settings, pipeline.topic, arrived_from)
    pins["log_until"] = newest.isoformat() if newest else ""
    return pins


def _file_name(path):
    """Log files are named uniquely by arrival; names, not paths, survive moving the log."""
    return F.element_at(F.split(path, "/"), -1)


def _at(spark: SparkSession, table: Table, settings: Settings, version: str) -> DataFrame:
    return spark.read.format("delta").option("versionAsOf", int(version)).load(table.uri(settings))


class Auditor:
    def __init__(self, spark: SparkSession, settings: Settings, pipeline: Pipeline):
        self.spark, self.settings, self.pipeline = spark, settings, pipeline
        self.tables = pipeline_tables(pipeline)

    def reconcile(self, start: datetime, end: datetime, pins: dict[str, str] | None = None,
                  record: bool = True, incremental: bool = False) -> AuditResult:
        """Audit the closed windows starting in ``[start, end)``; ``incremental``: only those changed
        since the previous audit (see :meth:`_changed_since_previous_audit`)."""
        if self.pipeline.window.is_session:
            raise LakehouseError(f"{self.pipeline.name} has session windows; the audit compares fixed windows "
                                 "(audit the pipeline it is a variant of)")
        started = time.time()
        pins = pins or current_pins(self.spark, self.settings, self.pipeline, earliest_arrival_for(start))
        missing_pins = {"bronze", "speed", "progress", "log_until"} - set(pins)
        if missing_pins:
            raise LakehouseError(f"pins lack {', '.join(sorted(missing_pins))}")
        watermark, read_files = self._stream_position(pins)
        scope = (self._changed_since_previous_audit(pins, start, end, watermark) if incremental
                 else Scope("full", {}, F.lit(True), None, start))
        truth_events = self._truth_events(scope.start, end, pins).where(scope.windows)
        # Parsed once: the open-window count, the comparison and the recorded differences share it.
        caused = self._with_causes(truth_events, pins, read_files).persist()
        closed = F.lit(watermark is not None) & (F.col("window_end") <= F.lit(watermark))
        per_key = self._compare(caused.where(closed), pins, scope.start, end, watermark, scope.windows).persist()
        open_windows = caused.where(~closed).select("window_start", *self.pipeline.keys).distinct().count()
        rows = per_key.collect()
        newest_event_time = caused.agg(F.max(self.pipeline.event_time)).first()[0]
        result = AuditResult(
            run_id=str(uuid.uuid4()), pins=pins, watermark=watermark, windows_compared=len(rows),
            open_windows=open_windows, matched=sum(r.status == "matched" for r in rows),
            explained={cause: sum(r.status == "explained" and cause in r.causes for r in rows)
                       for cause in EXPLAINING_CAUSES},
            unexplained=[r.asDict(recursive=True) for r in rows if r.status == "unexplained"],
            pipeline=self.pipeline.name, range_start=start, range_end=end, newest_event_time=newest_event_time,
            rows=[r.asDict(recursive=True) for r in rows], mode=scope.mode, changes_since=scope.since,
            changed_windows=scope.changed_windows,
        )
        if record:
            self._record(result, per_key.where(F.col("status") != "matched"), start, end, started)
        per_key.unpersist()
        caused.unpersist()
        return result

    def _previous_audit(self):
        if not table_exists(self.spark, RECONCILIATIONS.uri(self.settings)):
            return None
        runs = self.spark.read.format("delta").load(RECONCILIATIONS.uri(self.settings))
        return runs.where(F.col("pipeline") == self.pipeline.name).orderBy(F.col("started_at").desc()).first()

    def _changed_windows(self, table: Table, since: str | None, until: str | None, start, end) -> set[datetime]:
        """Window starts of the range whose rows changed in versions (since, until] (Change Data Feed)."""
        if until is None:
            return set()
        first = int(since) + 1 if since is not None else 0
        if first > int(until):
            return set()
        changes = (self.spark.read.format("delta").option("readChangeFeed", "true")
                   .option("startingVersion", first).option("endingVersion", int(until)).load(table.uri(self.settings)))
        return {row[0] for row in changes.where(tx.in_window_range(start, end)).select("window_start").distinct().collect()}

    def _changed_since_previous_audit(self, pins, start: datetime, end: datetime, watermark) -> Scope:
        """Windows whose speed or batch rows changed since the previous audit, plus those the watermark
        closed since then (an unchanged window that was open then was never compared)."""
        previous = self._previous_audit()
        if previous is None:
            return Scope("incremental", {}, F.lit(True), None, start)
        since = dict(previous.pins)
        changed = self._changed_windows(self.tables.speed, since.get("speed"), pins.get("speed"), start, end)
        changed |= self._changed_windows(self.tables.batch, since.get("batch"), pins.get("batch"), start, end)
        closed_since = F.lit(True) if previous.watermark is None else F.col("window_end") > F.lit(previous.watermark)
        changed_in_range = F.col("window_start").isin(*sorted(changed)) if changed else F.lit(False)
        windows = changed_in_range | closed_since
        # The log holding those windows arrived no earlier than the earliest of them: read from there.
        earliest = [*changed, *([previous.watermark - self.pipeline.window.size_delta] if previous.watermark else [])]
        scoped_start = max(start, min(earliest)) if earliest and previous.watermark else start
        return Scope("incremental", {k: since[k] for k in ("speed", "batch") if k in since}, windows,
                     len(changed), scoped_start)

    def _stream_position(self, pins) -> tuple[datetime | None, DataFrame]:
        """The speed layer's watermark now, and the log files it has processed."""
        progress = _at(self.spark, STREAM_PROGRESS, self.settings, pins["progress"]).where(
            F.col("pipeline") == self.pipeline.name
        )
        max_event_time = progress.agg(F.max("max_event_time")).first()[0]
        watermark = None
        if max_event_time is not None:
            delay = self.settings.watermark_delay or self.pipeline.watermark_delay
            lateness = self.settings.allowed_lateness or self.pipeline.allowed_lateness
            watermark = max_event_time - parse_duration(delay) - parse_duration(lateness)
        files = progress.select(F.explode("source_files").alias("source_file"))
        read_files = files.select(_file_name(F.col("source_file")).alias("file_name")).distinct()
        return watermark, read_files

    def _truth_events(self, start: datetime, end: datetime, pins) -> DataFrame:
        """First copies of the valid events in windows starting in [start, end), from the pinned log."""
        pipeline = self.pipeline
        raw = read_log(self.spark, self.settings, pipeline.topic, earliest_arrival_for(start))
        pinned = raw.where(F.col("written_at") <= F.lit(pins["log_until"]).cast("timestamp"))
        events = tx.first_copies(tx.valid_events(tx.parse_events(pinned, pipeline), pipeline), pipeline)
        return tx.assign_windows(events, pipeline).where(tx.in_window_range(start, end))

    def _with_causes(self, events: DataFrame, pins, read_files: DataFrame) -> DataFrame:
        pipeline = self.pipeline
        bronze = _at(self.spark, self.tables.bronze, self.settings, pins["bronze"]).select(
            pipeline.event_id, F.col("fate").alias("bronze_fate")
        )
        read = read_files.withColumn("file_read", F.lit(True))
        events = events.withColumn("file_name", _file_name(F.col("source_file")))
        cause = (
            F.when(F.col("bronze_fate").isNotNull(), F.col("bronze_fate"))
            .when(F.coalesce(F.col("file_read"), F.lit(False)), F.lit(MISSING))
            .otherwise(F.lit(NOT_YET_READ))
        )
        return (
            events.join(bronze, on=pipeline.event_id, how="left")
            .join(read, on="file_name", how="left")
            .withColumn("cause", cause)
        )

    def _compare(self, caused: DataFrame, pins, start, end, watermark, in_scope: Column) -> DataFrame:
        """Per closed window and key: truth, speed, the on-time part, and the status with causes."""
        pipeline, keys, metrics = self.pipeline, list(self.pipeline.keys), self.pipeline.metric_names
        grouping = ["window_start", "window_end", *keys]
        truth = tx.aggregate_metrics(caused, pipeline).select(
            *grouping, *[F.col(m).alias(f"truth_{m}") for m in metrics]
        )
        on_time = tx.aggregate_metrics(caused.where(F.col("cause") == ON_TIME), pipeline).select(
            *grouping, *[F.col(m).alias(f"on_time_{m}") for m in metrics]
        )
        counts = caused.groupBy(*grouping).agg(
            F.count(F.when(F.col("cause") == LATE, 1)).alias("late_events"),
            F.count(F.when(F.col("cause") == NOT_YET_READ, 1)).alias("not_yet_read_events"),
            F.sort_array(F.collect_list(F.when(F.col("cause") == MISSING, F.col(pipeline.event_id))))
            .alias("unexplained_event_ids"),
        )
        closed_speed = _at(self.spark, self.tables.speed, self.settings, pins["speed"]).where(
            tx.in_window_range(start, end) & in_scope
            & (F.lit(watermark is not None) & (F.col("window_end") <= F.lit(watermark)))
        ).select(*grouping, *[F.col(m).alias(f"speed_{m}") for m in metrics])
        joined = (
            truth.join(closed_speed, on=grouping, how="full")
            .join(on_time, on=grouping, how="left")
            .join(counts, on=grouping, how="left")
        )
        joined = self._with_corrections(joined, pins)

        def value(prefix: str, metric: str):
            return F.coalesce(F.col(f"{prefix}_{metric}"), F.lit(0).cast(joined.schema[f"{prefix}_{metric}"].dataType))

        matched = F.lit(True)
        speed_is_its_on_time_events = F.lit(True)
        for m in metrics:
            matched = matched & (value("truth", m) == value("speed", m))
            speed_is_its_on_time_events = speed_is_its_on_time_events & (value("speed", m) == value("on_time", m))
        no_missing = F.size(F.coalesce(F.col("unexplained_event_ids"), F.array())) == 0
        # An event the stream read but bronze lost is unexplained even where the totals still agree.
        status = (F.when(~no_missing, F.lit("unexplained"))
                  .when(matched, F.lit("matched"))
                  .when(speed_is_its_on_time_events, F.lit("explained"))
                  .otherwise(F.lit("unexplained")))
        causes = F.filter(
            F.array(
                F.when(F.coalesce(F.col("late_events"), F.lit(0)) > 0, F.lit(LATE)),
                F.when(F.coalesce(F.col("not_yet_read_events"), F.lit(0)) > 0, F.lit(NOT_YET_READ)),
                F.when((F.coalesce(F.col("late_events"), F.lit(0)) > 0) & F.col("corrected"), F.lit(CORRECTED)),
            ),
            lambda c: c.isNotNull(),
        )

        def as_map(prefix: str):
            return F.create_map(*[part for m in metrics for part in (F.lit(m), value(prefix, m).cast("string"))])

        residual = F.create_map(*[part for m in metrics
                                  for part in (F.lit(m), (value("speed", m) - value("on_time", m)).cast("string"))])
        return joined.select(
            "window_start", "window_end",
            F.create_map(*[part for k in keys for part in (F.lit(k), F.col(k))]).alias("key"),
            status.alias("status"), causes.alias("causes"), as_map("truth").alias("truth"),
            as_map("speed").alias("speed"), F.coalesce("late_events", F.lit(0)).alias("late_events"),
            F.coalesce("not_yet_read_events", F.lit(0)).alias("not_yet_read_events"),
            F.coalesce("unexplained_event_ids", F.array().cast("array<string>")).alias("unexplained_event_ids"),
            residual.alias("speed_minus_on_time"),
        )

    def _with_corrections(self, joined: DataFrame, pins) -> DataFrame:
        """Flag the (window, key) rows a correction run has recomputed (as of the pinned log)."""
        keys = list(self.pipeline.keys)
        key_json = F.to_json(F.create_map(*[part for k in keys for part in (F.lit(k), F.col(k).cast("string"))]))
        if "corrections" not in pins:
            return joined.withColumn("corrected", F.lit(False))
        corrected = (
            _at(self.spark, CORRECTIONS, self.settings, pins["corrections"])
            .where((F.col("pipeline") == self.pipeline.name) & (F.col("change") == "insert"))
            .select("window_start", "window_end", F.to_json("key").alias("_key_json"))
            .distinct().withColumn("corrected", F.lit(True))
        )
        return (joined.withColumn("_key_json", key_json)
                .join(corrected, on=["window_start", "window_end", "_key_json"], how="left")
                .withColumn("corrected", F.coalesce("corrected", F.lit(False))).drop("_key_json"))

    def _record(self, result: AuditResult, differences: DataFrame, start, end, started: float) -> None:
        for table in (RECONCILIATIONS, DIFFERENCES):
            ensure_table(self.spark, table, self.settings)
        run = {
            "run_id": result.run_id, "pipeline": self.pipeline.name, "range_start": start, "range_end": end,
            "pins": result.pins, "watermark": result.watermark, "windows_compared": result.windows_compared,
            "open_windows": result.open_windows, "matched": result.matched,
            "explained_late": result.explained[LATE], "explained_not_yet_read": result.explained[NOT_YET_READ],
            "explained_corrected": result.explained[CORRECTED],
            "unexplained": len(result.unexplained), "mode": result.mode, "changes_since": result.changes_since,
            "changed_windows": result.changed_windows, "started_at": datetime.fromtimestamp(started, tz=timezone.utc),
            "duration_ms": int((time.time() - started) * 1000),
        }
        differences.select(F.lit(result.run_id).alias("run_id"), F.lit(self.pipeline.name).alias("pipeline"), "*") \
            .write.format("delta").mode("append").save(DIFFERENCES.uri(self.settings))
        # The summary row last: a reconciliation row means its differences are all recorded.
        # mergeSchema: a table made before the incremental mode gains its columns on the first write.
        literal_frame(self.spark, RECONCILIATIONS.columns, [run]).write.format("delta").mode("append") \
            .option("mergeSchema", "true").save(
            RECONCILIATIONS.uri(self.settings)
        )


def render_audit(result: AuditResult) -> str:
    lines = [
        f"audit {result.run_id}: {result.windows_compared} closed (window, key) rows compared, "
        f"{result.open_windows} still open (watermark {result.watermark})",
        f"  matched          {result.matched}",
        f"  explained late   {result.explained[LATE]}",
        f"    of which already corrected {result.explained[CORRECTED]}",
        f"  explained unread {result.explained[NOT_YET_READ]}",
        f"  unexplained      {len(result.unexplained)}",
        f"  pins             {json.dumps(result.pins, sort_keys=True)}",
    ]
    for row in result.unexplained[:20]:
        lines.append(
            f"  UNEXPLAINED {row['window_start']} {row['key']}: truth {row['truth']} speed {row['speed']}; "
            f"speed - on-time events {row['speed_minus_on_time']}; events unaccounted: {row['unexplained_event_ids']}"
        )
    return "\n".join(lines)
