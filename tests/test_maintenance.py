"""``maintain`` in-process: it compacts and vacuums a table, stays cheap on a small one, and deletes
the expired log files the platform's commits leave. And a long-lived session keeps the Delta logs of
a bounded number of tables in memory."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.location import local_path
from lakehouse.storage.catalog import BACKFILL_RUNS, ensure_table
from lakehouse.storage.maintenance import maintain
from lakehouse.storage.ops_tables import append_rows, read_rows
from lakehouse.storage.spark import DELTA_LOGS_KEPT


def test_maintain_compacts_and_vacuums_a_small_table_in_a_few_hundred_tasks_at_most(spark, settings):
    ensure_table(BACKFILL_RUNS, settings)
    uri = BACKFILL_RUNS.uri(settings)
    for run in range(3):
        row = tuple(f"run-{run}" if field.name == "run_id" else None for field in BACKFILL_RUNS.columns)
        spark.createDataFrame([row], BACKFILL_RUNS.columns).write.format("delta").mode("append").save(uri)

    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("maintain-small-table", "maintain one small table")
    try:
        report = maintain(spark, settings, get_pipeline("toll_traffic"), datetime.now(UTC))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    tasks = sum(
        stage.numTasks
        for job in tracker.getJobIdsForGroup("maintain-small-table")
        for stage in map(tracker.getStageInfo, tracker.getJobInfo(job).stageIds)
        if stage
    )

    assert report["tables"] == {BACKFILL_RUNS.qualified_name: {"files_added": 1, "files_removed": 3}}
    from delta.tables import DeltaTable

    operations = [r.operation for r in DeltaTable.forPath(spark, uri).history().collect()]
    assert {"OPTIMIZE", "VACUUM START", "VACUUM END"} <= set(operations)
    assert spark.read.format("delta").load(uri).count() == 3
    # VACUUM lists a table with one task per spark.sql.sources.parallelPartitionDiscovery.parallelism
    # (Spark's default: 10000); the session keeps it at the shuffle partitions (see lakehouse.storage.spark).
    assert tasks < 500, f"maintaining one small table ran {tasks} tasks"


def _backfill_run(number: int) -> dict:
    return {"run_id": f"run-{number}", "pipeline": "toll_traffic", "status": "succeeded"}


def test_commits_leave_the_expired_log_to_maintenance_which_deletes_it_up_to_a_checkpoint(spark, settings):
    """A delta-rs commit would list the whole _delta_log to find expired files; the platform's leave
    them, and maintain deletes them by Delta's rule: files older than the log retention (30 days)
    from before the newest checkpoint that old, from which every later version still reads."""
    ensure_table(BACKFILL_RUNS, settings)
    uri = BACKFILL_RUNS.uri(settings)
    for number in range(12):  # delta-rs checkpoints one version of these (delta.checkpointInterval 10)
        append_rows(uri, BACKFILL_RUNS.arrow_schema, [_backfill_run(number)], settings)
    log = local_path(uri) / "_delta_log"
    checkpoint = int(next(log.glob("*.checkpoint.parquet")).name[:20])
    aged = sorted(entry for entry in log.iterdir() if entry.name[:20].isdigit() and int(entry.name[:20]) <= checkpoint)
    month_ago = time.time() - timedelta(days=31).total_seconds()
    for entry in aged:
        os.utime(entry, (month_ago, month_ago))

    append_rows(uri, BACKFILL_RUNS.arrow_schema, [_backfill_run(12)], settings)
    left_by_the_commit = [entry.name for entry in aged if entry.exists()]
    maintain(spark, settings, get_pipeline("toll_traffic"), datetime.now(UTC))

    assert left_by_the_commit == [entry.name for entry in aged]
    assert sorted(entry.name for entry in aged if entry.exists()) == [
        f"{checkpoint:020d}.checkpoint.parquet",
        f"{checkpoint:020d}.json",
    ]
    assert sorted(row["run_id"] for row in read_rows(settings, "ops", "backfill_runs")) == sorted(
        f"run-{number}" for number in range(13)
    )
    assert spark.read.format("delta").load(uri).count() == 13


def test_a_long_lived_session_keeps_the_delta_logs_of_a_bounded_number_of_tables(spark, tmp_path):
    """Each table's log Delta keeps costs heap (about 2.4 MB with its snapshot's plans): a session
    that opens more tables than DELTA_LOGS_KEPT, as a test run does, lets the least recently used go
    instead of filling the heap (docs/operations.md, "Long-lived sessions")."""
    delta_log = getattr(getattr(spark._jvm.org.apache.spark.sql.delta, "DeltaLog$"), "MODULE$")
    for number in range(DELTA_LOGS_KEPT + 20):
        delta_log.forTable(spark._jsparkSession, str(tmp_path / f"table-{number}"))
    assert delta_log.cacheSize() <= DELTA_LOGS_KEPT
