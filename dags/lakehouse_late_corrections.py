"""Fold late events into the batch layer every 15 minutes (the correction job)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from lakehouse.ops.airflow_support import USER_DEFINED_MACROS, default_args, spark_job
from lakehouse.ops.orchestration import active_pipelines
from lakehouse.settings import Settings

DOC = """
### Late corrections

Every 15 minutes, `jobs/correct.py` (`lakehouse correct --pipeline P`) recomputes the windows
that late events changed since the last correction, writes them to `gold.<pipeline>__batch` and
records each change as a retraction pair in `audit.corrections`. Idempotent: a retry or an
overlapping run finds nothing left to correct.
"""


@dag(
    dag_id="lakehouse_late_corrections",
    schedule="*/15 * * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lakehouse", "batch", "corrections"],
    default_args=default_args(),
    user_defined_macros=USER_DEFINED_MACROS,
)
def lakehouse_late_corrections():
    for pipeline in active_pipelines(Settings.from_env()):
        spark_job(f"correct_{pipeline}", "correct", ["--pipeline", pipeline])


lakehouse_late_corrections()
