"""Airflow's LocalExecutor, whose task processes start with what every task loads first already loaded.

LocalExecutor forks its workers from the scheduler when it starts, and each worker forks a process
per task: what the scheduler loaded before that, every task process has without loading it, and
freezing the garbage collector around the fork (LocalExecutor does) keeps it out of the tasks'
collections too. Every task first parses its DAG file, which imports the platform's and Airflow's
operator modules and reads the project's declarations; a job through the Spark service
(``airflow_support.run_job``: a backfill chunk, a correction) then imports pyspark's Connect client
with pandas, pyarrow, gRPC and delta-rs. So this executor parses the DAG files once, and imports the
Connect client when the settings name a service, before it starts its workers. Without a service the
jobs run under spark-submit, a process of its own, and the client is not imported. The scheduler
holds all of it once (13 MB of resident memory for the DAG files, 121 MB more for the client,
shared by the forks).

A project's declarations are cached by their files' modification times (lakehouse.project), so a
task process still reads a project changed since the scheduler started. Measured on
scripts/airflow.sh's deployment (docs/airflow.md, "How a backfill's chunks run"): a backfill chunk's
task through a warm service took 0.85-0.93 s, 0.45 s with the client imported, and its DAG file's
first parse 62-72 ms, 4-6 ms after the scheduler's.
"""

from __future__ import annotations

import importlib

from airflow.executors.local_executor import LocalExecutor

from lakehouse.settings import Settings

# What a job through the Spark service imports before its first request: the command line, the
# Connect client (pandas, pyarrow and gRPC with it), delta-rs, and the two jobs' own modules
# (airflow_support.CONNECT_JOBS).
CONNECT_JOB_MODULES = (
    "lakehouse.cli",
    "pyspark.sql.connect.session",
    "deltalake",
    "lakehouse.layers.batch",
    "lakehouse.layers.corrections",
)


class LakehouseLocalExecutor(LocalExecutor):
    """LocalExecutor whose workers start with the DAG files parsed and, with a Spark service named,
    the Spark Connect jobs' modules imported."""

    def start(self) -> None:
        if Settings.from_env().spark_remote:
            for module in CONNECT_JOB_MODULES:
                importlib.import_module(module)
            importlib.import_module("lakehouse.cli").build_parser()  # cached: each task parses with it
        from airflow.dag_processing.dagbag import DagBag

        # A DAG file that fails to parse is recorded by the DagBag and said by the dag-processor.
        DagBag()  # the configured dags folder
        super().start()
