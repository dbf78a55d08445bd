"""SIGKILL the streaming process at several points, restart it, and get the tables an uninterrupted
run gives: nothing lost, nothing duplicated (docs/design.md, "Exactly-once effect")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.speed import run_speed_layer
from lakehouse.settings import local_path
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables
from tests.conftest import make_settings

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
CONFIG = GeneratorConfig(
    events=2400,
    seed=5,
    rate=8.0,
    late_fraction=0.06,
    late_delay="3m",
    duplicate_fraction=0.04,
    malformed_fraction=0.03,
    events_per_file=300,
)
# Processing-time columns differ between any two runs; everything else must be identical.
VOLATILE = {"ingested_at", "quarantined_at", "updated_at", "started_at", "duration_ms"}
# (table whose commit count we watch, commits after which the process is killed). Commit 0 creates
# the table, so ("bronze", 3) kills right after batch 2's bronze write, before its other writes. The
# crash between a batch's MERGE into __speed and its progress row is tests/test_kafka.py's (the
# writes are the same whatever the log).
KILL_POINTS = [(TABLES.bronze, 3), (TABLES.quarantine, 5), (STREAM_PROGRESS, 6)]


def commits(settings, table) -> int:
    """The table's commit files: in a local folder, or through boto3 in object storage."""
    uri = table.uri(settings)
    if uri.startswith("s3a://"):
        from lakehouse.storage import object_store

        bucket, key = object_store.split(f"{uri}/_delta_log/")
        s3 = object_store.client(settings)
        try:
            listed = s3.list_objects_v2(Bucket=bucket, Prefix=key)
        except s3.exceptions.NoSuchBucket:  # the job has not created it yet
            return 0
        return sum(item["Key"].endswith(".json") for item in listed.get("Contents", []))
    log_dir = local_path(uri) / "_delta_log"
    return len(list(log_dir.glob("*.json"))) if log_dir.exists() else 0


def snapshot(spark, settings) -> dict[str, list[tuple]]:
    result = {}
    for table in (TABLES.bronze, TABLES.quarantine, TABLES.speed, STREAM_PROGRESS):
        frame = spark.read.format("delta").load(table.uri(settings))
        kept = [c for c in frame.columns if c not in VOLATILE and c != "app_id"]
        result[table.qualified_name] = sorted(tuple(map(str, row)) for row in frame.select(kept).collect())
    return result


def stream_command() -> list[str]:
    return [sys.executable, "-m", "lakehouse.cli", "stream", "--available-now", "--max-files-per-trigger", "1"]


def kill_after(settings, env, table, target_commits: int, timeout: float = 240) -> None:
    process = subprocess.Popen(
        stream_command(), env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.time() + timeout
    try:
        while commits(settings, table) < target_commits:
            if process.poll() is not None:
                pytest.fail(f"stream ended before the kill point: {process.stderr.read().decode()[-2000:]}")
            if time.time() > deadline:
                pytest.fail(f"kill point {table.qualified_name}@{target_commits} not reached")
            time.sleep(0.02)
    finally:
        # The whole process group: the Python driver and Spark's JVM, as in a machine crash.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.mark.slow
def test_sigkill_at_several_points_then_restart_gives_the_uninterrupted_tables(spark, tmp_path: Path):
    log_home = make_settings(tmp_path / "log-home")
    generate(log_home, CONFIG)
    shared_log = {"LAKEHOUSE_LOG_URI": log_home.log_uri}

    reference = make_settings(tmp_path / "reference", **shared_log)
    run_speed_layer(spark, reference.replace(max_files_per_trigger=1), PIPELINE, available_now=True)

    crashed = make_settings(tmp_path / "crashed", **shared_log)
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "crashed"), "LAKEHOUSE_SHUFFLE_PARTITIONS": "2", **shared_log}
    for table, target in KILL_POINTS:
        kill_after(crashed, env, table, target)
    finished = subprocess.run(stream_command(), env=env, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]

    assert snapshot(spark, crashed) == snapshot(spark, reference)


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


def test_a_micro_batch_that_failed_between_its_writes_writes_each_table_once_when_run_again(
    spark, tmp_path: Path, monkeypatch
):
    # The appends are skipped on a second run by the rows they stamp, not by Delta's txnAppId: a
    # batch that failed after bronze, quarantine and the pane log committed, but before the MERGE,
    # must not append them twice when the query runs it again (in the same process, as here, or
    # after a restart).
    from lakehouse.layers import speed

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
