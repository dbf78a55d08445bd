"""Deterministic scenario replay: a JSONL file of events, each with its ``arrival`` time.

The events are written to the pipeline's retained log, one file per distinct arrival time, and the
real streaming query reads them with one file per micro-batch, so the watermark advances exactly as
docs/design.md states. What the stream emitted (every pane) and the final speed values come back.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from pyspark.sql import SparkSession

from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.errors import LakehouseError
from lakehouse.eventtime import parse_instant
from lakehouse.location import local_path
from lakehouse.settings import Settings
from lakehouse.storage.catalog import pipeline_tables, table_exists
from lakehouse.storage.log import LogWriter


@dataclasses.dataclass(frozen=True)
class Arrival:
    at: datetime
    lines: tuple[str, ...]


def read_scenario(path: Path) -> list[Arrival]:
    """Group a scenario's events by arrival time, in arrival order; events keep their file order."""
    if not path.is_file():
        raise LakehouseError(f"scenario file {path} does not exist")
    groups: dict[datetime, list[str]] = defaultdict(list)
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            raise LakehouseError(f"{path}:{number}: not JSON ({error.msg})") from None
        if not isinstance(record, dict) or "arrival" not in record:
            raise LakehouseError(f'{path}:{number}: each line is an event object with an "arrival" time')
        arrival = parse_instant(record.pop("arrival"), f"arrival on line {number}")
        groups[arrival].append(json.dumps(record, separators=(",", ":")))
    if not groups:
        raise LakehouseError(f"{path} holds no events")
    return [Arrival(at, tuple(lines)) for at, lines in sorted(groups.items())]


def _require_fresh(spark: SparkSession, settings: Settings, pipeline: Pipeline) -> None:
    log_root = local_path(settings.pipeline_log_uri(pipeline.topic))
    if log_root.exists() and any(log_root.rglob("*.jsonl")):
        raise LakehouseError(
            f"the log {log_root} already holds events: a replay starts from nothing. "
            "Point LAKEHOUSE_HOME at a new folder."
        )
    if table_exists(spark, pipeline_tables(pipeline).bronze.uri(settings)):
        raise LakehouseError(
            f"{pipeline.name} already has tables under {settings.warehouse_uri}: point LAKEHOUSE_HOME at a new folder"
        )


def replay(spark: SparkSession, settings: Settings, pipeline: Pipeline, arrivals: list[Arrival]) -> None:
    """Feed the arrivals to the real speed layer, one micro-batch per arrival time.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline the rows belong to.
        arrivals: the scenario: lines and when they reach the log.
    """
    from lakehouse.layers.speed import run_speed_layer

    _require_fresh(spark, settings, pipeline)
    writer = LogWriter(settings, pipeline.topic)
    for number, arrival in enumerate(arrivals):
        writer.write(arrival.at, f"replay{number:05d}", list(arrival.lines))
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), pipeline, available_now=True)


def replay_result(spark: SparkSession, settings: Settings, pipeline: Pipeline) -> dict[str, list[dict]]:
    """Every pane in emission order and the final speed values, as plain rows."""
    from lakehouse.storage.catalog import register_tables

    register_tables(spark, settings, [pipeline])
    tables = pipeline_tables(pipeline)
    order = ", ".join(["window_start", *pipeline.keys, "window_end"])
    panes = spark.sql(
        f"SELECT batch_id, {', '.join(pipeline.gold_columns)}, pane_index, timing, is_retraction "
        f"FROM {tables.panes.qualified_name} ORDER BY batch_id, {order}, pane_index"
    )
    speed = spark.sql(f"SELECT {', '.join(pipeline.gold_columns)} FROM {tables.speed.qualified_name} ORDER BY {order}")
    return {"panes": [row.asDict() for row in panes.collect()], "speed": [row.asDict() for row in speed.collect()]}
