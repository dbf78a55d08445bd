"""The audit's comparison for session windows, as small pure functions (docs/design.md, "Audits").

A session is named by its key and its bounds, and its bounds move as events arrive: an event can
extend a session or bridge two. So the audit compares *groups*, not rows: per key, the truth's
sessions and the audited ones that overlap, transitively (``tx.overlap_groups``, the rule that
merges sessions). Three sets of sessions meet in a group, each computed by the batch layer's
transforms (``tx.window_values``):

- ``truth``: the sessions of every valid event of the log (first copies);
- ``on_time``: the sessions of those events that bronze holds as on time. The speed layer's
  sessions are exactly these: an on-time event cannot reach a session the stream has let go of;
- ``speed``: the audited rows, the speed table's sessions.

A group is *matched* when its audited sessions are the truth's (bounds and values), *explained* when
they are its on-time events' sessions and every other event has an explaining cause, or when an
operator's recorded repair touched it, and *unexplained* otherwise. Its row spans the group
(``window_start``, ``window_end``), with each set's totals over the group.
"""

from __future__ import annotations

import functools
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.audit import compare
from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.metric_merges import combined_over, compared
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.layers.batch import event_span
from lakehouse.layers.micro_batch import live_since
from lakehouse.vocabulary import Cause, Layer

TRUTH, ON_TIME, AUDITED = "truth", "on_time", "speed"  # the sets, named as compare.py's totals are
SESSION_SETS = (TRUTH, ON_TIME, AUDITED)
EVENTS = "events"
PART = "_part"  # which set, or the events, a row of the tagged frame belongs to
GROUP = "_group"


def tagged_parts(caused: DataFrame, audited: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The three sets of sessions and the truth's events in one frame, each row tagged by ``_part``.

    Args:
        caused: the truth's events with their ``cause``, each in its own window ``[t, t + gap)``.
        audited: the audited sessions (gold columns).
        pipeline: the session pipeline.
    """
    events = caused.select(
        *pipeline.keys,
        "window_start",
        "window_end",
        "cause",
        F.col(pipeline.event_id).alias("_event_id"),
        F.col(pipeline.event_time).alias("_event_time"),
    )
    parts = {
        TRUTH: tx.window_values(caused, pipeline),
        ON_TIME: tx.window_values(caused.where(F.col("cause") == Cause.ON_TIME), pipeline),
        AUDITED: audited.select(*pipeline.gold_columns),
        EVENTS: events,
    }
    tagged = [frame.withColumn(PART, F.lit(name)) for name, frame in parts.items()]
    return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), tagged)


def signature(pipeline: Pipeline) -> Column:
    """A session as compared: its bounds and each metric's compared value, as one string."""
    values = [compared(m, F.col(m.name)).cast("string").alias(m.name) for m in pipeline.metrics]
    return F.to_json(F.struct("window_start", "window_end", *values))


def group_rows(numbered: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Per key and group: its bounds; each set's sessions (``<set>_sessions``, sorted signatures) and
    totals (``<set>_<metric>``); its events by cause, and the newest event's time. The audited rows
    are the speed table's (``source``)."""
    part = F.col(PART)
    sessions = [
        F.sort_array(F.collect_list(F.when(part == name, signature(pipeline)))).alias(f"{name}_sessions")
        for name in SESSION_SETS
    ]
    totals = [
        combined_over(m, F.when(part == name, F.col(m.name))).alias(f"_{name}_{m.name}")
        for name in SESSION_SETS
        for m in pipeline.metrics
    ]
    cause = F.col("cause")
    grouped = numbered.groupBy(*pipeline.keys, GROUP).agg(
        F.min("window_start").alias("window_start"),
        F.max("window_end").alias("window_end"),
        *sessions,
        *totals,
        F.count(F.when(cause == Cause.LATE, 1)).alias("late_events"),
        F.count(F.when(cause == Cause.NOT_YET_READ, 1)).alias("not_yet_read_events"),
        F.sort_array(F.collect_list(F.when(cause == Cause.MISSING, F.col("_event_id")))).alias("unexplained_event_ids"),
        F.max("_event_time").alias("newest_event_time"),
    )
    compared_totals = [
        compared(m, F.col(f"_{name}_{m.name}")).alias(f"{name}_{m.name}")
        for name in SESSION_SETS
        for m in pipeline.metrics
    ]
    return grouped.select(
        *pipeline.keys,
        "window_start",
        "window_end",
        *[f"{name}_sessions" for name in SESSION_SETS],
        *compared_totals,
        "late_events",
        "not_yet_read_events",
        "unexplained_event_ids",
        "newest_event_time",
        F.lit(Layer.SPEED).alias("source"),
    )


def session_groups(
    caused: DataFrame, audited: DataFrame, pipeline: Pipeline, start: datetime, end: datetime
) -> DataFrame:
    """The groups that start in ``[start, end)``, one row each (``group_rows``).

    Args:
        caused: the truth's events with their ``cause``: every event a session starting in the range
            can hold (``event_span``).
        audited: the audited sessions (those starting in the same span are compared).
        pipeline: the session pipeline.
        start: first group start compared.
        end: end of the range of group starts (exclusive).
    """
    first_event, last_event = event_span(pipeline, start, end)
    tagged = tagged_parts(caused, audited.where(tx.in_window_range(first_event, last_event)), pipeline)
    numbered = tx.overlap_groups(tagged, list(pipeline.keys), GROUP)
    return group_rows(numbered, pipeline).where(tx.in_window_range(start, end))


def flagged_by_overlap(groups: DataFrame, rows: DataFrame | None, flag: str, pipeline: Pipeline) -> DataFrame:
    """Flag the groups that overlap a listed session of their key: one a correction run recomputed,
    say, or one an operator's repair changed (whose bounds may have moved since).

    Args:
        groups: one row per group, the pipeline's keys as columns.
        rows: ``window_start``, ``window_end`` and the key as ``_key_json`` (None: none listed).
        flag: the boolean column added.
        pipeline: whose keys spell ``_key_json``.
    """
    if rows is None:
        return groups.withColumn(flag, F.lit(False))
    # Each key's listed sessions as one array: one equi-join, and each group looks for an overlap in it.
    listed = rows.groupBy("_key_json").agg(
        F.collect_list(F.struct(F.col("window_start").alias("start"), F.col("window_end").alias("end"))).alias(
            "_listed"
        )
    )
    overlaps = F.exists(
        "_listed", lambda other: (other["start"] < F.col("window_end")) & (other["end"] > F.col("window_start"))
    )
    return (
        groups.withColumn("_key_json", compare.key_json(pipeline))
        .join(listed, on="_key_json", how="left")
        .withColumn(flag, F.coalesce(overlaps, F.lit(False)))
        .drop("_key_json", "_listed")
    )


def judgement(groups: DataFrame, pipeline: Pipeline) -> compare.Judgement:
    """A group's verdict by its sessions: the audited ones are the truth's (matched), or its on-time
    events' (explained by the causes of the rest); the residual is by the on-time events' totals."""
    audited = F.col(f"{AUDITED}_sessions")
    return compare.Judgement(
        status=compare.verdict_of(audited == F.col(f"{TRUTH}_sessions"), audited == F.col(f"{ON_TIME}_sessions")),
        causes=compare.speed_causes(),
        after_batch_events=F.lit(0),
        residual=compare.map_of(pipeline.metric_names, compare.speed_minus(groups, ON_TIME)),
    )


def verdicts(groups: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The output row per group (``compare.verdict_rows``), judged by its sessions."""
    return compare.verdict_rows(groups, pipeline, judgement(groups, pipeline))


def closed(watermark: datetime | None, pipeline: Pipeline) -> Column:
    """A group the stream can no longer change: it ends a gap or more before the watermark, so no
    on-time event can reach it (the speed layer lets go of its sessions by the same rule)."""
    return tx.closed_by(live_since(watermark, pipeline))
