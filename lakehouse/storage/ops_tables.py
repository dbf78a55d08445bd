"""Small ops tables read and written without Spark (delta-rs), for Airflow tasks, callbacks and
the batch layer's bookkeeping.

A health check every few minutes, a run summary or a failure callback should not start a JVM: they
touch a few rows of tables that Spark jobs write (or, for ``ops.alerts``, that only they write).
A Spark job appending one bookkeeping row pays a write job, a snapshot update and every tenth
commit a checkpoint: 0.35-1.4 s against delta-rs's 10-30 ms (measured side by side on
``ops.batch_coverage``), so the batch layer's run and coverage rows go through delta-rs too.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from lakehouse.location import Location, Scheme
from lakehouse.settings import Settings
from lakehouse.storage.table_names import ALERTS_COLUMNS, ALERTS_TABLE


def commit_hooks():
    """What delta-rs does after each of the platform's commits: a checkpoint every
    ``delta.checkpointInterval`` commits, as by default, but no clean-up of the expired log.

    delta-rs looks for expired log files after every commit (Delta does at checkpoints), and looking
    lists the whole ``_delta_log`` folder with a stat of each entry: on local storage, a one-row
    append at 2,000 commits took 36 ms with it and 19 ms without (``bench.log_growth``). A table the speed layer writes
    gains an entry per micro-batch, 17,000 a day at its 5 s trigger, and keeps them for its log
    retention (Delta's 30 days). The daily maintenance deletes the expired files instead, by the same
    rule (``lakehouse.storage.maintenance.clean_expired_log``)."""
    from deltalake import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)


def delta_rs_location(uri: str, settings: Settings | None = None, writes: bool = False) -> tuple[str, dict[str, str]]:
    """The location as delta-rs spells it (plain local paths, ``s3://`` for Hadoop's ``s3a://``) and
    the options it needs there: an object store's endpoint and keys, from ``settings`` (None: this
    process's).

    delta-rs creates no bucket, and fails on a missing one where a missing table reads as none yet:
    in S3, the bucket is created before this process first uses it. Before its first write there
    (``writes``), the store is probed for the conditional writes delta-rs commits with, as a Spark
    session's start probes it (lakehouse.storage.conditional_writes), since a job may write through delta-rs
    alone.
    """
    from lakehouse.storage import conditional_writes, object_store

    location = Location.parse(uri)
    if location.scheme is Scheme.S3:
        settings = settings or Settings.from_env()
        object_store.ensure_bucket_once(settings, location.bucket)
        if writes:
            conditional_writes.check_delta_rs_store(settings, location.bucket)
    return location.delta_rs(lambda: object_store.delta_rs_options(settings))


def read_rows(
    settings: Settings, schema: str, name: str, columns: list[str] | None = None, filters: list[tuple] | None = None
) -> list[dict]:
    """Rows of a Delta table as dicts ([] when the table does not exist yet).

    Args:
        settings: where the tables live.
        schema: the table's schema (``ops``, ``audit`` ...).
        name: the table's name.
        columns: the columns read (None: all).
        filters: ``(column, "=", value)`` conditions.
    """
    return rows_at(settings.table_uri(schema, name), columns, filters, settings)


def rows_at(
    uri: str, columns: list[str] | None = None, filters: list[tuple] | None = None, settings: Settings | None = None
) -> list[dict]:
    """``read_rows`` for the table at ``uri``.

    Args:
        uri: the table's location.
        columns: the columns read (None: all).
        filters: ``(column, "=", value)`` conditions.
        settings: where the table's store is (None: this process's settings).
    """
    import pyarrow.dataset as ds

    expression = None
    for column, op, value in filters or []:
        assert op == "=", "only equality filters are needed here"
        term = ds.field(column) == value
        expression = term if expression is None else expression & term
    table = arrow_at(uri, columns, expression, settings)
    return table.to_pylist() if table is not None else []


def arrow_at(uri: str, columns: list[str] | None = None, where=None, settings: Settings | None = None, files_with=None):
    """The rows of the table at ``uri`` matching the pyarrow expression ``where``, as an Arrow table
    (None when the table does not exist yet). No Spark job and no snapshot to build: for the small
    bookkeeping tables, read in milliseconds.

    Args:
        uri: the table's location.
        columns: the columns read (None: all).
        where: a ``pyarrow.dataset`` expression (None: every row).
        settings: where the table's store is (None: this process's settings).
        files_with: delta-rs tuple filters that pick the files to open by the min and max the log
            keeps of each (None: every file). Arrow opens each file it scans, so a table written a
            row a commit costs a file a row: ``where`` picks rows, this spares the other files.
    """
    dataset = _dataset(uri, settings, files_with)
    return dataset.to_table(columns=columns, filter=where) if dataset is not None else None


def dataset_at(uri: str, settings: Settings | None = None):
    """The table's current data files as a pyarrow dataset (None when it does not exist yet), for a
    reader that keeps what it read of each file (Delta never changes a file it wrote)."""
    return _dataset(uri, settings)


def row_count(uri: str, settings: Settings | None = None) -> int | None:
    """The table's rows (None when it does not exist yet), from its files' footers: no data read."""
    dataset = _dataset(uri, settings)
    return dataset.count_rows() if dataset is not None else None


def _dataset(uri: str, settings: Settings | None, files_with=None):
    """The table's current files as a pyarrow dataset (None when the table does not exist yet).

    delta-rs lists the files; Arrow reads them through its own file system (``_arrow_files``),
    not delta-rs's default, a Python object (``deltalake.fs.DeltaStorageHandler`` in a
    ``pyarrow.fs.PyFileSystem``) whose opened files are Python objects too. Arrow's scan finishes
    on its own threads after ``to_table`` returns, and the last of them to let go of a Python
    object takes the GIL to free it; when the interpreter has begun to exit by then, Python 3.11
    ends that thread with ``pthread_exit``, whose unwinding through the C++ destructor aborts the
    process (docs/operations.md, "Exit codes"). Arrow's local and S3 file systems hold no Python
    object, so nothing is left to free.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    location, options = delta_rs_location(uri, settings)
    try:
        table = DeltaTable(location, storage_options=options)
    except TableNotFoundError:
        return None
    files = _arrow_files(Location.parse(uri), settings)
    return table.to_pyarrow_dataset(filesystem=files, file_pruning_predicate=files_with)


def _arrow_files(location: Location, settings: Settings | None):
    """Arrow's file system rooted at the table's folder (delta-rs names its files relative to it);
    None, delta-rs's default, in a store Arrow has no client for (Hadoop's other file systems)."""
    import pyarrow.fs as pa_fs

    from lakehouse.storage import object_store

    if location.is_local:
        return pa_fs.SubTreeFileSystem(str(location.local_path), pa_fs.LocalFileSystem())
    if location.scheme is not Scheme.S3:
        return None
    store = object_store.arrow_filesystem(settings or Settings.from_env())
    return pa_fs.SubTreeFileSystem(f"{location.bucket}/{location.key}", store)


def append_rows(uri: str, schema, rows: list[dict], settings: Settings | None = None) -> None:
    """Append rows to a Delta table in one commit. Columns the table lacks are added (a table
    created before a column existed gains it, as Spark's ``mergeSchema`` would).

    Args:
        uri: the table's location.
        schema: a pyarrow schema.
        rows: dicts by column name; missing names are null.
        settings: where the table's store is (None: this process's settings).
    """
    import pyarrow as pa
    from deltalake import write_deltalake

    location, options = delta_rs_location(uri, settings, writes=True)
    frame = pa.Table.from_pylist(rows, schema=schema)
    write_deltalake(
        location,
        frame,
        mode="append",
        schema_mode="merge",
        storage_options=options,
        post_commithook_properties=commit_hooks(),
    )


def append_rows_stamped_once(
    uri: str,
    schema,
    rows: list[dict],
    app_id: str,
    batch_id: int,
    first_attempt: bool = False,
    settings: Settings | None = None,
) -> None:
    """``append_rows`` unless the table already holds rows stamped with this ``app_id`` and
    ``batch_id`` (lakehouse.storage.writers.append_stamped_once, for a few rows); ``first_attempt`` says the
    caller knows the batch was not attempted before, so there is nothing to look up.

    Args:
        uri: the table's location.
        schema: the table's schema, created with it on first use.
        rows: the rows.
        app_id: the writer's id, stamped on each row.
        batch_id: the batch, stamped on each row.
        first_attempt: the caller knows the batch was not attempted before: nothing to look up.
        settings: where the table's store is (None: this process's settings).
    """
    if not first_attempt and _holds_stamp(uri, app_id, batch_id, settings):
        return
    append_rows(uri, schema, rows, settings)


def append_arrow_stamped_once(
    uri: str, rows, app_id: str, batch_id: int, first_attempt: bool = False, settings: Settings | None = None
) -> None:
    """Append an Arrow table of rows stamped with ``app_id`` and ``batch_id`` to an existing table,
    in one commit, unless it already holds that stamp (as ``append_rows_stamped_once``). The rows
    are cast to the table's column types (``as_table_types``).

    Args:
        uri: the table's location.
        rows: an Arrow table with the table's columns.
        app_id: the writer's id, stamped on each row.
        batch_id: the batch, stamped on each row.
        first_attempt: the caller knows the batch was not attempted before: nothing to look up.
        settings: where the table's store is (None: this process's settings).
    """
    from deltalake import DeltaTable, write_deltalake

    if not first_attempt and _holds_stamp(uri, app_id, batch_id, settings):
        return
    location, options = delta_rs_location(uri, settings, writes=True)
    table = DeltaTable(location, storage_options=options)
    write_deltalake(table, as_table_types(rows, table), mode="append", post_commithook_properties=commit_hooks())


def as_table_types(rows, table):
    """The Arrow table ``rows`` with each column the Delta ``table`` has cast to the table's type
    (Spark's ``toArrow`` picks Arrow types of its own for strings and timestamps); columns the table
    lacks (a MERGE's ``is_retraction``, say) as they are."""
    import pyarrow as pa

    target = pa.schema(table.schema().to_arrow())
    names = set(target.names)
    return rows.cast(pa.schema([target.field(f.name) if f.name in names else f for f in rows.schema]))


def _holds_stamp(uri: str, app_id: str, batch_id: int, settings: Settings | None) -> bool:
    return bool(rows_at(uri, ["batch_id"], [("app_id", "=", app_id), ("batch_id", "=", batch_id)], settings))


def append_alert(
    settings: Settings,
    source: str,
    message: str,
    dag_id: str | None = None,
    run_id: str | None = None,
    task_id: str | None = None,
    now: datetime | None = None,
) -> dict:
    """Append one row to ``ops.alerts`` (created on first use) and return it.

    Args:
        settings: where the tables live.
        source: who raised it (``airflow``, ``health`` ...).
        message: what happened.
        dag_id: the DAG, if raised by one.
        run_id: the run, if any.
        task_id: the task, if any.
        now: the alert's time (None: now).
    """
    import pyarrow as pa

    row = {
        "alert_id": str(uuid.uuid4()),
        "source": source,
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "message": message[:4000],
        "raised_at": now or datetime.now(UTC),
    }
    schema = pa.schema(
        [(name, pa.timestamp("us", tz="UTC") if kind == "timestamp" else pa.string()) for name, kind in ALERTS_COLUMNS]
    )
    append_rows(settings.table_uri(*ALERTS_TABLE), schema, [row], settings)
    return row
