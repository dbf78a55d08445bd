"""One micro-batch of the speed layer, as records and small functions of it.

``MicroBatch`` is what a batch knows before it writes anything: its ids, whether it can be a replay,
its parsed records, their summary and its watermark. The functions read what earlier batches left
(the ids bronze accepted, the max event time, the pane state) and never look at the batch itself,
so a replayed batch computes what its first attempt computed.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lakehouse.dataflow import panes as pn
from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.eventtime import micros
from lakehouse.layers.copies import copy_columns, later_copies_in
from lakehouse.layers.seen_ids import KEPT_BEYOND_HORIZON, IdLookup, SeenIdIndex, digests_of, oldest_kept
from lakehouse.layers.stage_times import StageTimes
from lakehouse.settings import Settings
from lakehouse.storage import kafka_log
from lakehouse.storage.catalog import STREAM_PROGRESS
from lakehouse.storage.ops_tables import arrow_at
from lakehouse.vocabulary import BatchStage, Fate


@dataclasses.dataclass(frozen=True)
class CommittedBatch:
    """The last batch that committed every write in this process: the max event time through it,
    and how many bytes of lines it read.

    The batch after it cannot have been attempted before (Spark runs a batch again only after a
    restart, and then first), so its appends need not look for an earlier attempt's rows, and it need
    not read the progress table for its watermark."""

    app_id: str
    batch_id: int
    max_event_time: datetime | None
    input_bytes: int

    def precedes(self, app_id: str, batch_id: int) -> bool:
        return (self.app_id, self.batch_id) == (app_id, batch_id - 1)


@dataclasses.dataclass(frozen=True)
class CarriedState:
    """State a committed batch hands on in the driver, for batch ``batch_id`` of stream ``app_id``
    only: any other batch (after a start, a restart or a failure) builds it again from the tables.
    The pane state (the latest pane of each live window, a few hundred rows as Arrow: a Spark frame
    of it would cost a job a batch to cut it from the lineage of the batches before) and the index
    of the ids bronze accepted (``lakehouse.layers.seen_ids``)."""

    app_id: str
    batch_id: int
    value: Any

    def is_for(self, app_id: str, batch_id: int) -> bool:
        return (self.app_id, self.batch_id) == (app_id, batch_id)


@dataclasses.dataclass(frozen=True)
class MicroBatch:
    """A micro-batch about to be written: ids, records, their summary and digests, and the watermark
    it runs with."""

    spark: SparkSession
    app_id: str
    batch_id: int
    first_attempt: bool  # False when an earlier attempt may have written some of its rows
    parsed: DataFrame  # as in ParsedBatch
    summary: dict
    digests: pa.Table
    watermark: datetime | None  # from batches before this one only
    max_event_time: datetime | None  # through this batch: what the on-time watermark follows
    times: StageTimes = dataclasses.field(default_factory=StageTimes)  # filled in as its stages run

    def __post_init__(self):
        if self.batch_id < 0:
            raise ValueError(f"batch ids start at 0, not {self.batch_id}")
        if self.watermark is not None and self.max_event_time is None:
            raise ValueError("a batch with a watermark has seen event time")

    def stamp(self) -> dict[str, Column]:
        """The columns every appended row carries: which stream and batch wrote it."""
        return {"app_id": F.lit(self.app_id), "batch_id": F.lit(self.batch_id).cast("long")}


@dataclasses.dataclass(frozen=True)
class ParsedBatch:
    """A micro-batch's lines parsed, before any earlier batch is read (``parse_batch``)."""

    parsed: DataFrame  # cached, with each row's BATCH_ROW
    summary: dict  # input_rows/_bytes, quarantined(_bytes), min/max_event_time of valid records, source_files
    digests: pa.Table  # the valid events' BATCH_ROW, id, copy_columns and digests_of


def parse_batch(raw: DataFrame, pipeline: Pipeline) -> ParsedBatch:
    """A micro-batch's lines parsed and cached, each with its ``BATCH_ROW``; their summary; and the
    valid events' digests. One Spark job parses, collects the digests and observes the summary.
    The summary was a job of its own, 0.12 s of a 2.8 s batch.

    ``BATCH_ROW`` is fixed when the parse is cached: a cached partition computed again reads the
    same files in the same order."""
    observed = Observation(f"summary_{uuid.uuid4().hex}")
    parsed = (
        tx.parse_events(raw, pipeline)
        .withColumn(tx.BATCH_ROW, F.monotonically_increasing_id())
        .observe(observed, *_summary_columns(pipeline))
        .persist()
    )
    valid = tx.valid_events(parsed, pipeline, tx.BATCH_ROW)
    digests = digests_of(valid, pipeline, tx.BATCH_ROW, pipeline.event_id, *copy_columns())
    summary = dict(observed.get)
    summary["source_files"] = kafka_log.read_offsets(parsed, summary["source_files"])
    return ParsedBatch(parsed, summary, digests)


def _summary_columns(pipeline: Pipeline) -> list[Column]:
    valid = F.col("reason").isNull()
    return [
        F.count(F.lit(1)).alias("input_rows"),
        F.coalesce(F.sum(F.octet_length("value")), F.lit(0)).alias("input_bytes"),
        F.count("reason").alias("quarantined"),
        F.coalesce(F.sum(F.when(~valid, F.octet_length("value"))), F.lit(0)).alias("quarantined_bytes"),
        F.min(F.when(valid, F.col(pipeline.event_time))).alias("min_event_time"),
        F.max(F.when(valid, F.col(pipeline.event_time))).alias("max_event_time"),
        F.sort_array(F.collect_set(kafka_log.source_unit(F.col("source_file")))).alias("source_files"),
    ]


ACCEPTED_FATES = (Fate.ON_TIME, Fate.LATE, Fate.DUPLICATE)  # a valid record's fates


def fate_count_columns() -> list[Column]:
    """Aggregates counting a batch's valid events by fate, one column named after each fate."""
    return [F.count(F.when(F.col("fate") == fate, 1)).alias(fate) for fate in ACCEPTED_FATES]


def count_fates(fates: DataFrame) -> dict[str, int]:
    return fates.agg(*fate_count_columns()).first().asDict()


def before_batch(app_id: str, batch_id: int, column: Callable = F.col):
    """Rows written by earlier batches: a replayed batch must not find its own earlier write.
    ``column`` names a column: ``F.col`` for a Spark filter, ``pyarrow.dataset.field`` for delta-rs."""
    return ~((column("app_id") == app_id) & (column("batch_id") >= batch_id))


def duplicates_of(
    batch: MicroBatch, bronze_uri: str, pipeline: Pipeline, horizon: timedelta, carried: CarriedState | None
) -> IdLookup:
    """Which of the batch's valid events are duplicates: their id bronze accepted before this batch
    within the dedupe horizon of this batch's events, or a later copy of an id in the batch. The ids
    are looked up in the index of accepted ids (``lakehouse.layers.seen_ids``) the batch before
    carried, or in one built from bronze, extended back from bronze first when the batch's horizon
    starts before it covers (a late event's); a horizon older than the index keeps (an event more
    than an hour late) is looked up in bronze for the batch's ids alone.

    Args:
        batch: the micro-batch (its session, whose micro-batch confs apply to bronze reads too; its
            ids; its valid events' digests and min and max event time).
        bronze_uri: the pipeline's bronze table.
        pipeline: the pipeline (event id and time columns).
        horizon: how far in event time around the batch's events to look.
        carried: the index the batch before left (None after a start).
    """
    summary, rows = batch.summary, batch.digests
    index = carried.value if carried and carried.is_for(batch.app_id, batch.batch_id) else None
    if summary["min_event_time"] is None:  # no valid event: nothing to look up
        return IdLookup(index, rows, np.zeros(0, bool), None)
    since, until = summary["min_event_time"] - horizon, summary["max_event_time"] + horizon
    # The index is extended back as far as it keeps (oldest_kept). An earlier horizon (an event
    # more than an hour late, say a day) is looked up in bronze for the batch's ids only: extending
    # the index a day back at 6,500 events/s would hold 560 million ids in the driver.
    index = _index_covering(index, batch, bronze_uri, pipeline, max(since, oldest_kept(batch.max_event_time, horizon)))
    since_us, until_us = micros(since), micros(until)
    seen = index.seen(rows, since_us, until_us)
    if since_us < index.complete_from:
        earlier = _accepted_in_bronze(batch, bronze_uri, pipeline, since, index.complete_from, rows)
        seen |= SeenIdIndex.of(earlier, since_us).seen(rows, since_us, until_us)
    later = later_copies_in(rows, pipeline, functools.partial(texts_of, batch))
    return IdLookup(index, rows, seen | later, since_us)


def texts_of(batch: MicroBatch, batch_rows: pa.Array) -> pa.Table:
    """The ``BATCH_ROW`` and text of the batch's rows ``batch_rows`` names, from the cached parse (a
    Spark job)."""
    named = F.broadcast(batch.spark.createDataFrame(pa.table({tx.BATCH_ROW: batch_rows})))
    return batch.parsed.join(named, on=tx.BATCH_ROW, how="left_semi").select(tx.BATCH_ROW, "value").toArrow()


def _index_covering(
    index: SeenIdIndex | None, batch: MicroBatch, bronze_uri: str, pipeline: Pipeline, since: datetime
) -> SeenIdIndex:
    """``index`` if it covers event times from ``since`` on; else built, or extended back, from
    bronze's rows of earlier batches, back to ``KEPT_BEYOND_HORIZON`` before ``since`` (as far as a
    carried index keeps: the copies a producer resends minutes later, with older event times than
    the batch's, then find it complete)."""
    if index is not None and micros(since) >= index.complete_from:
        return index
    kept_since = since - KEPT_BEYOND_HORIZON
    accepted = _accepted_in_bronze(batch, bronze_uri, pipeline, kept_since, index.complete_from if index else None)
    if index is None:
        return SeenIdIndex.of(accepted, micros(kept_since))
    return dataclasses.replace(index.with_rows(accepted), complete_from=micros(kept_since))


def _accepted_in_bronze(
    batch: MicroBatch,
    bronze_uri: str,
    pipeline: Pipeline,
    since: datetime,
    before: int | None,
    of_rows: pa.Table | None = None,
) -> pa.Table:
    """``digests_of`` the rows earlier batches appended to bronze with an event time at or after
    ``since`` and before ``before`` (microseconds; None: no end), of the ids of ``of_rows`` only
    if given.

    Args:
        batch: the micro-batch (its session and ids).
        bronze_uri: the pipeline's bronze table.
        pipeline: the pipeline (event id and time columns).
        since: the earliest event time.
        before: the end of the range, in microseconds (None: no end).
        of_rows: rows with an event id column, whose ids are the only ones wanted (None: every id).
    """
    in_range = (F.col(pipeline.event_time) >= since) & (F.col("event_date") >= since.date())
    if before is not None:
        in_range &= F.unix_micros(F.col(pipeline.event_time)) < before
    bronze = batch.spark.read.format("delta").load(bronze_uri)
    accepted = bronze.where(in_range & before_batch(batch.app_id, batch.batch_id))
    if of_rows is not None:
        ids = batch.spark.createDataFrame(of_rows.select([pipeline.event_id]))
        accepted = accepted.join(F.broadcast(ids.distinct()), on=pipeline.event_id, how="left_semi")
    return digests_of(accepted, pipeline)


def max_event_time_before(settings: Settings, pipeline: Pipeline, app_id: str, batch_id: int) -> datetime | None:
    """The max event time of the batches this stream committed before ``batch_id``, from
    ``ops.stream_progress``. Read through delta-rs: a Spark read of the table took 1-2 s, on the first
    batch after every start or failure.

    Args:
        settings: where the tables live.
        pipeline: the pipeline the rows belong to.
        app_id: the stream's query id.
        batch_id: the batch whose predecessors count.
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    mine = (ds.field("pipeline") == pipeline.name) & before_batch(app_id, batch_id, ds.field)
    progress = arrow_at(STREAM_PROGRESS.uri(settings), ["max_event_time"], mine, settings)
    latest = pc.max(progress["max_event_time"]).as_py() if progress is not None else None
    return latest.astimezone(UTC).replace(tzinfo=None) if latest else None


def live_since(watermark: datetime | None, pipeline: Pipeline) -> datetime | None:
    """Windows that ended before the watermark are closed: on-time events cannot reach them, and their
    ON_TIME pane has fired. A session can still absorb one that ended within a gap of it. So a
    window is live while it ends after this moment (None: every window is)."""
    return None if watermark is None else watermark - pipeline.window.gap_delta


def live_windows(panes: DataFrame, watermark: datetime | None, pipeline: Pipeline) -> DataFrame:
    """The rows of ``panes`` whose window is live (``live_since``)."""
    since = live_since(watermark, pipeline)
    return panes if since is None else panes.where(F.col("window_end") > F.lit(since))


def live_windows_of(state: pa.Table, watermark: datetime | None, pipeline: Pipeline) -> pa.Table:
    """The rows of an Arrow pane state whose window is live (``live_since``)."""
    since = live_since(watermark, pipeline)
    if since is None:
        return state
    window_end = state.schema.field("window_end").type
    return state.filter(pc.greater(state["window_end"], pa.scalar(since, pa.timestamp("us")).cast(window_end)))


def next_panes(
    state: DataFrame, on_time: DataFrame, on_time_watermark: datetime | None, pipeline: Pipeline
) -> DataFrame:
    """The panes a batch emits, from the state before it and its on-time events.

    Args:
        state: the latest pane of each live window before this batch.
        on_time: this batch's on-time events.
        on_time_watermark: the watermark the batch's ON_TIME panes fire at (None: none yet).
        pipeline: the pipeline the rows belong to.
    """
    if pipeline.window.is_session:
        return pn.next_session_panes(state, on_time, on_time_watermark, pipeline)
    return pn.next_panes(state, tx.window_values(on_time, pipeline), on_time_watermark, pipeline)


def progress_row(
    batch: MicroBatch, pipeline: Pipeline, counts: dict[str, int], started: float, finished: float
) -> dict:
    """The batch's ``ops.stream_progress`` row: input rows and each fate, watermark, files read.

    Args:
        batch: the micro-batch.
        pipeline: the pipeline the rows belong to.
        counts: events per fate.
        started: when the batch started (epoch seconds).
        finished: when it finished (epoch seconds).
    """
    summary = batch.summary
    return {
        "pipeline": pipeline.name,
        "app_id": batch.app_id,
        "batch_id": batch.batch_id,
        "started_at": datetime.fromtimestamp(started, tz=UTC),
        "duration_ms": int((finished - started) * 1000),
        "input_rows": summary["input_rows"],
        "quarantined": summary["quarantined"],
        "duplicates": counts.get(Fate.DUPLICATE, 0),
        "on_time": counts.get(Fate.ON_TIME, 0),
        "late": counts.get(Fate.LATE, 0),
        "watermark": batch.watermark,
        "max_event_time": batch.max_event_time,
        "panes_emitted": counts["speed_rows"],
        "source_files": summary["source_files"],
        "stage_ms": batch.times.as_ms(),
    }


def label_batch_fates(
    batch: MicroBatch, bronze_uri: str, pipeline: Pipeline, horizon: timedelta, carried: CarriedState | None
) -> tuple[DataFrame, IdLookup]:
    """The batch's valid events, each with its fate: duplicate (``duplicates_of``), late (its window
    closed by the batch's watermark), or on time; and how the ids were looked up.

    Args:
        batch: the micro-batch.
        bronze_uri: bronze's location, searched for earlier copies of the ids.
        pipeline: the pipeline the rows belong to.
        horizon: how far back in event time that search goes.
        carried: the index of accepted ids the batch before left (None after a start).
    """
    with batch.times.stage(BatchStage.DEDUPE):
        lookup = duplicates_of(batch, bronze_uri, pipeline, horizon, carried)
    duplicates = lookup.rows.filter(pa.array(lookup.duplicate, type=pa.bool_())).select([tx.BATCH_ROW])
    events = tx.valid_events(batch.parsed, pipeline, tx.BATCH_ROW)
    fates = tx.label_fates(events, batch.spark.createDataFrame(duplicates), batch.watermark, pipeline)
    # One partition, as the window that numbered copies made (shuffle partitions are 1 in a
    # micro-batch): bronze gets one file per date a batch, and the panes' aggregation needs no
    # shuffle. The parse ran in parallel before it.
    return fates.drop(tx.BATCH_ROW).coalesce(1), lookup


def pane_state_before(batch: MicroBatch, carried: CarriedState | None, panes_uri: str, pipeline: Pipeline) -> pa.Table:
    """The latest pane of each live window as of the start of this batch, as Arrow.

    Kept in memory from the batch before (``carried``). After a start, a restart or a failed batch it
    is read from the pane log, a read that grows with the log (a file per batch); the two give the
    same rows (``advance_state`` is ``latest_panes`` applied to the appended panes).

    Args:
        batch: the micro-batch.
        carried: the state the previous batch of this process left (None after a start).
        panes_uri: the pane log's location, read when nothing was carried.
        pipeline: the pipeline the rows belong to.
    """
    if carried and carried.is_for(batch.app_id, batch.batch_id):
        return live_windows_of(carried.value, batch.watermark, pipeline)
    panes = batch.spark.read.format("delta").load(panes_uri)
    earlier = panes.where(before_batch(batch.app_id, batch.batch_id))
    return pn.latest_panes(live_windows(earlier, batch.watermark, pipeline), pipeline).toArrow()
