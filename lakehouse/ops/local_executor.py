"""Airflow's LocalExecutor, with the Spark Connect client already imported in every task process.

A job through the Spark service (``airflow_support.run_job``: a backfill chunk, a correction) runs
in its task's own process, and its first step is importing pyspark's Connect client with pandas,
pyarrow, gRPC and delta-rs: about 0.4 s of a backfill chunk's 0.85 s task on a real scheduler.
LocalExecutor forks its workers from the scheduler when it starts, and each worker forks a process
per task; what the scheduler imported before that, every task process has without importing it.
Freezing the garbage collector around the fork (LocalExecutor does) also keeps those modules'
objects out of the tasks' collections.

So when the settings name a Spark service, this executor imports the modules those jobs need before
it starts its workers. Without a service the jobs go through spark-submit, a process of its own,
and nothing is imported. The scheduler holds the modules once (about 100 MB, shared by the forks).
Measured on scripts/airflow.sh's deployment (docs/airflow.md, "How a backfill's chunks run"): a
day's backfill in 24 hourly chunks through a warm service, each chunk task 0.85-0.93 s before, 0.45 s
with the modules imported.
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


class ConnectClientLocalExecutor(LocalExecutor):
    """LocalExecutor whose workers start with the Spark Connect jobs' modules imported."""

    def start(self) -> None:
        if Settings.from_env().spark_remote:
            for module in CONNECT_JOB_MODULES:
                importlib.import_module(module)
        super().start()
