"""A record whose id bronze accepted in an earlier batch within the dedupe horizon is a duplicate,
however the batch looks the id up (lakehouse.layers.micro_batch.duplicates_of): in the index the
batch before carried, in one built from bronze after a start, or in one extended back from bronze
for event times older than it covered."""

from __future__ import annotations

from datetime import datetime

import pytest

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.eventtime import micros
from lakehouse.layers import micro_batch
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables
from tests.conftest import make_settings
from tests.frames import inline_frame

PIPELINE = get_pipeline("team_scores")


def scores(spark, n: int, *events: tuple[str, str]):
    """Batch ``n``'s lines: one per (event id, event time), in a log file of its own."""
    lines = [
        f'{{"event_id":"{event_id}","user":"u1","team":"red","score":3,"event_time":"2026-01-05T{at}Z"}}'
        for event_id, at in events
    ]
    return inline_frame(
        spark, "value string, source_file string", [(line, f"file:/log/{n:03d}.jsonl") for line in lines]
    )


def fates_and_bronze(spark, settings):
    progress = spark.read.format("delta").load(STREAM_PROGRESS.uri(settings)).orderBy("batch_id").collect()
    bronze = spark.read.format("delta").load(pipeline_tables(PIPELINE).bronze.uri(settings))
    return [(row.on_time + row.late, row.duplicates) for row in progress], sorted(
        (row.event_id, row.event_time.strftime("%H:%M")) for row in bronze.collect()
    )


@pytest.fixture
def bronze_reads(monkeypatch):
    """The batches' reads of bronze (to build or extend the index), counted."""
    reads = []
    real = micro_batch._accepted_in_bronze
    monkeypatch.setattr(micro_batch, "_accepted_in_bronze", lambda *args: reads.append(1) or real(*args))
    return reads


@pytest.mark.parametrize("restarted", [False, True], ids=["carried", "rebuilt"])
def test_an_id_accepted_in_an_earlier_batch_is_a_duplicate(spark, tmp_path, bronze_reads, restarted):
    from lakehouse.layers.speed import SpeedLayer

    settings = make_settings(tmp_path / "home")
    layer = SpeedLayer(spark, settings, PIPELINE, query_id="q")
    layer.process_batch(scores(spark, 0, ("a", "12:00:10"), ("b", "12:00:20")), 0)
    bronze_reads.clear()
    if restarted:  # a new process: the index is built from bronze
        layer = SpeedLayer(spark, settings, PIPELINE, query_id="q")
    layer.process_batch(scores(spark, 1, ("a", "12:00:10"), ("c", "12:01:10")), 1)  # "a" sent twice

    assert fates_and_bronze(spark, settings) == ([(2, 0), (1, 1)], [("a", "12:00"), ("b", "12:00"), ("c", "12:01")])
    assert len(bronze_reads) == (1 if restarted else 0)


def test_an_id_older_than_the_index_keeps_is_found_in_bronze_without_extending_the_index(spark, tmp_path, bronze_reads):
    from lakehouse.layers.speed import SpeedLayer

    settings = make_settings(tmp_path / "home")
    layer = SpeedLayer(spark, settings, PIPELINE, query_id="q")
    layer.process_batch(scores(spark, 0, ("a", "09:00:00")), 0)
    # Three hours on: the index drops "a", more than the horizon and an hour behind.
    layer.process_batch(scores(spark, 1, ("b", "12:00:00"), ("c", "12:00:01")), 1)
    bronze_reads.clear()
    layer.process_batch(scores(spark, 2, ("a", "09:00:00"), ("d", "12:00:02")), 2)  # "a" again, very late
    layer.process_batch(scores(spark, 3, ("a", "09:00:00")), 3)  # and again

    fates, bronze = fates_and_bronze(spark, settings)
    assert fates == [(1, 0), (2, 0), (1, 1), (0, 1)]
    assert [event_id for event_id, _ in bronze] == ["a", "b", "c", "d"]
    assert len(bronze_reads) == 2  # a read of bronze for "a" in each batch that has it
    index = layer._seen_ids.value
    assert index.complete_from >= micros(datetime(2026, 1, 5, 9, 50))  # not extended back to "a"
    assert len(index) == 3  # b, c and d


@pytest.mark.parametrize("restarted", [False, True], ids=["carried", "rebuilt"])
def test_an_id_less_than_an_hour_late_beyond_the_horizon_is_found_in_the_index(
    spark, tmp_path, bronze_reads, restarted
):
    from lakehouse.layers.speed import SpeedLayer

    settings = make_settings(tmp_path / "home")
    layer = SpeedLayer(spark, settings, PIPELINE, query_id="q")
    layer.process_batch(scores(spark, 0, ("a", "11:10:00")), 0)
    layer.process_batch(scores(spark, 1, ("b", "12:00:00"), ("c", "12:00:01")), 1)
    if restarted:  # the index is built back far enough for "a": one read
        layer = SpeedLayer(spark, settings, PIPELINE, query_id="q")
    bronze_reads.clear()
    layer.process_batch(scores(spark, 2, ("a", "11:10:00"), ("d", "12:00:02")), 2)  # "a" again, 50 min late
    layer.process_batch(scores(spark, 3, ("a", "11:10:00")), 3)  # and again: the index kept it

    fates, _ = fates_and_bronze(spark, settings)
    assert fates == [(1, 0), (2, 0), (1, 1), (0, 1)]
    assert len(bronze_reads) == (1 if restarted else 0)


@pytest.mark.parametrize("restarted", [False, True], ids=["carried", "rebuilt"])
def test_the_index_holds_the_copy_bronze_accepted_not_a_later_one(spark, tmp_path, restarted):
    """Two copies of an id in one batch with event times an hour and a half apart (not what a
    producer's resend makes): bronze keeps the first, and a later copy within the horizon of the
    second only is new, as it is when bronze is read."""
    from lakehouse.layers.speed import SpeedLayer

    settings = make_settings(tmp_path / "home")
    layer = SpeedLayer(spark, settings, PIPELINE, query_id="q")
    layer.process_batch(scores(spark, 0, ("x", "10:00:00"), ("x", "11:30:00")), 0)
    if restarted:
        layer = SpeedLayer(spark, settings, PIPELINE, query_id="q")
    layer.process_batch(scores(spark, 1, ("x", "12:45:00")), 1)

    assert fates_and_bronze(spark, settings) == ([(1, 1), (1, 0)], [("x", "10:00"), ("x", "12:45")])
