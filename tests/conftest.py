"""Shared fixtures: one real SparkSession with Delta for the whole run (JVM start-up costs seconds),
and a fresh lakehouse home per test so tests never see each other's tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lakehouse.settings import Settings
from lakehouse.storage.spark import QUICK_START_JAVA_OPTIONS

RESOURCES = Path(__file__).parent / "resources"

# The CLI, spark-submit and Airflow task processes the tests start are short jobs on small data,
# where the JVM's optimising compiler (C2) costs more CPU than it saves: with C1 alone a stream drain
# of 2,400 events took 77 CPU-seconds instead of 102, a backfill of it 14 instead of 28
# (docs/operations.md, "Short jobs"). Subprocesses inherit this environment. The
# long-lived JVMs (this process's session, the DAG harness) keep C2: with C1 their tests took 1.3-1.8x
# as long in CI.
os.environ.setdefault("LAKEHOUSE_DRIVER_JAVA_OPTIONS", QUICK_START_JAVA_OPTIONS)
# The long-lived JVMs collect garbage with the serial collector too: on two cores shared by three test
# workers, G1's concurrent threads cost CPU the tests need. Measured alternating, two runs each of
# tests/test_end_to_end.py and tests/test_backfill_reprocess.py: 238 and 264 CPU-seconds with G1,
# 221 and 240 with it (wall 160 and 162 s against 150 and 155 s).
LONG_LIVED_JAVA_OPTIONS = "-XX:+UseSerialGC"


def make_settings(home: Path, **env: str) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(home), "LAKEHOUSE_SHUFFLE_PARTITIONS": "2", **env})


# The shared session runs thousands of small queries, nearly all different: compiling each to Java
# (whole-stage code generation, then Janino) costs more CPU than interpreting its few rows.
# Measured on tests/test_backfill_reprocess.py: 211 CPU-seconds with Spark's defaults, 175 without
# code generation. The subprocess tests (CLI, spark-submit, Airflow, the demo) keep the defaults.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


@pytest.fixture(scope="session")
def object_store_env(tmp_path_factory):
    """One S3 server per test process, started as `lakehouse s3 start` does (S3Proxy starts in about
    a second), with the DynamoDB server of Delta's DynamoDB log store (about a second more):
    the variables that point a job at them. The shared session speaks
    s3a:// to them too."""
    from tests.services import object_store_services

    with object_store_services(tmp_path_factory.mktemp("object-store")) as env:
        yield env


@pytest.fixture(scope="session")
def spark(tmp_path_factory, object_store_env):
    from lakehouse.storage.spark import build_spark_session

    home = tmp_path_factory.mktemp("session-home")
    settings = make_settings(home, LAKEHOUSE_DRIVER_JAVA_OPTIONS=LONG_LIVED_JAVA_OPTIONS, **object_store_env)
    session = build_spark_session(settings, "tests")
    for key, value in INTERPRETED.items():
        session.conf.set(key, value)
    yield session
    session.stop()


@pytest.fixture
def settings(tmp_path) -> Settings:
    return make_settings(tmp_path / "home")


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    """Environment for running the `lakehouse` CLI as a subprocess against this test's home."""
    return {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_SHUFFLE_PARTITIONS": "2"}


TIER_MARKERS = ("spark", "slow", "airflow", "services")


def pytest_collection_modifyitems(items):
    """Give each test its tier: ``spark`` when it uses the shared session, ``unit`` when it needs no
    JVM and no service at all (the tier that runs in parallel, ``make test-unit``). Then put the
    longest files first (LONGEST_FILES, then the benchmarks' smoke run, then the other files holding
    ``slow`` tests): xdist hands out whole files in this order (``--no-loadscope-reorder`` in
    ``make test-rest``; by default it orders files by their number of tests, which sent the one-test
    smoke run of ten minutes last), and a long file started last leaves cores idle while it ends."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
        if not any(item.get_closest_marker(name) for name in TIER_MARKERS):
            item.add_marker(pytest.mark.unit)
    bench_files = {item.path for item in items if item.get_closest_marker("bench")}
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    # Stable: the file order is kept within each group.
    items.sort(
        key=lambda item: (
            LONGEST_FILES.index(item.path.name) if item.path.name in LONGEST_FILES else len(LONGEST_FILES),
            item.path not in bench_files,
            item.path not in slow_files,
        )
    )


# The files that took longest in CI (summed test time with --durations=0 in a clean clone on
# 2026-12-03: test_dags 917 s, test_service 804 s ... test_crash_safety 71 s, of 6,474 s), most first,
# but the chaos loop (one test, in make test-long) first of all, then the loop across hosts (one test
# of 745 s): a long test handed out late would leave the other workers idle while it ends.
LONGEST_FILES = (
    "test_chaos.py",
    "test_across_hosts.py",
    "test_dags.py",
    "test_service.py",
    "test_airflow_e2e.py",
    "test_audit.py",
    "test_readme_commands.py",
    "test_kafka.py",
    "test_event_time.py",
    "test_event_time_properties.py",
    "test_storage_faults.py",
    "test_s3_commits.py",
    "test_writers.py",
    "test_own_pipeline.py",
    "test_backpressure.py",
    "test_cli.py",
    "test_exit_codes.py",
    "test_backfill_reprocess.py",
    "test_window_join.py",
    "test_dedupe.py",
    "test_crash_safety.py",
)
