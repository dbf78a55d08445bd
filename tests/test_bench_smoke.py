"""The benchmarks' smoke mode: suites run end to end at a tiny size, so the scripts cannot rot.

Benchmarks are not tests: the figures of a smoke run mean nothing and nothing here checks a speed.
What it proves is that the harness still runs against the current code and writes its results.

CI's 30 minutes on two cores (docs/development.md) hold the harness with one suite, the backfills;
`make bench-smoke` runs every suite (about 8 minutes on a quiet machine, 18 under CI's load). The
commands the process-level suites run are checked here without a JVM: that they are commands the
CLI and the DAG accept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The harness end to end: data set, session, a suite with its baselines, report, summary table.
SMOKED_IN_CI = ("backfill",)


@pytest.mark.bench
@pytest.mark.slow
# Under a minute on a quiet 2-core machine; about three with other Spark jobs sharing the cores.
@pytest.mark.timeout(1800)
def test_every_benchmark_runs_and_writes_its_results(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--only", ",".join(SMOKED_IN_CI), "--results", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1750,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    report = json.loads((tmp_path / "latest-smoke.json").read_text())
    assert set(report["results"]) == set(SMOKED_IN_CI)
    figures = {row["figure"] for row in report["summary"]}
    assert {"backfill from log vs DuckDB", "backfill from bronze vs bare Spark"} <= figures
    jobs = report["results"]["backfill"]["jobs"]
    # Same data, same aggregation: the backfill jobs count the same vehicles, give or take the few
    # malformed records a hand-written parser reads more leniently than the pipeline's validation.
    malformed = sum(count for kind, count in report["data"].items() if kind.startswith("malformed:"))
    vehicles = [job["vehicles"] for job in jobs.values()]
    assert min(vehicles) > 0 and max(vehicles) - min(vehicles) <= malformed, jobs
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


def test_the_speed_layer_figures_set_it_against_the_hand_written_job_with_the_bare_stream_as_limit_line():
    from bench.run import headline

    def seconds(value):
        return {"median": value, "min": value, "max": value, "runs": 1}

    def stream_job(rate, one_file, four_files):
        return {"events_per_s": seconds(rate), "drain_s": {"1": seconds(one_file), "4": seconds(four_files)}}

    results = {
        "throughput": {
            "files_per_trigger": [1, 4],
            "jobs": {
                "lakehouse": stream_job(1000.0, 30.0, 12.0),
                "hand_written": stream_job(2500.0, 12.0, 10.0),
                "bare": stream_job(9000.0, 10.0, 8.0),
            },
        },
        "recovery": {
            "backlog_minutes": 10.0,
            "jobs": {"lakehouse": {"seconds": seconds(9.0)}, "hand_written": {"seconds": seconds(6.0)}},
        },  # fmt: skip
    }

    rows = {row["figure"]: (row["ratio"], row["target"]) for row in headline(results)}

    assert rows == {
        "speed layer sustainable rate vs bare stream (the limit line)": (0.111, ""),
        "speed layer drain vs hand-written lambda job, 1 file(s) per trigger": (2.5, "<= 1.1"),
        "speed layer drain vs hand-written lambda job, 4 file(s) per trigger": (1.2, "<= 1.1"),
        "stream catch-up on 10 minutes of unread log vs hand-written lambda job": (1.5, "<= 2"),
    }


def test_the_metrics_endpoints_cost_is_set_against_the_same_speed_layer_without_it():
    from bench.run import headline
    from bench.stream import METERED

    def seconds(value):
        return {"median": value, "min": value, "max": value, "runs": 1}

    def stream_job(rate, one_file):
        return {"events_per_s": seconds(rate), "drain_s": {"1": seconds(one_file)}}

    jobs = {"lakehouse": stream_job(1000.0, 10.0), METERED: stream_job(990.0, 10.1)}
    jobs |= {"hand_written": stream_job(2000.0, 8.0), "bare": stream_job(4000.0, 5.0)}
    rows = {
        row["figure"]: (row["ratio"], row["target"])
        for row in headline({"throughput": {"files_per_trigger": [1], "jobs": jobs}})
    }

    assert rows["speed layer sustainable rate, metrics off vs scraped every second"] == (1.01, "<= 1.02")
    assert rows["speed layer drain, metrics scraped every second vs off, 1 file(s) per trigger"] == (1.01, "<= 1.02")


def test_the_process_suites_run_commands_the_cli_and_the_backfill_dag_accept():
    """The topology and orchestration suites start whole processes: their arguments still parse,
    their settings are read, and the DAG they trigger still takes their conf."""
    from bench.data import DataSet
    from bench.orchestration import _commands
    from bench.topology import Services, _jobs
    from lakehouse.cli import build_parser
    from lakehouse.ops.orchestration import backfill_param_schemas, validate_backfill_request
    from lakehouse.settings import Settings

    data = DataSet(1000)
    services = Services("127.0.0.1:9092", "spark://127.0.0.1:7077", {"LAKEHOUSE_S3_ENDPOINT": "http://127.0.0.1:9000"})
    for arguments, env in _jobs(data, services).values():
        build_parser().parse_args(arguments)
        Settings.from_env({"LAKEHOUSE_HOME": "/tmp/bench-home", **env})
    commands = _commands(data.start, data.start + timedelta(hours=2), 2)
    build_parser().parse_args(commands["one_job"][1:])
    conf, settings = json.loads(commands["airflow_hourly_chunks"][-1]), Settings.from_env({"LAKEHOUSE_HOME": "/tmp/b"})
    assert set(conf) == set(backfill_param_schemas(settings))  # the DAG's params
    validate_backfill_request(conf, settings)


def test_the_dag_parse_figure_stands_alone_against_its_goal():
    from bench.run import headline, table

    def seconds(value):
        return {"median": value, "min": value, "max": value, "runs": 1}

    jobs = {"one_job": {"seconds": seconds(10.0)}, "airflow_hourly_chunks": {"seconds": seconds(30.0)}}
    results = {"orchestration": {"hours": 1, "jobs": jobs, "dag_parse_seconds": seconds(0.25)}}

    [parse] = [row for row in headline(results) if row["figure"].startswith("parsing every DAG file")]

    assert (parse["value"], parse["baseline"], parse["ratio"], parse["target"]) == (0.25, None, None, "< 1 s")
    assert "| parsing every DAG file, as Airflow's dag-processor does | 0.25 s |  |  | < 1 s |" in table([parse])


def test_each_probe_counts_in_the_phase_it_was_written_in_and_the_analysts_figures_take_every_client():
    from bench.analysts import AnalystsPlan, _report
    from bench.run import headline

    plan = AnalystsPlan(rate=10.0, analysts=2, phase_s=10, phases=1, trigger="2s", probe_every=2.0, warm_up_s=5)
    phases = [
        {"kind": "quiet", "span": (100.0, 110.0)},
        {"kind": "analysts", "span": (110.0, 120.0), "latencies": {"jdbc": [0.2, 0.4], "connect": [0.6, 1.0]}},
    ]
    # probe-0 in the warm-up; probe-1 and -2 quiet; probe-3 with the analysts; probe-4 never seen.
    written = {"probe-0": 95.0, "probe-1": 101.0, "probe-2": 109.0, "probe-3": 111.0, "probe-4": 119.0}
    seen = {"probe-0": 99.0, "probe-1": 103.0, "probe-2": 112.0, "probe-3": 117.0}

    report = _report(plan, phases, written, seen, backfills=3)

    assert report["probes"] == {"quiet": {"written": 2, "seen": 2}, "analysts": {"written": 2, "seen": 1}}
    assert (report["freshness"]["quiet"]["n"], report["freshness"]["analysts"]["p95_s"]) == (2, 6.0)
    assert [report["analysts"][way]["n"] for way in ("jdbc", "connect", "all")] == [2, 2, 4]
    rows = {row["figure"]: (row["value"], row["ratio"], row["target"]) for row in headline({"analysts": report})}
    freshness = rows["stream freshness p95 with the analysts vs without"]
    assert freshness[0] == 6.0 and freshness[2] == "<= 1.2" and freshness[1] > 1
    assert rows["serving view p95, 2 analysts while the stream and a backfill run"][2] == "<= 1.0 s"


def test_the_analysts_look_up_the_latest_windows_the_speed_table_holds(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    from bench.analysts import recent_queries, recent_windows
    from bench.sql_latency import AGGREGATES

    minutes = (0, 1, 1, 2, 3, 4, 5, 6, 7, 7)  # two rows (bridges) in some windows
    starts = pa.array([datetime(2026, 12, 3, 18, m, tzinfo=UTC) for m in minutes], pa.timestamp("us", tz="UTC"))
    write_deltalake(str(tmp_path), pa.table({"window_start": starts, "vehicles": list(range(len(minutes)))}))
    windows = recent_windows(tmp_path)
    assert windows == [datetime(2026, 12, 3, 18, m) for m in (7, 6, 5, 4, 3, 2)]
    statements = recent_queries(windows)
    assert len(statements) == len(windows) + len(AGGREGATES)
    assert "WHERE window_start = TIMESTAMP '2026-12-03 18:07:00'" in statements[0]


def test_a_data_set_whose_tables_had_a_commit_since_it_was_built_is_built_again(tmp_path, monkeypatch):
    """A suite that writes to the data set's tables (the backfill suites do) leaves them to be built
    again, not to be measured by the next run as earlier runs left them."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from bench import data as bench_data

    monkeypatch.setattr(bench_data, "CACHE", tmp_path)
    data = bench_data.DataSet(10)
    table = data.home / "warehouse" / "gold" / "toll_traffic__batch"
    write_deltalake(str(table), pa.table({"vehicles": [1]}))
    bench_data._mark(data, "tables")
    assert bench_data._fresh_tables(data, "tables")

    write_deltalake(str(table), pa.table({"vehicles": [2]}), mode="append")

    assert not bench_data._fresh_tables(data, "tables")
    assert not (data.home / "warehouse").exists()
