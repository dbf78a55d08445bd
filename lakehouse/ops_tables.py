"""Small ops tables read and written without Spark (delta-rs), for Airflow tasks and callbacks.

A health check every few minutes, a run summary or a failure callback should not start a JVM: they
touch a few rows of tables that Spark jobs write (or, for ``ops.alerts``, that only they write).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from lakehouse.catalog_names import ALERTS_COLUMNS, ALERTS_TABLE
from lakehouse.settings import Settings


def delta_rs_uri(uri: str) -> str:
    """delta-rs spells locations its own way: plain local paths, ``s3://`` for Hadoop's ``s3a://``."""
    if uri.startswith("file:"):
        from lakehouse.settings import local_path

        return str(local_path(uri))
    if uri.startswith("s3a://"):
        return "s3://" + uri[len("s3a://"):]
    return uri


def read_rows(settings: Settings, schema: str, name: str, columns: list[str] | None = None,
              filters: list[tuple] | None = None) -> list[dict]:
    """Rows of a Delta table as dicts ([] when the table does not exist yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(delta_rs_uri(settings.table_uri(schema, name)))
    except TableNotFoundError:
        return []
    import pyarrow.dataset as ds

    dataset = table.to_pyarrow_dataset()
    expression = None
    for column, op, value in filters or []:
        assert op == "=", "only equality filters are needed here"
        term = ds.field(column) == value
        expression = term if expression is None else expression & term
    return dataset.to_table(columns=columns, filter=expression).to_pylist()


def append_alert(settings: Settings, source: str, message: str, dag_id: str | None = None,
                 run_id: str | None = None, task_id: str | None = None, now: datetime | None = None) -> dict:
    """Append one row to ``ops.alerts`` (created on first use) and return it."""
    import pyarrow as pa
    from deltalake import write_deltalake

    row = {
        "alert_id": str(uuid.uuid4()), "source": source, "dag_id": dag_id, "run_id": run_id, "task_id": task_id,
        "message": message[:4000], "raised_at": now or datetime.now(timezone.utc),
    }
    schema = pa.schema([(name, pa.timestamp("us", tz="UTC") if kind == "timestamp" else pa.string())
                        for name, kind in ALERTS_COLUMNS])
    write_deltalake(delta_rs_uri(settings.table_uri(*ALERTS_TABLE)), pa.Table.from_pylist([row], schema=schema),
                    mode="append")
    return row
