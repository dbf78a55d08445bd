"""The command line as a user runs it: separate processes, clear errors, SQL beside a running stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakehouse.generator import GeneratorConfig, generate
from tests.conftest import make_settings

PROJECT = Path(__file__).resolve().parents[1]


def lakehouse(*args: str) -> list[str]:
    return [sys.executable, "-m", "lakehouse.cli", *args]


def test_spark_submit_entry_point_rejects_a_reversed_range_before_starting_spark(cli_env):
    command = [
        sys.executable,
        str(PROJECT / "jobs" / "backfill.py"),
        "--start",
        "2026-01-05T10:00Z",
        "--end",
        "2026-01-05T09:00Z",
    ]
    finished = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 2
    assert "empty or reversed" in finished.stderr


def test_missing_java_is_a_one_line_error(cli_env):
    env = {**cli_env, "PATH": "/nonexistent"}
    env.pop("JAVA_HOME", None)
    finished = subprocess.run(lakehouse("sql", "SELECT 1"), env=env, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 2
    assert finished.stderr.strip().splitlines() == [
        "lakehouse: error: Java 17 is required to run Spark but no `java` was found (install a JDK 17 or set JAVA_HOME)"
    ]


def test_a_reader_that_stops_reading_ends_the_command_quietly(cli_env):
    """`lakehouse status | head -3`: the pipe closes before the output is written. No traceback; the
    exit code a shell shows for a tool that SIGPIPE ended."""
    read, write = os.pipe()
    os.close(read)
    try:
        finished = subprocess.run(
            lakehouse("status"), env=cli_env, stdout=write, stderr=subprocess.PIPE, text=True, timeout=60
        )
    finally:
        os.close(write)
    assert (finished.returncode, finished.stderr) == (128 + signal.SIGPIPE, "")


def test_unknown_pipeline_is_named_with_the_shipped_ones(cli_env):
    finished = subprocess.run(
        lakehouse("backfill", "--pipeline", "nope", "--start", "2026-01-05", "--end", "2026-01-06"),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 2
    assert (
        "unknown pipeline 'nope'; the project's pipelines: team_scores, team_scores_sessions, toll_traffic"
        in finished.stderr
    )


def test_a_windowed_joins_audit_refuses_the_options_of_a_pipelines_audit(cli_env):
    """The join's audit compares the whole range; an option it would ignore is refused, before Spark."""
    audit = ["audit", "--pipeline", "toll_weather", "--start", "2026-01-05T08:00Z", "--end", "2026-01-05T09:00Z"]
    finished = subprocess.run(
        lakehouse(*audit, "--incremental", "--target", "serving"),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 2 and "Traceback" not in finished.stderr
    assert "--target, --incremental: a windowed join's audit compares" in finished.stderr
    assert not (Path(cli_env["LAKEHOUSE_HOME"]) / "warehouse").exists()


def test_a_session_pipelines_audit_refuses_what_it_cannot_compare_before_a_jvm_starts(cli_env):
    """Sessions are compared in the speed table, every group of the range: the serving view and
    --incremental are refused with their reason. With no Java to be found, a refusal that came
    after starting a JVM would name the missing Java instead."""
    env = {**cli_env, "PATH": "/nonexistent"}
    env.pop("JAVA_HOME", None)
    audit = [
        "audit",
        "--pipeline",
        "team_scores_sessions",
        "--start",
        "2026-01-05T12:00Z",
        "--end",
        "2026-01-05T13:00Z",
    ]
    refusals = {
        "--target serving": "--target serving: team_scores_sessions has session windows, whose audit compares the "
        "speed table's sessions with the truth; audit --target speed (the default)",
        "--incremental": "--incremental: team_scores_sessions has session windows, whose bounds move as events "
        "arrive; its audit compares every session of the range (drop --incremental)",
    }
    for option, reason in refusals.items():
        finished = subprocess.run(
            lakehouse(*audit, *option.split()), env=env, capture_output=True, text=True, timeout=60
        )
        assert finished.returncode == 2
        assert finished.stderr.strip().splitlines() == [f"lakehouse: error: {reason}"]
    assert not (Path(cli_env["LAKEHOUSE_HOME"]) / "warehouse").exists()


@pytest.mark.slow
def test_sql_answers_from_another_process_while_the_stream_runs(tmp_path, cli_env):
    settings = make_settings(tmp_path / "home")
    generate(settings, GeneratorConfig(events=1500, events_per_file=500, seed=3))
    stream_env = {**cli_env, "LAKEHOUSE_TRIGGER_INTERVAL": "1s", "LAKEHOUSE_MAX_FILES_PER_TRIGGER": "1"}
    stream = subprocess.Popen(
        lakehouse("stream"),
        env=stream_env,
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        progress_log = tmp_path / "home" / "warehouse" / "ops" / "stream_progress" / "_delta_log"
        deadline = time.time() + 240
        while len(list(progress_log.glob("*.json"))) < 2:  # table created + one batch
            assert stream.poll() is None, stream.stderr.read().decode()[-2000:]
            assert time.time() < deadline, "the stream wrote no progress in time"
            time.sleep(0.5)
        query = (
            "SELECT count(*) AS accepted, max(batch_id) AS last_batch FROM bronze.toll_traffic_events "
            "UNION ALL SELECT count(*), NULL FROM bronze.toll_traffic_events VERSION AS OF 0"
        )
        finished = subprocess.run(
            lakehouse("sql", query, "--format", "json"),
            env=cli_env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert finished.returncode == 0, finished.stderr[-2000:]
        latest, first_version = json.loads(finished.stdout)
        assert latest["accepted"] > 0 and first_version["accepted"] == 0
        assert stream.poll() is None, "the stream stopped while SQL ran beside it"
        # Spark's catalog keeps its default database in the home, not in the directory a command ran from.
        assert not (tmp_path / "spark-warehouse").exists()
    finally:
        os.killpg(stream.pid, signal.SIGKILL)
        stream.wait()


@pytest.mark.slow
def test_unresolvable_jars_are_a_clear_error_naming_the_coordinates(cli_env, tmp_path):
    env = {
        **cli_env,
        "LAKEHOUSE_IVY_DIR": str(tmp_path / "ivy"),
        "LAKEHOUSE_SPARK_PACKAGES": "org.example.nonexistent:no-such-artifact:0.0.1",
    }
    finished = subprocess.run(lakehouse("sql", "SELECT 1"), env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 2
    last_line = finished.stderr.strip().splitlines()[-1]
    assert last_line.startswith("lakehouse: error: Spark's JVM did not start; most likely the JARs ")
    assert "org.example.nonexistent:no-such-artifact:0.0.1" in last_line


def test_a_user_id_without_a_name_is_recorded_by_its_number(monkeypatch):
    import getpass
    import os

    from lakehouse.commands.base import os_user

    def no_name():
        raise KeyError("getpwuid(): uid not found")

    monkeypatch.setattr(getpass, "getuser", no_name)
    assert os_user() == f"uid {os.getuid()}"


def test_something_unforeseen_exits_70_with_its_traceback_not_the_1_of_a_checks_verdict(monkeypatch, capsys):
    from lakehouse import cli
    from lakehouse.errors import ExitCode

    def unforeseen(argv=None):
        raise RuntimeError("an executor was lost")

    monkeypatch.setattr(cli, "main", unforeseen)
    with pytest.raises(SystemExit) as ended:
        cli.entry(["audit"])
    assert ended.value.code == ExitCode.CRASHED == 70
    said = capsys.readouterr().err
    assert "Traceback" in said and "RuntimeError: an executor was lost" in said
    monkeypatch.setattr(cli, "main", lambda argv=None: ExitCode.CHECK_FAILED)
    with pytest.raises(SystemExit) as ended:
        cli.entry(["audit"])
    assert ended.value.code == 1
