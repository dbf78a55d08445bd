"""The golden matrix of Streaming 102 on its team-score example, replayed through the real stream.

Scenario (tests/resources/team_scores_102.jsonl, all on 2026-01-05, team "red"): ten scores whose
2-minute windows total 14, 22, 3 and 12. Arrival times follow the narrative: the 9 of the first
window (event time 12:01:25) reaches the log last but one, at 12:08:46. With a 1-minute watermark
delay the watermark has passed 12:02 by then (12:06:02), so the 9 is late: the speed result shows
5 until the correction run restores 14. With a 6-minute delay the watermark waits for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import pytest
from pyspark.sql import functions as F

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.layers import corrections
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.corrections import CorrectionRun
from lakehouse.layers.replay import read_scenario, replay, replay_result
from lakehouse.storage.catalog import CORRECTION_RUNS, CORRECTIONS, pipeline_tables, register_tables
from lakehouse.storage.ops_tables import rows_at
from tests.conftest import RESOURCES, make_settings

TEAM_SCORES = get_pipeline("team_scores")
SESSIONS = get_pipeline("team_scores_sessions")
W1, W2, W3, W4, END = (datetime(2026, 1, 5, 12, m) for m in (0, 2, 4, 6, 8))
BATCH_TOTALS = {W1: 14, W2: 22, W3: 3, W4: 12}


def replayed(spark, tmp_path_factory, pipeline, scenario, **durations):
    home = tmp_path_factory.mktemp(f"replay-{pipeline.name}")
    settings = make_settings(home).replace(**durations)
    replay(spark, settings, pipeline, read_scenario(RESOURCES / scenario))
    return settings, replay_result(spark, settings, pipeline)


def speed_totals(result) -> dict[datetime, int]:
    return {row["window_start"]: row["total_score"] for row in result["speed"]}


def view_rows(spark, settings, view: str) -> list[dict]:
    register_tables(spark, settings, [TEAM_SCORES, SESSIONS])
    return [row.asDict() for row in spark.table(view).collect()]


@pytest.fixture(scope="module")
def too_fast(spark, tmp_path_factory):
    return replayed(spark, tmp_path_factory, TEAM_SCORES, "team_scores_102.jsonl", watermark_delay="1m")


@pytest.fixture(scope="module")
def slow_enough(spark, tmp_path_factory):
    return replayed(spark, tmp_path_factory, TEAM_SCORES, "team_scores_102.jsonl", watermark_delay="6m")


@pytest.fixture(scope="module")
def with_allowed_lateness(spark, tmp_path_factory):
    return replayed(
        spark, tmp_path_factory, TEAM_SCORES, "team_scores_102.jsonl", watermark_delay="1m", allowed_lateness="5m"
    )


class DiedMidRun(Exception):
    pass


def _dies(*_):
    raise DiedMidRun("the process died before the batch write")


@pytest.fixture(scope="module")
def corrected(spark, too_fast):
    """The too-fast run after a correction run that died between its log append and its batch
    write, and the run that resumed it (module scope: later tests see it corrected)."""
    settings, _ = too_fast
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(corrections, "replace_where", _dies)
        with pytest.raises(DiedMidRun):
            CorrectionRun(spark, settings, TEAM_SCORES).run()
    return settings, CorrectionRun(spark, settings, TEAM_SCORES).run()


def test_a_correction_that_died_before_its_batch_write_is_resumed_by_the_next_run(corrected):
    settings, run = corrected
    runs = rows_at(CORRECTION_RUNS.uri(settings), settings=settings)
    assert run.resumed and run.sequence == 0
    assert sorted((row["run_id"], row["status"]) for row in runs) == [
        (run.run_id, "planned"),
        (run.run_id, "succeeded"),
    ]


def test_fixed_windows_in_batch_give_the_102_totals(spark, slow_enough):
    settings, _ = slow_enough  # not the too-fast run: its batch table is the correction's to fill
    BatchLayer(spark, settings, TEAM_SCORES).backfill(W1, END, source="log", chunk="1h")
    batch = spark.read.format("delta").load(pipeline_tables(TEAM_SCORES).batch.uri(settings)).collect()
    assert {row["window_start"]: row["total_score"] for row in batch} == BATCH_TOTALS


def test_too_fast_watermark_leaves_the_late_9_out_of_its_window(too_fast, spark):
    settings, result = too_fast
    assert speed_totals(result) == {W1: 5, W2: 22, W3: 3, W4: 12}
    bronze = spark.read.format("delta").load(pipeline_tables(TEAM_SCORES).bronze.uri(settings))
    assert [(r["event_id"], r["batch_id"]) for r in bronze.where(F.col("fate") == "late").collect()] == [("s09", 7)]


def test_watermark_slow_enough_waits_for_the_9(slow_enough):
    _, result = slow_enough
    assert speed_totals(result) == BATCH_TOTALS
    # Nothing is late, and the watermark (latest event 12:07:47 - 6m) never passes a window's end.
    assert {pane["timing"] for pane in result["panes"]} == {"EARLY"}


def test_panes_are_early_then_on_time_when_the_watermark_passes(too_fast):
    _, result = too_fast
    panes = [
        (p["batch_id"], p["window_start"], p["total_score"], p["pane_index"], p["timing"]) for p in result["panes"]
    ]
    assert panes == [
        (0, W1, 5, 0, "EARLY"),
        (1, W2, 7, 0, "EARLY"),
        (2, W1, 5, 1, "ON_TIME"),  # watermark 12:03:39 - 1m passes 12:02 with no new event
        (2, W2, 14, 1, "EARLY"),  # the 3 and the 4 arrive together
        (3, W3, 3, 0, "EARLY"),
        (4, W2, 22, 2, "EARLY"),
        (5, W2, 22, 3, "ON_TIME"),
        (5, W4, 8, 0, "EARLY"),
        (6, W3, 3, 1, "ON_TIME"),
        (6, W4, 11, 1, "EARLY"),
        (8, W4, 12, 2, "EARLY"),  # batch 7 held only the late 9: no pane
    ]


def test_allowed_lateness_turns_the_9_into_a_late_pane(with_allowed_lateness):
    _, result = with_allowed_lateness
    first_window = [(p["total_score"], p["timing"]) for p in result["panes"] if p["window_start"] == W1]
    assert first_window == [(5, "EARLY"), (5, "ON_TIME"), (14, "LATE")]
    assert speed_totals(result) == BATCH_TOTALS


def test_discarding_panes_sum_to_the_final_value(spark, too_fast):
    settings, result = too_fast
    deltas: dict[datetime, int] = {}
    for row in view_rows(spark, settings, "gold.team_scores__discarding"):
        deltas[row["window_start"]] = deltas.get(row["window_start"], 0) + row["total_score"]
    assert deltas == speed_totals(result)
    accumulating = view_rows(spark, settings, "gold.team_scores__accumulating")
    assert {row["window_start"]: row["total_score"] for row in accumulating} == speed_totals(result)


def test_retracting_log_nets_to_the_final_value(spark, too_fast):
    settings, result = too_fast
    rows = view_rows(spark, settings, "gold.team_scores__retracting")
    net: dict[datetime, int] = {}
    for row in rows:
        net[row["window_start"]] = net.get(row["window_start"], 0) + row["total_score"]
    assert net == speed_totals(result)
    second_window = sorted((r["pane_index"], r["change"], r["total_score"]) for r in rows if r["window_start"] == W2)
    assert second_window == [
        (0, "insert", 7),
        (1, "insert", 14),
        (1, "retract", -7),
        (2, "insert", 22),
        (2, "retract", -14),
        (3, "insert", 22),
        (3, "retract", -22),
    ]


def test_correction_restores_the_late_9_with_a_retraction(spark, corrected):
    settings, run = corrected
    assert (run.late_events, run.windows_recomputed, run.rows_changed) == (1, 1, 1)
    log = spark.read.format("delta").load(CORRECTIONS.uri(settings)).where(F.col("pipeline") == "team_scores")
    assert sorted((r["change"], r["values"]["total_score"], r["late_events"]) for r in log.collect()) == [
        ("insert", "14", 1),
        ("retract", "5", 1),
    ]
    served = view_rows(spark, settings, "gold.team_scores")
    assert {r["window_start"]: (r["total_score"], r["source"]) for r in served} == {
        W1: (14, "batch"),
        W2: (22, "speed"),
        W3: (3, "speed"),
        W4: (12, "speed"),
    }


def test_speed_value_plus_corrections_equals_the_batch_value(spark, corrected, tmp_path_factory):
    settings, _ = corrected
    log = spark.read.format("delta").load(CORRECTIONS.uri(settings))
    net = {}
    for row in log.collect():
        sign = 1 if row["change"] == "insert" else -1
        net[row["window_start"]] = net.get(row["window_start"], 0) + sign * int(row["values"]["total_score"])
    speed = spark.read.format("delta").load(pipeline_tables(TEAM_SCORES).speed.uri(settings)).collect()
    assert {r["window_start"]: r["total_score"] + net.get(r["window_start"], 0) for r in speed} == BATCH_TOTALS


def test_team_scores_audit_explains_the_late_9_and_the_corrected_serving_view_agrees(spark, corrected, tmp_path):
    from lakehouse.audit.quality import validate_audit
    from lakehouse.audit.reconcile import Auditor
    from lakehouse.audit.report import gather_inputs, render_report

    settings, _ = corrected
    auditor = Auditor(spark, settings, TEAM_SCORES)
    speed = auditor.reconcile(W1, END)  # the watermark (12:06:47) has closed the first three windows
    assert (speed.windows_compared, speed.matched, speed.explained["late"], speed.explained["corrected"]) == (
        3,
        2,
        1,
        1,
    )
    [late] = [row for row in speed.rows if row["status"] == "explained"]
    assert (late["window_start"], late["truth"], late["speed"], late["late_events"]) == (
        W1,
        {"total_score": "14"},
        {"total_score": "5"},
        1,
    )
    serving = auditor.reconcile(W1, END, target="serving")
    assert serving.ok and serving.matched == serving.windows_compared == 3
    quality = validate_audit(
        spark, settings, TEAM_SCORES, serving.run_id, serving.pins, W1, END, serving.newest_event_time
    )
    assert quality.ok and [s.suite for s in quality.suites] == [
        "team_scores.raw_events",
        "team_scores.bronze",
        "team_scores.gold",
    ]
    page = render_report(serving, gather_inputs(spark, settings, TEAM_SCORES, serving), quality=quality)
    assert "Audit of team_scores: serving view" in page and "All differences explained" in page


def test_rerunning_the_correction_changes_nothing(spark, corrected):
    settings, _ = corrected
    before = spark.read.format("delta").load(CORRECTIONS.uri(settings)).count()
    again = CorrectionRun(spark, settings, TEAM_SCORES).run()
    assert again.rows_changed == 0
    assert spark.read.format("delta").load(CORRECTIONS.uri(settings)).count() == before


# --- sessions ----------------------------------------------------------------------------------------
# tests/resources/team_scores_sessions.jsonl, 1-minute gap, per user. alice scores 5 at 12:00:00 and 3
# at 12:00:40 (one session, [12:00:00, 12:01:40)), then 4 at 12:02:30 (a second one, [12:02:30,
# 12:03:30)); her 2 at 12:01:35 arrives last and bridges them: both are retracted, [12:00:00,
# 12:03:30) with 14 replaces them. bob's 6 and 1 are 4m40s apart: two sessions.


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 1, 5, 12, minute, second)


@pytest.fixture(scope="module")
def sessions(spark, tmp_path_factory):
    return replayed(spark, tmp_path_factory, SESSIONS, "team_scores_sessions.jsonl")


def test_sessions_merge_and_retract_the_sessions_they_absorb(sessions):
    _, result = sessions
    alice = [
        (p["batch_id"], p["window_start"], p["window_end"], p["total_score"], p["is_retraction"], p["timing"])
        for p in result["panes"]
        if p["user"] == "alice"
    ]
    assert alice == [
        (0, at(0), at(1), 5, False, "EARLY"),
        (2, at(0), at(1), 5, True, "EARLY"),
        (2, at(0), at(1, 40), 8, False, "EARLY"),  # the 3 extends it
        (3, at(2, 30), at(3, 30), 4, False, "EARLY"),
        (4, at(0), at(1, 40), 8, True, "EARLY"),
        (4, at(0), at(3, 30), 14, False, "EARLY"),  # the 2 bridges
        (4, at(2, 30), at(3, 30), 4, True, "EARLY"),
        (5, at(0), at(3, 30), 14, False, "ON_TIME"),  # bob's 12:05 moves the watermark to 12:04
    ]


def test_final_sessions_equal_the_batch_sessions(spark, sessions):
    settings, result = sessions
    BatchLayer(spark, settings, SESSIONS).backfill(at(0), at(10), source="log", chunk="1h")
    batch = spark.read.format("delta").load(pipeline_tables(SESSIONS).batch.uri(settings))
    expected = {("alice", at(0), at(3, 30), 14), ("bob", at(0, 20), at(1, 20), 6), ("bob", at(5), at(6), 1)}
    assert {(r["user"], r["window_start"], r["window_end"], r["total_score"]) for r in batch.collect()} == expected
    assert {(r["user"], r["window_start"], r["window_end"], r["total_score"]) for r in result["speed"]} == expected


def test_session_retracting_log_nets_to_the_final_sessions(spark, sessions):
    settings, result = sessions
    net: dict[tuple, int] = {}
    for row in view_rows(spark, settings, "gold.team_scores_sessions__retracting"):
        key = (row["user"], row["window_start"], row["window_end"])
        net[key] = net.get(key, 0) + row["total_score"]
    live = {key: value for key, value in net.items() if value}
    assert live == {(r["user"], r["window_start"], r["window_end"]): r["total_score"] for r in result["speed"]}


def test_replay_refuses_a_home_that_already_has_events(spark, too_fast):
    from lakehouse.errors import LakehouseError

    settings, _ = too_fast
    with pytest.raises(LakehouseError, match="already holds events"):
        replay(spark, settings, TEAM_SCORES, read_scenario(RESOURCES / "team_scores_102.jsonl"))


def test_scenario_line_without_arrival_is_refused(tmp_path):
    from lakehouse.errors import LakehouseError

    scenario = tmp_path / "bad.jsonl"
    scenario.write_text('{"event_id": "x", "score": 1}\n')
    with pytest.raises(LakehouseError, match=r"bad.jsonl:1: .*arrival"):
        read_scenario(scenario)


# --- the toll pipelines ------------------------------------------------------------------------------
# tests/resources/toll_straggler.jsonl: the README's straggler (e4, event time 08:00:20) arrives when
# the watermark is 08:01:30.


@pytest.mark.slow
def test_replay_from_the_command_line_then_a_correction_on_toll_traffic(spark, tmp_path):
    # The replay as a user types it; the correction and the reads then run in this test's own session
    # (each command is one more JVM start: `lakehouse correct` runs in the chaos loop and on the
    # cluster in tests/test_kafka.py, the SQL command has its own tests).
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_SHUFFLE_PARTITIONS": "2"}

    def lakehouse(*args):
        done = subprocess.run(
            [sys.executable, "-m", "lakehouse.cli", *args], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    replayed_json = json.loads(
        lakehouse("replay", "--pipeline", "toll_traffic", str(RESOURCES / "toll_straggler.jsonl"), "--format", "json")
    )
    first_window = [s for s in replayed_json["speed"] if s["window_start"] == "2026-01-05T08:00:00"]
    assert [(s["vehicles"], s["revenue"]) for s in first_window] == [(2, "11.10")]
    settings = make_settings(tmp_path / "home")
    assert "1 late events" in CorrectionRun(spark, settings, get_pipeline("toll_traffic")).run().summary()
    corrections = spark.read.format("delta").load(CORRECTIONS.uri(settings)).orderBy("change").collect()
    assert [(row["change"], row["values"]) for row in corrections] == [
        ("insert", {"vehicles": "3", "revenue": "17.10"}),
        ("retract", {"vehicles": "2", "revenue": "11.10"}),
    ]
    assert "nothing to do" in CorrectionRun(spark, settings, get_pipeline("toll_traffic")).run().summary()


def test_hopping_windows_late_event_is_corrected_in_every_window_it_falls_in(spark, tmp_path_factory):
    hopping = get_pipeline("toll_traffic_5m")
    settings, result = replayed(spark, tmp_path_factory, hopping, "toll_straggler.jsonl")
    # e4 at 08:00:20 falls in the windows starting 07:56 .. 08:00; the earliest ends at 08:01:00,
    # before the watermark (08:01:30), so it is late for all five.
    run = CorrectionRun(spark, settings, hopping).run()
    assert (run.late_events, run.windows_recomputed) == (1, 5)
    BatchLayer(spark, settings, hopping).backfill(
        datetime(2026, 1, 5, 7, 56), datetime(2026, 1, 5, 8, 4), source="log", chunk="1h"
    )
    batch = spark.read.format("delta").load(pipeline_tables(hopping).batch.uri(settings))
    corrections = spark.read.format("delta").load(CORRECTIONS.uri(settings)).collect()
    corrected = {s["window_start"]: s["vehicles"] for s in result["speed"]}
    for row in corrections:
        sign = 1 if row["change"] == "insert" else -1
        corrected[row["window_start"]] = corrected.get(row["window_start"], 0) + sign * int(row["values"]["vehicles"])
    assert corrected == {
        r["window_start"]: r["vehicles"]
        for r in batch.where(F.col("window_start") < datetime(2026, 1, 5, 8, 4)).collect()
    }
