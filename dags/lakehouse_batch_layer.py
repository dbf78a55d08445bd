"""The scheduled batch layer: every hour, recompute that hour's windows once lateness had time to arrive."""

from __future__ import annotations

from datetime import datetime

from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor
from airflow.sdk import dag, task

from lakehouse.eventtime import parse_duration
from lakehouse.ops.airflow_support import USER_DEFINED_MACROS, default_args, hourly_intervals, spark_job
from lakehouse.ops.orchestration import SCHEDULED_BY, active_pipelines, joining_pipeline_names
from lakehouse.settings import Settings

SETTINGS = Settings.from_env()

DOC = f"""
### Scheduled batch layer

Each run recomputes `gold.<pipeline>__batch` for the windows starting in its **data interval**
(one hour) from bronze, and nothing else: a run is a transaction on its interval, so re-running
or backfilling it (Airflow's *Backfill*, or `POST /api/v2/backfills`) gives the same table.

A run waits `{SETTINGS.batch_lateness_delay}` (`LAKEHOUSE_BATCH_LATENESS_DELAY`) past its interval's
end before computing, so events arriving late still make it in; backfilled past intervals start at
once. Later arrivals are folded in by `lakehouse_late_corrections`.

A pipeline that joins a versioned dimension (`toll_traffic_by_region` joins `dim.bridges`) first
applies the change logs waiting in `<home>/dimensions/<name>/inbox` (`apply_dimension_changes`,
`lakehouse dim apply` without files, no JVM).
"""


@dag(
    dag_id="lakehouse_batch_layer",
    schedule=hourly_intervals(),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=2,
    doc_md=DOC,
    tags=["lakehouse", "batch", "scheduled"],
    default_args=default_args(),
    user_defined_macros=USER_DEFINED_MACROS,
)
def lakehouse_batch_layer():
    # Reschedule mode: waiting for lateness holds no worker slot.
    wait = TimeDeltaSensor(
        task_id="wait_for_late_events",
        delta=parse_duration(SETTINGS.batch_lateness_delay),
        mode="reschedule",
        poke_interval=60,
    )
    joining = [pipeline for pipeline in active_pipelines(SETTINGS) if pipeline in joining_pipeline_names()]
    # The dimensions' waiting changes first, so that the hour joins the versions they add.
    dimensions = apply_dimension_changes() if joining else None
    for pipeline in active_pipelines(SETTINGS):
        recompute = spark_job(
            f"recompute_{pipeline}",
            "backfill",
            [
                "--pipeline",
                pipeline,
                "--start",
                "{{ data_interval_start.isoformat() }}",
                "--end",
                "{{ data_interval_end.isoformat() }}",
                "--source",
                "bronze",
                "--chunk",
                "1h",
                "--label",
                "{{ run_id }}",
                "--triggered-by",
                f"{{{{ dag_run.triggering_user_name or '{SCHEDULED_BY}' }}}}",
            ],
        )
        wait >> recompute
        if pipeline in joining:
            dimensions >> recompute


# One at a time across runs: each dimension has one writer.
@task(max_active_tis_per_dag=1)
def apply_dimension_changes() -> list[str]:
    """Every dimension's inbox (``lakehouse dim apply``, no JVM)."""
    from lakehouse.dataflow.pipelines import all_dimensions
    from lakehouse.storage.dimensions import apply_inbox

    settings = Settings.from_env()
    return [report.summary() for dimension in all_dimensions().values() for report in apply_inbox(settings, dimension)]


lakehouse_batch_layer()
