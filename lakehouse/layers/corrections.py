"""Late-data correction runs: fold the events the speed layer marked late into the batch layer.

A run reads the late events bronze gained since the previous run (its Change Data Feed between
two table versions), recomputes exactly the windows they touch through the batch path, writes them
to ``gold.<p>__batch`` and logs every changed (window, key) in ``audit.corrections`` as a
retraction of the value served before and an insertion of the new one. Its cost grows with the
windows touched, not with the tables.

Crash safety: the run first records its plan (the bronze versions it covers) in
``ops.correction_runs``; a run that finds an unfinished plan resumes it with the same versions.
The corrections log is appended once per plan (``txnAppId``/``txnVersion``) and the batch write
replaces exact windows, so a resumed run writes each correction once.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.metric_merges import compared
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.layers.batch import event_span
from lakehouse.settings import Settings
from lakehouse.storage.catalog import (
    BATCH_COVERAGE,
    CORRECTION_RUNS,
    CORRECTIONS,
    ensure_pipeline_tables,
    ensure_table,
    serving_view_sql,
    table_version,
)
from lakehouse.storage.dimensions import with_dimensions
from lakehouse.storage.ops_tables import append_rows, rows_at
from lakehouse.storage.writers import append_once, replace_where
from lakehouse.vocabulary import CorrectionChange, Fate, FeedChange, RunStatus


@dataclasses.dataclass
class CorrectionResult:
    run_id: str
    pipeline: str
    sequence: int
    bronze_from_version: int
    bronze_to_version: int
    late_events: int = 0
    windows_recomputed: int = 0
    rows_changed: int = 0
    resumed: bool = False
    status: str = RunStatus.PLANNED

    def summary(self) -> str:
        if self.bronze_from_version > self.bronze_to_version:
            return f"correction {self.pipeline}: no new bronze versions since the last run; nothing to do"
        return (
            f"correction {self.run_id} ({self.pipeline}, bronze versions {self.bronze_from_version}.."
            f"{self.bronze_to_version}{', resumed' if self.resumed else ''}): {self.late_events} late events, "
            f"{self.windows_recomputed} windows recomputed, {self.rows_changed} (window, key) rows changed"
        )


def _values_map(pipeline: Pipeline, prefix: str) -> Column:
    return F.create_map(
        *[part for m in pipeline.metric_names for part in (F.lit(m), F.col(f"{prefix}{m}").cast("string"))]
    )


def _key_map(pipeline: Pipeline) -> Column:
    return F.create_map(*[part for k in pipeline.keys for part in (F.lit(k), F.col(k).cast("string"))])


def changed_rows(old: DataFrame, new: DataFrame, late_counts: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Per (window, key) whose value changed: its old value (null if none) and new value (null if gone).

    Args:
        old: the values before the correction.
        new: the recomputed values.
        late_counts: late events per window and key.
        pipeline: the pipeline the rows belong to.
    """
    window_key = ["window_start", "window_end", *pipeline.keys]
    metrics = pipeline.metric_names
    # Compared as served: the view estimates a sketch, the recomputed values hold it.
    recomputed = [compared(m, F.col(m.name)).alias(f"_new_{m.name}") for m in pipeline.metrics]
    joined = (
        old.select(*window_key, *[F.col(m).alias(f"_old_{m}") for m in metrics])
        .join(new.select(*window_key, *recomputed), on=window_key, how="full")
        .join(late_counts, on=window_key, how="left")
    )
    differs = F.lit(False)
    for m in metrics:
        differs = differs | ~F.col(f"_old_{m}").eqNullSafe(F.col(f"_new_{m}"))
    return joined.where(differs).fillna(0, subset=["late_events"])


def correction_log_rows(changed: DataFrame, pipeline: Pipeline, run_id: str) -> DataFrame:
    """One 'retract' row (the old value) and one 'insert' row (the new value) per changed row."""
    had_old = F.col(f"_old_{pipeline.metric_names[0]}").isNotNull()
    has_new = F.col(f"_new_{pipeline.metric_names[0]}").isNotNull()
    common = [
        F.lit(run_id).alias("run_id"),
        F.lit(pipeline.name).alias("pipeline"),
        "window_start",
        "window_end",
        _key_map(pipeline).alias("key"),
    ]
    retract = changed.where(had_old).select(
        *common,
        F.lit(CorrectionChange.RETRACT).alias("change"),
        _values_map(pipeline, "_old_").alias("values"),
        "late_events",
    )
    insert = changed.where(has_new).select(
        *common,
        F.lit(CorrectionChange.INSERT).alias("change"),
        _values_map(pipeline, "_new_").alias("values"),
        "late_events",
    )
    return (
        retract.unionByName(insert)
        .withColumn("corrected_at", F.current_timestamp())
        .select(CORRECTIONS.columns.fieldNames())
    )


def correction_span(pipeline: Pipeline, first: datetime, last: datetime) -> tuple[datetime, datetime]:
    """Event times that can share a window with the late events (sessions: the lookback)."""
    window = pipeline.window
    if window.is_session:
        return event_span(pipeline, first, last)
    return first - window.size_delta, last + window.size_delta


def correction_scope(late_windows: DataFrame, pipeline: Pipeline) -> DataFrame:
    """What a run recomputes: whole windows (every key) for fixed windows; for sessions, every
    session of the touched keys in the span (their bounds move, so they cannot be named first)."""
    if pipeline.window.is_session:
        return late_windows.select(*pipeline.keys).distinct()
    return late_windows.select("window_start").distinct()


RUN_COLUMNS = ["sequence", "run_id", "bronze_from_version", "bronze_to_version", "status"]


def latest_run(runs: list[dict]) -> dict | None:
    """The pipeline's latest correction run from its rows in ops.correction_runs (a run has a row
    when planned and another when it succeeded), with ``done`` telling whether it succeeded; None
    before the first run. Of runs that raced to the same sequence, a finished one counts."""
    if not runs:
        return None
    done = {row["run_id"] for row in runs if row["status"] == RunStatus.SUCCEEDED}
    latest = max(runs, key=lambda row: (row["sequence"], row["run_id"] in done))
    return {**latest, "done": latest["run_id"] in done}


class CorrectionRun:
    def __init__(self, spark: SparkSession, settings: Settings, pipeline: Pipeline):
        self.spark, self.settings, self.pipeline = spark, settings, pipeline
        self.tables = ensure_pipeline_tables(settings, pipeline)
        for table in (CORRECTIONS, CORRECTION_RUNS):
            ensure_table(table, settings)

    def run(self) -> CorrectionResult:
        result = self._plan()
        if result.bronze_from_version > result.bronze_to_version:
            return result
        late = self._late_events(result).persist()
        try:
            self._correct(late, result)
        finally:
            late.unpersist()
        result.status = RunStatus.SUCCEEDED
        self._record(result)
        return result

    # -- plan ----------------------------------------------------------------------------------

    def _plan(self) -> CorrectionResult:
        runs = rows_at(
            CORRECTION_RUNS.uri(self.settings), RUN_COLUMNS, [("pipeline", "=", self.pipeline.name)], self.settings
        )
        latest = latest_run(runs)
        if latest is not None and not latest["done"]:
            return CorrectionResult(
                latest["run_id"],
                self.pipeline.name,
                latest["sequence"],
                latest["bronze_from_version"],
                latest["bronze_to_version"],
                resumed=True,
            )
        bronze_version = table_version(self.spark, self.tables.bronze.uri(self.settings))
        sequence = latest["sequence"] + 1 if latest is not None else 0
        from_version = latest["bronze_to_version"] + 1 if latest is not None else 0
        result = CorrectionResult(str(uuid.uuid4()), self.pipeline.name, sequence, from_version, bronze_version)
        if from_version <= bronze_version:
            self._record(result)
        return result

    def _record(self, result: CorrectionResult) -> None:
        """A row of the run's life in ops.correction_runs, through delta-rs: a bookkeeping row
        through Spark cost a job and a snapshot update (docs/design.md, "Performance")."""
        now = datetime.now(UTC)
        row = {
            **dataclasses.asdict(result),
            "started_at": now,
            "finished_at": now if result.status == RunStatus.SUCCEEDED else None,
        }
        append_rows(CORRECTION_RUNS.uri(self.settings), CORRECTION_RUNS.arrow_schema, [row], self.settings)

    # -- the work -------------------------------------------------------------------------------

    def _late_events(self, result: CorrectionResult) -> DataFrame:
        changes = (
            self.spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", result.bronze_from_version)
            .option("endingVersion", result.bronze_to_version)
            .load(self.tables.bronze.uri(self.settings))
        )
        late = changes.where((F.col("_change_type") == FeedChange.INSERT) & (F.col("fate") == Fate.LATE))
        return with_dimensions(self.spark, self.settings, self.pipeline, late.select(*self.pipeline.field_names))

    def _correct(self, late: DataFrame, result: CorrectionResult) -> None:
        pipeline = self.pipeline
        window_key = ["window_start", "window_end", *pipeline.keys]
        late_windows = tx.assign_windows(late, pipeline)
        late_counts = late_windows.groupBy(*window_key).agg(F.count(F.lit(1)).alias("late_events"))
        bounds = late.agg(
            F.count(F.lit(1)).alias("n"),
            F.min(pipeline.event_time).alias("first"),
            F.max(pipeline.event_time).alias("last"),
        ).first()
        result.late_events = bounds["n"]
        if not bounds["n"]:
            return
        earliest, latest = correction_span(pipeline, bounds["first"], bounds["last"])
        scope = correction_scope(late_windows, pipeline)
        in_scope = F.col("window_start").between(earliest, latest)
        new = self._recompute(earliest, latest, scope).where(in_scope).persist()
        try:
            old = self.spark.sql(self._serving_view()).where(in_scope).join(scope, on=scope.columns, how="left_semi")
            # Cached: counted, then read by both halves of the log (its retractions and insertions).
            changed = changed_rows(old, new, late_counts, pipeline).persist()
            try:
                result.rows_changed = changed.count()
                result.windows_recomputed = new.select(*window_key).count()
                log_rows = correction_log_rows(changed, pipeline, result.run_id)
                # The log first: if the run dies before the batch write, the resumed run computes the
                # same old values and Delta skips this append (same txnVersion).
                append_once(log_rows, CORRECTIONS.uri(self.settings), f"correct:{pipeline.name}", result.sequence)
            finally:
                changed.unpersist()
            rows = new.withColumns({"run_id": F.lit(result.run_id), "updated_at": F.current_timestamp()})
            replace_where(
                rows.select(self.tables.batch.columns.fieldNames()),
                self.tables.batch.uri(self.settings),
                self._replace_condition(scope, earliest, latest),
            )
        finally:
            new.unpersist()

    def _serving_view(self) -> str:
        """What the serving view shows now, over the tables by location: the catalog is left as it is."""
        tables, settings = self.tables, self.settings
        return serving_view_sql(
            self.pipeline,
            speed=tables.speed.by_location(settings),
            batch=tables.batch.by_location(settings),
            coverage=BATCH_COVERAGE.by_location(settings),
        )

    def _recompute(self, earliest: datetime, latest: datetime, scope: DataFrame) -> DataFrame:
        """The batch layer's values for the scope, from every accepted event in bronze."""
        pipeline = self.pipeline
        bronze = self.spark.read.format("delta").load(self.tables.bronze.uri(self.settings))
        in_span = F.col("event_date").between(earliest.date(), latest.date()) & F.col(pipeline.event_time).between(
            earliest, latest
        )
        events = with_dimensions(
            self.spark, self.settings, pipeline, bronze.where(in_span).select(*pipeline.field_names)
        )
        if pipeline.window.is_session:
            events = events.join(scope, on=list(pipeline.keys), how="left_semi")
        return tx.window_values(events, pipeline).join(scope, on=scope.columns, how="left_semi")

    def _replace_condition(self, scope: DataFrame, earliest: datetime, latest: datetime) -> str:
        rows = scope.collect()
        if not self.pipeline.window.is_session:
            starts = ", ".join(tx.sql_timestamp(row["window_start"]) for row in rows)
            return f"window_start IN ({starts})"
        (key,) = self.pipeline.keys  # session pipelines are keyed by one column
        values = ", ".join("'" + str(row[key]).replace("'", "''") + "'" for row in rows)
        return (
            f"{key} IN ({values}) AND window_start BETWEEN {tx.sql_timestamp(earliest)} AND {tx.sql_timestamp(latest)}"
        )
