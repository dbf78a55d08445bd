"""Daily upkeep: compact small files (OPTIMIZE), drop files no version needs any more (VACUUM),
delete each table's expired log files, and expire the retained log.

VACUUM's retention never goes below what the platform still needs: an audit re-run with ``--pins``
reads the versions it pinned (time travel), so removed files must outlive the audit replay window,
and Delta refuses less than its own 7-day safety margin for concurrent readers and writers.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from lakehouse.eventtime import format_duration, parse_duration
from lakehouse.settings import Settings
from lakehouse.storage.log_expiry import record_expiry
from lakehouse.storage.log_files import LocalFiles, ObjectFiles, log_files

DELTA_SAFETY = timedelta(days=7)
_PARTITION = re.compile(r"ingest_date=(\d{4}-\d{2}-\d{2})/ingest_hour=(\d{2})/?$")


def vacuum_retention(settings: Settings) -> timedelta:
    """The retention VACUUM uses: the one asked for, raised to every floor."""
    return max(parse_duration(settings.vacuum_retention), parse_duration(settings.audit_replay_window), DELTA_SAFETY)


def log_retention(settings: Settings) -> timedelta:
    """How long the retained log is kept: as configured, but never less than audits replay."""
    return max(parse_duration(settings.log_retention), parse_duration(settings.audit_replay_window))


def hour_end(folder: str) -> datetime | None:
    """When an ingest-hour folder's (``.../ingest_date=D/ingest_hour=H``) hour ends (None: not such a folder)."""
    match = _PARTITION.search(folder)
    if not match:
        return None
    day = datetime.combine(date.fromisoformat(match.group(1)), datetime.min.time())
    return day + timedelta(hours=int(match.group(2)) + 1)


def expired_log_partitions(partitions: list[str], now: datetime, retention: timedelta) -> list[str]:
    """Ingest-hour folders whose whole hour is older than the retention."""
    oldest_kept = now.replace(tzinfo=None) - retention
    return [folder for folder in partitions if (end := hour_end(folder)) is not None and end <= oldest_kept]


def log_partitions(files: LocalFiles | ObjectFiles) -> list[str]:
    """Every ingest-hour folder of a log, from listings alone (local, or S3 through boto3)."""
    days = sorted(day for day in files.folders("") if day.startswith("ingest_date="))
    hours = [f"{day}/{hour}" for day in days for hour in sorted(files.folders(day)) if hour.startswith("ingest_hour=")]
    return [f"{files.uri}/{hour}" for hour in hours]


def expire_log(settings: Settings, topic: str, now: datetime) -> list[str]:
    """Remove the ingest hours of a log older than its retention; returns the folders removed. How
    far it removes is recorded first (lakehouse.storage.log_expiry): a backfill from the log then
    refuses a range whose files may be gone. No JVM.

    Args:
        settings: where the log is, and its retention.
        topic: the log's pipeline (a pipeline's variants read their parent's log).
        now: the time retention is counted back from.
    """
    files = log_files(settings, settings.pipeline_log_uri(topic))
    expired = expired_log_partitions(log_partitions(files), now, log_retention(settings))
    if expired:
        record_expiry(files, max(hour_end(folder) for folder in expired))
    for folder in expired:
        files.remove_folder(folder)
    return expired


def _compact(delta, name: str) -> dict:
    """OPTIMIZE one table. The stream and the batch jobs keep writing meanwhile: a compaction that
    loses its commit to one of them runs again, and one that keeps losing is left for the next
    day's run (reported, not raised), so that VACUUM and the log's expiry still happen."""
    from lakehouse.storage.writers import COMPACTION_CONFLICTS, retry_on_conflict

    try:
        metrics = retry_on_conflict(lambda: delta.optimize().executeCompaction().first()["metrics"], f"OPTIMIZE {name}")
    except COMPACTION_CONFLICTS as conflict:
        return {
            "files_added": 0,
            "files_removed": 0,
            "skipped": f"lost every commit to concurrent writes: {type(conflict).__name__}",
        }
    return {"files_added": metrics["numFilesAdded"], "files_removed": metrics["numFilesRemoved"]}


def clean_expired_log(uri: str, settings: Settings) -> None:
    """Delete the table's ``_delta_log`` files older than its ``delta.logRetentionDuration`` (Delta's
    default: 30 days), up to a checkpoint that keeps every later version readable: Delta's own rule,
    which the platform's delta-rs commits leave to this daily run (``ops_tables.commit_hooks``)."""
    from deltalake import DeltaTable

    from lakehouse.storage.ops_tables import delta_rs_location

    location, options = delta_rs_location(uri, settings, writes=True)
    DeltaTable(location, storage_options=options).cleanup_metadata()


def maintain(spark, settings: Settings, pipeline, now: datetime) -> dict:
    """OPTIMIZE and VACUUM every existing table of the pipeline and delete its expired log files,
    then expire the pipeline's old log hours.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline whose tables and log are maintained.
        now: the time retention is counted back from.
    """
    from delta.tables import DeltaTable

    from lakehouse.storage.catalog import ALERTS, AUDIT_TABLES, all_tables, table_exists

    retention = vacuum_retention(settings)
    report = {
        "pipeline": pipeline.name,
        "vacuum_retention": format_duration(retention),
        "tables": {},
        "log_partitions_deleted": [],
    }
    for table in [*all_tables(pipeline), *AUDIT_TABLES, ALERTS]:
        uri = table.uri(settings)
        if table.qualified_name in report["tables"] or not table_exists(spark, uri):
            continue
        delta = DeltaTable.forPath(spark, uri)
        report["tables"][table.qualified_name] = _compact(delta, table.qualified_name)
        # VACUUM lists the table in spark.sql.sources.parallelPartitionDiscovery.parallelism tasks;
        # the session keeps that at the shuffle partitions, not Spark's 10000 (see lakehouse.storage.spark).
        delta.vacuum(retention.total_seconds() / 3600)
        clean_expired_log(uri, settings)
    report["log_partitions_deleted"] = expire_log(settings, pipeline.topic, now)
    return report
