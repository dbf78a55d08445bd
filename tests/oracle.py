"""An oracle for the toll pipeline written without Spark: plain Python over the raw log files,
applying the documented rules (README, "Validation", "Event fates", "Time semantics").

It shares no code with ``lakehouse``: if the two agree to the row and the cent, the Spark plans
implement the rules, not just themselves.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

VEHICLE_TYPES = {"car", "motorcycle", "van", "bus", "truck"}
# Up to nine digits of a second, read to the microsecond (the rest is cut, not rounded).
ISO_WITH_ZONE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$")
FIELDS = (  # name, kind, required, in declaration order
    ("event_id", "string", True),
    ("bridge_id", "string", True),
    ("booth_id", "string", True),
    ("vehicle_type", "string", True),
    ("axles", "integer", True),
    ("toll_amount", "money", True),
    ("plate_hash", "string", False),
    ("event_time", "timestamp", True),
    ("sent_at", "timestamp", True),
)


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise _DuplicateKey()
    return dict(pairs)


# docs/design.md, "Validation": instants a day inside years 1 to 9999, in UTC.
READABLE = (datetime(1, 1, 2), datetime(9999, 12, 31))


def _timestamp(text: str) -> datetime | None:
    match = ISO_WITH_ZONE.match(text)
    if not match:
        return None
    seconds, fraction, zone = match.groups()
    try:
        moment = datetime.fromisoformat(f"{seconds}.{(fraction or '')[:6]:0<6}{zone}")
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):
        return None
    return moment if READABLE[0] <= moment < READABLE[1] else None


def _type_ok(kind: str, value) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31
    if kind == "money":
        if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
            return False
        exact = Decimal(value).normalize()
        return exact.as_tuple().exponent >= -2 and abs(exact) < Decimal(10) ** 7
    if kind == "timestamp":
        return isinstance(value, str)
    raise ValueError(kind)


# The parser's limit on nesting (Jackson's default): a document nested deeper is not read at all.
MAX_JSON_DEPTH = 1000


def _depth(document) -> int:
    """How deeply arrays and objects nest in a parsed document (a scalar: 0), without recursion."""
    deepest, level = 0, [(document, 1)]
    while level:
        value, depth = level.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            level.extend((child, depth + 1) for child in children)
    return deepest


def receive_time(path: Path) -> datetime | None:
    """When the log received a file: the stamp its name starts with (None for another name)."""
    match = re.match(r"^(\d{8}T\d{12})Z-", path.name)
    return datetime.strptime(match.group(1), "%Y%m%dT%H%M%S%f") if match else None


def _loads(line: str, **options):
    """json.loads with room to nest past the parser's limit (Python's own recursion limit is lower)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * MAX_JSON_DEPTH))
    try:
        return json.loads(line, **options)
    finally:
        sys.setrecursionlimit(limit)


def classify(
    line: str, received: datetime | None = None, skew_bound: timedelta | None = None
) -> tuple[dict | None, str | None]:
    """(typed event, None) for a valid line, (None, reason) for an invalid one. With ``skew_bound``,
    device clocks are corrected by the file's ``received`` time (docs/design.md, "Device clocks")."""
    try:
        document = _loads(
            line,
            object_pairs_hook=_no_duplicate_keys,
            # A number with an exponent is a double, not an amount of cents (docs/design.md, "Validation").
            parse_float=lambda text: float(text) if "e" in text.lower() else Decimal(text),
            parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)),
        )
    except (ValueError, _DuplicateKey, RecursionError):
        return None, "bad_json"
    if _depth(document) > MAX_JSON_DEPTH:
        return None, "bad_json"
    if not isinstance(document, dict):
        return None, "not_an_object"
    event = {}
    for name, kind, required in FIELDS:
        value = document.get(name)
        if value is None:
            if required:
                return None, f"missing_field:{name}"
            event[name] = None
            continue
        if not _type_ok(kind, value):
            return None, f"wrong_type:{name}"
        if kind == "timestamp":
            value = _timestamp(value)
            if value is None:
                return None, f"bad_timestamp:{name}"
        event[name] = Decimal(value) if kind == "money" else value
    offset = None
    if skew_bound is not None:
        if received is None:
            return None, "no_receive_time"
        offset = received - event["sent_at"]
        if abs(offset) > skew_bound:
            return None, "clock_skew_out_of_bounds"
    reason = _value_rule_broken(event)
    if reason:
        return None, reason
    if offset is not None:
        event["event_time"] += offset
        event["received_at"] = received
    return event, None


def _value_rule_broken(event: dict) -> str | None:
    """The suite's value rules, judged on the event as its device sent it."""
    if event["vehicle_type"] not in VEHICLE_TYPES:
        return "unknown_vehicle_type"
    if not 2 <= event["axles"] <= 9:
        return "axles_out_of_range"
    if not Decimal(0) <= event["toll_amount"] < Decimal(1000):
        return "toll_out_of_range"
    if event["event_time"] > event["sent_at"] + timedelta(days=1):
        return "event_time_too_far_in_future"
    return None


def window_start(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def log_files(log_root: Path) -> list[Path]:
    """Files in arrival order: their names start with the arrival time."""
    return sorted(log_root.glob("ingest_date=*/ingest_hour=*/*.jsonl"), key=lambda p: p.name)


@dataclass
class OracleResult:
    read: int = 0
    fates: dict = field(default_factory=lambda: defaultdict(int))
    reasons: dict = field(default_factory=lambda: defaultdict(int))
    speed: dict = field(default_factory=lambda: defaultdict(lambda: [0, Decimal("0.00")]))
    batch: dict = field(default_factory=lambda: defaultdict(lambda: [0, Decimal("0.00")]))
    per_batch: list = field(default_factory=list)

    def rows(self, which: str) -> set[tuple]:
        table = self.speed if which == "speed" else self.batch
        return {(w, bridge, vehicle, count, total) for (w, bridge, vehicle), (count, total) in table.items()}


def truth(oracle: OracleResult, start: datetime, end: datetime) -> set[tuple]:
    """The oracle's batch rows for the windows starting in ``[start, end)``."""
    return {row for row in oracle.rows("batch") if start <= row[0] < end}


def gold_rows(frame) -> set[tuple]:
    """A toll_traffic gold table's rows as the oracle writes them (processing-time columns aside)."""
    return {(r.window_start, r.bridge_id, r.vehicle_type, r.vehicles, r.revenue) for r in frame.collect()}


def run_oracle(
    log_root: Path, watermark_delay: timedelta, files_per_batch: int = 1, skew_bound: timedelta | None = None
) -> OracleResult:
    """Replay the log the way the speed layer does with ``files_per_batch`` files per micro-batch,
    and compute the batch truth over every accepted event (device clocks corrected with ``skew_bound``)."""
    files = log_files(log_root)
    result = OracleResult()
    seen: set[str] = set()
    max_event_time: datetime | None = None
    for first in range(0, len(files), files_per_batch):
        batch_files = files[first : first + files_per_batch]
        watermark = max_event_time - watermark_delay if max_event_time else None
        lines = [(str(path), line) for path in batch_files for line in path.read_text().split("\n")[:-1]]
        counts = defaultdict(int)
        batch_max = None
        # Within a batch, copies are taken in (file, text) order: the first one wins.
        for path, line in sorted(lines):
            event, reason = classify(line, receive_time(Path(path)), skew_bound)
            if reason:
                counts["quarantined"] += 1
                result.reasons[reason] += 1
                continue
            batch_max = max(batch_max or event["event_time"], event["event_time"])
            if event["event_id"] in seen:
                counts["duplicates"] += 1
                continue
            seen.add(event["event_id"])
            window = window_start(event["event_time"])
            key = (window, event["bridge_id"], event["vehicle_type"])
            late = watermark is not None and window + timedelta(minutes=1) <= watermark
            counts["late" if late else "on_time"] += 1
            if not late:
                result.speed[key][0] += 1
                result.speed[key][1] += event["toll_amount"]
            result.batch[key][0] += 1
            result.batch[key][1] += event["toll_amount"]
        result.read += len(lines)
        for fate, count in counts.items():
            result.fates[fate] += count
        result.per_batch.append({"input_rows": len(lines), **counts})
        if batch_max is not None:
            max_event_time = max(max_event_time or batch_max, batch_max)
    return result
