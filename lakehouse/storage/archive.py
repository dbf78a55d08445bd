"""The archive of a Kafka log: each closed ingest hour copied, once, into the file log under
``LAKEHOUSE_LOG_URI``, so that reprocessing older than Kafka's retention reads the archive (DDIA
ch. 11: a broker whose retention makes replay possible, and an archive for what is older).

An hour's records go into one file per Kafka partition, in offset order, named after the hour's
first receive time there. The archive's state (``_archive.json``, hidden from readers) says how far
it reaches: every record received before ``through`` is archived. A run writes the closed hours
after it, never overwriting a file, then moves ``through`` on, even over hours without records; so a
crash at any point and a run again archive each record once. No JVM: the copy goes through a Kafka
consumer, so an Airflow task runs it in its own process.

The log is read here too, whichever it is (``read_log``): this module knows both the file log it
writes to and the Kafka log it copies from, so a read that needs either starts here.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from lakehouse.errors import LakehouseError
from lakehouse.location import Location
from lakehouse.settings import Settings
from lakehouse.storage import kafka_log
from lakehouse.storage.log import LogWriter, partition_dir, read_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A record stamped in an hour reaches the broker within the producer's delivery timeout (librdkafka's
# default: 5 minutes), so an hour is closed that long after its end.
SETTLE = timedelta(minutes=5)
STATE = "_archive.json"
HOUR = timedelta(hours=1)


def _hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


@dataclasses.dataclass
class ArchiveRun:
    hours: list[datetime] = dataclasses.field(default_factory=list)  # newly archived
    records: int = 0
    files: int = 0


class Archive:
    """The archive of one pipeline's topic, in the file log."""

    def __init__(self, settings: Settings, topic: str):
        self.settings, self.topic = settings, topic
        self.writer = LogWriter(settings, topic)

    def state(self) -> tuple[datetime | None, datetime | None]:
        """(from, through): the archive holds every record received in [from, through); from is
        None when it started at the topic's first record. (None, None) before any run."""
        text = self.writer.files.read(STATE)
        if text is None:
            return None, None
        state = json.loads(text)
        return _instant(state["from"]), _instant(state["through"])

    def run(self, now: datetime | None = None) -> ArchiveRun:
        """Archive every closed hour the topic holds after ``through``; move ``through`` to now's
        closed hours."""
        now = now or datetime.now(UTC).replace(tzinfo=None)
        start, through = self.state()
        if through is None:
            start = kafka_log.oldest_retained(self.settings, self.topic)  # None: nothing deleted yet
        closed_until = _hour_of(now - SETTLE)
        run = ArchiveRun()
        by_hour = _records_by_hour(self.settings, self.topic, through)
        for hour in sorted(h for h in by_hour if h < closed_until and (through is None or h >= through)):
            run.hours.append(hour)
            for partition, records in sorted(by_hour[hour].items()):
                records.sort()  # by offset
                name_time = min(received for _, received, _ in records)
                if not self._exists(hour, partition):
                    self.writer.append([(name_time, line) for _, _, line in records], _tag(partition, records[0][0]))
                    run.files += 1
                run.records += len(records)
        if through is None or closed_until > through:
            self._write_state(start, closed_until)
        return run

    def _write_state(self, start: datetime | None, through: datetime) -> None:
        # Whole or not at all, as every file of the log (lakehouse.storage.log_files).
        self.writer.files.put(STATE, json.dumps({"from": _text(start), "through": _text(through)}))

    def _exists(self, hour: datetime, partition: int) -> bool:
        return any(name.endswith(f"-kafka-p{partition}.jsonl") for name in self.writer.files.names(partition_dir(hour)))


def _text(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _instant(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _tag(partition: int, first_offset: int) -> str:
    # Unique per hour and partition; the suffix is how a run finds a file it wrote before a crash.
    return f"o{first_offset:020d}-kafka-p{partition}"


def _records_by_hour(settings: Settings, topic: str, since: datetime | None) -> dict:
    """hour -> partition -> [(offset, receive time, line)] for the records received from ``since`` on."""
    by_hour: dict = defaultdict(lambda: defaultdict(list))
    for partition, offset, received, line in kafka_log.records_since(settings, topic, since):
        by_hour[_hour_of(received)][partition].append((offset, received, line))
    return by_hour


def check_covered(settings: Settings, topic: str, arrived_from: datetime) -> datetime | None:
    """Where a read of the log from ``arrived_from`` switches from the archive to Kafka (None: all
    from Kafka); fails before any Spark work when neither holds records the read needs."""
    oldest = kafka_log.oldest_retained(settings, topic)
    if oldest is None or arrived_from >= oldest:
        return None
    try:
        start, through = Archive(settings, topic).state()
    except LakehouseError:  # the file log is not local: no archive yet
        start, through = None, None
    if through is not None and through >= oldest and (start is None or arrived_from >= start):
        return through
    reach = f"reaches to {through:%Y-%m-%dT%H:%M:%S}Z" if through else "is empty"
    raise LakehouseError(
        f"the Kafka log {settings.kafka_topic(topic)} holds records received from {oldest:%Y-%m-%dT%H:%M:%S}Z on "
        f"(retention {settings.log_retention}), and its archive in {_location(settings)} {reach}; this range "
        f"needs records received from {arrived_from:%Y-%m-%dT%H:%M:%S}Z, which retention has deleted"
    )


def _location(settings: Settings) -> str:
    return Location.parse(settings.log_uri).display


def read_archive_then_kafka(spark, settings: Settings, topic: str, arrived_from: datetime | None):
    """The log's lines from ``arrived_from`` on: the archive's hours before what Kafka still holds,
    then Kafka's records from the end of those hours.

    Args:
        spark: the session to read with.
        settings: the brokers, the topic prefix and the archive's location (the file log's).
        topic: the pipeline's topic (before the prefix).
        arrived_from: the first receive time wanted (None: all that Kafka holds).
    """
    from pyspark.sql import functions as F

    switch = check_covered(settings, topic, arrived_from) if arrived_from is not None else None
    if switch is None:
        return kafka_log.read_topic(spark, settings, topic, arrived_from)
    live = kafka_log.read_topic(spark, settings, topic, switch).where(F.col("written_at") >= F.lit(switch))
    return read_files(spark, settings, topic, arrived_from, arrived_before=switch).unionByName(live)


def read_log(spark: SparkSession, settings: Settings, pipeline: str, arrived_from: datetime | None = None) -> DataFrame:
    """Raw log lines (``value``, ``source_file``, ``written_at``) that arrived at or after ``arrived_from``'s hour.

    A log on Kafka is read from the offsets of that time (lakehouse.storage.kafka_log), and from its
    archive for what retention has deleted (``read_archive_then_kafka``); a file log, from its files.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline's name (its log folder, or topic).
        arrived_from: the first ingest hour read (None: all).
    """
    if settings.kafka_bootstrap:
        return read_archive_then_kafka(spark, settings, pipeline, arrived_from)
    return read_files(spark, settings, pipeline, arrived_from)
