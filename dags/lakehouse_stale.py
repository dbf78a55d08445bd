"""Recompute what the batch layer left stale: hours computed by an older definition of a pipeline,
never recomputed, or recomputed before later events reached bronze."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from lakehouse.ops.airflow_support import USER_DEFINED_MACROS, default_args, spark_job
from lakehouse.ops.orchestration import active_pipelines
from lakehouse.settings import Settings

DOC = """
### Stale hours

For each pipeline of the project, `lakehouse stale --fill` (docs/pipelines.md, "Changing a
pipeline") lists the hours of window starts its batch layer must recompute, and recomputes them
from bronze, one backfill per run of consecutive hours:

- `older_definition`: the pipeline's declaration or row rules changed since (another pipeline's
  change does not count);
- `never_recomputed`: bronze has events there, the batch layer never recomputed them;
- `later_data`: events reached bronze after the recomputation, and no correction run folded them.

The task's log lists each hour with its reason; a run that finds nothing writes nothing.
"""


@dag(
    dag_id="lakehouse_stale",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lakehouse", "batch", "scheduled"],
    default_args=default_args(),
    user_defined_macros=USER_DEFINED_MACROS,
)
def lakehouse_stale():
    for pipeline in active_pipelines(Settings.from_env()):
        spark_job(f"fill_stale_{pipeline}", "stale", ["--pipeline", pipeline, "--fill"])


lakehouse_stale()
