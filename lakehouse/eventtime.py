"""Event time, written once: durations, instants, ranges and the watermark rule.

Stream, batch, audit, CLI and DAGs all read time through this module (stdlib only: the DAG files
import it at parse time). Instants are naive UTC ``datetime``s, the form PySpark hands back in a
UTC session; windows are half-open ``[start, end)``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from lakehouse.errors import LakehouseError
from lakehouse.vocabulary import WindowKind

EPOCH = datetime(1970, 1, 1)
# An event may be stamped up to a day ahead of its sending (a device clock ahead of the log's).
FUTURE_TOLERANCE = timedelta(days=1)
# Whole seconds and up: event-time windows, watermarks and triggers here are never finer than that.
_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def micros(moment: datetime) -> int:
    """An instant in microseconds since the epoch, exactly (Spark's ``unix_micros``)."""
    return micros_of(moment.replace(tzinfo=None) - EPOCH)


def micros_of(duration: timedelta) -> int:
    """A duration in whole microseconds, exactly (a ``timedelta`` holds no finer unit)."""
    return duration // timedelta(microseconds=1)


def parse_duration(text: str) -> timedelta:
    """Parse the durations used everywhere in the CLI and settings: ``0s``, ``90s``, ``5m``, ``1h``, ``1d``."""
    match = _DURATION.match(str(text))
    if not match:
        raise LakehouseError(f"cannot read duration {text!r}: write it like 0s, 90s, 5m, 1h or 1d")
    amount, unit = match.groups()
    try:
        return timedelta(seconds=int(amount) * _UNIT_SECONDS[unit])
    except OverflowError:
        raise LakehouseError(f"duration {text!r} is too long: at most 999999999d") from None


def format_duration(value: timedelta) -> str:
    """The inverse of :func:`parse_duration`, in the largest unit that divides the duration."""
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_instant(text: str, what: str) -> datetime:
    """An ISO-8601 date or date-time; without a zone it is UTC. Returned as naive UTC."""
    cleaned = str(text).strip()
    try:
        if not (cleaned.isascii() and cleaned.isprintable()):  # fromisoformat stops at a NUL, say
            raise ValueError(cleaned)
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise LakehouseError(f"cannot read {what} {text!r}: use ISO-8601, e.g. 2026-01-05T08:00:00Z") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def format_instant(moment: datetime) -> str:
    """A naive UTC instant as ISO-8601 with its ``Z``."""
    return f"{moment.isoformat()}Z"


def is_on_boundary(moment: datetime, step: timedelta) -> bool:
    """Whether ``moment`` starts a window of a grid of ``step`` aligned on the epoch (Spark's alignment)."""
    return (moment - EPOCH) % step == timedelta(0)


def watermark(
    max_event_time_before: datetime | None, watermark_delay: timedelta, allowed_lateness: timedelta = timedelta(0)
) -> datetime | None:
    """Spark's watermark during micro-batch n: the max event time of batches before n, less the delay
    and the allowed lateness. Nothing is late until some earlier batch has seen event time."""
    if max_event_time_before is None:
        return None
    return max_event_time_before - watermark_delay - allowed_lateness


def on_time_watermark(max_event_time_seen: datetime | None, watermark_delay: timedelta) -> datetime | None:
    """The watermark that labels panes (Streaming 102): the max event time seen through this batch less
    the delay. A pane is ON_TIME for the first emission at or after it passes the window's end."""
    return watermark(max_event_time_seen, watermark_delay)


def is_closed(window_end: datetime, current_watermark: datetime | None) -> bool:
    """A window is closed, and an event of it late, when its end is at or before the watermark."""
    return current_watermark is not None and window_end <= current_watermark


def first_event_time(pipeline, start: datetime) -> datetime:
    """The earliest event time that windows starting at ``start`` or later can hold: ``start``, or for
    sessions ``session_lookback`` before it (a session is known to start in a range only if no event
    came less than a gap before). ``pipeline`` is a declaration or the pipeline built from one."""
    if pipeline.window.kind == WindowKind.SESSION:
        return start - parse_duration(pipeline.session_lookback)
    return start


def earliest_arrival_for(event_time_start: datetime, future_tolerance: timedelta = FUTURE_TOLERANCE) -> datetime:
    """An event may be stamped up to a day ahead of its sending: it arrived no earlier than this."""
    return event_time_start - future_tolerance
