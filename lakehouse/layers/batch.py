"""The batch layer: recompute ``gold.<p>__batch`` for an exact event-time range.

Input is bronze (every accepted event, late ones included) or the raw retained log (after a parser
fix, say). The plan uses the speed layer's transforms; the write replaces exactly the windows that
start in each chunk of the range, atomically (through delta-rs, or Spark's ``replaceWhere`` for a
large chunk), so a re-run or a retry after a crash leaves the same table.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pyarrow.compute as pc
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.fingerprints import (
    bronze_code_digest,
    bronze_fingerprint,
    fingerprint_digest,
    fingerprint_totals,
    input_fingerprint,
    parse_bronze_fingerprint,
)
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.errors import LakehouseError
from lakehouse.eventtime import (
    earliest_arrival_for,
    first_event_time,
    format_instant,
    is_on_boundary,
    parse_duration,
    parse_instant,
)
from lakehouse.settings import Settings
from lakehouse.storage.archive import read_log
from lakehouse.storage.catalog import (
    BACKFILL_RUNS,
    BATCH_COVERAGE,
    PipelineTables,
    ensure_pipeline_tables,
    pipeline_tables,
    require_table,
    table_version,
)
from lakehouse.storage.dimensions import with_dimensions
from lakehouse.storage.frames import literal_frame
from lakehouse.storage.log import partition_uris
from lakehouse.storage.ops_tables import append_rows
from lakehouse.storage.spark import to_arrow
from lakehouse.storage.writers import replace_rows, replace_where
from lakehouse.vocabulary import DEFAULT_CHUNK, DEFAULT_REPROCESS, DEFAULT_SOURCE, Reprocess, RunStatus, Source, choices

# A change-feed read opens every commit in its range, one after another on the driver: at the
# stream's 5 s trigger a day of bronze is 17,280 commits, which costs more than recomputing a chunk
# (a local commit file takes about a millisecond, one on object storage tens). Past this many
# commits since a chunk's version, a skip run recomputes the chunk instead of reading the feed.
CHANGE_FEED_CHECK_LIMIT = 1000
# A chunk's windows (one row per window and key) pass through the driver as Arrow up to this many
# rows, about 10 MB, and delta-rs replaces them in ``__batch``: Spark's replaceWhere cost about
# 1 s a chunk in a warm session (a write job, a snapshot rebuilt after the commit, its file
# listing), delta-rs's about 0.05 s. A day of the bench's toll traffic is 21,416 rows.
DRIVER_CHUNK_ROWS = 100_000
log = logging.getLogger(__name__)


def parse_range(start_text: str, end_text: str, pipeline: Pipeline) -> tuple[datetime, datetime]:
    """A non-empty event-time range whose ends fall on window boundaries."""
    start, end = parse_instant(start_text, "start"), parse_instant(end_text, "end")
    if end <= start:
        raise LakehouseError(f"the range [{start_text}, {end_text}) is empty or reversed: end must be after start")
    slide = pipeline.window.slide_delta
    for name, moment in (("start", start), ("end", end)):
        if not is_on_boundary(moment, slide):
            raise LakehouseError(
                f"{name} {moment.isoformat()} is not on a window boundary of {pipeline.name} "
                f"(windows slide by {pipeline.window.slide or pipeline.window.size})"
            )
    return start, end


def split_range(start: datetime, end: datetime, chunk: timedelta) -> list[tuple[datetime, datetime]]:
    chunks, cursor = [], start
    while cursor < end:
        chunks.append((cursor, min(cursor + chunk, end)))
        cursor += chunk
    return chunks


def event_span(pipeline: Pipeline, start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """The event times that can fall in windows starting in ``[start, end)``.

    A session that starts in the range can run on past its end, and is only known to start there
    if no event came less than a gap before: both sides reach ``session_lookback`` further.
    """
    window = pipeline.window
    if window.is_session:
        return first_event_time(pipeline, start), end + parse_duration(pipeline.session_lookback)
    return first_event_time(pipeline, start), end - window.slide_delta + window.size_delta


def events_between(pipeline: Pipeline, first_event: datetime, last_event: datetime) -> Column:
    """Events with event times in ``[first_event, last_event)``."""
    event_time = F.col(pipeline.event_time)
    return (event_time >= tx.timestamp_literal(first_event)) & (event_time < tx.timestamp_literal(last_event))


Chunk = tuple[datetime, datetime]


@dataclasses.dataclass(frozen=True)
class ChunkInputs:
    """What is known of a chunk's inputs before it is recomputed."""

    unchanged: bool  # the chunk's last recomputation read the same inputs with the same code: skip it
    fingerprint: str | None  # None: digest the inputs while recomputing them


@dataclasses.dataclass
class BackfillResult:
    run_id: str
    pipeline: str
    source: str
    range_start: datetime
    range_end: datetime
    chunks: int = 0
    events_read: int = 0
    quarantined: int = 0
    duplicates: int = 0
    events_used: int = 0
    rows_written: int = 0
    status: str = RunStatus.RUNNING
    error: str | None = None
    chunks_skipped: int = 0
    label: str | None = None  # what asked: an Airflow run and chunk, say
    triggered_by: str | None = None  # who asked: an Airflow user, say


class ProgressBar:
    """A one-line progress bar on a terminal; silent otherwise (logs, Airflow)."""

    def __init__(self, total: int, label: str, stream=sys.stderr):
        self.total, self.label, self.stream = total, label, stream
        self.enabled = hasattr(stream, "isatty") and stream.isatty()

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        width = 30
        filled = int(width * done / max(self.total, 1))
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} chunks")
        if done == self.total:
            self.stream.write("\n")
        self.stream.flush()


class BatchLayer:
    def __init__(self, spark: SparkSession, settings: Settings, pipeline: Pipeline):
        self.spark = spark
        self.settings = settings
        self.pipeline = pipeline
        self.tables = ensure_pipeline_tables(settings, pipeline)
        self._chunks = ChunkWriter(spark, settings, pipeline, self.tables)

    def backfill(
        self,
        start: datetime,
        end: datetime,
        source: str = DEFAULT_SOURCE,
        chunk: str = DEFAULT_CHUNK,
        on_chunk: Callable[[int, int], None] | None = None,
        reprocess: str = DEFAULT_REPROCESS,
        label: str | None = None,
        triggered_by: str | None = None,
    ) -> BackfillResult:
        """Recompute each chunk of ``[start, end)``; with ``reprocess="skip"`` a chunk whose inputs have
        the fingerprint its last recomputation recorded is left as it is.

        Args:
            start: first window start to recompute.
            end: end of the range (exclusive).
            source: ``bronze`` or ``log`` (see :class:`Source`).
            chunk: the length of each recomputed, committed piece.
            on_chunk: called after each chunk with (chunks done, chunks in all).
            reprocess: ``redo`` every chunk, or ``skip`` those whose inputs are unchanged.
            label: names the run in ``ops.batch_coverage`` (an Airflow run id, say).
            triggered_by: who requested it, recorded in ``ops.backfill_runs``.
        """
        if source not in choices(Source):
            raise LakehouseError(f"unknown source {source!r}: use one of {', '.join(Source)}")
        if reprocess not in choices(Reprocess):
            raise LakehouseError(f"unknown reprocess {reprocess!r}: use one of {', '.join(Reprocess)}")
        chunk_size = parse_duration(chunk)
        if chunk_size <= timedelta(0) or chunk_size % self.pipeline.window.slide_delta:
            raise LakehouseError(f"chunk {chunk} must be a positive multiple of the window slide")
        result = BackfillResult(
            str(uuid.uuid4()), self.pipeline.name, source, start, end, label=label, triggered_by=triggered_by
        )
        started = time.time()
        cached: list[DataFrame] = []
        try:
            events, bronze_version = self._events(source, start, end, result, cached)
            chunks = split_range(start, end, chunk_size)
            inputs = self._chunk_inputs(events, chunks, source, bronze_version, skip=reprocess == "skip")
            for done, chunk in enumerate(chunks, start=1):
                if inputs[chunk].unchanged:
                    result.chunks_skipped += 1
                else:
                    self._chunks.recompute(events, chunk, result, inputs[chunk].fingerprint)
                result.chunks = done - result.chunks_skipped
                if on_chunk:
                    on_chunk(done, len(chunks))
            result.status = RunStatus.SUCCEEDED
        except Exception as error:
            result.status, result.error = RunStatus.FAILED, f"{type(error).__name__}: {error}"[:2000]
            raise
        finally:
            for frame in cached:  # the session may live on (Airflow worker, demo, tests): free the cache
                frame.unpersist()
            record_run(self.settings, result, started)
        return result

    def _events(
        self, source: str, start: datetime, end: datetime, result: BackfillResult, cached: list[DataFrame]
    ) -> tuple[DataFrame, int | None]:
        """Valid, de-duplicated events that can fall in windows starting in [start, end), and the
        version of bronze they come from (None from the log)."""
        pipeline = self.pipeline
        first_event, last_event = event_span(pipeline, start, end)
        if source == "bronze":
            uri = require_table(
                self.spark,
                self.tables.bronze,
                self.settings,
                "run the speed layer first, or backfill with --source log",
            )
            # Read at a pinned version: a chunk's fingerprint names it (see bronze_fingerprint).
            version = table_version(self.spark, uri)
            bronze = self.spark.read.format("delta").option("versionAsOf", version).load(uri)
            events = bronze.where(in_bronze_span(self.pipeline, first_event, last_event)).select(*pipeline.field_names)
            return with_dimensions(self.spark, self.settings, pipeline, events), version
        parsed = tx.parse_events(self._log(earliest_arrival_for(first_event)), pipeline)
        # Counted while the log is read for the events, not in a second pass over the raw JSON.
        log_counts = Observation("log_counts")
        observed = parsed.observe(log_counts, F.count(F.lit(1)).alias("read"), F.count("reason").alias("quarantined"))
        numbered = tx.number_copies(tx.valid_events(observed, pipeline), pipeline)
        # Cached without the line's text and file, which only ordered the copies. At 1M events the
        # pass that numbers and caches went 28.8 s -> 26.9 s, the backfill 1.50x -> 1.32x the bare job.
        in_range = numbered.where(events_between(pipeline, first_event, last_event))
        in_range_copies = in_range.select(*pipeline.field_names, "copy_number").persist()
        cached.append(in_range_copies)
        result.duplicates = in_range_copies.where(F.col("copy_number") > 1).count()
        counted = log_counts.get
        result.events_read, result.quarantined = counted["read"], counted["quarantined"]
        events = in_range_copies.where(F.col("copy_number") == 1).select(*pipeline.field_names)
        # Joined here, so the log's fingerprint of a chunk covers the dimension's attributes too.
        return with_dimensions(self.spark, self.settings, pipeline, events), None

    def _log(self, arrived_from: datetime) -> DataFrame:
        """The log from ``arrived_from``'s hour on. A file log with nothing there is refused: the
        pipeline's events were never written to this log (or it is the wrong log), and counts
        observed over no file at all cannot be read back."""
        topic = self.pipeline.topic
        if not self.settings.kafka_bootstrap and not partition_uris(self.spark, self.settings, topic, arrived_from):
            raise LakehouseError(
                f"the log {self.settings.pipeline_log_uri(topic)} holds no file that arrived from "
                f"{arrived_from:%Y-%m-%dT%H}:00Z on: nothing to recompute {self.pipeline.name} from"
            )
        return read_log(self.spark, self.settings, topic, arrived_from)

    def _chunk_inputs(
        self, events: DataFrame, chunks: list[Chunk], source: str, bronze_version: int | None, skip: bool
    ) -> dict[Chunk, ChunkInputs]:
        """Each chunk's input fingerprint if it is known before recomputing, and whether it is the one
        the chunk's last recomputation recorded (only asked with ``skip``)."""
        pipeline = self.pipeline
        if bronze_version is not None:
            # From bronze, the version read and the code name the inputs (bronze_fingerprint).
            fingerprint = bronze_fingerprint(pipeline, bronze_version)
            # Bronze's change feed cannot tell that a dimension changed: a pipeline with a join redoes.
            skips = skip and pipeline.joins is None
            unchanged = (
                bronze_unchanged(self.spark, self.settings, pipeline, chunks, bronze_version) if skips else set()
            )
            return {chunk: ChunkInputs(chunk in unchanged, fingerprint) for chunk in chunks}
        if not skip:
            return {chunk: ChunkInputs(False, None) for chunk in chunks}
        # From the log, whether to recompute at all depends on the digest: a pass of its own per chunk
        # (over the cached events).
        last = last_fingerprints(self.spark, self.settings, pipeline, chunks)
        inputs = {}
        for chunk in chunks:
            fingerprint = input_fingerprint(self._chunks.events_of(events, chunk), pipeline, source)
            inputs[chunk] = ChunkInputs(last.get(chunk) == fingerprint, fingerprint)
        return inputs


@dataclasses.dataclass(frozen=True)
class ChunkWriter:
    """Recomputes one chunk of a backfill and replaces its windows in ``__batch``, in one commit."""

    spark: SparkSession
    settings: Settings
    pipeline: Pipeline
    tables: PipelineTables

    def events_of(self, events: DataFrame, chunk: Chunk) -> DataFrame:
        """Exactly the events that can reach the chunk's windows (see event_span)."""
        return events.where(events_between(self.pipeline, *event_span(self.pipeline, *chunk)))

    def recompute(self, events: DataFrame, chunk: Chunk, result: BackfillResult, fingerprint: str | None) -> None:
        """Recompute one chunk's windows from ``events``, replace them in ``__batch`` and record the coverage.

        Args:
            events: the events of the whole run, filtered here to the chunk's.
            chunk: (start, end) of the chunk.
            result: the run's result, updated with this chunk's counts.
            fingerprint: the chunk's input fingerprint if already known (None: digested while reading).
        """
        pipeline = self.pipeline
        chunk_events = unobserved = self.events_of(events, chunk)
        fingerprinted = None
        if fingerprint is None:
            # Digested while the recomputation reads the events: one pass over the input, not two (an
            # A/B of the bench's one-day backfill is in the README).
            fingerprinted = Observation(f"fingerprint_{uuid.uuid4().hex}")
            chunk_events = chunk_events.observe(fingerprinted, *fingerprint_totals(chunk_events))
        # Events counted once across the run's chunks, though hopping windows share them.
        gold = tx.window_values(chunk_events, pipeline, count_events_before=result.range_end)
        gold = gold.where(tx.in_window_range(*chunk))
        rows = gold.withColumns({"run_id": F.lit(result.run_id), "updated_at": F.current_timestamp()})
        rows_written, events_used = self._replace(rows, chunk)
        if fingerprinted and rows_written:
            fingerprint = fingerprint_digest(fingerprinted.get, pipeline, result.source)
        elif fingerprinted:
            # No windows, maybe no events: Spark drops the observation of an input it finds empty
            # (adaptive execution's empty-relation propagation), so count again; it is little.
            fingerprint = input_fingerprint(unobserved, pipeline, result.source)
        result.rows_written += rows_written
        result.events_used += events_used
        self._record_coverage(chunk, result, fingerprint)

    def _replace(self, rows: DataFrame, chunk: Chunk) -> tuple[int, int]:
        """Replace the chunk's windows in ``__batch`` with ``rows`` (which also hold each window's
        ``events``, not written), in one commit; the rows written and the events they count.

        Up to DRIVER_CHUNK_ROWS rows reach the driver once, as Arrow, and delta-rs replaces the
        chunk's windows; a larger chunk is written by Spark (``chunk_replacement``), computed again."""
        uri, columns = self.tables.batch.uri(self.settings), self.tables.batch.columns.fieldNames()
        collected = to_arrow(rows.select(*columns, "events").limit(DRIVER_CHUNK_ROWS + 1))
        if collected.num_rows <= DRIVER_CHUNK_ROWS:
            replace_rows(collected.drop_columns(["events"]), uri, chunk_predicate(chunk), self.settings)
            return collected.num_rows, pc.sum(collected["events"]).as_py() or 0
        # Counted as the write computes the rows: a count of its own, on the rows cached, cost three
        # Spark jobs (0.3 s of the bench's one-day backfill at 10M events).
        written = Observation(f"written_{uuid.uuid4().hex}")
        counted = rows.observe(written, F.count(F.lit(1)).alias("rows"), F.sum("events").alias("events"))
        replace_where(*chunk_replacement(self.spark, uri, counted.select(*columns), chunk))
        totals = written.get
        return totals["rows"], totals["events"] or 0

    def _record_coverage(self, chunk: Chunk, result: BackfillResult, fingerprint: str) -> None:
        """The chunk's ``ops.batch_coverage`` row: the serving view trusts the batch value there."""
        pipeline, settings = self.pipeline, self.settings
        chunk_start, chunk_end = chunk
        # One row, so through delta-rs rather than a Spark job (lakehouse.storage.ops_tables).
        append_rows(
            BATCH_COVERAGE.uri(settings),
            BATCH_COVERAGE.arrow_schema,
            [
                {
                    "pipeline": pipeline.name,
                    "range_start": chunk_start,
                    "range_end": chunk_end,
                    "run_id": result.run_id,
                    "source": result.source,
                    "written_at": datetime.now(UTC),
                    "input_fingerprint": fingerprint,
                    "definition": pipeline.definition,
                }
            ],
            settings,
        )


def _chunk_name(chunk: Chunk) -> str:
    return f"[{chunk[0].isoformat()}, {chunk[1].isoformat()})"


def in_bronze_span(pipeline: Pipeline, first_event: datetime, last_event: datetime) -> Column:
    """Bronze rows with event times in ``[first_event, last_event)``, by partition and by value."""
    on_dates = F.col("event_date").between(first_event.date(), last_event.date())
    return on_dates & events_between(pipeline, first_event, last_event)


def chunk_predicate(chunk: Chunk) -> str:
    """The windows starting in ``chunk`` (naive UTC), as a delta-rs condition. delta-rs skips the
    files whose statistics put every ``window_start`` outside it, so the other days' files are not read."""
    chunk_start, chunk_end = chunk
    return f"window_start >= '{format_instant(chunk_start)}' AND window_start < '{format_instant(chunk_end)}'"


def chunk_replacement(spark: SparkSession, batch_uri: str, rows: DataFrame, chunk: Chunk) -> tuple[DataFrame, str, str]:
    """``rows`` as a write that replaces exactly the windows starting in ``chunk``: the rows, the
    table and the ``replaceWhere`` condition.

    The condition names whole ``window_date`` partitions, and the rows of those days outside the
    chunk are written back with the chunk's. A condition on ``window_start`` would make Delta
    delete row by row: find the files holding such rows, rewrite them, and write the deleted rows
    to the change feed (three Spark jobs; 2.0 s against 1.1 s per write in the bench's one-day
    backfill, measured side by side); whole partitions are removed from the log alone. The rows
    kept are read inside the write's transaction (Delta scans the table it writes at the
    transaction's snapshot), so a change to them that commits first fails the write and
    ``replace_where`` runs it again, on the new rows. A chunk of whole days keeps none.

    Args:
        spark: the session to read and write with.
        batch_uri: the ``__batch`` table's location.
        rows: the chunk's recomputed rows.
        chunk: (start, end) of the window starts the rows replace.
    """
    chunk_start, chunk_end = chunk
    table = spark.read.format("delta").load(batch_uri)
    if "window_date" not in table.columns:  # a table from before the gold tables were partitioned
        return (
            rows,
            batch_uri,
            (f"window_start >= {tx.sql_timestamp(chunk_start)} AND window_start < {tx.sql_timestamp(chunk_end)}"),
        )
    first_day, last_day = chunk_start.date(), (chunk_end - timedelta(microseconds=1)).date()
    whole_days = chunk_start.time() == chunk_end.time() == datetime.min.time()
    if not whole_days:
        on_days = F.col("window_date").between(first_day, last_day)
        kept = table.where(on_days & ~tx.in_window_range(chunk_start, chunk_end))
        rows = rows.unionByName(kept.select(*rows.columns))
    return rows, batch_uri, f"window_date >= DATE'{first_day}' AND window_date <= DATE'{last_day}'"


def bronze_versions_read(fingerprints: dict[Chunk, str], pipeline: Pipeline, version: int) -> dict[Chunk, int]:
    """The bronze version each chunk's last recomputation read, for the chunks worth checking: read by
    the same code, from this bronze, and fewer than ``CHANGE_FEED_CHECK_LIMIT`` commits ago."""
    code = bronze_code_digest(pipeline)
    since: dict[Chunk, int] = {}
    for chunk, fingerprint in fingerprints.items():
        recorded = parse_bronze_fingerprint(fingerprint)
        if recorded is None or recorded[1] != code or recorded[0] > version:  # > : bronze was recreated
            continue
        if version - recorded[0] > CHANGE_FEED_CHECK_LIMIT:
            log.info(
                "bronze has %d commits since version %d, more than a change-feed check is worth: recomputing %s",
                version - recorded[0],
                recorded[0],
                _chunk_name(chunk),
            )
            continue
        since[chunk] = recorded[0]
    return since


def bronze_unchanged(
    spark: SparkSession, settings: Settings, pipeline: Pipeline, chunks: list[Chunk], version: int
) -> set[Chunk]:
    """The chunks whose rows in bronze at ``version`` are those their last recomputation read, by
    the same code: bronze's change feed since then holds none of their events. Compaction changes
    no data, so it leaves no trace there. One read of the feed answers for every chunk.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline the rows belong to.
        chunks: the chunks to check, as (start, end).
        version: the bronze version the new run reads.
    """
    since = bronze_versions_read(last_fingerprints(spark, settings, pipeline, chunks), pipeline, version)
    unchanged = {chunk for chunk, read in since.items() if read == version}
    to_check = {chunk: read for chunk, read in since.items() if read < version}
    if not to_check:
        return unchanged
    spans = {chunk: event_span(pipeline, *chunk) for chunk in to_check}
    everywhere = in_bronze_span(
        pipeline, min(first for first, _ in spans.values()), max(last for _, last in spans.values())
    )
    # A chunk changed if a commit after the version it read holds a row in its event span.
    changed_rows = [
        F.count(F.when((F.col("_commit_version") > read) & events_between(pipeline, *spans[chunk]), 1)).alias(
            f"chunk_{index}"
        )
        for index, (chunk, read) in enumerate(to_check.items())
    ]
    try:
        changes = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", min(to_check.values()) + 1)
            .option("endingVersion", version)
            .load(pipeline_tables(pipeline).bronze.uri(settings))
        )
        counts = changes.where(everywhere).agg(*changed_rows).first()
    except PySparkException as error:
        # Expired log entries or vacuumed change files: what changed cannot be known, so recompute.
        log.warning(
            "bronze's changes since version %d cannot be read (%s): recomputing %d chunks",
            min(to_check.values()),
            str(error).splitlines()[0] if str(error) else type(error).__name__,
            len(to_check),
        )
        return unchanged
    return unchanged | {chunk for index, chunk in enumerate(to_check) if not counts[index]}


def last_fingerprints(
    spark: SparkSession, settings: Settings, pipeline: Pipeline, chunks: list[Chunk]
) -> dict[Chunk, str]:
    """The fingerprint of the latest recomputation touching each chunk, for the chunks it covered
    exactly. A later overlapping run with other boundaries may have rewritten part of a chunk, so
    only an exact match of the latest overlapping coverage row counts.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline the rows belong to.
        chunks: the chunks to look up, as (start, end).
    """
    coverage = spark.read.format("delta").load(BATCH_COVERAGE.uri(settings))
    if "input_fingerprint" not in coverage.columns:
        return {}
    wanted = literal_frame(spark, "chunk_start timestamp, chunk_end timestamp", chunks)
    overlapping = coverage.where(F.col("pipeline") == pipeline.name).join(
        wanted, (F.col("range_start") < F.col("chunk_end")) & (F.col("range_end") > F.col("chunk_start"))
    )
    newest_first = Window.partitionBy("chunk_start").orderBy(F.col("written_at").desc())
    latest = overlapping.withColumn("rank", F.row_number().over(newest_first)).where("rank = 1").collect()
    return {
        (row.chunk_start, row.chunk_end): row.input_fingerprint
        for row in latest
        if (row.range_start, row.range_end) == (row.chunk_start, row.chunk_end)
    }


def record_run(settings: Settings, result: BackfillResult, started: float) -> None:
    finished = time.time()
    row = {
        **dataclasses.asdict(result),
        "started_at": datetime.fromtimestamp(started, tz=UTC),
        "finished_at": datetime.fromtimestamp(finished, tz=UTC),
        "duration_ms": int((finished - started) * 1000),
    }
    append_rows(BACKFILL_RUNS.uri(settings), BACKFILL_RUNS.arrow_schema, [row], settings)
