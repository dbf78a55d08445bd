"""The index of accepted ids (lakehouse.layers.seen_ids), on rows made in Python: no JVM."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa

from lakehouse.layers.seen_ids import (
    DIGEST_HIGH,
    DIGEST_LOW,
    EVENT_MICROS,
    RECENT_BATCHES,
    IdLookup,
    SeenIdIndex,
    kept_for,
)

HOUR = 3_600_000_000


def rows(*events: tuple[str, int]) -> pa.Table:
    """``digests_of``'s rows for (event id, event time in microseconds), the digest made the way
    Spark's ``sha2`` makes it: SHA-256 of the id's UTF-8 bytes."""
    digests = [hashlib.sha256(event_id.encode()).digest() for event_id, _ in events]
    return pa.table(
        {
            "event_id": [event_id for event_id, _ in events],
            DIGEST_HIGH: pa.array([int.from_bytes(d[:8], "big", signed=True) for d in digests], pa.int64()),
            DIGEST_LOW: pa.array([int.from_bytes(d[8:12], "big") for d in digests], pa.int64()),
            EVENT_MICROS: pa.array([at for _, at in events], pa.int64()),
        }
    )


def test_an_id_is_seen_only_with_an_event_time_inside_the_bounds_both_included():
    index = SeenIdIndex.of(rows(("a", 10 * HOUR), ("b", 11 * HOUR)), complete_from=9 * HOUR)
    batch = rows(("a", 10 * HOUR), ("b", 11 * HOUR), ("c", 10 * HOUR))
    assert index.seen(batch, 10 * HOUR, 11 * HOUR).tolist() == [True, True, False]
    assert index.seen(batch, 10 * HOUR + 1, 11 * HOUR - 1).tolist() == [False, False, False]


def test_ids_added_keep_the_index_sorted_and_each_time_an_id_was_accepted_counts():
    index = SeenIdIndex.of(rows(*[(f"id{n}", n) for n in range(0, 1000, 2)]), complete_from=0)
    index = index.with_rows(rows(*[(f"id{n}", n) for n in range(1, 1000, 2)], ("id4", 5 * HOUR)))
    assert len(index) == 1001 and np.all(np.diff(index.base.high) >= 0) and np.all(np.diff(index.recent.high) >= 0)
    probe = rows(*[(f"id{n}", 0) for n in range(1000)], ("new", 0))
    assert index.seen(probe, 0, 5 * HOUR).tolist() == [True] * 1000 + [False]
    assert index.seen(rows(("id4", 0)), 4 * HOUR, 6 * HOUR).tolist() == [True]  # its second acceptance


def test_a_batch_s_rows_go_to_the_small_run_until_it_holds_an_eighth_of_the_large_one():
    index = SeenIdIndex.of(rows(*[(f"id{n}", n) for n in range(80)]), complete_from=0)
    index = index.with_rows(rows(*[(f"new{n}", n) for n in range(9)]))
    assert (len(index.base), len(index.recent)) == (80, 9)
    index = index.with_rows(rows(("one more", 0)))
    assert (len(index.base), len(index.recent)) == (90, 0)
    assert index.seen(rows(("id0", 0), ("new8", 8), ("one more", 0), ("never", 0)), 0, 100).tolist() == [
        True,
        True,
        True,
        False,
    ]


def test_old_event_times_are_dropped_once_they_are_a_tenth_of_the_index_and_coverage_moves():
    index = SeenIdIndex.of(rows(*[(f"id{n}", n * HOUR) for n in range(20)]), complete_from=0)
    assert index.kept_from(HOUR) is index  # 1 of 20 older: kept, still complete from 0
    trimmed = index.kept_from(2 * HOUR)
    assert (trimmed.complete_from, len(trimmed)) == (2 * HOUR, 18)
    assert trimmed.kept_from(HOUR) is trimmed


def test_after_a_batch_the_index_holds_its_accepted_rows_and_drops_what_no_batch_needs():
    index = SeenIdIndex.of(rows(("old", 0), ("kept", 2 * HOUR)), complete_from=0)
    batch = rows(("a", 3 * HOUR), ("b", 3 * HOUR), ("b", 3 * HOUR), ("kept", 3 * HOUR))
    duplicate = np.array([False, False, True, True])  # a later copy of b, an id seen before
    after = IdLookup(index, batch, duplicate, since=2 * HOUR).index_after(at_hour(4), timedelta(hours=2))
    assert after.complete_from == 2 * HOUR - MINUTES_10  # the batch's horizon and 10 minutes
    assert sorted(after.base.times.tolist() + after.recent.times.tolist()) == [2 * HOUR, 3 * HOUR, 3 * HOUR]
    since, until = 0, 4 * HOUR
    assert after.seen(rows(("a", 0), ("b", 0), ("old", 0)), since, until).tolist() == [True, True, False]


def at_hour(hour: float) -> datetime:
    return datetime(1970, 1, 1) + timedelta(hours=hour)


MINUTES_10 = HOUR // 6


def test_the_index_keeps_the_horizons_of_the_last_batches_stragglers_up_to_an_hour_of_lateness():
    horizon = timedelta(hours=1)
    newest = at_hour(10)
    # On time only: the horizon and 10 minutes behind the newest event.
    assert kept_for((9 * HOUR,), newest, horizon) == 9 * HOUR - MINUTES_10
    # A straggler half an hour late in one of the last batches: its horizon is kept.
    assert kept_for((9 * HOUR, 8 * HOUR + HOUR // 2, 9 * HOUR), newest, horizon) == 8 * HOUR + HOUR // 2 - MINUTES_10
    # One a day late: kept only an hour beyond the horizon.
    assert kept_for((9 * HOUR - 24 * HOUR,), newest, horizon) == 8 * HOUR - MINUTES_10


def test_a_batch_horizon_is_remembered_for_the_last_sixty_batches_only():
    index = SeenIdIndex.of(rows(*[(f"old{n}", 7 * HOUR + n) for n in range(100)]), complete_from=7 * HOUR)
    straggler = IdLookup(index, rows(("late", 8 * HOUR)), np.array([False]), since=7 * HOUR)
    index = straggler.index_after(at_hour(9), timedelta(hours=1))
    for n in range(RECENT_BATCHES):
        assert index.complete_from == 7 * HOUR  # the straggler's horizon is still kept
        on_time = IdLookup(index, rows((f"new{n}", 9 * HOUR + n)), np.array([False]), since=8 * HOUR + n)
        index = on_time.index_after(at_hour(9) + timedelta(microseconds=n), timedelta(hours=1))
    assert index.complete_from == 8 * HOUR - MINUTES_10  # the oldest horizon of the last 60, the first
