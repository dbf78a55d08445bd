"""The book's windowed join ``toll_weather`` (docs/design.md, "Joins: a windowed join"): vehicles
per half hour and zone with the zone's mean temperature, a neighbour's when the zone had no reading:
in the stream and after a late reading's correction (the worked example), and over a reprocess of
generated logs, against the test's own reading of them."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest

from lakehouse.audit.window_join import audit_window_join
from lakehouse.dataflow.pipelines import all_window_joins, get_dimension, get_pipeline
from lakehouse.generator import ReadingsConfig, generate, reading_records
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.corrections import CorrectionRun
from lakehouse.layers.speed import run_speed_layer
from lakehouse.location import local_path
from lakehouse.storage.catalog import DIFFERENCES, RECONCILIATIONS, register_tables
from lakehouse.storage.dimensions import apply_change_file
from lakehouse.storage.log import LogWriter
from lakehouse.storage.ops_tables import arrow_at
from tests.oracle import run_oracle
from tests.test_dimensions import CHANGES, CONFIG, example_event, write_changes

TOLL_WEATHER = all_window_joins()["toll_weather"]
BRIDGES = get_dimension("bridges")
BY_ZONE, READINGS = get_pipeline("toll_traffic_by_zone"), get_pipeline("zone_temperatures")
HALF_HOURS = [datetime(2026, 1, 5, 8, 0), datetime(2026, 1, 5, 8, 30), datetime(2026, 1, 5, 9, 0)]


def reading(reading_id: str, zone: str, moment: str, celsius: float) -> str:
    return json.dumps(
        {"event_id": reading_id, "zone": zone, "temperature_c": celsius, "event_time": f"2026-01-05T{moment}Z"}
    )


def joined(spark, view: str) -> set[tuple]:
    rows = spark.sql(f"SELECT * FROM {view}").collect()
    return {
        (r.window_start.strftime("%H:%M"), r.zone, r.temperature_band, r.vehicles, r.temperature, r.temperature_from)
        for r in rows
    }


def run_both_layers(spark, settings) -> None:
    """Both sides through the stream (a file per micro-batch, so the watermark moves between files),
    then the view over what the stream computed."""
    one_file = settings.replace(max_files_per_trigger=1)
    for pipeline in (BY_ZONE, READINGS):
        run_speed_layer(spark, one_file, pipeline, available_now=True)
    register_tables(spark, settings, [BY_ZONE, READINGS])


def test_the_readings_log_is_deterministic_with_gaps_and_late_arrivals():
    records, kinds = reading_records(SENSORS)
    assert (records, kinds) == reading_records(SENSORS)  # the same seed, the same log
    slots = len(TOLL_WEATHER.key_values) * 6  # six 10-minute slots an hour per zone
    assert kinds["missed"] + kinds["on_time"] + kinds["delayed"] == slots == 36
    assert kinds["missed"] > 0 and kinds["delayed"] > 0 and len(records) == slots - kinds["missed"]
    taken = [datetime.fromisoformat(json.loads(line)["event_time"][:-1]) for _, _, line in records]
    delays = [arrival.replace(tzinfo=None) - moment for (arrival, _, _), moment in zip(records, taken, strict=True)]
    assert all(timedelta(0) < delay for delay in delays) and max(delays) > timedelta(minutes=5)
    assert [arrival for arrival, _, _ in records] == sorted(arrival for arrival, _, _ in records)


def test_a_windowed_join_refuses_sides_with_other_windows_or_keys():
    import dataclasses

    from lakehouse.dataflow.pipelines.base import Window

    with pytest.raises(ValueError, match="the same windows"):
        dataclasses.replace(TOLL_WEATHER, readings=READINGS.variant("hourly", window=Window(size="1h")))
    with pytest.raises(ValueError, match="keyed by zone alone"):
        dataclasses.replace(
            TOLL_WEATHER, events=get_pipeline("toll_traffic_by_region").variant("x", window=BY_ZONE.window)
        )


def test_the_worked_example_of_the_design_doc(spark, settings, tmp_path):
    """docs/design.md, "Joins: a windowed join": five crossings, six readings, one of them late."""
    apply_change_file(settings, BRIDGES, write_changes(tmp_path / "changes.jsonl", CHANGES))
    crossings = [
        example_event("e1", "bridge-00", "08:10:00", "car", 6.00),  # n1 until 08:30
        example_event("e2", "bridge-02", "08:20:00", "car", 6.00),  # n2
        example_event("e3", "bridge-01", "08:25:00", "van", 7.25),  # s1
        example_event("e4", "bridge-00", "08:40:00", "car", 6.00),  # s3 from 08:30
        example_event("e5", "bridge-03", "08:45:00", "truck", 14.25),  # no version: zone unknown
        example_event("e6", "bridge-01", "09:05:00", "car", 6.00),  # s1; closes the 08:30 half hour
    ]
    LogWriter(settings, BY_ZONE.topic).write(datetime(2026, 1, 5, 9, 6), "crossings", crossings)
    readings = LogWriter(settings, READINGS.topic)
    on_time = [
        reading("r1", "n1", "08:05:00", -2.0),
        reading("r2", "n1", "08:15:00", 1.0),
        reading("r3", "s1", "08:10:00", 12.0),
        reading("r4", "s1", "08:35:00", 9.0),
        reading("r5", "s1", "09:10:00", 8.0),
    ]
    readings.write(datetime(2026, 1, 5, 9, 11), "on-time", on_time)
    readings.write(datetime(2026, 1, 5, 9, 20), "late", [reading("r6", "s3", "08:40:00", 21.0)])
    run_both_layers(spark, settings)

    m = Decimal
    stream = {
        ("08:00", "n1", "freezing", 1, m("-0.5"), "n1"),
        ("08:00", "n2", "freezing", 1, m("-0.5"), "n1"),  # n2 had no reading: its neighbour n1's
        ("08:00", "s1", "mild", 1, m("12.0"), "s1"),
        ("08:30", "s3", "cold", 1, m("9.0"), "s1"),  # s3's reading is late; s2 has none; s1's
        ("08:30", "unknown", "unknown", 1, None, None),  # kept, counted, no temperature
        ("09:00", "s1", "cold", 1, m("8.0"), "s1"),
    }
    assert joined(spark, "gold.toll_weather__speed") == stream == joined(spark, "gold.toll_weather")
    audit = audit_window_join(spark, settings, TOLL_WEATHER, HALF_HOURS[0], HALF_HOURS[2] + timedelta(minutes=30))
    # Both watermarks passed 09:00 (the crossings' is 09:03, the readings' 09:05): 09:00 is open.
    assert [(r["window_start"].strftime("%H:%M"), r["zone"], r["status"], r["causes"]) for r in audit.rows] == [
        ("08:00", "n1", "matched", []),
        ("08:00", "n2", "matched", []),
        ("08:00", "s1", "matched", []),
        ("08:30", "s3", "explained", ["late_reading"]),
        ("08:30", "unknown", "matched", []),
    ]
    check_recorded(settings, audit)

    correction = CorrectionRun(spark, settings, READINGS).run()
    # The late reading's half hour is recomputed whole: s3's row (new) and s1's (unchanged).
    assert (correction.late_events, correction.windows_recomputed) == (1, 2)
    corrected = stream - {("08:30", "s3", "cold", 1, m("9.0"), "s1")} | {("08:30", "s3", "warm", 1, m("21.0"), "s3")}
    assert joined(spark, "gold.toll_weather") == corrected
    assert joined(spark, "gold.toll_weather__speed") == stream  # what the stream served, kept


def check_recorded(settings, audit) -> None:
    """The worked example's audit, recorded as a pipeline's audit is: its summary, then the row that
    did not match, with its cause and both values."""
    [run] = arrow_at(RECONCILIATIONS.uri(settings), settings=settings).to_pylist()
    counts = ("pipeline", "windows_compared", "open_windows", "matched", "explained_late", "unexplained")
    assert [run[c] for c in counts] == ["toll_weather", 5, 1, 4, 1, 0]
    assert dict(run["pins"])["readings.speed"] == audit.pins["readings"]["speed"]
    [difference] = arrow_at(DIFFERENCES.uri(settings), settings=settings).to_pylist()
    assert (difference["run_id"], dict(difference["key"]), difference["causes"]) == (
        run["run_id"],
        {"zone": "s3"},
        ["late_reading"],
    )
    assert (dict(difference["speed"])["temperature_band"], dict(difference["truth"])["temperature_band"]) == (
        "cold",
        "warm",
    )


# -- a generated day part, against an oracle ------------------------------------------------------------

# The dimension test's crossings: 1,800 over 50 minutes, with every defect turned on.
CROSSINGS = CONFIG
# Half the readings missed, so that some zones take a neighbour's.
SENSORS = ReadingsConfig(
    zones=tuple(TOLL_WEATHER.key_values),
    start=HALF_HOURS[0],
    span=timedelta(hours=1),
    seed=23,
    gap_fraction=0.5,
    late_fraction=0.15,
)


def zone_at(bridge: str, window: datetime) -> str:
    """The test's own reading of CHANGES (not the platform's code)."""
    if bridge == "bridge-00":
        return "n1" if window < HALF_HOURS[1] else "s3"
    return {"bridge-01": "s1", "bridge-02": "n2"}.get(bridge, "unknown")


def oracle_temperatures() -> dict[tuple[datetime, str], list[Decimal]]:
    """Every generated reading, by half hour and zone, read from the generator's lines."""
    taken = defaultdict(list)
    for _, _, line in reading_records(SENSORS)[0]:
        record = json.loads(line)
        moment = datetime.fromisoformat(record["event_time"].replace("Z", ""))
        half_hour = moment.replace(minute=moment.minute // 30 * 30, second=0, microsecond=0)
        taken[(half_hour, record["zone"])].append(Decimal(str(record["temperature_c"])))
    return taken


def oracle_join(per_bridge: dict) -> set[tuple]:
    """Vehicles per half hour and zone from the oracle's per-minute totals, each with its mean."""
    vehicles = defaultdict(int)
    for (minute, bridge, _), (count, _) in per_bridge.items():
        half_hour = minute.replace(minute=minute.minute // 30 * 30)
        vehicles[(half_hour, zone_at(bridge, half_hour))] += count
    temperatures, near = oracle_temperatures(), dict(TOLL_WEATHER.neighbours)
    rows = set()
    for (half_hour, zone), count in vehicles.items():
        found = [z for z in (zone, *near.get(zone, ())) if temperatures.get((half_hour, z))]
        if not found:
            rows.add((half_hour.strftime("%H:%M"), zone, "unknown", count, None, None))
            continue
        values = temperatures[(half_hour, found[0])]
        mean = (sum(values) / len(values)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
        band = next(b.name for b in TOLL_WEATHER.bands if b.below is None or mean < b.below)
        rows.add((half_hour.strftime("%H:%M"), zone, band, count, mean, found[0]))
    return rows


def test_a_reprocess_from_the_logs_equals_an_oracle_of_the_generated_logs(spark, settings, tmp_path):
    """The join over a full reprocess of both logs. The stream's side of it is the worked example's:
    both are the same query, over the speed tables or over the serving views."""
    apply_change_file(settings, BRIDGES, write_changes(tmp_path / "changes.jsonl", CHANGES))
    generate(settings, CROSSINGS)
    generate(settings, SENSORS, READINGS.topic)
    oracle = run_oracle(local_path(settings.pipeline_log_uri(BY_ZONE.topic)), timedelta(minutes=2), files_per_batch=2)
    expected = oracle_join(oracle.batch)
    assert sum(1 for row in expected if row[-1] not in (None, row[1])) >= 2, "too few windows took a neighbour's"

    for pipeline in (BY_ZONE, READINGS):
        BatchLayer(spark, settings, pipeline).backfill(HALF_HOURS[0], HALF_HOURS[2], source="log")
    register_tables(spark, settings, [BY_ZONE, READINGS])
    assert joined(spark, "gold.toll_weather") == expected


def test_a_reprocess_of_a_log_that_was_never_written_is_refused_with_a_clear_error(spark, settings):
    from lakehouse.errors import LakehouseError

    with pytest.raises(
        LakehouseError, match=r"log/zone_temperatures holds no file that arrived from 2026-01-04T08:00Z"
    ):
        BatchLayer(spark, settings, READINGS).backfill(HALF_HOURS[0], HALF_HOURS[2], source="log")
