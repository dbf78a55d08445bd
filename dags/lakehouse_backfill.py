"""Backfill a pipeline's batch layer for an event-time range, chunk by chunk, from the trigger form."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Param, dag, task

from lakehouse.ops.airflow_support import USER_DEFINED_MACROS, default_args, spark_job_mapped, through_service
from lakehouse.ops.orchestration import BACKFILL_POOL, backfill_param_schemas
from lakehouse.settings import Settings

SETTINGS = Settings.from_env()
SCHEMAS = backfill_param_schemas(SETTINGS)

DOC = """
### Backfill a pipeline

Recomputes `gold.<pipeline>__batch` for the windows starting in **[start, end)**.

1. **validate_and_plan** checks the parameters: the form already rejects an unknown pipeline or
   source and a malformed date-time before a run exists; this task rejects an end before the start,
   a range longer than `LAKEHOUSE_BACKFILL_MAX_RANGE` and, from the log, a range whose files the
   log's retention removed (bronze keeps every event), before any Spark work. It splits the range
   into chunks.
2. **recompute_chunk** (one mapped task per chunk, in the `lakehouse_backfill` pool so backfills
   never take every slot from the scheduled layers) runs `jobs/backfill.py` through spark-submit,
   or, with `LAKEHOUSE_SPARK_REMOTE` set, the same command in the task as a Spark Connect client of
   the Spark service (no JVM per task).
   A chunk is replaced atomically, so a retry after a crash leaves what a clean run leaves. With
   *reprocess = skip* a chunk whose inputs are unchanged since it was last computed is left as is.
3. **summarise** publishes chunks recomputed and skipped, rows written and events used as its
   XCom (*XCom* tab of the task) and in its log.
"""


@dag(
    dag_id="lakehouse_backfill",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=DOC,
    tags=["lakehouse", "batch", "backfill"],
    default_args=default_args(retries=2, retry_delay=timedelta(seconds=10)),
    max_active_runs=2,
    user_defined_macros=USER_DEFINED_MACROS,
    params={
        # Each default as the schema gives it (lakehouse.ops.orchestration); a range, the examples' first hour.
        "pipeline": Param(**SCHEMAS["pipeline"]),
        "start": Param("2026-01-05T08:00:00Z", **SCHEMAS["start"]),
        "end": Param("2026-01-05T09:00:00Z", **SCHEMAS["end"]),
        "source": Param(**SCHEMAS["source"]),
        "chunk": Param(**SCHEMAS["chunk"]),
        "reprocess": Param(**SCHEMAS["reprocess"]),
        "dry_run": Param(**SCHEMAS["dry_run"]),
    },
)
def lakehouse_backfill():
    @task
    def validate_and_plan(params=None, run_id=None, dag_run=None) -> list[list[str]]:
        """The spark-submit arguments of each chunk to recompute (none for a dry run)."""
        from airflow.sdk.exceptions import AirflowFailException

        from lakehouse.dataflow.pipelines import get_pipeline
        from lakehouse.errors import LakehouseError
        from lakehouse.layers.batch import parse_range
        from lakehouse.ops.orchestration import chunk_job_args, chunk_label, plan_chunks, validate_backfill_request

        try:
            request = validate_backfill_request(dict(params), Settings.from_env())
            parse_range(request.start.isoformat(), request.end.isoformat(), get_pipeline(request.pipeline))
        except LakehouseError as error:  # bad input: fail at once, no retry, nothing written
            raise AirflowFailException(f"invalid backfill parameters: {error}") from None
        chunks = plan_chunks(request)
        print(f"{len(chunks)} chunks planned: {chunks}")
        if request.dry_run:
            return []
        who = dag_run.triggering_user_name
        return [chunk_job_args(request, c, chunk_label(run_id, c), who) for c in chunks]

    @task(trigger_rule="none_failed")
    def summarise(params=None, run_id=None) -> dict:
        """Chunks recomputed and skipped, rows written: this task's XCom and log."""
        from lakehouse.ops.orchestration import (
            chunk_runs,
            plan_chunks,
            render_summary_note,
            request_from_params,
            summarise_backfill,
        )

        request = request_from_params(dict(params))
        summary = summarise_backfill(request, plan_chunks(request), chunk_runs(Settings.from_env(), run_id))
        print(render_summary_note(summary))
        return summary

    plan = validate_and_plan()
    recompute_chunk = spark_job_mapped("recompute_chunk", "backfill", pool=BACKFILL_POOL)
    # A chunk's arguments: spark-submit's application_args, or the job's positional arguments.
    recompute = recompute_chunk.expand(**{"op_args" if through_service("backfill") else "application_args": plan})
    recompute >> summarise()


lakehouse_backfill()
