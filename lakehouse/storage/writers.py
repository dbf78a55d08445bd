"""Idempotent Delta writes: the only ways the layers change a table.

A streaming micro-batch may run again after a crash. Its appends stamp every row with the query
and batch ids, and a batch that may be a replay skips a table that already holds its stamp; its
MERGE (through delta-rs) records ``txnAppId``/``txnVersion`` and is skipped once committed. A batch write
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
from deltalake.exceptions import CommitFailedError
from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
from pyspark.sql import functions as F

from lakehouse.settings import Settings
from lakehouse.storage.spark import session_confs

log = logging.getLogger(__name__)
Result = TypeVar("Result")

# The conflicts a concurrent compaction causes: it added files in a partition this write read
# (append), or removed files this write read or removes (delete-read, delete-delete). Not retried:
# ConcurrentTransactionException (two runs of one stream) and schema or protocol changes.
COMPACTION_CONFLICTS = (ConcurrentAppendException, ConcurrentDeleteReadException, ConcurrentDeleteDeleteException)
# The same races, as delta-rs reports them: its conflict checker is a port of Delta's, and any
# conflict it finds fails the commit.
DELTA_RS_CONFLICTS = (CommitFailedError,)
# Two backfills over overlapping ranges (a command line and an Airflow run, say) replace the same day
# partitions chunk after chunk: measured, 5 lost races among 8 chunks of two 40-minute backfills run at
# once (tests/test_concurrency.py). Each retry recomputes one chunk, which costs seconds.
CONFLICT_ATTEMPTS = 8


def retry_on_conflict(
    write: Callable[[], Result],
    what: str,
    attempts: int = CONFLICT_ATTEMPTS,
    pause_seconds: float = 0.5,
    conflicts: tuple[type[Exception], ...] = COMPACTION_CONFLICTS,
) -> Result:
    """Run ``write``, again on each commit conflict, up to ``attempts`` times. Only for writes
    that are safe to repeat: a retry starts a new transaction on the table's latest snapshot.

    Args:
        write: the write, safe to repeat.
        what: names the write in the log's warnings.
        attempts: the most tries.
        pause_seconds: the wait between tries.
        conflicts: the exceptions that mean a lost commit race (Spark's by default).
    """
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except conflicts as conflict:
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
) -> bool:
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

    Returns:
        Whether it appended (False: the table held the stamp).
    """
    if not first_attempt and holds_stamp(rows.sparkSession, uri, app_id, batch_id):
        return False
    _appender(rows, partition_by).save(uri)
    return True


def holds_stamp(spark: SparkSession, uri: str, app_id: str, batch_id: int) -> bool:
    """Whether the table at ``uri`` holds a row stamped with ``app_id`` and ``batch_id``. With data
    skipping, the files' batch_id statistics leave only the files of this batch to read, however
    large the table (the stream's session turns skipping off for its scans).

    Args:
        spark: the session to read with.
        uri: the table's location.
        app_id: the writer's id.
        batch_id: the batch.
    """
    stamp = (F.col("app_id") == app_id) & (F.col("batch_id") == batch_id)
    with session_confs(spark, {"spark.databricks.delta.stats.skipping": "true"}):
        return bool(spark.read.format("delta").load(uri).where(stamp).limit(1).count())


def _appender(rows: DataFrame, partition_by: tuple[str, ...]) -> DataFrameWriter:
    writer = rows.write.format("delta").mode("append")
    return writer.partitionBy(*partition_by) if partition_by else writer


def upsert_once(
    rows,
    uri: str,
    match_columns: list[str],
    value_columns: list[str],
    delete_when: str,
    transaction: tuple[str, int],
    target_rows: Callable[[tuple[str, ...]], str | None] | None = None,
    settings: Settings | None = None,
) -> None:
    """Set the table's rows to ``rows`` (an Arrow table, matched on ``match_columns``), once per
    transaction: a MERGE through delta-rs, in the driver, with no Spark job.

    Rows matching ``delete_when`` remove their match instead. Values are absolute, not added, so
    even a repeated MERGE leaves the same table. The commit records ``transaction`` (app id, version)
    as Delta's ``txnAppId``/``txnVersion`` record it, and a version the table already holds is
    skipped. A micro-batch's panes are a few hundred rows at most: Spark's MERGE of them took 1.3 s
    (a job to find the files to rewrite, one to rewrite them, a snapshot update), delta-rs's 40 ms.

    Args:
        rows: the new rows, an Arrow table holding ``match_columns``, ``value_columns`` and ``delete_when``.
        uri: the table's location.
        match_columns: the columns a row is matched on.
        value_columns: the columns set from ``rows``.
        delete_when: a boolean column of ``rows``: true deletes the matched row instead.
        transaction: the writer's id and the write's number (Delta's ``txnAppId`` and ``txnVersion``).
        target_rows: given the table's partition columns, as the snapshot each attempt merges into
            records them, a SQL condition on alias ``t`` bounding the target rows the MERGE reads,
            so that it skips the partitions holding none (None: no bound). It must hold for every
            target row that matches some row of ``rows``, or that row would be inserted a second time.
        settings: where the table's store is (None: this process's settings).
    """
    from deltalake import CommitProperties, DeltaTable, Transaction

    from lakehouse.storage.ops_tables import as_table_types, commit_hooks, delta_rs_location

    location, options = delta_rs_location(uri, settings, writes=True)
    app_id, version = transaction
    matched = [f"t.{c} = s.{c}" for c in match_columns]

    def execute() -> None:
        # Opened per attempt, so that a retry merges into the table as it is now.
        table = DeltaTable(location, storage_options=options)
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            return
        source = as_table_types(rows, table)
        bound = target_rows(tuple(table.metadata().partition_columns)) if target_rows else None
        condition = " AND ".join([*matched, *([bound] if bound else [])])
        (
            table.merge(
                source,
                condition,
                source_alias="s",
                target_alias="t",
                commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]),
                post_commithook_properties=commit_hooks(),
            )
            .when_matched_delete(predicate=f"s.{delete_when}")
            .when_matched_update(updates={c: f"s.{c}" for c in value_columns})
            .when_not_matched_insert(
                updates={c: f"s.{c}" for c in match_columns + value_columns}, predicate=f"NOT s.{delete_when}"
            )
            .execute()
        )

    retry_on_conflict(execute, f"MERGE into {uri}", conflicts=DELTA_RS_CONFLICTS)


def replace_rows(rows, uri: str, predicate: str, settings: Settings | None = None) -> None:
    """Atomically replace exactly the rows matching ``predicate`` with ``rows``: an overwrite through
    delta-rs, in the driver, with no Spark job.

    delta-rs rewrites the files holding matched rows without them, writes the change feed (the
    deletes and the inserts), computes generated columns, and refuses a row of ``rows`` that does not
    match ``predicate``. The matched rows are read in the write's own transaction, so a commit that
    changed them first fails the write, and it runs again on the new snapshot.

    Args:
        rows: the new rows, an Arrow table, each matching ``predicate``.
        uri: the table's location.
        predicate: the rows replaced, in delta-rs's SQL (timestamps as ISO-8601 strings).
        settings: where the table's store is (None: this process's settings).
    """
    from deltalake import DeltaTable, write_deltalake

    from lakehouse.storage.ops_tables import as_table_types, commit_hooks, delta_rs_location

    location, options = delta_rs_location(uri, settings, writes=True)

    def execute() -> None:
        table = DeltaTable(location, storage_options=options)  # per attempt: the latest snapshot
        rows_as_table = as_table_types(rows, table)
        write_deltalake(
            table, rows_as_table, mode="overwrite", predicate=predicate, post_commithook_properties=commit_hooks()
        )

    retry_on_conflict(execute, f"replace {predicate} in {uri}", conflicts=DELTA_RS_CONFLICTS)


def replace_where(rows: DataFrame, uri: str, condition: str) -> None:
    """Atomically replace exactly the rows matching ``condition`` with ``rows``."""
    writer = rows.write.format("delta").mode("overwrite").option("replaceWhere", condition)
    retry_on_conflict(lambda: writer.save(uri), f"replaceWhere {condition} on {uri}")
