"""The expectation suites: each catches a row that breaks it and passes clean data, and the raw-events
suite is what routes rows to quarantine (change the file, and the routing changes)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from lakehouse.audit.quality import gx_context, validate_frame
from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.dataflow.pipelines.row_rules import BRONZE, GOLD, RAW_EVENTS, load_suite, row_rules, suite_path
from lakehouse.errors import LakehouseError
from lakehouse.generator import VEHICLE_TYPES
from lakehouse.project.active import active_project
from lakehouse.storage.catalog import pipeline_tables
from lakehouse.storage.frames import literal_frame

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
T0 = datetime(2026, 1, 5, 8, 0)


def bronze_row(n: int, **changes) -> dict:
    event_time = T0 + timedelta(seconds=n)
    row = {
        "event_id": f"e{n}",
        "bridge_id": "B1",
        "booth_id": "B1-1",
        "vehicle_type": "car",
        "axles": 2,
        "toll_amount": Decimal("4.50"),
        "plate_hash": None,
        "event_time": event_time,
        "sent_at": event_time + timedelta(seconds=1),
        "event_date": event_time.date(),
        "fate": "on_time",
        "app_id": "speed:test",
        "batch_id": 0,
        "source_file": "file:/log/f.jsonl",
        "ingested_at": event_time,
    }
    return {**row, **changes}


def gold_row(minute: int, bridge: str = "B1", **changes) -> dict:
    start = T0 + timedelta(minutes=minute)
    row = {
        "window_start": start,
        "window_end": start + timedelta(minutes=1),
        "bridge_id": bridge,
        "vehicle_type": "car",
        "vehicles": 3,
        "revenue": Decimal("13.50"),
        "last_batch_id": 0,
        "updated_at": start,
    }
    return {**row, **changes}


# One row per expectation of each suite, breaking that expectation (and, where unavoidable, a neighbour).
VIOLATIONS = {
    RAW_EVENTS: [
        bronze_row(10, vehicle_type="spaceship"),
        bronze_row(11, axles=1),
        bronze_row(12, toll_amount=Decimal("1000.00")),
        bronze_row(13, event_time=T0 + timedelta(days=2), event_date=(T0 + timedelta(days=2)).date()),
    ],
    BRONZE: [
        bronze_row(20, event_id=None),
        bronze_row(1),
        bronze_row(21, fate="duplicate"),
        bronze_row(22, fate=None),
        bronze_row(23, event_time=None),
        bronze_row(24, bridge_id=None),
        bronze_row(25, toll_amount=None),
        bronze_row(26, source_file=None),
        bronze_row(27, event_date=T0.date() + timedelta(days=1)),
    ],
    GOLD: [
        gold_row(0),
        gold_row(5, window_start=T0 + timedelta(minutes=5, seconds=30)),
        gold_row(6, vehicles=None),
        gold_row(7, vehicles=-1),
        gold_row(8, vehicles=1, revenue=Decimal("1000.00")),
    ],  # freshness: set by the parameter below
}
CLEAN = {
    RAW_EVENTS: [bronze_row(n) for n in range(3)],
    BRONZE: [bronze_row(n) for n in range(3)],
    GOLD: [gold_row(m, bridge) for m in range(3) for bridge in ("B1", "B2")],
}
TEAM = get_pipeline("team_scores")
TEAM_TABLES = pipeline_tables(TEAM)


def team_bronze_row(n: int, **changes) -> dict:
    event_time = T0 + timedelta(seconds=n)
    row = {
        "event_id": f"s{n}",
        "user": f"user{n % 3}",
        "team": "red",
        "score": 5,
        "event_time": event_time,
        "event_date": event_time.date(),
        "fate": "on_time",
        "app_id": "speed:test",
        "batch_id": 0,
        "source_file": "file:/log/f.jsonl",
        "ingested_at": event_time,
    }
    return {**row, **changes}


def team_gold_row(window: int, team: str = "red", **changes) -> dict:
    start = T0 + timedelta(minutes=2 * window)
    row = {
        "window_start": start,
        "window_end": start + timedelta(minutes=2),
        "team": team,
        "total_score": 14,
        "last_batch_id": 0,
        "updated_at": start,
    }
    return {**row, **changes}


# Per (pipeline, suite): the table's schema, clean rows, and one row breaking each expectation.
CASES = {
    ("toll_traffic", RAW_EVENTS): (TABLES.bronze.columns, CLEAN[RAW_EVENTS], VIOLATIONS[RAW_EVENTS]),
    ("toll_traffic", BRONZE): (TABLES.bronze.columns, CLEAN[BRONZE], VIOLATIONS[BRONZE]),
    ("toll_traffic", GOLD): (TABLES.speed.columns, CLEAN[GOLD], VIOLATIONS[GOLD]),
    ("team_scores", RAW_EVENTS): (
        TEAM_TABLES.bronze.columns,
        [team_bronze_row(n) for n in range(3)],
        [team_bronze_row(10, score=1001)],
    ),
    ("team_scores", BRONZE): (
        TEAM_TABLES.bronze.columns,
        [team_bronze_row(n) for n in range(3)],
        [
            team_bronze_row(20, event_id=None),
            team_bronze_row(1),
            team_bronze_row(21, fate="duplicate"),
            team_bronze_row(22, fate=None),
            team_bronze_row(23, event_time=None),
            team_bronze_row(24, user=None),
            team_bronze_row(25, team=None),
            team_bronze_row(26, score=None),
            team_bronze_row(27, source_file=None),
            team_bronze_row(28, event_date=T0.date() + timedelta(days=1)),
        ],
    ),
    ("team_scores", GOLD): (
        TEAM_TABLES.speed.columns,
        [team_gold_row(w, team) for w in range(3) for team in ("red", "blue")],
        [
            team_gold_row(0),
            team_gold_row(5, window_start=T0 + timedelta(minutes=11)),
            team_gold_row(6, total_score=None),
            team_gold_row(7, total_score=-1),
        ],
    ),  # freshness: the parameter
}


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    from tests.conftest import make_settings

    return gx_context(make_settings(tmp_path_factory.mktemp("gx") / "home"))


def _validate(spark, context, pipeline: str, layer: str, rows: list[dict], fresh_since: datetime):
    frame = literal_frame(spark, CASES[pipeline, layer][0], rows)
    parameters = {"fresh_since": fresh_since} if layer == GOLD else {}
    return validate_frame(context, suite_path(pipeline, layer), f"test.{pipeline}.{layer}", frame, parameters)


@pytest.mark.parametrize("pipeline, layer", list(CASES))
def test_each_suite_passes_clean_data(spark, context, pipeline, layer):
    result = _validate(spark, context, pipeline, layer, CASES[pipeline, layer][1], fresh_since=T0)
    assert result.success, [r.expectation_config.type for r in result.results if not r.success]


@pytest.mark.parametrize("pipeline, layer", list(CASES))
def test_each_expectation_of_each_suite_catches_its_violating_row(spark, context, pipeline, layer):
    _, clean, violations = CASES[pipeline, layer]
    # Freshness fails when the newest window ends before the newest event the log holds, less the tolerance.
    result = _validate(spark, context, pipeline, layer, clean + violations, fresh_since=T0 + timedelta(hours=1))
    assert not result.success
    passed = [(r.expectation_config.type, r.expectation_config.meta) for r in result.results if r.success]
    assert passed == []


def test_every_audited_pipeline_has_all_three_suites():
    for pipeline in ("toll_traffic", "team_scores"):
        assert all(suite_path(pipeline, layer).exists() for layer in (RAW_EVENTS, BRONZE, GOLD)), pipeline


def test_row_rules_come_from_the_suite_file_in_its_order(spark, tmp_path):
    suite = load_suite(suite_path("toll_traffic", RAW_EVENTS))
    assert [rule.reason for rule in PIPELINE.rules] == [e["meta"]["reason"] for e in suite["expectations"]]
    assert set(VEHICLE_TYPES) == set(suite["expectations"][0]["kwargs"]["value_set"])  # the generator's too
    # Narrow the vehicle types in a copy of the suite: the same transform now quarantines vans.
    suite["expectations"][0]["kwargs"]["value_set"] = ["car"]
    suite["expectations"][0]["meta"]["reason"] = "not_a_car"
    (tmp_path / "toll_traffic.raw_events.json").write_text(json.dumps(suite))
    narrowed = Pipeline(**{**PIPELINE.__dict__, "rules": row_rules("toll_traffic", tmp_path)})
    lines = [
        json.dumps(
            {
                "event_id": f"v{n}",
                "bridge_id": "B1",
                "booth_id": "B1-1",
                "vehicle_type": kind,
                "axles": 2,
                "toll_amount": 4.5,
                "event_time": "2026-01-05T08:00:00Z",
                "sent_at": "2026-01-05T08:00:01Z",
            }
        )
        for n, kind in enumerate(("car", "van"))
    ]
    raw = literal_frame(spark, "value string, source_file string", [(line, "f.jsonl") for line in lines])
    reasons = {r.raw_event_id: r.reason for r in tx.parse_events(raw, narrowed).collect()}
    assert reasons == {"v0": None, "v1": "not_a_car"}
    shipped = {r.raw_event_id: r.reason for r in tx.parse_events(raw, PIPELINE).collect()}
    assert shipped == {"v0": None, "v1": None}


@pytest.mark.parametrize(
    "expectation, message",
    [
        (
            {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": "a", "value_set": [1]}},
            "needs meta.reason",
        ),
        (
            {"type": "expect_column_mean_to_be_between", "kwargs": {"column": "a"}, "meta": {"reason": "r"}},
            "not a row-level expectation",
        ),
        (
            {
                "type": "unexpected_rows_expectation",
                "kwargs": {"unexpected_rows_query": "SELECT a FROM t"},
                "meta": {"reason": "r"},
            },
            "SELECT \\* FROM \\{batch\\} WHERE",
        ),
        (
            {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": "a"}, "meta": {"reason": "r"}},
            "lacks value_set",
        ),
    ],
)
def test_a_suite_that_cannot_route_rows_fails_to_load_with_the_reason(tmp_path, expectation, message):
    (tmp_path / "p.raw_events.json").write_text(json.dumps({"name": "p.raw_events", "expectations": [expectation]}))
    with pytest.raises(LakehouseError, match=message):
        row_rules("p", tmp_path)


def test_every_shipped_suite_is_a_valid_gx_suite(context):
    import great_expectations as gx

    for path in sorted(active_project().expectations_dir.glob("*.json")):
        document = load_suite(path)
        suite = gx.ExpectationSuite(**{k: document[k] for k in ("name", "expectations", "meta")})
        assert len(suite.expectations) == len(document["expectations"]), path.name
