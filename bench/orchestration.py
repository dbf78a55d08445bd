"""Orchestration overhead (benchmark 4, last figure): a day backfilled through Airflow, one task per
hourly chunk, against one ``lakehouse backfill`` process over the whole day.

The Airflow sides run the ``lakehouse_backfill`` DAG: on a running Airflow (bench.live_airflow, the
deployment scripts/airflow.sh starts), triggered through its REST API as the UI's form triggers it,
each chunk a task process of the scheduler's executor, the goal's side; and by ``airflow dags test``
on a scratch Airflow home, the same tasks in one process, in sequence as the DAG's one-slot pool runs
them. The chunks run with ``LAKEHOUSE_SPARK_REMOTE`` naming the run's Spark service on the suite's
home (bench.service), so that each chunk is a Spark Connect client (no JVM), or, by ``dags test``,
one ``spark-submit jobs/backfill.py`` each. Every side must leave the same vehicles in ``__batch``,
or the ratio would compare different work. The sides through the service and the one job run
untimed first (WARM_UP_RUNS): the service is measured warm, as a deployment meets it, and the
baseline without a cold first run.

The suite runs on a home of its own, made afresh each time from the data set's bronze table and
log: the chunked side commits three times a chunk (``__batch``, ``ops.batch_coverage``,
``ops.backfill_runs``) against the one job's three in all, and a commit costs more the longer the
table's ``_delta_log`` (the log_growth suite). On the data set's home those tables carried every
earlier run's commits, 1,433 of them by 34d26ca, and each run measured a slower chunked side than
the one before for that alone (a delta-rs append there: 25 ms, 7 ms on a new table).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from pyspark.sql import functions as F

from bench.data import PIPELINE, DataSet, link_log_files, scratch_home, settings_for
from bench.live_airflow import LiveAirflow
from bench.measure import summary, wait_until_idle
from bench.service import SharedService
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.location import local_path
from lakehouse.serving.batch_cache import SETTLED_SECONDS
from lakehouse.settings import PROJECT_ROOT
from lakehouse.storage.catalog import pipeline_tables

BIN = Path(sys.executable).parent


def _iso(moment) -> str:
    return f"{moment.isoformat()}Z"


def airflow_env(airflow_home: Path, home: Path, spark_master: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(PROJECT_ROOT),
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark_master}),
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_PIPELINES": PIPELINE,
        # The data set's event time is fixed (reproducible); its log is kept for as long as it exists.
        "LAKEHOUSE_LOG_RETENTION": "3650d",
    }


def _run(command: list[str], env: dict[str, str]) -> None:
    process = subprocess.run(command, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True)
    if process.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({process.returncode}):\n{process.stdout[-2000:]}\n{process.stderr[-3000:]}"
        )


# The side on a running Airflow (bench.live_airflow): triggered through the REST API as the UI does,
# its chunks queued by the scheduler and run by the platform's LocalExecutor, each in a task process.
ON_SCHEDULER = "airflow_scheduler_hourly_chunks_through_service"
# The sides whose chunks are clients of the run's Spark service (LAKEHOUSE_SPARK_REMOTE set).
THROUGH_SERVICE = frozenset({"airflow_hourly_chunks_through_service", ON_SCHEDULER})
# The sides run untimed first: those through the service, and the one job, the baseline.
WARMED_UP = THROUGH_SERVICE | {"one_job"}
# Untimed runs of each of those before the timed ones. The service's JIT takes more than one run to
# settle: on the scheduler's side at ea4d77d, a fresh service's runs took 24.8, 20.0, 16.5, 17.0, 16.5
# and 16.7 s, so with one warm-up run the first timed run still measured a warming service.
WARM_UP_RUNS = 2


# Before each side, the service gets time to finish what the last side's commits started: it
# caches a batch table again once the table has held still for SETTLED_SECONDS (checked every
# second), a rebuild of a few seconds of both cores. Without the wait that rebuild landed inside
# the next side: the one job's runs spread from 8.2 to 14.0 s in one run of the suite at 9c99ab3.
QUIET_AFTER_SECONDS = SETTLED_SECONDS + 2


def _timed(command: list[str], env: dict[str, str]) -> float:
    """Seconds ``command`` took to end well (a failed run raises), started on a quiet machine."""
    wait_until_idle(QUIET_AFTER_SECONDS)
    began = time.perf_counter()
    _run(command, env)
    return time.perf_counter() - began


def _paused_while(airflow: LiveAirflow, run) -> float:
    """``run()``'s seconds with the running Airflow paused (bench.live_airflow says why)."""
    with airflow.paused():
        return run()


def _timed_on_scheduler(airflow: LiveAirflow, conf: dict) -> float:
    """Seconds from the trigger to the run's end on the running Airflow, started on a quiet machine."""
    wait_until_idle(QUIET_AFTER_SECONDS)
    return airflow.backfill_seconds(conf)


def _trigger_conf(start, end) -> dict:
    """The backfill DAG's parameters for the range in hourly chunks, as the UI's trigger form sends them."""
    return {"pipeline": PIPELINE, "start": _iso(start), "end": _iso(end), "source": "bronze", "chunk": "1h",
            "reprocess": "redo", "dry_run": False}  # fmt: skip


def _commands(start, end, hours: int) -> dict[str, list[str]]:
    """The sides run as commands: the backfill DAG in hourly chunks by ``airflow dags test``
    (spark-submit per chunk, or through the Spark service), and one ``lakehouse backfill`` of the range."""
    conf = _trigger_conf(start, end)
    one_job = ["backfill", "--pipeline", PIPELINE, "--start", _iso(start), "--end", _iso(end),
               "--source", "bronze", "--chunk", f"{hours}h"]  # fmt: skip
    dag_test = [str(BIN / "airflow"), "dags", "test", "lakehouse_backfill", "-c", json.dumps(conf)]
    return {
        "airflow_hourly_chunks": dag_test,
        "airflow_hourly_chunks_through_service": dag_test,  # the same DAG, with LAKEHOUSE_SPARK_REMOTE set
        "one_job": [str(BIN / "lakehouse"), *one_job],
    }


# Airflow's dag-processor imports the modules a DAG file imports once, before parsing
# ([dag_processor] parsing_pre_import_modules): the operators' own import is not parse time.
DAG_PARSE_PROBE = """
import json
import airflow.providers.apache.spark.operators.spark_submit, airflow.providers.standard.sensors.time_delta
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder="dags")
print(json.dumps({"errors": bag.import_errors, "seconds": sum(s.duration.total_seconds() for s in bag.dagbag_stats)}))
"""


def dag_parse_seconds(env: dict[str, str]) -> float:
    """Seconds Airflow takes to parse every DAG file, as its dag-processor does on each pass."""
    process = subprocess.run(
        [sys.executable, "-c", DAG_PARSE_PROBE], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    report = json.loads(next(line for line in process.stdout.splitlines() if line.startswith("{")))
    if report["errors"]:
        raise RuntimeError(f"DAG files failed to parse: {report['errors']}")
    return report["seconds"]


def suite_home(data: DataSet) -> Path:
    """A home holding the data set's bronze table and log, and no other table yet."""
    home = scratch_home("orchestration")
    bronze = pipeline_tables(get_pipeline(PIPELINE)).bronze
    shutil.copytree(local_path(bronze.uri(data.settings())), local_path(bronze.uri(settings_for(home))))
    link_log_files(data.log_files(), data.home / "log", home / "log")
    return home


def _vehicles(spark, home: Path, start, end) -> int:
    """The vehicles ``__batch`` holds for the range: every side must leave the same."""
    batch_uri = pipeline_tables(get_pipeline(PIPELINE)).batch.uri(settings_for(home))
    window = (F.col("window_start") >= F.lit(start)) & (F.col("window_start") < F.lit(end))
    return spark.read.format("delta").load(batch_uri).where(window).agg(F.sum("vehicles")).first()[0] or 0


def orchestration(
    spark, data: DataSet, runs: int, hours: int, sides: tuple[str, ...] = (), spark_master: str = "local[2]"
) -> dict:
    """Seconds for ``hours`` hourly chunks as Airflow tasks (spark-submit each, or through the Spark
    service) vs one job over the same range, on the suite's own home (``suite_home``).

    Args:
        spark: the bench's session, to count what each side left in ``__batch``.
        data: the data set whose bronze table and log the sides backfill.
        runs: timed runs of each side.
        hours: the hourly chunks (and the one job's range).
        sides: the Airflow sides to time (all when empty); one job, the baseline, always runs.
        spark_master: where spark-submit runs each chunk.
    """
    home = suite_home(data)
    env = airflow_env(scratch_home("airflow"), home, spark_master)
    _run([str(BIN / "airflow"), "db", "migrate"], env)  # set-up, not timed
    served = SharedService.on_home(home)
    try:
        remote = {**env, "LAKEHOUSE_SPARK_REMOTE": served.connect_url()}  # started once, not timed
        commands, span = _sides(data, hours, sides)
        runners = {name: functools.partial(_timed, command, remote if name in THROUGH_SERVICE else env)
                   for name, command in commands.items()}  # fmt: skip
        on_scheduler = not sides or ON_SCHEDULER in sides
        with LiveAirflow(remote) if on_scheduler else contextlib.nullcontext() as airflow:  # started once, not timed
            if airflow:
                others = {name: functools.partial(_paused_while, airflow, run) for name, run in runners.items()}
                runners = {ON_SCHEDULER: functools.partial(_timed_on_scheduler, airflow, _trigger_conf(*span))} | others
            measured = _measured(spark, home, runners, span, runs)
    finally:
        served.stop()
    return {
        "hours": hours,
        "spark_master": spark_master,
        "dag_parse_seconds": summary([dag_parse_seconds(env) for _ in range(runs)]),
        "service_started_s": served.started_s,
        "jobs": measured,
    }


def _sides(data: DataSet, hours: int, sides: tuple[str, ...]) -> tuple[dict[str, list[str]], tuple]:
    """The commands of the sides asked for and the one job, and the range they backfill."""
    start, end = data.start, data.start + timedelta(hours=hours)
    commands = {name: command for name, command in _commands(start, end, hours).items()
                if not sides or name in sides or name == "one_job"}  # fmt: skip
    return commands, (start, end)


def _measured(spark, home: Path, runners: dict, span: tuple, runs: int) -> dict:
    """Each side's seconds over ``runs`` runs (``runners``: a side's timed run, by name), and the
    vehicles it left in ``__batch`` for ``span``."""
    start, end = span
    seconds: dict[str, list[float]] = {name: [] for name in runners}
    vehicles: dict[str, int] = {}
    # WARM_UP_RUNS untimed runs of the sides WARMED_UP names first. The service is a long-lived process and a
    # deployment meets it warm, its JIT compiled and its tables' logs read (as the sql_latency suite
    # measures it): a run of the chunked side on a service fresh from its start took 34 s, the next
    # 24 s. The one job starts a JVM every run, and is warmed alike so that a cold first run of the
    # baseline cannot flatter the ratio (at 6081b50, without one, its runs took 14.4-19.6 s; at
    # 5da9265, with one, 12.8-14.4 s). A spark-submit side's run would cost 7 minutes and warm
    # nothing its 24 JVMs do not.
    warm_up = {name: [run() for _ in range(WARM_UP_RUNS)] for name, run in runners.items() if name in WARMED_UP}
    for _ in range(runs):
        for name, run in runners.items():
            seconds[name].append(run())
            vehicles[name] = _vehicles(spark, home, start, end)
    if len(set(vehicles.values())) != 1:
        raise RuntimeError(f"the two backfills disagree on the vehicles counted: {vehicles}")
    return {
        name: {"seconds": summary(values), "vehicles": vehicles[name]}
        | ({"warm_up_seconds": [round(value, 2) for value in warm_up[name]]} if name in warm_up else {})
        for name, values in seconds.items()
    }
