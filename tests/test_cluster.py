"""Jobs on a real Spark standalone cluster (a master and two workers, started by the project's own
`lakehouse cluster`): the stream and a log backfill give the tables of a local[2] run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.speed import run_speed_layer
from lakehouse.storage.catalog import pipeline_tables
from tests.conftest import make_settings
from tests.test_kafka import rows

pytestmark = [pytest.mark.services, pytest.mark.slow]

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
CONFIG = GeneratorConfig(
    events=1200, seed=17, rate=5.0, late_fraction=0.05, duplicate_fraction=0.03, malformed_fraction=0.03
)


def cli(*arguments: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", *arguments], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    home = tmp_path_factory.mktemp("cluster-home")
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_CLUSTER_PORT": "0"}
    started = cli("cluster", "start", env=env, timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    report = json.loads(started.stdout)
    assert report["workers"] == 2
    yield report
    stopped = cli("cluster", "stop", env=env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert cli("cluster", "status", env=env).returncode == 1


def test_the_stream_and_a_log_backfill_on_the_cluster_give_the_local_tables(spark, cluster, tmp_path: Path):
    local = make_settings(tmp_path / "local")
    generate(local, CONFIG)
    start, end = datetime(2026, 1, 5, 8), datetime(2026, 1, 5, 9)
    run_speed_layer(spark, local, PIPELINE, available_now=True)
    BatchLayer(spark, local, PIPELINE).backfill(start, end, source="log")

    on_cluster = make_settings(tmp_path / "cluster", LAKEHOUSE_LOG_URI=local.log_uri)
    env = {
        **os.environ,
        "LAKEHOUSE_HOME": str(tmp_path / "cluster"),
        "LAKEHOUSE_LOG_URI": local.log_uri,
        "LAKEHOUSE_SPARK_MASTER": cluster["master"],
        "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
    }
    backfill = ("backfill", "--start", "2026-01-05T08:00Z", "--end", "2026-01-05T09:00Z", "--source", "log")
    for command in (("stream", "--available-now"), backfill):
        done = cli(*command, env=env)
        assert done.returncode == 0, done.stderr[-3000:]

    for table in (TABLES.bronze, TABLES.quarantine, TABLES.speed, TABLES.batch):
        assert rows(spark, on_cluster, table) == rows(spark, local, table), table.qualified_name
    # Both jobs ran on the cluster's executors, one per worker.
    with urllib.request.urlopen(f"{cluster['web_ui']}/json/", timeout=10) as response:
        applications = json.loads(response.read())["completedapps"]
    assert len(applications) >= 2 and all(app["cores"] == 2 for app in applications[-2:])
