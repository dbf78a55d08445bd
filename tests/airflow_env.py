"""Environments for running Airflow from the tests: a scratch home for ``dag.test()`` (SQLite is
enough for single runs) and the variables every Airflow process of the tests shares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.airflow_harness import RESULT_PREFIX
from tests.conftest import LONG_LIVED_JAVA_OPTIONS

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
        subprocess.run(
            [str(VENV_BIN / "airflow"), *command], env=env, check=True, capture_output=True, timeout=600, cwd=PROJECT
        )


class DagTestRunner:
    """One ``tests.airflow_harness`` process for a module's DAG tests: Airflow imported and its JVM
    started once, each DAG run with ``dag.test()`` against the lakehouse home a test names."""

    def __init__(self, airflow_home: Path):
        migrate_scratch_db(airflow_home)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.airflow_harness"],
            # A long-lived JVM runs every DAG's jobs: the full JIT, the serial collector (tests/conftest.py).
            env=airflow_env(
                airflow_home, airflow_home / "unused", LAKEHOUSE_DRIVER_JAVA_OPTIONS=LONG_LIVED_JAVA_OPTIONS
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=PROJECT,
            bufsize=1,
        )

    def run(
        self,
        lakehouse_home: Path,
        dag_id: str,
        logical_date: str | None = None,
        conf: dict | None = None,
        **extra_env: str,
    ) -> dict:
        """Run ``dag_id`` once; its run state, task states and output.

        Args:
            lakehouse_home: the LAKEHOUSE_HOME the DAG's tasks work on.
            dag_id: the DAG to run.
            logical_date: ISO instant of the run (its data interval ends there), or None for a manual run.
            conf: the run's parameters.
            **extra_env: more environment variables for this run only (settings, Airflow connections).
        """
        request = {
            "dag_id": dag_id,
            "logical_date": logical_date,
            "conf": conf or {},
            "env": {"LAKEHOUSE_HOME": str(lakehouse_home), **extra_env},
        }
        self.process.stdin.write(json.dumps(request) + "\n")
        for line in self.process.stdout:
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX) :])
                if result["state"] == "crashed":
                    raise AssertionError(f"dag.test of {dag_id} crashed:\n{result['output'][-4000:]}")
                return result
        raise AssertionError(f"the DAG test harness exited (code {self.process.wait()}) while running {dag_id}")

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
