"""An operator's repair of a gold table (``lakehouse repair``): the one way to change a value by hand.

SQL users read only, so a wrong value is fixed by an explicit command that names the table, the
change, who made it and why. The command runs one UPDATE or DELETE on ``gold.<p>__speed`` or
``gold.<p>__batch``, reads what it changed from the table's change feed, and records one row per
(window, key) in ``audit.manual_changes``; the audit then explains those rows as manual changes
instead of reporting them unexplained.

The record follows the change: a crash between the two leaves a change without its record, which
the next audit reports unexplained (true: nobody recorded why), never a record without its change.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings
from lakehouse.storage.catalog import (
    MANUAL_CHANGES,
    ensure_table,
    path_identifier,
    pipeline_tables,
    require_table,
    table_version,
)
from lakehouse.storage.ops_tables import append_rows
from lakehouse.vocabulary import FeedChange, Layer

# A row as it is after the change, or gone: what a repair did to it.
CHANGED_ROWS = (FeedChange.UPDATE_POSTIMAGE, FeedChange.DELETE, FeedChange.INSERT)


@dataclasses.dataclass(frozen=True)
class Repair:
    """What an operator asks: the layer's gold table, the change, and who and why."""

    layer: str
    where: str
    reason: str
    changed_by: str
    set_values: str | None = None  # None: delete the rows ``where`` selects

    def statement(self, table_uri: str) -> str:
        target = path_identifier(table_uri)
        if self.set_values is None:
            return f"DELETE FROM {target} WHERE {self.where}"
        return f"UPDATE {target} SET {self.set_values} WHERE {self.where}"

    def check(self) -> None:
        if self.layer not in (Layer.SPEED, Layer.BATCH):
            raise LakehouseError(f"repair changes gold.<p>__speed or __batch, not {self.layer!r}")
        for name, value in (("--where", self.where), ("--reason", self.reason), ("--by", self.changed_by)):
            if not value or not value.strip():
                raise LakehouseError(f"a repair needs {name}: what it changes, why, and who asks are recorded")
        if ";" in self.where + (self.set_values or ""):
            raise LakehouseError("a repair is one statement: --set and --where may not hold ';'")


def repair(spark: SparkSession, settings: Settings, pipeline: Pipeline, request: Repair) -> dict:
    """Apply the repair, record what it changed in ``audit.manual_changes``, and say so.

    Args:
        spark: the session that writes the change (an embedded one: repairs do not go through the
            read-only service).
        settings: where the tables live.
        pipeline: whose gold table.
        request: the layer, the change, who asks and why.
    """
    request.check()
    table = getattr(pipeline_tables(pipeline), request.layer)
    uri = require_table(spark, table, settings, "nothing to repair before the layer has written it")
    before = table_version(spark, uri)
    statement = request.statement(uri)
    spark.sql(statement)
    after = table_version(spark, uri)
    if after == before:
        raise LakehouseError(f"the repair matched no row of {table.qualified_name}: nothing changed, nothing recorded")
    changed = _changed_windows(spark, uri, pipeline, before, after)
    change_id, now = str(uuid.uuid4()), datetime.now(UTC).replace(tzinfo=None)
    rows = [
        {
            "change_id": change_id,
            "pipeline": pipeline.name,
            "table_name": table.qualified_name,
            **window,
            "statement": statement,
            "reason": request.reason,
            "changed_by": request.changed_by,
            "version_before": before,
            "version_after": after,
            "changed_at": now,
        }
        for window in changed
    ]
    ensure_table(MANUAL_CHANGES, settings)
    append_rows(MANUAL_CHANGES.uri(settings), MANUAL_CHANGES.arrow_schema, rows, settings)
    return {"change_id": change_id, "table": table.qualified_name, "rows_changed": len(rows), "version": after}


def _changed_windows(spark: SparkSession, uri: str, pipeline: Pipeline, before: int, after: int) -> list[dict]:
    """Each (window, key) the commits after ``before`` up to ``after`` changed, from the change feed."""
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", before + 1)
        .option("endingVersion", after)
        .load(uri)
    )
    key = F.create_map(*[part for k in pipeline.keys for part in (F.lit(k), F.col(k).cast("string"))])
    windows = (
        feed.where(F.col("_change_type").isin(*CHANGED_ROWS))
        .select("window_start", "window_end", *pipeline.keys)
        .distinct()  # before the key map: Spark cannot de-duplicate maps
        .select("window_start", "window_end", key.alias("key"))
    )
    return [row.asDict(recursive=True) for row in windows.collect()]
