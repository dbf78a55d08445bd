"""Device clocks corrected by the log's receive time (docs/design.md, "Device clocks").

The worked example of the design doc, run for real; then a generated log whose booths' clocks are
minutes off, through both layers, against the Spark-free oracle. The oracle also shows, without
Spark, that the correction removes the clocks' error exactly: the skewed log's corrected windows are
those of the same log with every clock right.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from lakehouse.audit.reconcile import Auditor
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.dataflow.pipelines.base import ClockCorrection
from lakehouse.generator import GeneratorConfig, device_clock_offset, generate, generate_records
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.speed import run_speed_layer
from lakehouse.location import local_path
from lakehouse.serving.status import pipeline_status
from lakehouse.storage.catalog import pipeline_tables
from lakehouse.storage.log import LogWriter, partition_dir
from tests.oracle import gold_rows, run_oracle

PIPELINE = get_pipeline("toll_traffic_corrected_clocks")
BOUND = PIPELINE.clocks.bound_delta
# Five minutes of events; a file holds five seconds of arrivals, six files make a micro-batch.
SKEWED = GeneratorConfig(events=600, seed=11, rate=2.0, clock_skew="5m", late_fraction=0.05, late_delay="90s",
                         events_per_file=10, bridges=2, booths_per_bridge=3)  # fmt: skip
HONEST = dataclasses.replace(SKEWED, clock_skew="0s")
FILES_PER_BATCH = 6
FILE_SPAN = timedelta(seconds=SKEWED.events_per_file / SKEWED.rate)


def _event(event_id: str, booth: str, event_time: str, sent_at: str) -> str:
    bridge = booth.rsplit("-booth", 1)[0]
    return json.dumps({"event_id": event_id, "bridge_id": bridge, "booth_id": booth, "vehicle_type": "car",
                       "axles": 2, "toll_amount": 6.0, "event_time": event_time, "sent_at": sent_at})  # fmt: skip


# docs/design.md, "Device clocks": one file received at 08:01:00.500 by the log's clock.
EXAMPLE_RECEIVED = datetime(2026, 1, 5, 8, 1, 0, 500000)
EXAMPLE = [
    _event("a1", "bridge-00-booth-0", "2026-01-05T08:00:59.000Z", "2026-01-05T08:01:00.000Z"),  # right clock
    _event("b1", "bridge-00-booth-1", "2026-01-05T08:06:00.000Z", "2026-01-05T08:06:00.500Z"),  # 5 min ahead
    _event("c1", "bridge-00-booth-2", "2026-01-05T07:36:00.000Z", "2026-01-05T07:36:00.300Z"),  # 25 min behind
]


@pytest.mark.slow
def test_the_design_docs_worked_example_of_device_clocks(spark, settings):
    LogWriter(settings, PIPELINE.topic).write(EXAMPLE_RECEIVED, "example", EXAMPLE)
    hour = local_path(settings.pipeline_log_uri(PIPELINE.topic)) / partition_dir(EXAMPLE_RECEIVED)
    (hour / "from-another-producer.jsonl").write_text(EXAMPLE[0].replace("a1", "d1") + "\n")
    run_speed_layer(spark, settings, PIPELINE, available_now=True)

    tables = pipeline_tables(PIPELINE)
    bronze = spark.read.format("delta").load(tables.bronze.uri(settings))
    assert sorted((r.event_id, r.event_time, r.received_at) for r in bronze.collect()) == [
        ("a1", datetime(2026, 1, 5, 8, 0, 59, 500000), EXAMPLE_RECEIVED),
        ("b1", datetime(2026, 1, 5, 8, 1, 0), EXAMPLE_RECEIVED),
    ]
    quarantine = spark.read.format("delta").load(tables.quarantine.uri(settings))
    assert sorted((r.event_id, r.reason) for r in quarantine.collect()) == [
        ("c1", "clock_skew_out_of_bounds"),
        ("d1", "no_receive_time"),
    ]
    speed = spark.read.format("delta").load(tables.speed.uri(settings))
    assert sorted((r.window_start.minute, r.vehicles, r.revenue) for r in speed.collect()) == [
        (0, 1, Decimal("6.00")),
        (1, 1, Decimal("6.00")),
    ]
    offsets = pipeline_status(settings, PIPELINE).clock_offsets
    assert offsets == {"bridge-00-booth-0": (1, 0.5, 0.5, 0.5), "bridge-00-booth-1": (1, -300.0, -300.0, -300.0)}


@pytest.mark.slow
def test_both_layers_correct_skewed_clocks_as_the_oracle_does(spark, settings, tmp_path):
    generate(settings, SKEWED, PIPELINE.topic)
    log_root = local_path(settings.pipeline_log_uri(PIPELINE.topic))
    oracle = run_oracle(log_root, PIPELINE_WATERMARK, files_per_batch=FILES_PER_BATCH, skew_bound=BOUND)
    assert oracle.fates["late"] > 0, "the data set must exercise lateness on corrected times"

    run_speed_layer(spark, settings.replace(max_files_per_trigger=FILES_PER_BATCH), PIPELINE, available_now=True)
    start = SKEWED.start.replace(tzinfo=None) - timedelta(minutes=10)
    BatchLayer(spark, settings, PIPELINE).backfill(start, start + timedelta(hours=1), source="log", chunk="1h")

    tables = pipeline_tables(PIPELINE)
    assert gold_rows(spark.read.format("delta").load(tables.speed.uri(settings))) == oracle.rows("speed")
    assert gold_rows(spark.read.format("delta").load(tables.batch.uri(settings))) == oracle.rows("batch")
    fates = spark.read.format("delta").load(tables.bronze.uri(settings)).groupBy("fate").count().collect()
    assert {r.fate: r["count"] for r in fates} == {fate: oracle.fates[fate] for fate in ("on_time", "late")}
    # The audit recomputes the truth from the raw log, on the log's clock too: every difference of the
    # speed table is explained (by lateness), none unexplained.
    audit = Auditor(spark, settings, PIPELINE).reconcile(start, start + timedelta(hours=1))
    assert audit.ok and audit.matched > 0 and audit.explained.get("late", 0) > 0, audit
    # A booth's median offset is its clock's error, give or take the delivery delay (0.05-1.5 s) and
    # the spread of arrivals within a file, which shares one receive time. (The last file of the
    # log holds the stragglers of several minutes, so the extremes are wider.)
    offsets = pipeline_status(settings, PIPELINE).clock_offsets
    assert len(offsets) == SKEWED.bridges * SKEWED.booths_per_bridge
    for booth, (_, _, median, _) in offsets.items():
        error = device_clock_offset(SKEWED, booth).total_seconds()
        assert -error - FILE_SPAN.total_seconds() < median < -error + 1.5, (booth, error, median)


PIPELINE_WATERMARK = timedelta(minutes=2)


def _oracle_of(config: GeneratorConfig, settings, skew_bound=BOUND):
    generate(settings, config, PIPELINE.topic)
    log_root = local_path(settings.pipeline_log_uri(PIPELINE.topic))
    return run_oracle(log_root, PIPELINE_WATERMARK, FILES_PER_BATCH, skew_bound)


def test_correction_removes_the_clocks_error_exactly(tmp_path):
    from tests.conftest import make_settings

    skewed = _oracle_of(SKEWED, make_settings(tmp_path / "skewed"))
    honest = _oracle_of(HONEST, make_settings(tmp_path / "honest"))
    assert skewed.rows("batch") == honest.rows("batch")
    assert skewed.fates == honest.fates
    uncorrected = _oracle_of(SKEWED, make_settings(tmp_path / "uncorrected"), skew_bound=None)
    assert uncorrected.rows("batch") != honest.rows("batch"), "the skew must change something to correct"


def test_clock_skew_moves_only_the_devices_stamps():
    skewed, honest = generate_records(SKEWED)[0], generate_records(HONEST)[0]
    assert [(arrival, n) for arrival, n, _ in skewed] == [(arrival, n) for arrival, n, _ in honest]
    offsets = set()
    for (_, _, skewed_line), (_, _, honest_line) in zip(skewed, honest, strict=True):
        try:
            event, truth = json.loads(skewed_line), json.loads(honest_line)
        except json.JSONDecodeError:
            continue  # a malformed record of the mix
        offset = device_clock_offset(SKEWED, event["booth_id"])
        assert abs(offset) <= timedelta(minutes=5)
        for stamp in ("event_time", "sent_at"):
            moved = datetime.fromisoformat(truth[stamp]) + offset
            assert event[stamp] == moved.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        offsets.add(offset)
    assert len(offsets) == SKEWED.bridges * SKEWED.booths_per_bridge


def test_a_clock_correction_must_name_fields_the_pipeline_has():
    with pytest.raises(ValueError, match="clock correction names fields it does not have"):
        PIPELINE.variant("broken", clocks=ClockCorrection(bound="1m", device="no_such_field"))
