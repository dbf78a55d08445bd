"""Hourly audit: the speed layer against the raw log's truth; any unexplained difference fails the run."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from lakehouse.ops.airflow_support import USER_DEFINED_MACROS, default_args, hourly_intervals, raise_alert, spark_job
from lakehouse.ops.orchestration import active_pipelines, audited_window_joins
from lakehouse.settings import Settings

DOC = """
### Audit

Runs `lakehouse audit` (`jobs/audit.py`) over the run's data interval for every pipeline: every
closed window of `gold.<pipeline>__speed` is compared with the truth recomputed from the retained
log, and each difference gets a cause (a session pipeline's sessions are compared by groups of
overlapping sessions). Each windowed join whose two pipelines both run is audited
too: what the stream joined against the join of both logs' truth. The run **fails when a
difference is unexplained**, on its first try: a verdict on the data is not retried. The failure
appends a row to `ops.alerts` and posts it to the `lakehouse_alerts_webhook` connection when one is
configured. Results: `audit.reconciliations`, `audit.reconciliation_differences`.
"""


@dag(
    dag_id="lakehouse_audit",
    schedule=hourly_intervals(),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lakehouse", "audit"],
    default_args={**default_args(retries=1), "on_failure_callback": raise_alert},
    user_defined_macros=USER_DEFINED_MACROS,
)
def lakehouse_audit():
    active = active_pipelines(Settings.from_env())
    # `lakehouse audit --pipeline <join>` audits a windowed join.
    for name in sorted(active) + audited_window_joins(active):
        spark_job(
            f"audit_{name}",
            "audit",
            [
                "--pipeline",
                name,
                "--start",
                "{{ data_interval_start.isoformat() }}",
                "--end",
                "{{ data_interval_end.isoformat() }}",
            ],
        )


lakehouse_audit()
