"""Pure DataFrame -> DataFrame transforms shared by the speed and the batch layer.

Stream and batch build their plans from these same functions, so they can only disagree for
reasons we can name (late data, a different input): that is what the audits rely on.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import SparkContext
from pyspark.sql import Column, DataFrame
from pyspark.sql import Window as W
from pyspark.sql import functions as F

from lakehouse.dataflow import clocks
from lakehouse.dataflow.metric_merges import combined_over
from lakehouse.dataflow.pipelines.base import RECEIVED_AT, Field, Pipeline
from lakehouse.eventtime import micros_of, parse_duration
from lakehouse.vocabulary import Fate, FieldKind, WindowKind

# ISO-8601 with an explicit zone: a timestamp without one would silently take the reader's zone.
ISO_TIMESTAMP_WITH_ZONE = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"
# Instants a day inside the calendar every client reads (years 1 to 9999): an event at 9999-12-31
# 23:59 had a window ending in year 10000 and one at 0001-01-01 00:30+01:00 an instant in year 0,
# and a Python client (lakehouse sql, a BI tool's driver) failed on any query returning them.
READABLE_INSTANTS = ("0001-01-02T00:00:00Z", "9999-12-31T00:00:00Z")
_INTEGER_JSON_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")


def _decimal_shape(field: Field) -> str:
    """A JSON number with at most the field's decimals ("12.5" is DECIMAL(3,1) in a variant)."""
    return rf"^DECIMAL\(\d+,[0-{field.spark_type.scale}]\)$"


def _json_value(name: str) -> Column:
    return F.col(f"_json_{name}")


def _json_type(name: str) -> Column:
    return F.schema_of_variant(_json_value(name))


def _is_present(name: str) -> Column:
    value = _json_value(name)
    return value.isNotNull() & ~F.is_variant_null(value)


def _typed_value(field: Field) -> Column:
    value = _json_value(field.name)
    if field.kind == FieldKind.TIMESTAMP:
        return F.try_variant_get(value, "$", "string").try_cast("timestamp")
    return F.try_variant_get(value, "$", field.spark_type.simpleString())


def _has_right_type(field: Field) -> Column:
    json_type = _json_type(field.name)
    if field.kind == FieldKind.STRING:
        return json_type == "STRING"
    if field.kind == FieldKind.INTEGER:
        return json_type.isin(*_INTEGER_JSON_TYPES) & _typed_value(field).isNotNull()
    if field.kind in (FieldKind.MONEY, FieldKind.DECIMAL):
        shape_ok = json_type.isin(*_INTEGER_JSON_TYPES) | json_type.rlike(_decimal_shape(field))
        return shape_ok & _typed_value(field).isNotNull()
    if field.kind == FieldKind.TIMESTAMP:
        return json_type == "STRING"
    raise ValueError(f"unknown field kind {field.kind}")


def _is_valid_timestamp(field: Field) -> Column:
    text = F.try_variant_get(_json_value(field.name), "$", "string")
    # The range is checked on the typed column the parse computed before the reasons (a reference,
    # not a second string-to-timestamp conversion: 21% of the parse's time when repeated).
    typed = F.col(field.name)
    earliest, end = (F.lit(bound).cast("timestamp") for bound in READABLE_INSTANTS)
    return text.rlike(ISO_TIMESTAMP_WITH_ZONE) & _typed_value(field).isNotNull() & (typed >= earliest) & (typed < end)


def _field_problems(field: Field) -> list[tuple[Column, str]]:
    present = _is_present(field.name)
    problems = []
    if field.required:
        problems.append((~present, f"missing_field:{field.name}"))
    problems.append((present & ~_has_right_type(field), f"wrong_type:{field.name}"))
    if field.kind == FieldKind.TIMESTAMP:
        problems.append((present & ~_is_valid_timestamp(field), f"bad_timestamp:{field.name}"))
    return problems


@dataclasses.dataclass(frozen=True)
class _ParseColumns:
    """The column expressions of ``parse_events``: the JSON value of each field, its typed value, and
    the first rule a line breaks."""

    json_values: dict[str, Column]
    typed_values: dict[str, Column]
    reason: Column
    raw_event_id: Column
    corrected: dict[str, Column]  # the device's times moved onto the log's clock, when it corrects clocks


@functools.lru_cache(maxsize=16)
def _parse_columns(pipeline: Pipeline, spark_context: SparkContext | None) -> _ParseColumns:
    """Built once per pipeline and Spark context, not per call: the expressions are a few hundred
    calls into the JVM (0.3 s of every micro-batch, measured), and they name columns only, so any
    DataFrame of log lines can take them. The context is part of the key because a Column belongs
    to the JVM that made it."""
    document = F.col("_document")
    problems: list[tuple[Column, str]] = [
        (document.isNull(), "bad_json"),
        (~F.schema_of_variant(document).startswith("OBJECT"), "not_an_object"),
    ]
    for field in pipeline.fields:
        problems.extend(_field_problems(field))
    typed_values = {f.name: F.when(_is_present(f.name) & _has_right_type(f), _typed_value(f)) for f in pipeline.fields}
    corrected = {}
    if pipeline.corrects_clocks:
        received, sent = F.col(RECEIVED_AT), F.col(pipeline.clocks.sent_at)
        typed_values[RECEIVED_AT] = clocks.received_at(F.col("source_file"))
        problems.extend(clocks.clock_problems(received, sent, micros_of(pipeline.clocks.bound_delta)))
        offset = clocks.clock_offset_micros(received, sent)
        corrected = {pipeline.event_time: clocks.corrected_time(F.col(pipeline.event_time), offset)}
    # Value rules judge the event as its device sent it, before any correction.
    problems.extend((rule.violated(), rule.reason) for rule in pipeline.rules)
    return _ParseColumns(
        json_values={f"_json_{f.name}": F.try_variant_get(document, f"$.{f.name}", "variant") for f in pipeline.fields},
        typed_values=typed_values,
        reason=F.coalesce(*[F.when(condition, F.lit(reason)) for condition, reason in problems]),
        raw_event_id=F.try_variant_get(document, f"$.{pipeline.event_id}", "string").alias("raw_event_id"),
        corrected=corrected,
    )


def parse_events(raw: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Raw log lines (``value``, ``source_file``) -> typed fields plus ``reason``.

    ``reason`` is null for a valid event and otherwise names the first rule it breaks, in this
    order: bad_json, not_an_object, then per field missing/wrong type/bad timestamp, then the clock
    rules of a pipeline that corrects clocks, then the pipeline's value rules. Every line comes out
    exactly once: nothing is dropped here. Such a pipeline's events also carry ``received_at``, and
    their ``event_time`` is on the log's clock (``lakehouse.dataflow.clocks``).
    """
    # A Spark Connect session's columns are plain descriptions, any session's (key None).
    columns = _parse_columns(pipeline, getattr(raw.sparkSession, "_sc", None))
    parsed = (
        raw.withColumn("_document", F.try_parse_json("value"))
        .withColumns(columns.json_values)
        .withColumns(columns.typed_values)
        .withColumn("reason", columns.reason)
        .withColumns(columns.corrected or {"reason": F.col("reason")})  # a Connect client refuses an empty map
        .select("value", "source_file", *pipeline.field_names, "reason", columns.raw_event_id)
    )
    return _evaluated_once(parsed)


def _evaluated_once(parsed: DataFrame) -> DataFrame:
    """A fence against predicate pushdown: Spark would push a filter on ``reason`` (``valid_events``)
    below these projections by inlining ``reason``'s definition, and a filter does not share common
    subexpressions, so each of its few dozen checks would parse the JSON again. Measured on 100,900
    lines: 26.7 s filtered as is, 1.4 s behind the fence, 1.7 s for the parse alone. Observing a
    metric is such a fence (the optimizer keeps filters above it) and costs one counter per task."""
    return parsed.observe(f"parsed_{uuid.uuid4().hex}", F.count(F.lit(1)).alias("lines"))


def valid_events(parsed: DataFrame, pipeline: Pipeline, *kept: str) -> DataFrame:
    """The rows of ``parse_events``' output that break no rule: their source, text and fields (and the
    ``kept`` columns)."""
    return parsed.where(F.col("reason").isNull()).select("source_file", "value", *pipeline.field_names, *kept)


def quarantined_records(parsed: DataFrame) -> DataFrame:
    return parsed.where(F.col("reason").isNotNull()).select(
        F.col("value").alias("raw"), "reason", F.col("raw_event_id").alias("event_id"), "source_file"
    )


def interval(duration: str) -> str:
    """A Spark interval string for one of our durations."""
    return f"{int(parse_duration(duration).total_seconds())} seconds"


def assign_windows(events: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Add ``window_start``/``window_end``: half-open ``[start, end)`` event-time windows.

    A hopping window spec gives one row per window an event falls in (size / slide of them). For
    session windows each event gets its own one-event session ``[t, t + gap)``; ``merge_sessions``
    joins the ones less than a gap apart.
    """
    spec = pipeline.window
    if spec.is_session:
        start = F.col(pipeline.event_time)
        return events.withColumns(
            {"window_start": start, "window_end": start + F.expr(f"INTERVAL {interval(spec.gap)}")}
        )
    window = F.window(pipeline.event_time, interval(spec.size), interval(spec.slide or spec.size))
    return (
        events.withColumn("_window", window)
        .withColumns({"window_start": F.col("_window.start"), "window_end": F.col("_window.end")})
        .drop("_window")
    )


def first_window_end(pipeline: Pipeline) -> Column:
    """The end of the earliest-ending window an event falls in: when the event can first be late.

    Windows start every ``slide`` and last ``size``; an event at t is in the windows with
    ``start <= t < start + size``, the earliest of which ends at
    ``(floor((t - size) / slide) + 1) * slide + size``. A session event's own window ends at t + gap.
    """
    spec, t = pipeline.window, F.unix_micros(F.col(pipeline.event_time))
    if spec.is_session:
        return F.timestamp_micros(t + F.lit(micros_of(spec.gap_delta)))
    size, slide = F.lit(micros_of(spec.size_delta)), F.lit(micros_of(spec.slide_delta))
    return F.timestamp_micros((F.floor((t - size) / slide) + 1) * slide + size)


def overlap_groups(windows: DataFrame, keys: list[str], group: str) -> DataFrame:
    """Number the windows of each key so that overlapping ones share a number (``group``): the rows
    one session merges. Windows are half-open: one starting where another ends starts a new group."""
    by_start = W.partitionBy(*keys).orderBy("window_start", "window_end")
    end_so_far = F.max("window_end").over(by_start.rowsBetween(W.unboundedPreceding, -1))
    starts_group = end_so_far.isNull() | (F.col("window_start") >= end_so_far)
    return (
        windows.withColumn("_starts", starts_group.cast("long"))
        .withColumn(group, F.sum("_starts").over(by_start.rowsBetween(W.unboundedPreceding, W.currentRow)))
        .drop("_starts")
    )


def merge_sessions(sessions: DataFrame, pipeline: Pipeline, carry: dict[str, Column] | None = None) -> DataFrame:
    """Merge overlapping session windows of each key into one: start = min, end = max, metrics combine.

    Windows are half-open, so a window starting exactly where the previous one ends is a new
    session. ``carry`` adds more aggregates per merged session (the speed layer collects the
    sessions a merge absorbs).
    """
    keys = list(pipeline.keys)
    numbered = overlap_groups(sessions, keys, "_session")
    metrics = [combined_over(m, F.col(m.name)).alias(m.name) for m in pipeline.metrics]
    extra = [column.alias(name) for name, column in (carry or {}).items()]
    merged = numbered.groupBy(*keys, "_session").agg(
        F.min("window_start").alias("window_start"), F.max("window_end").alias("window_end"), *metrics, *extra
    )
    return merged.select(*pipeline.gold_columns, *(carry or {}))


def window_values(events: DataFrame, pipeline: Pipeline, count_events_before: datetime | None = None) -> DataFrame:
    """Every metric per window and key over a set of events: the one aggregation both layers run.
    ``count_events_before`` adds ``events`` (see ``aggregate_metrics``)."""
    windowed = aggregate_metrics(assign_windows(events, pipeline), pipeline, count_events_before)
    if not pipeline.window.is_session:
        return windowed
    carry = {"events": F.sum("events")} if count_events_before is not None else None
    return merge_sessions(windowed, pipeline, carry)


# The order copies of an event id reached the log in: log file names start with their arrival
# time, and the text breaks ties within a file, so the order is total and a replay keeps it.
ARRIVAL_ORDER = ("source_file", "value")
# A row's number in a micro-batch's cached parse: its fates are decided in the driver and find their
# rows by it (lakehouse.layers.micro_batch).
BATCH_ROW = "batch_row"


def number_copies(events: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Number the copies of each event id in ``ARRIVAL_ORDER``: copy 1 is the first to arrive."""
    arrival_order = W.partitionBy(pipeline.event_id).orderBy(*ARRIVAL_ORDER)
    return events.withColumn("copy_number", F.row_number().over(arrival_order))


def later_copies(copies: pa.Table, pipeline: Pipeline) -> pa.Array:
    """``number_copies``' rule on Arrow, for a micro-batch's rows in the driver: the ``BATCH_ROW``
    of each row of ``copies`` (``BATCH_ROW``, the event id and ``ARRIVAL_ORDER``'s columns) that
    is not its id's first copy. Arrow orders strings by their bytes, as Spark does; identical lines
    are told apart by their row."""
    keys = [pipeline.event_id, *ARRIVAL_ORDER, BATCH_ROW]
    ordered = copies.take(pc.sort_indices(copies, [(key, "ascending") for key in keys]))
    ids = ordered.column(pipeline.event_id).to_numpy(zero_copy_only=False)
    is_first = np.ones(len(ids), dtype=bool)
    is_first[1:] = ids[1:] != ids[:-1]
    return ordered.column(BATCH_ROW).filter(pa.array(~is_first, type=pa.bool_())).combine_chunks()


def sql_timestamp(moment: datetime) -> str:
    """A naive UTC instant (an aware one is converted) as a SQL timestamp literal naming its zone,
    so that no session's time zone shifts it."""
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return f"TIMESTAMP'{utc.isoformat(sep=' ')}'"


def timestamp_literal(moment: datetime) -> Column:
    """``moment`` as a timestamp column, from :func:`sql_timestamp`. Not ``F.lit``: through Spark
    Connect, pyspark infers a datetime literal's type by asking the server for
    spark.sql.timestampType first, a round trip per literal (six a backfill chunk, 2.8 ms each)."""
    return F.expr(sql_timestamp(moment))


def closed_by(watermark: datetime | None, window_end: Column | None = None) -> Column:
    """:func:`lakehouse.eventtime.is_closed` as a column: the window (``window_end`` unless given) ended
    at or before the watermark. With no watermark yet, nothing is closed."""
    end = F.col("window_end") if window_end is None else window_end
    return F.lit(False) if watermark is None else end <= timestamp_literal(watermark)


def label_fates(
    events: DataFrame, duplicate_rows: DataFrame, watermark: datetime | None, pipeline: Pipeline
) -> DataFrame:
    """Give every valid event of a micro-batch its fate: duplicate, late or on time (docs/design.md,
    "Event fates").

    Which rows are duplicates (their id accepted by an earlier batch, or a later copy of an id in
    this one) the driver decides (``lakehouse.layers.micro_batch.duplicates_of``): ``duplicate_rows``
    holds their ``BATCH_ROW``. An event is late when a window it falls in has ended at or before the
    watermark this batch runs with: the earliest-ending one decides, so a late event is left out of
    all its windows.

    Args:
        events: the batch's valid events, with their ``BATCH_ROW``.
        duplicate_rows: the ``BATCH_ROW`` of each duplicate.
        watermark: the watermark this batch runs with (None: nothing is late yet).
        pipeline: the pipeline the rows belong to.
    """
    duplicates = F.broadcast(duplicate_rows.select(BATCH_ROW, F.lit(True).alias("_duplicate")))
    is_late = closed_by(watermark, first_window_end(pipeline))
    fate = (
        F.when(F.col("_duplicate").isNotNull(), F.lit(Fate.DUPLICATE))
        .when(is_late, F.lit(Fate.LATE))
        .otherwise(F.lit(Fate.ON_TIME))
    )
    return events.join(duplicates, on=BATCH_ROW, how="left").withColumn("fate", fate).drop("_duplicate")


def first_copies(events: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The batch layer's dedupe: keep the first copy of every event id of a bounded input."""
    return number_copies(events, pipeline).where(F.col("copy_number") == 1).drop("copy_number")


def aggregate_metrics(
    windowed: DataFrame, pipeline: Pipeline, count_events_before: datetime | None = None
) -> DataFrame:
    """Per window and key, every metric of the pipeline. The gold table's schema contract.

    ``count_events_before`` (the end of a range of window starts) adds ``events``, for run
    summaries: the events a row counts, each event in one row only (``events_counted_once``), so
    the rows of the range's windows add up to its events.
    """
    grouped = windowed.groupBy("window_start", "window_end", *pipeline.keys)
    metrics = [m.aggregate().cast(m.spark_type).alias(m.name) for m in pipeline.metrics]
    if count_events_before is None:
        return grouped.agg(*metrics).select(*pipeline.gold_columns)
    counted = events_counted_once(pipeline, count_events_before).alias("events")
    return grouped.agg(*metrics, counted).select(*pipeline.gold_columns, "events")


def events_counted_once(pipeline: Pipeline, range_end: datetime) -> Column:
    """How many of a window's events it counts when the rows of a range's windows are summed.
    Hopping windows share each event among size / slide windows: a window counts only the events of
    its first slide (those it is the latest window of), and the range's last window also those after
    it, whose latest windows start past the range. Tumbling windows and sessions hold each event once."""
    if pipeline.window.kind != WindowKind.HOPPING:
        return F.count(F.lit(1))
    slide = pipeline.window.slide_delta
    latest = F.col(pipeline.event_time) < F.col("window_start") + F.lit(slide)
    return F.count(F.when(latest | (F.col("window_start") >= timestamp_literal(range_end - slide)), 1))


def in_window_range(start: datetime, end: datetime) -> Column:
    """Windows that start in ``[start, end)``: how the batch layer addresses a range."""
    return (F.col("window_start") >= timestamp_literal(start)) & (F.col("window_start") < timestamp_literal(end))
