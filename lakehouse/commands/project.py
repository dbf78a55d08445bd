"""A team's project: make one (init), validate it (check), feed its pipelines' logs (ingest)."""

from __future__ import annotations

import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.commands.base import Command, pipeline_option
from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings
from lakehouse.vocabulary import LogSink

# Lines per log file `lakehouse ingest` writes: large enough that the stream reads few files, small
# enough that a file is a few megabytes.
INGEST_LINES_PER_FILE = 10_000


def cmd_init(args, settings: Settings) -> None:
    from lakehouse.project.scaffold import make_project

    made = make_project(Path(args.directory))
    print(f"made project {made.name!r} in {made.root}")
    print(f"  next: export LAKEHOUSE_PROJECT={made.root}; lakehouse check; then docs/pipelines.md's tutorial")


def cmd_check(args, settings: Settings) -> None:
    from lakehouse.project.active import active_project

    began = time.monotonic()
    project = active_project(settings)
    elapsed = time.monotonic() - began
    print(f"{project.root}: {len(project.pipelines)} pipelines valid ({', '.join(sorted(project.pipelines))})")
    print(
        f"  {len(project.dimensions)} dimensions, {len(project.window_joins)} windowed joins, checked in {elapsed:.2f}s"
    )


def _lines(source: str):
    handle = sys.stdin if source == "-" else open(source, encoding="utf-8")  # noqa: SIM115 (stdin is not ours to close)
    try:
        for line in handle:
            if line.strip():
                yield line.rstrip("\n")
    finally:
        if handle is not sys.stdin:
            handle.close()


def cmd_ingest(args, settings: Settings) -> None:
    """JSON lines appended to the pipeline's retained log as they are: the stream judges each line,
    and a bad one is quarantined with its reason, never dropped here."""
    from lakehouse.project.active import active_project

    spec = active_project(settings).pipelines.get(args.pipeline)
    if spec is None:
        raise LakehouseError(
            f"unknown pipeline {args.pipeline!r}; the project's: {', '.join(active_project().pipelines)}"
        )
    if args.source != "-" and not Path(args.source).is_file():
        raise LakehouseError(f"no such file: {args.source}")
    # Kafka keys by the event id: its copies then share a partition, read in the order they arrived.
    writer = _writer(settings, spec.topic, spec.event_id)
    tag, written, batch = uuid.uuid4().hex[:12], 0, []
    for line in _lines(args.source):
        batch.append(line)
        if len(batch) == INGEST_LINES_PER_FILE:
            written += _append(writer, batch, f"ingest-{tag}-{written:09d}")
            batch = []
    if batch:
        written += _append(writer, batch, f"ingest-{tag}-{written:09d}")
    print(f"ingested {written} lines into the log of {spec.topic}")


def _writer(settings: Settings, topic: str, key_field: str):
    sink = LogSink.KAFKA if settings.kafka_bootstrap else LogSink.FILES
    if sink == LogSink.KAFKA:
        from lakehouse.storage.kafka_log import KafkaLogWriter

        return KafkaLogWriter(settings, topic, key_field)
    from lakehouse.storage.log import LogWriter

    return LogWriter(settings, topic)


def _append(writer, lines: list[str], tag: str) -> int:
    received = datetime.now(UTC)
    writer.append([(received, line) for line in lines], tag)
    return len(lines)


def _init_options(parser) -> None:
    parser.add_argument("directory", help="the folder to make the project in (new, or empty)")


def _ingest_options(parser) -> None:
    pipeline_option(parser)
    parser.add_argument("source", help="a file of JSON lines, or - for standard input")


COMMANDS = (
    Command(
        "init", "make a project folder: a spec, an example pipeline, its suite, sample events", cmd_init, _init_options
    ),
    Command(
        "check", "validate the project (no JVM): each error names its file, line and field", cmd_check, lambda p: None
    ),
    Command("ingest", "append JSON lines (a file or -) to a pipeline's retained log", cmd_ingest, _ingest_options),
)
