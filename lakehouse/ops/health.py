"""Is the speed layer alive and keeping up? Decided from ``ops.stream_progress`` alone.

Stale: its last micro-batch started longer ago than ``LAKEHOUSE_STREAM_MAX_STALENESS``.
Falling behind: its lag (a batch's start, wall time, minus the newest event time it had seen)
grew at every one of the last ``LAKEHOUSE_STREAM_LAG_BATCHES`` micro-batches, by more than one
trigger interval in all, to more than ``LAKEHOUSE_STREAM_LAG_TOLERANCE``. A replay of old data has a
huge but shrinking lag, so growth is what counts; a stream that keeps up has a lag that jitters by a
fraction of a second from batch to batch, so a few small rises in a row are not growth; and on a busy
machine a stream that keeps up can start a few batches in a row a second or two later behind its
files, so a lag below the tolerance is never falling behind, however it moved.
"""

from __future__ import annotations

import dataclasses
import itertools
from datetime import datetime, timedelta

from lakehouse.eventtime import format_duration, parse_duration
from lakehouse.settings import Settings


@dataclasses.dataclass(frozen=True)
class HealthVerdict:
    pipeline: str
    ok: bool
    message: str


def _naive_utc(moment: datetime) -> datetime:
    """Rows from delta-rs carry UTC zones, Spark's none: compare them all as naive UTC."""
    if moment.tzinfo is None:
        return moment
    return moment.replace(tzinfo=None) - moment.utcoffset()


def _ago(delta: timedelta) -> str:
    return format_duration(timedelta(seconds=int(delta.total_seconds())))


def assess_stream_health(
    pipeline: str,
    batches: list[dict],
    as_of: datetime,
    max_staleness: timedelta,
    lag_batches: int,
    noise: timedelta = timedelta(0),
    tolerance: timedelta = timedelta(0),
) -> HealthVerdict:
    """The stream's health as of a moment. ``batches``: ops.stream_progress rows (batch_id, started_at,
    max_event_time) of one pipeline; those started after ``as_of`` are not looked at, so judging an
    earlier moment again (a retried or late scheduled check) gives the same verdict.

    Args:
        pipeline: the pipeline's name.
        batches: its ``ops.stream_progress`` rows (batch_id, started_at, max_event_time).
        as_of: the moment judged; batches started later are not looked at.
        max_staleness: stale when the last batch started longer ago than this.
        lag_batches: falling behind when the lag grew over this many consecutive batches...
        noise: ... by more than this in all (the trigger interval) ...
        tolerance: ... to more than this.
    """
    as_of = _naive_utc(as_of)
    batches = [b for b in batches if _naive_utc(b["started_at"]) <= as_of]
    if not batches:
        return HealthVerdict(
            pipeline,
            False,
            f"speed layer for {pipeline} has never run: ops.stream_progress "
            "has no micro-batch (start it with `lakehouse stream`)",
        )
    ordered = sorted(batches, key=lambda b: _naive_utc(b["started_at"]))
    last = ordered[-1]
    silent_for = as_of - _naive_utc(last["started_at"])
    if silent_for > max_staleness:
        return HealthVerdict(
            pipeline,
            False,
            (
                f"speed layer for {pipeline} is stale: its last micro-batch (batch {last['batch_id']}) started "
                f"{_ago(silent_for)} ago, more than the {format_duration(max_staleness)} allowed "
                "(LAKEHOUSE_STREAM_MAX_STALENESS); is the stream running?"
            ),
        )
    recent = [b for b in ordered[-(lag_batches + 1) :] if b.get("max_event_time") is not None]
    lags = [_naive_utc(b["started_at"]) - _naive_utc(b["max_event_time"]) for b in recent]
    rising = len(lags) == lag_batches + 1 and all(later > earlier for earlier, later in itertools.pairwise(lags))
    if rising and lags[-1] - lags[0] > noise and lags[-1] > tolerance:
        return HealthVerdict(
            pipeline,
            False,
            (
                f"speed layer for {pipeline} is falling behind: its lag grew at each of the last {lag_batches} "
                f"micro-batches, from {_ago(lags[0])} to {_ago(lags[-1])} (batches {recent[0]['batch_id']}.."
                f"{recent[-1]['batch_id']}); give it more resources or fewer files per trigger"
            ),
        )
    return HealthVerdict(
        pipeline,
        True,
        (f"speed layer for {pipeline} is healthy: last micro-batch {last['batch_id']} started {_ago(silent_for)} ago"),
    )


def check_stream_health(settings: Settings, pipeline: str, as_of: datetime) -> HealthVerdict:
    """Read the pipeline's progress rows (delta-rs, no JVM) and assess them."""
    from lakehouse.storage.ops_tables import read_rows

    rows = read_rows(
        settings,
        "ops",
        "stream_progress",
        ["pipeline", "batch_id", "started_at", "max_event_time"],
        [("pipeline", "=", pipeline)],
    )
    return assess_stream_health(
        pipeline,
        rows,
        as_of,
        parse_duration(settings.stream_max_staleness),
        settings.stream_lag_batches,
        noise=parse_duration(settings.trigger_interval),
        tolerance=parse_duration(settings.stream_lag_tolerance),
    )
