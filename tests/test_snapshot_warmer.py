"""The Spark service's snapshot warmer (lakehouse.serving.snapshots, SnapshotWarmer.java): queries
within the staleness bound read the version the warmer built, and the bound still holds without it."""

from __future__ import annotations

import contextlib

import pyarrow as pa
import pytest

from lakehouse.serving.snapshots import READERS_RECENT_SECONDS, readers_recent

STALENESS = "spark.databricks.delta.stalenessLimit"


def test_the_warmer_runs_while_a_reader_queried_within_the_last_minute():
    now = 1_000_000_000
    assert readers_recent(now - int(READERS_RECENT_SECONDS * 1000), now)
    assert not readers_recent(now - int(READERS_RECENT_SECONDS * 1000) - 1, now)
    assert not readers_recent(0, now)  # no reader since the service started


@contextlib.contextmanager
def staleness_bound(spark, bound: str):
    before = spark.conf.get(STALENESS)
    spark.conf.set(STALENESS, bound)
    try:
        yield
    finally:
        spark.conf.set(STALENESS, before)


def append(location: str, value: int) -> None:
    """A commit made by another process's writer (delta-rs), as the stream's MERGE is."""
    from deltalake import write_deltalake

    write_deltalake(location, pa.table({"value": [value]}), mode="append")


@pytest.mark.spark
def test_queries_read_the_version_the_warmer_built_and_the_bound_holds_without_it(spark, tmp_path):
    location = str(tmp_path / "served")
    append(location, 1)
    warmer = spark._jvm.lakehouse.serving.SnapshotWarmer
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)

    def rows() -> int:
        return spark.read.format("delta").load(location).count()

    with staleness_bound(spark, "1h"):
        assert rows() == 1
        append(location, 2)
        assert warmer.warm(spark._jsparkSession, location) == 1
        served = log.unsafeVolatileSnapshot()
        assert served.version() == 1 and served._computedStateTriggered()  # built before any query read it
        assert rows() == 2
        append(location, 3)
        # Within the bound a query reads the warmed snapshot and starts no update of its own.
        assert rows() == 2 and rows() == 2
        assert log.unsafeVolatileSnapshot().version() == 1
        assert warmer.warm(spark._jsparkSession, location) == 2
        assert rows() == 3
    append(location, 4)
    with staleness_bound(spark, "1ms"):  # the warmer has fallen behind the bound: queries update
        assert rows() == 4


@pytest.mark.spark
def test_a_refused_login_is_no_readers_query_and_keeps_the_warmer_idle(spark):
    query_log = spark._jvm.lakehouse.serving.QueryLog
    refusal = spark._jvm.lakehouse.serving.LoginRefused.PREFIX + "unknown user or wrong password/token"
    before = query_log.lastReaderStatementMillis()
    query_log.record("mallory", "jdbc", "", before, 0, refusal)
    assert query_log.lastReaderStatementMillis() == before
    query_log.record("ana", "jdbc", "SELECT 1", before, 1, None)  # a reader's statement, answered
    assert query_log.lastReaderStatementMillis() > before
