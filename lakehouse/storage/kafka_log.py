"""The retained log on Kafka (set ``LAKEHOUSE_KAFKA_BOOTSTRAP``): one topic per pipeline.

Each record's timestamp is when the log received it (the producer stamps it, as the file writer
names a file after its arrival), which the clock correction reads as ``received_at``. Records are
keyed by bridge, so the copies of one event, and a bridge's events, stay in one partition, in order.

The Spark side reads a topic into the same frame as the file log: ``value``, ``source_file`` and
``written_at``. A record's ``source_file`` is its locator,
``kafka:<topic>/partition=<p>/<receive stamp>Z-o<offset>``: its last segment has the form of a log
file's name, so the receive time is read by the same rule, and locators sort in arrival order
within a partition.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime, timedelta

from lakehouse.dataflow.clocks import SPARK_STAMP
from lakehouse.errors import LakehouseError
from lakehouse.eventtime import parse_duration
from lakehouse.location import Scheme
from lakehouse.settings import Settings
from lakehouse.storage import kafka_auth
from lakehouse.storage.kafka_auth import CLIENT_TIMEOUT_SECONDS

TOPIC_PARTITIONS = 3


def _millis(moment: datetime) -> int:
    return int(moment.replace(tzinfo=moment.tzinfo or UTC).timestamp() * 1000)


def create_topic(settings: Settings, topic: str, principal: str) -> None:
    """Create the pipeline's topic if missing, as ``principal``, with the log's retention
    (``LAKEHOUSE_LOG_RETENTION``) counted from each record's receive time. An existing topic keeps
    its own configuration."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = settings.kafka_topic(topic)
    admin = AdminClient(kafka_auth.client_config(settings, principal))
    retention_ms = int(parse_duration(settings.log_retention).total_seconds() * 1000)
    config = {"retention.ms": str(retention_ms), "message.timestamp.type": "CreateTime"}
    future = admin.create_topics([NewTopic(topic, TOPIC_PARTITIONS, 1, config=config)])[topic]
    try:
        future.result(timeout=CLIENT_TIMEOUT_SECONDS)
    except KafkaException as error:
        if error.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise LakehouseError(
                f"could not create Kafka topic {topic} at {settings.kafka_bootstrap}: {error}"
            ) from None


def ensure_topic(settings: Settings, topic: str) -> timedelta | None:
    """The producer's topic, created when missing (by the producer itself on a broker without ACLs;
    on the broker of ``lakehouse kafka start``, its start creates the project's topics); refused in
    one line when the producer may not write it. Returns how long the topic keeps a record (None:
    for ever): the topic's own retention, which whoever created it chose, not this client's setting."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    name, principal = settings.kafka_topic(topic), kafka_auth.producer(topic)
    connected = kafka_auth.connect(AdminClient, settings, principal)
    if kafka_auth.topic_metadata(settings, principal, connected, name, "write") is None:
        create_topic(settings, topic, principal)
        return parse_duration(settings.log_retention)
    described = connected[0].describe_topics(TopicCollection([name]), include_authorized_operations=True)[name]
    allowed = described.result(timeout=CLIENT_TIMEOUT_SECONDS).authorized_operations
    if allowed is not None and not {AclOperation.WRITE, AclOperation.ALL} & set(allowed):
        raise kafka_auth.not_authorized(settings, principal, "write", name)
    return _topic_retention(connected[0], name, settings)


def _topic_retention(admin, name: str, settings: Settings) -> timedelta | None:
    """The topic's ``retention.ms`` on the broker (None: -1, for ever); this client's setting when
    the broker will not say (a principal granted before producers could read their topic's
    configuration: the broker's next start grants it)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, name)
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_SECONDS)
    except KafkaException:
        return parse_duration(settings.log_retention)
    retention_ms = int(configs["retention.ms"].value)
    return None if retention_ms < 0 else timedelta(milliseconds=retention_ms)


def _days(span: timedelta) -> str:
    return f"{span.days} days" if span.days else f"{span.total_seconds() / 3600:g} hours"


def _record_key(line: str, field: str) -> bytes | None:
    """The record's key: the line's ``field`` (the toll example's bridge), when it is an event that names one."""
    try:
        document = json.loads(line)
    except ValueError:
        return None
    value = document.get(field) if isinstance(document, dict) else None
    return str(value).encode() if isinstance(value, str | int) and not isinstance(value, bool) else None


class KafkaLogWriter:
    """Produces log records into a pipeline's topic, each stamped with its own receive time.

    Idempotent and acknowledged by every replica: a retried send is not written twice, and
    ``append`` returns once the broker has the records. Records are keyed by ``key_field``: the
    copies of one key's events share a partition, and so keep their order."""

    def __init__(self, settings: Settings, topic: str, key_field: str = "bridge_id"):
        from confluent_kafka import Producer

        self.retention = ensure_topic(settings, topic)
        self.topic, self.key_field = settings.kafka_topic(topic), key_field
        self._errors: list[str] = []
        producing = {"enable.idempotence": True, "acks": "all", "linger.ms": 20}
        self._producer = kafka_auth.connect(Producer, settings, kafka_auth.producer(topic), **producing)[0]

    def _delivered(self, error, message) -> None:
        if error is not None:
            self._errors.append(str(error))

    def append(self, records: list[tuple[datetime, str]], tag: str) -> None:
        """Send (receive time, line) records and wait until the broker has them all."""
        # The broker acknowledges a record older than the topic's retention, then deletes it.
        oldest = min(arrival for arrival, _ in records)
        if self.retention is not None and _millis(oldest) < (time.time() - self.retention.total_seconds()) * 1000:
            raise LakehouseError(
                f"records received at {oldest:%Y-%m-%dT%H:%M:%S}Z are older than the topic {self.topic}'s "
                f"retention ({_days(self.retention)}): Kafka would delete them. Produce recent ones (--start now), "
                "or keep the topic longer (retention.ms; a topic the broker's start creates takes "
                "LAKEHOUSE_LOG_RETENTION)"
            )
        for arrival, line in records:
            self._producer.produce(
                self.topic,
                value=line.encode("utf-8", "surrogateescape"),
                key=_record_key(line, self.key_field),
                timestamp=_millis(arrival),
                on_delivery=self._delivered,
            )
            self._producer.poll(0)
        if self._producer.flush(CLIENT_TIMEOUT_SECONDS) or self._errors:
            raise LakehouseError(f"Kafka did not take every record of {tag}: {self._errors[:3] or 'timed out'}")


@contextlib.contextmanager
def _reader(settings: Settings, group: str):
    """A consumer as the reader, in one of the platform's groups (not committing offsets), with its errors."""
    from confluent_kafka import Consumer

    consuming = {"group.id": kafka_auth.GROUP_PREFIX + group, "enable.auto.commit": False}
    connected = kafka_auth.connect(Consumer, settings, kafka_auth.READER, **consuming)
    try:
        yield connected
    finally:
        connected[0].close()


@contextlib.contextmanager
def _topic_reader(settings: Settings, topic: str, group: str):
    """A consumer of the pipeline's topic, its full name and its partitions in order; a missing
    topic is a one-line error."""
    name = settings.kafka_topic(topic)
    with _reader(settings, group) as connected:
        metadata = kafka_auth.topic_metadata(settings, kafka_auth.READER, connected, name)
        if metadata is None:
            raise LakehouseError(f"Kafka at {settings.kafka_bootstrap} has no topic {name}")
        yield connected[0], name, sorted(metadata.partitions)


def check_reader(settings: Settings, topic: str) -> None:
    """The reader's credentials, tried before Spark's Kafka source would retry refused ones for
    minutes: a refusal is one line here. A topic not made yet is no error (a stream waits for it)."""
    with _reader(settings, "check") as connected:
        kafka_auth.topic_metadata(settings, kafka_auth.READER, connected, settings.kafka_topic(topic))


def _received(message) -> datetime:
    return datetime.fromtimestamp(message.timestamp()[1] / 1000, UTC).replace(tzinfo=None)


def oldest_retained(settings: Settings, topic: str) -> datetime | None:
    """From when the topic is complete: the latest of the first retained receive times of the
    partitions retention has cut (their older records are gone); None when nothing was deleted."""
    from confluent_kafka import TopicPartition

    with _topic_reader(settings, topic, "retention-check") as (consumer, name, partitions):
        oldest = None
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(name, partition), CLIENT_TIMEOUT_SECONDS)
            if low == 0 or low == high:
                continue
            consumer.assign([TopicPartition(name, partition, low)])
            message = consumer.consume(1, CLIENT_TIMEOUT_SECONDS)
            if message and message[0].error() is None:
                oldest = _received(message[0]) if oldest is None else max(oldest, _received(message[0]))
        return oldest


def records_since(settings: Settings, topic: str, since: datetime | None):
    """(partition, offset, receive time, line) of every record received from ``since`` on (all when
    None), up to each partition's end when the call starts, partition by partition in offset order.

    A line is the record's value as UTF-8 text (undecodable bytes become U+FFFD), its line breaks
    turned into spaces: a file log holds one record a line, and in JSON a line break between tokens
    is a space."""
    from confluent_kafka import TopicPartition

    with _topic_reader(settings, topic, "archive") as (consumer, name, partitions):
        stamp = _millis(since) if since is not None else 0
        starts = consumer.offsets_for_times(
            [TopicPartition(name, p, stamp) for p in partitions], CLIENT_TIMEOUT_SECONDS
        )
        for start in starts:
            end = consumer.get_watermark_offsets(TopicPartition(name, start.partition), CLIENT_TIMEOUT_SECONDS)[1]
            if start.offset < 0 or start.offset >= end:
                continue
            consumer.assign([TopicPartition(name, start.partition, start.offset)])
            offset = start.offset
            waited_since = time.monotonic()
            while offset < end:
                # consume() waits its whole timeout for a full batch: poll briefly, give up on silence.
                messages = consumer.consume(10_000, 0.5)
                if not messages and time.monotonic() - waited_since > CLIENT_TIMEOUT_SECONDS:
                    raise LakehouseError(f"reading {name}: offsets {offset}-{end} did not arrive within 30 s")
                if messages:
                    waited_since = time.monotonic()
                for message in messages:
                    if message.error() is not None:
                        raise LakehouseError(f"reading {name}: {message.error()}")
                    offset = message.offset() + 1
                    if message.offset() < end:
                        text = (message.value() or b"").decode("utf-8", "replace")
                        line = text.replace("\r", " ").replace("\n", " ")
                        yield start.partition, message.offset(), _received(message), line


def end_offsets(settings: Settings, topic: str) -> dict[str, int]:
    """Each partition's end offset (the next record's) now."""
    from confluent_kafka import TopicPartition

    with _topic_reader(settings, topic, "audit-pin") as (consumer, name, partitions):
        return {
            str(p): consumer.get_watermark_offsets(TopicPartition(name, p), CLIENT_TIMEOUT_SECONDS)[1]
            for p in partitions
        }


def log_pin(settings: Settings, topic: str) -> str:
    """What the topic holds now, as an audit's ``log_until`` pin."""
    return KAFKA_PIN + json.dumps(end_offsets(settings, topic), sort_keys=True)


def pinned_offsets(pin: str) -> dict[str, int] | None:
    """The end offsets a ``log_until`` pin names (None for a file log's pin, a time)."""
    return json.loads(pin[len(KAFKA_PIN) :]) if pin.startswith(KAFKA_PIN) else None


def record_unit(source_file, file_name):
    """What a record was read as: its Kafka partition, or its file's name (``file_name``)."""
    from pyspark.sql import functions as F

    return F.when(source_file.rlike(_LOCATOR), F.regexp_extract(source_file, _LOCATOR, 1)).otherwise(file_name)


def record_offset(source_file):
    """A Kafka record's zero-padded offset (null for a file's record)."""
    from pyspark.sql import functions as F

    return F.when(source_file.rlike(_LOCATOR), F.regexp_extract(source_file, _LOCATOR, 2))


def read_position(unit, file_name):
    """A micro-batch's unit as (what it read, the last offset read there; null for a whole file)."""
    from pyspark.sql import functions as F

    is_partition = unit.rlike(_READ_UNIT)
    return (
        F.when(is_partition, F.regexp_extract(unit, _READ_UNIT, 1)).otherwise(file_name),
        F.when(is_partition, F.regexp_extract(unit, _READ_UNIT, 2)),
    )


# A locator, split into its partition (``kafka:<topic>/partition=<p>``) and its zero-padded offset;
# and what a micro-batch records of a partition: the last offset it read there.
_LOCATOR = r"^(kafka:[^/]+/partition=\d+)/\d{8}T\d{12}Z-o(\d{20})$"
_READ_UNIT = r"^(kafka:[^/]+/partition=\d+)/o(\d{20})$"
# An audit pins a Kafka log by its end offsets: records are only appended, so those name its content.
KAFKA_PIN = "kafka:"


def source_unit(source_file):
    """What a micro-batch records it read (ops.stream_progress.source_files): a log file's path, or
    a record's partition, to which :func:`read_offsets` adds the last offset read."""
    from pyspark.sql import functions as F

    return F.regexp_replace(source_file, _LOCATOR, "$1")


def read_offsets(parsed, units: list[str]) -> list[str]:
    """``units`` with each Kafka partition as ``<partition>/o<last offset read>`` (one small job,
    run only when the batch came from Kafka): the stream reads a partition in offset order, so
    that offset bounds what it has read, and a batch's row stays small whatever its size."""
    from pyspark.sql import functions as F

    if not any(Scheme.KAFKA.matches(unit) for unit in units):
        return units
    kafka = parsed.where(F.col("source_file").rlike(_LOCATOR))
    last = kafka.groupBy(F.regexp_extract("source_file", _LOCATOR, 1).alias("partition")).agg(
        F.max(F.regexp_extract("source_file", _LOCATOR, 2)).alias("offset")
    )
    read = {row["partition"]: f"{row['partition']}/o{row['offset']}" for row in last.collect()}
    return sorted(read.get(unit, unit) for unit in units)


def _locator(topic, partition, offset, timestamp):
    from pyspark.sql import functions as F

    stamp = F.date_format(timestamp, SPARK_STAMP)
    return F.format_string("kafka:%s/partition=%d/%sZ-o%020d", topic, partition, stamp, offset)


def _as_log_lines(records):
    """Kafka records as the log's lines: ``value`` (UTF-8 text), ``source_file`` (the locator) and
    ``written_at`` (the receive time)."""
    from pyspark.sql import functions as F

    return records.select(
        F.col("value").cast("string").alias("value"),
        _locator(F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp")).alias("source_file"),
        F.col("timestamp").alias("written_at"),
    )


def topic_stream(spark, settings: Settings, topic: str):
    """The topic as a stream of log lines from its first retained record, at most
    ``max_offsets_per_trigger`` records a micro-batch. Offsets live in the query's checkpoint; a
    record that retention deleted before the stream read it fails the query (failOnDataLoss)."""
    check_reader(settings, topic)
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka_auth.spark_options(settings))
        .option("subscribe", settings.kafka_topic(topic))
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
    return _as_log_lines(reader.load()).select("value", "source_file")


def read_topic(spark, settings: Settings, topic: str, arrived_from: datetime | None, until: dict | None = None):
    """The records received at or after ``arrived_from`` (all when None), through Kafka's offsets
    for that time, up to the topic's end when the read starts.

    Args:
        spark: the session to read with.
        settings: the brokers and the topic prefix.
        topic: the pipeline's topic (before the prefix).
        arrived_from: the first receive time wanted (None: the oldest record retained).
        until: each partition's end offset to read to (None: the topic's end), an audit's pin.
    """
    check_reader(settings, topic)
    name = settings.kafka_topic(topic)
    ending = json.dumps({name: until}) if until is not None else "latest"
    reader = (
        spark.read.format("kafka")
        .options(**kafka_auth.spark_options(settings))
        .option("subscribe", name)
        .option("endingOffsets", ending)
    )
    if arrived_from is None:
        reader = reader.option("startingOffsets", "earliest")
    else:
        # A partition with nothing received since then starts at its end: it adds no record.
        reader = reader.option("startingTimestamp", str(_millis(arrived_from)))
        reader = reader.option("startingOffsetsByTimestampStrategy", "latest")
    return _as_log_lines(reader.load())
