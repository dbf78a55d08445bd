"""Where the platform runs, side by side in one run on the same data: the speed layer draining the log
from a Kafka topic against from files, a log backfill on a two-worker standalone cluster against
local[2], and a backfill from the log's files in object storage (as one older than Kafka's
retention reads the archive) against the local log. Whole CLI processes, JVM start included; the
broker, the cluster and the S3 server start once, untimed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.data import DAY, PIPELINE, DataSet, settings_for
from bench.measure import summary
from lakehouse.generator import generate
from lakehouse.services import cluster as spark_cluster
from lakehouse.services import kafka as kafka_broker
from lakehouse.services import s3 as s3_server
from lakehouse.settings import PROJECT_ROOT
from lakehouse.storage import object_store
from lakehouse.vocabulary import LogSink

# The data set is received in January 2026: the topic keeps it.
TOPIC_RETENTION = "3650d"
BUCKET = "bench"


@dataclasses.dataclass(frozen=True)
class Services:
    """Where the jobs find the broker, the cluster and the S3 server."""

    bootstrap: str
    master: str
    s3: dict[str, str]  # LAKEHOUSE_S3_ENDPOINT and the keys
    kafka_credentials: str = ""  # the broker's principals' passwords (LAKEHOUSE_KAFKA_CREDENTIALS)

    def kafka(self) -> dict[str, str]:
        """The variables of a Kafka client of the broker: its address, its credentials, the topic's retention."""
        return {
            "LAKEHOUSE_KAFKA_BOOTSTRAP": self.bootstrap,
            "LAKEHOUSE_KAFKA_CREDENTIALS": self.kafka_credentials,
            "LAKEHOUSE_LOG_RETENTION": TOPIC_RETENTION,
        }


def _timed_cli(arguments: list[str], env: dict) -> float:
    command = [str(Path(sys.executable).with_name("lakehouse")), *arguments]
    began = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - began


def _jobs(data: DataSet, services: Services) -> dict[str, tuple[list[str], dict]]:
    """Each job's command and settings; every run gets a fresh home (the log is shared)."""
    log = {"LAKEHOUSE_LOG_URI": data.settings().log_uri}
    kafka = services.kafka()
    on_s3 = {"LAKEHOUSE_LOG_URI": f"s3a://{BUCKET}/log", **services.s3}
    window = ["--start", f"{data.start.isoformat()}Z", "--end", f"{(data.start + DAY).isoformat()}Z"]
    backfill = ["backfill", *window, "--source", "log", "--chunk", "1d"]
    return {
        "stream_files": (["stream", "--available-now"], log),
        "stream_kafka": (["stream", "--available-now"], kafka),
        "backfill_local": (backfill, log),
        "backfill_cluster": (backfill, {**log, "LAKEHOUSE_SPARK_MASTER": services.master}),
        "backfill_s3": (backfill, on_s3),
    }


def _upload_log(data: DataSet, work: Path, services: Services) -> None:
    """The data set's log files into the bucket, under the same names (untimed)."""
    settings = settings_for(work / "uploader", LAKEHOUSE_LOG_URI=f"s3a://{BUCKET}/log", **services.s3)
    s3 = object_store.client(settings)
    object_store.ensure_bucket(s3, BUCKET)
    log = data.home / "log"
    for path in data.log_files():
        s3.put_object(Bucket=BUCKET, Key=f"log/{path.relative_to(log)}", Body=path.read_bytes())


def topology(data: DataSet, runs: int, running: Services | None = None) -> dict:
    """The five jobs, ``runs`` times each.

    Args:
        data: the data set (its log feeds the file side; the Kafka side gets the same events).
        runs: runs per job.
        running: a broker, a cluster and an S3 server already up, used instead of starting them
            (the tests share theirs); None starts and stops them here.
    """
    work = data.root / "topology"
    shutil.rmtree(work, ignore_errors=True)
    with _services(work, running) as services:
        producer = settings_for(work / "producer", **services.kafka())
        generate(producer, data.generator_config, PIPELINE, sink=LogSink.KAFKA)
        _upload_log(data, work, services)
        jobs = _jobs(data, services)
        seconds: dict[str, list[float]] = {name: [] for name in jobs}
        for run in range(runs):
            for name, (arguments, extra) in jobs.items():
                env = {**os.environ, "LAKEHOUSE_HOME": str(work / f"{name}-{run}"), **extra}
                env["LAKEHOUSE_DRIVER_JAVA_OPTIONS"] = producer.driver_java_options
                seconds[name].append(_timed_cli(arguments, env))
    return {
        "events": data.events,
        "workers": spark_cluster.WORKERS,
        "jobs": {name: {"seconds": summary(values)} for name, values in seconds.items()},
    }


@contextlib.contextmanager
def _services(work: Path, running: Services | None) -> Iterator[Services]:
    """The services given, or a broker, a cluster and an S3 server started here and stopped after."""
    if running:
        yield running
        return
    settings = settings_for(
        work / "services",
        LAKEHOUSE_KAFKA_PORT="0",
        LAKEHOUSE_CLUSTER_PORT="0",
        LAKEHOUSE_S3_PORT="0",
        LAKEHOUSE_DYNAMODB_PORT="0",
    )
    try:
        broker = kafka_broker.start(settings)
        master = spark_cluster.start(settings)["master"]
        started = s3_server.start(settings)
        key, secret = object_store.credentials(settings)
        s3 = {
            "LAKEHOUSE_S3_ENDPOINT": started["endpoint"],
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            # Spark's commits to the s3a:// tables are conditional PUTs (the default), as delta-rs's.
        }
        yield Services(broker["bootstrap"], master, s3, broker["credentials"])
    finally:
        s3_server.stop(settings)
        spark_cluster.stop(settings)
        kafka_broker.stop(settings)
