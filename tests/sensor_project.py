"""A pipeline no shipped code knows, declared only in a temporary project: sensor readings in
10-minute windows sliding by 1 minute, with the count, min, max and mean temperature per sensor and
the number of distinct firmware versions heard. Its events, and a plain-Python oracle of its
windows that shares no code with ``lakehouse``. Beside it, a session pipeline of the project's own
(no parent): the same metrics per burst of a sensor's readings, its events and their oracle."""

from __future__ import annotations

import json
import random
import shutil
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

NAME = "sensor_readings"
START = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
SIZE, SLIDE = timedelta(minutes=10), timedelta(minutes=1)
PIPELINE = """\
description: Temperature per sensor over 10-minute windows sliding by 1 minute
fields:
  event_id: string
  sensor: string
  celsius: {kind: decimal, precision: 5, scale: 2}
  firmware: string
  event_time: timestamp
keys: [sensor]
window: {size: 10m, slide: 1m}
metrics:
  readings: count
  celsius_total: {sum: celsius}
  coldest: {min: celsius}
  warmest: {max: celsius}
  firmwares: {approx_distinct: firmware}
  warm_readings: {custom: warm_readings}
  mean_celsius: {mean: {sum: celsius_total, count: readings}}
watermark_delay: 2m
"""
SUITE = {
    "name": f"{NAME}.raw_events",
    "expectations": [
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "celsius", "min_value": -60, "max_value": 70},
            "meta": {"reason": "implausible_temperature"},
        }
    ],
}


# A metric the declaration cannot say, in the project's own Python.
CUSTOM_METRICS = """\
from pyspark.sql import functions as F

from lakehouse.dataflow.custom_metrics import metric


@metric(merge="sum", type="bigint")
def warm_readings():
    return F.count(F.when(F.col("celsius") >= 20, 1))
"""


BURSTS = "sensor_bursts"
GAP = timedelta(minutes=5)
BURSTS_PIPELINE = PIPELINE.replace(
    "description: Temperature per sensor over 10-minute windows sliding by 1 minute",
    "description: Temperature per sensor per burst of readings (5 minutes without one end a burst)",
).replace("window: {size: 10m, slide: 1m}", "window: {gap: 5m}")


def add_to_project(root: Path) -> None:
    (root / "pipelines" / f"{NAME}.yaml").write_text(PIPELINE)
    (root / "pipelines" / "metrics.py").write_text(CUSTOM_METRICS)
    (root / "expectations" / f"{NAME}.raw_events.json").write_text(json.dumps(SUITE, indent=2))


def add_bursts_to_project(root: Path) -> None:
    """The session pipeline, with its own log and the same row rule."""
    (root / "pipelines" / f"{BURSTS}.yaml").write_text(BURSTS_PIPELINE)
    suite = {**SUITE, "name": f"{BURSTS}.raw_events"}
    (root / "expectations" / f"{BURSTS}.raw_events.json").write_text(json.dumps(suite, indent=2))


def project_copy(root: Path, source: Path) -> Path:
    """The shipped examples' project copied to ``root``, so that a test can add a pipeline to it."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "lakehouse.yaml", root / "lakehouse.yaml")
    for folder in ("pipelines", "expectations"):
        shutil.copytree(source / folder, root / folder, dirs_exist_ok=True)
    return root


def events(count: int = 360, seed: int = 3, start: datetime = START) -> tuple[list[dict], list[dict]]:
    """(on time, late): readings of three sensors over an hour, with a copy resent, a reading out
    of range, and a few readings that arrive after the watermark passed their windows."""
    rng = random.Random(seed)
    readings = [
        {
            "event_id": f"r{i:04d}",
            "sensor": f"s{i % 3}",
            "celsius": float(Decimal(rng.randrange(-500, 3500)) / 100),
            "firmware": rng.choice(["1.0", "1.1", "2.0"]),
            "event_time": (start + timedelta(seconds=10 * i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        for i in range(count)
    ]
    on_time = [*readings, readings[5], {**readings[8], "event_id": "bad", "celsius": 99.5}]
    late = [{**r, "event_id": f"late-{r['event_id']}", "celsius": 1.25} for r in readings[30:33]]
    return on_time, late


def _reading(rng: random.Random, event_id: str, sensor: str, moment: datetime) -> dict:
    return {
        "event_id": event_id,
        "sensor": sensor,
        "celsius": float(Decimal(rng.randrange(-500, 3500)) / 100),
        "firmware": rng.choice(["1.0", "1.1", "2.0"]),
        "event_time": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def burst_events(seed: int = 5, start: datetime = START) -> tuple[list[dict], list[dict]]:
    """(on time, late): each of three sensors sends 12 readings 20 s apart (a burst), then none for
    8m20s, five times over an hour; s1 starts a minute after s0, s2 two. A copy is resent and one
    reading is out of range. The late reading, s0's at 06:08, came in the silence between its first
    two bursts: less than a gap from both, it joins them into one session."""
    rng = random.Random(seed)
    readings = [
        _reading(
            rng,
            f"b{sensor}{burst}{i:02d}",
            f"s{sensor}",
            start + timedelta(minutes=sensor + 12 * burst, seconds=20 * i),
        )
        for sensor in range(3)
        for burst in range(5)
        for i in range(12)
    ]
    on_time = [*readings, readings[7], {**readings[20], "event_id": "bad", "celsius": 99.5}]
    return on_time, [_reading(rng, "bridge", "s0", start + timedelta(minutes=8))]


def burst_oracle(lines: list[dict]) -> dict[tuple[str, datetime], tuple[datetime, int]]:
    """Per sensor and burst start: the burst's end (its last reading + the gap) and its readings,
    over the first copy of each valid reading."""
    seen, moments = set(), defaultdict(list)
    for event in lines:
        if event["event_id"] in seen or not -60 <= event["celsius"] <= 70:
            continue
        seen.add(event["event_id"])
        moments[event["sensor"]].append(
            datetime.strptime(event["event_time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        )
    bursts = {}
    for sensor, times in moments.items():
        times.sort()
        first = 0
        for i in range(1, len(times) + 1):
            if i == len(times) or times[i] >= times[i - 1] + GAP:
                bursts[(sensor, times[first])] = (times[i - 1] + GAP, i - first)
                first = i
    return bursts


def _window_starts(moment: datetime):
    first = moment.replace(second=0, microsecond=0) - SIZE + SLIDE  # windows align to whole minutes
    return [first + k * SLIDE for k in range(SIZE // SLIDE)]


def oracle(lines: list[dict]) -> dict[tuple[datetime, str], dict]:
    """Every window's values over the first copy of each valid reading."""
    seen, windows = set(), defaultdict(list)
    for event in lines:
        if event["event_id"] in seen or not -60 <= event["celsius"] <= 70:
            continue
        seen.add(event["event_id"])
        moment = datetime.strptime(event["event_time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        for start in _window_starts(moment):
            windows[(start, event["sensor"])].append(event)
    return {key: _values(readings) for key, readings in windows.items()}


def _values(readings: list[dict]) -> dict:
    temperatures = [Decimal(str(r["celsius"])).quantize(Decimal("0.01")) for r in readings]
    total = sum(temperatures)
    return {
        "readings": len(readings),
        "celsius_total": total,
        "coldest": min(temperatures),
        "warmest": max(temperatures),
        "firmwares": len({r["firmware"] for r in readings}),
        "warm_readings": sum(1 for t in temperatures if t >= 20),
        "mean_celsius": total / len(readings),
    }


def as_lines(batch: list[dict]) -> str:
    return "".join(json.dumps(event) + "\n" for event in batch)
