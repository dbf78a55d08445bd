"""What the Airflow DAGs decide, as small pure functions: trigger parameters, their validation and
the chunk plan of a backfill.

Nothing here imports Spark or Airflow: DAG files import this module at parse time (it must stay
cheap), and tasks call it at run time. Spark work happens in ``jobs/`` under spark-submit.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from lakehouse.errors import LakehouseError
from lakehouse.eventtime import first_event_time, format_duration, parse_duration, parse_instant
from lakehouse.project.active import active_project
from lakehouse.project.project import Project
from lakehouse.settings import Settings
from lakehouse.storage.log_expiry import check_log_holds
from lakehouse.vocabulary import DEFAULT_CHUNK, DEFAULT_REPROCESS, DEFAULT_SOURCE, Reprocess, RunStatus, Source, choices

CHUNK_CHOICES = ("15m", "1h", "6h", "1d")
# ISO-8601 date-time with an optional zone: what the UI's date-time picker sends and what people type.
# (jsonschema checks ``format: date-time`` only when rfc3339-validator is installed: spell it out.)
DATE_TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?$"
DURATION_PATTERN = r"^\s*\d+\s*(s|m|h|d)\s*$"
SPARK_CONN_ID = "spark_default"
# Backfills run in this pool so they cannot take every worker slot from the scheduled layers.
BACKFILL_POOL = "lakehouse_backfill"
# Who requested a run Airflow's schedule started, in ops.backfill_runs (no user triggered it).
SCHEDULED_BY = "schedule"


def _project(settings: Settings | None = None) -> Project:
    """The active project's declarations: plain files, read in milliseconds at each DAG parse (and
    again only when a file changed), never a pipeline module that imports Spark."""
    return active_project(settings)


def pipeline_names(settings: Settings | None = None) -> list[str]:
    """The project's pipelines' names."""
    return sorted(_project(settings).pipelines)


def joining_pipeline_names(settings: Settings | None = None) -> list[str]:
    """Pipelines that join a versioned dimension."""
    return sorted(p.name for p in _project(settings).pipelines.values() if p.joins)


def audited_window_joins(active: list[str], settings: Settings | None = None) -> list[str]:
    """The windowed joins both of whose sides are among the ``active`` pipelines: the audit DAG
    audits each, as it audits each pipeline."""
    joins = _project(settings).window_joins.values()
    return sorted(j.name for j in joins if {j.events, j.readings} <= set(active))


def active_pipelines(settings: Settings) -> list[str]:
    """The pipelines the scheduled DAGs run: ``LAKEHOUSE_PIPELINES``, or every one of the project."""
    declared = pipeline_names(settings)
    unknown = sorted(set(settings.pipelines) - set(declared))
    if unknown:
        raise LakehouseError(
            f"LAKEHOUSE_PIPELINES names unknown pipelines {', '.join(unknown)}; the project's: {', '.join(declared)}"
        )
    return list(settings.pipelines) or declared


def backfill_param_schemas(settings: Settings) -> dict[str, dict]:
    """JSON-schema of each backfill parameter, as the trigger form renders and Airflow validates them.

    Airflow validates each Param on its own when a run is created (UI form and REST API alike), so
    what a single value can break is caught there; rules across values or on what the log still
    holds (end after start, longest range, input retention removed) are checked by
    ``validate_backfill_request``. Each parameter a request may leave out has its default here.
    """
    defaults = request_defaults(settings)
    schemas = {
        "pipeline": {
            "type": "string",
            "enum": pipeline_names(settings),
            "title": "Pipeline",
            "description": "Which pipeline's gold.<p>__batch to recompute.",
        },
        "start": {
            "type": "string",
            "format": "date-time",
            "pattern": DATE_TIME_PATTERN,
            "title": "Start",
            "description": "First window start (UTC when no zone is given); on a window boundary.",
        },
        "end": {
            "type": "string",
            "format": "date-time",
            "pattern": DATE_TIME_PATTERN,
            "title": "End",
            "description": f"Exclusive; at most {settings.backfill_max_range} after start.",
        },
        "source": {
            "type": "string",
            "enum": choices(Source),
            "title": "Source",
            "description": "bronze: accepted events; log: re-parse the raw retained log.",
        },
        "chunk": {
            "type": "string",
            "enum": list(CHUNK_CHOICES),
            "title": "Chunk size",
            "description": "Each chunk is recomputed and committed atomically by its own task.",
        },
        "reprocess": {
            "type": "string",
            "enum": choices(Reprocess),
            "title": "Reprocess",
            "description": "skip: leave chunks already computed from the same inputs; redo: all.",
        },
        "dry_run": {"type": "boolean", "title": "Dry run", "description": "Plan and summarise, write nothing."},
    }
    return {
        name: ({"default": defaults[name]} if name in defaults else {}) | schema for name, schema in schemas.items()
    }


@dataclasses.dataclass(frozen=True)
class BackfillRequest:
    pipeline: str
    start: datetime  # naive UTC, like the batch layer's
    end: datetime
    source: str = DEFAULT_SOURCE
    chunk: str = DEFAULT_CHUNK
    reprocess: str = DEFAULT_REPROCESS
    dry_run: bool = False


# The parameters a request may leave out, with what they then are.
REQUEST_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(BackfillRequest) if f.default is not dataclasses.MISSING
}


def request_defaults(settings: Settings) -> dict:
    """What a request's parameters are when left out: ``REQUEST_DEFAULTS``, and the project's default
    pipeline when it has one (none: a request names its pipeline, and the form asks for one)."""
    default = _project(settings).default_pipeline
    return REQUEST_DEFAULTS | ({"pipeline": default} if default else {})


def validate_backfill_request(params: dict, settings: Settings) -> BackfillRequest:
    """Every rule a backfill's parameters must meet, with a message that says how to fix it. A
    parameter left out takes its default (``request_defaults``)."""
    params = request_defaults(settings) | params
    pipeline = params.get("pipeline")
    if pipeline not in (declared := pipeline_names(settings)):
        raise LakehouseError(f"unknown pipeline {pipeline!r}; the project's pipelines: {', '.join(declared)}")
    for name, allowed in (("source", choices(Source)), ("reprocess", choices(Reprocess))):
        if params.get(name) not in allowed:
            raise LakehouseError(f"{name} must be one of {', '.join(allowed)}, not {params.get(name)!r}")
    start, end = parse_instant(params.get("start"), "start"), parse_instant(params.get("end"), "end")
    if end <= start:
        raise LakehouseError(f"end {end.isoformat()}Z must be after start {start.isoformat()}Z")
    longest = parse_duration(settings.backfill_max_range)
    if end - start > longest:
        raise LakehouseError(
            f"the range {format_duration(end - start)} is longer than the {settings.backfill_max_range} one "
            "backfill may cover (LAKEHOUSE_BACKFILL_MAX_RANGE): split it into several backfills"
        )
    chunk = str(params.get("chunk"))
    if parse_duration(chunk) <= timedelta(0):
        raise LakehouseError(f"chunk {chunk} must be positive")
    request = request_from_params(params)
    check_input_held(request, settings)
    return request


def check_input_held(request: BackfillRequest, settings: Settings) -> None:
    """Bronze keeps every accepted event (maintenance compacts it and removes only files no version
    needs), so a backfill from bronze always finds its input. One from the file log finds it unless
    retention removed hours its events may have arrived in; from a Kafka log, the backfill itself
    checks the topic and its archive before Spark starts (``lakehouse.storage.archive.check_covered``)."""
    if request.source != Source.LOG or settings.kafka_bootstrap:
        return
    spec = _project(settings).pipelines[request.pipeline]
    check_log_holds(settings, spec.topic, first_event_time(spec, request.start))


def request_from_params(params: dict) -> BackfillRequest:
    """The request the parameters describe (``validate_backfill_request`` checks them first)."""
    params = {**REQUEST_DEFAULTS, **params}
    return BackfillRequest(
        str(params["pipeline"]),
        parse_instant(params["start"], "start"),
        parse_instant(params["end"], "end"),
        str(params["source"]),
        str(params["chunk"]),
        str(params["reprocess"]),
        bool(params["dry_run"]),
    )


def plan_chunks(request: BackfillRequest) -> list[dict[str, str]]:
    """One entry per chunk, aligned on the chunk size from the range start; the last may be shorter."""
    size = parse_duration(request.chunk)
    chunks, cursor = [], request.start
    while cursor < request.end:
        chunk_end = min(cursor + size, request.end)
        chunks.append({"start": f"{cursor.isoformat()}Z", "end": f"{chunk_end.isoformat()}Z"})
        cursor = chunk_end
    return chunks


# A chunk's label in ops.backfill_runs: its Airflow run's id, this separator, the chunk's start.
LABEL_SEPARATOR = "|"


def chunk_label(run_id: str, chunk: dict[str, str]) -> str:
    """Names an Airflow run's chunk in ``ops.backfill_runs`` (``run_id|start``)."""
    return f"{run_id}{LABEL_SEPARATOR}{chunk['start']}"


def chunk_runs(settings: Settings, run_id: str) -> list[dict]:
    """The ``ops.backfill_runs`` rows of an Airflow run's chunks, each attempt's.

    The table holds every backfill ever run and is never trimmed: the rows are picked in Arrow by
    their labels' range (``run_id|`` up to the separator's successor) before any becomes a dict, from
    the files whose labels' range meets it. Each chunk appends a file, so until the day's compaction
    the others are most of the table: summarising a day's 24 chunks read 245 files in 160 ms."""
    import pyarrow.dataset as ds

    from lakehouse.storage.ops_tables import arrow_at

    first, beyond = run_id + LABEL_SEPARATOR, run_id + chr(ord(LABEL_SEPARATOR) + 1)
    label = ds.field("label")
    where = (label >= first) & (label < beyond)
    files = [("label", ">=", first), ("label", "<", beyond)]
    rows = arrow_at(settings.table_uri("ops", "backfill_runs"), where=where, settings=settings, files_with=files)
    return rows.to_pylist() if rows is not None else []


def chunk_job_args(
    request: BackfillRequest, chunk: dict[str, str], run_label: str, triggered_by: str | None
) -> list[str]:
    """Arguments of ``jobs/backfill.py`` for one chunk (the job commits it in one transaction).

    Args:
        request: the validated backfill request.
        chunk: the chunk's ``start`` and ``end``.
        run_label: names the Airflow run and chunk in ``ops.backfill_runs``.
        triggered_by: the Airflow user who triggered the run (None: the schedule did).
    """
    return [
        "--pipeline",
        request.pipeline,
        "--start",
        chunk["start"],
        "--end",
        chunk["end"],
        "--source",
        request.source,
        "--chunk",
        request.chunk,
        "--reprocess",
        request.reprocess,
        "--label",
        run_label,
        "--triggered-by",
        triggered_by or SCHEDULED_BY,
    ]


def summarise_backfill(request: BackfillRequest, chunks: list[dict[str, str]], runs: list[dict]) -> dict:
    """What the run note shows: chunks done and skipped, rows written, events used, failures."""
    done = [r for r in runs if r.get("status") == RunStatus.SUCCEEDED]
    return {
        "pipeline": request.pipeline,
        "range": [f"{request.start.isoformat()}Z", f"{request.end.isoformat()}Z"],
        "source": request.source,
        "dry_run": request.dry_run,
        "chunks_planned": len(chunks),
        "chunks_recomputed": sum(int(r.get("chunks") or 0) for r in done),
        "chunks_skipped": sum(int(r.get("chunks_skipped") or 0) for r in done),
        "rows_written": sum(int(r.get("rows_written") or 0) for r in done),
        "events_used": sum(int(r.get("events_used") or 0) for r in done),
        "failed_attempts": sum(1 for r in runs if r.get("status") == RunStatus.FAILED),
    }


def render_summary_note(summary: dict) -> str:
    """The run note (Markdown, shown on the run's page in the UI)."""
    verb = "would recompute" if summary["dry_run"] else "recomputed"
    return (
        f"**Backfill {summary['pipeline']}** [{summary['range'][0]}, {summary['range'][1]}) "
        f"from {summary['source']}\n\n"
        f"| chunks planned | {verb} | skipped (same inputs) | rows written | events used | failed attempts |\n"
        f"| --- | --- | --- | --- | --- | --- |\n"
        f"| {summary['chunks_planned']} | {summary['chunks_recomputed']} | {summary['chunks_skipped']} "
        f"| {summary['rows_written']} | {summary['events_used']} | {summary['failed_attempts']} |"
    )


def hourly_interval(start: datetime, end: datetime) -> dict[str, str]:
    """The scheduled batch layer's range: exactly the run's data interval, as job arguments."""
    return {
        "start": f"{start.astimezone(UTC).replace(tzinfo=None).isoformat()}Z",
        "end": f"{end.astimezone(UTC).replace(tzinfo=None).isoformat()}Z",
    }
