"""The event-time rules, written once in lakehouse.eventtime, on the worked example of docs/design.md."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.eventtime import (
    format_duration,
    format_instant,
    is_closed,
    is_on_boundary,
    on_time_watermark,
    parse_duration,
    parse_instant,
    watermark,
)
from lakehouse.vocabulary import Fate, Reprocess, Source, choices

DELAY = timedelta(minutes=2)


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-05T{clock}")


def test_no_watermark_before_any_batch_has_seen_event_time():
    assert watermark(None, DELAY) is None
    assert not is_closed(at("08:01:00"), None)


def test_the_worked_example_watermarks_and_the_late_straggler():
    # Batch 1 runs after a batch whose max event time was 08:00:50; batch 2 after one at 08:03:30.
    assert watermark(at("08:00:50"), DELAY) == at("07:58:50")
    second = watermark(at("08:03:30"), DELAY)
    assert second == at("08:01:30")
    # The straggler at 08:00:20 belongs to [08:00, 08:01): closed, so the event is late.
    assert is_closed(at("08:01:00"), second)
    # A window ending exactly at the watermark is closed; one ending after it is not.
    assert is_closed(at("08:01:30"), second) and not is_closed(at("08:02:00"), second)


def test_allowed_lateness_moves_the_watermark_back_and_panes_ignore_it():
    assert watermark(at("08:03:30"), DELAY, timedelta(minutes=5)) == at("07:56:30")
    assert on_time_watermark(at("08:03:30"), DELAY) == at("08:01:30")


@pytest.mark.parametrize("text, seconds", [("0s", 0), ("90s", 90), ("5m", 300), ("1h", 3600), ("1d", 86400)])
def test_durations_read_and_print_back(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)
    assert parse_duration(format_duration(timedelta(seconds=seconds))) == timedelta(seconds=seconds)


def test_a_bad_duration_says_how_to_write_one():
    with pytest.raises(LakehouseError, match="write it like 0s, 90s, 5m, 1h or 1d"):
        parse_duration("5 minutes")


def test_instants_are_naive_utc_whatever_zone_they_were_written_in():
    assert parse_instant("2026-01-05T09:00:00+01:00", "start") == at("08:00:00")
    assert format_instant(at("08:00:00")) == "2026-01-05T08:00:00Z"
    with pytest.raises(LakehouseError, match="cannot read start 'yesterday'"):
        parse_instant("yesterday", "start")


def test_window_boundaries_are_aligned_on_the_epoch():
    assert is_on_boundary(at("08:05:00"), timedelta(minutes=5))
    assert not is_on_boundary(at("08:05:30"), timedelta(minutes=1))


def test_vocabularies_are_the_stored_strings():
    assert choices(Source) == ["bronze", "log"] and choices(Reprocess) == ["skip", "redo"]
    assert Fate.ON_TIME == "on_time" and f"{Fate.LATE}" == "late"
