"""The retained log: ``generate`` writes deterministic events into it, ``archive`` copies a Kafka
log's closed hours into files."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from lakehouse.commands.base import DEFAULT_PIPELINE, Command, pipeline_named, pipeline_option
from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings
from lakehouse.vocabulary import LogSink, choices

# The other log `lakehouse generate` writes: readings for the windowed join toll_weather.
READINGS_PIPELINE = "zone_temperatures"


def _start_time(text: str) -> datetime:
    if text == "now":
        return datetime.now(UTC).replace(microsecond=0)
    from lakehouse.eventtime import parse_instant

    return parse_instant(text, "start").replace(tzinfo=UTC)


def _alike(args) -> dict:
    """The options toll events and readings are generated with alike."""
    return {
        "start": _start_time(args.start),
        "seed": args.seed,
        "wall_rate": args.wall_rate,
        "late_fraction": args.late_fraction,
        "late_delay": args.late_delay,
        "events_per_file": args.events_per_file,
    }


def _readings_config(args):
    """Readings for every zone toll_weather knows, over the time the same options' toll events span."""
    from lakehouse.dataflow.pipelines import all_window_joins
    from lakehouse.generator import ReadingsConfig

    joins = [join for join in all_window_joins().values() if join.readings.topic == args.pipeline]
    if not joins:
        raise LakehouseError(f"{args.pipeline} is not the readings side of a windowed join: no zones to read for")
    return ReadingsConfig(
        zones=tuple(joins[0].key_values),
        span=timedelta(seconds=args.events / args.rate),
        gap_fraction=args.gap_fraction,
        **_alike(args),
    )


def _toll_config(args):
    from lakehouse.generator import GeneratorConfig

    return GeneratorConfig(
        events=args.events,
        rate=args.rate,
        bridges=args.bridges,
        booths_per_bridge=args.booths,
        duplicate_fraction=args.duplicate_fraction,
        malformed_fraction=args.malformed_fraction,
        clock_skew=args.clock_skew,
        **_alike(args),
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


def _generate_options(generate) -> None:
    """The producer: deterministic events into the retained log."""
    pipeline_option(generate, default=DEFAULT_PIPELINE, choices=[DEFAULT_PIPELINE, READINGS_PIPELINE])
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


def cmd_archive(args, settings: Settings) -> None:
    from lakehouse.storage.archive import Archive

    if not settings.kafka_bootstrap:
        raise LakehouseError("lakehouse archive copies a Kafka log into files: set LAKEHOUSE_KAFKA_BOOTSTRAP")
    run = Archive(settings, pipeline_named(args.pipeline).topic).run()
    hours = [f"{hour:%Y-%m-%dT%H}" for hour in run.hours]
    print(json.dumps({"archive": settings.pipeline_log_uri(args.pipeline), "hours": hours, "records": run.records}))


COMMANDS = (
    Command(
        "generate",
        "write deterministic toll events (or zone temperature readings) into the retained log",
        cmd_generate,
        _generate_options,
    ),
    Command(
        "archive",
        "copy the closed ingest hours of a Kafka log into the file log, once (no JVM)",
        cmd_archive,
        pipeline_option,
    ),
)
