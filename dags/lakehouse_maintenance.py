"""Daily upkeep: OPTIMIZE, VACUUM (never below what audits replay) and the retained log's retention."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from lakehouse.ops.airflow_support import USER_DEFINED_MACROS, default_args, spark_job
from lakehouse.ops.orchestration import active_pipelines
from lakehouse.settings import Settings

DOC = """
### Maintenance

`jobs/maintain.py` (`lakehouse maintain --pipeline P`) for every pipeline:
- **OPTIMIZE** compacts the small files streaming and chunked backfills leave;
- **VACUUM** removes files no version needs, keeping them for
  `max(LAKEHOUSE_VACUUM_RETENTION, LAKEHOUSE_AUDIT_REPLAY_WINDOW, 7 days)` so an audit re-run with
  its pins can still time-travel to what it read;
- the **retained log** drops ingest hours older than `max(LAKEHOUSE_LOG_RETENTION,
  LAKEHOUSE_AUDIT_REPLAY_WINDOW)`.

With the log on Kafka (`LAKEHOUSE_KAFKA_BOOTSTRAP`), `archive_<pipeline>` first copies each closed
ingest hour of the topic into the file log, once (`lakehouse archive`, no JVM), so that backfills
older than the topic's retention read the archive.
"""


@dag(
    dag_id="lakehouse_maintenance",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lakehouse", "maintenance"],
    default_args=default_args(),
    user_defined_macros=USER_DEFINED_MACROS,
)
def lakehouse_maintenance():
    settings = Settings.from_env()
    for pipeline in active_pipelines(settings):
        maintain = spark_job(f"maintain_{pipeline}", "maintain", ["--pipeline", pipeline])
        if settings.kafka_bootstrap:
            archive.override(task_id=f"archive_{pipeline}")(pipeline) >> maintain


@task
def archive(pipeline: str) -> dict:
    from lakehouse.dataflow.pipelines import get_pipeline
    from lakehouse.storage.archive import Archive

    run = Archive(Settings.from_env(), get_pipeline(pipeline).topic).run()
    return {"hours": [f"{hour:%Y-%m-%dT%H}" for hour in run.hours], "records": run.records, "files": run.files}


lakehouse_maintenance()
