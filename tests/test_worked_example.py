"""The README's worked example, run for real: a straggler behind the watermark is late in the speed
layer and counted by the batch layer."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

from pyspark.sql import functions as F

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.layers.batch import BatchLayer, parse_range
from lakehouse.layers.speed import run_speed_layer
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables, register_tables
from lakehouse.storage.log import LogWriter
from tests.conftest import RESOURCES

PIPELINE = get_pipeline("toll_traffic")
WINDOW = datetime(2026, 1, 5, 8, 0)


def write_example_log(settings) -> None:
    files: dict[int, list[str]] = {}
    for line in (RESOURCES / "worked_example.jsonl").read_text().splitlines():
        record = json.loads(line)
        files.setdefault(record["file"], []).append(json.dumps(record["event"]))
    writer = LogWriter(settings, PIPELINE.name)
    for number, lines in sorted(files.items()):
        writer.write(datetime(2026, 1, 5, 8, number + 1), f"example-{number}", lines)


def test_straggler_behind_the_watermark_is_late_in_speed_and_counted_by_batch(spark, settings):
    write_example_log(settings)
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), PIPELINE, available_now=True)

    progress = spark.read.format("delta").load(STREAM_PROGRESS.uri(settings)).orderBy("batch_id").collect()
    assert [(p.on_time, p.late) for p in progress] == [(2, 0), (1, 0), (0, 1)]
    assert [p.watermark for p in progress] == [None, datetime(2026, 1, 5, 7, 58, 50), datetime(2026, 1, 5, 8, 1, 30)]

    tables = pipeline_tables(PIPELINE)
    speed = spark.read.format("delta").load(tables.speed.uri(settings)).where(F.col("window_start") == WINDOW)
    assert [(r.vehicles, r.revenue) for r in speed.collect()] == [(2, Decimal("11.10"))]
    late = spark.read.format("delta").load(tables.bronze.uri(settings)).where(F.col("fate") == "late")
    assert [r.event_id for r in late.collect()] == ["e4"]

    BatchLayer(spark, settings, PIPELINE).backfill(
        *parse_range("2026-01-05T08:00Z", "2026-01-05T08:05Z", PIPELINE), source="bronze"
    )
    register_tables(spark, settings)
    served = spark.table("gold.toll_traffic").where(F.col("window_start") == WINDOW).collect()
    assert [(r.vehicles, r.revenue, r.source) for r in served] == [(3, Decimal("17.10"), "batch")]
