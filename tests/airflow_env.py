"""Environments for running Airflow from the tests: a scratch home for ``dag.test()`` (SQLite is
enough for single runs) and the variables every Airflow process of the tests shares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def airflow_env(airflow_home: Path, lakehouse_home: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(airflow_home / "logs"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        "LAKEHOUSE_HOME": str(lakehouse_home),
        "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
        "LAKEHOUSE_DRIVER_MEMORY": "1g",
        "LAKEHOUSE_PIPELINES": "toll_traffic",
        **extra,
    }


def migrate_scratch_db(airflow_home: Path) -> None:
    env = airflow_env(airflow_home, airflow_home / "unused")
    for command in (["db", "migrate"], ["pools", "set", "lakehouse_backfill", "1", "backfill chunks"]):
        subprocess.run([str(VENV_BIN / "airflow"), *command], env=env, check=True, capture_output=True,
                       timeout=600, cwd=PROJECT)


def dag_test(airflow_home: Path, lakehouse_home: Path, dag_id: str, logical_date: str = "none",
             conf: dict | None = None, **extra_env: str) -> dict:
    """Run ``dag.test()`` of one DAG in a fresh process; its run state and task states."""
    process = subprocess.run(
        [sys.executable, "-m", "tests.airflow_harness", dag_id, logical_date, json.dumps(conf or {})],
        env=airflow_env(airflow_home, lakehouse_home, **extra_env), capture_output=True, text=True,
        timeout=900, cwd=PROJECT,
    )
    lines = process.stdout.strip().splitlines()
    if process.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise AssertionError(f"dag.test of {dag_id} crashed:\n{process.stdout[-4000:]}\n{process.stderr[-4000:]}")
    result = json.loads(lines[-1])
    result["output"] = process.stdout + process.stderr
    return result
