"""The whole loop on a pipeline declared only in a temporary project (tests/sensor_project.py):
ingest through the CLI, the stream, a backfill, late events and their correction, the audit, the
stale hours a definition change leaves, and SQL, each equal to a plain-Python oracle; and a session
pipeline of the project's own, backfilled to its oracle and audited."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, timedelta
from decimal import Decimal

import pytest

from lakehouse.settings import PROJECT_ROOT
from tests import sensor_project as sensors
from tests.conftest import make_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]
END = sensors.START + timedelta(hours=1)
# The first readings also fall in windows starting in the hour before (10-minute windows, 1-minute slide).
FIRST_HOUR = sensors.START - timedelta(hours=1)
# The batch layer addresses UTC instants without a zone, as the CLI parses them.
NAIVE_RANGE = (FIRST_HOUR.replace(tzinfo=None), END.replace(tzinfo=None))


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = tmp_path / "team"
    (root / "pipelines").mkdir(parents=True)
    (root / "expectations").mkdir()
    (root / "lakehouse.yaml").write_text("name: team\n")
    sensors.add_to_project(root)
    monkeypatch.setenv("LAKEHOUSE_PROJECT", str(root))
    return root


def ingest(home, lines: str) -> str:
    env = {**os.environ, "LAKEHOUSE_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", "ingest", "--pipeline", sensors.NAME, "-"],
        input=lines,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def served(spark, settings, pipeline) -> dict:
    from lakehouse.storage.catalog import register_tables

    register_tables(spark, settings, [pipeline])
    rows = spark.sql(f"SELECT * FROM gold.{sensors.NAME}").collect()
    return {(r.window_start.replace(tzinfo=UTC), r.sensor): r for r in rows}


def assert_served_equals(rows: dict, truth: dict, closed_only: bool = False) -> None:
    assert set(rows) == set(truth)
    for key, expected in truth.items():
        row = rows[key]
        for metric in ("readings", "celsius_total", "coldest", "warmest", "firmwares", "warm_readings"):
            assert row[metric] == expected[metric], (key, metric)
        assert abs(row["mean_celsius"] - expected["mean_celsius"]) < Decimal("0.0001"), key


def test_a_pipeline_of_a_users_project_runs_the_whole_loop_to_the_oracle(spark, project, tmp_path):
    from lakehouse.audit.reconcile import Auditor
    from lakehouse.dataflow.pipelines import get_pipeline
    from lakehouse.layers.batch import BatchLayer
    from lakehouse.layers.corrections import CorrectionRun
    from lakehouse.layers.speed import run_speed_layer
    from lakehouse.layers.staleness import find_stale

    settings = make_settings(tmp_path / "home", LAKEHOUSE_PROJECT=str(project))
    on_time, late = sensors.events()
    assert "ingested 362 lines" in ingest(tmp_path / "home", sensors.as_lines(on_time))
    pipeline = get_pipeline(sensors.NAME)
    run_speed_layer(spark, settings, pipeline, available_now=True)
    never = [(s.hour, s.reason) for s in find_stale(spark, settings, pipeline)]
    assert never == [(FIRST_HOUR, "never_recomputed"), (sensors.START, "never_recomputed")]

    backfill = BatchLayer(spark, settings, pipeline).backfill(*NAIVE_RANGE, source="bronze", chunk="1h")
    assert find_stale(spark, settings, pipeline) == []
    # Each reading counted once, though it falls in ten windows (and two chunks' windows hold them).
    assert backfill.events_used == len({event["event_id"] for event in on_time}) - 1  # the bad one is quarantined
    truth = sensors.oracle(on_time)
    in_range = {k: v for k, v in truth.items() if k[0] < END}
    assert_served_equals({k: v for k, v in served(spark, settings, pipeline).items() if k in in_range}, in_range)

    ingest(tmp_path / "home", sensors.as_lines(late))
    run_speed_layer(spark, settings, pipeline, available_now=True)
    assert CorrectionRun(spark, settings, pipeline).run().late_events == len(late)
    everything = sensors.oracle(on_time + late)
    rows = served(spark, settings, pipeline)
    assert_served_equals(
        {k: v for k, v in rows.items() if k[0] < END}, {k: v for k, v in everything.items() if k[0] < END}
    )

    audit = Auditor(spark, settings, pipeline).reconcile(*NAIVE_RANGE, target="serving")
    assert audit.ok and audit.windows_compared > 0 and audit.matched == audit.windows_compared


def test_a_metric_change_marks_that_pipelines_hours_stale_and_the_fill_recomputes_them(
    spark, project, tmp_path, monkeypatch, capsys
):
    from lakehouse.cli import main
    from lakehouse.dataflow.pipelines import get_pipeline
    from lakehouse.layers.batch import BatchLayer
    from lakehouse.layers.speed import run_speed_layer
    from lakehouse.layers.staleness import find_stale

    settings = make_settings(tmp_path / "home", LAKEHOUSE_PROJECT=str(project))
    on_time, _ = sensors.events(count=120)
    ingest(tmp_path / "home", sensors.as_lines(on_time))
    pipeline = get_pipeline(sensors.NAME)
    run_speed_layer(spark, settings, pipeline, available_now=True)
    BatchLayer(spark, settings, pipeline).backfill(*NAIVE_RANGE, source="bronze", chunk="1h")
    assert find_stale(spark, settings, pipeline) == []

    time.sleep(0.01)
    declaration = project / "pipelines" / f"{sensors.NAME}.yaml"
    declaration.write_text(
        sensors.PIPELINE.replace("warmest: {max: celsius}", "warmest: {max: celsius}\n  hottest: {max: celsius}")
    )
    changed = get_pipeline(sensors.NAME)
    stale = find_stale(spark, settings, changed)
    assert [(s.hour, s.reason) for s in stale] == [
        (FIRST_HOUR, "older_definition"),
        (sensors.START, "older_definition"),
    ]
    # The fill as `lakehouse stale --fill` runs it, in this session: without --pipeline, over every
    # pipeline of the project, here one more that no stream has fed (it sorts first).
    (project / "pipelines" / "sensor_daily.yaml").write_text(f"extends: {sensors.NAME}\nwindow: {{size: 1d}}\n")
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    capsys.readouterr()
    assert main(["stale", "--fill"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in listed if "older_definition" in line] == [
        [sensors.NAME, hour.isoformat(), "older_definition"] for hour in (FIRST_HOUR, sensors.START)
    ]
    assert "sensor_daily: 0 stale hours (the batch layer is current)" in listed
    assert find_stale(spark, settings, changed) == []
    rows = served(spark, settings, changed)
    assert all(row.hottest == row.warmest for row in rows.values() if row.source == "batch")

    declaration.write_text(sensors.PIPELINE.replace("keys: [sensor]", "keys: [firmware]"))
    with pytest.raises(Exception, match="declare a new pipeline"):
        BatchLayer(spark, settings, get_pipeline(sensors.NAME))
    assert PROJECT_ROOT.joinpath("pipelines", f"{sensors.NAME}.yaml").exists() is False


# The batch layer and the audit address UTC instants without a zone, as the CLI parses them.
HOUR = (sensors.START.replace(tzinfo=None), END.replace(tzinfo=None))


def streamed_and_backfilled_bursts(spark, settings) -> list[dict]:
    """The bursts' events in the log, the stream run over them (the late reading in a micro-batch of
    its own) and the hour backfilled from bronze; returns the events."""
    from lakehouse.dataflow.pipelines import get_pipeline
    from lakehouse.layers.batch import BatchLayer
    from lakehouse.layers.speed import run_speed_layer
    from lakehouse.storage.log import LogWriter

    on_time, late = sensors.burst_events()
    log = LogWriter(settings, sensors.BURSTS)
    for arrival, (tag, batch) in enumerate([("on-time", on_time), ("late", late)]):
        log.write(END + timedelta(minutes=arrival), tag, [sensors.as_lines([event]).strip() for event in batch])
    pipeline = get_pipeline(sensors.BURSTS)
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), pipeline, available_now=True)
    BatchLayer(spark, settings, pipeline).backfill(*HOUR, source="bronze", chunk="1h")
    return on_time + late


def first_burst_of(sensor: str) -> str:
    start = HOUR[0] + timedelta(minutes=int(sensor[1]))
    return f"sensor = '{sensor}' AND window_start = TIMESTAMP'{start.isoformat(sep=' ')}'"


def test_a_session_pipeline_of_a_users_project_is_audited_and_a_session_changed_by_hand_is_unexplained(
    spark, project, tmp_path, monkeypatch
):
    """Its own sessions, no parent to audit instead: the backfill agrees with the oracle's bursts;
    the audit explains the late reading that joined two of the stream's, and of two sessions changed
    by hand, the one changed through `lakehouse repair`. One audit, after both changes."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from lakehouse.audit.reconcile import Auditor
    from lakehouse.cli import main
    from lakehouse.dataflow.pipelines import get_pipeline
    from lakehouse.storage.catalog import pipeline_tables

    sensors.add_bursts_to_project(project)
    settings = make_settings(tmp_path / "home", LAKEHOUSE_PROJECT=str(project))
    events = streamed_and_backfilled_bursts(spark, settings)
    pipeline = get_pipeline(sensors.BURSTS)
    tables = pipeline_tables(pipeline)
    batch = spark.read.format("delta").load(tables.batch.uri(settings)).collect()
    bursts = {
        (r.sensor, r.window_start.replace(tzinfo=UTC)): (r.window_end.replace(tzinfo=UTC), r.readings) for r in batch
    }
    assert bursts == sensors.burst_oracle(events)

    DeltaTable.forPath(spark, tables.speed.uri(settings)).update(
        F.expr(first_burst_of("s1")), {"readings": F.col("readings") + 1}
    )
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    repair = ["repair", "--pipeline", sensors.BURSTS, "--layer", "speed", "--where", first_burst_of("s2")]
    assert main([*repair, "--set", "readings = readings + 1", "--reason", "a reading lost in transit"]) == 0

    audit = Auditor(spark, settings, pipeline).reconcile(*HOUR)
    # 15 bursts, the last of each sensor still open; s0's first two compared as one, joined by the late reading.
    assert (audit.open_windows, audit.windows_compared, audit.matched) == (3, 11, 8)
    judged = {(row["key"]["sensor"], row["window_start"]): row for row in audit.rows if row["status"] != "matched"}
    joined = judged.pop(("s0", HOUR[0]))
    joined_end = HOUR[0] + timedelta(minutes=12, seconds=220) + sensors.GAP  # s0's second burst's end
    assert (joined["status"], joined["causes"], joined["window_end"]) == ("explained", ["late"], joined_end)
    repaired = judged.pop(("s2", HOUR[0] + timedelta(minutes=2)))
    assert (repaired["status"], repaired["causes"]) == ("explained", ["manual_change"])
    [(key, changed)] = judged.items()
    assert key == ("s1", HOUR[0] + timedelta(minutes=1)) and audit.unexplained == [changed]
    assert changed["speed_minus_on_time"]["readings"] == "1" and changed["unexplained_event_ids"] == []
