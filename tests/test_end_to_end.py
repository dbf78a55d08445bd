"""The lambda loop end to end on real Spark and Delta, checked against an oracle that reads the raw
log files without Spark: generate with every defect on, stream, backfill, query the serving view."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.speed import run_speed_layer
from lakehouse.location import local_path
from lakehouse.storage.catalog import BATCH_COVERAGE, STREAM_PROGRESS, pipeline_tables, register_tables
from lakehouse.vocabulary import BatchStage
from tests.conftest import make_settings
from tests.oracle import run_oracle

PIPELINE = get_pipeline("toll_traffic")
START = datetime(2026, 1, 5, 8, 0)
CONFIG = GeneratorConfig(
    events=3000,
    seed=11,
    rate=8.0,
    late_fraction=0.05,
    late_delay="3m",
    duplicate_fraction=0.03,
    malformed_fraction=0.03,
    events_per_file=400,
)
BATCH_RANGE = (START + timedelta(minutes=1), START + timedelta(minutes=4))


def read(spark, settings, table):
    return spark.read.format("delta").load(table.uri(settings))


def gold_rows(frame) -> set[tuple]:
    return {(r.window_start, r.bridge_id, r.vehicle_type, r.vehicles, r.revenue) for r in frame.collect()}


@pytest.fixture(scope="module")
def lambda_run(spark, tmp_path_factory):
    """One full loop: generate, drain the speed layer file by file, backfill part of the range."""
    settings = make_settings(tmp_path_factory.mktemp("e2e") / "home")
    generated = generate(settings, CONFIG)
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), PIPELINE, available_now=True)
    backfill = BatchLayer(spark, settings, PIPELINE).backfill(*BATCH_RANGE, source="bronze", chunk="1m")
    oracle = run_oracle(local_path(settings.pipeline_log_uri(PIPELINE.name)), timedelta(minutes=2))
    return settings, generated, backfill, oracle


def test_generated_log_exercises_every_fate(lambda_run):
    _, generated, _, oracle = lambda_run
    assert all(oracle.fates[fate] > 0 for fate in ("quarantined", "duplicates", "on_time", "late"))
    assert oracle.read == generated.records


def test_speed_table_equals_oracle_replay_to_the_cent(spark, lambda_run):
    settings, _, _, oracle = lambda_run
    speed = read(spark, settings, pipeline_tables(PIPELINE).speed)
    assert gold_rows(speed) == oracle.rows("speed")


def test_each_micro_batch_gives_every_record_exactly_one_fate(spark, lambda_run):
    settings, _, _, oracle = lambda_run
    progress = read(spark, settings, STREAM_PROGRESS).orderBy("batch_id").collect()
    assert len(progress) == len(oracle.per_batch)
    for row, expected in zip(progress, oracle.per_batch, strict=True):
        assert row.input_rows == row.quarantined + row.duplicates + row.on_time + row.late
        fates = {
            "input_rows": row.input_rows,
            "quarantined": row.quarantined,
            "duplicates": row.duplicates,
            "on_time": row.on_time,
            "late": row.late,
        }
        assert fates == {key: expected.get(key, 0) for key in fates}


def test_each_micro_batch_records_the_milliseconds_of_its_stages_within_its_duration(spark, lambda_run):
    settings, _, _, _ = lambda_run
    progress = read(spark, settings, STREAM_PROGRESS).orderBy("batch_id").collect()
    always = {BatchStage.READ, BatchStage.PARSE, BatchStage.DEDUPE, BatchStage.BRONZE, BatchStage.PANES}
    for row in progress:
        stages = row.stage_ms
        expected = always | ({BatchStage.QUARANTINE} if row.quarantined else set())
        expected |= {BatchStage.PANE_LOG, BatchStage.MERGE} if row.panes_emitted else set()
        assert set(stages) == {str(stage) for stage in expected}, row.batch_id
        assert all(ms >= 0 for ms in stages.values())
        # The stages run one after another on the batch's clock: together within its duration
        # (each rounded to a millisecond).
        assert sum(stages.values()) <= row.duration_ms + len(stages)
    assert sum(ms for row in progress for ms in row.stage_ms.values()) > 0


def test_bronze_holds_every_accepted_event_once_marked_on_time_or_late(spark, lambda_run):
    settings, _, _, oracle = lambda_run
    bronze = read(spark, settings, pipeline_tables(PIPELINE).bronze)
    fates = {r.fate: r["count"] for r in bronze.groupBy("fate").count().collect()}
    assert fates == {"on_time": oracle.fates["on_time"], "late": oracle.fates["late"]}
    assert bronze.select("event_id").distinct().count() == bronze.count()


def test_quarantine_keeps_raw_text_and_reason_of_every_invalid_record(spark, lambda_run):
    settings, generated, _, oracle = lambda_run
    quarantine = read(spark, settings, pipeline_tables(PIPELINE).quarantine)
    reasons = {r.reason: r["count"] for r in quarantine.groupBy("reason").count().collect()}
    assert reasons == dict(oracle.reasons)
    malformed = sum(count for kind, count in generated.kinds.items() if kind.startswith("malformed:"))
    assert quarantine.count() == malformed
    assert quarantine.where(F.col("raw").isNull() | F.col("source_file").isNull()).count() == 0


def test_backfill_equals_oracle_truth_over_its_range_late_events_included(spark, lambda_run):
    settings, _, backfill, oracle = lambda_run
    batch = read(spark, settings, pipeline_tables(PIPELINE).batch)
    low, high = BATCH_RANGE
    expected = {row for row in oracle.rows("batch") if low <= row[0] < high}
    assert gold_rows(batch) == expected
    assert backfill.rows_written == len(expected)
    assert backfill.events_used == sum(row[3] for row in expected)


def test_serving_view_takes_batch_where_recomputed_and_speed_elsewhere(spark, lambda_run):
    settings, _, _, oracle = lambda_run
    register_tables(spark, settings)
    served = spark.table(f"gold.{PIPELINE.name}")
    low, high = BATCH_RANGE
    expected_batch = {row for row in oracle.rows("batch") if low <= row[0] < high}
    expected_speed = {row for row in oracle.rows("speed") if not low <= row[0] < high}
    assert gold_rows(served.where("source = 'batch' AND is_final")) == expected_batch
    assert gold_rows(served.where("source = 'speed' AND NOT is_final")) == expected_speed
    assert served.count() == len(expected_batch) + len(expected_speed)


def test_backfill_from_raw_log_equals_backfill_from_bronze(spark, lambda_run):
    settings, _, _, _ = lambda_run
    batch_table = pipeline_tables(PIPELINE).batch
    from_bronze = gold_rows(read(spark, settings, batch_table))
    result = BatchLayer(spark, settings, PIPELINE).backfill(*BATCH_RANGE, source="log", chunk="3m")
    assert gold_rows(read(spark, settings, batch_table)) == from_bronze
    assert result.events_read == lambda_run[3].read
    assert result.quarantined == lambda_run[3].fates["quarantined"]


def test_backfill_twice_leaves_the_same_rows(spark, lambda_run):
    settings, _, _, _ = lambda_run
    batch_table = pipeline_tables(PIPELINE).batch
    before = gold_rows(read(spark, settings, batch_table))
    BatchLayer(spark, settings, PIPELINE).backfill(*BATCH_RANGE, source="bronze", chunk="1m")
    assert gold_rows(read(spark, settings, batch_table)) == before
    coverage = read(spark, settings, BATCH_COVERAGE).where(F.col("pipeline") == PIPELINE.name)
    assert coverage.count() >= 6  # every run records the chunks it covered


def test_restarting_a_drained_stream_changes_no_table(spark, lambda_run):
    settings, _, _, _ = lambda_run
    tables = pipeline_tables(PIPELINE)
    versions = {
        t.name: spark.sql(f"DESCRIBE HISTORY delta.`{t.uri(settings)}`").count()
        for t in (tables.bronze, tables.quarantine, tables.speed)
    }
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), PIPELINE, available_now=True)
    after = {
        t.name: spark.sql(f"DESCRIBE HISTORY delta.`{t.uri(settings)}`").count()
        for t in (tables.bronze, tables.quarantine, tables.speed)
    }
    assert after == versions


def test_revenue_is_summed_exactly_in_decimal(spark, lambda_run):
    settings, _, _, oracle = lambda_run
    total = read(spark, settings, pipeline_tables(PIPELINE).speed).agg(F.sum("revenue")).first()[0]
    assert isinstance(total, Decimal)
    assert total == sum(amount for _, amount in oracle.speed.values())


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("2026-01-05T09:00:00Z", "2026-01-05T08:00:00Z", "empty or reversed"),
        ("2026-01-05T08:00:00Z", "2026-01-05T08:00:00Z", "empty or reversed"),
        ("yesterday", "2026-01-05T08:00:00Z", "cannot read start"),
        ("2026-01-05T08:00:30Z", "2026-01-05T09:00:00Z", "not on a window boundary"),
    ],
)
def test_backfill_rejects_a_bad_range_with_a_clear_error_and_writes_nothing(cli_env, tmp_path, start, end, message):
    command = [sys.executable, "-m", "lakehouse.cli", "backfill", "--start", start, "--end", end]
    finished = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 2
    assert finished.stderr.startswith("lakehouse: error:") and message in finished.stderr
    assert not (tmp_path / "home").exists()


def test_the_dedupe_read_of_bronze_opens_no_file_outside_the_batch_horizon(spark, tmp_path):
    # Bronze gets a file per micro-batch and date: by evening a day holds thousands, and a dedupe
    # read that opened them all would slow every batch down as the day goes on. Here bronze holds a
    # row of the batch's date from hours before its events, and that row's file is gone from disk:
    # a read that opened it would fail.
    settings = make_settings(tmp_path / "home")
    tables = pipeline_tables(PIPELINE)
    BatchLayer(spark, settings, PIPELINE)  # creates the tables
    old_event = spark.sql(f"""
        SELECT 'old-1' AS event_id, 'B1' AS bridge_id, 'B1-1' AS booth_id, 'car' AS vehicle_type, 2 AS axles,
               CAST(5.50 AS DECIMAL(9, 2)) AS toll_amount, CAST(NULL AS STRING) AS plate_hash,
               TIMESTAMP'{START - timedelta(hours=6)}' AS event_time,
               TIMESTAMP'{START - timedelta(hours=6)}' AS sent_at,
               DATE'{START.date()}' AS event_date, 'on_time' AS fate, 'earlier-stream' AS app_id, 0L AS batch_id,
               'earlier-file' AS source_file, current_timestamp() AS ingested_at""")
    bronze = tables.bronze.uri(settings)
    old_event.select(tables.bronze.columns.fieldNames()).write.format("delta").mode("append").save(bronze)
    (old_file,) = spark.read.format("delta").load(bronze).inputFiles()
    local_path(old_file).unlink()
    generate(
        settings,
        GeneratorConfig(
            events=200,
            seed=5,
            start=START,
            rate=4.0,
            late_fraction=0.0,
            duplicate_fraction=0.0,
            malformed_fraction=0.0,
            events_per_file=100,
        ),
    )

    run_speed_layer(spark, settings, PIPELINE, available_now=True)

    progress = read(spark, settings, STREAM_PROGRESS).agg(F.sum("on_time"), F.sum("duplicates")).first()
    assert tuple(progress) == (200, 0)
