"""Where a speed-layer micro-batch's time goes, by stage, at 1 and 4 files per trigger.

The speed layer times each stage of a batch on the driver (``lakehouse.layers.stage_times``) and
writes the milliseconds to the batch's ``ops.stream_progress`` row (``stage_ms``) beside its
``duration_ms``. Spark's own progress of the same batch gives the rest: ``addBatch`` (the whole
``foreachBatch`` call) less ``duration_ms`` is the progress row's append and the call's way in and
out of the JVM; ``triggerExecution`` less ``addBatch`` is the stream's own work (offsets, planning,
its commit log). The per-event cost is ``bench.stream``'s fit; this suite says what the fixed cost
is made of.
"""

from __future__ import annotations

import json

from bench.data import DataSet, link_log_files, scratch_home, settings_for
from bench.measure import summary
from bench.stream import drain, run_to_end
from lakehouse.storage.catalog import STREAM_PROGRESS
from lakehouse.storage.ops_tables import arrow_at
from lakehouse.vocabulary import BatchStage

# What a batch's time is made of beyond its timed stages (milliseconds, like the stages).
UNTIMED = "untimed"  # duration_ms less the stages: the code between them
PROGRESS = "progress_and_call"  # addBatch less duration_ms: the progress append, foreachBatch's call
STREAMING = "streaming"  # triggerExecution less addBatch: Spark's offsets, planning and commit log
BATCH = "batch"  # triggerExecution: the whole batch as Spark reports it
PARTS = (*(str(stage) for stage in BatchStage), UNTIMED, PROGRESS, STREAMING, BATCH)


def batch_parts(row: dict, spark_progress: dict) -> dict[str, int]:
    """One batch's milliseconds by part (``PARTS``): its progress row (``duration_ms``, ``stage_ms``)
    and Spark's progress of it (``durationMs``). A stage the batch skipped counts 0."""
    stages = dict(row["stage_ms"] or {})
    durations = spark_progress["durationMs"]
    parts = {str(stage): stages.get(str(stage), 0) for stage in BatchStage}
    parts[UNTIMED] = row["duration_ms"] - sum(stages.values())
    parts[PROGRESS] = durations["addBatch"] - row["duration_ms"]
    parts[STREAMING] = durations["triggerExecution"] - durations["addBatch"]
    parts[BATCH] = durations["triggerExecution"]
    return parts


def drained_parts(spark, data: DataSet, files_per_trigger: int, batches: int) -> list[dict[str, int]]:
    """Each batch of a backlog drained ``files_per_trigger`` files at a time, by part; the first
    batch (which creates the tables and plans every query for the first time) left out."""
    home = scratch_home("stages")
    link_log_files(data.log_files()[: files_per_trigger * (batches + 1)], data.home / "log", home / "log")
    query = run_to_end(spark, "lakehouse", home, "1s", files_per_trigger)
    spark_progress = {
        progress["batchId"]: progress
        for progress in (json.loads(p.json) if hasattr(p, "json") else p for p in query.recentProgress)
        if progress["numInputRows"]
    }
    rows = arrow_at(STREAM_PROGRESS.uri(settings_for(home)), ["batch_id", "duration_ms", "stage_ms"]).to_pylist()
    return [batch_parts(row, spark_progress[row["batch_id"]]) for row in sorted(rows, key=lambda r: r["batch_id"])][1:]


def batch_stages(spark, data: DataSet, runs: int, sizes: tuple[int, ...], batches: int) -> dict:
    """The median milliseconds of each part of a batch (``PARTS``), per files per trigger, over
    ``runs`` drains of ``batches`` batches each; one drain first, not measured (the JIT's first
    compiles), and the sizes' order turned each run."""
    drain(spark, data, "lakehouse", sizes[0], batches)
    measured: dict[int, list[dict[str, int]]] = {size: [] for size in sizes}
    for run in range(runs):
        for size in sizes if run % 2 == 0 else sizes[::-1]:
            measured[size] += drained_parts(spark, data, size, batches)
    return {
        "files_per_trigger": list(sizes),
        "events_per_file": data.events_per_file,
        "batches_per_drain": batches,
        "sizes": {
            str(size): {
                "batches": len(parts),
                "ms": {part: summary([batch[part] for batch in parts]) for part in PARTS},
            }
            for size, parts in measured.items()
        },
    }


def figures(results: dict, add) -> None:
    """Each part's median seconds against the median batch's (the ratio is its share), per size."""
    for size, measured in results["sizes"].items():
        batch_s = measured["ms"][BATCH]["median"] / 1000
        for part in PARTS[:-1]:
            add(
                f"speed micro-batch's {part} part vs the whole batch, {size} file(s) per trigger",
                measured["ms"][part]["median"] / 1000,
                batch_s,
            )
