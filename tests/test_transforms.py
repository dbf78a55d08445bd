"""The shared DataFrame transforms, on tiny inline inputs, with the toll-traffic pipeline.

Every parse case below is one line of the log; the lines are parsed together once (a Spark job
costs far more than a comparison), and each test then looks at the line it is about.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines import get_pipeline
from tests.frames import inline_frame

PIPELINE = get_pipeline("toll_traffic")

VALID = {
    "event_id": "e-1",
    "bridge_id": "bridge-00",
    "booth_id": "bridge-00-booth-1",
    "vehicle_type": "van",
    "axles": 3,
    "toll_amount": 12.34,
    "plate_hash": "9f86d081884c7d65",
    "event_time": "2026-01-05T08:00:30.250Z",
    "sent_at": "2026-01-05T08:00:31.000Z",
}


def event(**changes) -> str:
    return json.dumps({**VALID, **changes})


def event_without(*fields: str, **changes) -> str:
    return json.dumps({k: v for k, v in {**VALID, **changes}.items() if k not in fields})


REQUIRED_FIELDS = ["event_id", "bridge_id", "booth_id", "vehicle_type", "axles", "toll_amount", "event_time", "sent_at"]

# source_file (the case's name) -> (raw line, expected reason; None for a valid event)
CASES: dict[str, tuple[str, str | None]] = {
    "valid": (event(), None),
    "valid_without_plate_hash": (event_without("plate_hash"), None),
    "valid_with_null_plate_hash": (event(plate_hash=None), None),
    "valid_with_zone_offset": (event(event_time="2026-01-05T09:30:00.250+01:00"), None),
    "valid_toll_999.99": (event(toll_amount=999.99), None),
    "valid_toll_0": (event(toll_amount=0), None),
    "valid_toll_one_decimal": (event(toll_amount=12.5), None),
    "valid_toll_integer": (event(toll_amount=7), None),
    "valid_axles_2": (event(axles=2), None),
    "valid_axles_9": (event(axles=9), None),
    "valid_event_time_exactly_one_day_after_sent_at": (
        event(event_time="2026-01-06T08:00:31.000Z", sent_at="2026-01-05T08:00:31.000Z"),
        None,
    ),
    "valid_event_time_long_before_sent_at": (event(event_time="2025-12-01T00:00:00Z"), None),
    "truncated_json": (event()[:30], "bad_json"),
    "empty_line": ("", "bad_json"),
    "duplicate_keys": ('{"event_id":"e-1","event_id":"e-2"}', "bad_json"),
    "json_array": (f"[{event()}]", "not_an_object"),
    "json_null": ("null", "not_an_object"),
    **{f"missing_{field}": (event_without(field), f"missing_field:{field}") for field in REQUIRED_FIELDS},
    "null_bridge_id": (event(bridge_id=None), "missing_field:bridge_id"),
    "axles_as_string": (event(axles="3"), "wrong_type:axles"),
    "axles_as_3.0": (event(axles=3.0), "wrong_type:axles"),
    "toll_as_string": (event(toll_amount="12.34"), "wrong_type:toll_amount"),
    "toll_with_three_decimals": (event(toll_amount=1.005), "wrong_type:toll_amount"),
    "booth_id_as_number": (event(booth_id=17), "wrong_type:booth_id"),
    "event_time_as_number": (event(event_time=1767600030), "wrong_type:event_time"),
    "plate_hash_as_number": (event(plate_hash=42), "wrong_type:plate_hash"),
    "event_time_without_zone": (event(event_time="2026-01-05T08:00:30.250"), "bad_timestamp:event_time"),
    "event_time_in_month_13": (event(event_time="2026-13-05T08:00:30Z"), "bad_timestamp:event_time"),
    "sent_at_without_zone": (event(sent_at="2026-01-05T08:00:31"), "bad_timestamp:sent_at"),
    "vehicle_type_tractor": (event(vehicle_type="tractor"), "unknown_vehicle_type"),
    "vehicle_type_capitalised": (event(vehicle_type="Car"), "unknown_vehicle_type"),
    "axles_1": (event(axles=1), "axles_out_of_range"),
    "axles_10": (event(axles=10), "axles_out_of_range"),
    "toll_minus_one_cent": (event(toll_amount=-0.01), "toll_out_of_range"),
    "toll_1000": (event(toll_amount=1000), "toll_out_of_range"),
    "event_time_one_day_and_a_millisecond_after_sent_at": (
        event(event_time="2026-01-06T08:00:31.001Z", sent_at="2026-01-05T08:00:31.000Z"),
        "event_time_too_far_in_future",
    ),
    # Several rules broken: the first in declaration order names the record.
    "missing_bridge_id_and_unknown_vehicle_type": (
        event_without("bridge_id", vehicle_type="tractor"),
        "missing_field:bridge_id",
    ),
    "bad_event_time_and_unknown_vehicle_type": (
        event(event_time="2026-01-05T08:00:30", vehicle_type="tractor"),
        "bad_timestamp:event_time",
    ),
    "axles_and_toll_out_of_range": (event(axles=1, toll_amount=1000), "axles_out_of_range"),
    "wrong_type_axles_and_missing_toll": (event_without("toll_amount", axles="3"), "wrong_type:axles"),
}


@pytest.fixture(scope="module")
def parsed(spark):
    raw = inline_frame(spark, "value string, source_file string", [(line, name) for name, (line, _) in CASES.items()])
    frame = tx.parse_events(raw, PIPELINE).persist()
    yield frame
    frame.unpersist()


@pytest.fixture(scope="module")
def reasons(parsed) -> dict[str, list[str | None]]:
    """Every reason given to each case's line (a list, so a line that came out twice would show)."""
    out: dict[str, list[str | None]] = {}
    for row in parsed.select("source_file", "reason").collect():
        out.setdefault(row.source_file, []).append(row.reason)
    return out


def ts(text: str) -> datetime:
    """A naive UTC datetime (the test session runs in UTC) from ``HH:MM:SS[.fff]`` on 2026-01-05."""
    return datetime.fromisoformat(f"2026-01-05T{text}")


# --- parse_events ----------------------------------------------------------------------------------


def test_every_input_line_comes_out_exactly_once(reasons):
    assert {name: len(found) for name, found in reasons.items()} == {name: 1 for name in CASES}


@pytest.mark.parametrize("case", [name for name, (_, reason) in CASES.items() if reason is None])
def test_valid_event_has_no_reason(reasons, case):
    assert reasons[case] == [None]


@pytest.mark.parametrize("case", [name for name, (_, reason) in CASES.items() if reason is not None])
def test_broken_line_is_quarantined_for_the_first_rule_it_breaks(reasons, case):
    assert reasons[case] == [CASES[case][1]]


def test_valid_event_is_read_into_typed_values(spark, parsed):
    expected = inline_frame(
        spark,
        PIPELINE.event_schema,
        [
            (
                "e-1",
                "bridge-00",
                "bridge-00-booth-1",
                "van",
                3,
                Decimal("12.34"),
                "9f86d081884c7d65",
                ts("08:00:30.250"),
                ts("08:00:31"),
            )
        ],
    )
    actual = parsed.where(F.col("source_file") == "valid").select(*PIPELINE.field_names)
    assertDataFrameEqual(actual, expected, rtol=0, atol=0)


def test_a_zone_offset_is_converted_to_utc(spark, parsed):
    actual = parsed.where(F.col("source_file") == "valid_with_zone_offset").select("event_time")
    assertDataFrameEqual(actual, inline_frame(spark, "event_time timestamp", [(ts("08:30:00.250"),)]))


def test_toll_amounts_are_exact_decimals_to_the_cent(spark, parsed):
    tolls = [
        ("valid", Decimal("12.34")),
        ("valid_toll_999.99", Decimal("999.99")),
        ("valid_toll_0", Decimal("0.00")),
        ("valid_toll_one_decimal", Decimal("12.50")),
        ("valid_toll_integer", Decimal("7.00")),
    ]
    actual = parsed.where(F.col("source_file").isin([case for case, _ in tolls])).select("source_file", "toll_amount")
    assertDataFrameEqual(
        actual, inline_frame(spark, "source_file string, toll_amount decimal(9,2)", tolls), rtol=0, atol=0
    )


def test_absent_and_null_plate_hash_both_read_as_null(spark, parsed):
    cases = ["valid_without_plate_hash", "valid_with_null_plate_hash"]
    actual = parsed.where(F.col("source_file").isin(cases)).select("source_file", "plate_hash")
    assertDataFrameEqual(
        actual, inline_frame(spark, "source_file string, plate_hash string", [(name, None) for name in cases])
    )


# --- valid_events / quarantined_records ------------------------------------------------------------


def test_valid_events_keep_only_the_lines_without_a_reason(spark, parsed):
    expected = inline_frame(
        spark,
        "source_file string, value string",
        [(name, line) for name, (line, reason) in CASES.items() if reason is None],
    )
    assertDataFrameEqual(tx.valid_events(parsed, PIPELINE).select("source_file", "value"), expected)


def test_valid_events_carry_the_source_file_the_raw_line_and_the_typed_fields(parsed):
    assert tx.valid_events(parsed, PIPELINE).columns == ["source_file", "value", *PIPELINE.field_names]


def test_quarantined_records_keep_the_raw_line_its_reason_and_the_event_id_it_names(spark, parsed):
    cases = ["truncated_json", "axles_10", "missing_event_id", "valid"]
    expected = inline_frame(
        spark,
        "raw string, reason string, event_id string, source_file string",
        [
            (CASES["truncated_json"][0], "bad_json", None, "truncated_json"),
            (CASES["axles_10"][0], "axles_out_of_range", "e-1", "axles_10"),
            (CASES["missing_event_id"][0], "missing_field:event_id", None, "missing_event_id"),
        ],
    )
    assertDataFrameEqual(tx.quarantined_records(parsed.where(F.col("source_file").isin(cases))), expected)


# --- assign_windows --------------------------------------------------------------------------------

EVENT = "event_id string, event_time timestamp"
WINDOWED_EVENT = "event_id string, event_time timestamp, window_start timestamp, window_end timestamp"


def test_event_exactly_at_window_end_belongs_to_next_window(spark):
    events = inline_frame(spark, EVENT, [("e-1", ts("08:01:00.000"))])
    expected = inline_frame(spark, WINDOWED_EVENT, [("e-1", ts("08:01:00.000"), ts("08:01:00"), ts("08:02:00"))])
    assertDataFrameEqual(tx.assign_windows(events, PIPELINE), expected)


def test_event_in_the_last_millisecond_of_a_window_stays_in_it(spark):
    events = inline_frame(spark, EVENT, [("e-1", ts("08:00:59.999"))])
    expected = inline_frame(spark, WINDOWED_EVENT, [("e-1", ts("08:00:59.999"), ts("08:00:00"), ts("08:01:00"))])
    assertDataFrameEqual(tx.assign_windows(events, PIPELINE), expected)


HOPPING = get_pipeline("toll_traffic_5m")  # 5-minute windows sliding by 1 minute
SESSIONS = get_pipeline("team_scores_sessions")  # 1-minute gap


def test_hopping_windows_place_one_event_in_size_over_slide_windows(spark):
    events = inline_frame(spark, EVENT, [("e-1", ts("08:04:30"))])
    starts = sorted(r["window_start"] for r in tx.assign_windows(events, HOPPING).collect())
    assert starts == [ts("08:00:00"), ts("08:01:00"), ts("08:02:00"), ts("08:03:00"), ts("08:04:00")]


def test_hopping_event_exactly_at_a_window_end_leaves_that_window(spark):
    events = inline_frame(spark, EVENT, [("e-1", ts("08:05:00"))])
    ends = sorted(r["window_end"] for r in tx.assign_windows(events, HOPPING).collect())
    assert ends == [ts("08:06:00"), ts("08:07:00"), ts("08:08:00"), ts("08:09:00"), ts("08:10:00")]


def test_hopping_windows_count_each_event_once_over_a_range(spark):
    """A backfill reports the events it used: summed over the range's windows, each event once,
    though it falls in five 5-minute windows sliding by 1 minute (the last, only in the range's last
    two windows). Over several chunks too: tests/test_own_pipeline.py."""
    from lakehouse.layers.batch import event_span

    start, end = ts("08:00:00"), ts("08:10:00")
    times = ("08:00:30", "08:04:30", "08:09:30", "08:12:00")
    assert all(event_span(HOPPING, start, end)[0] <= ts(t) < event_span(HOPPING, start, end)[1] for t in times)
    events = inline_frame(
        spark,
        "event_id string, bridge_id string, vehicle_type string, toll_amount decimal(9,2), event_time timestamp",
        [(f"e-{i}", "bridge-00", "car", Decimal("6.00"), ts(t)) for i, t in enumerate(times)],
    )
    windows = tx.window_values(events, HOPPING, count_events_before=end).where(tx.in_window_range(start, end))
    assert windows.agg(F.sum("events")).first()[0] == len(times)


@pytest.mark.parametrize(
    "pipeline, event_time, first_end",
    [
        (PIPELINE, "08:00:59.999", "08:01:00"),
        (PIPELINE, "08:01:00", "08:02:00"),
        (HOPPING, "08:04:30", "08:05:00"),
        (HOPPING, "08:05:00", "08:06:00"),
        (SESSIONS, "08:04:30", "08:05:30"),
    ],
)
def test_first_window_end_is_the_earliest_end_of_the_event_windows(spark, pipeline, event_time, first_end):
    events = inline_frame(spark, "event_time timestamp", [(ts(event_time),)])
    assert events.select(tx.first_window_end(pipeline)).first()[0] == ts(first_end)


SESSION_POINTS = "user string, window_start timestamp, window_end timestamp, total_score long"


def test_sessions_less_than_a_gap_apart_merge_and_a_session_ending_where_the_next_starts_does_not(spark):
    events = inline_frame(
        spark,
        "event_id string, user string, score int, event_time timestamp",
        [
            ("a", "u", 1, ts("08:00:00")),
            ("b", "u", 2, ts("08:00:59")),  # 59 s apart: one session
            ("c", "u", 4, ts("08:01:59")),  # starts where it ends: a new one
            ("d", "v", 8, ts("08:00:30")),
        ],
    )
    expected = inline_frame(
        spark,
        SESSION_POINTS,
        [
            ("u", ts("08:00:00"), ts("08:01:59"), 3),
            ("u", ts("08:01:59"), ts("08:02:59"), 4),
            ("v", ts("08:00:30"), ts("08:01:30"), 8),
        ],
    )
    assertDataFrameEqual(tx.window_values(events, SESSIONS).select(*expected.columns), expected)


# --- label_fates -----------------------------------------------------------------------------------

# An event at the start of its window: (batch_row, event_time, window_end).
WINDOWED = "batch_row long, source_file string, value string, event_time timestamp, window_end timestamp"
FATES = "value string, fate string"
W0 = (ts("08:00:00"), ts("08:01:00"))
W1 = (ts("08:01:00"), ts("08:02:00"))


def fates(spark, rows, watermark=None, duplicates=()):
    windowed = inline_frame(spark, WINDOWED, rows)
    duplicate_rows = inline_frame(spark, f"{tx.BATCH_ROW} long", [(row,) for row in duplicates])
    return tx.label_fates(windowed, duplicate_rows, watermark, PIPELINE).select("value", "fate")


def test_label_fates_adds_only_the_fate_column(spark):
    windowed = inline_frame(spark, WINDOWED, [])
    labelled = tx.label_fates(windowed, inline_frame(spark, f"{tx.BATCH_ROW} long", []), None, PIPELINE)
    assert sorted(labelled.columns) == sorted([*windowed.columns, "fate"])


def test_the_rows_the_driver_found_duplicate_are_duplicates(spark):
    rows = [(0, "f1.jsonl", "v0", *W0), (1, "f1.jsonl", "v1", *W0)]
    expected = inline_frame(spark, FATES, [("v0", "duplicate"), ("v1", "on_time")])
    assertDataFrameEqual(fates(spark, rows, duplicates=[0]), expected)


def test_window_ending_exactly_at_the_watermark_is_late(spark):
    rows = [(0, "f1.jsonl", "v1", *W0), (1, "f1.jsonl", "v2", *W1)]
    expected = inline_frame(spark, FATES, [("v1", "late"), ("v2", "on_time")])
    assertDataFrameEqual(fates(spark, rows, watermark=ts("08:01:00")), expected)


def test_window_ending_a_millisecond_after_the_watermark_is_on_time(spark):
    rows = [(0, "f1.jsonl", "v1", *W0)]
    expected = inline_frame(spark, FATES, [("v1", "on_time")])
    assertDataFrameEqual(fates(spark, rows, watermark=ts("08:00:59.999")), expected)


def test_without_a_watermark_nothing_is_late(spark):
    rows = [(0, "f1.jsonl", "v1", datetime(2000, 1, 1, 0, 0), datetime(2000, 1, 1, 0, 1))]
    expected = inline_frame(spark, FATES, [("v1", "on_time")])
    assertDataFrameEqual(fates(spark, rows, watermark=None), expected)


def test_a_late_duplicate_is_labelled_duplicate(spark):
    rows = [(0, "f1.jsonl", "v1", *W0), (1, "f2.jsonl", "v1", *W0)]
    expected = inline_frame(spark, FATES, [("v1", "late"), ("v1", "duplicate")])
    assertDataFrameEqual(fates(spark, rows, watermark=ts("09:00:00"), duplicates=[1]), expected)


# --- copies of an event id ---------------------------------------------------------------------------

# (batch_row, event_id, source_file, value): copies of ids as a micro-batch's driver sees them.
COPIES = [
    (0, "e-1", "f3.jsonl", "v"),
    (1, "e-1", "f1.jsonl", "v"),
    (2, "e-1", "f2.jsonl", "v"),
    (3, "e-2", "f1.jsonl", "v-b"),
    (4, "e-2", "f1.jsonl", "v-a"),
    (5, "e-3", "f1.jsonl", "same"),
    (6, "e-3", "f1.jsonl", "same"),
    (7, "e-4", "f2.jsonl", "only"),
    (8, "e-5", "f1.jsonl", "z"),
    (9, "e-5", "f1.jsonl", "\u00e9"),
]


def copies_table(rows) -> pa.Table:
    names = [tx.BATCH_ROW, "event_id", "source_file", "value"]
    return pa.table({name: [row[n] for row in rows] for n, name in enumerate(names)})


def test_later_copies_are_all_but_the_earliest_source_files_then_the_least_text():
    # e-1: f1 first; e-2: "v-a" before "v-b"; e-3: identical lines, exactly one kept; e-5: "z"
    # (0x7a) before "\u00e9" (0xc3 0xa9), bytes as Spark orders them.
    later = tx.later_copies(copies_table(COPIES), PIPELINE).to_pylist()
    assert sorted(later) == [0, 2, 3, 6, 9]


def test_the_driver_keeps_the_copies_first_copies_keeps(spark):
    schema = "batch_row long, event_id string, source_file string, value string"
    kept_by_spark = {row.batch_row for row in tx.first_copies(inline_frame(spark, schema, COPIES), PIPELINE).collect()}
    later = set(tx.later_copies(copies_table(COPIES), PIPELINE).to_pylist())
    same_line = {5, 6}  # identical lines: either copy is the same event
    assert kept_by_spark - same_line == {row[0] for row in COPIES} - later - same_line
    assert len(kept_by_spark & same_line) == len(same_line - later) == 1


# --- first_copies ----------------------------------------------------------------------------------


def test_first_copies_keeps_the_copy_from_the_earliest_source_file(spark):
    schema = "event_id string, source_file string, value string, plate_hash string"
    events = inline_frame(
        spark,
        schema,
        [
            ("e-1", "f2.jsonl", "v", "second-copy"),
            ("e-1", "f1.jsonl", "v", "first-copy"),
            ("e-2", "f2.jsonl", "w", None),
        ],
    )
    expected = inline_frame(spark, schema, [("e-1", "f1.jsonl", "v", "first-copy"), ("e-2", "f2.jsonl", "w", None)])
    assertDataFrameEqual(tx.first_copies(events, PIPELINE), expected)


# --- aggregate_metrics -----------------------------------------------------------------------------

EVENTS = "window_start timestamp, window_end timestamp, bridge_id string, vehicle_type string, toll_amount decimal(9,2)"
GOLD = T.StructType(
    [
        T.StructField("window_start", T.TimestampType()),
        T.StructField("window_end", T.TimestampType()),
        T.StructField("bridge_id", T.StringType()),
        T.StructField("vehicle_type", T.StringType()),
        T.StructField("vehicles", T.LongType()),
        T.StructField("revenue", T.DecimalType(18, 2)),
    ]
)


def test_revenue_is_summed_exactly_to_the_cent(spark):
    events = inline_frame(
        spark, EVENTS, [(*W0, "bridge-00", "car", Decimal("0.10")), (*W0, "bridge-00", "car", Decimal("0.20"))]
    )
    expected = inline_frame(spark, GOLD, [(*W0, "bridge-00", "car", 2, Decimal("0.30"))])
    assertDataFrameEqual(tx.aggregate_metrics(events, PIPELINE), expected, rtol=0, atol=0)


def test_large_revenue_sums_keep_every_cent(spark):
    events = inline_frame(
        spark,
        EVENTS,
        [(*W0, "bridge-00", "truck", Decimal("999.99"))] * 3 + [(*W0, "bridge-00", "truck", Decimal("0.01"))],
    )
    expected = inline_frame(spark, GOLD, [(*W0, "bridge-00", "truck", 4, Decimal("2999.98"))])
    assertDataFrameEqual(tx.aggregate_metrics(events, PIPELINE), expected, rtol=0, atol=0)


def test_metrics_are_computed_per_window_bridge_and_vehicle_type(spark):
    events = inline_frame(
        spark,
        EVENTS,
        [
            (*W0, "bridge-00", "car", Decimal("6.00")),
            (*W0, "bridge-00", "car", Decimal("5.10")),
            (*W0, "bridge-00", "truck", Decimal("14.25")),
            (*W0, "bridge-01", "car", Decimal("6.00")),
            (*W1, "bridge-00", "car", Decimal("6.00")),
        ],
    )
    expected = inline_frame(
        spark,
        GOLD,
        [
            (*W0, "bridge-00", "car", 2, Decimal("11.10")),
            (*W0, "bridge-00", "truck", 1, Decimal("14.25")),
            (*W0, "bridge-01", "car", 1, Decimal("6.00")),
            (*W1, "bridge-00", "car", 1, Decimal("6.00")),
        ],
    )
    assertDataFrameEqual(tx.aggregate_metrics(events, PIPELINE), expected, rtol=0, atol=0)


def test_aggregate_metrics_returns_the_gold_columns_in_contract_order(spark):
    gold = tx.aggregate_metrics(inline_frame(spark, EVENTS, []), PIPELINE)
    assert [(f.name, f.dataType) for f in gold.schema] == [(f.name, f.dataType) for f in GOLD]


def test_event_count_is_added_after_the_gold_columns_on_request(spark):
    events = inline_frame(
        spark, EVENTS, [(*W0, "bridge-00", "car", Decimal("6.00")), (*W0, "bridge-00", "car", Decimal("6.00"))]
    )
    expected = inline_frame(
        spark,
        T.StructType([*GOLD.fields, T.StructField("events", T.LongType())]),
        [(*W0, "bridge-00", "car", 2, Decimal("12.00"), 2)],
    )
    counted = tx.aggregate_metrics(events, PIPELINE, count_events_before=W0[1])
    assertDataFrameEqual(counted, expected, rtol=0, atol=0)


def test_the_latest_correction_run_is_the_highest_sequence_and_done_once_it_succeeded():
    from lakehouse.layers.corrections import latest_run

    assert latest_run([]) is None
    planned = {"sequence": 0, "run_id": "a", "bronze_from_version": 0, "bronze_to_version": 4, "status": "planned"}
    assert latest_run([planned])["done"] is False
    assert latest_run([planned, {**planned, "status": "succeeded"}])["done"] is True
    later = {**planned, "sequence": 1, "run_id": "b", "bronze_from_version": 5, "bronze_to_version": 9}
    assert latest_run([{**planned, "status": "succeeded"}, planned, later])["run_id"] == "b"
    # Two runs that raced to the same sequence: the one that finished counts.
    raced = {**later, "run_id": "c"}
    assert latest_run([later, raced, {**raced, "status": "succeeded"}])["run_id"] == "c"


COUPONS = """\
fields:
  event_id: string
  shop: string
  coupon: {kind: string, required: false}
  event_time: timestamp
keys: [shop]
window: {size: 5m}
metrics:
  orders: count
  coupons_used: {count: coupon}
watermark_delay: 1m
"""


def test_a_count_of_a_field_counts_the_events_holding_a_value_in_both_layers(spark, tmp_path):
    """``{count: coupon}`` is SQL's COUNT(coupon): in the batch layer's aggregate, and in the speed
    layer's merge of two micro-batches' partial values."""
    from lakehouse.dataflow.metric_merges import combined
    from lakehouse.dataflow.pipelines.declared import pipeline as built
    from lakehouse.project.project import load_project

    root = tmp_path / "shop"
    for folder in ("pipelines", "expectations"):
        (root / folder).mkdir(parents=True)
    (root / "lakehouse.yaml").write_text("name: shop\n")
    (root / "pipelines" / "orders.yaml").write_text(COUPONS)
    (root / "expectations" / "orders.raw_events.json").write_text('{"name": "orders.raw_events", "expectations": []}')
    project = load_project(root)
    orders = built(project.pipelines["orders"], project)
    rows = [(f"o{i}", f"shop-{i % 2}", None if i % 3 == 0 else f"C{i}", ts(f"08:0{i % 10}:00")) for i in range(20)]
    oracle = defaultdict(lambda: [0, 0])  # (window start, shop) -> [orders, coupons used]
    for _, shop, coupon, at in rows:
        key = (at.replace(minute=at.minute - at.minute % 5), shop)
        oracle[key][0] += 1
        oracle[key][1] += coupon is not None
    schema = "event_id string, shop string, coupon string, event_time timestamp"

    def values(part: list) -> DataFrame:
        return tx.window_values(inline_frame(spark, schema, part), orders)

    batch = {(r.window_start, r.shop): [r.orders, r.coupons_used] for r in values(rows).collect()}
    assert batch == oracle
    window_key = ["window_start", "window_end", "shop"]
    # Two micro-batches, each with events of every window and shop: the later one folded into the earlier.
    earlier, later = values(rows[:10]).alias("p"), values(rows[10:]).alias("n")
    merged = earlier.join(later, on=window_key).select(
        *window_key, *[combined(m, F.col(f"p.{m.name}"), F.col(f"n.{m.name}")).alias(m.name) for m in orders.metrics]
    )
    assert {(r.window_start, r.shop): [r.orders, r.coupons_used] for r in merged.collect()} == oracle


def test_a_timestamp_literal_names_utc_whatever_the_instants_form():
    """Naive instants are UTC (the platform's convention); an aware one is converted; the literal
    names its zone, so no session's time zone can shift it."""
    naive = datetime(2026, 1, 5, 23, 0, 0, 250)
    aware = datetime(2026, 1, 6, 1, 0, 0, 250, tzinfo=timezone(timedelta(hours=2)))
    assert tx.sql_timestamp(naive) == tx.sql_timestamp(aware) == "TIMESTAMP'2026-01-05 23:00:00.000250+00:00'"


def test_a_timestamp_literal_is_the_instant_spark_makes_of_the_datetime(spark):
    moment = datetime(2026, 1, 5, 23, 59, 59, 999999)
    row = (
        spark.range(1)
        .select((tx.timestamp_literal(moment) == F.lit(moment)).alias("same"), tx.timestamp_literal(moment).alias("at"))
        .first()
    )
    assert row.same and row.at == moment
