"""Is the speed layer alive and keeping up? Judged on its figures (lakehouse.ops.stream_figures), the
same figures its metrics endpoint exports.

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
from lakehouse.ops.stream_figures import StreamFigures, progress_figures, read_stream_figures
from lakehouse.settings import Settings


@dataclasses.dataclass(frozen=True)
class HealthVerdict:
    pipeline: str
    ok: bool
    message: str
    falling_behind: bool = False


@dataclasses.dataclass(frozen=True)
class HealthBounds:
    """What the verdict holds a stream's figures against (the settings' LAKEHOUSE_STREAM_*)."""

    max_staleness: timedelta
    lag_batches: int
    noise: timedelta = timedelta(0)  # the trigger interval
    tolerance: timedelta = timedelta(0)

    @classmethod
    def of(cls, settings: Settings) -> HealthBounds:
        return cls(
            parse_duration(settings.stream_max_staleness),
            settings.stream_lag_batches,
            noise=parse_duration(settings.trigger_interval),
            tolerance=parse_duration(settings.stream_lag_tolerance),
        )


def _ago(seconds: float) -> str:
    return format_duration(timedelta(seconds=int(seconds)))


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
    figures = progress_figures(pipeline, batches, as_of, recent=lag_batches + 1)
    return judge(figures, HealthBounds(max_staleness, lag_batches, noise, tolerance))


def judge(figures: StreamFigures, bounds: HealthBounds) -> HealthVerdict:
    """The verdict on a stream's figures (lakehouse.ops.stream_figures): never run, stale, falling
    behind or healthy."""
    pipeline, last = figures.pipeline, figures.last_batch
    if last is None:
        return HealthVerdict(
            pipeline,
            False,
            f"speed layer for {pipeline} has never run: ops.stream_progress "
            "has no micro-batch (start it with `lakehouse stream`)",
        )
    silent_for = figures.last_batch_age
    if silent_for > bounds.max_staleness.total_seconds():
        return HealthVerdict(
            pipeline,
            False,
            (
                f"speed layer for {pipeline} is stale: its last micro-batch (batch {last['batch_id']}) started "
                f"{_ago(silent_for)} ago, more than the {format_duration(bounds.max_staleness)} allowed "
                "(LAKEHOUSE_STREAM_MAX_STALENESS); is the stream running?"
            ),
        )
    recent = figures.recent_lags[-(bounds.lag_batches + 1) :]
    lags = [lag for _, lag in recent]
    rising = len(lags) == bounds.lag_batches + 1 and all(later > earlier for earlier, later in itertools.pairwise(lags))
    if rising and lags[-1] - lags[0] > bounds.noise.total_seconds() and lags[-1] > bounds.tolerance.total_seconds():
        return HealthVerdict(
            pipeline,
            False,
            (
                f"speed layer for {pipeline} is falling behind: its lag grew at each of the last {bounds.lag_batches} "
                f"micro-batches, from {_ago(lags[0])} to {_ago(lags[-1])} (batches {recent[0][0]}.."
                f"{recent[-1][0]}); give it more resources or fewer files per trigger"
            ),
            falling_behind=True,
        )
    return HealthVerdict(
        pipeline,
        True,
        (f"speed layer for {pipeline} is healthy: last micro-batch {last['batch_id']} started {_ago(silent_for)} ago"),
    )


def check_stream_health(settings: Settings, pipeline: str, as_of: datetime) -> HealthVerdict:
    """Read the pipeline's figures (delta-rs, no JVM: the metrics endpoint reads the same) and judge them."""
    bounds = HealthBounds.of(settings)
    return judge(read_stream_figures(settings, pipeline, as_of, recent=bounds.lag_batches + 1), bounds)
