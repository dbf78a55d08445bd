"""The commands that run without a JVM end with the exit code the README documents, every time: a
loop of runs through the CLI and the interpreter's exit (tests/exit_loop.py) per command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import pytest

from lakehouse.dataflow.pipelines import get_dimension, get_pipeline
from lakehouse.settings import Settings
from lakehouse.storage.catalog import STREAM_PROGRESS, all_tables, ensure_table, pipeline_tables
from lakehouse.storage.dimensions import apply_change_file
from lakehouse.storage.ops_tables import append_rows
from tests.conftest import make_settings

PROJECT = Path(__file__).resolve().parents[1]
# The runs of each loop. Before the file system of ops_tables._dataset, these loops aborted at exit
# in 25 runs of 200 (health), 9 (dim apply's refusal), 3 (status) and 1 (dim apply's success); sql,
# which reads no table without a JVM, in none. 50 runs catch the first two rates 999 and 9 times in
# 10, for a quarter of the CPU (the four loops were 160 s of the unit tier); `make chaos` runs 1,000.
RUNS = int(os.environ.get("LAKEHOUSE_EXIT_RUNS", "50"))
# sql without a JVM reads no table, so the abort above cannot happen in it: a tenth of the runs
# checks its exit code and message as well.
SQL_RUNS = RUNS // 10
# The runs of each loop on tables in S3, where a run costs several requests to the store. Before
# ops_tables._dataset read S3 tables through Arrow's S3 client, these loops aborted in 14 runs of
# 200 (dim apply's refusal), 3 (status) and none of health's or dim apply's success.
S3_RUNS = int(os.environ.get("LAKEHOUSE_EXIT_S3_RUNS", "15"))
SKEWED = get_pipeline("toll_traffic_corrected_clocks")
FERRY = {"bridge_id": "bridge-01", "name": "Ferry", "region": "south", "zone": "s1"}
FIRST = datetime(2026, 1, 5, tzinfo=UTC)


def change_log(path: Path, valid_from: datetime, **attributes: str) -> Path:
    change = {**FERRY, **attributes, "valid_from": valid_from.strftime("%Y-%m-%dT%H:%M:%SZ")}
    path.write_text(json.dumps(change) + "\n")
    return path


def drained_skewed_stream(settings: Settings, now: datetime) -> None:
    """What a drained stream of booths with skewed clocks leaves for ``status`` and ``health`` to
    read, written through delta-rs: every table of the pipeline, ten micro-batches that started in
    the last minute with a steady lag, and bronze events of four booths whose clocks are off."""
    for table in all_tables(SKEWED):
        ensure_table(table, settings)
    batches = [
        {
            "pipeline": SKEWED.name,
            "app_id": "speed:test",
            "batch_id": batch,
            "started_at": now - timedelta(seconds=5 * (10 - batch)),
            "max_event_time": now - timedelta(seconds=5 * (10 - batch) + 30),
            "input_rows": 20,
            "on_time": 20,
        }
        for batch in range(10)
    ]
    append_rows(STREAM_PROGRESS.uri(settings), STREAM_PROGRESS.arrow_schema, batches, settings)
    bronze = pipeline_tables(SKEWED).bronze
    events = [
        {
            "event_id": f"e-{booth}-{n}",
            "booth_id": f"booth-{booth}",
            "received_at": now - timedelta(seconds=n),
            "sent_at": now - timedelta(seconds=n + 60 * booth),
            "event_date": now.date(),
            "fate": "on_time",
        }
        for booth in range(4)
        for n in range(50)
    ]
    append_rows(bronze.uri(settings), bronze.arrow_schema, events, settings)


class Store(NamedTuple):
    """Where a loop's tables are: the variables that point the runs there, and how many runs."""

    env: dict[str, str]
    runs: int


LOCAL = Store({}, RUNS)


def run_loop(
    folder: Path, settings: Settings, name: str, argv: list[str], store: Store = LOCAL, launcher: Sequence[str] = ()
) -> dict:
    """How the ``store.runs`` runs of ``lakehouse <argv>`` ended (tests/exit_loop.py): ``{"exit 0": 200}``.

    Args:
        folder: where the loop's spec goes, and each run's stdout and stderr (``<name>.out``, ``.err``).
        settings: the home the runs use.
        name: the loop's name.
        argv: the command's arguments; ``{i}`` in one is the run's number.
        store: the variables set for the runs, and how many.
        launcher: what runs the loop, e.g. ``lakehouse hosts run HOST --`` (none: this machine).
    """
    spec = folder / f"{name}.json"
    spec.write_text(json.dumps({"name": name, "argv": argv, "env": store.env}))
    finished = subprocess.run(
        [*launcher, sys.executable, "-m", "tests.exit_loop", str(spec), str(store.runs)],
        env={**os.environ, "LAKEHOUSE_HOME": settings.home, "PYTHONPATH": str(PROJECT)},
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=10 * store.runs,
        check=True,
    )
    return json.loads(finished.stdout)


def lines(folder: Path, name: str, suffix: str) -> list[str]:
    return (folder / f"{name}.{suffix}").read_text().splitlines()


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.services)])
def store(request, tmp_path) -> Store:
    """Where the tables are: the home's own folder, or a warehouse on the project's S3 server (a
    folder of its bucket for this test alone)."""
    if request.param == "local":
        return LOCAL
    warehouse = f"s3a://exit-codes/{tmp_path.name}"
    return Store({**request.getfixturevalue("object_store_env"), "LAKEHOUSE_WAREHOUSE_URI": warehouse}, S3_RUNS)


@pytest.fixture
def drained(tmp_path, store) -> Settings:
    settings = make_settings(tmp_path / "home", **store.env)
    drained_skewed_stream(settings, datetime.now(UTC))
    return settings


def test_health_of_a_drained_stream_exits_0_every_time(tmp_path, drained, store):
    assert run_loop(tmp_path, drained, "health", ["health", "--pipeline", SKEWED.name], store) == {"exit 0": store.runs}
    healthy = lines(tmp_path, "health", "out")
    assert len(healthy) == store.runs and all(f"{SKEWED.name} is healthy" in line for line in healthy)
    assert lines(tmp_path, "health", "err") == []


def test_status_of_a_drained_stream_exits_0_every_time(tmp_path, drained, store):
    assert run_loop(tmp_path, drained, "status", ["status", "--pipeline", SKEWED.name], store) == {"exit 0": store.runs}
    assert sum(line.strip().startswith("booth-3") for line in lines(tmp_path, "status", "out")) == store.runs
    assert lines(tmp_path, "status", "err") == []


@pytest.fixture
def bridges(tmp_path, store) -> Settings:
    """dim.bridges with one version of bridge-01, from 2026-01-05."""
    settings = make_settings(tmp_path / "home", **store.env)
    apply_change_file(settings, get_dimension("bridges"), change_log(tmp_path / "first.jsonl", FIRST))
    return settings


def test_dim_apply_refusing_to_rewrite_a_version_exits_2_every_time(tmp_path, bridges, store):
    rewrite = change_log(tmp_path / "rewrite.jsonl", FIRST, region="north", zone="n1")
    assert run_loop(tmp_path, bridges, "refused", ["dim", "apply", str(rewrite)], store) == {"exit 2": store.runs}
    refusal = (
        "lakehouse: error: dim.bridges: bridge-01 already has a version from 2026-01-05T00:00:00Z with other "
        "region, zone; versions are never rewritten: send a change with a later valid_from"
    )
    assert lines(tmp_path, "refused", "err") == [refusal] * store.runs
    assert lines(tmp_path, "refused", "out") == []


def test_dim_apply_applying_a_change_exits_0_every_time(tmp_path, bridges, store):
    for run in range(store.runs):
        change_log(tmp_path / f"move-{run}.jsonl", FIRST + timedelta(hours=run + 1), zone=f"s{run}")
    argv = ["dim", "apply", str(tmp_path / "move-{i}.jsonl")]
    assert run_loop(tmp_path, bridges, "applied", argv, store) == {"exit 0": store.runs}
    assert lines(tmp_path, "applied", "out") == [
        f"dim.bridges: 1 change(s) applied, 0 already present; version {run + 1}" for run in range(store.runs)
    ]
    assert lines(tmp_path, "applied", "err") == []


def test_sql_without_java_exits_2_every_time(tmp_path):
    """Without a JVM, ``sql`` can only be run to the errors that come before Spark starts: it reads
    no table then, so this loop checks its exit path and exit code, not the reads above."""
    settings = make_settings(tmp_path / "home")
    env = {"PATH": "/nonexistent", "JAVA_HOME": ""}
    assert run_loop(tmp_path, settings, "sql", ["sql", "SELECT 1"], Store(env, SQL_RUNS)) == {"exit 2": SQL_RUNS}
    no_java = "Java 17 is required to run Spark but no `java` was found (install a JDK 17 or set JAVA_HOME)"
    assert lines(tmp_path, "sql", "err") == [f"lakehouse: error: {no_java}"] * SQL_RUNS
