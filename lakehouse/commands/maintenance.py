"""Keeping the tables and dimensions current, and the demo: table maintenance, dimension change
logs, the whole lambda loop on embedded defaults."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.commands.base import Command, pipeline_named, pipeline_option, spark_session
from lakehouse.demo import DEMO_EVENTS
from lakehouse.settings import Settings


def cmd_maintain(args, settings: Settings) -> None:
    from lakehouse.storage.maintenance import maintain

    report = maintain(
        spark_session(settings, f"maintain-{args.pipeline}"), settings, pipeline_named(args.pipeline), datetime.now(UTC)
    )
    print(json.dumps(report, indent=1))


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


def _dim_options(dim) -> None:
    dim.add_argument("action", choices=["apply"])
    dim.add_argument("files", nargs="*", help="change logs (JSON lines); none: those waiting in its inbox")
    dim.add_argument("--dimension", default="bridges", help="the dimension changed (default: bridges)")


def cmd_demo(args, settings: Settings) -> None:
    from lakehouse.demo import run_demo

    run_demo(settings, events=args.events)


def _demo_options(demo) -> None:
    demo.add_argument("--events", type=int, default=DEMO_EVENTS)


COMMANDS = (
    Command("maintain", "OPTIMIZE and VACUUM the tables, expire the retained log", cmd_maintain, pipeline_option),
    Command("demo", "run the whole lambda loop on embedded defaults and explain it", cmd_demo, _demo_options),
    Command("dim", "apply change logs to a versioned dimension, dim.<name> (no JVM)", cmd_dim, _dim_options),
)
