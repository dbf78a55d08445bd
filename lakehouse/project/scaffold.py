"""``lakehouse init``: a new project with one example pipeline, its suite and a sample of events."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.project.project import EXPECTATIONS_DIR, PIPELINES_DIR, PROJECT_FILE, Project, load_project

PROJECT_TEMPLATE = """\
# A lakehouse project (docs/pipelines.md): every command, DAG and the Spark service serve its
# pipelines when LAKEHOUSE_PROJECT names this folder.
name: {name}
# With more than one pipeline, what a command that acts on one runs without --pipeline, e.g.:
# default_pipeline: page_views
# Versioned dimensions a pipeline can join (dim.<name>), e.g.:
# dimensions:
#   pages: {{key: page, attributes: [section]}}
"""

PIPELINE_TEMPLATE = """\
# Page views per 5-minute window and page: how many, by how many visitors, and how fast pages loaded.
description: Views, distinct visitors and load times per 5-minute window and page
fields:
  event_id: string            # unique per event: copies of one id count once
  page: string
  visitor: string
  load_ms: integer
  referrer: {kind: string, required: false}
  event_time: timestamp       # ISO-8601 with a zone, e.g. 2026-01-05T08:00:00Z
keys: [page]
window: {size: 5m}            # tumbling; {size: 10m, slide: 1m} hops, {gap: 30m} makes sessions
metrics:
  views: count
  visitors: {approx_distinct: visitor}
  load_ms_total: {sum: load_ms}
  fastest_ms: {min: load_ms}
  slowest_ms: {max: load_ms}
  mean_load_ms: {mean: {sum: load_ms_total, count: views}}
watermark_delay: 1m           # windows close this long after the newest event time
allowed_lateness: 0s          # events later than that go to the batch layer's corrections
"""

SUITE = {
    "name": "page_views.raw_events",
    "meta": {"about": "Row rules: a breaking event is quarantined with the rule's reason."},
    "expectations": [
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "load_ms", "min_value": 0, "max_value": 600000},
            "meta": {"reason": "implausible_load_time"},
        },
        {
            "type": "expect_column_values_to_match_regex",
            "kwargs": {"column": "page", "regex": "^/"},
            "meta": {"reason": "page_not_a_path"},
        },
    ],
}
PAGES = ("/", "/pricing", "/docs", "/blog", "/signup")


def sample_events(count: int = 400, seed: int = 1) -> list[str]:
    """A morning of page views, with one copy sent twice and two that break a rule."""
    rng, start = random.Random(seed), datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
    events = []
    for index in range(count):
        at = start + timedelta(seconds=index * 3600 / count)
        events.append(
            {
                "event_id": f"pv-{index:05d}",
                "page": rng.choice(PAGES),
                "visitor": f"v{rng.randrange(60):03d}",
                "load_ms": rng.randrange(80, 2500),
                "event_time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    events += [
        events[7],
        {**events[9], "event_id": "pv-bad-1", "load_ms": -5},
        {**events[11], "event_id": "pv-bad-2", "page": "home"},
    ]
    return [json.dumps(event) for event in events]


def make_project(root: Path) -> Project:
    """A project in ``root`` (a new or empty folder), valid as made."""
    root = root.expanduser().resolve()
    if root.exists() and any(root.iterdir()):
        raise LakehouseError(f"{root} is not empty: lakehouse init makes a project in a new or empty folder")
    for folder in (PIPELINES_DIR, EXPECTATIONS_DIR, "events"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    name = root.name if root.name.replace("_", "").isalnum() else "my_project"
    (root / PROJECT_FILE).write_text(PROJECT_TEMPLATE.format(name=name), encoding="utf-8")
    (root / PIPELINES_DIR / "page_views.yaml").write_text(PIPELINE_TEMPLATE, encoding="utf-8")
    (root / EXPECTATIONS_DIR / "page_views.raw_events.json").write_text(json.dumps(SUITE, indent=2) + "\n")
    (root / "events" / "page_views.jsonl").write_text("\n".join(sample_events()) + "\n", encoding="utf-8")
    return load_project(root)
