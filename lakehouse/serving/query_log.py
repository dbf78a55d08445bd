"""``lakehouse.query_log``: every statement the Spark service ran and every login it refused, with
who, through which endpoint, when, how long, how many rows, and how it ended.

The service appends one JSON line per statement to a file a day under ``<home>/service/query-log/``
(``lakehouse.serving.QueryLog``, in ``java/``): a write of a few hundred bytes, where a Delta commit per
query would add a commit's tens of milliseconds and a table version per statement. The folder is the
location of a JSON table of the catalog, which the read-only rule lets every session read, and which
the service lists again at each query (no relation cache), so that a line shows as soon as it is written.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from lakehouse.settings import Settings

SCHEMA, TABLE = "lakehouse", "query_log"
COLUMNS = (
    "user_name STRING, endpoint STRING, statement STRING, started_at TIMESTAMP, duration_ms BIGINT, "
    "row_count BIGINT, outcome STRING, error STRING"
)


def query_log_dir(settings: Settings) -> Path:
    return settings.service_dir() / "query-log"


def register_query_log(spark, settings: Settings) -> None:
    """The table over the log's folder, unless the catalog (a metastore's, kept across restarts)
    already has it there. A line cut by a crash mid-write is dropped when read, not shown as nulls."""
    folder = query_log_dir(settings)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    catalog = spark._jsparkSession.sharedState().externalCatalog()
    if catalog.databaseExists(SCHEMA) and catalog.tableExists(SCHEMA, TABLE):
        if Path(urlparse(catalog.getTable(SCHEMA, TABLE).location().toString()).path) == folder:
            return
        spark.sql(f"DROP TABLE {SCHEMA}.{TABLE}")
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    spark.sql(
        f"CREATE TABLE {SCHEMA}.{TABLE} ({COLUMNS}) USING json OPTIONS (mode 'DROPMALFORMED') "
        f"LOCATION '{folder.as_uri()}' COMMENT 'each statement and refused login at the Spark service'"
    )
