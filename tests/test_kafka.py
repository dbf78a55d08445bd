"""The retained log on a real Kafka broker (KRaft, started by the project's own `lakehouse kafka`):
the generator's producer, the speed layer and log backfills reading the topic, retention and the
archive (the whole loop on Kafka and a Spark standalone cluster, its stream SIGKILLed mid-batch, runs
across hosts: tests/test_across_hosts.py). One broker for the module; each test has its own topic
prefix and home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.eventtime import earliest_arrival_for
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.batch import BatchLayer
from lakehouse.location import Location
from lakehouse.services import kafka_access
from lakehouse.storage import kafka_auth
from lakehouse.storage.archive import Archive, check_covered
from lakehouse.storage.catalog import pipeline_tables
from lakehouse.storage.kafka_log import KafkaLogWriter
from lakehouse.vocabulary import LogSink
from tests.chaos import VOLATILE
from tests.conftest import make_settings

pytestmark = [pytest.mark.services, pytest.mark.slow]

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)


def cli(*arguments: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", *arguments], env=env, capture_output=True, text=True, timeout=timeout
    )


# Each test's topic prefix: the broker's principals are granted their topics under each.
PREFIXES = ("retention.", "too-old.", "ingest.", "archive.", "topology.", "acl.")
# The broker's start creates the topics with its own settings' retention: the default, for one prefix.
TOPIC_RETENTION = {"too-old.": {"LAKEHOUSE_LOG_RETENTION": "30d"}}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker for the module, on free ports, started and stopped as a user would, with its
    principals granted the topics of every prefix of the module. Its clients find their principals'
    passwords in its credentials file (LAKEHOUSE_KAFKA_CREDENTIALS, set for the module)."""
    home = tmp_path_factory.mktemp("kafka-home")
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_KAFKA_PORT": "0"}
    assert cli("kafka", "status", env=env).returncode == 1
    started = cli("kafka", "start", env=env, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    report = json.loads(started.stdout)
    bootstrap = report["bootstrap"]
    for prefix in PREFIXES:
        kafka_access.grant(
            make_settings(home, **kafka_env(bootstrap, prefix, **TOPIC_RETENTION.get(prefix, {}))), bootstrap
        )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAKEHOUSE_KAFKA_CREDENTIALS", report["credentials"])
        yield bootstrap
    stopped = cli("kafka", "stop", env=env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert cli("kafka", "status", env=env).returncode == 1


# Kafka deletes records older than the topic's retention, counted from their receive times, and the
# generated log is received in January 2026: the topics keep ten years.
RETENTION = "3650d"


def kafka_env(bootstrap: str, prefix: str, **env: str) -> dict[str, str]:
    """The variables of a home whose log is its own topic on the module's broker."""
    return {
        "LAKEHOUSE_KAFKA_CREDENTIALS": os.environ.get("LAKEHOUSE_KAFKA_CREDENTIALS", ""),
        "LAKEHOUSE_KAFKA_BOOTSTRAP": bootstrap,
        "LAKEHOUSE_KAFKA_TOPIC_PREFIX": prefix,
        "LAKEHOUSE_LOG_RETENTION": RETENTION,
        "LAKEHOUSE_BACKFILL_MAX_RANGE": "31d",
        **env,
    }


def kafka_settings(home: Path, bootstrap: str, prefix: str, **env: str):
    return make_settings(home, **kafka_env(bootstrap, prefix, **env))


def in_object_store(bucket: str, *locations: str) -> dict[str, str]:
    """The variables that put these locations (log, warehouse, checkpoint) in a bucket of the S3 server."""
    return {f"LAKEHOUSE_{location.upper()}_URI": f"s3a://{bucket}/{location}" for location in locations}


def object_names(settings, uri: str, suffix: str) -> list[str]:
    """The keys under an s3a:// location that end with ``suffix``, through boto3."""
    from lakehouse.storage import object_store

    location = Location.parse(uri)
    pages = object_store.client(settings).get_paginator("list_objects_v2")
    pages = pages.paginate(Bucket=location.bucket, Prefix=location.key)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []) if item["Key"].endswith(suffix))


def rows(spark, settings, table, drop=()) -> list[tuple]:
    frame = spark.read.format("delta").load(table.uri(settings))
    kept = [c for c in frame.columns if c not in VOLATILE | {"app_id", "run_id", *drop}]
    return sorted(tuple(map(str, row)) for row in frame.select(kept).collect())


def test_a_range_older_than_the_topic_holds_is_refused_before_spark_starts(broker, tmp_path: Path):
    settings = kafka_settings(tmp_path / "home", broker, "retention.")
    writer = KafkaLogWriter(settings, PIPELINE.topic)
    hour = datetime(2026, 1, 5, 8)
    # One bridge, so one partition: its first record after the cut is at 09:00.
    lines = [(hour + timedelta(minutes=m), f'{{"bridge_id": "bridge-00", "n": {m}}}') for m in range(0, 120, 10)]
    writer.append(lines, "two hours")
    # What retention does to a topic: its oldest records go (here the first hour's, in every partition).
    admin = AdminClient(kafka_auth.client_config(settings, kafka_auth.ADMIN))
    first_hour = _offsets_before(settings, hour + timedelta(hours=1))
    for future in admin.delete_records(first_hour).values():
        future.result(timeout=30)

    env = {
        **os.environ,
        "LAKEHOUSE_HOME": str(tmp_path / "home"),
        "LAKEHOUSE_KAFKA_BOOTSTRAP": broker,
        "LAKEHOUSE_KAFKA_TOPIC_PREFIX": "retention.",
        "LAKEHOUSE_LOG_RETENTION": RETENTION,
    }
    refused = cli(
        "backfill", "--start", "2026-01-06T08:00:00Z", "--end", "2026-01-06T09:00:00Z", "--source", "log", env=env
    )
    assert refused.returncode != 0
    assert "holds records received from 2026-01-05T09:00:00Z on" in refused.stderr
    assert "needs records received from 2026-01-05T08:00:00Z" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "home" / "warehouse").exists()  # no Spark work


def test_the_producer_refuses_records_retention_would_delete(broker, tmp_path: Path):
    """The topic the broker's start created keeps 30 days (its default): January's generated log
    would be acknowledged, then deleted. The producer reads the topic's own retention, and refuses
    even though its own setting would keep ten years."""
    env = {
        **os.environ,
        "LAKEHOUSE_HOME": str(tmp_path / "home"),
        "LAKEHOUSE_KAFKA_BOOTSTRAP": broker,
        "LAKEHOUSE_KAFKA_TOPIC_PREFIX": "too-old.",
        "LAKEHOUSE_LOG_RETENTION": RETENTION,
    }
    refused = cli("generate", "--events", "10", env=env)
    assert (
        refused.returncode != 0 and "older than the topic too-old.toll_traffic's retention (30 days)" in refused.stderr
    )
    settings = kafka_settings(tmp_path / "home", broker, "too-old.")
    assert _offsets_before(settings, datetime(2100, 1, 1)) == [
        TopicPartition("too-old.toll_traffic", partition, 0) for partition in range(3)
    ]
    produced = cli("generate", "--events", "10", "--start", "now", env=env)
    assert produced.returncode == 0, produced.stderr


def _topic_records(settings, topic: str) -> list[tuple[int, bytes | None, bytes]]:
    """Every record of the topic from its start: (partition, key, value), in each partition's order."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer

    name = settings.kafka_topic(topic)
    consumer = Consumer(
        {**kafka_auth.client_config(settings, kafka_auth.ADMIN), "group.id": "tests", "enable.auto.commit": False}
    )
    try:
        partitions = sorted(consumer.list_topics(name, timeout=30).topics[name].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(name, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in partitions])
        records = []
        while len(records) < sum(ends.values()):
            message = consumer.poll(30)
            assert message is not None and message.error() is None, message and message.error()
            records.append((message.partition(), message.key(), message.value()))
        return sorted(records, key=lambda record: record[0])  # stable: each partition keeps its order
    finally:
        consumer.close()


def test_ingest_produces_each_line_once_keyed_by_its_event_id(broker, tmp_path: Path):
    """`lakehouse ingest` on a Kafka log: every line, bad ones too, is one record, as written; an
    event's copies share its key, so one partition holds them in the order they came."""
    event = {"bridge_id": "bridge-01", "booth_id": "b1", "vehicle_type": "car", "axles": 2, "toll_amount": "6.00"}
    times = {"event_time": "2026-11-28T10:00:00Z", "sent_at": "2026-11-28T10:00:01Z"}
    first, second = ({**event, **times, "event_id": name} for name in ("id-first", "id-second"))
    lines = [json.dumps(first), json.dumps(second), "not json at all", json.dumps({**first, "axles": 3}), "[1, 2]"]
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), **kafka_env(broker, "ingest.")}
    ingested = subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", "ingest", "--pipeline", PIPELINE.name, "-"],
        input="\n".join(lines) + "\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ingested.returncode == 0, ingested.stderr
    assert "ingested 5 lines" in ingested.stdout
    records = _topic_records(kafka_settings(tmp_path / "home", broker, "ingest."), PIPELINE.topic)
    assert sorted(value.decode() for _, _, value in records) == sorted(lines)
    keys = {value.decode(): key for _, key, value in records}
    assert [keys[line] for line in lines] == [b"id-first", b"id-second", None, b"id-first", None]
    copies = [(partition, value.decode()) for partition, key, value in records if key == b"id-first"]
    assert len({partition for partition, _ in copies}) == 1 and [line for _, line in copies] == [lines[0], lines[3]]


def _ingest(env: dict, pipeline: str, **variables: str) -> subprocess.CompletedProcess:
    """`lakehouse ingest` of one event line into a pipeline's log, with these variables too."""
    line = json.dumps({"event_id": "acl-1", "bridge_id": "bridge-01", "event_time": "2026-11-28T10:00:00Z"})
    return subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", "ingest", "--pipeline", pipeline, "-"],
        input=line + "\n",
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _records_held(settings, *topics: str) -> dict[str, int]:
    """How many records each topic holds (read as the admin)."""
    return {topic: sum(_offsets_at_end(settings, topic)) for topic in topics}


def _offsets_at_end(settings, topic: str) -> list[int]:
    return [t.offset for t in _offsets_before(settings, datetime(2100, 1, 1), topic)]


def _sent_anyway(settings, user: str, topic: str) -> list[str]:
    """The errors the broker answers a plain producer (as ``user``) that sends a record to ``topic``."""
    sending = Producer(kafka_auth.client_config(settings.replace(kafka_user=user), user))
    answers = []
    try:
        sending.produce(topic, b"sent anyway", on_delivery=lambda error, _: answers.append(error and error.name()))
    except KafkaException as error:  # the producer already knows the topic's metadata
        return [error.args[0].name()]
    assert sending.flush(30) == 0
    return answers


def test_a_pipelines_producer_writes_its_own_topic_alone_and_the_reader_writes_none(broker, tmp_path: Path):
    """The ACLs of `lakehouse kafka start`: refused before a record is sent, in one line; and refused
    by the broker itself to a client that sends anyway."""
    settings = kafka_settings(tmp_path / "home", broker, "acl.")
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), **kafka_env(broker, "acl.")}
    tolls = kafka_auth.producer("toll_traffic")
    other = _ingest(env, "team_scores", LAKEHOUSE_KAFKA_USER=tolls)
    assert (other.returncode, other.stderr) == (
        2,
        f"lakehouse: error: Kafka at {broker} does not let user {tolls} write topic acl.team_scores\n",
    )
    reader = _ingest(env, "toll_traffic", LAKEHOUSE_KAFKA_USER=kafka_auth.READER)
    assert (reader.returncode, reader.stderr) == (
        2,
        f"lakehouse: error: Kafka at {broker} does not let user {kafka_auth.READER} write topic acl.toll_traffic\n",
    )
    own = _ingest(env, "toll_traffic", LAKEHOUSE_KAFKA_USER=tolls)
    assert own.returncode == 0 and "ingested 1 lines" in own.stdout, own.stderr
    assert _sent_anyway(settings, tolls, "acl.team_scores") == ["TOPIC_AUTHORIZATION_FAILED"]
    assert _sent_anyway(settings, kafka_auth.READER, "acl.toll_traffic") == ["TOPIC_AUTHORIZATION_FAILED"]
    assert _records_held(settings, "acl.team_scores", "acl.toll_traffic") == {
        "acl.team_scores": 0,
        "acl.toll_traffic": 1,
    }


def test_a_client_without_credentials_or_with_a_wrong_password_is_refused_in_one_line(broker, tmp_path: Path):
    settings = kafka_settings(tmp_path / "home", broker, "acl.")
    held = _records_held(settings, "acl.toll_traffic")
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), **kafka_env(broker, "acl.")}
    anonymous = _ingest(env, "toll_traffic", LAKEHOUSE_KAFKA_CREDENTIALS=str(tmp_path / "no-such-file.json"))
    assert anonymous.returncode == 2 and anonymous.stderr.count("\n") == 1, anonymous.stderr
    assert anonymous.stderr.startswith(
        f"lakehouse: error: Kafka at {broker} closed the connection of a client without credentials"
    )
    tolls = kafka_auth.producer("toll_traffic")
    wrong = {"LAKEHOUSE_KAFKA_PASSWORD": "not-the-password"}
    refused = f"lakehouse: error: Kafka at {broker} refused user {{}}: authentication failed"
    refused += " (a wrong password, or no such user)\n"
    producing = _ingest(env, "toll_traffic", LAKEHOUSE_KAFKA_USER=tolls, **wrong)
    assert (producing.returncode, producing.stderr) == (2, refused.format(tolls))
    reading = cli("archive", env={**env, "LAKEHOUSE_KAFKA_USER": kafka_auth.READER, **wrong})
    assert (reading.returncode, reading.stderr) == (2, refused.format(kafka_auth.READER))
    assert _records_held(settings, "acl.toll_traffic") == held


def test_clients_reach_the_broker_over_tls_only_and_trust_its_authority_alone(broker, tmp_path: Path):
    """The client listener is TLS: a client that trusts other authorities (the system's) stops in one
    line naming LAKEHOUSE_KAFKA_CA, and one that logs in in clear, with the right password, gets no
    answer at all."""
    settings = kafka_settings(tmp_path / "home", broker, "acl.")
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), **kafka_env(broker, "acl.")}
    held = _records_held(settings, "acl.toll_traffic")
    elsewhere = _ingest(env, "toll_traffic", LAKEHOUSE_KAFKA_CA="/etc/ssl/certs/ca-certificates.crt")
    assert elsewhere.returncode == 2 and elsewhere.stderr.count("\n") == 1, elsewhere.stderr
    assert elsewhere.stderr.startswith(f"lakehouse: error: Kafka at {broker}: TLS failed (")
    assert "signed by the authority in /etc/ssl/certs/ca-certificates.crt (LAKEHOUSE_KAFKA_CA)" in elsewhere.stderr
    in_clear = {**kafka_auth.client_config(settings, kafka_auth.ADMIN), "security.protocol": "SASL_PLAINTEXT"}
    del in_clear["ssl.ca.location"]
    with pytest.raises(KafkaException):
        AdminClient(in_clear).list_topics(timeout=10)
    assert _records_held(settings, "acl.toll_traffic") == held


def _offsets_before(settings, moment: datetime, topic: str = "") -> list:
    """Each partition's first offset received at or after ``moment`` (its end when none is), in the
    pipeline's topic or ``topic``."""
    from confluent_kafka import Consumer

    topic = topic or settings.kafka_topic(PIPELINE.topic)
    consumer = Consumer({**kafka_auth.client_config(settings, kafka_auth.ADMIN), "group.id": "tests"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        stamp = int(moment.replace(tzinfo=UTC).timestamp() * 1000)
        found = consumer.offsets_for_times([TopicPartition(topic, p, stamp) for p in partitions], timeout=30)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        return sorted(
            (TopicPartition(topic, t.partition, t.offset if t.offset >= 0 else ends[t.partition]) for t in found),
            key=lambda t: t.partition,
        )
    finally:
        consumer.close()


# About 67 minutes of events: two ingest hours.
HOURS = GeneratorConfig(
    events=400,
    seed=13,
    rate=0.1,
    late_fraction=0.05,
    late_delay="3m",
    duplicate_fraction=0.03,
    malformed_fraction=0.03,
    events_per_file=100,
)


def test_the_archive_copies_closed_hours_once_and_backfills_older_than_retention_read_it(
    spark, broker, object_store_env, tmp_path
):
    """The archive in object storage (the log's files through boto3, read back by Spark's s3a)."""
    archive_env = {**in_object_store("archive", "log"), **object_store_env}
    settings = kafka_settings(tmp_path / "home", broker, "archive.", **archive_env)
    written = generate(settings, HOURS, sink=LogSink.KAFKA)
    start, end = datetime(2026, 1, 5, 8), datetime(2026, 1, 5, 10)
    BatchLayer(spark, settings, PIPELINE).backfill(start, end, source="log", chunk="1h")
    from_kafka = rows(spark, settings, TABLES.batch)

    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_KAFKA_BOOTSTRAP": broker, **archive_env}
    archived = cli(
        "archive", env={**env, "LAKEHOUSE_KAFKA_TOPIC_PREFIX": "archive.", "LAKEHOUSE_LOG_RETENTION": RETENTION}
    )
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout)["hours"] == ["2026-01-05T08", "2026-01-05T09"]
    assert json.loads(archived.stdout)["records"] == written.records
    archive, log = Archive(settings, PIPELINE.topic), settings.pipeline_log_uri(PIPELINE.topic)
    files = object_names(settings, log, ".jsonl")
    assert 2 <= len(files) <= 2 * 3  # an hour's records, one file per partition
    assert archive.run().hours == []  # nothing closed since
    # A crash after the files, before the state moved on: the run again writes no file twice.
    [state] = object_names(settings, log, "_archive.json")
    archive.writer.files.s3.delete_object(Bucket="archive", Key=state)
    assert (archive.run().files, object_names(settings, log, ".jsonl")) == (0, files)

    # Retention deletes every record received before 09:00; the archive still has them.
    admin = AdminClient(kafka_auth.client_config(settings, kafka_auth.ADMIN))
    for future in admin.delete_records(_offsets_before(settings, datetime(2026, 1, 5, 9))).values():
        future.result(timeout=30)
    assert check_covered(settings, PIPELINE.topic, earliest_arrival_for(start)) == archive.state()[1]
    again = BatchLayer(spark, settings, PIPELINE).backfill(start, end, source="log", chunk="1h", reprocess="skip")
    # The same events from the archive: the same input fingerprints, so both chunks are skipped...
    assert (again.chunks_skipped, rows(spark, settings, TABLES.batch)) == (2, from_kafka)
    # ...and recomputed from it, the same rows.
    BatchLayer(spark, settings, PIPELINE).backfill(start, end, source="log", chunk="1h")
    assert rows(spark, settings, TABLES.batch) == from_kafka
