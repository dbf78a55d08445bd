"""What every lakehouse DAG shares: default arguments and the way Spark jobs are submitted.

Imported by the DAG files at parse time, so only cheap imports at module level (Airflow's own, and
the Spark provider's operator when a DAG is built). The Delta JARs are resolved when a task runs
(a template), never while parsing.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from datetime import timedelta
from pathlib import Path

from lakehouse.errors import ExitCode
from lakehouse.ops.orchestration import SPARK_CONN_ID
from lakehouse.settings import LOOPBACK, PROJECT_ROOT, Settings
from lakehouse.storage.spark import driver_java_options, spark_submit_jars

OWNER = "lakehouse"
JOBS = Path(os.environ.get("LAKEHOUSE_JOBS_DIR", PROJECT_ROOT / "jobs"))


def default_args(retries: int = 2, retry_delay: timedelta = timedelta(seconds=15)) -> dict:
    return {"owner": OWNER, "retries": retries, "retry_delay": retry_delay}


def hourly_intervals():
    """A data interval per hour, in UTC (a plain "@hourly" would give a point in time in Airflow 3)."""
    from airflow.sdk import CronDataIntervalTimetable

    return CronDataIntervalTimetable("@hourly", timezone="UTC")


def delta_jars() -> str:
    """Jinja macro for ``jars=``: the cached Delta JARs, resolved on the worker when the task runs."""
    return spark_submit_jars(Settings.from_env())


def spark_env() -> dict[str, str]:
    """spark-submit finds Spark through SPARK_HOME (pip's pyspark folder, unless set) and runs the
    Python side with PYSPARK_PYTHON: this interpreter, where lakehouse is installed. Its driver's
    JVM starts before the job's Python, so on a host of the deployment it gets the host's address
    as SPARK_LOCAL_IP here, where the driver's UI and block manager must listen. On one machine
    the JVM keeps what it inherits: the master is the spark_default connection's, which the
    settings may not name, so they cannot tell loopback from an address a cluster reaches."""
    spark_home = os.environ.get("SPARK_HOME")
    if not spark_home:
        spec = importlib.util.find_spec("pyspark")  # locates, does not import
        spark_home = str(Path(spec.origin).parent) if spec and spec.origin else ""
    env = {"SPARK_HOME": spark_home, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    settings = Settings.from_env()
    return env | ({"SPARK_LOCAL_IP": settings.bind_address} if settings.bind_address != LOOPBACK else {})


USER_DEFINED_MACROS = {"lakehouse_delta_jars": delta_jars}


# The jobs that run as Spark Connect clients of the service when LAKEHOUSE_SPARK_REMOTE is set; the
# others still need a JVM of their own (py4j and Delta's Python API; docs/airflow.md).
CONNECT_JOBS = frozenset({"backfill", "correct"})


def through_service(job: str) -> bool:
    return job in CONNECT_JOBS and bool(Settings.from_env().spark_remote)


def spark_job(task_id: str, job: str, application_args, **kwargs):
    """``jobs/<job>.py``'s command: through the Spark service when the settings name one, else
    spark-submit (:class:`SparkJobOperator`) on the ``spark_default`` connection's master."""
    if through_service(job):
        from airflow.providers.standard.operators.python import PythonOperator

        return PythonOperator(task_id=task_id, python_callable=run_job, op_args=[job, *application_args], **kwargs)
    from lakehouse.ops.spark_job_operator import SparkJobOperator

    return SparkJobOperator(task_id=task_id, **spark_job_kwargs(job), application_args=application_args, **kwargs)


def spark_job_mapped(task_id: str, job: str, **kwargs):
    """:func:`spark_job` as a mapped task's ``partial``: expand it over each run's arguments."""
    if through_service(job):
        from airflow.providers.standard.operators.python import PythonOperator

        return PythonOperator.partial(task_id=task_id, python_callable=functools.partial(run_job, job), **kwargs)
    from lakehouse.ops.spark_job_operator import SparkJobOperator

    return SparkJobOperator.partial(task_id=task_id, **spark_job_kwargs(job), **kwargs)


def run_job(job: str, *application_args: str) -> None:
    """The job's command in the task's own process, as a Spark Connect client of the service: no JVM
    here. Fails the task when the command fails: without retries when it exits with a check's verdict."""
    # The command line's module, named as spark-submit names the job's file: the task imports it when
    # it runs, never the DAG processor, and the DAG processor never imports pyspark.
    cli = importlib.import_module("lakehouse.cli")
    code = cli.main([job, *application_args])
    if code != ExitCode.DONE:
        from lakehouse.ops.spark_job_operator import job_failed

        raise job_failed(f"lakehouse {job} {' '.join(application_args)}", code)


def spark_job_kwargs(job: str) -> dict:
    """Arguments shared by every Spark job task (for ``SparkSubmitOperator.partial`` too)."""
    return {
        "application": str(JOBS / f"{job}.py"),
        "conn_id": SPARK_CONN_ID,
        "jars": "{{ lakehouse_delta_jars() }}",
        "env_vars": spark_env(),
        "name": f"lakehouse-{job}",
        "conf": {"spark.driver.extraJavaOptions": driver_java_options(Settings.from_env())},
    }


ALERT_WEBHOOK_CONN_ID = "lakehouse_alerts_webhook"


def raise_alert(context) -> None:
    """Failure callback: append a row to ``ops.alerts`` and post it to the webhook connection, if any."""
    from lakehouse.storage.ops_tables import append_alert

    ti = context["ti"]
    error = context.get("exception")
    message = f"{ti.dag_id}.{ti.task_id} failed in run {ti.run_id}: {error or 'see the task log'}"
    row = append_alert(Settings.from_env(), "airflow", message, ti.dag_id, ti.run_id, ti.task_id)
    url = webhook_url()
    if url:
        post_json(url, {**row, "raised_at": row["raised_at"].isoformat()})


def webhook_url() -> str | None:
    """The alert webhook's URL from the ``lakehouse_alerts_webhook`` connection, or None if not configured."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(ALERT_WEBHOOK_CONN_ID)
    except Exception:  # not configured: alerts go to ops.alerts only
        return None
    if conn.host and "://" in conn.host:
        return conn.host
    scheme = conn.schema or "https"
    port = f":{conn.port}" if conn.port else ""
    return f"{scheme}://{conn.host}{port}"


def post_json(url: str, payload: dict, timeout: float = 10) -> None:
    import json
    import urllib.request

    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()
