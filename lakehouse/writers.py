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


def merge_add_once(
    spark: SparkSession,
    partials: DataFrame,
    uri: str,
    match_columns: list[str],
    additive_columns: list[str],
    also_set: dict[str, Column],
    app_id: str,
    version: int,
) -> None:
    """Add per-batch partial values into the table, once per (app_id, version)."""
    from delta.tables import DeltaTable

    condition = " AND ".join(f"t.{c} = s.{c}" for c in match_columns)
    updates: dict[str, Column | str] = {c: f"t.{c} + s.{c}" for c in additive_columns}
    updates.update(also_set)
    inserts: dict[str, Column | str] = {c: f"s.{c}" for c in match_columns + additive_columns}
    inserts.update(also_set)
    merge = (
        DeltaTable.forPath(spark, uri).alias("t").merge(partials.alias("s"), condition)
        .whenMatchedUpdate(set=updates)
        .whenNotMatchedInsert(values=inserts)
    )
    with _dml_transaction(spark, app_id, version):
        merge.execute()


def replace_where(rows: DataFrame, uri: str, condition: str) -> None:
    """Atomically replace exactly the rows matching ``condition`` with ``rows``."""
    rows.write.format("delta").mode("overwrite").option("replaceWhere", condition).save(uri)
