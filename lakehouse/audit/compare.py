"""The audit's comparison, as small pure functions: one per frame or column the verdict is built from.

Inputs are the truth events with their causes (``caused``: one row per event of the log, with
``cause``, ``written_at`` and ``ingested_at``) and the audited rows (``audited``: the speed table's
or the serving view's values, with ``source`` and ``updated_at``). The output has one row per closed
(window, key): truth, the audited value, the verdict and its causes (see ``reconcile.py``).
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.metric_merges import compared
from lakehouse.dataflow.pipelines.base import Metric, Pipeline
from lakehouse.vocabulary import Cause, Layer, Verdict


def empty_strings() -> Column:
    return F.array().cast("array<string>")


def grouping(pipeline: Pipeline) -> list[str]:
    return ["window_start", "window_end", *pipeline.keys]


def metric_totals(events: DataFrame, pipeline: Pipeline, prefix: str) -> DataFrame:
    """The pipeline's metrics over ``events`` per window and key, as ``<prefix>_<metric>`` columns."""
    return tx.aggregate_metrics(events, pipeline).select(
        *grouping(pipeline), *[compared(m, F.col(m.name)).alias(f"{prefix}_{m.name}") for m in pipeline.metrics]
    )


def _audited_value(audited: DataFrame, metric: Metric) -> Column:
    """A stored metric as compared: a sketch (in a gold table) estimated; a view already serves the estimate."""
    stored = audited.schema[metric.name].dataType
    return compared(metric, F.col(metric.name)) if isinstance(stored, T.BinaryType) else F.col(metric.name)


def closed_audited_rows(
    audited: DataFrame, pipeline: Pipeline, start: datetime, end: datetime, in_scope: Column, watermark: datetime | None
) -> DataFrame:
    """The audited rows of closed windows in the range and scope, their metrics as ``speed_<metric>``.

    Args:
        audited: the rows the audit checks (the speed table or the serving view, at its pin).
        pipeline: the pipeline the rows belong to.
        start: first window start audited.
        end: end of the range of window starts (exclusive).
        in_scope: which windows this audit looks at (all, or those changed since the last audit).
        watermark: the stream's watermark: only windows it closed are compared (None: none closed).
    """
    return audited.where(tx.in_window_range(start, end) & in_scope & tx.closed_by(watermark)).select(
        *grouping(pipeline),
        *[_audited_value(audited, m).alias(f"speed_{m.name}") for m in pipeline.metrics],
        "source",
        F.col("updated_at").alias("row_written_at"),
    )


def cause_counts(caused: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Per window and key: late and unread events, and the ids of events the stream lost."""
    return caused.groupBy(*grouping(pipeline)).agg(
        F.count(F.when(F.col("cause") == Cause.LATE, 1)).alias("late_events"),
        F.count(F.when(F.col("cause") == Cause.NOT_YET_READ, 1)).alias("not_yet_read_events"),
        F.sort_array(F.collect_list(F.when(F.col("cause") == Cause.MISSING, F.col(pipeline.event_id)))).alias(
            "unexplained_event_ids"
        ),
    )


# A batch row was computed from bronze or from the log, before it was written.
def in_bronze_before() -> Column:
    return F.col("ingested_at").isNotNull() & (F.col("ingested_at") <= F.col("row_written_at"))


def in_log_before() -> Column:
    return F.col("written_at").isNotNull() & (F.col("written_at") <= F.col("row_written_at"))


def after_batch_counts(for_batch: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Per batch-served window and key: events that reached bronze, or the log, after its row was written."""
    return for_batch.groupBy(*grouping(pipeline)).agg(
        F.count(F.when(~in_bronze_before(), 1)).alias("after_bronze_batch_events"),
        F.count(F.when(~in_log_before(), 1)).alias("after_log_batch_events"),
    )


def joined_totals(caused: DataFrame, closed_rows: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Truth, audited value and the totals explained values come from, side by side per window and key."""
    keys = grouping(pipeline)
    batch_written = closed_rows.where(F.col("source") == Layer.BATCH).select(*keys, "row_written_at")
    for_batch = caused.join(batch_written, on=keys, how="inner")
    return (
        metric_totals(caused, pipeline, "truth")
        .join(closed_rows, on=keys, how="full")
        .join(metric_totals(caused.where(F.col("cause") == Cause.ON_TIME), pipeline, "on_time"), on=keys, how="left")
        .join(metric_totals(for_batch.where(in_bronze_before()), pipeline, "bronze_before"), on=keys, how="left")
        .join(metric_totals(for_batch.where(in_log_before()), pipeline, "log_before"), on=keys, how="left")
        .join(cause_counts(caused, pipeline), on=keys, how="left")
        .join(after_batch_counts(for_batch, pipeline), on=keys, how="left")
    )


def filled(joined: DataFrame, prefix: str, metric: str) -> Column:
    """A ``<prefix>_<metric>`` value, 0 (of the column's type) where absent."""
    column = f"{prefix}_{metric}"
    return F.coalesce(F.col(column), F.lit(0).cast(joined.schema[column].dataType))


def audited_equals(joined: DataFrame, metrics: list[str], prefix: str) -> Column:
    """The audited value equals the ``prefix`` totals in every metric."""
    return functools.reduce(
        lambda a, b: a & b, [filled(joined, "speed", m) == filled(joined, prefix, m) for m in metrics]
    )


def from_batch() -> Column:
    return F.coalesce(F.col("source") == Layer.BATCH, F.lit(False))


def explained_by_timing(joined: DataFrame, metrics: list[str]) -> Column:
    """The value equals what its layer could have counted: a speed value its on-time events, a batch
    value the events that had reached bronze (or the log) when it was written."""
    return F.when(
        from_batch(), audited_equals(joined, metrics, "bronze_before") | audited_equals(joined, metrics, "log_before")
    ).otherwise(audited_equals(joined, metrics, "on_time"))


def verdict_of(equals_truth: Column, equals_what_its_layer_counted: Column) -> Column:
    """Matched, explained or unexplained. An event the stream read but bronze lost is unexplained even
    where the values still agree; a value an operator's recorded repair changed is explained."""
    no_missing = F.size(F.coalesce(F.col("unexplained_event_ids"), F.array())) == 0
    return (
        F.when(~no_missing, F.lit(Verdict.UNEXPLAINED))
        .when(equals_truth, F.lit(Verdict.MATCHED))
        .when(equals_what_its_layer_counted | F.col("manually_changed"), F.lit(Verdict.EXPLAINED))
        .otherwise(F.lit(Verdict.UNEXPLAINED))
    )


def verdict(joined: DataFrame, metrics: list[str]) -> Column:
    """A window's verdict (``verdict_of``), by its totals."""
    return verdict_of(audited_equals(joined, metrics, "truth"), explained_by_timing(joined, metrics))


def late_events() -> Column:
    return F.coalesce(F.col("late_events"), F.lit(0))


def unread_events() -> Column:
    return F.coalesce(F.col("not_yet_read_events"), F.lit(0))


def manual_cause() -> Column:
    return F.when(F.col("manually_changed"), F.lit(Cause.MANUAL_CHANGE))


def speed_causes() -> Column:
    """What the speed layer left out, by cause, and whether an operator's recorded repair changed the value."""
    causes_found = F.array(
        F.when(late_events() > 0, F.lit(Cause.LATE)),
        F.when(unread_events() > 0, F.lit(Cause.NOT_YET_READ)),
        F.when((late_events() > 0) & F.col("corrected"), F.lit(Cause.CORRECTED)),
        manual_cause(),
    )
    return F.filter(causes_found, lambda cause: cause.isNotNull())


def causes(joined: DataFrame, metrics: list[str]) -> Column:
    """A speed row's ``speed_causes``; a batch row's events are judged by their timing."""
    batch_causes = F.array(
        F.when(explained_by_timing(joined, metrics), F.lit(Cause.ARRIVED_AFTER_BATCH)), manual_cause()
    )
    batch_causes = F.filter(batch_causes, lambda cause: cause.isNotNull())
    return F.when(from_batch(), batch_causes).otherwise(speed_causes())


def after_batch_events(joined: DataFrame, metrics: list[str]) -> Column:
    """For a batch row: events that arrived after it was computed (counted by the source it matches)."""
    counted = F.when(audited_equals(joined, metrics, "bronze_before"), F.col("after_bronze_batch_events")).otherwise(
        F.col("after_log_batch_events")
    )
    return F.when(from_batch(), F.coalesce(counted, F.lit(0))).otherwise(F.lit(0))


def map_of(metrics: list[str], value) -> Column:
    """A map from each metric to ``value(metric)``, as a string."""
    return F.create_map(*[part for m in metrics for part in (F.lit(m), value(m).cast("string"))])


def metric_map(joined: DataFrame, metrics: list[str], prefix: str) -> Column:
    return map_of(metrics, lambda m: filled(joined, prefix, m))


def speed_minus(joined: DataFrame, counted: str):
    """Per metric, the audited value minus the ``counted`` totals."""
    return lambda m: filled(joined, "speed", m) - filled(joined, counted, m)


def residual(joined: DataFrame, metrics: list[str]) -> Column:
    """By how much the value differs from what its layer counted: a hand-edited value shows here."""
    return F.when(from_batch(), map_of(metrics, speed_minus(joined, "bronze_before"))).otherwise(
        map_of(metrics, speed_minus(joined, "on_time"))
    )


def key_json(pipeline: Pipeline) -> Column:
    """The row's key as JSON, in the pipeline's key order: how the recorded corrections and repairs
    are matched to the compared rows."""
    return F.to_json(F.create_map(*[part for k in pipeline.keys for part in (F.lit(k), F.col(k).cast("string"))]))


def flagged(joined: DataFrame, rows: DataFrame | None, flag: str, pipeline: Pipeline) -> DataFrame:
    """Flag the (window, key) rows listed in ``rows``: those a correction run recomputed, say, or
    those an operator's repair changed.

    Args:
        joined: one row per (window, key), the pipeline's keys as columns.
        rows: ``window_start``, ``window_end`` and the key as ``_key_json`` (None: none listed).
        flag: the boolean column added.
        pipeline: whose keys spell ``_key_json``.
    """
    if rows is None:
        return joined.withColumn(flag, F.lit(False))
    return (
        joined.withColumn("_key_json", key_json(pipeline))
        .join(rows.withColumn(flag, F.lit(True)), on=["window_start", "window_end", "_key_json"], how="left")
        .withColumn(flag, F.coalesce(flag, F.lit(False)))
        .drop("_key_json")
    )


@dataclasses.dataclass(frozen=True)
class Judgement:
    """How a compared row was judged: its verdict, the causes explaining it, the events that arrived
    after its batch value, and by how much it differs from what its layer counted."""

    status: Column
    causes: Column
    after_batch_events: Column
    residual: Column


def verdict_rows(joined: DataFrame, pipeline: Pipeline, judgement: Judgement) -> DataFrame:
    """The output row per compared (window, key): verdict, causes, truth and audited values, counts."""
    metrics, keys = pipeline.metric_names, list(pipeline.keys)
    status = judgement.status
    return joined.select(
        "window_start",
        "window_end",
        F.create_map(*[part for k in keys for part in (F.lit(k), F.col(k))]).alias("key"),
        status.alias("status"),
        F.when(status == Verdict.MATCHED, empty_strings()).otherwise(judgement.causes).alias("causes"),
        metric_map(joined, metrics, "truth").alias("truth"),
        metric_map(joined, metrics, "speed").alias("speed"),
        F.coalesce(F.col("source"), F.lit(Layer.SPEED)).alias("source"),
        late_events().alias("late_events"),
        unread_events().alias("not_yet_read_events"),
        judgement.after_batch_events.cast("long").alias("after_batch_events"),
        F.coalesce("unexplained_event_ids", empty_strings()).alias("unexplained_event_ids"),
        judgement.residual.alias("speed_minus_on_time"),
    )


def per_window_verdicts(joined: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The output row per closed window and key of fixed windows."""
    metrics = pipeline.metric_names
    judgement = Judgement(
        verdict(joined, metrics),
        causes(joined, metrics),
        after_batch_events(joined, metrics),
        residual(joined, metrics),
    )
    return verdict_rows(joined, pipeline, judgement)
