"""Where the platform runs, side by side in one run on the same data: the speed layer draining the log
from a Kafka topic against from files, and a log backfill on a two-worker standalone cluster against
local[2]. Whole CLI processes, JVM start included; the broker and the cluster start once, untimed.
"""

from __future__ import annotations

import contextlib
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
from lakehouse.settings import PROJECT_ROOT
from lakehouse.storage import kafka_broker, spark_cluster
from lakehouse.vocabulary import LogSink

# The data set is received in January 2026: the topic keeps it.
TOPIC_RETENTION = "3650d"


def _timed_cli(arguments: list[str], env: dict) -> float:
    command = [str(Path(sys.executable).with_name("lakehouse")), *arguments]
    began = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - began


def _jobs(data: DataSet, bootstrap: str, master: str) -> dict[str, tuple[list[str], dict]]:
    """Each job's command and settings; every run gets a fresh home (the log is shared)."""
    log = {"LAKEHOUSE_LOG_URI": data.settings().log_uri}
    kafka = {"LAKEHOUSE_KAFKA_BOOTSTRAP": bootstrap, "LAKEHOUSE_LOG_RETENTION": TOPIC_RETENTION}
    window = ["--start", f"{data.start.isoformat()}Z", "--end", f"{(data.start + DAY).isoformat()}Z"]
    backfill = ["backfill", *window, "--source", "log", "--chunk", "1d"]
    return {
        "stream_files": (["stream", "--available-now"], log),
        "stream_kafka": (["stream", "--available-now"], kafka),
        "backfill_local": (backfill, log),
        "backfill_cluster": (backfill, {**log, "LAKEHOUSE_SPARK_MASTER": master}),
    }


def topology(data: DataSet, runs: int, running: tuple[str, str] | None = None) -> dict:
    """The four jobs, ``runs`` times each.

    Args:
        data: the data set (its log feeds the file side; the Kafka side gets the same events).
        runs: runs per job.
        running: the bootstrap of a broker and the master of a cluster already up, used instead of
            starting both (the tests share theirs); None starts and stops them here.
    """
    work = data.root / "topology"
    shutil.rmtree(work, ignore_errors=True)
    with _broker_and_cluster(work, running) as (bootstrap, master):
        producer = settings_for(
            work / "producer", LAKEHOUSE_KAFKA_BOOTSTRAP=bootstrap, LAKEHOUSE_LOG_RETENTION=TOPIC_RETENTION
        )
        generate(producer, data.generator_config, PIPELINE, sink=LogSink.KAFKA)
        jobs = _jobs(data, bootstrap, master)
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
def _broker_and_cluster(work: Path, running: tuple[str, str] | None) -> Iterator[tuple[str, str]]:
    """The broker's bootstrap and the cluster's master: the ones given, or started here and stopped after."""
    if running:
        yield running
        return
    services = settings_for(work / "services", LAKEHOUSE_KAFKA_PORT="0", LAKEHOUSE_CLUSTER_PORT="0")
    bootstrap = kafka_broker.start(services)["bootstrap"]
    try:
        yield bootstrap, spark_cluster.start(services)["master"]
    finally:
        spark_cluster.stop(services)
        kafka_broker.stop(services)
