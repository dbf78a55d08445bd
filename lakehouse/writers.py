"""Idempotent Delta writes: the only ways the layers change a table.

A streaming micro-batch may run again after a crash; its writes carry ``txnAppId``/``txnVersion``
so Delta skips the ones that already committed. A batch write replaces an exact range atomically,
so running it twice leaves the same table.
"""

from __future__ import annotations

import contextlib

from pyspark.sql import Column, DataFrame, SparkSession


def append_once(rows: DataFrame, uri: str, app_id: str, version: int, partition_by: tuple[str, ...] = ()) -> None:
    """Append ``rows`` unless this (app_id, version) already committed to the table."""
    writer = rows.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", version)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(uri)


@contextlib.contextmanager
def _dml_transaction(spark: SparkSession, app_id: str, version: int):
    # MERGE takes no writer options: Delta reads the transaction identifiers from the session.
    spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
    try:
        yield
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


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
) -> None:
    """Set the table's rows to ``rows`` (matched on ``match_columns``), once per (app_id, version).

    Rows matching ``delete_when`` remove their match instead. Values are absolute, not added, so
    even a repeated MERGE leaves the same table.
    """
    from delta.tables import DeltaTable

    condition = " AND ".join(f"t.{c} = s.{c}" for c in match_columns)
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
    with _dml_transaction(spark, app_id, version):
        merge.execute()


def replace_where(rows: DataFrame, uri: str, condition: str) -> None:
    """Atomically replace exactly the rows matching ``condition`` with ``rows``."""
    rows.write.format("delta").mode("overwrite").option("replaceWhere", condition).save(uri)
