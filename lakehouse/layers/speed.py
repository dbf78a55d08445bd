"""The speed layer: Structured Streaming from the retained log into bronze, quarantine, gold
``__speed`` and ``ops.stream_progress``.

Each micro-batch is handled by one ``foreachBatch`` function that gives every record its fate and
writes all four tables idempotently. The watermark follows Spark's rule (docs/design.md): during batch
n it is the max event time of batches before n, less the watermark delay and allowed lateness.
Its state lives in ``ops.stream_progress``, so a replayed batch sees exactly what it saw before.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.vocabulary import Fate
from lakehouse.dataflow import panes as pn
from lakehouse.dataflow import transforms as tx
from lakehouse.storage.catalog import STREAM_PROGRESS, ensure_pipeline_tables, table_version
from lakehouse.storage.log import log_glob
from lakehouse.storage.ops_tables import append_rows_stamped_once
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse import eventtime
from lakehouse.eventtime import parse_duration
from lakehouse.settings import Settings
from lakehouse.storage.spark import session_confs
from lakehouse.storage.writers import append_stamped_once, upsert_once


def watermark_for(max_event_time_before: datetime | None, watermark_delay: str, allowed_lateness: str) -> datetime | None:
    """The speed layer's watermark for a batch (the rule: :func:`lakehouse.eventtime.watermark`)."""
    return eventtime.watermark(max_event_time_before, parse_duration(watermark_delay), parse_duration(allowed_lateness))


# Set for each micro-batch and restored after it (process_batch), so they leave backfills and SQL
# in the same session untouched.
MICRO_BATCH_CONFS = {
    # Micro-batches are small: adaptive re-planning only adds jobs there (measured: 355 Spark jobs
    # for 9 batches with it, 169 without, 17% less time); backfills keep it for their large shuffles.
    "spark.sql.adaptive.enabled": "false",
    # One shuffle partition: a batch's few thousand rows fit one task, and each table gets one file
    # per batch (per bronze date) instead of up to four, so the tables' logs and scans stay small.
    "spark.sql.shuffle.partitions": "1",
    # Data skipping costs a "Filtering files for query" Spark job per Delta scan, six per batch
    # (bronze dedupe read, pane log read, the MERGE's scans); on these small, young tables it prunes
    # little that the event_date partition filter has not. Files still get their statistics (stats
    # collection is on), so batch jobs and SQL keep skipping. Measured with the steps above, 7
    # batches of 1,000 events side by side: median batch 39.0 s -> 31.7 s, identical tables.
    # The ``__speed`` MERGE turns it back on for itself: there it skips the days of closed windows;
    # so does the dedupe read of bronze, whose date holds a file per batch by the end of the day.
    "spark.databricks.delta.stats.skipping": "false",
}


# For the planning of the dedupe read of bronze only (see _process_batch).
BRONZE_SKIPPING = {"spark.databricks.delta.stats.skipping": "true"}


def _shuffle_partitions(spark: SparkSession) -> int:
    return int(spark.conf.get("spark.sql.shuffle.partitions"))


class SpeedLayer:
    def __init__(self, spark: SparkSession, settings: Settings, pipeline: Pipeline, query_id: str | None = None):
        """``query_id`` names the transactions when batches are fed to ``process_batch`` directly
        (property tests); a started query uses its own, persisted in the checkpoint."""
        self.spark = spark
        self.settings = settings
        self.pipeline = pipeline
        self.tables = ensure_pipeline_tables(spark, settings, pipeline)
        self.watermark_delay = settings.watermark_delay or pipeline.watermark_delay
        self.allowed_lateness = settings.allowed_lateness or pipeline.allowed_lateness
        self._query_id: str | None = query_id
        self._query_started = threading.Event()
        if query_id:
            self._query_started.set()
        # (app id, batch id, max event time through it) of the last batch that committed every
        # write in this process. The batch after it cannot have been attempted before (Spark runs a
        # batch again only after a restart, and then first), so its appends need not look for an
        # earlier attempt's rows, and it need not read the progress table for its watermark.
        self._last_committed: tuple[str, int, datetime | None] | None = None
        # (app id, batch id, the pane state that batch starts from), kept by the batch before.
        self._pane_state: tuple[str, int, DataFrame] | None = None

    # -- the streaming query -------------------------------------------------------------------

    def raw_stream(self) -> DataFrame:
        reader = self.spark.readStream.format("text")
        if self.settings.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", self.settings.max_files_per_trigger)
        return reader.load(log_glob(self.settings, self.pipeline.topic)).select(
            "value", F.col("_metadata.file_path").alias("source_file")
        )

    def start(self, available_now: bool = False):
        writer = (
            self.raw_stream().writeStream.foreachBatch(self.process_batch)
            .option("checkpointLocation", self.settings.speed_checkpoint_uri(self.pipeline.name))
            .queryName(f"speed_{self.pipeline.name}")
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=tx.interval(self.settings.trigger_interval))
        query = writer.start()
        # The query id persists in the checkpoint: it names this stream's transactions, so a
        # restarted query skips what it already wrote, and a new checkpoint starts afresh.
        self._query_id = str(query.id)
        self._query_started.set()
        return query

    @property
    def app_id(self) -> str:
        self._query_started.wait()
        return f"speed:{self.pipeline.name}:{self._query_id}"

    @property
    def carried_pane_state(self) -> DataFrame | None:
        """The pane state the last committed batch handed on to the next (None before the first)."""
        return self._pane_state[2] if self._pane_state else None

    # -- one micro-batch ---------------------------------------------------------------------------

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        # A started query hands each batch its own clone of the session, but a caller of
        # process_batch may hand it any (the property tests hand it theirs): the confs are scoped.
        with session_confs(batch.sparkSession, MICRO_BATCH_CONFS):
            self._process_batch(batch, batch_id)

    def _process_batch(self, batch: DataFrame, batch_id: int) -> None:
        started = time.time()
        spark, pipeline, app_id = batch.sparkSession, self.pipeline, self.app_id
        last_committed, self._last_committed = self._last_committed, None
        # Until this batch commits, a run of it again (after a failure) must look for its own rows.
        first_attempt = last_committed is not None and last_committed[:2] == (app_id, batch_id - 1)
        parsed = tx.parse_events(batch, pipeline).persist()
        try:
            summary = parsed.agg(
                F.count(F.lit(1)).alias("input_rows"),
                F.count("reason").alias("quarantined"),
                F.min(F.when(F.col("reason").isNull(), F.col(pipeline.event_time))).alias("min_event_time"),
                F.max(F.when(F.col("reason").isNull(), F.col(pipeline.event_time))).alias("max_event_time"),
                F.sort_array(F.collect_set("source_file")).alias("source_files"),
            ).first()
            max_before = (last_committed[2] if first_attempt
                          else self._max_event_time_before(spark, app_id, batch_id))
            watermark = watermark_for(max_before, self.watermark_delay, self.allowed_lateness)
            max_through = max((t for t in (max_before, summary["max_event_time"]) if t is not None), default=None)
            # Spark plans a frame when it is cached, so the dedupe read of bronze is planned here: with
            # data skipping on, its event-time bounds skip the day's files outside the horizon. Bronze
            # gets a file per batch and date, and without skipping the read opened every one of the
            # day's (measured on one date: 0.59 s at 24 files, 1.04 s at 720, 2.81 s at 4,000, a day
            # of 5 s triggers being 17,280; with skipping 0.51, 0.52 and 0.79 s).
            with session_confs(spark, BRONZE_SKIPPING):
                fates = self._label_fates(parsed, summary, app_id, batch_id, watermark).persist()
            try:
                counts = self._count_fates(fates)
                next_state = self._write(spark, parsed, fates, summary, counts, app_id, batch_id, watermark,
                                         max_through, first_attempt)
            finally:
                fates.unpersist()
        finally:
            parsed.unpersist()
        progress = {
            "pipeline": pipeline.name, "app_id": app_id, "batch_id": batch_id,
            "started_at": datetime.fromtimestamp(started, tz=timezone.utc),
            "duration_ms": int((time.time() - started) * 1000),
            "input_rows": summary["input_rows"], "quarantined": summary["quarantined"],
            "duplicates": counts.get(Fate.DUPLICATE, 0), "on_time": counts.get(Fate.ON_TIME, 0),
            "late": counts.get(Fate.LATE, 0), "watermark": watermark, "max_event_time": max_through,
            "panes_emitted": counts["speed_rows"], "source_files": summary["source_files"],
        }
        # Written last: a progress row means every write of its batch has committed. One row, so
        # through delta-rs rather than a Spark job (lakehouse.storage.ops_tables).
        append_rows_stamped_once(STREAM_PROGRESS.uri(self.settings), STREAM_PROGRESS.arrow_schema, [progress],
                                 app_id, batch_id, first_attempt=first_attempt)
        self._last_committed = (app_id, batch_id, max_through)
        # Only a batch that committed everything hands its state on; after a failure the next
        # attempt reads the pane log again.
        self._pane_state = (app_id, batch_id + 1, next_state)

    def _count_fates(self, fates: DataFrame) -> dict[str, int]:
        row = fates.agg(
            *[F.count(F.when(F.col("fate") == fate, 1)).alias(fate) for fate in (Fate.ON_TIME, Fate.LATE, Fate.DUPLICATE)],
        ).first()
        return row.asDict()

    def _label_fates(self, parsed: DataFrame, summary, app_id: str, batch_id: int, watermark) -> DataFrame:
        pipeline = self.pipeline
        seen = self._seen_event_ids(parsed.sparkSession, summary, app_id, batch_id)
        return tx.label_fates(tx.valid_events(parsed, pipeline), seen, watermark, pipeline)

    def _seen_event_ids(self, spark: SparkSession, summary, app_id: str, batch_id: int) -> DataFrame:
        """Ids bronze accepted before this batch, within the dedupe horizon of this batch's events."""
        pipeline = self.pipeline
        # The batch's session, not self.spark: the micro-batch confs must apply to this scan too.
        # A read of bronze's latest version, pinned: Spark drops every cached frame that reads a table
        # when a write to that table commits, so the fates (cached, and built on this read) would
        # be computed a second time after this batch's own bronze append. A pinned read is kept.
        uri = self.tables.bronze.uri(self.settings)
        if summary["min_event_time"] is None:  # no valid event: nothing to look up, and no version to pin
            return spark.read.format("delta").load(uri).limit(0).select(pipeline.event_id)
        bronze = spark.read.format("delta").option("versionAsOf", table_version(spark, uri)).load(uri)
        horizon = parse_duration(self.settings.dedupe_horizon)
        low, high = summary["min_event_time"] - horizon, summary["max_event_time"] + horizon
        # A replayed batch must not find its own earlier write: only batches before this one count.
        earlier = ~((F.col("app_id") == app_id) & (F.col("batch_id") >= batch_id))
        in_horizon = F.col(pipeline.event_time).between(low, high) & F.col("event_date").between(
            low.date(), high.date()
        )
        return bronze.where(in_horizon & earlier).select(pipeline.event_id)

    def _max_event_time_before(self, spark: SparkSession, app_id: str, batch_id: int) -> datetime | None:
        """The max event time of the batches this stream committed before ``batch_id``."""
        progress = spark.read.format("delta").load(STREAM_PROGRESS.uri(self.settings))
        earlier = ~((F.col("app_id") == app_id) & (F.col("batch_id") >= batch_id))
        row = progress.where((F.col("pipeline") == self.pipeline.name) & earlier).agg(F.max("max_event_time")).first()
        return row[0]

    def _write(self, spark, parsed, fates, summary, counts, app_id: str, batch_id: int,
               watermark: datetime | None, max_through: datetime | None, first_attempt: bool) -> DataFrame:
        """Write bronze, quarantine, the panes and the speed table, each once per batch; returns
        the pane state the next batch starts from.

        Every write is idempotent, so after a crash the replayed batch redoes only what is missing.
        (Running them in threads was measured: no faster on two cores, the commits are CPU-bound.)
        """
        pipeline, settings, tables = self.pipeline, self.settings, self.tables
        stamp = {"app_id": F.lit(app_id), "batch_id": F.lit(batch_id).cast("long")}
        if counts[Fate.ON_TIME] + counts[Fate.LATE]:
            accepted = fates.where(F.col("fate") != Fate.DUPLICATE).withColumns(
                {"event_date": F.to_date(pipeline.event_time), **stamp, "ingested_at": F.current_timestamp()}
            )
            append_stamped_once(accepted.select(tables.bronze.columns.fieldNames()), tables.bronze.uri(settings),
                                app_id, batch_id, tables.bronze.partition_by, first_attempt)
        if summary["quarantined"]:
            quarantined = tx.quarantined_records(parsed).withColumns({**stamp, "quarantined_at": F.current_timestamp()})
            append_stamped_once(quarantined.select(tables.quarantine.columns.fieldNames()),
                                tables.quarantine.uri(settings), app_id, batch_id, first_attempt=first_attempt)
        on_time_watermark = eventtime.on_time_watermark(max_through, parse_duration(self.watermark_delay))
        state = self._state_before(spark, app_id, batch_id, watermark)
        panes = self._next_panes(state, fates.where(F.col("fate") == Fate.ON_TIME), on_time_watermark).persist()
        try:
            extent = panes.agg(F.count(F.lit(1)).alias("rows"), F.min("window_end").alias("first"),
                               F.max("window_end").alias("last")).first()
            counts["speed_rows"] = extent["rows"]
            if counts["speed_rows"]:
                append_stamped_once(panes.withColumns({**stamp, "emitted_at": F.current_timestamp()})
                                    .select(tables.panes.columns.fieldNames()), tables.panes.uri(settings),
                                    app_id, batch_id, first_attempt=first_attempt)
                upsert_once(
                    spark, panes, tables.speed.uri(settings),
                    match_columns=pn.window_key(pipeline), value_columns=pipeline.metric_names,
                    also_set={"last_batch_id": F.lit(batch_id).cast("long"), "updated_at": F.current_timestamp()},
                    delete_when="is_retraction", app_id=app_id, version=batch_id,
                    # A window matches only rows with its own window_end, so these bounds lose no
                    # match, and the MERGE reads and rewrites only the days these windows are in.
                    target_rows=F.col("t.window_end").between(extent["first"], extent["last"]),
                )
            # Materialised while the panes are still cached, and cut from the lineage of earlier
            # batches so that planning a batch does not grow with the number before it. Coalesced:
            # the union adds the panes' partitions to the state's, which would otherwise grow by
            # one or two partitions, so tasks, per batch.
            next_state = pn.advance_state(state, panes, pipeline)
            return next_state.coalesce(_shuffle_partitions(spark)).localCheckpoint()
        finally:
            panes.unpersist()

    def _state_before(self, spark: SparkSession, app_id: str, batch_id: int, watermark: datetime | None) -> DataFrame:
        """The latest pane of each live window as of the start of this batch.

        Kept in memory from the batch before. After a start, a restart or a failed batch it is read
        from the pane log, a read that grows with the log (a file per batch); the two give the same
        rows (``advance_state`` is ``latest_panes`` applied to the appended panes).
        """
        pipeline = self.pipeline

        def live(frame: DataFrame) -> DataFrame:
            # Windows that ended before the watermark are closed: on-time events cannot reach them,
            # and their ON_TIME pane has fired. A session can still absorb one that ended within a
            # gap of it.
            if watermark is None:
                return frame
            return frame.where(F.col("window_end") > F.lit(watermark - pipeline.window.gap_delta))

        if self._pane_state and self._pane_state[:2] == (app_id, batch_id):
            return live(self._pane_state[2])
        panes = spark.read.format("delta").load(self.tables.panes.uri(self.settings))
        earlier = ~((F.col("app_id") == app_id) & (F.col("batch_id") >= batch_id))
        return pn.latest_panes(live(panes.where(earlier)), pipeline).localCheckpoint()

    def _next_panes(self, state: DataFrame, on_time: DataFrame, on_time_watermark: datetime | None) -> DataFrame:
        """The panes this batch emits."""
        pipeline = self.pipeline
        if pipeline.window.is_session:
            return pn.next_session_panes(state, on_time, on_time_watermark, pipeline)
        return pn.next_panes(state, tx.window_values(on_time, pipeline), on_time_watermark, pipeline)


def run_speed_layer(spark: SparkSession, settings: Settings, pipeline: Pipeline, available_now: bool,
                    timeout: timedelta | None = None) -> None:
    """Run the streaming query until it drains (``available_now``), times out, or is stopped."""
    query = SpeedLayer(spark, settings, pipeline).start(available_now=available_now)
    try:
        query.awaitTermination(timeout.total_seconds() if timeout else None)
    finally:
        if query.isActive:
            query.stop()
    if query.exception():
        raise query.exception()
