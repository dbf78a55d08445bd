"""A versioned dimension (``dim.bridges``, type 2) and the join of events to it as of event time
(docs/design.md, "Joins"): the change log's rules without a JVM, then both layers, a full
reprocess and the audit on the variant ``toll_traffic_by_region``, against an oracle of their own."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from lakehouse.audit.reconcile import Auditor
from lakehouse.dataflow.dimensions import apply_changes, parse_changes
from lakehouse.dataflow.pipelines import get_dimension, get_pipeline
from lakehouse.errors import LakehouseError
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.speed import run_speed_layer
from lakehouse.location import local_path
from lakehouse.storage.catalog import dimension_table, pipeline_tables
from lakehouse.storage.dimensions import apply_change_file, apply_inbox, dimension_version, inbox
from lakehouse.storage.log import LogWriter
from lakehouse.storage.ops_tables import rows_at
from tests.oracle import run_oracle

BRIDGES = get_dimension("bridges")

BY_REGION = get_pipeline("toll_traffic_by_region")
TABLES = pipeline_tables(BY_REGION)
MOVE = datetime(2026, 1, 5, 8, 30)
# bridge-00 moves from north to south at 08:30; bridge-03 has no version, so its crossings count in
# "unknown".
DAY, MOVED = "2026-01-05T00:00Z", "2026-01-05T08:30Z"
CHANGES = [
    {"bridge_id": "bridge-00", "name": "North Gate", "region": "north", "zone": "n1", "valid_from": DAY},
    {"bridge_id": "bridge-01", "name": "River Crossing", "region": "south", "zone": "s1", "valid_from": DAY},
    {"bridge_id": "bridge-02", "name": "Harbour", "region": "north", "zone": "n2", "valid_from": DAY},
    {"bridge_id": "bridge-00", "name": "North Gate", "region": "south", "zone": "s3", "valid_from": MOVED},
]  # fmt: skip


def write_changes(path: Path, changes: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(change) + "\n" for change in changes))
    return path


def region_at(bridge: str, moment: datetime) -> str:
    """The test's own reading of CHANGES (not the platform's code)."""
    if bridge == "bridge-00":
        return "north" if moment < MOVE else "south"
    return {"bridge-01": "south", "bridge-02": "north"}.get(bridge, "unknown")


def by_region(per_bridge: dict, region_of=region_at) -> set[tuple]:
    """The oracle's (window, bridge, vehicle type) totals summed per (window, region)."""
    totals = defaultdict(lambda: [0, Decimal("0.00")])
    for (window, bridge, _), (vehicles, revenue) in per_bridge.items():
        total = totals[(window, region_of(bridge, window))]
        total[0] += vehicles
        total[1] += revenue
    return {(window, region, vehicles, revenue) for (window, region), (vehicles, revenue) in totals.items()}


def gold(spark, settings, table) -> set[tuple]:
    frame = spark.read.format("delta").load(table.uri(settings))
    return {(r.window_start, r.region, r.vehicles, r.revenue) for r in frame.collect()}


# -- the change log's rules, no JVM ------------------------------------------------------------------


def parsed(changes: list[dict]) -> list[dict]:
    return parse_changes([json.dumps(c) for c in changes], BRIDGES, "changes.jsonl")


def test_a_move_ends_the_old_version_where_the_new_one_starts_and_a_second_apply_changes_nothing():
    first = apply_changes([], parsed(CHANGES), BRIDGES)
    moved = [(v["region"], v["valid_from"], v["valid_to"]) for v in first.versions if v["bridge_id"] == "bridge-00"]
    assert moved == [("north", datetime(2026, 1, 5), MOVE), ("south", MOVE, None)]
    assert (first.applied, first.already_present) == (4, 0)
    again = apply_changes(first.versions, parsed(CHANGES), BRIDGES)
    assert (again.versions, again.applied, again.already_present) == (first.versions, 0, 4)


def test_a_change_older_than_every_version_ends_where_the_first_one_starts():
    later = apply_changes([], parsed(CHANGES[3:]), BRIDGES)
    earlier = apply_changes(later.versions, parsed(CHANGES[:1]), BRIDGES)
    moved = [(v["region"], v["valid_from"], v["valid_to"]) for v in earlier.versions]
    assert moved == [("north", datetime(2026, 1, 5), MOVE), ("south", MOVE, None)]


def test_a_version_is_never_rewritten_in_place():
    applied = apply_changes([], parsed(CHANGES), BRIDGES)
    with pytest.raises(
        LakehouseError, match="bridge-00 already has a version from 2026-01-05T08:30:00Z with other region"
    ):
        apply_changes(applied.versions, parsed([{**CHANGES[3], "region": "west"}]), BRIDGES)


def test_a_bad_change_log_names_each_bad_line_and_applies_nothing(tmp_path):
    from tests.conftest import make_settings

    settings = make_settings(tmp_path / "home")
    apply_change_file(settings, BRIDGES, write_changes(tmp_path / "good.jsonl", CHANGES[:1]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(CHANGES[1]) + "\nnot json\n"
        + json.dumps({**CHANGES[2], "valid_from": "yesterday"}) + "\n"
        + json.dumps({k: v for k, v in CHANGES[2].items() if k != "zone"}) + "\n"
    )  # fmt: skip
    with pytest.raises(LakehouseError) as refused:
        apply_change_file(settings, BRIDGES, bad)
    message = str(refused.value)
    assert message.startswith("no change applied to dim.bridges: ")
    assert all(f"{bad}:{line}: " in message for line in (2, 3, 4)) and f"{bad}:1:" not in message
    assert "cannot read valid_from 'yesterday'" in message and "exactly the fields" in message
    assert dimension_version(settings, BRIDGES) == 0 and len(rows_at(dimension_table(BRIDGES).uri(settings))) == 1


def test_the_inbox_is_applied_in_name_order_and_each_file_moved_once_applied(tmp_path):
    from tests.conftest import make_settings

    settings = make_settings(tmp_path / "home")
    waiting = inbox(settings, BRIDGES)
    write_changes(waiting / "001.jsonl", CHANGES[:3])
    write_changes(waiting / "002.jsonl", CHANGES[3:])
    reports = apply_inbox(settings, BRIDGES)
    assert [(r.applied, r.already_present, r.version) for r in reports] == [(3, 0, 0), (1, 0, 1)]
    assert not list(waiting.iterdir()) and sorted(p.name for p in (waiting.parent / "applied").iterdir()) == [
        "001.jsonl",
        "002.jsonl",
    ]
    assert apply_inbox(settings, BRIDGES) == []


# -- both layers, as of event time ---------------------------------------------------------------------


def example_event(event_id: str, bridge: str, moment: str, vehicle: str, toll: float) -> str:
    stamp = f"2026-01-05T{moment}Z"
    return json.dumps(
        {"event_id": event_id, "bridge_id": bridge, "booth_id": f"{bridge}-booth-0", "vehicle_type": vehicle,
         "axles": 2, "toll_amount": toll, "event_time": stamp, "sent_at": stamp}
    )  # fmt: skip


def test_the_worked_example_of_the_design_doc(spark, settings, tmp_path):
    """docs/design.md, "Joins": four crossings either side of bridge-00's move, in both layers."""
    apply_change_file(settings, BRIDGES, write_changes(tmp_path / "changes.jsonl", CHANGES))
    lines = [
        example_event("e1", "bridge-00", "08:29:30", "car", 5.00),
        example_event("e2", "bridge-00", "08:30:10", "car", 5.00),
        example_event("e3", "bridge-01", "08:29:40", "van", 7.50),
        example_event("e4", "bridge-03", "08:30:20", "truck", 12.00),
    ]
    LogWriter(settings, BY_REGION.topic).write(datetime(2026, 1, 5, 8, 30, 30), "example", lines)
    run_speed_layer(spark, settings, BY_REGION, available_now=True)
    BatchLayer(spark, settings, BY_REGION).backfill(datetime(2026, 1, 5, 8, 29), datetime(2026, 1, 5, 8, 31))
    expected = {
        (datetime(2026, 1, 5, 8, 29), "north", 1, Decimal(5.00)),
        (datetime(2026, 1, 5, 8, 29), "south", 1, Decimal(7.50)),
        (datetime(2026, 1, 5, 8, 30), "south", 1, Decimal(5.00)),
        (datetime(2026, 1, 5, 8, 30), "unknown", 1, Decimal(12.00)),
    }
    assert gold(spark, settings, TABLES.speed) == expected == gold(spark, settings, TABLES.batch)


CONFIG = GeneratorConfig(
    events=1800,
    seed=21,
    start=datetime(2026, 1, 5, 8, 0),
    rate=0.6,
    late_fraction=0.05,
    late_delay="3m",
    duplicate_fraction=0.03,
    malformed_fraction=0.03,
    events_per_file=300,
)


@pytest.mark.slow
def test_windows_keep_the_region_of_their_time_in_the_stream_the_batch_layer_and_a_reprocess(spark, settings, tmp_path):
    apply_change_file(settings, BRIDGES, write_changes(tmp_path / "changes.jsonl", CHANGES))
    generate(settings, CONFIG)
    oracle = run_oracle(local_path(settings.pipeline_log_uri(BY_REGION.topic)), timedelta(minutes=2), files_per_batch=2)
    start, end = datetime(2026, 1, 5, 8, 0), datetime(2026, 1, 5, 9, 0)

    run_speed_layer(spark, settings.replace(max_files_per_trigger=2), BY_REGION, available_now=True)
    assert gold(spark, settings, TABLES.speed) == by_region(oracle.speed)
    BatchLayer(spark, settings, BY_REGION).backfill(start, end, source="bronze")
    assert gold(spark, settings, TABLES.batch) == by_region(oracle.batch)
    BatchLayer(spark, settings, BY_REGION).backfill(start, end, source="log")  # a full reprocess
    assert gold(spark, settings, TABLES.batch) == by_region(oracle.batch)

    # Not today's version: with bridge-00 in the south all day, the morning would differ.
    assert by_region(oracle.batch) != by_region(oracle.batch, lambda bridge, _: region_at(bridge, MOVE))
    unknown = sum(v for (_, bridge, _), (v, _) in oracle.batch.items() if bridge == "bridge-03")
    assert unknown > 0 and unknown == sum(r[2] for r in gold(spark, settings, TABLES.batch) if r[1] == "unknown")

    audit = Auditor(spark, settings, BY_REGION).reconcile(start, end, record=False)
    assert audit.ok and audit.matched > 0 and audit.pins["dim_bridges"] == "0"
