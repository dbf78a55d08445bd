"""The retained log: newline-delimited JSON files, partitioned by ingest hour.

Layout: ``<log>/<pipeline>/ingest_date=YYYY-MM-DD/ingest_hour=HH/<arrival>Z-<tag>.jsonl``. File
names start with the arrival time of their first record (the file's receive time, which corrects
device clocks), so name order is arrival order, and a replay of an ingest-time range lists only
the folders of that range. The log is a local folder or an S3 prefix (lakehouse.storage.log_files);
either way a file appears whole, so a reader never sees half a file.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.dataflow.clocks import log_file_name
from lakehouse.errors import LakehouseError
from lakehouse.eventtime import EPOCH
from lakehouse.location import Location, Scheme
from lakehouse.settings import Settings
from lakehouse.storage.frames import literal_frame
from lakehouse.storage.log_files import Entry, local_entries, log_files, object_entries
from lakehouse.storage.spark import is_remote


def log_glob(settings: Settings, pipeline: str) -> str:
    return f"{settings.pipeline_log_uri(pipeline)}/ingest_date=*/ingest_hour=*/*.jsonl"


def partition_dir(arrival: datetime) -> str:
    return f"ingest_date={arrival:%Y-%m-%d}/ingest_hour={arrival:%H}"


class LogWriter:
    """Appends files to the file log, on the local file system or in S3 (lakehouse.storage.log_files)."""

    def __init__(self, settings: Settings, pipeline: str):
        self.files = log_files(settings, settings.pipeline_log_uri(pipeline))

    def write(self, arrival: datetime, tag: str, lines: list[str]) -> str:
        """One file of ``lines`` received at ``arrival``; returns its URI."""
        return self.files.put(f"{partition_dir(arrival)}/{log_file_name(arrival, tag)}", "\n".join(lines) + "\n")

    def append(self, records: list[tuple[datetime, str]], tag: str) -> str:
        """(receive time, line) records as one file, received when its first record was."""
        return self.write(records[0][0], tag, [line for _, line in records])


def _listing(spark: SparkSession, settings: Settings, uri: str) -> list[Entry]:
    """A folder's entries ([] when it does not exist), without reading any file: a local log
    directly, one in S3 through boto3, any other through Hadoop's file system in this process's JVM."""
    location = Location.parse(uri)
    if location.is_local:
        return local_entries(uri)
    if location.scheme is Scheme.S3:
        from lakehouse.storage import object_store

        return object_entries(object_store.client(settings), location.bucket, location.key)
    if is_remote(spark):
        raise LakehouseError(f"a Spark Connect client lists a local or S3 log only, and {uri} is neither")
    path = spark._jvm.org.apache.hadoop.fs.Path(uri)
    file_system = path.getFileSystem(spark._jsc.hadoopConfiguration())
    if not file_system.exists(path):
        return []
    return [
        Entry(s.getPath().getName(), str(s.getPath().toUri()), s.isDirectory(), s.getModificationTime())
        for s in file_system.listStatus(path)
    ]


def _children(spark: SparkSession, settings: Settings, uri: str, prefix: str) -> list[Entry]:
    """The sub-folders whose names start with ``prefix``, in name order."""
    entries = _listing(spark, settings, uri)
    return sorted((e for e in entries if e.is_dir and e.name.startswith(prefix)), key=lambda e: e.name)


def partition_uris(
    spark: SparkSession,
    settings: Settings,
    pipeline: str,
    arrived_from: datetime | None = None,
    arrived_before: datetime | None = None,
) -> list[str]:
    """The ingest-hour folders that hold files arrived at or after ``arrived_from``'s hour (and before
    ``arrived_before``'s), oldest first.

    Only folder names are listed: a day folder before the cut-off is never opened.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline's name (its log folder).
        arrived_from: the first ingest hour wanted (None: all).
        arrived_before: the first ingest hour not wanted (None: none).
    """
    cut = f"{arrived_from:%Y-%m-%d}/{arrived_from:%H}" if arrived_from is not None else ""
    stop = f"{arrived_before:%Y-%m-%d}/{arrived_before:%H}" if arrived_before is not None else "~"
    uris = []
    for day in _children(spark, settings, settings.pipeline_log_uri(pipeline), "ingest_date="):
        day_name = day.name.removeprefix("ingest_date=")
        if cut and day_name < cut[:10]:
            continue
        for hour in _children(spark, settings, day.uri, "ingest_hour="):
            if cut <= f"{day_name}/{hour.name.removeprefix('ingest_hour=')}" < stop:
                uris.append(hour.uri)
    return uris


def file_write_times(
    spark: SparkSession, settings: Settings, pipeline: str, arrived_from: datetime | None = None
) -> dict[str, datetime]:
    """Each log file's name and when it was added to the log (UTC), from a listing alone.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline's name (its log folder).
        arrived_from: the first ingest hour listed (None: all).
    """
    times = {}
    for uri in partition_uris(spark, settings, pipeline, arrived_from):
        for entry in _listing(spark, settings, uri):
            if not entry.is_dir and entry.name.endswith(".jsonl"):
                # exact: a float of seconds could round below the file's time
                times[entry.name] = EPOCH + timedelta(milliseconds=entry.modified_ms)
    return times


def last_write(
    spark: SparkSession, settings: Settings, pipeline: str, arrived_from: datetime | None = None
) -> datetime | None:
    """When the newest file of those partitions was added to the log (UTC), from a listing alone.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline's name (its log folder).
        arrived_from: the first ingest hour listed (None: all).
    """
    return max(file_write_times(spark, settings, pipeline, arrived_from).values(), default=None)


def read_files(
    spark: SparkSession,
    settings: Settings,
    pipeline: str,
    arrived_from: datetime | None = None,
    arrived_before: datetime | None = None,
) -> DataFrame:
    """The file log's lines of the ingest hours from ``arrived_from``'s to before ``arrived_before``.

    ``written_at`` is the file's modification time: when it was added to the log. Spark is given
    only the folders of those hours, so it neither lists nor reads the rest of the log.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline's name (its log folder).
        arrived_from: the first ingest hour read (None: all).
        arrived_before: the ingest hour where reading stops (None: the newest).
    """
    base = settings.pipeline_log_uri(pipeline)
    empty = literal_frame(spark, "value string, source_file string, written_at timestamp", [])
    folders = partition_uris(spark, settings, pipeline, arrived_from, arrived_before)
    if not folders:
        return empty
    try:
        raw = spark.read.format("text").option("basePath", base).load(folders)
    except AnalysisException as error:
        if "PATH_NOT_FOUND" in str(error):  # a folder removed between the listing and the read
            return empty
        raise
    return raw.where(F.col("_metadata.file_name").endswith(".jsonl")).select(
        "value",
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("written_at"),
    )
