"""The Delta tables of a pipeline: names, schemas, locations, creation and SQL registration.

Tables live at ``<warehouse>/<schema>/<name>``; every session registers them by location in its
own in-memory catalog, so any number of JVMs (stream, batch, SQL) can use them at once.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from lakehouse.dataflow.metric_merges import derived_sql, served_sql
from lakehouse.dataflow.pipelines import all_dimensions, all_pipelines, all_window_joins
from lakehouse.dataflow.pipelines.base import Dimension, Pipeline
from lakehouse.dataflow.window_joins import window_join_sql
from lakehouse.errors import LakehouseError
from lakehouse.location import Location
from lakehouse.settings import Settings
from lakehouse.storage.spark import is_remote
from lakehouse.vocabulary import AccumulationMode, Layer


@dataclasses.dataclass(frozen=True)
class Table:
    schema: str
    name: str
    columns: T.StructType
    partition_by: tuple[str, ...] = ()
    change_data_feed: bool = False
    # Columns Delta computes on every write: (name, type, SQL expression over ``columns``). Writers
    # leave them out; readers may filter on them.
    generated: tuple[tuple[str, T.DataType, str], ...] = ()
    # A gold table's grouping keys, kept in its properties: a job refuses a pipeline whose keys changed.
    keys: tuple[str, ...] | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    def uri(self, settings: Settings) -> str:
        return settings.table_uri(self.schema, self.name)

    def by_location(self, settings: Settings) -> str:
        """The table in SQL by its location: no catalog needed, and none changed (a job through the
        Spark service shares the analysts' catalog)."""
        return path_identifier(self.uri(settings))

    @property
    def arrow_schema(self):
        """The columns as a pyarrow schema, for the one-row appends through delta-rs (lakehouse.storage.ops_tables)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.columns)


def path_identifier(uri: str) -> str:
    """A Delta table at ``uri`` as a SQL relation."""
    return f"delta.`{uri}`"


def struct_of(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(name, data_type) for name, data_type in fields])


TS, STR, LONG = T.TimestampType(), T.StringType(), T.LongType()

STREAM_PROGRESS = Table(
    "ops",
    "stream_progress",
    struct_of(
        ("pipeline", STR),
        ("app_id", STR),
        ("batch_id", LONG),
        ("started_at", TS),
        ("duration_ms", LONG),
        ("input_rows", LONG),
        ("quarantined", LONG),
        ("duplicates", LONG),
        ("on_time", LONG),
        ("late", LONG),
        ("watermark", TS),
        ("max_event_time", TS),
        ("panes_emitted", LONG),
        ("source_files", T.ArrayType(STR)),
        # Milliseconds by stage of the batch (lakehouse.vocabulary.BatchStage), on duration_ms's clock.
        ("stage_ms", T.MapType(STR, LONG)),
    ),
)
BACKFILL_RUNS = Table(
    "ops",
    "backfill_runs",
    struct_of(
        ("run_id", STR),
        ("pipeline", STR),
        ("source", STR),
        ("range_start", TS),
        ("range_end", TS),
        ("status", STR),
        ("error", STR),
        ("chunks", LONG),
        ("events_read", LONG),
        ("quarantined", LONG),
        ("duplicates", LONG),
        ("events_used", LONG),
        ("rows_written", LONG),
        ("started_at", TS),
        ("finished_at", TS),
        ("duration_ms", LONG),
        # Orchestration: chunks left as they were (same inputs), and who asked (an Airflow run, say).
        ("chunks_skipped", LONG),
        ("label", STR),
        # The person or scheduler that requested the run: the Airflow user who triggered it, or the
        # operating-system user of a command line.
        ("triggered_by", STR),
    ),
)
# One row per chunk the batch layer has recomputed: the serving view trusts batch values there,
# even for windows where the batch found no events at all. input_fingerprint digests the chunk's
# inputs, so a backfill asked to skip unchanged chunks knows which it may leave as they are.
BATCH_COVERAGE = Table(
    "ops",
    "batch_coverage",
    struct_of(
        ("pipeline", STR),
        ("range_start", TS),
        ("range_end", TS),
        ("run_id", STR),
        ("source", STR),
        ("written_at", TS),
        ("input_fingerprint", STR),
        # The pipeline's definition digest when the range was recomputed (lakehouse stale compares it).
        ("definition", STR),
    ),
)
STRING_MAP, STRINGS = T.MapType(STR, STR), T.ArrayType(STR)
RECONCILIATIONS = Table(
    "audit",
    "reconciliations",
    struct_of(
        ("run_id", STR),
        ("pipeline", STR),
        ("range_start", TS),
        ("range_end", TS),
        ("pins", STRING_MAP),
        ("watermark", TS),
        ("windows_compared", LONG),
        ("open_windows", LONG),
        ("matched", LONG),
        ("explained_late", LONG),
        ("explained_not_yet_read", LONG),
        ("explained_corrected", LONG),
        ("unexplained", LONG),
        ("started_at", TS),
        ("duration_ms", LONG),
        # full | incremental; an incremental audit covers the changes after these versions up to ``pins``.
        ("mode", STR),
        ("changes_since", STRING_MAP),
        ("changed_windows", LONG),
        # speed | serving: the table the audit compared with the truth.
        ("target", STR),
        ("explained_after_batch", LONG),
    ),
)
# One row per (window, key) that did not match, with what explains it or the event ids that do not.
DIFFERENCES = Table(
    "audit",
    "reconciliation_differences",
    struct_of(
        ("run_id", STR),
        ("pipeline", STR),
        ("window_start", TS),
        ("window_end", TS),
        ("key", STRING_MAP),
        ("status", STR),
        ("causes", STRINGS),
        ("truth", STRING_MAP),
        ("speed", STRING_MAP),
        ("late_events", LONG),
        ("not_yet_read_events", LONG),
        ("unexplained_event_ids", STRINGS),
        ("speed_minus_on_time", STRING_MAP),
        # ``speed`` holds the audited value; with target serving, ``source`` says which layer served it.
        ("source", STR),
        ("after_batch_events", LONG),
    ),
)
# The batch layer's corrections as a retraction log: per changed (window, key) of a pipeline, the
# value withdrawn ('retract') and the value that replaces it ('insert').
CORRECTIONS = Table(
    "audit",
    "corrections",
    struct_of(
        ("run_id", STR),
        ("pipeline", STR),
        ("window_start", TS),
        ("window_end", TS),
        ("key", STRING_MAP),
        ("change", STR),
        ("values", STRING_MAP),
        ("late_events", LONG),
        ("corrected_at", TS),
    ),
)
# One row per correction run: the bronze versions it covered. A run that crashed is resumed
# with the same versions, so its corrections are written once.
CORRECTION_RUNS = Table(
    "ops",
    "correction_runs",
    struct_of(
        ("run_id", STR),
        ("pipeline", STR),
        ("sequence", LONG),
        ("status", STR),
        ("bronze_from_version", LONG),
        ("bronze_to_version", LONG),
        ("late_events", LONG),
        ("windows_recomputed", LONG),
        ("rows_changed", LONG),
        ("started_at", TS),
        ("finished_at", TS),
    ),
)
# One row per expectation per suite the audit validated (lakehouse.audit.quality); Data Docs render the same results.
DATA_QUALITY = Table(
    "audit",
    "data_quality",
    struct_of(
        ("run_id", STR),
        ("pipeline", STR),
        ("suite", STR),
        ("table_name", STR),
        ("table_version", LONG),
        ("suite_success", T.BooleanType()),
        ("expectation", STR),
        ("expectation_type", STR),
        ("success", T.BooleanType()),
        ("element_count", LONG),
        ("unexpected_count", LONG),
        ("observed_value", STR),
        ("data_docs", STR),
        ("validated_at", TS),
    ),
)
# One row per (window, key) an operator's repair changed in a gold table (lakehouse repair): who,
# what and why, and the table versions around it. The audit explains those rows as manual changes.
MANUAL_CHANGES = Table(
    "audit",
    "manual_changes",
    struct_of(
        ("change_id", STR),
        ("pipeline", STR),
        ("table_name", STR),
        ("window_start", TS),
        ("window_end", TS),
        ("key", STRING_MAP),
        ("statement", STR),
        ("reason", STR),
        ("changed_by", STR),
        ("version_before", LONG),
        ("version_after", LONG),
        ("changed_at", TS),
    ),
)
SHARED_TABLES = (STREAM_PROGRESS, BACKFILL_RUNS, BATCH_COVERAGE, CORRECTION_RUNS)
AUDIT_TABLES = (RECONCILIATIONS, DIFFERENCES, CORRECTIONS, DATA_QUALITY, MANUAL_CHANGES)
# Written by orchestration callbacks through delta-rs (see lakehouse.storage.ops_tables), registered for SQL.
ALERTS = Table(
    "ops",
    "alerts",
    struct_of(
        ("alert_id", STR),
        ("source", STR),
        ("dag_id", STR),
        ("run_id", STR),
        ("task_id", STR),
        ("message", STR),
        ("raised_at", TS),
    ),
)
ORCHESTRATION_TABLES = (ALERTS,)


def dimension_table(dimension: Dimension) -> Table:
    """``dim.<name>``: one row per version of an entity, valid over [valid_from, valid_to)."""
    names = (dimension.key, *dimension.attributes)
    return Table("dim", dimension.name, struct_of(*[(n, STR) for n in names], ("valid_from", TS), ("valid_to", TS)))


def dimension_tables() -> tuple[Table, ...]:
    return tuple(dimension_table(d) for d in all_dimensions().values())


@dataclasses.dataclass(frozen=True)
class PipelineTables:
    bronze: Table
    quarantine: Table
    speed: Table
    batch: Table
    panes: Table
    serving_view: str

    @property
    def accumulation_views(self) -> dict[str, str]:
        """The three accumulation modes of the pane log, by view name."""
        base = self.serving_view
        return {mode: f"{base}__{mode}" for mode in AccumulationMode}


# The gold tables change where windows are open: the speed layer's MERGE every few seconds, the batch
# layer's replaceWhere every hour. A rewrite copies the untouched rows of every file it touches, and
# without partitions a table's rows share a few files (the MERGE rewrites one file holding them all,
# batch after batch), so the write grew with the table's age: the MERGE took 4.0 s at 30 days of
# rows against 1.1 s partitioned (the README's profile). By the window's date, a write touches only
# the days it changes, and Delta turns window_start filters into partition filters. The batch layer
# replaces whole days, and keeps them.
BY_WINDOW_DATE = {
    "partition_by": ("window_date",),
    "generated": (("window_date", T.DateType(), "CAST(window_start AS DATE)"),),
}
# The speed layer's MERGE sets the newest windows, and by date it copied every other row of their
# day, every micro-batch: the MERGE grew with the rows of the day (15.7 s into a day of 10M rows).
# By the window's hour it copies the rest of those windows' hours only (0.7 s), and a day is 24
# files, where by window it would be one a window: 1,440 a day for 1-minute windows, every one
# opened by each query of the serving view, which reads __speed whole. Delta turns window_start
# filters into window_hour partition filters, as it does for the date. Measured side by side:
# bench/speed_merge.py; docs/design.md, "The speed table's layout".
BY_WINDOW_HOUR = {
    "partition_by": ("window_hour",),
    "generated": (("window_hour", TS, "date_trunc('HOUR', window_start)"),),
}


def _event_tables(pipeline: Pipeline) -> dict[str, Table]:
    """Bronze (accepted events, with their fate) and quarantine (rejected records) of a pipeline."""
    p = pipeline.name
    event_fields = pipeline.event_columns
    return dict(
        bronze=Table(
            "bronze",
            f"{p}_events",
            struct_of(
                *event_fields,
                ("event_date", T.DateType()),
                ("fate", STR),
                ("app_id", STR),
                ("batch_id", LONG),
                ("source_file", STR),
                ("ingested_at", TS),
            ),
            partition_by=("event_date",),
            change_data_feed=True,  # correction runs read the late events added since their last run
        ),
        quarantine=Table(
            "quarantine",
            f"{p}_events",
            struct_of(
                ("raw", STR),
                ("reason", STR),
                ("event_id", STR),
                ("source_file", STR),
                ("app_id", STR),
                ("batch_id", LONG),
                ("quarantined_at", TS),
            ),
        ),
    )


def pipeline_tables(pipeline: Pipeline) -> PipelineTables:
    p = pipeline.name
    gold_fields = [("window_start", TS), ("window_end", TS)]
    gold_fields += [(key, pipeline.key_type(key)) for key in pipeline.keys]
    gold_fields += [(m.name, m.spark_type) for m in pipeline.metrics]
    return PipelineTables(
        **_event_tables(pipeline),
        speed=Table(
            "gold",
            f"{p}__speed",
            struct_of(*gold_fields, ("last_batch_id", LONG), ("updated_at", TS)),
            change_data_feed=True,
            **BY_WINDOW_HOUR,
            keys=pipeline.keys,
        ),
        batch=Table(
            "gold",
            f"{p}__batch",
            struct_of(*gold_fields, ("run_id", STR), ("updated_at", TS)),
            change_data_feed=True,
            **BY_WINDOW_DATE,
            keys=pipeline.keys,
        ),
        # Every pane the speed layer emitted: the value after the pane, its timing and index.
        panes=Table(
            "gold",
            f"{p}__panes",
            struct_of(
                *gold_fields,
                ("pane_index", LONG),
                ("timing", STR),
                ("is_retraction", T.BooleanType()),
                ("app_id", STR),
                ("batch_id", LONG),
                ("emitted_at", TS),
            ),
        ),
        serving_view=f"gold.{p}",
    )


def all_tables(pipeline: Pipeline) -> list[Table]:
    tables = pipeline_tables(pipeline)
    return [tables.bronze, tables.quarantine, tables.speed, tables.batch, tables.panes, *SHARED_TABLES]


def table_version(spark: SparkSession, uri: str) -> int:
    """The Delta table's latest version, with the session's snapshot brought up to it.

    Asked of the table's log on the driver (``DeltaLog.update``: a listing of ``_delta_log``, about
    10 ms when nothing moved), not through ``history(1)``, which runs a Spark job (0.25-0.45 s,
    measured side by side on the bench's bronze). A new version's snapshot is built on the way, a
    Spark job after a commit delta-rs wrote; a caller that wants the number only asks
    :func:`committed_version`. ``DeltaLog`` is Delta's internal API, so the pinned Delta version
    matters; tests/test_writers.py checks it against the history. A Spark Connect client has no JVM
    of its own to ask: it reads the log through delta-rs.
    """
    if is_remote(spark):
        return committed_version(uri)
    return _latest_snapshot(spark, uri).version()


def committed_version(uri: str, settings: Settings | None = None) -> int:
    """The newest version committed to the Delta table at ``uri``, read from storage through delta-rs
    (a few milliseconds on the platform's tables; delta-rs loads the table's state, files included).
    Unlike ``DeltaLog.update`` in a session, it builds no snapshot: after a commit delta-rs wrote (no
    checksum file beside it), that build is a Spark job."""
    from deltalake import DeltaTable

    from lakehouse.storage.ops_tables import delta_rs_location

    location, options = delta_rs_location(uri, settings)
    return DeltaTable(location, storage_options=options).version()


def _latest_snapshot(spark: SparkSession, uri: str):
    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)
    # Scala default arguments, spelled out for Py4J: a synchronous update, no timestamp check, no catalog table.
    defaults = [getattr(delta_log, f"update$default${n}")() for n in (1, 2, 3)]
    snapshot = delta_log.update(*defaults)
    if snapshot.version() < 0:
        raise LakehouseError(f"{uri} is not a Delta table")
    return snapshot


def table_exists(spark: SparkSession, uri: str) -> bool:
    """Whether a Delta table is at ``uri``. Asked of storage through delta-rs for a local location
    (0.1 ms against 4 ms through a warm session's JVM, 120 ms in a new one; an audit or a
    registration asks for every table) and for a Spark Connect client; of the session otherwise,
    which knows the object store's endpoint and keys."""
    if is_remote(spark) or Location.parse(uri).is_local:
        return table_in_storage(uri)
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, uri)


def table_in_storage(uri: str, settings: Settings | None = None) -> bool:
    """Whether the table has a commit, read from storage itself: unlike Spark's answer, never from a
    snapshot the session cached before another process created the table.

    On a local disk a log holding its checkpoint pointer or its first commit answers at once. Only
    without either does delta-rs answer, and on a local disk it lists the whole ``_delta_log`` with
    three stats an entry: 4 ms at 640 entries, and a job asks it of each of a pipeline's 9 tables
    (docs/design.md, "Tables"). On S3 delta-rs answers."""
    from deltalake import DeltaTable

    from lakehouse.storage.ops_tables import delta_rs_location

    parsed = Location.parse(uri)
    if parsed.is_local and _log_started(parsed.local_path / DELTA_LOG):
        return True
    location, options = delta_rs_location(uri, settings)
    return DeltaTable.is_deltatable(location, storage_options=options)


DELTA_LOG = "_delta_log"
FIRST_COMMIT = f"{0:020d}.json"
CHECKPOINT_POINTER = "_last_checkpoint"


def _log_started(log: Path) -> bool:
    """Whether a local Delta log has its first commit, or a checkpoint since the commits before it
    were removed (Delta writes the pointer beside every checkpoint)."""
    return (log / CHECKPOINT_POINTER).is_file() or (log / FIRST_COMMIT).is_file()


# Spark's default, written down: delta-rs, which writes the speed layer's panes and the ops tables,
# checkpoints every 100 commits unless the table says otherwise, and a reader of a table committed
# to every few seconds would replay up to 99 commit files to build its snapshot.
CHECKPOINT_EVERY_10_COMMITS = {"delta.checkpointInterval": "10"}
# A gold table's grouping keys are marked in its schema: a job refuses a pipeline whose keys changed.
KEY_METADATA = {"lakehouse.key": True}
CHANGE_DATA_FEED = {"delta.enableChangeDataFeed": "true"}


def delta_schema_json(table: Table) -> str:
    """The table's Delta schema, as Spark writes it in the log: its columns, then the generated ones,
    each with its SQL expression (``delta.generationExpression``) for Delta to compute on write."""
    generated = [
        T.StructField(name, kind, True, {"delta.generationExpression": sql}) for name, kind, sql in table.generated
    ]
    keys = set(table.keys or ())
    columns = [
        T.StructField(f.name, f.dataType, f.nullable, KEY_METADATA if f.name in keys else {}) for f in table.columns
    ]
    return T.StructType([*columns, *generated]).json()


def ensure_table(table: Table, settings: Settings) -> None:
    """Create the table at its location unless it exists. Safe when jobs race to create it, and
    after a job was killed while creating it.

    The first commit is written through delta-rs, not Spark's CREATE TABLE: about 0.03 s a table
    against 0.3 s in a warm session and 0.9 s in a new one (a fresh home has 9). It lands only if no
    commit 0 is there yet (a rename that does not replace, or S3's conditional write), so of jobs
    racing to create a table one wins and the others find it; nothing is half-written for a killed
    job to leave behind. Spark reads and writes the table as one it created: the same schema,
    partitions, properties and generated columns, at writer version 4."""
    from deltalake.exceptions import DeltaError

    uri = table.uri(settings)
    try:
        if not table_in_storage(uri, settings):
            _create(table, uri, settings)
    except (DeltaError, OSError) as error:
        if not _table_found_at(uri, settings):  # not a racing job's commit: something else is there
            raise LakehouseError(f"the table at {uri} could not be created: {_last_cause(error)}") from error


def _create(table: Table, uri: str, settings: Settings) -> None:
    from deltalake import DeltaTable, Schema

    from lakehouse.storage.ops_tables import delta_rs_location

    location, options = delta_rs_location(uri, settings, writes=True)
    DeltaTable.create(
        location,
        schema=Schema.from_json(delta_schema_json(table)),
        partition_by=list(table.partition_by) or None,
        configuration={**CHECKPOINT_EVERY_10_COMMITS, **(CHANGE_DATA_FEED if table.change_data_feed else {})},
        storage_options=options,
    )


def evolve_table(table: Table, settings: Settings) -> None:
    """Bring an existing table to the columns its pipeline declares now, keeping its history:
    a column the declaration added (an optional field, a metric) is added, and old rows read null.
    A change that would mix two meanings in one table is refused: another type for a column, or
    other grouping keys (docs/pipelines.md, "Changing a pipeline")."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError
    from deltalake.schema import Field

    from lakehouse.storage.ops_tables import delta_rs_location

    location, options = delta_rs_location(table.uri(settings), settings, writes=True)
    try:
        current = DeltaTable(location, storage_options=options)
    except DeltaError:
        return  # a damaged log: the job's own read of the table stops it, and says how to put it right
    fields = json.loads(current.schema().to_json())["fields"]
    existing = {f["name"]: f["type"] for f in fields}
    declared = json.loads(table.columns.json())["fields"]
    retyped = [f["name"] for f in declared if f["name"] in existing and existing[f["name"]] != f["type"]]
    keys_then = ",".join(f["name"] for f in fields if f.get("metadata", {}).get("lakehouse.key"))
    if retyped or (table.keys is not None and keys_then and keys_then != ",".join(table.keys)):
        change = f"the type of {', '.join(retyped)}" if retyped else f"its keys ({keys_then} before)"
        raise LakehouseError(
            f"{table.qualified_name}: the declaration changes {change}, which cannot change in place; "
            "declare a new pipeline (a new file), then backfill it from the log"
        )
    added = [Field.from_json(json.dumps({**f, "nullable": True})) for f in declared if f["name"] not in existing]
    if added:
        current.alter.add_columns(added)


def _last_cause(error: Exception) -> str:
    """delta-rs's error on one line: it prints a chain of causes, one a line, coloured; the last is
    the one a user can act on ("Not a directory", "Access Denied")."""
    lines = [re.sub(r"\x1b\[[0-9;]*m|↳", "", line).strip() for line in str(error).splitlines()]
    return [line for line in lines if line][-1] if any(lines) else type(error).__name__


def _table_found_at(uri: str, settings: Settings) -> bool:
    try:
        return table_in_storage(uri, settings)
    except OSError:  # a file where the table's folder should be, say
        return False


def ensure_pipeline_tables(settings: Settings, pipeline: Pipeline) -> PipelineTables:
    for table in all_tables(pipeline):
        ensure_table(table, settings)
    for table in all_tables(pipeline)[:5]:  # its own; the shared ones follow
        evolve_table(table, settings)
    return pipeline_tables(pipeline)


def serving_view_sql(
    pipeline: Pipeline, speed: str | None = None, batch: str | None = None, coverage: str | None = None
) -> str:
    """Batch value where the batch layer has recomputed the window, speed value otherwise.

    The relations default to the registered tables; the audit passes views of pinned versions,
    so what it checks is this very definition.

    Args:
        pipeline: the pipeline served.
        speed: the speed relation (default: the registered table).
        batch: the batch relation (default: the registered table).
        coverage: the batch coverage relation (default: the registered table).
    """
    tables = pipeline_tables(pipeline)
    speed = speed or tables.speed.qualified_name
    batch = batch or tables.batch.qualified_name
    coverage = coverage or BATCH_COVERAGE.qualified_name
    columns = ", ".join(pipeline.gold_columns)
    speed_columns = ", ".join(f"s.{c}" for c in pipeline.gold_columns)
    served = ", ".join([*pipeline.gold_columns[: -len(pipeline.metrics)], *map(served_sql, pipeline.metrics)])
    served = ", ".join([served, *derived_sql(pipeline), "source", "is_final", "updated_at"])
    return f"""
      SELECT {served} FROM (
        SELECT {columns}, '{Layer.BATCH}' AS source, TRUE AS is_final, updated_at
        FROM {batch}
        UNION ALL
        SELECT {speed_columns}, '{Layer.SPEED}' AS source, FALSE AS is_final, s.updated_at
        FROM {speed} AS s
        LEFT ANTI JOIN {batch} AS b ON s.window_start = b.window_start
        LEFT ANTI JOIN (SELECT range_start, range_end FROM {coverage}
                        WHERE pipeline = '{pipeline.name}') AS c
          ON s.window_start >= c.range_start AND s.window_start < c.range_end
      )
    """


def accumulation_view_sql(pipeline: Pipeline, mode: str) -> str:
    """One accumulation mode of Streaming 102 over the pane log.

    - accumulating: each window's latest value (sessions a merge absorbed are gone);
    - discarding: what each pane adds to the previous one (a withdrawn session: minus its value);
    - retracting: per pane, the previous value withdrawn (``change = 'retract'``, negated) and the
      new one added (``'insert'``); summed, every window nets to its accumulating value.
    """
    panes = pipeline_tables(pipeline).panes.qualified_name
    window_key = ", ".join(["window_start", "window_end", *pipeline.keys])
    # What a pane adds or withdraws is a difference: only counts and sums have one.
    metrics = [m.name for m in pipeline.metrics if m.is_additive or mode == AccumulationMode.ACCUMULATING]
    lagged = ", ".join(f"LAG({m}) OVER w AS _prev_{m}" for m in metrics)
    history = (
        f"SELECT *, {lagged}, LAG(is_retraction) OVER w AS _prev_retraction FROM {panes} "
        f"WINDOW w AS (PARTITION BY {window_key} ORDER BY pane_index)"
    )
    pane_columns = "pane_index, timing, batch_id"
    if mode == "accumulating":
        values = ", ".join([served_sql(m) for m in pipeline.metrics])
        return (
            f"SELECT {window_key}, {values}, {pane_columns} FROM ("
            f"SELECT *, ROW_NUMBER() OVER (PARTITION BY {window_key} ORDER BY pane_index DESC) AS _newest "
            f"FROM {panes}) WHERE _newest = 1 AND NOT is_retraction"
        )
    if mode == "discarding":
        deltas = ", ".join(
            f"CASE WHEN is_retraction THEN -{m} ELSE {m} - COALESCE(_prev_{m}, 0) END AS {m}" for m in metrics
        )
        return f"SELECT {window_key}, {deltas}, {pane_columns}, is_retraction FROM ({history})"
    if mode == "retracting":
        withdrawn = ", ".join(f"-(CASE WHEN is_retraction THEN {m} ELSE _prev_{m} END) AS {m}" for m in metrics)
        added = ", ".join(metrics)
        return (
            f"SELECT {window_key}, 'retract' AS change, {withdrawn}, {pane_columns} FROM ({history}) "
            f"WHERE is_retraction OR (pane_index > 0 AND NOT COALESCE(_prev_retraction, TRUE)) "
            f"UNION ALL SELECT {window_key}, 'insert' AS change, {added}, {pane_columns} FROM {panes} "
            f"WHERE NOT is_retraction"
        )
    raise ValueError(f"unknown accumulation mode {mode!r}")


def registrable_tables(pipelines: list[Pipeline] | None = None) -> list[Table]:
    """Every table SQL may name, shared ones first (each once), for ``pipelines`` (default: all)."""
    pipelines = list(all_pipelines().values()) if pipelines is None else pipelines
    tables = list(SHARED_TABLES + AUDIT_TABLES + ORCHESTRATION_TABLES + dimension_tables())
    for pipeline in pipelines:
        tables += all_tables(pipeline)[:5]  # its own; all_tables lists the shared ones after
    return tables


def register_tables(
    spark: SparkSession, settings: Settings, pipelines: list[Pipeline] | None = None, skip: frozenset[str] = frozenset()
) -> list[str]:
    """Register every existing table (and each pipeline's serving view) under ``schema.name``.

    Args:
        spark: the session whose catalog registers them.
        settings: where the tables live.
        pipelines: whose tables (default: every pipeline of the active project).
        skip: names registered before, left as they are (the Spark service registers new tables only).
    """
    pipelines = list(all_pipelines().values()) if pipelines is None else pipelines
    registered: list[str] = []
    for table in registrable_tables(pipelines):
        uri = table.uri(settings)
        if table.qualified_name in {*registered, *skip} or not table_exists(spark, uri):
            continue
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {table.schema} LOCATION '{settings.warehouse_uri}/{table.schema}'")
        # Dropping an entry that has a LOCATION forgets the name only; the data stays. Re-creating it
        # keeps the name pointing at this settings' location even if the catalog had another one.
        spark.sql(f"DROP TABLE IF EXISTS {table.qualified_name}")
        spark.sql(f"CREATE TABLE {table.qualified_name} USING DELTA LOCATION '{uri}'")
        registered.append(table.qualified_name)
    known = {*registered, *skip}
    views = _pipeline_views(pipelines, known)
    views |= _window_join_views(pipelines, {*known, *views})
    for view, definition in views.items():
        if view not in skip:
            spark.sql(f"CREATE OR REPLACE VIEW {view} AS {definition}")
            registered.append(view)
    return registered


def _pipeline_views(pipelines: list[Pipeline], known: set[str]) -> dict[str, str]:
    """Each pipeline's serving view and accumulation views, where the tables they read are known."""
    views = {}
    for pipeline in pipelines:
        tables = pipeline_tables(pipeline)
        needed = {tables.speed.qualified_name, tables.batch.qualified_name, BATCH_COVERAGE.qualified_name}
        if needed <= known:
            views[tables.serving_view] = serving_view_sql(pipeline)
        if tables.panes.qualified_name in known:
            views |= {view: accumulation_view_sql(pipeline, mode) for mode, view in tables.accumulation_views.items()}
    return views


def _window_join_views(pipelines: list[Pipeline], known: set[str]) -> dict[str, str]:
    """Each windowed join of two of ``pipelines``: over both serving views (``gold.<name>``) and
    over both speed tables (``gold.<name>__speed``, what the stream alone computed)."""
    views = {}
    for join in all_window_joins().values():
        if not {join.events.name, join.readings.name} <= {pipeline.name for pipeline in pipelines}:
            continue
        events, readings = pipeline_tables(join.events), pipeline_tables(join.readings)
        if {events.serving_view, readings.serving_view} <= known:
            views[f"gold.{join.name}"] = window_join_sql(join, events.serving_view, readings.serving_view)
        if {events.speed.qualified_name, readings.speed.qualified_name} <= known:
            speed = window_join_sql(join, events.speed.qualified_name, readings.speed.qualified_name)
            views[f"gold.{join.name}__speed"] = speed
    return views


def require_table(spark: SparkSession, table: Table, settings: Settings, hint: str) -> str:
    """The table's location; a clear error naming ``hint`` when it does not exist yet.

    Args:
        spark: the session to read and write with.
        table: the table required.
        settings: where the log, the tables and the checkpoints live.
        hint: what the user should run to create it.
    """
    uri = table.uri(settings)
    if not table_exists(spark, uri):
        raise LakehouseError(f"table {table.qualified_name} does not exist at {uri}: {hint}")
    return uri
