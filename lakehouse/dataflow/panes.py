"""Pane timing and accumulation for the speed layer (Streaming 102), as pure transforms.

The pane log ``gold.<p>__panes`` is the speed layer's state: every (window, key) value it ever
emitted, with a pane index and a timing. A micro-batch starts from the latest pane of each open
window (handed on in memory by the batch before, read from the log after a restart), adds its
on-time events and emits the next panes; ``gold.<p>__speed`` is the latest pane of each
window. Timing follows docs/design.md with ``on_time_watermark = max event time seen - watermark_delay``:
EARLY while it is before the window's end, ON_TIME for the first pane at or after it, LATE after.
A window the watermark passes without new events still gets its ON_TIME pane (same value).

Session windows change shape: when events merge sessions, the absorbed sessions get a retraction
pane (``is_retraction``, carrying the withdrawn value) and the merged session starts a new window.
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import Window as W
from pyspark.sql import functions as F

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.metric_merges import combined
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.vocabulary import PaneTiming

PANE_STATE = ("pane_index", "fired")  # per window and key: index of the latest pane, ON_TIME emitted yet


def window_key(pipeline: Pipeline) -> list[str]:
    return ["window_start", "window_end", *pipeline.keys]


def latest_panes(panes: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Each live window's latest value, pane index and whether its ON_TIME pane has fired."""
    by_window = W.partitionBy(*window_key(pipeline))
    newest = W.partitionBy(*window_key(pipeline)).orderBy(F.col("pane_index").desc())
    return (
        panes.withColumn("fired", F.max((F.col("timing") != PaneTiming.EARLY).cast("int")).over(by_window) == 1)
        .withColumn("_newest", F.row_number().over(newest))
        .where((F.col("_newest") == 1) & ~F.col("is_retraction"))
        .select(*pipeline.gold_columns, *PANE_STATE)
    )


def advance_state(state, panes, pipeline: Pipeline):
    """The state after a batch, as Arrow tables (a few hundred rows, kept in the driver): the state is
    ``latest_panes`` of the pane log once ``panes`` are appended to it.

    A window the batch emitted a pane for takes that pane (and has fired if it fired before or
    fires now); a withdrawn session drops out; every other window keeps its state.

    Args:
        state: the latest pane of each live window before the batch (``pane_state_before``).
        panes: the panes the batch emitted, as written to the pane log.
        pipeline: the pipeline the rows belong to.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = window_key(pipeline)
    fired_before = state.select([*keys, "fired"]).rename_columns([*keys, "_fired_before"])
    emitted = (
        panes.filter(pc.invert(panes["is_retraction"]))
        .select([*pipeline.gold_columns, "pane_index", "timing"])
        .join(fired_before, keys=keys, join_type="left outer")
    )
    fired = pc.or_(
        pc.not_equal(emitted["timing"], PaneTiming.EARLY.value), pc.fill_null(emitted["_fired_before"], False)
    )
    emitted = emitted.append_column("fired", fired).select(state.column_names).cast(state.schema)
    kept = state.join(panes.select(keys), keys=keys, join_type="left anti").select(state.column_names)
    return pa.concat_tables([kept, emitted])


def pane_timing(on_time_watermark: datetime | None, fired_before: Column) -> Column:
    passed = tx.closed_by(on_time_watermark)
    return (
        F.when(~passed, F.lit(PaneTiming.EARLY))
        .when(fired_before, F.lit(PaneTiming.LATE))
        .otherwise(F.lit(PaneTiming.ON_TIME))
    )


def _renamed(state: DataFrame, pipeline: Pipeline) -> DataFrame:
    return state.select(
        *window_key(pipeline), *[F.col(c).alias(f"_prev_{c}") for c in (*pipeline.metric_names, *PANE_STATE)]
    )


def next_panes(
    state: DataFrame, partials: DataFrame, on_time_watermark: datetime | None, pipeline: Pipeline
) -> DataFrame:
    """Tumbling and hopping windows: the panes one micro-batch emits.

    ``partials`` are this batch's on-time values per window and key; each touched window's new value
    is its previous one combined with the partial (lakehouse.dataflow.metric_merges). Untouched
    windows the watermark has just passed get their ON_TIME pane with an unchanged value.

    Args:
        state: the latest pane of each live window before this batch.
        partials: this batch's on-time values per window and key.
        on_time_watermark: the watermark the batch's ON_TIME panes fire at (None: none yet).
        pipeline: the pipeline the rows belong to.
    """
    keys = window_key(pipeline)
    touched = partials.join(_renamed(state, pipeline), on=keys, how="left").select(
        *keys,
        *[combined(m, F.col(f"_prev_{m.name}"), F.col(m.name)).alias(m.name) for m in pipeline.metrics],
        F.coalesce(F.col("_prev_pane_index") + 1, F.lit(0)).alias("pane_index"),
        F.coalesce(F.col("_prev_fired"), F.lit(False)).alias("fired"),
        F.lit(False).alias("is_retraction"),
    )
    return touched.unionByName(_watermark_panes(state, partials, on_time_watermark, pipeline)).select(
        *pipeline.gold_columns,
        "pane_index",
        pane_timing(on_time_watermark, F.col("fired")).alias("timing"),
        "is_retraction",
    )


def _watermark_panes(
    state: DataFrame, touched: DataFrame, on_time_watermark: datetime | None, pipeline: Pipeline
) -> DataFrame:
    """ON_TIME panes of windows the watermark has passed that this batch did not touch."""
    passed = tx.closed_by(on_time_watermark)
    return (
        state.join(touched.select(*window_key(pipeline)), on=window_key(pipeline), how="left_anti")
        .where(passed & ~F.col("fired"))
        .select(
            *pipeline.gold_columns,
            (F.col("pane_index") + 1).alias("pane_index"),
            "fired",
            F.lit(False).alias("is_retraction"),
        )
    )


def next_session_panes(
    state: DataFrame, on_time_events: DataFrame, on_time_watermark: datetime | None, pipeline: Pipeline
) -> DataFrame:
    """Session windows: merge this batch's events into the live sessions of their keys.

    A session that keeps its bounds gets its next pane; one whose bounds change is withdrawn (a
    retraction pane) and the merged session starts as a new window at pane 0.

    Args:
        state: the latest pane of each live session before this batch.
        on_time_events: this batch's on-time events.
        on_time_watermark: the watermark the batch's ON_TIME panes fire at (None: none yet).
        pipeline: the pipeline the rows belong to.
    """
    keys = list(pipeline.keys)
    points = tx.aggregate_metrics(tx.assign_windows(on_time_events, pipeline), pipeline).withColumns(
        {"pane_index": F.lit(None).cast("long"), "fired": F.lit(None).cast("boolean"), "_from_state": F.lit(False)}
    )
    live = state.join(points.select(*keys).distinct(), on=keys, how="left_semi").withColumn("_from_state", F.lit(True))
    absorbed_fields = [*pipeline.gold_columns, *PANE_STATE]
    merged = tx.merge_sessions(
        live.unionByName(points),
        pipeline,
        carry={
            "_new_events": F.count(F.when(~F.col("_from_state"), 1)),
            "_absorbed": F.collect_list(F.when(F.col("_from_state"), F.struct(*absorbed_fields))),
        },
    ).where(F.col("_new_events") > 0)
    only = F.get(F.col("_absorbed"), 0)  # null when the session is new
    same_bounds = (
        (F.size("_absorbed") == 1)
        & (only["window_start"] == F.col("window_start"))
        & (only["window_end"] == F.col("window_end"))
    )
    sessions = merged.select(
        *pipeline.gold_columns,
        F.when(same_bounds, only["pane_index"] + 1).otherwise(F.lit(0)).alias("pane_index"),
        F.when(same_bounds, only["fired"]).otherwise(F.lit(False)).alias("fired"),
        F.lit(False).alias("is_retraction"),
    )
    withdrawn = (
        merged.where(~same_bounds)
        .select(F.explode("_absorbed").alias("_old"))
        .select(*[F.col(f"_old.{c}").alias(c) for c in absorbed_fields])
        .withColumns({"pane_index": F.col("pane_index") + 1, "is_retraction": F.lit(True)})
    )
    changed = sessions.unionByName(withdrawn)
    return changed.unionByName(_watermark_panes(state, changed, on_time_watermark, pipeline)).select(
        *pipeline.gold_columns,
        "pane_index",
        pane_timing(on_time_watermark, F.col("fired")).alias("timing"),
        "is_retraction",
    )
