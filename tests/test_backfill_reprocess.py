"""Reprocess = skip: a chunk recomputed from the same inputs is left as it is; a chunk whose inputs
changed (a late event arrived) is recomputed. The input fingerprint decides, per chunk: from the log
a digest of the chunk's events, from bronze the version read and bronze's change feed since."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import datetime, timedelta

from delta.tables import DeltaTable
from pyspark.sql import types as T

from lakehouse.dataflow.fingerprints import parse_bronze_fingerprint
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers import batch
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.speed import run_speed_layer
from lakehouse.storage.catalog import BATCH_COVERAGE, pipeline_tables
from lakehouse.storage.log import LogWriter

PIPELINE = get_pipeline("toll_traffic")
START = datetime(2026, 3, 2, 8, 0)
END = START + timedelta(minutes=6)


def batch_version(spark, settings) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, pipeline_tables(PIPELINE).batch.uri(settings)).history(1).first()["version"]


def test_skip_leaves_unchanged_chunks_and_recomputes_the_one_a_late_event_changed(spark, settings):
    generate(
        settings,
        GeneratorConfig(
            events=400,
            seed=3,
            start=START,
            rate=1.2,
            late_fraction=0.0,
            duplicate_fraction=0.0,
            malformed_fraction=0.0,
            events_per_file=100,
        ),
    )
    layer = BatchLayer(spark, settings, PIPELINE)
    first = layer.backfill(START, END, source="log", chunk="2m", reprocess="skip")
    assert (first.chunks, first.chunks_skipped) == (3, 0)
    version = batch_version(spark, settings)

    again = layer.backfill(START, END, source="log", chunk="2m", reprocess="skip")
    assert (again.chunks, again.chunks_skipped, again.rows_written) == (0, 3, 0)
    assert batch_version(spark, settings) == version, "a skipped chunk writes nothing"

    # A straggler for [08:03, 08:04) arrives: only the chunk [08:02, 08:04) has new input.
    late = {
        "event_id": "late-1",
        "bridge_id": "B1",
        "booth_id": "B1-1",
        "vehicle_type": "car",
        "axles": 2,
        "toll_amount": 5.5,
        "plate_hash": None,
        "event_time": "2026-03-02T08:03:10Z",
        "sent_at": "2026-03-02T08:03:11Z",
    }
    LogWriter(settings, PIPELINE.name).write(START + timedelta(minutes=30), "late", [json.dumps(late)])
    third = layer.backfill(START, END, source="log", chunk="2m", reprocess="skip")
    assert (third.chunks, third.chunks_skipped) == (1, 2)
    recomputed = (
        spark.read.format("delta").load(BATCH_COVERAGE.uri(settings)).where(f"run_id = '{third.run_id}'").collect()
    )
    assert [(r.range_start, r.range_end) for r in recomputed] == [
        (START + timedelta(minutes=2), START + timedelta(minutes=4))
    ]

    redo = layer.backfill(START, END, source="log", chunk="2m", reprocess="redo")
    assert (redo.chunks, redo.chunks_skipped) == (3, 0)


LATE = {
    "event_id": "late-1",
    "bridge_id": "B1",
    "booth_id": "B1-1",
    "vehicle_type": "car",
    "axles": 2,
    "toll_amount": 5.5,
    "plate_hash": None,
    "event_time": "2026-03-02T08:03:10Z",
    "sent_at": "2026-03-02T08:03:11Z",
}


# 400 events over about five and a half minutes, no late, duplicate or malformed ones.
CLEAN_LOG = GeneratorConfig(events=400, seed=3, start=START, rate=1.2, late_fraction=0.0, duplicate_fraction=0.0,
                            malformed_fraction=0.0, events_per_file=100)  # fmt: skip


def in_window_range(start: datetime, end: datetime) -> str:
    return f"event_time >= TIMESTAMP'{start}' AND event_time < TIMESTAMP'{end}'"


def recomputed_ranges(spark, settings, run) -> list[tuple[datetime, datetime]]:
    rows = spark.read.format("delta").load(BATCH_COVERAGE.uri(settings)).where(f"run_id = '{run.run_id}'")
    return sorted((r.range_start, r.range_end) for r in rows.collect())


def test_skip_from_bronze_recomputes_only_chunks_whose_rows_changed_since_the_version_they_read(
    spark, settings, caplog, monkeypatch
):
    generate(settings, CLEAN_LOG)
    run_speed_layer(spark, settings, PIPELINE, available_now=True)
    bronze = pipeline_tables(PIPELINE).bronze.uri(settings)
    layer = BatchLayer(spark, settings, PIPELINE)
    first = layer.backfill(START, END, source="bronze", chunk="2m", reprocess="skip")
    assert (first.chunks, first.chunks_skipped, first.events_used) == (3, 0, 400)
    coverage = spark.read.format("delta").load(BATCH_COVERAGE.uri(settings)).collect()
    read_version = DeltaTable.forPath(spark, bronze).history(1).first()["version"]
    assert {parse_bronze_fingerprint(c.input_fingerprint)[0] for c in coverage} == {read_version}

    # Compaction rewrites files but no rows: nothing to recompute.
    DeltaTable.forPath(spark, bronze).optimize().executeCompaction()
    compacted = layer.backfill(START, END, source="bronze", chunk="2m", reprocess="skip")
    assert (compacted.chunks, compacted.chunks_skipped) == (0, 3)

    # A straggler for [08:03, 08:04) reaches bronze through the stream: only [08:02, 08:04) changed.
    LogWriter(settings, PIPELINE.name).write(START + timedelta(minutes=30), "late", [json.dumps(LATE)])
    run_speed_layer(spark, settings, PIPELINE, available_now=True)
    late = layer.backfill(START, END, source="bronze", chunk="2m", reprocess="skip")
    changed_chunk = in_window_range(START + timedelta(minutes=2), START + timedelta(minutes=4))
    in_chunk = spark.read.format("delta").load(bronze).where(changed_chunk).count()
    assert (late.chunks, late.chunks_skipped, late.events_used) == (1, 2, in_chunk)
    assert recomputed_ranges(spark, settings, late) == [(START + timedelta(minutes=2), START + timedelta(minutes=4))]

    # The chunks now read different versions, and the one read feed checks each against the commits
    # after its own: the straggler's commit is news to the chunks beside it only, and not in their span.
    spark.sql(f"ALTER TABLE delta.`{bronze}` SET TBLPROPERTIES ('lakehouse.note' = 'a commit without rows')")
    settled = layer.backfill(START, END, source="bronze", chunk="2m", reprocess="skip")
    assert (settled.chunks, settled.chunks_skipped) == (0, 3)

    # When the change feed cannot say what changed (here it was turned off for a while), recompute.
    spark.sql(f"ALTER TABLE delta.`{bronze}` SET TBLPROPERTIES (delta.enableChangeDataFeed = false)")
    spark.sql(f"ALTER TABLE delta.`{bronze}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    unknown = layer.backfill(START, END, source="bronze", chunk="2m", reprocess="skip")
    assert (unknown.chunks, unknown.chunks_skipped) == (3, 0)
    assert "cannot be read" in caplog.text

    # Past a bound on the commits to read, recomputing is the cheaper way to be sure.
    monkeypatch.setattr(batch, "CHANGE_FEED_CHECK_LIMIT", 1)
    caplog.set_level(logging.INFO, logger="lakehouse.layers.batch")
    for note in ("one commit since", "two commits since"):
        spark.sql(f"ALTER TABLE delta.`{bronze}` SET TBLPROPERTIES ('lakehouse.note' = '{note}')")
    bounded = layer.backfill(START, END, source="bronze", chunk="2m", reprocess="skip")
    assert (bounded.chunks, bounded.chunks_skipped) == (3, 0)
    assert "more than a change-feed check is worth" in caplog.text


def test_a_redo_run_records_the_fingerprints_a_skip_run_computes_empty_chunks_included(spark, settings):
    # A redo run digests each chunk's inputs while it aggregates them; a skip run digests them in a
    # pass of its own. 400 events at 1.2/s end near 08:05:33: the last two chunks have no events.
    generate(
        settings,
        GeneratorConfig(
            events=400,
            seed=3,
            start=START,
            rate=1.2,
            late_fraction=0.0,
            duplicate_fraction=0.0,
            malformed_fraction=0.0,
            events_per_file=100,
        ),
    )
    layer = BatchLayer(spark, settings, PIPELINE)
    end = START + timedelta(minutes=10)
    redo = layer.backfill(START, end, source="log", chunk="2m", reprocess="redo")
    assert (redo.chunks, redo.chunks_skipped, redo.events_used) == (5, 0, 400)

    skip = layer.backfill(START, end, source="log", chunk="2m", reprocess="skip")
    assert (skip.chunks, skip.chunks_skipped) == (0, 5)


def test_bookkeeping_tables_created_before_their_newer_columns_gain_them(spark, settings):
    """Coverage and run rows are appended through delta-rs: a table from an older release, without
    input_fingerprint and definition (coverage) or chunks_skipped and label (runs), gains the columns, keeps its old
    rows, and Spark reads both, timestamps exact."""
    from lakehouse.storage.catalog import BACKFILL_RUNS, ensure_table
    from lakehouse.storage.frames import literal_frame

    newer = {BATCH_COVERAGE: ("input_fingerprint", "definition"), BACKFILL_RUNS: ("chunks_skipped", "label")}
    for table, added in newer.items():
        older = dataclasses.replace(table, columns=T.StructType([f for f in table.columns if f.name not in added]))
        ensure_table(older, settings)
        literal_frame(
            spark,
            older.columns,
            [{"run_id": "old-run", "pipeline": PIPELINE.name, "range_start": START, "range_end": START}],
        ).write.format("delta").mode("append").save(table.uri(settings))
    generate(
        settings,
        GeneratorConfig(
            events=100, seed=5, start=START, rate=1.0, late_fraction=0.0, duplicate_fraction=0.0, malformed_fraction=0.0
        ),
    )
    run = BatchLayer(spark, settings, PIPELINE).backfill(START, END, source="log", chunk="3m", label="upgrade")

    coverage = spark.read.format("delta").load(BATCH_COVERAGE.uri(settings)).orderBy("range_end")
    assert [(r.run_id, r.range_start, r.range_end, r.input_fingerprint is None) for r in coverage.collect()] == [
        ("old-run", START, START, True),
        (run.run_id, START, START + timedelta(minutes=3), False),
        (run.run_id, START + timedelta(minutes=3), END, False),
    ]
    runs = spark.read.format("delta").load(BACKFILL_RUNS.uri(settings)).orderBy("range_end")
    assert [
        (r.run_id, r.status, r.range_end, r.chunks, r.chunks_skipped, r.label, r.events_read) for r in runs.collect()
    ] == [
        ("old-run", None, START, None, None, None, None),
        (run.run_id, "succeeded", END, 2, 0, "upgrade", run.events_read),
    ]
    assert run.events_read > 0


def test_a_chunk_too_large_for_the_driver_is_written_by_spark_with_the_same_rows_and_counts(
    spark, settings, monkeypatch
):
    """Small chunks reach the driver as Arrow and delta-rs replaces their windows; a chunk over
    DRIVER_CHUNK_ROWS is written by Spark. Both leave the same rows, counts and fingerprints."""
    generate(settings, CLEAN_LOG)
    layer = BatchLayer(spark, settings, PIPELINE)
    batch_uri = pipeline_tables(PIPELINE).batch.uri(settings)
    values = ["window_start", "window_end", "bridge_id", "vehicle_type", "vehicles", "revenue"]

    def backfilled() -> tuple[tuple, list, list, str]:
        run = layer.backfill(START, END, source="log", chunk="2m", reprocess="redo")
        rows = sorted(tuple(r) for r in spark.read.format("delta").load(batch_uri).select(*values).collect())
        coverage = spark.read.format("delta").load(BATCH_COVERAGE.uri(settings)).where(f"run_id = '{run.run_id}'")
        fingerprints = sorted((c.range_start, c.input_fingerprint) for c in coverage.collect())
        predicate = spark.sql(f"DESCRIBE HISTORY delta.`{batch_uri}` LIMIT 1").first()["operationParameters"]
        return (run.chunks, run.rows_written, run.events_used), rows, fingerprints, predicate["predicate"]

    counts, rows, fingerprints, predicate = backfilled()
    assert counts[1] > 3 * 5 and counts[2] == 400, counts  # every chunk holds more than 5 rows
    assert predicate.startswith("window_start >= "), predicate  # delta-rs, the chunk's windows only

    monkeypatch.setattr(batch, "DRIVER_CHUNK_ROWS", 5)
    assert backfilled()[:3] == (counts, rows, fingerprints)
    assert backfilled()[3].startswith("window_date >= DATE'")  # Spark's replaceWhere, whole days
