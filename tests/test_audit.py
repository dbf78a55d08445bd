"""Reconciliation: every difference between the speed table and the raw log's truth is explained,
or reported as unexplained down to the event ids, and an audit re-run at its pins repeats itself."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.audit import Auditor
from lakehouse.catalog import pipeline_tables
from lakehouse.cli import main
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.pipelines import get_pipeline
from lakehouse.report import gather_inputs, render_report
from lakehouse.speed import run_speed_layer
from tests.conftest import make_settings

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
START, END = datetime(2026, 1, 5, 8, 0), datetime(2026, 1, 5, 9, 0)
CONFIG = GeneratorConfig(events=2000, seed=21, rate=8.0, late_fraction=0.06, late_delay="3m",
                         duplicate_fraction=0.03, malformed_fraction=0.02, events_per_file=400)


@pytest.fixture(scope="module")
def streamed_home(spark, tmp_path_factory):
    """A home whose speed layer drained the log file by file; tests copy it before changing it."""
    base = tmp_path_factory.mktemp("audit") / "base"
    settings = make_settings(base)
    generate(settings, CONFIG)
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), PIPELINE, available_now=True)
    return base


def malformed_records() -> int:
    """How many records the generator broke: each must be in quarantine under some reason."""
    from lakehouse.generator import generate_records

    return sum(n for kind, n in generate_records(CONFIG)[1].items() if kind.startswith("malformed:"))


def copy_of(streamed_home, tmp_path):
    """The whole home, log included: the audit matches log files by name, so a copy stays whole."""
    shutil.copytree(streamed_home, tmp_path / "copy")
    return make_settings(tmp_path / "copy")


def test_clean_run_explains_every_difference_by_late_events_exactly(spark, streamed_home, tmp_path):
    settings = copy_of(streamed_home, tmp_path)
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END)
    assert result.unexplained == []
    assert result.explained["late"] > 0 and result.matched > 0
    assert result.windows_compared == result.matched + result.explained["late"]
    differences = spark.read.format("delta").load(f"{settings.warehouse_uri}/audit/reconciliation_differences")
    for row in differences.where(F.col("status") == "explained").collect():
        assert int(row.truth["vehicles"]) - int(row.speed["vehicles"]) == row.late_events
    inputs = gather_inputs(spark, settings, PIPELINE, result)
    page = render_report(result, inputs)
    assert "All differences explained" in page and f">{result.explained['late']}<" in page
    assert sum(inputs.quarantine_reasons.values()) == malformed_records() and "bad_json" in page
    late = spark.read.format("delta").load(TABLES.bronze.uri(settings)).where(F.col("fate") == "late")
    late_in_closed_windows = late.where(F.col("event_time") < F.lit(result.watermark - timedelta(minutes=1)))
    assert differences.agg(F.sum("late_events")).first()[0] >= late_in_closed_windows.count() > 0


def test_log_files_the_stream_has_not_read_are_explained_as_not_yet_read(spark, streamed_home, tmp_path):
    settings = copy_of(streamed_home, tmp_path)
    generate(settings, GeneratorConfig(events=60, seed=99, rate=2.0, late_fraction=0, duplicate_fraction=0,
                                       malformed_fraction=0, events_per_file=60))
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END)
    assert result.unexplained == []
    assert result.explained["not_yet_read"] > 0


def test_a_bronze_row_deleted_after_the_stream_read_it_is_unexplained_with_its_event_id(
    spark, streamed_home, tmp_path, monkeypatch, capsys
):
    settings = copy_of(streamed_home, tmp_path)
    bronze = DeltaTable.forPath(spark, TABLES.bronze.uri(settings))
    victim = bronze.toDF().where("fate = 'on_time' AND event_time < '2026-01-05 08:02:00'").orderBy("event_id").first()
    bronze.delete(F.col("event_id") == victim.event_id)
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END)
    assert [row["unexplained_event_ids"] for row in result.unexplained] == [[victim.event_id]]
    assert result.unexplained[0]["key"] == {"bridge_id": victim.bridge_id, "vehicle_type": victim.vehicle_type}

    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "copy"))
    report = tmp_path / "report.html"
    exit_code = main(["audit", "--start", "2026-01-05T08:00Z", "--end", "2026-01-05T09:00Z", "--report", str(report)])
    assert exit_code == 1
    assert victim.event_id in capsys.readouterr().out
    page = report.read_text()
    assert "1 unexplained difference<" in page and victim.event_id in page and "<svg" in page


def test_a_speed_value_changed_by_hand_is_unexplained_by_the_amount_changed(spark, streamed_home, tmp_path):
    settings = copy_of(streamed_home, tmp_path)
    speed = DeltaTable.forPath(spark, TABLES.speed.uri(settings))
    target = speed.toDF().where("window_start = '2026-01-05 08:01:00'").orderBy("bridge_id", "vehicle_type").first()
    condition = ((F.col("window_start") == target.window_start) & (F.col("bridge_id") == target.bridge_id)
                 & (F.col("vehicle_type") == target.vehicle_type))
    speed.update(condition, {"revenue": F.col("revenue") + F.lit(Decimal("0.01"))})
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END)
    assert len(result.unexplained) == 1
    assert result.unexplained[0]["speed_minus_on_time"] == {"vehicles": "0", "revenue": "0.01"}
    assert result.unexplained[0]["unexplained_event_ids"] == []


def test_audit_at_its_pins_repeats_itself_after_more_data_arrives(spark, streamed_home, tmp_path):
    settings = copy_of(streamed_home, tmp_path)
    auditor = Auditor(spark, settings, PIPELINE)
    first = auditor.reconcile(START, END)
    generate(settings, GeneratorConfig(events=300, seed=77, rate=8.0, late_fraction=0.5, late_delay="2m",
                                       events_per_file=100))
    again = auditor.reconcile(START, END, pins=first.pins)
    fresh = auditor.reconcile(START, END)
    assert (again.windows_compared, again.matched, again.explained, again.unexplained, again.watermark) == (
        first.windows_compared, first.matched, first.explained, first.unexplained, first.watermark)
    assert fresh.pins != first.pins and fresh.explained["not_yet_read"] > 0
