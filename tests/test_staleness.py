"""Which hours of the batch layer are stale, decided from coverage rows and bronze's arrival times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lakehouse.layers.staleness import HourArrivals, hour_ranges, stale_hours
from lakehouse.vocabulary import Staleness

H8 = datetime(2026, 1, 5, 8, tzinfo=UTC)
HOUR = timedelta(hours=1)


def coverage(start, end, written_at, definition="now", run_id="r"):
    return {
        "range_start": start,
        "range_end": end,
        "written_at": written_at,
        "definition": definition,
        "run_id": run_id,
    }


def test_hours_recomputed_by_another_definition_are_stale_until_a_later_run_covers_them():
    rows = [coverage(H8, H8 + 3 * HOUR, H8 + 4 * HOUR, "old"), coverage(H8 + HOUR, H8 + 2 * HOUR, H8 + 5 * HOUR)]
    stale = stale_hours(rows, [], "now", None)
    assert [(s.hour, s.reason) for s in stale] == [
        (H8, Staleness.OLDER_DEFINITION),
        (H8 + 2 * HOUR, Staleness.OLDER_DEFINITION),
    ]
    assert hour_ranges(stale) == [(H8, H8 + HOUR), (H8 + 2 * HOUR, H8 + 3 * HOUR)]


def test_hours_with_events_and_no_recomputation_are_stale():
    arrivals = [HourArrivals(H8, H8 + HOUR, None), HourArrivals(H8 + HOUR, H8 + 2 * HOUR, None)]
    stale = stale_hours([coverage(H8, H8 + HOUR, H8 + 2 * HOUR)], arrivals, "now", None)
    assert [(s.hour, s.reason) for s in stale] == [(H8 + HOUR, Staleness.NEVER_RECOMPUTED)]


def test_events_after_the_recomputation_make_it_stale_unless_a_correction_folded_the_late_ones():
    written = H8 + 2 * HOUR
    rows = [coverage(H8, H8 + 2 * HOUR, written)]
    on_time_after = [HourArrivals(H8, written + HOUR, None)]
    assert [s.reason for s in stale_hours(rows, on_time_after, "now", None)] == [Staleness.LATER_DATA]
    late_after = [HourArrivals(H8 + HOUR, written - HOUR, written + HOUR)]
    assert [s.reason for s in stale_hours(rows, late_after, "now", None)] == [Staleness.LATER_DATA]
    assert stale_hours(rows, late_after, "now", written + 2 * HOUR) == []
    assert stale_hours(rows, [HourArrivals(H8, written - HOUR, None)], "now", None) == []
