"""Backpressure: a micro-batch takes at most ``LAKEHOUSE_MAX_BYTES_PER_TRIGGER`` of new files, so a
backlog (after an outage, or a burst) is read in bounded batches, and nothing is lost on the way."""

from __future__ import annotations

import pytest

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.speed import run_speed_layer
from lakehouse.serving.status import pipeline_status
from lakehouse.settings import local_path
from lakehouse.storage.catalog import STREAM_PROGRESS

PIPELINE = get_pipeline("toll_traffic")


@pytest.mark.slow
def test_a_backlog_is_read_in_batches_within_the_byte_cap_and_every_record_gets_a_fate(spark, settings):
    generated = generate(settings, GeneratorConfig(events=1200, seed=3, events_per_file=100), PIPELINE.name)
    sizes = {str(path.name): path.stat().st_size for path in local_path(settings.log_uri).glob("**/*.jsonl")}
    cap = 3 * max(sizes.values())
    run_speed_layer(spark, settings.replace(max_bytes_per_trigger=str(cap)), PIPELINE, available_now=True)

    progress = spark.read.format("delta").load(STREAM_PROGRESS.uri(settings)).orderBy("batch_id").collect()
    batches = [[name.rsplit("/", 1)[1] for name in row.source_files] for row in progress]
    assert all(sum(sizes[name] for name in batch) <= cap for batch in batches), batches
    assert len(batches) >= len(sizes) // 3 and sorted(sum(batches, [])) == sorted(sizes)
    status = pipeline_status(settings, PIPELINE)
    assert status.balanced and status.read == generated.records
    assert sum(row.input_rows for row in progress) == generated.records
