"""Runs DAGs with ``dag.test()`` in a process of their own, one after another, on one warm JVM.

Used by the DAG tests as ``python -m tests.airflow_harness``: each line on stdin is a JSON request
``{"dag_id", "logical_date", "conf", "env"}``; for each, one line on stdout holds the run's state,
each task's state and everything the run printed. A separate process gives Airflow its own
configuration (read once at import) and keeps it out of the test process.

What the DAG tests check is each DAG's own logic: its parameters, its templated arguments, its task
graph, its callbacks. So a Spark task runs its job file (``jobs/<job>.py``, with the arguments the
DAG rendered for it) in this process, where the JVM stays warm from task to task, instead of paying a
spark-submit and a JVM start per task. spark-submit itself is exercised by the end-to-end tests on a
real scheduler (``tests/test_airflow_e2e.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import tempfile
from datetime import datetime

RESULT_PREFIX = "@@dag-test-result "


def run_job_in_this_process(operator, context) -> None:
    """``SparkSubmitOperator.execute``, in this process: the job's exit code decides the task's fate,
    reported as SparkSubmitHook reports spark-submit's (what SparkJobOperator reads)."""
    from airflow.sdk.exceptions import AirflowException

    argv = [operator.application, *(operator.application_args or [])]
    saved_argv, sys.argv = sys.argv, argv
    try:
        runpy.run_path(operator.application, run_name="__main__")
    except SystemExit as finished:
        if finished.code not in (0, None):
            raise AirflowException(f"Cannot execute: {operator.application}. Error code is: {finished.code}.") from None
    finally:
        sys.argv = saved_argv


@contextlib.contextmanager
def environment(changes: dict[str, str]):
    saved = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def captured_output():
    """Everything written to fds 1 and 2 inside (Airflow's task logs included), as a list of one string."""
    captured: list[str] = []
    with tempfile.TemporaryFile(mode="w+") as sink:
        sys.stdout.flush(), sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(sink.fileno(), 1), os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
            sink.seek(0)
            captured.append(sink.read())


def run_dag(request: dict) -> dict:
    from airflow.dag_processing.dagbag import DagBag

    dag_id = request["dag_id"]
    with environment(request.get("env", {})), captured_output() as output:
        # Parsed afresh per request: DAG files read their settings from the environment when parsed.
        dag = DagBag(dag_folder=f"dags/{dag_id}.py").get_dag(dag_id)
        kwargs: dict = {"run_conf": request.get("conf") or {}}
        if request.get("logical_date"):
            when = datetime.fromisoformat(request["logical_date"])
            kwargs.update(logical_date=when, run_after=when)
        run = dag.test(**kwargs)
        states = {
            f"{ti.task_id}[{ti.map_index}]" if ti.map_index >= 0 else ti.task_id: str(ti.state)
            for ti in run.get_task_instances()
        }
    return {"state": str(run.state), "tasks": states, "output": output[0]}


def main() -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    SparkSubmitOperator.execute = run_job_in_this_process
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    for line in sys.stdin:
        try:
            reply = run_dag(json.loads(line))
        except Exception as error:  # the test reports it; the harness stays up for the next request
            reply = {"state": "crashed", "tasks": {}, "output": f"{type(error).__name__}: {error}"}
        replies.write(RESULT_PREFIX + json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
