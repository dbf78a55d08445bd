"""The ``lakehouse`` command line: generate, stream, backfill, correct, replay, sql, status, audit, demo."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakehouse.demo import DEMO_EVENTS
from lakehouse.errors import LakehouseError
from lakehouse.eventtime import parse_duration
from lakehouse.settings import Settings
from lakehouse.vocabulary import AuditTarget, Layer, LogSink, OutputFormat, Reprocess, Source, choices


def _spark(settings: Settings, app: str):
    from lakehouse.storage.spark import build_spark_session

    return build_spark_session(settings, app)


def _pipeline(name: str):
    from lakehouse.dataflow.pipelines import get_pipeline

    return get_pipeline(name)


def _start_time(text: str) -> datetime:
    if text == "now":
        return datetime.now(UTC).replace(microsecond=0)
    from lakehouse.eventtime import parse_instant

    return parse_instant(text, "start").replace(tzinfo=UTC)


def _readings_config(args):
    """Readings for every zone toll_weather knows, over the time the same options' toll events span."""
    from lakehouse.dataflow.pipelines.weather import TOLL_WEATHER
    from lakehouse.generator import ReadingsConfig

    return ReadingsConfig(
        zones=tuple(TOLL_WEATHER.key_values),
        start=_start_time(args.start),
        span=timedelta(seconds=args.events / args.rate),
        seed=args.seed,
        gap_fraction=args.gap_fraction,
        late_fraction=args.late_fraction,
        late_delay=args.late_delay,
        events_per_file=args.events_per_file,
        wall_rate=args.wall_rate,
    )


def _toll_config(args):
    from lakehouse.generator import GeneratorConfig

    return GeneratorConfig(
        events=args.events,
        seed=args.seed,
        start=_start_time(args.start),
        rate=args.rate,
        wall_rate=args.wall_rate,
        bridges=args.bridges,
        booths_per_bridge=args.booths,
        late_fraction=args.late_fraction,
        late_delay=args.late_delay,
        duplicate_fraction=args.duplicate_fraction,
        malformed_fraction=args.malformed_fraction,
        events_per_file=args.events_per_file,
        clock_skew=args.clock_skew,
    )


def cmd_generate(args, settings: Settings) -> None:
    from lakehouse.generator import generate

    config = _readings_config(args) if args.pipeline == READINGS_PIPELINE else _toll_config(args)
    sink = args.sink or (LogSink.KAFKA if settings.kafka_bootstrap else LogSink.FILES)
    if sink == LogSink.KAFKA and not settings.kafka_bootstrap:
        raise LakehouseError("--sink kafka needs LAKEHOUSE_KAFKA_BOOTSTRAP (host:port; `make kafka` prints it)")
    result = generate(settings, config, args.pipeline, sink=sink)
    where = f"kafka://{settings.kafka_bootstrap}/{args.pipeline}" if sink == LogSink.KAFKA else None
    print(json.dumps({"log": where or settings.pipeline_log_uri(args.pipeline), **result.as_dict()}, indent=1))


def cmd_stream(args, settings: Settings) -> None:
    from lakehouse.layers.speed import run_speed_layer

    timeout = parse_duration(args.timeout) if args.timeout else None
    run_speed_layer(
        _spark(settings, f"speed-{args.pipeline}"),
        settings,
        _pipeline(args.pipeline),
        available_now=args.available_now,
        timeout=timeout,
    )


def os_user() -> str:
    """Who runs the command, for the records that name who asked. A container may run under a user id
    with no name (no passwd entry, no USER variable), where getpass raises."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def cmd_backfill(args, settings: Settings) -> None:
    from lakehouse.layers.batch import BatchLayer, ProgressBar, parse_range

    pipeline = _pipeline(args.pipeline)
    start, end = parse_range(args.start, args.end, pipeline)  # before Spark starts: bad input fails fast
    if args.source == Source.LOG and settings.kafka_bootstrap:
        from lakehouse.layers.batch import event_span
        from lakehouse.storage.archive import check_covered
        from lakehouse.storage.log import earliest_arrival_for

        check_covered(settings, pipeline.topic, earliest_arrival_for(event_span(pipeline, start, end)[0]))
    layer = BatchLayer(_spark(settings, f"backfill-{args.pipeline}"), settings, pipeline)
    bar = ProgressBar(0, f"backfill {pipeline.name} from {args.source}")

    def on_chunk(done: int, total: int) -> None:
        bar.total = total
        bar.update(done)

    result = layer.backfill(
        start,
        end,
        source=args.source,
        chunk=args.chunk,
        on_chunk=on_chunk,
        reprocess=args.reprocess,
        label=args.label,
        triggered_by=args.triggered_by or os_user(),
    )
    print(
        f"backfill {result.run_id} {result.status}: {result.pipeline} [{start.isoformat()}Z, {end.isoformat()}Z) "
        f"from {result.source}, {result.chunks} chunks recomputed, {result.chunks_skipped} skipped (same inputs), "
        f"{result.events_used} events, "
        f"{result.rows_written} rows written to gold.{pipeline.name}__batch"
    )


def _sql_session(settings: Settings):
    """A Spark Connect session of the Spark service when the settings route SQL there, else embedded."""
    from lakehouse.serving.service import connect_url

    url = connect_url(settings)
    if url is None:
        return _spark(settings, "sql")
    from pyspark.logger import PySparkLogger
    from pyspark.sql import SparkSession

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # The Connect client logs each failed query with its JVM stack; the CLI prints it on one line.
        PySparkLogger.getLogger(name).disabled = True
    return SparkSession.builder.remote(url).getOrCreate()


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


def cmd_status(args, settings: Settings) -> None:
    from lakehouse.serving.status import pipeline_status, render_status

    status = pipeline_status(settings, _pipeline(args.pipeline))
    print(render_status(status))


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
    from lakehouse.dataflow.pipelines import WINDOW_JOINS
    from lakehouse.layers.batch import parse_range

    join = WINDOW_JOINS[args.pipeline]
    given = [option for option, value in _PIPELINE_AUDIT_OPTIONS.items() if getattr(args, value[0]) != value[1]]
    if given:
        raise LakehouseError(
            f"{', '.join(given)}: a windowed join's audit compares the stream's joined rows with the truth over "
            "the whole range; these options apply to a pipeline's audit"
        )
    start, end = parse_range(args.start, args.end, join.events)
    result = audit_window_join(_spark(settings, f"audit-{join.name}"), settings, join, start, end)
    print(result.summary())
    for row in result.unexplained:
        print(json.dumps(row, default=str))
    if not result.ok:
        raise AuditFailed()


def cmd_audit(args, settings: Settings) -> None:
    from lakehouse.audit.reconcile import Auditor, render_audit
    from lakehouse.dataflow.pipelines import WINDOW_JOINS
    from lakehouse.layers.batch import parse_range

    if args.pipeline in WINDOW_JOINS:
        return _audit_window_join(args, settings)
    pipeline = _pipeline(args.pipeline)
    start, end = parse_range(args.start, args.end, pipeline)
    pins = json.loads(args.pins) if args.pins else None
    spark = _spark(settings, f"audit-{pipeline.name}")
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


def cmd_correct(args, settings: Settings) -> None:
    from lakehouse.layers.corrections import CorrectionRun

    pipeline = _pipeline(args.pipeline)
    result = CorrectionRun(_spark(settings, f"correct-{pipeline.name}"), settings, pipeline).run()
    print(result.summary())


def cmd_repair(args, settings: Settings) -> None:
    from lakehouse.audit.manual import Repair, repair

    request = Repair(args.layer, args.where, args.reason, args.by, None if args.delete else args.set)
    print(json.dumps(repair(_spark(settings, f"repair-{args.pipeline}"), settings, _pipeline(args.pipeline), request)))


def cmd_replay(args, settings: Settings) -> None:
    from pathlib import Path

    from lakehouse.layers.replay import read_scenario, replay, replay_result
    from lakehouse.serving.sql import format_rows

    pipeline = _pipeline(args.pipeline)
    arrivals = read_scenario(Path(args.file))  # before Spark starts: a bad file fails fast
    spark = _spark(settings, f"replay-{pipeline.name}")
    replay(spark, settings, pipeline, arrivals)
    result = replay_result(spark, settings, pipeline)
    if args.format == "json":
        from lakehouse.serving.sql import json_value

        print(
            json.dumps(
                {part: [{k: json_value(v) for k, v in row.items()} for row in rows] for part, rows in result.items()},
                indent=1,
            )
        )
        return
    for part, title in (("panes", "Panes, in the order the stream emitted them"), ("speed", "Final speed values")):
        rows = result[part]
        columns = list(rows[0]) if rows else []
        print(f"{title}:")
        print(format_rows(columns, [tuple(row.values()) for row in rows], "table") if rows else "(none)\n")


class AuditFailed(Exception):
    """Differences no cause explains, or a failed expectation suite: the audit exits 1."""


# --- Orchestration commands (what the Airflow DAGs run) ---
def cmd_plan_backfill(args, settings: Settings) -> None:
    from lakehouse.ops.orchestration import plan_chunks, validate_backfill_request

    request = validate_backfill_request(json.loads(args.params), settings, datetime.now(UTC))
    print(json.dumps({"chunks": plan_chunks(request)}, indent=1))


def cmd_maintain(args, settings: Settings) -> None:
    from lakehouse.storage.maintenance import maintain

    report = maintain(
        _spark(settings, f"maintain-{args.pipeline}"), settings, _pipeline(args.pipeline), datetime.now(UTC)
    )
    print(json.dumps(report, indent=1))


def cmd_health(args, settings: Settings) -> None:
    from lakehouse.ops.health import check_stream_health

    verdict = check_stream_health(settings, args.pipeline, datetime.now(UTC))
    print(verdict.message)
    if not verdict.ok:
        raise Unhealthy()


class Unhealthy(Exception):
    """The speed layer is stale or falling behind, or the Spark service is down: the command exits 1."""


def _run_service(service, label: str, action: str, settings: Settings) -> None:
    """start, status or stop of a long-running service: its status as JSON, exit 1 when it is down."""
    if action == "stop":
        print(f"{label} stopped" if service.stop(settings) else f"no {label} was running")
        return
    report = service.status(settings) if action == "status" else service.start(settings)
    print(json.dumps(report, indent=1))
    if not report["up"]:
        raise Unhealthy()


def cmd_serve(args, settings: Settings) -> None:
    from lakehouse.serving import service

    _run_service(service, "Spark service", "stop" if args.stop else "status" if args.status else "start", settings)


def cmd_dim(args, settings: Settings) -> None:
    from lakehouse.dataflow.pipelines import get_dimension
    from lakehouse.storage.dimensions import apply_change_file, apply_inbox, inbox

    dimension = get_dimension(args.dimension)
    if args.files:
        reports = [apply_change_file(settings, dimension, Path(name)) for name in args.files]
    else:
        reports = apply_inbox(settings, dimension)
        if not reports:
            print(f"dim.{dimension.name}: no change log waiting in {inbox(settings, dimension)}")
    for report in reports:
        print(report.summary())


def cmd_archive(args, settings: Settings) -> None:
    from lakehouse.storage.archive import Archive

    if not settings.kafka_bootstrap:
        raise LakehouseError("lakehouse archive copies a Kafka log into files: set LAKEHOUSE_KAFKA_BOOTSTRAP")
    run = Archive(settings, _pipeline(args.pipeline).topic).run()
    hours = [f"{hour:%Y-%m-%dT%H}" for hour in run.hours]
    print(json.dumps({"archive": settings.pipeline_log_uri(args.pipeline), "hours": hours, "records": run.records}))


def cmd_cluster(args, settings: Settings) -> None:
    from lakehouse.storage import spark_cluster

    _run_service(spark_cluster, "Spark cluster", args.action, settings)


def cmd_kafka(args, settings: Settings) -> None:
    from lakehouse.storage import kafka_broker

    _run_service(kafka_broker, "Kafka broker", args.action, settings)


def cmd_s3(args, settings: Settings) -> None:
    from lakehouse.storage import object_store

    _run_service(object_store, "S3 server", args.action, settings)


# --- end orchestration commands ---


def cmd_demo(args, settings: Settings) -> None:
    from lakehouse.demo import run_demo

    run_demo(settings, events=args.events)


# The pipeline a command works on when none is named: the one `lakehouse generate` writes.
DEFAULT_PIPELINE = "toll_traffic"
# The other log `lakehouse generate` writes: readings for the windowed join toll_weather.
READINGS_PIPELINE = "zone_temperatures"


def _pipeline_option(command, **options) -> None:
    command.add_argument("--pipeline", **({"default": DEFAULT_PIPELINE} | options))


def _add_generate(commands) -> None:
    """The producer: deterministic events into the retained log."""
    generate = commands.add_parser(
        "generate", help="write deterministic toll events (or zone temperature readings) into the retained log"
    )
    _pipeline_option(generate, choices=[DEFAULT_PIPELINE, READINGS_PIPELINE])
    generate.add_argument("--events", type=int, default=10_000)
    generate.add_argument("--seed", type=int, default=7)
    generate.add_argument("--start", default="2026-01-05T08:00:00Z", help="first event time (ISO-8601) or 'now'")
    generate.add_argument("--rate", type=float, default=50.0, help="events per second of event time")
    generate.add_argument("--wall-rate", type=float, default=0.0, help="events per second of wall time (0: no pacing)")
    generate.add_argument("--bridges", type=int, default=4)
    generate.add_argument("--booths", type=int, default=3, help="booths per bridge")
    generate.add_argument("--late-fraction", type=float, default=0.02, help="share of events that arrive delayed")
    generate.add_argument("--late-delay", default="5m", help="mean delay of a delayed event")
    generate.add_argument("--duplicate-fraction", type=float, default=0.01)
    generate.add_argument("--malformed-fraction", type=float, default=0.01)
    generate.add_argument("--events-per-file", type=int, default=500)
    generate.add_argument(
        "--sink",
        choices=choices(LogSink),
        help="files, or kafka (default: kafka when LAKEHOUSE_KAFKA_BOOTSTRAP is set)",
    )
    generate.add_argument(
        "--clock-skew", default="0s", help="each booth's clock is off by a fixed amount within +/- this (e.g. 5m)"
    )
    generate.add_argument(
        "--gap-fraction",
        type=float,
        default=0.1,
        help=f"{READINGS_PIPELINE} only: share of readings a sensor misses (the time span is the toll events')",
    )
    generate.set_defaults(run=cmd_generate)


def _add_layers(commands) -> None:
    """The two layers: the stream and backfills."""
    stream = commands.add_parser("stream", help="run the speed layer (continuously, or drain and stop)")
    _pipeline_option(stream)
    stream.add_argument("--available-now", action="store_true", help="process what the log holds, then stop")
    stream.add_argument("--timeout", help="stop after this long, e.g. 10m")
    stream.add_argument("--max-files-per-trigger", type=int)
    stream.add_argument(
        "--max-bytes-per-trigger", help="e.g. 64m: the new files of a micro-batch add up to at most this"
    )
    stream.add_argument("--watermark-delay")
    stream.add_argument("--allowed-lateness")
    stream.set_defaults(run=cmd_stream)

    backfill = commands.add_parser("backfill", help="recompute gold.<p>__batch for an event-time range")
    _pipeline_option(backfill)
    backfill.add_argument("--start", required=True, help="ISO-8601; without a zone it is UTC")
    backfill.add_argument("--end", required=True, help="exclusive")
    backfill.add_argument("--source", default=Source.BRONZE, choices=choices(Source))
    backfill.add_argument("--chunk", default="1d", help="recompute and commit this much at a time")
    backfill.add_argument(
        "--reprocess",
        default=Reprocess.REDO,
        choices=choices(Reprocess),
        help="skip: leave chunks whose inputs are unchanged since their last recomputation",
    )
    backfill.add_argument("--label", help="recorded in ops.backfill_runs: what asked (an Airflow run, say)")
    backfill.add_argument(
        "--triggered-by", help="recorded in ops.backfill_runs: who asked (default: your operating-system user)"
    )
    backfill.set_defaults(run=cmd_backfill)


def _add_reading(commands) -> None:
    """Reading what the layers wrote: SQL, status, audits."""
    sql = commands.add_parser("sql", help="query tables and views by schema.name (Delta time travel works)")
    sql.add_argument("query")
    sql.add_argument("--format", default=OutputFormat.TABLE, choices=choices(OutputFormat))
    sql.add_argument("--max-rows", type=int, default=1000, help="rows shown in table format")
    sql.set_defaults(run=cmd_sql)

    status = commands.add_parser("status", help="event fates, quarantine reasons and rows per table")
    _pipeline_option(status)
    status.set_defaults(run=cmd_status)

    audit = commands.add_parser("audit", help="reconcile gold.<p>__speed with the raw log, explaining every difference")
    _pipeline_option(audit)
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
    audit.set_defaults(run=cmd_audit)


def _add_corrections_and_replay(commands) -> None:
    """Late-data corrections and scenario replay."""
    correct = commands.add_parser("correct", help="fold late events into gold.<p>__batch, logging retractions")
    _pipeline_option(correct)
    correct.set_defaults(run=cmd_correct)

    replay = commands.add_parser("replay", help="feed a scenario (events with arrival times) to the real stream")
    replay.add_argument("--pipeline", required=True)
    replay.add_argument("file", help='JSONL: one event per line, plus its "arrival" time')
    replay.add_argument("--watermark-delay")
    replay.add_argument("--allowed-lateness")
    replay.add_argument("--format", default=OutputFormat.TABLE, choices=[OutputFormat.TABLE, OutputFormat.JSON])
    replay.set_defaults(run=cmd_replay)


def _add_operations(commands) -> None:
    """What Airflow runs besides the layers: plans, maintenance, health; and the demo."""
    # --- Orchestration commands ---
    plan = commands.add_parser("plan-backfill", help="validate backfill parameters (JSON) and print its chunks")
    plan.add_argument(
        "params",
        help='e.g. {"pipeline": "toll_traffic", "start": ..., "end": ..., '
        '"source": "bronze", "chunk": "1h", "reprocess": "skip"}',
    )
    plan.set_defaults(run=cmd_plan_backfill)

    repair = commands.add_parser(
        "repair", help="change gold values by hand, recorded (who, what, why) so that audits explain it"
    )
    _pipeline_option(repair)
    repair.add_argument("--layer", required=True, choices=choices(Layer), help="gold.<p>__speed or gold.<p>__batch")
    repair.add_argument("--where", required=True, help="SQL condition: the rows to change")
    change = repair.add_mutually_exclusive_group(required=True)
    change.add_argument("--set", help='SQL assignments, e.g. "vehicles = 12"')
    change.add_argument("--delete", action="store_true", help="delete the rows instead")
    repair.add_argument("--reason", required=True, help="why: recorded in audit.manual_changes")
    repair.add_argument("--by", default=os_user(), help="who asks (default: this user)")
    repair.set_defaults(run=cmd_repair)

    maintain = commands.add_parser("maintain", help="OPTIMIZE and VACUUM the tables, expire the retained log")
    _pipeline_option(maintain)
    maintain.set_defaults(run=cmd_maintain)

    health = commands.add_parser("health", help="exit 1 when the speed layer is stale or falling behind")
    _pipeline_option(health)
    health.set_defaults(run=cmd_health)
    # --- end orchestration commands ---

    demo = commands.add_parser("demo", help="run the whole lambda loop on embedded defaults and explain it")
    demo.add_argument("--events", type=int, default=DEMO_EVENTS)
    demo.set_defaults(run=cmd_demo)


def _add_services(commands) -> None:
    """The long-running services the platform starts: the Spark service, a Kafka broker, a Spark
    cluster and an S3 server."""
    serve = commands.add_parser(
        "serve", help="start the Spark service: Spark Connect and a JDBC/ODBC endpoint, read-only, on one catalog"
    )
    serve_action = serve.add_mutually_exclusive_group()
    serve_action.add_argument("--status", action="store_true", help="exit 1 unless both endpoints answer")
    serve_action.add_argument("--stop", action="store_true", help="stop the service and its JVM")
    serve.set_defaults(run=cmd_serve)

    dim = commands.add_parser("dim", help="apply change logs to a versioned dimension, dim.<name> (no JVM)")
    dim.add_argument("action", choices=["apply"])
    dim.add_argument("files", nargs="*", help="change logs (JSON lines); none: those waiting in its inbox")
    dim.add_argument("--dimension", default="bridges", help="the dimension changed (default: bridges)")
    dim.set_defaults(run=cmd_dim)

    archive = commands.add_parser(
        "archive", help="copy the closed ingest hours of a Kafka log into the file log, once (no JVM)"
    )
    _pipeline_option(archive)
    archive.set_defaults(run=cmd_archive)

    cluster = commands.add_parser("cluster", help="a Spark standalone cluster on this machine: a master, two workers")
    cluster.add_argument("action", choices=["start", "status", "stop"], help="status exits 1 unless every worker is up")
    cluster.set_defaults(run=cmd_cluster)

    kafka = commands.add_parser("kafka", help="a Kafka broker on loopback for the retained log (KRaft, one node)")
    kafka.add_argument("action", choices=["start", "status", "stop"], help="status exits 1 unless it answers")
    kafka.set_defaults(run=cmd_kafka)

    s3 = commands.add_parser("s3", help="an S3-compatible object store on loopback (S3Proxy over a local folder)")
    s3.add_argument("action", choices=["start", "status", "stop"], help="status exits 1 unless it answers")
    s3.set_defaults(run=cmd_s3)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    groups = (_add_generate, _add_layers, _add_reading, _add_corrections_and_replay, _add_operations, _add_services)
    for add_commands in groups:
        add_commands(commands)
    return parser


def _settings_for(args) -> Settings:
    settings = Settings.from_env()
    overrides = {
        name: getattr(args, name)
        for name in ("max_files_per_trigger", "max_bytes_per_trigger", "watermark_delay", "allowed_lateness")
        if getattr(args, name, None) is not None
    }
    return settings.replace(**overrides) if overrides else settings


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args, _settings_for(args))
    except LakehouseError as error:
        print(f"lakehouse: error: {error}", file=sys.stderr)
        return 2
    except (AuditFailed, Unhealthy):
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        from lakehouse.serving.read_only import refusal
        from lakehouse.storage.faults import explain

        # A job through the Spark service without its write token, say, or a full disk.
        refused = refusal(error) or explain(error)
        if refused is None:
            raise
        print(f"lakehouse: error: {refused}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
