"""What happened in a pipeline: event fates, quarantine reasons, rows per table."""

from __future__ import annotations

import dataclasses

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.dataflow.clocks import clock_offset_micros
from lakehouse.dataflow.pipelines.base import RECEIVED_AT, Pipeline
from lakehouse.settings import Settings
from lakehouse.storage.catalog import BACKFILL_RUNS, STREAM_PROGRESS, all_tables, pipeline_tables, table_exists

# The per-batch fate counts of ops.stream_progress, by column.
FATE_COUNT_COLUMNS = ("quarantined", "duplicates", "on_time", "late")


@dataclasses.dataclass
class PipelineStatus:
    pipeline: str
    batches: int
    read: int
    fates: dict[str, int]
    quarantine_reasons: dict[str, int]
    table_rows: dict[str, int]
    backfill_runs: int
    # Per device of a pipeline that corrects clocks: accepted events, then the smallest, median and
    # largest offset seen (received_at - sent_at, seconds; negative: the device's clock runs ahead).
    clock_offsets: dict[str, tuple[int, float, float, float]] = dataclasses.field(default_factory=dict)

    @property
    def balanced(self) -> bool:
        """The event-fate identity: every record read has exactly one fate."""
        return self.read == sum(self.fates.values())


def pipeline_status(spark: SparkSession, settings: Settings, pipeline: Pipeline) -> PipelineStatus:
    def load(table):
        uri = table.uri(settings)
        return spark.read.format("delta").load(uri) if table_exists(spark, uri) else None

    progress = load(STREAM_PROGRESS)
    totals = {"batches": 0, "read": 0, **{fate: 0 for fate in FATE_COUNT_COLUMNS}}
    if progress is not None:
        row = (
            progress.where(F.col("pipeline") == pipeline.name)
            .agg(
                F.count(F.lit(1)).alias("batches"),
                F.sum("input_rows").alias("read"),
                *[F.sum(fate).alias(fate) for fate in FATE_COUNT_COLUMNS],
            )
            .first()
        )
        totals.update({k: v or 0 for k, v in row.asDict().items()})
    quarantine = load(pipeline_tables(pipeline).quarantine)
    reasons = {}
    if quarantine is not None:
        reasons = {r["reason"]: r["count"] for r in quarantine.groupBy("reason").count().orderBy("reason").collect()}
    table_rows = {t.qualified_name: frame.count() for t in all_tables(pipeline) if (frame := load(t)) is not None}
    runs = load(BACKFILL_RUNS)
    bronze = load(pipeline_tables(pipeline).bronze)
    return PipelineStatus(
        pipeline=pipeline.name,
        batches=totals["batches"],
        read=totals["read"],
        fates={fate: totals[fate] for fate in FATE_COUNT_COLUMNS},
        quarantine_reasons=reasons,
        table_rows=table_rows,
        backfill_runs=runs.where(F.col("pipeline") == pipeline.name).count() if runs is not None else 0,
        clock_offsets=device_clock_offsets(bronze, pipeline) if bronze is not None and pipeline.corrects_clocks else {},
    )


def device_clock_offsets(bronze: DataFrame, pipeline: Pipeline) -> dict[str, tuple[int, float, float, float]]:
    """Each device's accepted events and the offsets of its clock they showed (min, median, max, in s)."""
    clock = pipeline.clocks
    offset = clock_offset_micros(F.col(RECEIVED_AT), F.col(clock.sent_at)) / 1_000_000
    rows = (
        bronze.groupBy(clock.device)
        .agg(F.count(F.lit(1)), F.min(offset), F.percentile_approx(offset, 0.5), F.max(offset))
        .orderBy(clock.device)
        .collect()
    )
    return {row[0]: (row[1], round(row[2], 3), round(row[3], 3), round(row[4], 3)) for row in rows}


def render_status(status: PipelineStatus) -> str:
    lines = [f"pipeline {status.pipeline}: {status.batches} micro-batches, {status.read} records read"]
    for fate in FATE_COUNT_COLUMNS:
        lines.append(f"  {fate:<12}{status.fates[fate]:>10}")
    identity = "holds" if status.balanced else "BROKEN"
    lines.append(f"  read = quarantined + duplicates + on_time + late: {identity}")
    if status.quarantine_reasons:
        lines.append("quarantined by reason:")
        lines += [f"  {reason:<36}{count:>8}" for reason, count in status.quarantine_reasons.items()]
    lines.append("rows per table:")
    lines += [f"  {name:<36}{count:>8}" for name, count in status.table_rows.items()]
    lines.append(f"backfill runs: {status.backfill_runs}")
    if status.clock_offsets:
        lines.append("device clock offsets (received_at - sent_at, s; negative: the device runs ahead):")
        lines.append(f"  {'device':<24}{'events':>8}{'min':>10}{'median':>10}{'max':>10}")
        for device, (events, low, median, high) in status.clock_offsets.items():
            lines.append(f"  {device:<24}{events:>8}{low:>10.3f}{median:>10.3f}{high:>10.3f}")
    return "\n".join(lines)
