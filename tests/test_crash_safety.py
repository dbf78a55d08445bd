"""A micro-batch that fails between its writes, run again, writes each table once: nothing lost,
nothing duplicated (docs/design.md, "Exactly-once effect"). The SIGKILLs of whole processes, at
chosen points between a batch's writes and at random moments of every job, are the chaos loop's
(tests/test_chaos.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables
from tests.chaos import VOLATILE
from tests.conftest import make_settings


def team_scores_batch(spark, n: int):
    """Micro-batch ``n`` as the stream hands it over: two scores in minute n and a malformed line."""
    from tests.frames import inline_frame

    lines = [
        f'{{"event_id":"a{n}","user":"u1","team":"red","score":3,"event_time":"2026-01-05T12:0{n}:10Z"}}',
        f'{{"event_id":"b{n}","user":"u2","team":"blue","score":4,"event_time":"2026-01-05T12:0{n}:20Z"}}',
        "not json",
    ]
    return inline_frame(
        spark, "value string, source_file string", [(line, f"file:/log/{n:03d}.jsonl") for line in lines]
    )


@pytest.mark.parametrize("bronze_in_driver", [True, False], ids=["bronze-through-delta-rs", "bronze-through-spark"])
def test_a_micro_batch_that_failed_between_its_writes_writes_each_table_once_when_run_again(
    spark, tmp_path: Path, monkeypatch, bronze_in_driver
):
    # The appends are skipped on a second run by the rows they stamp, not by Delta's txnAppId: a
    # batch that failed after bronze, quarantine and the pane log committed, but before the MERGE,
    # must not append them twice when the query runs it again (in the same process, as here, or
    # after a restart). Bronze goes through the driver for a stream's usual batches, through Spark
    # for a backlog's large one: both are stamped once.
    from lakehouse.layers import speed

    if not bronze_in_driver:
        monkeypatch.setattr(speed, "BRONZE_TO_DRIVER_BYTES", 0)

    pipeline = get_pipeline("team_scores")

    batches = [team_scores_batch(spark, n) for n in range(2)]
    homes = {name: make_settings(tmp_path / name) for name in ("through", "failed")}
    speed.SpeedLayer(spark, homes["through"], pipeline, query_id="q").process_batch(batches[0], 0)
    speed.SpeedLayer(spark, homes["through"], pipeline, query_id="q").process_batch(batches[1], 1)

    session_before = {key: spark.conf.get(key, None) for key in speed.MICRO_BATCH_CONFS}
    layer = speed.SpeedLayer(spark, homes["failed"], pipeline, query_id="q")
    layer.process_batch(batches[0], 0)
    real_upsert = speed.upsert_once

    def fail_once(*args, **kwargs):
        monkeypatch.setattr(speed, "upsert_once", real_upsert)
        raise RuntimeError("the driver died before the MERGE")

    monkeypatch.setattr(speed, "upsert_once", fail_once)
    with pytest.raises(RuntimeError):
        layer.process_batch(batches[1], 1)
    # The micro-batch confs last for the batch, failed or not: this session runs other work too.
    assert {key: spark.conf.get(key, None) for key in speed.MICRO_BATCH_CONFS} == session_before
    layer.process_batch(batches[1], 1)
    layer.process_batch(batches[1], 1)  # and once more after it committed
    assert {key: spark.conf.get(key, None) for key in speed.MICRO_BATCH_CONFS} == session_before

    tables = pipeline_tables(pipeline)
    for table in (tables.bronze, tables.quarantine, tables.panes, tables.speed, STREAM_PROGRESS):
        rows = [
            spark.read.format("delta").load(table.uri(homes[name])).drop(*VOLATILE, "emitted_at").collect()
            for name in ("through", "failed")
        ]
        assert sorted(map(tuple, rows[0])) == sorted(map(tuple, rows[1])), table.qualified_name
