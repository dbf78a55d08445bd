"""Idempotent Delta writes: the only ways the layers change a table.

A streaming micro-batch may run again after a crash; its writes carry ``txnAppId``/``txnVersion``
so Delta skips the ones that already committed. A batch write replaces an exact range atomically,
so running it twice leaves the same table.
"""

from __future__ import annotations

import contextlib

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F


def append_once(rows: DataFrame, uri: str, app_id: str, version: int, partition_by: tuple[str, ...] = ()) -> None:
    """Append ``rows`` unless this (app_id, version) already committed to the table."""
    writer = rows.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", version)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(uri)


@contextlib.contextmanager
def _session_confs(spark: SparkSession, confs: dict[str, str]):
    """Set ``confs`` for the statements inside, then restore what was there."""
    before = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


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
    merge = (
        DeltaTable.forPath(spark, uri).alias("t").merge(rows.alias("s"), condition)
        .whenMatchedDelete(condition=f"s.{delete_when}")
        .whenMatchedUpdate(set=updates)
        .whenNotMatchedInsert(condition=f"NOT s.{delete_when}", values=inserts)
    )
    with _session_confs(spark, confs):
        merge.execute()


def replace_where(rows: DataFrame, uri: str, condition: str) -> None:
    """Atomically replace exactly the rows matching ``condition`` with ``rows``."""
    rows.write.format("delta").mode("overwrite").option("replaceWhere", condition).save(uri)
