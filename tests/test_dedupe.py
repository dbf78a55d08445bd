"""A record whose id bronze accepted in an earlier batch is a duplicate, whichever way the batch
looks the id up (lakehouse.layers.micro_batch.seen_event_ids): the ids of a small bronze joined as
they are, those of a large one probed against the batch's."""

from __future__ import annotations

import pytest

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.layers import micro_batch
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables
from tests.conftest import make_settings
from tests.frames import inline_frame

PIPELINE = get_pipeline("team_scores")


def scores(spark, n: int, *event_ids: str):
    lines = [
        f'{{"event_id":"{event_id}","user":"u1","team":"red","score":3,"event_time":"2026-01-05T12:0{n}:10Z"}}'
        for event_id in event_ids
    ]
    return inline_frame(
        spark, "value string, source_file string", [(line, f"file:/log/{n:03d}.jsonl") for line in lines]
    )


@pytest.mark.parametrize("bronze_is_large", [False, True], ids=["broadcast", "probed"])
def test_an_id_accepted_in_an_earlier_batch_is_a_duplicate_either_way(spark, tmp_path, monkeypatch, bronze_is_large):
    from lakehouse.layers.speed import SpeedLayer

    if bronze_is_large:
        monkeypatch.setattr(micro_batch, "BROADCAST_SEEN_IDS_UP_TO_BYTES", 0)
    probed = []
    real_seen_in = tx.seen_in
    monkeypatch.setattr(tx, "seen_in", lambda *args: probed.append(1) or real_seen_in(*args))
    settings = make_settings(tmp_path / "home")
    layer = SpeedLayer(spark, settings, PIPELINE, query_id="q")
    layer.process_batch(scores(spark, 0, "a", "b"), 0)
    probed.clear()  # bronze's first version, made when the layer created it, has no size on record
    layer.process_batch(scores(spark, 1, "a", "c"), 1)  # "a" again: sent twice by its producer

    progress = spark.read.format("delta").load(STREAM_PROGRESS.uri(settings)).orderBy("batch_id").collect()
    assert [(row.on_time, row.duplicates) for row in progress] == [(2, 0), (1, 1)]
    bronze = spark.read.format("delta").load(pipeline_tables(PIPELINE).bronze.uri(settings))
    assert sorted(row.event_id for row in bronze.collect()) == ["a", "b", "c"]
    assert bool(probed) == bronze_is_large
