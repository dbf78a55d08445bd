"""The scheduler's executor (lakehouse.ops.local_executor): its workers start with the DAG files'
modules and the project loaded and, with a Spark service named, the Connect client's libraries, which
a process forked from the scheduler (as a worker forks a task's) uses."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from lakehouse.settings import PROJECT_ROOT

# Started as the scheduler starts it, then: the modules imported, the libraries each worker has
# mapped, and what a process forked from the scheduler (as a worker forks a task) did with them.
PROBE = textwrap.dedent("""
    import json, os, sys
    from lakehouse.ops.local_executor import CONNECT_JOB_MODULES, LakehouseLocalExecutor
    from lakehouse.project.project import _cached

    executor = LakehouseLocalExecutor(parallelism=2)
    executor.start()
    try:
        mapped = [open(f"/proc/{pid}/maps").read() for pid in executor.workers]
        child = os.fork()
        if child == 0:  # a task's process: the Connect client's libraries in use
            import grpc, pandas, pyarrow as pa, pyarrow.compute as pc
            assert pc.sum(pa.array([1, 2])).as_py() == 3 and len(pandas.DataFrame({"a": [1]})) == 1
            grpc.insecure_channel("127.0.0.1:1").close()
            os._exit(0)
        _, status = os.waitpid(child, 0)
        print(json.dumps({
            "imported": [m for m in CONNECT_JOB_MODULES if m in sys.modules],
            "dag_modules": "lakehouse.ops.orchestration" in sys.modules,
            "projects_cached": _cached.cache_info().currsize,
            "parsers_built": sys.modules["lakehouse.cli"].build_parser.cache_info().currsize
            if "lakehouse.cli" in sys.modules else 0,
            "workers_with_pyarrow": sum("libarrow" in maps for maps in mapped),
            "workers": len(mapped),
            "forked_task_exit": os.waitstatus_to_exitcode(status),
        }))
    finally:
        executor.end()
""")


def started_executor(tmp_path, **env: str) -> dict:
    home = {
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "LAKEHOUSE_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(PROJECT_ROOT),
        "PATH": "/usr/bin:/bin",
    }
    ran = subprocess.run(
        [sys.executable, "-c", PROBE], env={**home, **env}, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(next(line for line in ran.stdout.splitlines() if line.startswith("{")))


def test_with_a_spark_service_the_workers_start_with_the_connect_client_loaded(tmp_path):
    started = started_executor(tmp_path, LAKEHOUSE_SPARK_REMOTE="sc://127.0.0.1:15002")
    assert started["imported"] == ["lakehouse.cli", "pyspark.sql.connect.session", "deltalake",
                                   "lakehouse.layers.batch", "lakehouse.layers.corrections"]  # fmt: skip
    assert started["workers_with_pyarrow"] == started["workers"] == 2
    assert started["forked_task_exit"] == 0
    assert started["dag_modules"] and started["projects_cached"] == 1 and started["parsers_built"] == 1


def test_without_a_spark_service_only_the_dag_files_are_loaded_for_spark_submits_jobs(tmp_path):
    started = started_executor(tmp_path)
    assert started["imported"] == [] and started["workers_with_pyarrow"] == 0 and started["workers"] == 2
    assert started["dag_modules"] and started["projects_cached"] == 1  # every task parses its DAG file
