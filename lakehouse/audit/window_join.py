"""The audit of a windowed join (docs/design.md, "Joins: a windowed join").

It compares what the stream served, the join over both speed tables, with the same join over the
truth of both logs. The join's query is the catalog's own (``window_join_sql``), here over temporary
views of what each side read at its pins. Each row of a closed window gets a verdict:

- **matched**: the stream's row equals the truth's;
- **explained**: the stream's row equals the join of the events each side's stream took on time,
  and no event it lost plays a part. Its causes say which side's late data made the difference:
  ``late_event`` when the counts differ, ``late_reading`` when the reading used differs (its mean,
  band or zone). Late here means beyond the side's watermark, or not read yet;
- **unexplained**: anything else.

A window is closed when both sides' watermarks have passed its end.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.audit.reconcile import PinnedReads, append_audit_rows, current_pins
from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines.base import Pipeline, WindowJoin
from lakehouse.dataflow.window_joins import window_join_columns, window_join_sql
from lakehouse.eventtime import earliest_arrival_for
from lakehouse.settings import Settings
from lakehouse.storage.catalog import pipeline_tables
from lakehouse.vocabulary import AuditMode, AuditTarget, Cause, JoinCause, Verdict

# The four answers compared: the stream's, the truth's, the truth's with only on-time events, and
# the truth's without the events the stream lost.
STREAM, TRUTH, ON_TIME, NOT_LOST = "stream", "truth", "on_time", "not_lost"


@dataclasses.dataclass
class JoinAuditResult:
    join: str
    start: datetime
    end: datetime
    watermark: datetime | None  # the earlier of the two sides' watermarks
    pins: dict[str, dict[str, str]]  # per side pipeline
    rows: list[dict]  # every closed row: its key, verdict, causes and each answer's values
    open_rows: int = 0  # rows of windows a watermark has not closed yet: not compared
    run_id: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def matched(self) -> int:
        return sum(row["status"] == Verdict.MATCHED for row in self.rows)

    @property
    def explained(self) -> dict[str, int]:
        explained = [row for row in self.rows if row["status"] == Verdict.EXPLAINED]
        return {cause: sum(cause in row["causes"] for row in explained) for cause in JoinCause}

    @property
    def unexplained(self) -> list[dict]:
        return [row for row in self.rows if row["status"] == Verdict.UNEXPLAINED]

    @property
    def ok(self) -> bool:
        return not self.unexplained

    def summary(self) -> str:
        explained = sum(row["status"] == Verdict.EXPLAINED for row in self.rows)
        causes = ", ".join(f"{count} by {cause}" for cause, count in self.explained.items() if count)
        return (
            f"audit {self.join} [{self.start.isoformat()}, {self.end.isoformat()}), watermark {self.watermark}: "
            f"{len(self.rows)} closed rows, {self.matched} matched, {explained} explained"
            f"{f' ({causes})' if causes else ''}, {len(self.unexplained)} unexplained"
        )


@dataclasses.dataclass(frozen=True)
class _Side:
    """One side's answers per window and key, at its pins, and its watermark."""

    pins: dict[str, str]
    watermark: datetime | None
    caused: DataFrame  # the truth's events with their causes, cached: three answers read them
    answers: dict[str, DataFrame]


def _side(spark: SparkSession, settings: Settings, pipeline: Pipeline, start: datetime, end: datetime) -> _Side:
    pins = current_pins(spark, settings, pipeline, earliest_arrival_for(start))
    reads = PinnedReads(spark, settings, pipeline, pins)
    watermark, read = reads.stream_position()
    caused = reads.with_causes(reads.truth_events(start, end), read, start).persist()
    speed_uri = pipeline_tables(pipeline).speed.uri(settings)
    speed = spark.read.format("delta").option("versionAsOf", int(pins["speed"])).load(speed_uri)
    answers = {
        STREAM: speed.where(tx.in_window_range(start, end)).select(*pipeline.gold_columns),
        TRUTH: tx.aggregate_metrics(caused, pipeline),
        ON_TIME: tx.aggregate_metrics(caused.where(F.col("cause") == Cause.ON_TIME), pipeline),
        NOT_LOST: tx.aggregate_metrics(caused.where(F.col("cause") != Cause.MISSING), pipeline),
    }
    return _Side(pins, watermark, caused, answers)


def _joined_answers(spark: SparkSession, join: WindowJoin, sides: dict[str, _Side]) -> dict[str, dict[tuple, dict]]:
    """Each answer of the join, as {(window_start, key): the row's other columns}."""
    columns = [c for c in window_join_columns(join) if c not in ("window_start", "window_end", join.key)]
    answers = {}
    for answer in (STREAM, TRUTH, ON_TIME, NOT_LOST):
        names = {}
        for side, state in sides.items():
            names[side] = f"audit_{join.name}_{side}_{answer}"
            state.answers[answer].createOrReplaceTempView(names[side])
        rows = spark.sql(window_join_sql(join, names["events"], names["readings"])).collect()
        answers[answer] = {(row.window_start, row[join.key]): {c: row[c] for c in columns} for row in rows}
    return answers


def _differ(first: dict | None, second: dict | None, columns: list[str]) -> bool:
    return first is None or second is None or any(first[c] != second[c] for c in columns)


def _verdict(join: WindowJoin, row: dict[str, dict | None]) -> tuple[str, list[str]]:
    if row[STREAM] == row[TRUTH]:
        return Verdict.MATCHED, []
    if row[STREAM] != row[ON_TIME] or row[TRUTH] != row[NOT_LOST]:
        return Verdict.UNEXPLAINED, []
    reading = [f"{join.measure}_band", join.measure, f"{join.measure}_from"]
    causes = []
    if _differ(row[ON_TIME], row[TRUTH], join.events.metric_names):
        causes.append(JoinCause.LATE_EVENT)
    if _differ(row[ON_TIME], row[TRUTH], reading):
        causes.append(JoinCause.LATE_READING)
    return Verdict.EXPLAINED, causes


def audit_window_join(
    spark: SparkSession, settings: Settings, join: WindowJoin, start: datetime, end: datetime, record: bool = True
) -> JoinAuditResult:
    """Audit the join's windows starting in ``[start, end)`` that both sides' watermarks closed.

    Args:
        spark: the session to read with.
        settings: where the log, the tables and the checkpoints live.
        join: the windowed join audited.
        start: first window start audited.
        end: end of the range of window starts (exclusive).
        record: append the outcome to the audit tables (see ``record_join_audit``).
    """
    started = time.time()
    sides = {"events": _side(spark, settings, join.events, start, end)}
    sides["readings"] = _side(spark, settings, join.readings, start, end)
    marks = [side.watermark for side in sides.values()]
    watermark = None if None in marks else min(marks)
    answers = _joined_answers(spark, join, sides)
    for side in sides.values():
        side.caused.unpersist()
    end_of = join.events.window.size_delta
    every_key = {key for answer in answers.values() for key in answer}
    keys = sorted(key for key in every_key if watermark and key[0] + end_of <= watermark)
    rows = []
    for window_start, value in keys:
        row = {answer: answers[answer].get((window_start, value)) for answer in answers}
        status, causes = _verdict(join, row)
        rows.append({"window_start": window_start, join.key: value, "status": status, "causes": causes, **row})
    pins = {side: state.pins for side, state in sides.items()}
    result = JoinAuditResult(join.name, start, end, watermark, pins, rows, open_rows=len(every_key) - len(keys))
    if record:
        record_join_audit(spark, settings, join, result, started)
    return result


def record_join_audit(
    spark: SparkSession, settings: Settings, join: WindowJoin, result: JoinAuditResult, started: float
) -> None:
    """Record the join's audit as a pipeline's audit is recorded: its summary in
    ``audit.reconciliations`` (every explained row under ``explained_late``: both causes are late
    data, of one side or the other) and each row that did not match, with its causes, in
    ``audit.reconciliation_differences``. The pins are each side's, prefixed with the side.

    Args:
        spark: the session (it creates the audit tables the first time).
        settings: where the audit tables live.
        join: the windowed join audited.
        result: the audit's outcome.
        started: when the audit started (``time.time()``), for its duration.
    """
    explained = sum(row["status"] == Verdict.EXPLAINED for row in result.rows)
    run = {
        "run_id": result.run_id,
        "pipeline": result.join,
        "range_start": result.start,
        "range_end": result.end,
        "pins": {f"{side}.{name}": value for side, pins in result.pins.items() for name, value in pins.items()},
        "watermark": result.watermark,
        "windows_compared": len(result.rows),
        "open_windows": result.open_rows,
        "matched": result.matched,
        "explained_late": explained,
        "explained_not_yet_read": 0,
        "explained_corrected": 0,
        "explained_after_batch": 0,
        "unexplained": len(result.unexplained),
        "mode": AuditMode.FULL,
        "target": AuditTarget.SPEED,
        "started_at": datetime.fromtimestamp(started, tz=UTC),
        "duration_ms": int((time.time() - started) * 1000),
    }
    size = join.events.window.size_delta
    differences = [
        {
            "run_id": result.run_id,
            "pipeline": result.join,
            "window_start": row["window_start"],
            "window_end": row["window_start"] + size,
            "key": {join.key: row[join.key]},
            "status": row["status"],
            "causes": row["causes"],
            "truth": _as_strings(row[TRUTH]),
            "speed": _as_strings(row[STREAM]),
        }
        for row in result.rows
        if row["status"] != Verdict.MATCHED
    ]
    append_audit_rows(spark, settings, run, differences)


def _as_strings(values: dict | None) -> dict[str, str | None] | None:
    """A row's values as the differences table keeps them: a map of strings (None: no such row)."""
    return None if values is None else {name: None if v is None else str(v) for name, v in values.items()}
