"""Idempotent Delta writes: the only ways the layers change a table.

A streaming micro-batch may run again after a crash. Its appends stamp every row with the query
and batch ids, and a batch that may be a replay skips a table that already holds its stamp; its
MERGE carries ``txnAppId``/``txnVersion``, so Delta skips it once committed. A batch write
replaces an exact range atomically, so running it twice leaves the same table.

Each table has one writer, but the daily OPTIMIZE (``lakehouse.storage.maintenance``) compacts every table
while the stream and the batch jobs run. A MERGE or ``replaceWhere`` reads the files it rewrites, so
a compaction committing in between makes Delta refuse its commit; without a retry that stops the
stream. Both writes are idempotent, so they run again on the new snapshot (``retry_on_conflict``).
Blind appends do not read the table and never conflict with a compaction. The same retry lets two
batch jobs on the same windows (overlapping backfills, a backfill and a correction) both finish.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from delta.exceptions import ConcurrentAppendException, ConcurrentDeleteDeleteException, ConcurrentDeleteReadException
from pyspark.sql import Column, DataFrame, DataFrameWriter, SparkSession
from pyspark.sql import functions as F

from lakehouse.storage.spark import session_confs

log = logging.getLogger(__name__)
Result = TypeVar("Result")

# The conflicts a concurrent compaction causes: it added files in a partition this write read
# (append), or removed files this write read or removes (delete-read, delete-delete). Not retried:
# ConcurrentTransactionException (two runs of one stream) and schema or protocol changes.
COMPACTION_CONFLICTS = (ConcurrentAppendException, ConcurrentDeleteReadException, ConcurrentDeleteDeleteException)
# Two backfills over overlapping ranges (a command line and an Airflow run, say) replace the same day
# partitions chunk after chunk: measured, 5 lost races among 8 chunks of two 40-minute backfills run at
# once (tests/test_concurrency.py). Each retry recomputes one chunk, which costs seconds.
CONFLICT_ATTEMPTS = 8


def retry_on_conflict(
    write: Callable[[], Result], what: str, attempts: int = CONFLICT_ATTEMPTS, pause_seconds: float = 0.5
) -> Result:
    """Run ``write``, again on each commit conflict, up to ``attempts`` times. Only for writes
    that are safe to repeat: a retry starts a new transaction on the table's latest snapshot.

    Args:
        write: the write, safe to repeat.
        what: names the write in the log's warnings.
        attempts: the most tries.
        pause_seconds: the wait between tries.
    """
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except COMPACTION_CONFLICTS as conflict:
            if attempt == attempts:
                raise
            first_line = str(conflict).splitlines()[0] if str(conflict) else type(conflict).__name__
            log.warning(
                "%s lost a commit race (attempt %d of %d), running it again: %s", what, attempt, attempts, first_line
            )
            # Jittered, so that two writers that lost to each other do not retry in step.
            time.sleep(pause_seconds * attempt * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


def append_once(rows: DataFrame, uri: str, app_id: str, version: int, partition_by: tuple[str, ...] = ()) -> None:
    """Append ``rows`` unless this (app_id, version) already committed to the table.

    Args:
        rows: the rows.
        uri: the table's location.
        app_id: Delta's ``txnAppId``.
        version: Delta's ``txnVersion``.
        partition_by: the table's partition columns, for its first write.
    """
    _appender(rows, partition_by).option("txnAppId", app_id).option("txnVersion", version).save(uri)


def append_stamped_once(
    rows: DataFrame,
    uri: str,
    app_id: str,
    batch_id: int,
    partition_by: tuple[str, ...] = (),
    first_attempt: bool = False,
) -> None:
    """Append ``rows``, each stamped with ``app_id`` and ``batch_id`` in columns of those names,
    unless the table already holds rows with that stamp.

    An append is one Delta commit, so a batch's stamped rows are in the table entirely or not at
    all: they record the write as Delta's ``txnAppId``/``txnVersion`` would. Delta looks its record
    up on every write, and that lookup rebuilds the table's state from its log (a Spark job): 0.35 s
    of each 0.57 s append, a quarter of a micro-batch (measured side by side). This looks only when
    the batch may have been attempted before; ``first_attempt`` says the caller knows it was not.

    Args:
        rows: the rows.
        uri: the table's location.
        app_id: the writer's id, stamped on each row.
        batch_id: the batch, stamped on each row.
        partition_by: the table's partition columns, for its first write.
        first_attempt: the caller knows the batch was not attempted before: nothing to look up.
    """
    if not first_attempt:
        spark = rows.sparkSession
        stamp = (F.col("app_id") == app_id) & (F.col("batch_id") == batch_id)
        # With data skipping, the files' batch_id statistics leave only the files of this batch to
        # read, however large the table (the stream's session turns skipping off for its scans).
        with session_confs(spark, {"spark.databricks.delta.stats.skipping": "true"}):
            if spark.read.format("delta").load(uri).where(stamp).limit(1).count():
                return
    _appender(rows, partition_by).save(uri)


def _appender(rows: DataFrame, partition_by: tuple[str, ...]) -> DataFrameWriter:
    writer = rows.write.format("delta").mode("append")
    return writer.partitionBy(*partition_by) if partition_by else writer


def upsert_once(
    spark: SparkSession,
    rows: DataFrame,
    uri: str,
    match_columns: list[str],
    value_columns: list[str],
    also_set: dict[str, Column],
    delete_when: str,
    app_id: str,
    version: int,
    target_rows: Column | None = None,
) -> None:
    """Set the table's rows to ``rows`` (matched on ``match_columns``), once per (app_id, version).

    Rows matching ``delete_when`` remove their match instead. Values are absolute, not added, so
    even a repeated MERGE leaves the same table.

    ``target_rows`` (on alias ``t``) narrows the target rows the MERGE looks at, so Delta can skip
    the files that hold none: it is put in the join condition, with data skipping on for this one
    statement. It must hold for every target row that matches some row of ``rows``, or that row
    would be inserted a second time; bounds taken from ``rows``' own match columns guarantee it.

    Args:
        spark: the session to read and write with.
        rows: the new rows.
        uri: the table's location.
        match_columns: the columns a row is matched on.
        value_columns: the columns set from ``rows``.
        also_set: more columns, set by expression.
        delete_when: a condition on ``rows`` that deletes the matched row instead.
        app_id: the writer's id (Delta's ``txnAppId``).
        version: the write's number (Delta's ``txnVersion``).
        target_rows: a condition bounding the target rows the MERGE reads (None: all).
    """
    from delta.tables import DeltaTable

    condition = F.expr(" AND ".join(f"t.{c} = s.{c}" for c in match_columns))
    # MERGE takes no writer options: Delta reads the transaction identifiers from the session.
    confs = {"spark.databricks.delta.write.txnAppId": app_id, "spark.databricks.delta.write.txnVersion": str(version)}
    if target_rows is not None:
        condition = target_rows & condition
        confs["spark.databricks.delta.stats.skipping"] = "true"
    updates: dict[str, Column | str] = {c: f"s.{c}" for c in value_columns}
    updates.update(also_set)
    inserts: dict[str, Column | str] = {c: f"s.{c}" for c in match_columns + value_columns}
    inserts.update(also_set)

    def execute() -> None:
        # Built per attempt, so that a retry plans against the table as it is now.
        merge = (
            DeltaTable.forPath(spark, uri)
            .alias("t")
            .merge(rows.alias("s"), condition)
            .whenMatchedDelete(condition=f"s.{delete_when}")
            .whenMatchedUpdate(set=updates)
            .whenNotMatchedInsert(condition=f"NOT s.{delete_when}", values=inserts)
        )
        with session_confs(spark, confs):
            merge.execute()

    retry_on_conflict(execute, f"MERGE into {uri}")


def replace_where(rows: DataFrame, uri: str, condition: str) -> None:
    """Atomically replace exactly the rows matching ``condition`` with ``rows``."""
    writer = rows.write.format("delta").mode("overwrite").option("replaceWhere", condition)
    retry_on_conflict(lambda: writer.save(uri), f"replaceWhere {condition} on {uri}")
