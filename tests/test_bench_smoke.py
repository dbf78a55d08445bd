"""The benchmarks' smoke mode: every suite runs end to end at a tiny size, so the scripts cannot rot.

Benchmarks are not tests: the figures of a smoke run mean nothing and nothing here checks a speed.
What it proves is that every benchmark still runs against the current code and writes its results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run import SUITES

ROOT = Path(__file__).resolve().parents[1]
# The topology suite's smoke run is in tests/test_kafka.py, on that module's broker and cluster:
# one of each per test session, not a second pair started here.
SMOKED_HERE = tuple(suite for suite in SUITES if suite != "topology")


@pytest.mark.bench
@pytest.mark.slow
# A few minutes on a quiet 2-core machine; over 10 with four other Spark jobs sharing the cores.
@pytest.mark.timeout(1800)
def test_every_benchmark_runs_and_writes_its_results(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--only", ",".join(SMOKED_HERE), "--results", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1750,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    report = json.loads((tmp_path / "latest-smoke.json").read_text())
    assert set(report["results"]) == set(SMOKED_HERE)
    figures = {row["figure"] for row in report["summary"]}
    assert "speed layer sustainable rate vs bare stream" in figures
    assert "backfill from log vs DuckDB" in figures
    assert "Airflow backfill of 1 hourly chunks vs one job (orchestration)" in figures
    assert "SQL p50, warm service vs a lakehouse sql process per query" in figures
    jobs = report["results"]["backfill"]["jobs"]
    # Same data, same aggregation: the backfill jobs count the same vehicles, give or take the few
    # malformed records a hand-written parser reads more leniently than the pipeline's validation.
    malformed = sum(count for kind, count in report["data"].items() if kind.startswith("malformed:"))
    vehicles = [job["vehicles"] for job in jobs.values()]
    assert min(vehicles) > 0 and max(vehicles) - min(vehicles) <= malformed, jobs
    # The stream changed windows among the held ones, and its MERGE rewrote only their day.
    held = report["results"]["speed_growth"]
    assert 0 < held["2d"]["rows_copied_by_last_merge"] <= held["1d"]["rows_held"] < held["2d"]["rows_held"]
    freshness = report["results"]["freshness"]["jobs"]["lakehouse"]
    assert freshness["probes_seen"] == freshness["probes"] > 0
    assert "| figure |" in run.stdout


def test_the_summary_table_shows_only_the_backfill_figures_whose_two_jobs_ran():
    from bench.run import headline, table

    def job(seconds):
        return {"seconds": {"median": seconds, "min": seconds, "max": seconds, "runs": 1}}

    # BENCH_BACKFILL_JOBS=lakehouse_bronze,bare_bronze,duckdb_log: no log backfill was run.
    results = {"backfill": {"jobs": {"lakehouse_bronze": job(6.0), "bare_bronze": job(4.0), "duckdb_log": job(2.0)}}}

    rows = headline(results)

    assert [(row["figure"], row["ratio"]) for row in rows] == [
        ("backfill from bronze vs bare Spark", 1.5),
        ("backfill from bronze vs DuckDB", 3.0),
    ]
    assert "log" not in table(rows)
