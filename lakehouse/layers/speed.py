"""The speed layer: Structured Streaming from the retained log into bronze, quarantine, gold
``__speed`` and ``ops.stream_progress``.

Each micro-batch is handled by one ``foreachBatch`` function that gives every record its fate and
writes all four tables idempotently. The watermark follows Spark's rule (docs/design.md): during batch
n it is the max event time of batches before n, less the watermark delay and allowed lateness.
Its state lives in ``ops.stream_progress``, so a replayed batch sees exactly what it saw before.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lakehouse import eventtime
from lakehouse.dataflow import panes as pn
from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.eventtime import parse_duration
from lakehouse.layers.micro_batch import (
    ACCEPTED_FATES,
    CarriedState,
    CommittedBatch,
    MicroBatch,
    ParsedBatch,
    count_fates,
    fate_count_columns,
    label_batch_fates,
    max_event_time_before,
    next_panes,
    pane_state_before,
    parse_batch,
    progress_row,
)
from lakehouse.layers.seen_ids import IdLookup, SeenIdIndex
from lakehouse.layers.stage_times import StageTimes
from lakehouse.location import Location, Scheme
from lakehouse.settings import Settings, parse_size
from lakehouse.storage import kafka_log
from lakehouse.storage.catalog import STREAM_PROGRESS, PipelineTables, Table, ensure_pipeline_tables
from lakehouse.storage.dimensions import with_dimensions
from lakehouse.storage.faults import check_checkpoint, drop_abandoned_first_offsets, drop_unplanned_file_entries
from lakehouse.storage.log import log_glob
from lakehouse.storage.log_files import log_files, wait_for_line_ends
from lakehouse.storage.ops_tables import append_arrow_stamped_once, append_rows_stamped_once, arrow_at
from lakehouse.storage.spark import session_confs
from lakehouse.storage.writers import append_stamped_once, holds_stamp, upsert_once
from lakehouse.vocabulary import BatchStage, Fate


def watermark_for(
    max_event_time_before: datetime | None, watermark_delay: str, allowed_lateness: str
) -> datetime | None:
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
    # No generated code: every task of a batch's jobs generates Java source for its projections, and
    # each plan for its whole stages, then looks it up in the cache of compiled classes; building the
    # source costs even on a hit, and constants that change batch to batch (batch id, watermark,
    # processing times) make misses Janino compiles. A JFR profile put a quarter of a draining
    # stream's samples in code generation; for a few thousand rows interpreted evaluation costs
    # less: side by side, 8 batches of 4,200 events, median batch 4.09 s -> 3.21 s, drain 32.8 s ->
    # 25.3 s. Backfills, whose jobs read millions of rows, keep generated code, and so does a large
    # micro-batch (code_generation_for).
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # A batch's parse is cached for the few jobs that read it (digests, bronze, quarantine, panes)
    # and dropped at its end: compressing the cache (encoding each column, the raw lines too) costs
    # more than it saves at that lifetime. Side by side, 3 drains of 4 batches of 80,000 events
    # each way, in one JVM, twice in opposite orders: median batch 3.05 -> 2.17 s and 2.46 -> 2.09 s
    # (the parse 1.63 -> 1.12 s and 1.37 -> 1.13 s, bronze's read of it 0.59 -> 0.39 s and 0.49 ->
    # 0.35 s). Uncompressed, the cache holds the batch's lines and their fields as they are, for the
    # length of the batch.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}


# Generated code pays for itself from about this many rows a batch. Measured once the parse's
# generated method could be compiled (docs/design.md, "Performance"), 3 drains of 4 batches each
# way, alternating in one JVM (medians): at 5,000 events a batch interpreted 6.6 s against 7.0-7.5 s,
# at 10,000 a wash (7.8 against 8.2 s), at 15,000 9.3 against 8.8 s, at 20,000 11.2 against 8.2 s.
# Before that compile, the crossing was at about 30,000.
GENERATED_CODE_FROM_ROWS = 10_000
# The parse runs before a batch's lines are counted, so it goes by the bytes the batch reads: the
# same crossing, at the toll traffic's lines of about 260 bytes.
GENERATED_CODE_FROM_BYTES = GENERATED_CODE_FROM_ROWS * 256
GENERATED_CODE = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}


def code_generation_for(input_rows: int | None = None, input_bytes: int | None = None) -> dict[str, str]:
    """The confs that turn generated code back on for a large batch ({} for the usual small one), by
    its rows or, before they are counted, its bytes. A size not known (None) counts as small: a
    calm stream's first batch compiling its parse took seconds, enough to make the stream look
    behind (tests/test_backpressure.py)."""
    large = (input_rows or 0) >= GENERATED_CODE_FROM_ROWS or (input_bytes or 0) >= GENERATED_CODE_FROM_BYTES
    return GENERATED_CODE if large else {}


def planned_bytes(frame: DataFrame) -> int:
    """Spark's estimate of the bytes a frame reads, made when it plans it: for a batch of log files,
    the files' sizes (no job runs)."""
    return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))


# A batch's quarantined lines are appended through the driver while they total at most this much
# (BatchWriter._append_quarantine).
QUARANTINE_TO_DRIVER_BYTES = 8 * 1024 * 1024
# A batch's accepted events are appended to bronze through the driver while its lines total at most
# this much (append_batch_once): about 250,000 events, some 100 MB of Arrow in the driver, several
# times a recovery's first batch at the default caps; a larger backlog batch stays in Spark.
BRONZE_TO_DRIVER_BYTES = 64 * 1024 * 1024

# For the reads of bronze only: the index of accepted ids built after a start, or extended back for
# event times older than it covers (lakehouse.layers.seen_ids). With data skipping on, they skip the
# files outside their event-time range. Bronze gets a file per batch and date, and without skipping a
# read opened every one of the day's (measured on one date: 0.59 s at 24 files, 1.04 s at 720, 2.81 s
# at 4,000, a day of 5 s triggers being 17,280; with skipping 0.51, 0.52 and 0.79 s).
BRONZE_SKIPPING = {"spark.databricks.delta.stats.skipping": "true"}


def log_stream(spark: SparkSession, settings: Settings, pipeline: Pipeline) -> DataFrame:
    """The retained log as a stream of lines, each with the file it came from, at most
    ``max_files_per_trigger`` files or else ``max_bytes_per_trigger`` bytes of files a micro-batch
    (Spark takes one of the two limits); on Kafka, ``max_offsets_per_trigger`` records."""
    if settings.kafka_bootstrap:
        return kafka_log.topic_stream(spark, settings, pipeline.topic)
    reader = spark.readStream.format("text")
    max_bytes = parse_size(settings.max_bytes_per_trigger)
    if settings.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", settings.max_files_per_trigger)
    elif max_bytes:
        reader = reader.option("maxBytesPerTrigger", max_bytes)
    return log_lines(reader.load(log_glob(settings, pipeline.topic)))


def log_lines(text: DataFrame) -> DataFrame:
    """Spark's text source as the speed layer reads it: each line, and the file it came from."""
    return text.select("value", F.col("_metadata.file_path").alias("source_file"))


def whole_files(spark: SparkSession, files: list[str], settings: Settings) -> DataFrame | None:
    """A micro-batch's lines read again, if a file in it was still being written (None if none was):
    Spark fixed each file's length when it planned the batch, so a file whose last line had no
    newline yet was read cut off. Waits until each such file ends its line, or has not changed for
    ``unterminated_file_grace`` (a producer that died: its cut-off line is quarantined), before any
    write (docs/design.md, "Validation")."""
    grace = parse_duration(settings.unterminated_file_grace).total_seconds()
    waited = wait_for_line_ends(files, grace)
    if not waited:
        return None
    print(f"held back a micro-batch for files with no final newline yet: {', '.join(waited)}", file=sys.stderr)
    return log_lines(spark.read.format("text").load(files))


class SpeedLayer:
    def __init__(self, spark: SparkSession, settings: Settings, pipeline: Pipeline, query_id: str | None = None):
        """The speed layer of one pipeline; creates its tables if they are missing.

        Args:
            spark: the session to read and write with.
            settings: where the log, the tables and the checkpoints live.
            pipeline: the pipeline the rows belong to.
            query_id: names the transactions when batches are fed to ``process_batch`` directly (property tests); a
                started query uses its own, persisted in the checkpoint.
        """
        self.spark = spark
        self.settings = settings
        self.pipeline = pipeline
        self.tables = ensure_pipeline_tables(settings, pipeline)
        self.watermark_delay = settings.watermark_delay or pipeline.watermark_delay
        self.allowed_lateness = settings.allowed_lateness or pipeline.allowed_lateness
        self._query_id: str | None = query_id
        self._query_started = threading.Event()
        if query_id:
            self._query_started.set()
        self._planner = BatchPlanner(settings, pipeline, self.tables, self.watermark_delay, self.allowed_lateness)
        self._writer = BatchWriter(settings, pipeline, self.tables, self.watermark_delay)
        self._last_committed: CommittedBatch | None = None
        self._pane_state: CarriedState | None = None
        self._seen_ids: CarriedState | None = None

    # -- the streaming query -------------------------------------------------------------------

    def start(self, available_now: bool = False):
        self._check_checkpoint()
        writer = (
            log_stream(self.spark, self.settings, self.pipeline)
            .writeStream.foreachBatch(self.process_batch)
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

    def _check_checkpoint(self) -> None:
        """A damaged checkpoint, or a missing one while batches have committed, stops the stream
        before Spark reads it (lakehouse.storage.faults): in a local folder or in S3. What a kill
        left while a batch was being planned is deleted, so that the batch is planned as if it had
        not been. Spark's own errors stand for a checkpoint elsewhere (HDFS, say)."""
        uri = self.settings.speed_checkpoint_uri(self.pipeline.name)
        if Location.parse(uri).scheme not in (Scheme.FILE, Scheme.S3):
            return
        mine = ds.field("pipeline") == self.pipeline.name
        progress = arrow_at(STREAM_PROGRESS.uri(self.settings), ["batch_id"], mine, self.settings)
        checkpoint = log_files(self.settings, uri)
        check_checkpoint(checkpoint, progress.num_rows if progress is not None else 0)
        drop_abandoned_first_offsets(checkpoint)
        if not self.settings.kafka_bootstrap:  # Kafka's sources/0 holds its starting offsets instead
            drop_unplanned_file_entries(checkpoint)

    @property
    def dedupe_index_ids(self) -> int | None:
        """The ids in the index of accepted ids the last batch handed on (None: none yet). Read by
        the metrics endpoint's thread: the batch swaps the whole state in one assignment."""
        carried = self._seen_ids
        return len(carried.value) if carried is not None else None

    @property
    def app_id(self) -> str:
        self._query_started.wait()
        return f"speed:{self.pipeline.name}:{self._query_id}"

    # -- one micro-batch ---------------------------------------------------------------------------

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        # A started query hands each batch its own clone of the session, but a caller of
        # process_batch may hand it any (the property tests hand it theirs): the confs are scoped.
        with session_confs(batch.sparkSession, MICRO_BATCH_CONFS):
            self._process_batch(batch, batch_id)

    def _process_batch(self, raw: DataFrame, batch_id: int) -> None:
        started, times = time.time(), StageTimes()
        last_committed, self._last_committed = self._last_committed, None
        planner = self._planner
        with times.stage(BatchStage.READ):
            input_bytes = planner.input_bytes(raw, last_committed)
        with session_confs(raw.sparkSession, code_generation_for(input_bytes=input_bytes)):
            parse = planner.parse(raw, times)
        try:
            with times.stage(BatchStage.READ):
                batch = planner.micro_batch(raw.sparkSession, parse, self.app_id, batch_id, last_committed)
            batch = dataclasses.replace(batch, times=times)
            with session_confs(batch.spark, code_generation_for(batch.summary["input_rows"])):
                counts, next_state, next_index = self._label_and_write(batch)
        finally:
            parse.parsed.unpersist()
        # Written last: a progress row means every write of its batch has committed.
        self._writer.append_progress(batch, counts, started)
        self._last_committed = CommittedBatch(
            batch.app_id, batch_id, batch.max_event_time, batch.summary["input_bytes"]
        )
        # Only a batch that committed everything hands its state on; after a failure the next
        # attempt reads the pane log and bronze again.
        self._pane_state = CarriedState(batch.app_id, batch_id + 1, next_state)
        self._seen_ids = CarriedState(batch.app_id, batch_id + 1, next_index) if next_index is not None else None

    def _label_and_write(self, batch: MicroBatch) -> tuple[dict[str, int], pa.Table, SeenIdIndex | None]:
        """Give the batch's events their fates and write bronze, quarantine and the panes; returns the
        fate counts, and the pane state and index of accepted ids the next batch starts from."""
        fates, lookup = self._planner.label_fates(batch, self._seen_ids)
        try:
            counts = self._writer.append_events(batch, fates)
            state = self._writer.emit_panes(batch, fates, counts, self._pane_state)
            return counts, state, lookup.index_after(batch.max_event_time, self._planner.horizon)
        finally:
            fates.unpersist()


@dataclasses.dataclass(frozen=True)
class BatchPlanner:
    """What a micro-batch will do, decided before any of its writes: its lines parsed, its ids and
    watermark, and its events' fates. It reads (the log, bronze, the progress table) but writes
    nothing; the writes are BatchWriter's."""

    settings: Settings
    pipeline: Pipeline
    tables: PipelineTables
    watermark_delay: str
    allowed_lateness: str

    @property
    def horizon(self) -> timedelta:
        """How far back in event time a batch's ids are looked for in bronze."""
        return parse_duration(self.settings.dedupe_horizon)

    def input_bytes(self, raw: DataFrame, last_committed: CommittedBatch | None) -> int | None:
        """The bytes a batch reads, known before its parse: the sizes of its log files. On Kafka,
        Spark's estimate was not checked against the records' size; there it is the batch before's
        (a stream's batches are alike), and none after a start."""
        if not self.settings.kafka_bootstrap:
            return planned_bytes(raw)
        return last_committed.input_bytes if last_committed else None

    def parse(self, raw: DataFrame, times: StageTimes) -> ParsedBatch:
        """The batch's lines parsed (cached), summed up and their valid events' digests
        (``parse_batch``); read again whole if a file in it was still being written (see
        whole_files). ``times`` gets the parse's seconds, and the wait for such files as reading's."""
        with times.stage(BatchStage.PARSE):
            parse = parse_batch(raw, self.pipeline)
        with times.stage(BatchStage.READ):
            again = whole_files(raw.sparkSession, parse.summary["source_files"], self.settings)
        if again is None:
            return parse
        parse.parsed.unpersist()
        with times.stage(BatchStage.PARSE):
            return parse_batch(again, self.pipeline)

    def micro_batch(
        self, spark: SparkSession, parse: ParsedBatch, app_id: str, batch_id: int, last_committed: CommittedBatch | None
    ) -> MicroBatch:
        """The batch's ids, parse and watermark; until it commits, a run of it again (after a
        failure) must look for its own rows.

        Args:
            spark: the batch's session.
            parse: the batch's parsed lines, their summary and digests.
            app_id: the stream's query id, which names its transactions.
            batch_id: the micro-batch's id.
            last_committed: the batch this layer committed last in this process (None: none yet).
        """
        first_attempt = last_committed is not None and last_committed.precedes(app_id, batch_id)
        max_before = (
            last_committed.max_event_time
            if first_attempt
            else max_event_time_before(self.settings, self.pipeline, app_id, batch_id)
        )
        max_through = max((t for t in (max_before, parse.summary["max_event_time"]) if t is not None), default=None)
        return MicroBatch(
            spark,
            app_id,
            batch_id,
            first_attempt,
            parse.parsed,
            parse.summary,
            parse.digests,
            watermark_for(max_before, self.watermark_delay, self.allowed_lateness),
            max_through,
        )

    def label_fates(self, batch: MicroBatch, seen_ids: CarriedState | None) -> tuple[DataFrame, IdLookup]:
        """The batch's valid events with their fates (``label_batch_fates``), persisted: the caller
        unpersists them once written. Planned with data skipping on, for the reads of bronze; also
        returns how the ids were looked up.

        Args:
            batch: the micro-batch.
            seen_ids: the index of accepted ids the batch before left (None after a start).
        """
        with session_confs(batch.spark, BRONZE_SKIPPING):
            fates, lookup = label_batch_fates(
                batch, self.tables.bronze.uri(self.settings), self.pipeline, self.horizon, seen_ids
            )
            return fates.persist(), lookup  # planned here, with skipping on


@dataclasses.dataclass(frozen=True)
class BatchWriter:
    """The writes of one micro-batch, each idempotent: a replayed batch redoes only what is missing."""

    settings: Settings
    pipeline: Pipeline
    tables: PipelineTables
    watermark_delay: str

    def append_events(self, batch: MicroBatch, fates: DataFrame) -> dict[str, int]:
        """Bronze (accepted events) and quarantine, each appended once per batch, whatever the replays;
        returns the events per fate, counted while bronze is written (a Spark job less than counting
        first), or counted apart when the batch wrote no bronze rows this time (none to count, and
        no job, when every line was quarantined).
        (Running the writes in threads was measured: no faster on two cores, the commits are CPU-bound.)"""
        pipeline, settings, tables = self.pipeline, self.settings, self.tables
        counted = Observation(f"fates_{uuid.uuid4().hex}")  # named as the backfill names its observations
        wrote_bronze = False
        if batch.summary["input_rows"] > batch.summary["quarantined"]:  # valid events, accepted or duplicates
            accepted = (
                fates.observe(counted, *fate_count_columns())
                .where(F.col("fate") != Fate.DUPLICATE)
                .withColumns(
                    {
                        "event_date": F.to_date(pipeline.event_time),
                        **batch.stamp(),
                        "ingested_at": F.current_timestamp(),
                    }
                )
            )
            with batch.times.stage(BatchStage.BRONZE):
                in_driver = batch.summary["input_bytes"] <= BRONZE_TO_DRIVER_BYTES
                wrote_bronze = append_batch_once(batch, accepted, tables.bronze, settings, in_driver)
        if batch.summary["quarantined"]:
            with batch.times.stage(BatchStage.QUARANTINE):
                self._append_quarantine(batch)
        if wrote_bronze:
            return dict(counted.get)
        if batch.summary["input_rows"] == batch.summary["quarantined"]:  # no valid event: nothing to count
            return {str(fate): 0 for fate in ACCEPTED_FATES}
        with batch.times.stage(BatchStage.BRONZE):
            return count_fates(fates)

    def _append_quarantine(self, batch: MicroBatch) -> None:
        """Append the batch's quarantined lines, once. The usual few hundred reach the driver as Arrow
        and delta-rs appends them: Spark's append of a few rows costs a write job and a commit, 0.19 s
        of a 2.2 s batch. Lines over ``QUARANTINE_TO_DRIVER_BYTES`` in all (a flood of bad input)
        stay in Spark."""
        rows = tx.quarantined_records(batch.parsed).withColumns(
            {**batch.stamp(), "quarantined_at": F.current_timestamp()}
        )
        in_driver = batch.summary["quarantined_bytes"] <= QUARANTINE_TO_DRIVER_BYTES
        append_batch_once(batch, rows, self.tables.quarantine, self.settings, in_driver)

    def emit_panes(
        self, batch: MicroBatch, fates: DataFrame, counts: dict[str, int], carried: CarriedState | None
    ) -> pa.Table:
        """Append the batch's panes to the pane log and MERGE them into ``__speed``, once each; returns
        the pane state the next batch starts from.

        Args:
            batch: the micro-batch.
            fates: the batch's valid events with their fates.
            counts: events per fate.
            carried: the pane state the previous batch left (None after a start).
        """
        with batch.times.stage(BatchStage.PANES):
            state, emitted = self._panes_of(batch, fates, carried)
        counts["speed_rows"] = emitted.num_rows
        if emitted.num_rows:
            self._write_panes(batch, emitted)
        with batch.times.stage(BatchStage.PANES):
            return pn.advance_state(state, emitted, self.pipeline)

    def _panes_of(self, batch: MicroBatch, fates: DataFrame, carried: CarriedState | None) -> tuple[pa.Table, pa.Table]:
        """The pane state before the batch, and the panes it emits (stamped), both as Arrow."""
        pipeline, settings, tables = self.pipeline, self.settings, self.tables
        on_time_watermark = eventtime.on_time_watermark(batch.max_event_time, parse_duration(self.watermark_delay))
        state = pane_state_before(batch, carried, tables.panes.uri(settings), pipeline)
        on_time = with_dimensions(batch.spark, settings, pipeline, fates.where(F.col("fate") == Fate.ON_TIME))
        panes = next_panes(batch.spark.createDataFrame(state), on_time, on_time_watermark, pipeline)
        # The panes come to the driver once, as Arrow, and both writes go through delta-rs: a
        # batch's panes are a few hundred rows, and Spark's append and MERGE of them cost two
        # jobs and a snapshot update each (docs/design.md, "Performance"). The next state
        # is computed from them there too.
        emitted = (
            panes.withColumns({**batch.stamp(), "emitted_at": F.current_timestamp()})
            .select(tables.panes.columns.fieldNames())
            .toArrow()
        )
        return state, emitted

    def _write_panes(self, batch: MicroBatch, emitted) -> None:
        """Append the emitted panes (Arrow, stamped) to the pane log, and set ``__speed`` to them."""
        settings, tables = self.settings, self.tables
        with batch.times.stage(BatchStage.PANE_LOG):
            append_arrow_stamped_once(
                tables.panes.uri(settings), emitted, batch.app_id, batch.batch_id, batch.first_attempt, settings
            )
        with batch.times.stage(BatchStage.MERGE):
            self._merge_panes(batch, emitted)

    def _merge_panes(self, batch: MicroBatch, emitted) -> None:
        """Set ``__speed``'s windows to the emitted panes, once (a MERGE through delta-rs)."""
        settings, tables = self.settings, self.tables
        # A pane's batch and emission time are its window's last_batch_id and updated_at.
        as_speed = {"batch_id": "last_batch_id", "emitted_at": "updated_at"}
        upsert_once(
            emitted.rename_columns([as_speed.get(name, name) for name in emitted.column_names]),
            tables.speed.uri(settings),
            match_columns=pn.window_key(self.pipeline),
            value_columns=[*self.pipeline.metric_names, "last_batch_id", "updated_at"],
            delete_when="is_retraction",
            transaction=(batch.app_id, batch.batch_id),
            # By the partitions the table has: one created before it was partitioned by the window's
            # hour keeps the window_date partitions it was created with.
            target_rows=functools.partial(merge_bound, emitted),
            settings=settings,
        )

    def append_progress(self, batch: MicroBatch, counts: dict[str, int], started: float) -> None:
        """Append the batch's ``ops.stream_progress`` row, once; the caller writes it last. One row,
        so through delta-rs rather than a Spark job (lakehouse.storage.ops_tables)."""
        append_rows_stamped_once(
            STREAM_PROGRESS.uri(self.settings),
            STREAM_PROGRESS.arrow_schema,
            [progress_row(batch, self.pipeline, counts, started, time.time())],
            batch.app_id,
            batch.batch_id,
            first_attempt=batch.first_attempt,
            settings=self.settings,
        )


def append_batch_once(batch: MicroBatch, rows: DataFrame, table: Table, settings: Settings, in_driver: bool) -> bool:
    """Append a micro-batch's rows (stamped) to ``table`` in one commit, unless an earlier attempt of
    the batch did; returns whether a job ran over the rows (observations on them are then
    available). ``in_driver``: the rows reach the driver as Arrow and delta-rs appends them, for the
    small batches of a stream keeping up; Spark's append of the same rows cost a write job, a commit
    and a snapshot update (the bronze stage of a 5,000-event batch: 2.07 s in Spark, in the driver
    see bench/README.md, "Where a micro-batch's time goes"). An append with no row commits nothing,
    as Spark's does not. A backlog's batch of up to 256 MB stays in Spark.

    Args:
        batch: the micro-batch (its session, ids and whether it may be a replay).
        rows: the rows, with at least the table's columns.
        table: the table appended to.
        settings: where it lives.
        in_driver: append through the driver and delta-rs rather than Spark.
    """
    uri, stamp, rows = table.uri(settings), (batch.app_id, batch.batch_id), rows.select(table.columns.fieldNames())
    if not in_driver:
        return append_stamped_once(rows, uri, *stamp, table.partition_by, batch.first_attempt)
    arrow = rows.toArrow()
    if arrow.num_rows and (batch.first_attempt or not holds_stamp(batch.spark, uri, *stamp)):
        append_arrow_stamped_once(uri, arrow, *stamp, first_attempt=True, settings=settings)
    return True


def merge_bound(panes, partition_columns: tuple[str, ...]) -> str | None:
    """A condition on ``__speed`` (alias ``t``) that holds for every row a pane can match, on the
    table's partition column, so that the MERGE reads and rewrites only the partitions of the panes'
    windows. A pane matches only rows with its own window_start, so the bound loses no match.

    By hour (``window_hour``): the hours the panes' windows start in, each named (a session batch may
    retract a session hours older than the rest). By date (``window_date``, the layout of a speed
    table created before the hour's): the days they start on. A table partitioned by neither is
    not bounded.

    Args:
        panes: the panes, an Arrow table with ``window_start``.
        partition_columns: the speed table's partition columns, as its log records them.
    """
    import pyarrow.compute as pc

    starts = [_utc(start) for start in pc.unique(panes["window_start"]).to_pylist()]
    if "window_hour" in partition_columns:
        hours = sorted({start.replace(minute=0, second=0, microsecond=0) for start in starts})
        return f"t.window_hour IN ({', '.join(map(timestamp_sql, hours))})"
    if "window_date" in partition_columns:
        return f"t.window_date BETWEEN DATE '{min(starts).date()}' AND DATE '{max(starts).date()}'"
    return None


def timestamp_sql(moment: datetime) -> str:
    """``moment`` as a delta-rs SQL timestamp literal, in UTC (the zone a naive one is read in)."""
    return f"TIMESTAMP '{_utc(moment).isoformat()}'"


def _utc(moment: datetime) -> datetime:
    """``moment`` as a naive UTC datetime: the session time zone the partition values are written in."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def run_speed_layer(
    spark: SparkSession,
    settings: Settings,
    pipeline: Pipeline,
    available_now: bool,
    timeout: timedelta | None = None,
    on_start: Callable[[SpeedLayer], object] | None = None,
) -> None:
    """Run the streaming query until it drains (``available_now``), times out, or is stopped.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline the rows belong to.
        available_now: drain what the log holds, then stop.
        timeout: stop after this long (None: no limit).
        on_start: called with the layer once its query has started (the metrics endpoint watches it).
    """
    layer = SpeedLayer(spark, settings, pipeline)
    query = layer.start(available_now=available_now)
    if on_start is not None:
        on_start(layer)
    try:
        query.awaitTermination(timeout.total_seconds() if timeout else None)
    finally:
        if query.isActive:
            query.stop()
    if query.exception():
        raise query.exception()
