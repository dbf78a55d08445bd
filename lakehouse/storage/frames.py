"""Small DataFrames built inside the JVM.

``spark.createDataFrame(list)`` ships the rows through Python worker processes, about a second per
action on a 2-core machine; literals stay in the JVM and take milliseconds. Used for small lookup
frames (the chunks a skip run asks about) and for tests' tiny inline data; one-row bookkeeping
writes go through delta-rs instead (lakehouse.storage.ops_tables).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T


def _literal(value):
    if isinstance(value, Mapping):
        return F.create_map(*[F.lit(part) for item in value.items() for part in item])
    return F.lit(value)


def literal_frame(spark: SparkSession, schema: str | T.StructType, rows: Sequence[Sequence | Mapping]) -> DataFrame:
    """A DataFrame with exactly ``schema`` (a DDL string or a StructType) and these rows.

    A row is a sequence in schema order or a mapping by column name (missing names are null).
    """
    struct = T.StructType.fromDDL(schema) if isinstance(schema, str) else schema
    if not rows:
        return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in struct.fields])
    records = []
    for row in rows:
        values = [row.get(f.name) for f in struct.fields] if isinstance(row, Mapping) else list(row)
        if len(values) != len(struct.fields):
            raise ValueError(f"row {row!r} does not have the {len(struct.fields)} values of {struct.simpleString()}")
        fields = zip(values, struct.fields, strict=True)
        records.append(F.struct(*[_literal(v).cast(f.dataType).alias(f.name) for v, f in fields]))
    return spark.range(1).select(F.inline(F.array(*records)))
