"""What runs the layers and changes what they wrote: the stream, backfills and their plans, late-data
corrections, scenario replay and repairs by hand."""

from __future__ import annotations

import json

from lakehouse.commands.base import Command, asked_pipelines, os_user, pipeline_named, pipeline_option, spark_session
from lakehouse.eventtime import parse_duration
from lakehouse.settings import Settings
from lakehouse.vocabulary import (
    DEFAULT_CHUNK,
    DEFAULT_REPROCESS,
    DEFAULT_SOURCE,
    Layer,
    OutputFormat,
    Reprocess,
    Source,
    choices,
)


def cmd_stream(args, settings: Settings) -> None:
    from lakehouse.layers.speed import run_speed_layer
    from lakehouse.ops.metrics import stream_endpoint

    timeout = parse_duration(args.timeout) if args.timeout else None
    # A running stream serves its metrics; a drain (--available-now) is a batch job, not one to watch.
    watched = settings if not args.available_now else settings.replace(metrics_port="off")
    layers = []  # the running layer, once started: the endpoint asks it for the size of its index of ids
    with stream_endpoint(watched, args.pipeline, lambda: layers[0].dedupe_index_ids if layers else None):
        run_speed_layer(
            spark_session(settings, f"speed-{args.pipeline}"),
            settings,
            pipeline_named(args.pipeline),
            available_now=args.available_now,
            timeout=timeout,
            on_start=layers.append,
        )


def _stream_options(stream) -> None:
    pipeline_option(stream)
    stream.add_argument("--available-now", action="store_true", help="process what the log holds, then stop")
    stream.add_argument("--timeout", help="stop after this long, e.g. 10m")
    stream.add_argument("--max-files-per-trigger", type=int)
    stream.add_argument(
        "--max-bytes-per-trigger", help="e.g. 64m: the new files of a micro-batch add up to at most this"
    )
    stream.add_argument("--watermark-delay")
    stream.add_argument("--allowed-lateness")


def cmd_backfill(args, settings: Settings) -> None:
    from lakehouse.layers.batch import BatchLayer, ProgressBar, parse_range
    from lakehouse.ops.orchestration import BackfillRequest, check_input_held

    pipeline = pipeline_named(args.pipeline)
    start, end = parse_range(args.start, args.end, pipeline)  # before Spark starts: bad input fails fast
    if args.source == Source.LOG and settings.kafka_bootstrap:
        from lakehouse.eventtime import earliest_arrival_for, first_event_time
        from lakehouse.storage.archive import check_covered

        check_covered(settings, pipeline.topic, earliest_arrival_for(first_event_time(pipeline, start)))
    check_input_held(BackfillRequest(pipeline.name, start, end, args.source), settings)
    layer = BatchLayer(spark_session(settings, f"backfill-{args.pipeline}"), settings, pipeline)
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


def _backfill_options(backfill) -> None:
    pipeline_option(backfill)
    backfill.add_argument("--start", required=True, help="ISO-8601; without a zone it is UTC")
    backfill.add_argument("--end", required=True, help="exclusive")
    backfill.add_argument("--source", default=DEFAULT_SOURCE, choices=choices(Source))
    backfill.add_argument("--chunk", default=DEFAULT_CHUNK, help="recompute and commit this much at a time")
    backfill.add_argument(
        "--reprocess",
        default=DEFAULT_REPROCESS,
        choices=choices(Reprocess),
        help="skip: leave chunks whose inputs are unchanged since their last recomputation",
    )
    backfill.add_argument("--label", help="recorded in ops.backfill_runs: what asked (an Airflow run, say)")
    backfill.add_argument(
        "--triggered-by", help="recorded in ops.backfill_runs: who asked (default: your operating-system user)"
    )


# The backfill DAG's validation and chunk plan, to try its parameters before triggering it.
def cmd_plan_backfill(args, settings: Settings) -> None:
    from lakehouse.ops.orchestration import plan_chunks, validate_backfill_request

    request = validate_backfill_request(json.loads(args.params), settings)
    print(json.dumps({"chunks": plan_chunks(request)}, indent=1))


def _plan_backfill_options(plan) -> None:
    plan.add_argument(
        "params",
        help='e.g. {"pipeline": "toll_traffic", "start": ..., "end": ..., '
        '"source": "bronze", "chunk": "1h", "reprocess": "skip"}',
    )


def cmd_correct(args, settings: Settings) -> None:
    from lakehouse.layers.corrections import CorrectionRun

    pipeline = pipeline_named(args.pipeline)
    result = CorrectionRun(spark_session(settings, f"correct-{pipeline.name}"), settings, pipeline).run()
    print(result.summary())


def cmd_replay(args, settings: Settings) -> None:
    from pathlib import Path

    from lakehouse.layers.replay import read_scenario, replay, replay_result
    from lakehouse.serving.sql import format_rows

    pipeline = pipeline_named(args.pipeline)
    arrivals = read_scenario(Path(args.file))  # before Spark starts: a bad file fails fast
    spark = spark_session(settings, f"replay-{pipeline.name}")
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


def _replay_options(replay) -> None:
    replay.add_argument("--pipeline", required=True)
    replay.add_argument("file", help='JSONL: one event per line, plus its "arrival" time')
    replay.add_argument("--watermark-delay")
    replay.add_argument("--allowed-lateness")
    replay.add_argument("--format", default=OutputFormat.TABLE, choices=[OutputFormat.TABLE, OutputFormat.JSON])


def cmd_repair(args, settings: Settings) -> None:
    from lakehouse.audit.manual import Repair, repair

    request = Repair(args.layer, args.where, args.reason, args.by, None if args.delete else args.set)
    spark = spark_session(settings, f"repair-{args.pipeline}")
    print(json.dumps(repair(spark, settings, pipeline_named(args.pipeline), request)))


def _repair_options(repair) -> None:
    pipeline_option(repair)
    repair.add_argument("--layer", required=True, choices=choices(Layer), help="gold.<p>__speed or gold.<p>__batch")
    repair.add_argument("--where", required=True, help="SQL condition: the rows to change")
    change = repair.add_mutually_exclusive_group(required=True)
    change.add_argument("--set", help='SQL assignments, e.g. "vehicles = 12"')
    change.add_argument("--delete", action="store_true", help="delete the rows instead")
    repair.add_argument("--reason", required=True, help="why: recorded in audit.manual_changes")
    repair.add_argument("--by", default=os_user(), help="who asks (default: this user)")


def cmd_stale(args, settings: Settings) -> None:
    """List the stale hours of the pipeline asked for, or of every pipeline of the project; with
    --fill, recompute each run of them from bronze."""
    from lakehouse.layers.staleness import find_stale

    pipelines = [pipeline_named(name) for name in asked_pipelines(args, settings)]
    spark = spark_session(settings, f"stale-{args.pipeline or 'every-pipeline'}")
    for pipeline in pipelines:
        stale = find_stale(spark, settings, pipeline)
        for item in stale:
            print(f"{pipeline.name}  {item.hour.isoformat()}  {item.reason:<17} {item.detail}")
        print(f"{pipeline.name}: {len(stale)} stale hours" + ("" if stale else " (the batch layer is current)"))
        if args.fill and stale:
            _fill_stale(spark, settings, pipeline, stale)


def _fill_stale(spark, settings: Settings, pipeline, stale: list) -> None:
    from lakehouse.layers.batch import BatchLayer
    from lakehouse.layers.staleness import hour_ranges

    layer = BatchLayer(spark, settings, pipeline)
    for start, end in hour_ranges(stale):
        # The batch layer addresses UTC instants without a zone, as parse_range gives them.
        naive = (start.replace(tzinfo=None), end.replace(tzinfo=None))
        result = layer.backfill(*naive, source="bronze", chunk="1h", label="stale-fill", triggered_by=os_user())
        filled = f"[{start.isoformat()}, {end.isoformat()})"
        print(f"filled {pipeline.name} {filled}: {result.chunks} chunks, run {result.run_id}")


def _stale_options(parser) -> None:
    pipeline_option(parser, every=True)
    parser.add_argument("--fill", action="store_true", help="recompute the stale hours from bronze")


COMMANDS = (
    Command("stale", "list (and --fill) hours the batch layer must recompute", cmd_stale, _stale_options),
    Command("stream", "run the speed layer (continuously, or drain and stop)", cmd_stream, _stream_options),
    Command("backfill", "recompute gold.<p>__batch for an event-time range", cmd_backfill, _backfill_options),
    Command("correct", "fold late events into gold.<p>__batch, logging retractions", cmd_correct, pipeline_option),
    Command("replay", "feed a scenario (events with arrival times) to the real stream", cmd_replay, _replay_options),
    Command(
        "plan-backfill",
        "validate backfill parameters (JSON) and print its chunks",
        cmd_plan_backfill,
        _plan_backfill_options,
    ),
    Command(
        "repair",
        "change gold values by hand, recorded (who, what, why) so that audits explain it",
        cmd_repair,
        _repair_options,
    ),
)
