"""Reading what the layers wrote: SQL, status, audits, and the speed layer's health."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

from lakehouse.commands.base import (
    AuditFailed,
    Command,
    Unhealthy,
    asked_pipelines,
    pipeline_named,
    pipeline_option,
    spark_session,
)
from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings
from lakehouse.vocabulary import AuditTarget, OutputFormat, choices


def _sql_session(settings: Settings):
    """A Spark Connect session of the Spark service when the settings route SQL there, else embedded."""
    from lakehouse.services.spark_service import connect_url

    url = connect_url(settings)
    if url is None:
        return spark_session(settings, "sql")
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # The Connect client logs each failed query with its JVM stack; the CLI prints it on one line.
        PySparkLogger.getLogger(name).disabled = True
    if not settings.sql_user or not settings.sql_password:
        raise LakehouseError(
            f"the Spark service at {url} asks who you are: set LAKEHOUSE_SQL_USER and LAKEHOUSE_SQL_PASSWORD "
            "(`lakehouse users add NAME` gives a password)"
        )
    from lakehouse.storage.spark import connect_builder

    session = connect_builder(url, settings.sql_user, settings.sql_password).getOrCreate()
    _answer_or_say_so(session)
    return session


# Spark's client retries a service that does not answer for ten minutes, in silence. An analyst's
# statement retries 4 times over about 4 s (0.05 s, then 4 times longer at each try) for each of its
# two calls, then ends in one line (lakehouse.serving.sql): 10-15 s in all for a service that is
# down, measured; a blip of a second or two passes unseen.
ANSWER_TRIES = 4


def _answer_or_say_so(session) -> None:
    import atexit
    import warnings

    from pyspark.sql.connect.client.retries import DefaultPolicy

    session.client.set_retry_policies([DefaultPolicy(max_retries=ANSWER_TRIES)])
    # The client also warns, in a line of its own, that it gave up: the error says so already.
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    # At exit the client asks the service to drop the session's ML models, which a statement of
    # `lakehouse sql` never has: one call fewer, and none to wait out when the service is down.
    atexit.unregister(session.client._cleanup_ml_cache)


def cmd_sql(args, settings: Settings) -> None:
    from lakehouse.serving.sql import run_sql

    sys.stdout.write(
        run_sql(
            _sql_session(settings),
            settings,
            args.query,
            args.format,
            max_rows=None if args.format != "table" else args.max_rows,
        )
    )


def _sql_options(sql) -> None:
    sql.add_argument("query")
    sql.add_argument("--format", default=OutputFormat.TABLE, choices=choices(OutputFormat))
    sql.add_argument("--max-rows", type=int, default=1000, help="rows shown in table format")


def cmd_status(args, settings: Settings) -> None:
    """The status of the pipeline asked for, or a section for each pipeline of the project."""
    from lakehouse.serving.status import pipeline_status, render_status

    names = asked_pipelines(args, settings)
    print("\n\n".join(render_status(pipeline_status(settings, pipeline_named(name))) for name in names))


# The options of a pipeline's audit, with their defaults (the join's audit takes none of them).
_PIPELINE_AUDIT_OPTIONS = {
    "--pins": ("pins", None),
    "--report": ("report", None),
    "--target": ("target", AuditTarget.SPEED),
    "--incremental": ("incremental", False),
}


def _audit_window_join(args, settings: Settings) -> None:
    """A windowed join's audit: the stream's joined rows against the join of both logs' truth,
    recorded in the audit tables."""
    from lakehouse.audit.window_join import audit_window_join
    from lakehouse.dataflow.pipelines import all_window_joins
    from lakehouse.layers.batch import parse_range

    join = all_window_joins()[args.pipeline]
    given = [option for option, value in _PIPELINE_AUDIT_OPTIONS.items() if getattr(args, value[0]) != value[1]]
    if given:
        raise LakehouseError(
            f"{', '.join(given)}: a windowed join's audit compares the stream's joined rows with the truth over "
            "the whole range; these options apply to a pipeline's audit"
        )
    start, end = parse_range(args.start, args.end, join.events)
    result = audit_window_join(spark_session(settings, f"audit-{join.name}"), settings, join, start, end)
    print(result.summary())
    for row in result.unexplained:
        print(json.dumps(row, default=str))
    if not result.ok:
        raise AuditFailed()


def cmd_audit(args, settings: Settings) -> None:
    from lakehouse.audit.reconcile import Auditor, check_request, render_audit
    from lakehouse.dataflow.pipelines import all_window_joins
    from lakehouse.layers.batch import parse_range

    if args.pipeline in all_window_joins():
        return _audit_window_join(args, settings)
    pipeline = pipeline_named(args.pipeline)
    start, end = parse_range(args.start, args.end, pipeline)
    check_request(pipeline, args.target, args.incremental)
    pins = json.loads(args.pins) if args.pins else None
    spark = spark_session(settings, f"audit-{pipeline.name}")
    result = Auditor(spark, settings, pipeline).reconcile(
        start, end, pins, incremental=args.incremental, target=args.target
    )
    print(render_audit(result))
    quality = None
    if not args.skip_quality:
        from lakehouse.audit.quality import render_quality, validate_audit

        quality = validate_audit(
            spark, settings, pipeline, result.run_id, result.pins, start, end, result.newest_event_time
        )
        print(render_quality(quality))
    if args.report:
        from pathlib import Path

        from lakehouse.audit.report import gather_inputs, render_report

        report = Path(args.report)
        report.write_text(
            render_report(
                result,
                gather_inputs(spark, settings, pipeline, result),
                quality=quality,
                report_dir=report.resolve().parent,
            )
        )
        print(f"report written to {args.report}")
    if not result.ok or (quality is not None and not quality.ok):
        raise AuditFailed()


def _audit_options(audit) -> None:
    pipeline_option(audit)
    audit.add_argument("--start", required=True)
    audit.add_argument("--end", required=True)
    audit.add_argument("--pins", help="JSON of an earlier audit's pins, to re-run it exactly as it read")
    audit.add_argument("--report", help="also write a self-contained HTML report to this path")
    audit.add_argument(
        "--target",
        choices=choices(AuditTarget),
        default=AuditTarget.SPEED,
        help="compare the speed table (default) or the serving view gold.<p> with the truth",
    )
    audit.add_argument(
        "--incremental",
        action="store_true",
        help="compare only windows whose speed or batch rows changed since the previous audit",
    )
    audit.add_argument(
        "--skip-quality",
        action="store_true",
        help="reconcile only: do not validate the expectation suites (no GX, no Data Docs)",
    )


def cmd_health(args, settings: Settings) -> None:
    from lakehouse.ops.health import check_stream_health

    verdict = check_stream_health(settings, args.pipeline, datetime.now(UTC))
    print(verdict.message)
    if not verdict.ok:
        raise Unhealthy()


COMMANDS = (
    Command("sql", "query tables and views by schema.name (Delta time travel works)", cmd_sql, _sql_options),
    Command(
        "status",
        "event fates, quarantine reasons and rows per table, per pipeline",
        cmd_status,
        lambda parser: pipeline_option(parser, every=True),
    ),
    Command(
        "audit", "reconcile gold.<p>__speed with the raw log, explaining every difference", cmd_audit, _audit_options
    ),
    Command("health", "exit 1 when the speed layer is stale or falling behind", cmd_health, pipeline_option),
)
