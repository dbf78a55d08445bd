"""The pure decisions behind the DAGs: backfill parameters, chunk plans, retention floors, stream health."""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta

import pytest
from jsonschema import FormatChecker, ValidationError, validate

from lakehouse.errors import ExitCode, LakehouseError
from lakehouse.ops.health import assess_stream_health
from lakehouse.ops.orchestration import (
    SCHEDULED_BY,
    backfill_param_schemas,
    chunk_job_args,
    chunk_label,
    chunk_runs,
    joining_pipeline_names,
    pipeline_names,
    plan_chunks,
    request_from_params,
    summarise_backfill,
    validate_backfill_request,
)
from lakehouse.settings import Settings
from lakehouse.storage.maintenance import expired_log_partitions, log_retention, vacuum_retention

NOW = datetime(2026, 11, 22, 12, 0)
SETTINGS = Settings.from_env(
    {"LAKEHOUSE_HOME": "/tmp/unused", "LAKEHOUSE_BACKFILL_MAX_RANGE": "2d", "LAKEHOUSE_LOG_RETENTION": "30d"}
)


def params(**changes) -> dict:
    return {
        "pipeline": "toll_traffic",
        "start": "2026-11-20T08:00:00Z",
        "end": "2026-11-20T11:00:00Z",
        "source": "bronze",
        "chunk": "1h",
        "reprocess": "skip",
        "dry_run": False,
        **changes,
    }


def test_pipeline_names_match_the_shipped_pipelines():
    from lakehouse.dataflow.pipelines import all_pipelines

    assert pipeline_names() == sorted(all_pipelines())


def test_joining_pipeline_names_match_the_shipped_pipelines_with_a_join():
    from lakehouse.dataflow.pipelines import all_pipelines

    assert (
        joining_pipeline_names()
        == sorted(n for n, p in all_pipelines().items() if p.joins)
        == ["toll_traffic_by_region", "toll_traffic_by_zone"]
    )


def test_valid_parameters_become_a_request_in_naive_utc():
    request = validate_backfill_request(params(start="2026-11-20T09:00:00+01:00"), SETTINGS)
    assert (request.start, request.end) == (datetime(2026, 11, 20, 8), datetime(2026, 11, 20, 11))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"pipeline": "nope"}, "unknown pipeline 'nope'"),
        ({"end": "2026-11-20T07:00:00Z"}, "must be after start"),
        ({"end": "2026-11-23T08:00:00Z"}, "longer than the 2d one backfill may cover"),
        ({"source": "kafka"}, "source must be one of bronze, log"),
        ({"start": "yesterday"}, "cannot read start 'yesterday'"),
        # What an injection attempt looks like: refused by the same rules, before any work.
        ({"pipeline": "toll_traffic'; DROP TABLE gold.toll_traffic__batch; --"}, "unknown pipeline"),
        ({"pipeline": "../../etc/passwd"}, "unknown pipeline '../../etc/passwd'"),
        ({"source": "bronze --conf spark.jars=evil.jar"}, "source must be one of bronze, log"),
        ({"chunk": "1h; rm -rf /"}, "cannot read duration '1h; rm -rf /'"),
        ({"end": "2026-11-20T10:00:00Z\x00; rm -rf /"}, "cannot read end"),
        ({"end": "2026-11-20T10:00:00Z\n--master yarn"}, "cannot read end"),
        ({"start": "0001-01-01T00:00:00Z", "end": "9999-12-31T00:00:00Z"}, "longer than the 2d one backfill may cover"),
        ({"chunk": "99999999999999999999d"}, "duration '99999999999999999999d' is too long"),
    ],
)
def test_bad_parameters_are_rejected_with_a_message_that_says_why(changes, message):
    with pytest.raises(LakehouseError, match=message):
        validate_backfill_request(params(**changes), SETTINGS)


def home_settings(tmp_path, monkeypatch) -> Settings:
    """Settings of a home in ``tmp_path``, for this process and for the commands it runs in-process."""
    env = {"LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_LOG_RETENTION": "30d"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env(env)


JANUARY = {"start": "2026-01-05T08:00:00Z", "end": "2026-01-05T09:00:00Z"}
EVENT = '{"event_id": "e-1", "event_time": "2026-01-05T08:00:30Z"}'


def test_a_backfill_of_old_events_the_log_still_holds_is_planned_from_the_log_and_from_bronze(
    tmp_path, monkeypatch, capsys
):
    """Events of January ingested in December (docs/pipelines.md's tutorial): retention removes files
    by when they arrived, and the log has removed none."""
    from lakehouse.cli import main
    from lakehouse.storage.log import LogWriter

    settings = home_settings(tmp_path, monkeypatch)
    LogWriter(settings, "toll_traffic").write(datetime(2026, 12, 1, 9, 0), "tutorial", [EVENT])
    for source in ("log", "bronze"):
        assert main(["plan-backfill", json.dumps(params(**JANUARY, source=source))]) == 0, capsys.readouterr().err
        assert json.loads(capsys.readouterr().out)["chunks"] == [
            {"start": "2026-01-05T08:00:00Z", "end": "2026-01-05T09:00:00Z"}
        ]


def test_a_backfill_from_the_log_is_refused_once_retention_removed_hours_its_events_may_have_arrived_in(
    tmp_path, monkeypatch, capsys
):
    from lakehouse.cli import main
    from lakehouse.storage.log import LogWriter
    from lakehouse.storage.maintenance import expire_log

    settings = home_settings(tmp_path, monkeypatch)
    writer = LogWriter(settings, "toll_traffic")
    writer.write(datetime(2026, 10, 1, 8, 30), "october", [EVENT])
    writer.write(datetime(2026, 11, 20, 8, 30), "november", [EVENT])
    removed = expire_log(settings, "toll_traffic", NOW)  # 30 days before NOW: 2026-10-23T12:00
    assert removed == [f"{settings.pipeline_log_uri('toll_traffic')}/ingest_date=2026-10-01/ingest_hour=08"]
    october = {"start": "2026-10-01T08:00:00Z", "end": "2026-10-01T09:00:00Z"}
    gone = r"no longer holds the files it received before 2026-10-01T09:00:00Z: its retention \(30d\) removed them"
    with pytest.raises(LakehouseError, match=gone):
        validate_backfill_request(params(**october, source="log"), settings)
    validate_backfill_request(params(**october, source="bronze"), settings)  # bronze keeps every accepted event
    validate_backfill_request(params(source="log"), settings)  # events that arrived after the hours removed
    # The backfill each chunk runs refuses too, before Spark starts.
    assert main(["backfill", "--source", "log", "--start", october["start"], "--end", october["end"]]) == 2
    [error] = capsys.readouterr().err.splitlines()
    assert error.startswith("lakehouse: error: the log of toll_traffic no longer holds the files it received")
    assert not (tmp_path / "home" / "warehouse").exists()


def test_a_request_takes_the_same_defaults_in_plan_backfill_the_form_and_the_backfill_command(
    tmp_path, monkeypatch, capsys
):
    import inspect

    from lakehouse.cli import build_parser, main
    from lakehouse.commands.base import chosen_pipeline
    from lakehouse.layers.batch import BatchLayer

    home_settings(tmp_path, monkeypatch)
    given = {"start": "2026-11-20T00:00:00Z", "end": "2026-11-22T00:00:00Z"}  # the pipeline: the examples' default
    assert main(["plan-backfill", json.dumps(given)]) == 0, capsys.readouterr().err
    assert len(json.loads(capsys.readouterr().out)["chunks"]) == 2  # a day a chunk
    request = validate_backfill_request(given, SETTINGS)
    form = backfill_param_schemas(SETTINGS)
    command = build_parser().parse_args(["backfill", "--start", given["start"], "--end", given["end"]])
    layer = inspect.signature(BatchLayer.backfill).parameters
    names = ("source", "chunk", "reprocess")
    assert [getattr(request, n) for n in names] == [form[n]["default"] for n in names] == ["bronze", "1d", "redo"]
    assert [getattr(command, n) for n in names] == [layer[n].default for n in names] == ["bronze", "1d", "redo"]
    assert request.dry_run is form["dry_run"]["default"] is False
    assert request.pipeline == form["pipeline"]["default"] == chosen_pipeline(SETTINGS) == "toll_traffic"


def test_param_schemas_reject_single_value_errors_the_way_airflow_checks_them():
    schemas = backfill_param_schemas(SETTINGS)
    for name, bad in (("pipeline", "nope"), ("start", "next tuesday"), ("chunk", "7m"), ("reprocess", "maybe")):
        with pytest.raises(ValidationError):
            validate(bad, schemas[name], format_checker=FormatChecker())
    for name, good in (
        ("start", "2026-11-20T08:00:00Z"),
        ("start", "2026-11-20T08:00:00.000+00:00"),
        ("end", "2026-11-20T08:00"),
        ("dry_run", True),
    ):
        validate(good, schemas[name], format_checker=FormatChecker())


def test_chunks_tile_the_range_and_the_last_one_may_be_shorter():
    request = request_from_params(params(end="2026-11-20T10:30:00Z"))
    assert plan_chunks(request) == [
        {"start": "2026-11-20T08:00:00Z", "end": "2026-11-20T09:00:00Z"},
        {"start": "2026-11-20T09:00:00Z", "end": "2026-11-20T10:00:00Z"},
        {"start": "2026-11-20T10:00:00Z", "end": "2026-11-20T10:30:00Z"},
    ]


def test_a_chunk_job_recomputes_exactly_its_chunk_with_the_requested_reprocessing():
    request = request_from_params(params(reprocess="redo"))
    args = chunk_job_args(request, {"start": "a", "end": "b"}, "run-1|a", "operator")
    assert args[args.index("--start") + 1] == "a" and args[args.index("--end") + 1] == "b"
    assert args[args.index("--reprocess") + 1] == "redo" and args[args.index("--label") + 1] == "run-1|a"
    assert args[args.index("--triggered-by") + 1] == "operator"
    scheduled = chunk_job_args(request, {"start": "a", "end": "b"}, "run-2|a", None)
    assert scheduled[scheduled.index("--triggered-by") + 1] == SCHEDULED_BY


def test_summary_counts_only_succeeded_runs_and_reports_failed_attempts():
    request = request_from_params(params())
    runs = [
        {"status": "failed", "rows_written": 0},
        {"status": "succeeded", "chunks": 1, "chunks_skipped": 0, "rows_written": 10, "events_used": 40},
        {"status": "succeeded", "chunks": 0, "chunks_skipped": 1, "rows_written": 0, "events_used": 0},
    ]
    summary = summarise_backfill(request, plan_chunks(request), runs)
    assert (summary["chunks_planned"], summary["chunks_recomputed"], summary["chunks_skipped"]) == (3, 1, 1)
    assert (summary["rows_written"], summary["events_used"], summary["failed_attempts"]) == (10, 40, 1)


def test_a_runs_summary_reads_the_rows_of_its_own_chunks_and_no_other_runs(tmp_path):
    from lakehouse.storage.catalog import BACKFILL_RUNS, ensure_table
    from lakehouse.storage.ops_tables import append_rows

    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home")})
    ensure_table(BACKFILL_RUNS, settings)
    chunk = {"start": "2026-11-20T08:00:00Z", "end": "2026-11-20T09:00:00Z"}
    labels = [
        chunk_label("manual__1", chunk),
        chunk_label("manual__1", {**chunk, "start": "2026-11-20T09:00:00Z"}),
        chunk_label("manual__10", chunk),  # a run whose id starts with the other's
        "manual__1",  # a command line's label that happens to be the run's id
        None,
    ]
    rows = [{"run_id": f"r{n}", "label": label, "status": "succeeded"} for n, label in enumerate(labels)]
    append_rows(BACKFILL_RUNS.uri(settings), BACKFILL_RUNS.arrow_schema, rows, settings)

    assert sorted(row["label"] for row in chunk_runs(settings, "manual__1")) == sorted(labels[:2])
    assert [row["run_id"] for row in chunk_runs(settings, "manual__10")] == ["r2"]
    assert chunk_runs(settings, "manual__2") == []


def test_a_runs_summary_opens_only_the_files_whose_labels_can_hold_its_chunks(tmp_path, monkeypatch):
    """Each chunk appends a file: a run's summary must not open every other run's."""
    from lakehouse.storage import ops_tables
    from lakehouse.storage.catalog import BACKFILL_RUNS, ensure_table

    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home")})
    ensure_table(BACKFILL_RUNS, settings)
    chunk = {"start": "2026-11-20T08:00:00Z", "end": "2026-11-20T09:00:00Z"}
    runs = ["manual__it's", "manual__it's", "manual__other", "manual__other", "scheduled__it's"]
    for n, run in enumerate(runs):  # one commit, and so one file, a row
        label = chunk_label(run, {**chunk, "start": f"2026-11-20T0{n}:00:00Z"})
        row = {"run_id": f"r{n}", "label": label, "status": "succeeded"}
        ops_tables.append_rows(BACKFILL_RUNS.uri(settings), BACKFILL_RUNS.arrow_schema, [row], settings)
    opened = []
    every_file = ops_tables._dataset

    def recorded(*args):
        dataset = every_file(*args)
        opened.extend(dataset.files)
        return dataset

    monkeypatch.setattr(ops_tables, "_dataset", recorded)

    assert sorted(row["run_id"] for row in chunk_runs(settings, "manual__it's")) == ["r0", "r1"]
    assert len(opened) == 2


def test_no_run_is_read_before_the_table_exists(tmp_path):
    assert chunk_runs(Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home")}), "manual__1") == []


def test_vacuum_never_keeps_less_than_audit_replays_and_deltas_safety_need():
    assert vacuum_retention(SETTINGS.replace(vacuum_retention="1h", audit_replay_window="1d")) == timedelta(days=7)
    assert vacuum_retention(SETTINGS.replace(vacuum_retention="1h", audit_replay_window="14d")) == timedelta(days=14)
    assert vacuum_retention(SETTINGS.replace(vacuum_retention="30d")) == timedelta(days=30)
    assert log_retention(SETTINGS.replace(log_retention="1d", audit_replay_window="7d")) == timedelta(days=7)


def test_only_log_hours_entirely_older_than_the_retention_expire():
    folders = [f"file:/log/p/ingest_date=2026-11-20/ingest_hour={h:02d}" for h in (9, 10, 11)]
    # now - 2d = 2026-11-20T10:30: hour 09 ended at 10:00 (expired), hour 10 ends 11:00 (kept).
    assert expired_log_partitions(folders, datetime(2026, 11, 22, 10, 30), timedelta(days=2)) == folders[:1]


def progress(batch_id: int, started: datetime, lag: timedelta) -> dict:
    return {"batch_id": batch_id, "started_at": started, "max_event_time": started - lag}


def test_a_stream_without_batches_is_reported_as_never_run():
    verdict = assess_stream_health("toll_traffic", [], NOW, timedelta(minutes=15), 3)
    assert not verdict.ok and "has never run" in verdict.message


def test_a_stream_silent_longer_than_the_staleness_limit_is_stale():
    batches = [progress(7, NOW - timedelta(minutes=42), timedelta(seconds=5))]
    verdict = assess_stream_health("toll_traffic", batches, NOW, timedelta(minutes=15), 3)
    assert not verdict.ok and "is stale" in verdict.message and "42m ago" in verdict.message


def test_a_lag_growing_at_every_recent_batch_is_falling_behind_but_a_large_steady_lag_is_not():
    growing = [progress(i, NOW - timedelta(minutes=4 - i), timedelta(minutes=1 + i)) for i in range(4)]
    verdict = assess_stream_health("toll_traffic", growing, NOW, timedelta(minutes=15), 3)
    assert not verdict.ok and "falling behind" in verdict.message and "from 1m to 4m" in verdict.message
    steady = [progress(i, NOW - timedelta(minutes=4 - i), timedelta(days=300)) for i in range(4)]
    assert assess_stream_health("toll_traffic", steady, NOW, timedelta(minutes=15), 3).ok


def test_a_lag_that_rises_by_less_than_a_trigger_interval_in_all_is_jitter_not_falling_behind():
    jitter = [progress(i, NOW - timedelta(seconds=20 - 5 * i), timedelta(seconds=1 + 0.3 * i)) for i in range(4)]
    assert assess_stream_health("toll_traffic", jitter, NOW, timedelta(minutes=15), 3, noise=timedelta(seconds=5)).ok
    verdict = assess_stream_health("toll_traffic", jitter, NOW, timedelta(minutes=15), 3, noise=timedelta(seconds=0.5))
    assert not verdict.ok and "falling behind" in verdict.message


def test_a_lag_that_rose_at_every_batch_but_stays_within_the_tolerance_is_not_falling_behind():
    # A busy machine: four batches in a row start later behind their files, from 0 s to 4 s.
    busy = [progress(i, NOW - timedelta(seconds=8 - 2 * i), timedelta(seconds=1.3 * i)) for i in range(4)]
    check = functools.partial(assess_stream_health, "toll_traffic", busy, NOW, timedelta(minutes=15), 3)
    assert check(noise=timedelta(seconds=1), tolerance=timedelta(seconds=5)).ok
    verdict = check(noise=timedelta(seconds=1), tolerance=timedelta(seconds=3))
    assert not verdict.ok and "from 0s to 3s" in verdict.message


def test_a_windowed_join_is_audited_when_both_its_pipelines_run():
    from lakehouse.dataflow.pipelines import all_window_joins
    from lakehouse.ops.orchestration import audited_window_joins

    every_side = sorted({side.name for join in all_window_joins().values() for side in (join.events, join.readings)})
    assert audited_window_joins(every_side) == sorted(all_window_joins()) == ["toll_weather"]
    assert audited_window_joins(["toll_traffic_by_zone", "zone_temperatures", "toll_traffic"]) == ["toll_weather"]
    assert audited_window_joins(["toll_traffic_by_zone", "toll_traffic"]) == []
    assert audited_window_joins(["zone_temperatures"]) == []


def test_scheduled_dags_run_the_configured_pipelines_or_all_shipped_ones():
    from lakehouse.ops.orchestration import active_pipelines

    assert active_pipelines(SETTINGS) == pipeline_names()
    assert active_pipelines(SETTINGS.replace(pipelines=("toll_traffic",))) == ["toll_traffic"]
    with pytest.raises(LakehouseError, match="unknown pipelines nope"):
        active_pipelines(SETTINGS.replace(pipelines=("nope",)))


def test_a_check_judges_its_own_moment_on_the_batches_started_by_then():
    # A late or retried check of 10:00 must not pass on micro-batches that started after 10:00.
    batches = [
        progress(7, NOW - timedelta(minutes=42), timedelta(seconds=5)),
        progress(8, NOW + timedelta(minutes=30), timedelta(seconds=5)),
    ]
    verdict = assess_stream_health("toll_traffic", batches, NOW, timedelta(minutes=15), 3)
    assert not verdict.ok and "batch 7" in verdict.message and "42m ago" in verdict.message
    assert assess_stream_health("toll_traffic", batches, NOW + timedelta(minutes=31), timedelta(minutes=15), 3).ok


@pytest.mark.parametrize("code", [ExitCode.REFUSED, ExitCode.CRASHED, 137])
def test_a_jobs_check_verdict_fails_its_task_without_retries_and_any_other_failure_may_retry(code):
    from airflow.sdk.exceptions import AirflowFailException

    from lakehouse.ops.spark_job_operator import job_failed

    verdict = job_failed("lakehouse audit --pipeline toll_traffic", ExitCode.CHECK_FAILED)
    assert isinstance(verdict, AirflowFailException) and "not retried" in str(verdict)
    fault = job_failed("lakehouse audit --pipeline toll_traffic", code)
    assert not isinstance(fault, AirflowFailException) and f"failed with exit code {int(code)};" in str(fault)
