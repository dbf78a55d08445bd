"""Properties of the event-time semantics on random team-score events, random arrival orders,
lateness and duplicates.

Micro-batches are fed straight to ``SpeedLayer.process_batch``, the function the streaming query
calls for each batch, so each example costs Delta commits but no streaming start-up. The number
of examples is small (each one runs the real layers); raise it with HYPOTHESIS_EXAMPLES.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.layers.corrections import CorrectionRun
from lakehouse.layers.speed import SpeedLayer
from lakehouse.storage.catalog import CORRECTIONS, pipeline_tables
from lakehouse.vocabulary import Fate
from tests.conftest import make_settings

PIPELINE = get_pipeline("team_scores")
START = datetime(2026, 1, 5, 12, 0)
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "4"))


@st.composite
def scenarios(draw):
    """Events over 10 minutes of event time, split into arrival batches, some sent twice."""
    count = draw(st.integers(min_value=3, max_value=14))
    events = [
        {
            "event_id": f"e{i:02d}",
            "user": f"u{draw(st.integers(0, 3))}",
            "team": draw(st.sampled_from(["red", "blue"])),
            "score": draw(st.integers(0, 20)),
            "event_time": (START + timedelta(seconds=draw(st.integers(0, 599)))).isoformat() + "Z",
        }
        for i in range(count)
    ]
    arrival = draw(st.permutations(range(count)))
    duplicated = draw(st.lists(st.integers(0, count - 1), max_size=3))
    lines = [json.dumps(events[i]) for i in arrival] + [json.dumps(events[i]) for i in duplicated]
    cuts = sorted(draw(st.lists(st.integers(1, len(lines) - 1), max_size=4, unique=True)))
    bounds = [0, *cuts, len(lines)]
    return [lines[a:b] for a, b in itertools.pairwise(bounds)]


def batch_truth(spark, batches) -> dict[tuple, int]:
    """The batch path over every line: window -> total, keyed by (window_start, team)."""
    raw = spark.createDataFrame(
        [(line, f"{n:03d}.jsonl") for n, lines in enumerate(batches) for line in lines],
        "value string, source_file string",
    )
    events = tx.first_copies(tx.valid_events(tx.parse_events(raw, PIPELINE), PIPELINE), PIPELINE)
    return totals(tx.window_values(events, PIPELINE))


def totals(frame) -> dict[tuple, int]:
    return {(r["window_start"], r["team"]): r["total_score"] for r in frame.collect()}


def run_speed_layer(spark, settings, batches) -> None:
    layer = SpeedLayer(spark, settings, PIPELINE, query_id=f"property-{uuid.uuid4()}")
    for batch_id, lines in enumerate(batches):
        frame = spark.createDataFrame(
            [(line, f"file:/log/{batch_id:03d}.jsonl") for line in lines], "value string, source_file string"
        )
        layer.process_batch(frame, batch_id)


@hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=scenarios(), reordered=st.randoms(use_true_random=False))
def test_speed_plus_corrections_equals_batch_and_speed_equals_batch_over_events_not_late(
    spark, tmp_path_factory, batches, reordered
):
    settings = make_settings(tmp_path_factory.mktemp("property"))
    run_speed_layer(spark, settings, batches)
    tables = pipeline_tables(PIPELINE)
    truth = batch_truth(spark, batches)

    # The batch result does not depend on the order events arrived in.
    shuffled = [line for lines in batches for line in lines]
    reordered.shuffle(shuffled)
    assert batch_truth(spark, [[line] for line in shuffled]) == truth

    # The speed value is the batch value over the events not marked late.
    bronze = spark.read.format("delta").load(tables.bronze.uri(settings))
    speed = totals(spark.read.format("delta").load(tables.speed.uri(settings)))
    not_late = bronze.where(F.col("fate") == Fate.ON_TIME).select(*PIPELINE.field_names)
    assert speed == totals(tx.window_values(not_late, PIPELINE))

    # Speed value + the corrections' retractions and insertions = batch value, for every window.
    CorrectionRun(spark, settings, PIPELINE).run()
    corrected = dict(speed)
    for row in spark.read.format("delta").load(CORRECTIONS.uri(settings)).collect():
        key = (row["window_start"], row["key"]["team"])
        sign = 1 if row["change"] == "insert" else -1
        corrected[key] = corrected.get(key, 0) + sign * int(row["values"]["total_score"])
    assert {key: value for key, value in corrected.items() if value or key in truth} == truth


def pane_log(spark, settings, pipeline) -> list[tuple]:
    panes = spark.read.format("delta").load(pipeline_tables(pipeline).panes.uri(settings))
    columns = [*pipeline.gold_columns, "pane_index", "timing", "is_retraction", "batch_id"]
    return sorted(tuple(row) for row in panes.select(*columns).collect())


@hypothesis_settings(
    max_examples=max(1, EXAMPLES // 2),
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=scenarios())
@pytest.mark.parametrize("pipeline_name", ["team_scores", "team_scores_sessions"])
def test_a_stream_restarted_before_every_batch_emits_the_panes_of_one_that_ran_through(
    spark, tmp_path_factory, pipeline_name, batches
):
    """The pane state a batch hands to the next in memory equals the one a restart reads from the log."""
    pipeline = get_pipeline(pipeline_name)
    through, restarted = (make_settings(tmp_path_factory.mktemp(name)) for name in ("through", "restarted"))
    query_id = f"property-{uuid.uuid4()}"
    layer = SpeedLayer(spark, through, pipeline, query_id=query_id)
    for batch_id, lines in enumerate(batches):
        frame = spark.createDataFrame(
            [(line, f"file:/log/{batch_id:03d}.jsonl") for line in lines], "value string, source_file string"
        )
        layer.process_batch(frame, batch_id)
        SpeedLayer(spark, restarted, pipeline, query_id=query_id).process_batch(frame, batch_id)
    assert pane_log(spark, through, pipeline) == pane_log(spark, restarted, pipeline)
    speed = [
        spark.read.format("delta")
        .load(pipeline_tables(pipeline).speed.uri(home))
        .select(*pipeline.gold_columns)
        .collect()
        for home in (through, restarted)
    ]
    assert sorted(map(tuple, speed[0])) == sorted(map(tuple, speed[1]))
