"""Deterministic toll-bridge event generator: the same seed and knobs give the same log, byte for byte.

Events are produced on a simulated clock (``rate`` events per simulated second). Most arrive within
about two seconds of their event time; stragglers (``late_fraction``) arrive after an exponential
delay (mean ``late_delay``), like a booth that lost its uplink; some are sent twice
(``duplicate_fraction``); some are broken (``malformed_fraction``), one defect each, cycling through
every kind. Records are written to the retained log in arrival order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from lakehouse.eventtime import parse_duration
from lakehouse.settings import Settings
from lakehouse.storage.kafka_log import KafkaLogWriter
from lakehouse.storage.log import LogWriter
from lakehouse.vocabulary import LogSink

# The vehicle types of the shipped toll_traffic pipeline (its suite, expectations/toll_traffic.raw_events.json).
VEHICLE_TYPES = ("car", "motorcycle", "van", "bus", "truck")
DEFAULT_START = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
MALFORMED_KINDS = (
    "bad_json",
    "missing_field",
    "wrong_type",
    "negative_toll",
    "unknown_vehicle_type",
    "far_future",
    "timestamp_without_zone",
)
# (vehicle type, axle choices, toll per vehicle for the first axle count, extra per axle)
_TARIFF = {
    "car": ((2,), Decimal("6.00"), Decimal("0")),
    "motorcycle": ((2,), Decimal("3.50"), Decimal("0")),
    "van": ((2, 3), Decimal("7.25"), Decimal("1.10")),
    "bus": ((2, 3), Decimal("12.00"), Decimal("2.40")),
    "truck": ((3, 4, 5, 6, 7, 8, 9), Decimal("14.25"), Decimal("4.75")),
}
_VEHICLE_WEIGHTS = (70, 6, 12, 3, 9)


@dataclasses.dataclass(frozen=True)
class GeneratorConfig:
    events: int = 10_000
    seed: int = 7
    start: datetime = DEFAULT_START
    rate: float = 50.0  # events per second of simulated (event) time
    wall_rate: float = 0.0  # events per second of wall time while writing; 0: as fast as possible
    bridges: int = 4
    booths_per_bridge: int = 3
    late_fraction: float = 0.02
    late_delay: str = "5m"  # mean delay of a straggler
    duplicate_fraction: float = 0.01
    malformed_fraction: float = 0.01
    events_per_file: int = 500
    # Each booth's clock is off by a fixed amount within +/- this (0s: every clock is right). Only the
    # stamps move: the same seed gives the same events, arrivals and files with or without skew.
    clock_skew: str = "0s"

    def records(self) -> tuple[list[tuple[datetime, int, str]], Counter]:
        return generate_records(self)

    def validate(self) -> None:
        from lakehouse.errors import LakehouseError

        for name in ("late_fraction", "duplicate_fraction", "malformed_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise LakehouseError(f"{name} must be between 0 and 1")
        if self.events < 0 or self.rate <= 0 or self.bridges < 1 or self.booths_per_bridge < 1:
            raise LakehouseError("events must be >= 0, rate > 0, bridges and booths >= 1")
        if self.events_per_file < 1 or self.wall_rate < 0:
            raise LakehouseError("events_per_file must be >= 1 and wall_rate >= 0")
        if parse_duration(self.late_delay).total_seconds() < 1:
            raise LakehouseError("late_delay must be at least 1s")
        parse_duration(self.clock_skew)  # a clear error for a malformed duration


@dataclasses.dataclass(frozen=True)
class ReadingsConfig:
    """Temperature readings: one per zone every ``interval`` over ``span`` from ``start``, each
    taken within the first minute of its slot. A sensor misses a reading now and then
    (``gap_fraction``); a reading arrives late (``late_fraction``) after an exponential delay of mean
    ``late_delay``, its uplink down. The same seed gives the same log."""

    zones: tuple[str, ...]
    start: datetime = DEFAULT_START
    span: timedelta = timedelta(hours=1)
    seed: int = 7
    interval: str = "10m"
    gap_fraction: float = 0.1
    late_fraction: float = 0.05
    late_delay: str = "40m"
    events_per_file: int = 50
    wall_rate: float = 0.0

    def records(self) -> tuple[list[tuple[datetime, int, str]], Counter]:
        return reading_records(self)

    def validate(self) -> None:
        from lakehouse.errors import LakehouseError

        if not (0 <= self.gap_fraction <= 1 and 0 <= self.late_fraction <= 1):
            raise LakehouseError("gap_fraction and late_fraction must be between 0 and 1")
        if not self.zones or parse_duration(self.interval).total_seconds() < 60 or self.events_per_file < 1:
            raise LakehouseError("readings need zones, an interval of at least 1m and events_per_file >= 1")


def _temperature(rng: random.Random, zone: str, moment: datetime) -> Decimal:
    """A plausible air temperature: colder in the north, a daily cycle peaking mid-afternoon, noise."""
    base = {"n": 2.0, "s": 14.0}.get(zone[:1], 8.0) + (sum(zone.encode()) % 5)
    daily = 6 * math.sin(2 * math.pi * (moment.hour + moment.minute / 60 - 9) / 24)
    return Decimal(str(round(base + daily + rng.uniform(-3, 3), 1))) + Decimal("0.0")  # never "-0.0"


def reading_records(config: ReadingsConfig) -> tuple[list[tuple[datetime, int, str]], Counter]:
    """All readings as (arrival time, sequence, line), in arrival order, and how many of each kind."""
    config.validate()
    rng, slot = random.Random(config.seed), parse_duration(config.interval)
    late_mean = parse_duration(config.late_delay).total_seconds()
    records: list[tuple[datetime, int, str]] = []
    kinds: Counter = Counter()
    for tick in range(int(config.span / slot)):
        for zone in config.zones:
            if rng.random() < config.gap_fraction:
                kinds["missed"] += 1
                continue
            taken = config.start + tick * slot + timedelta(milliseconds=rng.randrange(60_000))
            late = rng.random() < config.late_fraction
            delay = max(1.0, rng.expovariate(1 / late_mean)) if late else rng.uniform(0.05, 1.5)
            kinds["delayed" if late else "on_time"] += 1
            reading = {
                "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "zone": zone,
                "temperature_c": float(_temperature(rng, zone, taken)),
                "event_time": _iso(taken),
            }
            records.append((taken + timedelta(seconds=delay), len(records), _encode(reading)))
    records.sort(key=lambda record: (record[0], record[1]))
    return records, kinds


def device_clock_offset(config: GeneratorConfig, booth_id: str) -> timedelta:
    """How far a booth's clock is ahead of the true time (negative: behind), whole milliseconds.

    Drawn from a hash of the seed and the booth, not from the event stream's random numbers, so
    that skew changes nothing else in the log.
    """
    bound_ms = int(parse_duration(config.clock_skew).total_seconds() * 1000)
    draw = int.from_bytes(hashlib.sha256(f"{config.seed}:{booth_id}".encode()).digest()[:8], "big")
    return timedelta(milliseconds=draw % (2 * bound_ms + 1) - bound_ms)


@dataclasses.dataclass
class GeneratedLog:
    records: int = 0
    files: int = 0
    kinds: Counter = dataclasses.field(default_factory=Counter)

    def as_dict(self) -> dict:
        return {"records": self.records, "files": self.files, **dict(sorted(self.kinds.items()))}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _toll_event(rng: random.Random, config: GeneratorConfig, event_time: datetime, sent_at: datetime) -> dict:
    vehicle_type = rng.choices(VEHICLE_TYPES, weights=_VEHICLE_WEIGHTS)[0]
    axle_choices, base, per_extra_axle = _TARIFF[vehicle_type]
    axles = rng.choice(axle_choices)
    toll = base + per_extra_axle * (axles - axle_choices[0])
    if rng.random() < 0.15:  # frequent-traveller discount, rounded to the cent
        toll = (toll * Decimal("0.85")).quantize(Decimal("0.01"))
    bridge = rng.randrange(config.bridges)
    event_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    booth_id = f"bridge-{bridge:02d}-booth-{rng.randrange(config.booths_per_bridge)}"
    clock = device_clock_offset(config, booth_id)  # the booth stamps both times by its own clock
    event = {
        "event_id": event_id,
        "bridge_id": f"bridge-{bridge:02d}",
        "booth_id": booth_id,
        "vehicle_type": vehicle_type,
        "axles": axles,
        # Cents are computed in Decimal; a float's shortest repr writes them back exactly ("12.11").
        "toll_amount": float(toll),
        "event_time": _iso(event_time + clock),
        "sent_at": _iso(sent_at + clock),
    }
    plate = rng.random()
    if plate < 0.9:
        event["plate_hash"] = hashlib.sha256(f"plate-{rng.randrange(20_000)}".encode()).hexdigest()[:16]
    elif plate < 0.95:
        event["plate_hash"] = None
    return event


def _encode(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"))


def _malform(rng: random.Random, kind: str, event: dict) -> str:
    broken = dict(event)
    if kind == "bad_json":
        return _encode(broken)[: rng.randrange(5, 40)]
    if kind == "missing_field":
        del broken[rng.choice(["bridge_id", "vehicle_type", "axles", "toll_amount", "event_time"])]
    elif kind == "wrong_type":
        field = rng.choice(["axles", "toll_amount", "booth_id"])
        broken[field] = str(broken[field]) if field != "booth_id" else 17
    elif kind == "negative_toll":
        broken["toll_amount"] = -broken["toll_amount"]
    elif kind == "unknown_vehicle_type":
        broken["vehicle_type"] = rng.choice(["tractor", "Car", "spaceship"])
    elif kind == "far_future":
        sent_at = datetime.fromisoformat(broken["sent_at"])
        broken["event_time"] = _iso(sent_at + timedelta(days=rng.randint(2, 400)))
    elif kind == "timestamp_without_zone":
        broken["event_time"] = broken["event_time"].rstrip("Z")
    return _encode(broken)


def generate_records(config: GeneratorConfig) -> tuple[list[tuple[datetime, int, str]], Counter]:
    """All records as (arrival time, sequence, line), in arrival order, and how many of each kind."""
    config.validate()
    rng = random.Random(config.seed)
    late_mean = parse_duration(config.late_delay).total_seconds()
    records: list[tuple[datetime, int, str]] = []
    kinds: Counter = Counter()
    malformed_seen = 0
    for i in range(config.events):
        event_time = config.start + timedelta(seconds=i / config.rate + rng.random() / config.rate)
        event_time = event_time.replace(microsecond=event_time.microsecond // 1000 * 1000)
        if rng.random() < config.late_fraction:
            delay = timedelta(seconds=max(1.0, rng.expovariate(1 / late_mean)))
            kinds["delayed"] += 1
        else:
            delay = timedelta(seconds=rng.uniform(0.0, 0.5))
        sent_at = event_time + delay
        arrival = sent_at + timedelta(seconds=rng.uniform(0.05, 1.5))
        event = _toll_event(rng, config, event_time, sent_at)
        if rng.random() < config.malformed_fraction:
            kind = MALFORMED_KINDS[malformed_seen % len(MALFORMED_KINDS)]
            malformed_seen += 1
            kinds[f"malformed:{kind}"] += 1
            records.append((arrival, len(records), _malform(rng, kind, event)))
            continue
        kinds["valid"] += 1
        line = _encode(event)
        records.append((arrival, len(records), line))
        if rng.random() < config.duplicate_fraction:
            kinds["duplicate_copies"] += 1
            records.append((arrival + timedelta(seconds=rng.uniform(1, 120)), len(records), line))
    records.sort(key=lambda record: (record[0], record[1]))
    return records, kinds


def _files(records: list[tuple[datetime, int, str]], per_file: int):
    """Consecutive records, at most ``per_file`` a file, never spanning an ingest hour."""
    chunk: list[tuple[datetime, int, str]] = []
    for record in records:
        if chunk and (
            len(chunk) == per_file
            or record[0].replace(minute=0, second=0, microsecond=0)
            != chunk[0][0].replace(minute=0, second=0, microsecond=0)
        ):
            yield chunk
            chunk = []
        chunk.append(record)
    if chunk:
        yield chunk


def generate(
    settings: Settings,
    config: GeneratorConfig,
    pipeline: str = "toll_traffic",
    on_file: Callable[[int, int], None] | None = None,
    sink: LogSink = LogSink.FILES,
) -> GeneratedLog:
    """Write the generated records into the retained log, file by file, paced by ``wall_rate``.

    Args:
        settings: where the log, the tables and the checkpoints live.
        config: what to generate: toll events (rates, lateness, duplicates, malformed records) or
            temperature readings.
        pipeline: the pipeline whose log is written.
        on_file: called after each file with (records written, records in all).
        sink: files under the log URI, or the pipeline's Kafka topic (each record with its own receive time).
    """
    records, kinds = config.records()
    writer = KafkaLogWriter(settings, pipeline) if sink == LogSink.KAFKA else LogWriter(settings, pipeline)
    result = GeneratedLog(kinds=kinds)
    began = time.monotonic()
    for sequence, chunk in enumerate(_files(records, config.events_per_file)):
        writer.append([(arrival, line) for arrival, _, line in chunk], f"s{config.seed}-{sequence:06d}")
        result.records += len(chunk)
        result.files += 1
        if on_file:
            on_file(result.records, len(records))
        if config.wall_rate:
            ahead = result.records / config.wall_rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
    return result
