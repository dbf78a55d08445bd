"""The DAG files: they parse cleanly, and each DAG, run once with ``dag.test()`` on a small
generated log, changes exactly the Delta tables it should. The DAGs' Spark tasks run their job files
with the arguments the DAG rendered, on one warm JVM (``tests/airflow_harness.py``); spark-submit
itself is exercised on a real scheduler by ``tests/test_airflow_e2e.py``. Last, the jobs these DAGs
run at once on the same windows (two backfill runs over overlapping ranges, a backfill racing a
correction) both finish with the truth."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import functions as F

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.speed import run_speed_layer
from lakehouse.location import local_path
from lakehouse.storage.catalog import ALERTS, BACKFILL_RUNS, BATCH_COVERAGE, RECONCILIATIONS, pipeline_tables
from lakehouse.storage.log import LogWriter
from tests.airflow_env import PROJECT, DagTestRunner, airflow_env
from tests.conftest import make_settings
from tests.oracle import gold_rows, run_oracle, truth

pytestmark = pytest.mark.airflow

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
DAG_IDS = {
    "lakehouse_backfill",
    "lakehouse_batch_layer",
    "lakehouse_late_corrections",
    "lakehouse_audit",
    "lakehouse_maintenance",
    "lakehouse_stream_health",
    "lakehouse_stale",
}
# Recent enough for the log retention, whole hours so every range falls on window boundaries.
HOUR0 = (datetime.now(UTC) - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0, tzinfo=None)
# A manual run of an hourly DAG at a given time gets the hour that ended then as its data interval.
FIRST_HOUR_RUN = HOUR0 + timedelta(hours=1)


def iso(moment: datetime) -> str:
    return f"{moment.isoformat()}Z"


def test_dag_files_import_cleanly_and_say_who_owns_them(tmp_path):
    # How long the parse takes is a benchmark figure (bench/orchestration.py), not a test's bound.
    probe = """
import json, os
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder="dags")
print(json.dumps({
    "errors": bag.import_errors,
    "dags": {d.dag_id: {"tags": sorted(d.tags), "doc": bool(d.doc_md), "owners": sorted({t.owner for t in d.tasks}),
                        "retries": sorted({t.retries for t in d.tasks})} for d in bag.dags.values()},
}))
# With a windowed join's two pipelines running, the audit DAG audits the join too; and a session pipeline.
os.environ["LAKEHOUSE_PIPELINES"] = "toll_traffic,toll_traffic_by_zone,zone_temperatures,team_scores_sessions"
print(json.dumps(DagBag(dag_folder="dags/lakehouse_audit.py").dags["lakehouse_audit"].task_ids))
"""
    env = airflow_env(tmp_path / "airflow", tmp_path / "home")
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=PROJECT, capture_output=True, text=True, timeout=300, check=True
    ).stdout
    # The two JSON lines, without Airflow's log lines between them.
    report, audits = (json.loads(line) for line in out.splitlines() if line.startswith(("{", "[")))
    assert report["errors"] == {}
    assert set(report["dags"]) == DAG_IDS
    for dag_id, facts in report["dags"].items():
        assert "lakehouse" in facts["tags"] and facts["doc"], dag_id
        assert facts["owners"] == ["lakehouse"], dag_id
        expected_retries = [0] if dag_id == "lakehouse_stream_health" else None
        assert facts["retries"] == expected_retries or min(facts["retries"]) >= 1, dag_id
    assert sorted(audits) == [
        "audit_team_scores_sessions",
        "audit_toll_traffic",
        "audit_toll_traffic_by_zone",
        "audit_toll_weather",
        "audit_zone_temperatures",
    ]


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    runner = DagTestRunner(tmp_path_factory.mktemp("airflow"))
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def streamed(spark, tmp_path_factory):
    """Two hours of events, drained through the speed layer: bronze, __speed and stream progress exist."""
    settings = make_settings(tmp_path_factory.mktemp("dags") / "home")
    config = GeneratorConfig(
        events=1200,
        seed=5,
        start=HOUR0,
        rate=0.18,
        late_fraction=0.05,
        late_delay="3m",
        duplicate_fraction=0.02,
        malformed_fraction=0.02,
        events_per_file=300,
    )
    generate(settings, config)
    # File by file, so the watermark advances between micro-batches and stragglers come out late.
    # Four files: each micro-batch costs seconds however small, and no DAG here needs more batches.
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), PIPELINE, available_now=True)
    oracle = run_oracle(local_path(settings.pipeline_log_uri(PIPELINE.name)), timedelta(minutes=2))
    return settings, oracle


@pytest.fixture
def home(streamed, tmp_path):
    """A private copy of the streamed lakehouse, so each DAG test starts from the same tables."""
    settings, oracle = streamed
    copy = tmp_path / "home"
    shutil.copytree(local_path(settings.home), copy)
    return make_settings(copy), oracle


def read(spark, settings, table):
    return spark.read.format("delta").load(table.uri(settings))


@pytest.mark.slow
def test_backfill_dag_rejects_an_end_before_its_start_without_writing(spark, airflow, home):
    settings, _ = home
    conf = {
        "pipeline": "toll_traffic",
        "start": iso(HOUR0 + timedelta(hours=1)),
        "end": iso(HOUR0),
        "source": "bronze",
        "chunk": "1h",
        "reprocess": "redo",
        "dry_run": False,
    }
    run = airflow.run(local_path(settings.home), "lakehouse_backfill", conf=conf)
    assert run["state"] == "failed" and run["tasks"]["validate_and_plan"] == "failed"
    assert "must be after start" in run["output"]
    assert read(spark, settings, TABLES.batch).count() == 0


@pytest.mark.slow
def test_batch_layer_dag_recomputes_exactly_its_data_interval(spark, airflow, home):
    settings, oracle = home
    run = airflow.run(local_path(settings.home), "lakehouse_batch_layer", logical_date=iso(FIRST_HOUR_RUN))
    assert run["state"] == "success", run["output"][-3000:]
    assert gold_rows(read(spark, settings, TABLES.batch)) == truth(oracle, HOUR0, HOUR0 + timedelta(hours=1))
    coverage = read(spark, settings, BATCH_COVERAGE).collect()
    assert [(c.range_start, c.range_end) for c in coverage] == [(HOUR0, HOUR0 + timedelta(hours=1))]


class _Webhook(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Webhook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_audit_dag_passes_on_a_consistent_stream_and_alerts_when_speed_was_tampered_with(spark, airflow, home):
    settings, _ = home
    lakehouse_home = local_path(settings.home)
    run = airflow.run(lakehouse_home, "lakehouse_audit", logical_date=iso(FIRST_HOUR_RUN))
    assert run["state"] == "success", run["output"][-3000:]
    assert read(spark, settings, RECONCILIATIONS).where("unexplained = 0").count() == 1

    # A value changed by hand in __speed: nothing explains it.
    from delta.tables import DeltaTable

    first_window = read(spark, settings, TABLES.speed).agg(F.min("window_start")).first()[0]
    DeltaTable.forPath(spark, TABLES.speed.uri(settings)).update(
        F.col("window_start") == F.lit(first_window), {"vehicles": F.col("vehicles") + 100}
    )
    server = http.server.HTTPServer(("127.0.0.1", 0), _Webhook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    webhook = json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:{server.server_port}/alerts"})
    try:
        run = airflow.run(
            lakehouse_home,
            "lakehouse_audit",
            logical_date=iso(FIRST_HOUR_RUN),
            AIRFLOW_CONN_LAKEHOUSE_ALERTS_WEBHOOK=webhook,
        )
    finally:
        server.shutdown()
    # An unexplained difference is a verdict: the task fails on its first try, not after a retry's delay.
    assert run["state"] == "failed" and "a check's verdict: not retried" in run["output"], run["output"][-3000:]
    alerts = read(spark, settings, ALERTS).collect()
    assert len(alerts) == 1 and alerts[0].dag_id == "lakehouse_audit" and "audit_toll_traffic" in alerts[0].message
    assert [a["alert_id"] for a in _Webhook.received] == [alerts[0].alert_id]


@pytest.mark.slow
def test_maintenance_dag_compacts_vacuums_and_expires_old_log_hours_without_changing_data(spark, airflow, home):
    settings, _ = home
    log_root = local_path(settings.pipeline_log_uri(PIPELINE.name))
    old = datetime.now(UTC) - timedelta(days=60)
    old_hour = log_root / f"ingest_date={old:%Y-%m-%d}" / f"ingest_hour={old:%H}"
    old_hour.mkdir(parents=True)
    (old_hour / "old.jsonl").write_text("{}\n")
    bronze_before = read(spark, settings, TABLES.bronze).count()
    speed_before = gold_rows(read(spark, settings, TABLES.speed))

    run = airflow.run(local_path(settings.home), "lakehouse_maintenance")
    assert run["state"] == "success", run["output"][-3000:]
    assert not old_hour.exists() and any(log_root.glob("ingest_date=*/ingest_hour=*/*.jsonl"))
    from delta.tables import DeltaTable

    operations = {r.operation for r in DeltaTable.forPath(spark, TABLES.bronze.uri(settings)).history().collect()}
    assert {"OPTIMIZE", "VACUUM START", "VACUUM END"} <= operations
    assert read(spark, settings, TABLES.bronze).count() == bronze_before
    assert gold_rows(read(spark, settings, TABLES.speed)) == speed_before


@pytest.mark.slow
def test_stream_health_dag_passes_for_a_fresh_stream_and_fails_once_it_goes_stale(airflow, home):
    settings, _ = home
    lakehouse_home = local_path(settings.home)
    run = airflow.run(lakehouse_home, "lakehouse_stream_health", LAKEHOUSE_STREAM_MAX_STALENESS="1d")
    assert run["state"] == "success", run["output"][-3000:]
    run = airflow.run(lakehouse_home, "lakehouse_stream_health", LAKEHOUSE_STREAM_MAX_STALENESS="1s")
    assert run["state"] == "failed"
    assert "speed layer for toll_traffic is stale" in run["output"]


def stream_a_late_straggler(spark, settings, first_minute: datetime = HOUR0):
    """A straggler for ``first_minute``, arriving after everything else, drained with the rest of
    the log file by file: the stream marks it late. Returns the oracle's replay of the log with it."""
    straggler = {
        "event_id": "straggler-1",
        "bridge_id": "bridge-00",
        "booth_id": "bridge-00-booth-0",
        "vehicle_type": "car",
        "axles": 2,
        "toll_amount": 6.0,
        "event_time": iso(first_minute + timedelta(seconds=30)),
        "sent_at": iso(first_minute + timedelta(seconds=30)),
    }
    arrival = first_minute + timedelta(hours=3)
    LogWriter(settings, PIPELINE.name).write(arrival, "straggler", [json.dumps(straggler)])
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), PIPELINE, available_now=True)
    return run_oracle(local_path(settings.pipeline_log_uri(PIPELINE.name)), timedelta(minutes=2))


@pytest.mark.slow
def test_late_corrections_dag_folds_late_events_into_the_batch_layer_with_retractions(spark, airflow, home):
    from lakehouse.storage.catalog import CORRECTION_RUNS, CORRECTIONS

    settings, _ = home
    oracle = stream_a_late_straggler(spark, settings)
    late_windows = {
        r.window_start
        for r in read(spark, settings, TABLES.bronze)
        .where("fate = 'late'")
        .select(F.window(F.col("event_time"), "1 minute").start.alias("window_start"))
        .collect()
    }
    assert late_windows, "the scenario has late events"
    run = airflow.run(local_path(settings.home), "lakehouse_late_corrections")
    assert run["state"] == "success", run["output"][-3000:]
    runs = read(spark, settings, CORRECTION_RUNS).collect()
    # A run records its plan first ('planned'), then its outcome ('succeeded'), under one run id.
    succeeded = [r for r in runs if r.status == "succeeded"]
    assert len({r.run_id for r in runs}) == 1 and len(succeeded) == 1 and succeeded[0].late_events > 0
    corrected = {r.window_start for r in read(spark, settings, CORRECTIONS).collect()}
    assert corrected and corrected <= late_windows
    batch = read(spark, settings, TABLES.batch)
    assert gold_rows(batch) == {
        row for row in oracle.rows("batch") if row[0] in {r.window_start for r in batch.collect()}
    }


# --- the DAGs' jobs at once on the same windows ----------------------------------------------------
# Two backfill runs may overlap (max_active_runs=2, or a command line beside a DAG run), and the
# corrections DAG runs every 15 minutes whatever backfill is running. A write that loses the commit
# race runs again on the new snapshot; the result must be what running them in turn leaves: the truth.


def at_once(*jobs: Callable[[], object]) -> None:
    """Run the jobs in threads of the one Spark session, released together; re-raise what failed."""
    errors: list[BaseException] = []
    ready = threading.Barrier(len(jobs))

    def run(job) -> None:
        ready.wait()
        try:
            job()
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def backfill_job(spark, settings, start: datetime, end: datetime) -> Callable[[], object]:
    return lambda: BatchLayer(spark, settings, PIPELINE).backfill(start, end, chunk="10m")


@pytest.mark.slow
def test_two_backfills_over_overlapping_ranges_at_once_both_finish_with_the_truth(spark, home):
    settings, oracle = home
    ranges = [(HOUR0, HOUR0 + timedelta(minutes=40)), (HOUR0 + timedelta(minutes=20), HOUR0 + timedelta(hours=1))]

    at_once(*(backfill_job(spark, settings, *bounds) for bounds in ranges))

    assert gold_rows(read(spark, settings, TABLES.batch)) == truth(oracle, HOUR0, HOUR0 + timedelta(hours=1))
    runs = read(spark, settings, BACKFILL_RUNS).collect()
    assert sorted((r.status, r.chunks) for r in runs) == [("succeeded", 4), ("succeeded", 4)]


# A drill: make chaos runs it (make test-long), besides racing a backfill, a correction, the stream
# and maintenance every round on S3; CI does not (docs/development.md, "CI budget").
@pytest.mark.slow
@pytest.mark.long
def test_a_backfill_racing_a_correction_on_the_same_windows_both_finish_with_the_truth(spark, home):
    from lakehouse.layers.corrections import CorrectionRun
    from lakehouse.storage.catalog import CORRECTION_RUNS

    settings, _ = home
    oracle = stream_a_late_straggler(spark, settings)
    hour = (HOUR0, HOUR0 + timedelta(hours=1))

    at_once(backfill_job(spark, settings, *hour), lambda: CorrectionRun(spark, settings, PIPELINE).run())

    assert gold_rows(read(spark, settings, TABLES.batch)) == truth(oracle, *hour)
    corrections = [r for r in read(spark, settings, CORRECTION_RUNS).collect() if r.status == "succeeded"]
    assert len(corrections) == 1 and corrections[0].late_events > 0, "the correction folded the late event in"
