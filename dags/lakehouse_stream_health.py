"""Every five minutes: is the speed layer alive and keeping up? Judged on the stream's figures, the
ones its metrics endpoint serves (lakehouse.ops.stream_figures)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

from lakehouse.ops.airflow_support import default_args
from lakehouse.ops.orchestration import active_pipelines
from lakehouse.settings import Settings

DOC = """
### Stream health

Reads each pipeline's stream figures (no Spark: `ops.stream_progress` and a few more rows through
delta-rs; the same figures the stream's metrics endpoint serves to Prometheus) and fails
with a message that says what is wrong when the speed layer is **stale** (no micro-batch for
`LAKEHOUSE_STREAM_MAX_STALENESS`) or **falling behind** (its lag grew at each of the last
`LAKEHOUSE_STREAM_LAG_BATCHES` micro-batches, by more than one trigger interval in all, to more than
`LAKEHOUSE_STREAM_LAG_TOLERANCE`). Same check
on the command line: `lakehouse health`.
"""


@dag(
    dag_id="lakehouse_stream_health",
    schedule=timedelta(minutes=5),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lakehouse", "stream", "health"],
    default_args=default_args(retries=0),
)
def lakehouse_stream_health():
    @task
    def check(pipeline: str, dag_run=None) -> str:
        from airflow.sdk.exceptions import AirflowFailException

        from lakehouse.ops.health import check_stream_health

        # As of the moment this run was due (the end of its interval, or when it was triggered), so a
        # retried or late run judges the same moment, on the micro-batches started by then.
        verdict = check_stream_health(Settings.from_env(), pipeline, dag_run.run_after)
        if not verdict.ok:
            raise AirflowFailException(verdict.message)
        return verdict.message

    check.expand(pipeline=active_pipelines(Settings.from_env()))


lakehouse_stream_health()
