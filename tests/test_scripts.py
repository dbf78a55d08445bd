"""The project's scripts fail with a message that says why, never with a bare exit code."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.airflow_env import PROJECT


def run_script(root: Path, *args: str, **variables: str) -> subprocess.CompletedProcess:
    """The script run from ``root`` with PATH, HOME and ``variables`` as its whole environment."""
    scrubbed = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **variables}
    return subprocess.run(
        ["env", "-i", *(f"{k}={v}" for k, v in scrubbed.items()), "bash", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_airflow_script_in_a_checkout_without_setup_says_to_run_make_setup(tmp_path):
    shutil.copytree(PROJECT / "scripts", tmp_path / "scripts")
    failed = run_script(tmp_path, "scripts/airflow.sh", "start")
    assert failed.returncode == 1 and "run 'make setup' first" in failed.stderr


def test_airflow_script_with_an_unknown_command_prints_its_usage(tmp_path):
    shutil.copytree(PROJECT / "scripts", tmp_path / "scripts")
    wrong = run_script(tmp_path, "scripts/airflow.sh", "begin")
    assert wrong.returncode == 2 and "usage:" in wrong.stderr


def test_airflow_env_without_any_lakehouse_variable_writes_the_environment(tmp_path):
    """The bug a newcomer met: no LAKEHOUSE_* variable made `make airflow` exit 1 without a word."""
    shutil.copytree(PROJECT / "scripts", tmp_path / "scripts")
    (tmp_path / ".venv").symlink_to(PROJECT / ".venv")
    env = run_script(tmp_path, "scripts/airflow.sh", "env")
    assert env.returncode == 0, env.stderr
    assert f"export AIRFLOW__CORE__DAGS_FOLDER='{tmp_path}/dags'" in env.stdout
    assert "LAKEHOUSE_" not in env.stdout.replace("LAKEHOUSE_SPARK_CONN", "")


def test_airflow_env_on_a_deployment_host_listens_on_its_address_and_uses_the_database_and_cluster_given(tmp_path):
    """What `lakehouse hosts run airflow` gives (the host's address, the cluster's master) and the
    database the metastore host printed: Airflow's URLs name the host's address, not loopback."""
    shutil.copytree(PROJECT / "scripts", tmp_path / "scripts")
    (tmp_path / ".venv").symlink_to(PROJECT / ".venv")
    database = "postgresql+psycopg2://airflow:secret@10.77.0.4:54329/airflow?sslmode=verify-full"
    given = {"LAKEHOUSE_BIND_ADDRESS": "10.77.0.9", "LAKEHOUSE_SPARK_MASTER": "spark://spark-master:7077"}
    env = run_script(tmp_path, "scripts/airflow.sh", "env", AIRFLOW_DATABASE_URL=database, **given)
    assert env.returncode == 0, env.stderr
    for line in (
        "export AIRFLOW__API__HOST=10.77.0.9",
        "export AIRFLOW__API__BASE_URL='http://10.77.0.9:8080'",
        "export AIRFLOW__CORE__EXECUTION_API_SERVER_URL='http://10.77.0.9:8080/execution/'",
        f"export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN='{database}'",
        """export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "spark://spark-master", "port": 7077}'""",
    ):
        assert line in env.stdout.splitlines(), (line, env.stdout)
    assert "127.0.0.1:8080" not in env.stdout and "@127.0.0.1:" not in env.stdout


def test_airflow_env_on_one_machine_is_on_loopback_with_its_own_database_and_local_spark(tmp_path):
    shutil.copytree(PROJECT / "scripts", tmp_path / "scripts")
    (tmp_path / ".venv").symlink_to(PROJECT / ".venv")
    env = run_script(tmp_path, "scripts/airflow.sh", "env")
    assert env.returncode == 0, env.stderr
    assert "export AIRFLOW__API__BASE_URL='http://127.0.0.1:8080'" in env.stdout.splitlines()
    assert """export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'""" in env.stdout
    assert re.search(
        r"SQL_ALCHEMY_CONN='postgresql\+psycopg2://airflow:[^@']+@127\.0\.0\.1:54329/airflow\?", env.stdout
    )


def test_a_misspelt_login_stops_the_airflow_script_before_anything_starts_or_is_written(tmp_path):
    shutil.copytree(PROJECT / "scripts", tmp_path / "scripts")
    (tmp_path / ".venv").symlink_to(PROJECT / ".venv")
    failed = subprocess.run(
        ["bash", "scripts/airflow.sh", "start"],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "AIRFLOW_LOGIN": "ldap"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failed.returncode == 2
    assert failed.stderr.startswith("lakehouse: error: AIRFLOW_LOGIN='ldap': use database or directory\n"), (
        failed.stderr
    )
    assert not (tmp_path / ".cache").exists()


def test_a_failing_step_of_the_airflow_script_names_the_command(tmp_path):
    shutil.copytree(PROJECT / "scripts", tmp_path / "scripts")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    # An "airflow" that exists but whose interpreter is broken: the secrets step fails.
    for tool in ("airflow", "python"):
        (tmp_path / ".venv" / "bin" / tool).write_text("#!/bin/sh\nexit 3\n")
        (tmp_path / ".venv" / "bin" / tool).chmod(0o755)
    failed = run_script(tmp_path, "scripts/airflow.sh", "start")
    assert failed.returncode != 0
    assert "scripts/airflow.sh: failed (exit 3) at line" in failed.stderr, failed.stderr


def test_the_supervisor_backs_off_while_a_process_fails_at_once_and_starts_over_after_a_steady_run(tmp_path):
    """scripts/supervise.sh starts a process again each time it exits. While the process fails at
    once, each delay doubles up to the bound; a run that lasted long enough resets it."""
    # Runs 1-3 and 5 fail at once, run 4 runs for the steady time first, run 6 ends the supervisor.
    process = """
        runs=$(( $(cat runs 2>/dev/null || echo 0) + 1 )); echo "$runs" > runs
        case "$runs" in 4) sleep 3 ;; 6) kill "$PPID" ;; esac
        exit 3
    """
    timing = {"SUPERVISE_DELAY_S": "1", "SUPERVISE_MAX_DELAY_S": "2", "SUPERVISE_STEADY_S": "3"}
    supervised = subprocess.run(
        ["bash", str(PROJECT / "scripts" / "supervise.sh"), "bash", "-c", process],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], **timing},
        capture_output=True,
        text=True,
        timeout=60,
    )
    restarts = [line for line in supervised.stdout.splitlines() if "exited with code 3" in line]
    delays = [int(line.split("starting it again in ")[1].split()[0]) for line in restarts]
    assert delays == [1, 2, 2, 1, 2], supervised.stdout


def test_the_supervisor_stops_and_restarts_a_process_that_hangs_failing_its_liveness_check(tmp_path):
    """A process that stays up but fails its liveness check (SUPERVISE_LIVENESS) that many times in
    a row is stopped with the processes it started, and started again."""
    # Run 1 hangs (the check looks for no `hung` file) with a child of its own; run 2 is healthy for
    # a few checks, then ends the supervisor.
    process = """
        runs=$(( $(cat runs 2>/dev/null || echo 0) + 1 )); echo "$runs" > runs
        if [ "$runs" = 1 ]; then touch hung; sleep 1000 & echo $! > child; wait; fi
        rm -f hung; sleep 3; kill "$PPID"
    """
    timing = {"SUPERVISE_DELAY_S": "0", "SUPERVISE_LIVENESS_EVERY_S": "1", "SUPERVISE_LIVENESS_GRACE_S": "0"}
    liveness = {"SUPERVISE_LIVENESS": "test ! -e hung", "SUPERVISE_LIVENESS_FAILURES": "2"}
    supervised = subprocess.run(
        ["bash", str(PROJECT / "scripts" / "supervise.sh"), "bash", "-c", process],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], **timing, **liveness},
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = supervised.stdout
    assert log.count("failed its liveness check 2 times in a row; stopping it") == 1, log
    assert log.count("exited with code 143") == 1, log  # the hung run, by its TERM; run 2 is healthy
    assert (tmp_path / "runs").read_text().strip() == "2"
    assert not Path(f"/proc/{(tmp_path / 'child').read_text().strip()}").exists()  # its child went with it
