"""Which hours of a pipeline's batch layer are stale (``lakehouse stale``), and filling them.

An hour of window starts is stale when:

- the latest recomputation covering it ran under another definition of the pipeline (its
  declaration or row rules changed since; a change to another pipeline does not count);
- bronze holds events of it and the batch layer never recomputed it;
- events of it reached bronze after that recomputation and no correction run has folded them
  (late events are folded by corrections; any other arrival needs a recomputation).

The decision is a pure function of small summaries (coverage rows, per-hour arrival times), so it
is tested without Spark; Spark only reads bronze once to summarise it.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.settings import Settings
from lakehouse.storage.catalog import BATCH_COVERAGE, CORRECTION_RUNS, pipeline_tables, table_in_storage
from lakehouse.storage.ops_tables import rows_at
from lakehouse.vocabulary import Fate, Staleness

HOUR = timedelta(hours=1)


@dataclasses.dataclass(frozen=True)
class HourArrivals:
    """When an hour's events (by window start) last reached bronze: on time, and late."""

    hour: datetime
    last_on_time: datetime | None
    last_late: datetime | None


@dataclasses.dataclass(frozen=True)
class StaleHour:
    hour: datetime
    reason: Staleness
    detail: str


def _hours(start: datetime, end: datetime):
    hour = start.replace(minute=0, second=0, microsecond=0)
    while hour < end:
        yield hour
        hour += HOUR


def latest_coverage(coverage: list[dict]) -> dict[datetime, dict]:
    """Per hour of window starts, the coverage row of the latest recomputation that spans it."""
    latest: dict[datetime, dict] = {}
    for row in sorted(coverage, key=lambda r: r["written_at"]):
        for hour in _hours(row["range_start"], row["range_end"]):
            latest[hour] = row
    return latest


def stale_hours(
    coverage: list[dict], arrivals: list[HourArrivals], definition: str, corrected_until: datetime | None
) -> list[StaleHour]:
    """The stale hours, in order, each with its first reason.

    Args:
        coverage: the pipeline's ops.batch_coverage rows (range_start, range_end, written_at, definition).
        arrivals: per hour of window starts with events in bronze, when they last arrived.
        definition: the pipeline's definition digest now.
        corrected_until: when the latest finished correction run finished (None: none has).
    """
    latest, found = latest_coverage(coverage), {}
    for hour, row in latest.items():
        if row.get("definition") != definition:
            found[hour] = StaleHour(hour, Staleness.OLDER_DEFINITION, f"recomputed by run {row['run_id']}")
    for seen in arrivals:
        row = latest.get(seen.hour)
        if seen.hour in found:
            continue
        if row is None:
            found[seen.hour] = StaleHour(seen.hour, Staleness.NEVER_RECOMPUTED, "events in bronze, no recomputation")
            continue
        folded = max(row["written_at"], corrected_until) if corrected_until else row["written_at"]
        if (seen.last_on_time and seen.last_on_time > row["written_at"]) or (
            seen.last_late and seen.last_late > folded
        ):
            found[seen.hour] = StaleHour(seen.hour, Staleness.LATER_DATA, f"events arrived after {row['written_at']}")
    return [found[hour] for hour in sorted(found)]


def hour_ranges(stale: list[StaleHour]) -> list[tuple[datetime, datetime]]:
    """Consecutive stale hours as [start, end) ranges, for as few backfills as possible."""
    ranges: list[tuple[datetime, datetime]] = []
    for item in stale:
        if ranges and ranges[-1][1] == item.hour:
            ranges[-1] = (ranges[-1][0], item.hour + HOUR)
        else:
            ranges.append((item.hour, item.hour + HOUR))
    return ranges


def _utc(moment: datetime | None) -> datetime | None:
    return moment if moment is None or moment.tzinfo else moment.replace(tzinfo=UTC)


def bronze_arrivals(spark: SparkSession, settings: Settings, pipeline: Pipeline) -> list[HourArrivals]:
    """Per hour of window starts, when its accepted events last reached bronze, on time and late."""
    uri = pipeline_tables(pipeline).bronze.uri(settings)
    if not table_in_storage(uri, settings):
        return []
    bronze = spark.read.format("delta").load(uri).where(F.col("fate").isin(Fate.ON_TIME, Fate.LATE))
    windows = tx.assign_windows(bronze.select(pipeline.event_time, "fate", "ingested_at"), pipeline)

    def last(fate: Fate):
        return F.max(F.when(F.col("fate") == fate, F.col("ingested_at")))

    summary = windows.groupBy(F.date_trunc("hour", "window_start").alias("hour")).agg(
        last(Fate.ON_TIME).alias("on_time"), last(Fate.LATE).alias("late")
    )
    return [HourArrivals(_utc(r["hour"]), _utc(r["on_time"]), _utc(r["late"])) for r in summary.collect()]


def find_stale(spark: SparkSession, settings: Settings, pipeline: Pipeline) -> list[StaleHour]:
    """The pipeline's stale hours, from its coverage rows, its correction runs and its bronze."""
    coverage = rows_at(BATCH_COVERAGE.uri(settings), None, [("pipeline", "=", pipeline.name)], settings)
    for row in coverage:
        row.update({k: _utc(row[k]) for k in ("range_start", "range_end", "written_at")})
    runs = rows_at(CORRECTION_RUNS.uri(settings), None, [("pipeline", "=", pipeline.name)], settings)
    finished = [_utc(r["finished_at"]) for r in runs if r["finished_at"] is not None]
    arrivals = bronze_arrivals(spark, settings, pipeline)
    return stale_hours(coverage, arrivals, pipeline.definition, max(finished, default=None))
