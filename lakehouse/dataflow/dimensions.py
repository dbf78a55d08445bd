"""Slowly changing dimensions: their type-2 versions, and the join of events to them as of event time.

A change says "from ``valid_from`` on, entity ``key`` has these attributes". Applying it splits the
version that held at ``valid_from``: that one now ends there, the new one runs to where the old one
ended. Versions never overlap, so every moment of an entity's life has at most one version, and
an event is joined to the version valid at its event time (docs/design.md, "Joins"). A reprocess
of old events therefore finds the attributes they had then, not today's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.dataflow.pipelines.base import Dimension, DimensionJoin
from lakehouse.errors import LakehouseError
from lakehouse.eventtime import parse_instant

VALID_FROM, VALID_TO = "valid_from", "valid_to"


@dataclasses.dataclass(frozen=True)
class AppliedChanges:
    """The versions after applying a change log, and how many of its changes were new."""

    versions: list[dict]
    applied: int
    already_present: int


def parse_changes(lines: Iterable[str], dimension: Dimension, source: str) -> list[dict]:
    """The change log's changes, each a dict of the key, every attribute and ``valid_from``.

    Every line is checked before any is returned, so a bad file applies nothing; the error names
    each bad line (up to five) by its number in ``source``."""
    changes, problems = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            changes.append(_change(line, dimension))
        except (ValueError, LakehouseError) as problem:
            problems.append(f"{source}:{number}: {problem}")
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise LakehouseError(f"no change applied to dim.{dimension.name}: " + "; ".join(problems[:5]) + more)
    return changes


def _change(line: str, dimension: Dimension) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict):
        raise ValueError("a change is a JSON object")
    expected = {dimension.key, *dimension.attributes, VALID_FROM}
    if set(record) != expected:
        raise ValueError(f"a change has exactly the fields {', '.join(sorted(expected))}")
    names = [dimension.key, *dimension.attributes]
    if not all(isinstance(record[name], str) and record[name].strip() for name in names):
        raise ValueError(f"{', '.join(names)} are non-empty strings")
    return {**{name: record[name] for name in names}, VALID_FROM: parse_instant(str(record[VALID_FROM]), VALID_FROM)}


def apply_changes(versions: list[dict], changes: list[dict], dimension: Dimension) -> AppliedChanges:
    """Type-2 versions after ``changes``, in valid-time order whatever their order in the log.

    A change whose key and ``valid_from`` a version already has is already applied when its
    attributes agree (a change log applied twice changes nothing), and refused when they differ: a
    version is never rewritten in place.

    Args:
        versions: the dimension's rows (key, attributes, valid_from, valid_to), naive UTC times.
        changes: parsed changes (``parse_changes``).
        dimension: the dimension they belong to.
    """
    by_key: dict[str, list[dict]] = {}
    for version in versions:
        by_key.setdefault(version[dimension.key], []).append(dict(version))
    applied = already = 0
    for change in sorted(changes, key=lambda c: (c[dimension.key], c[VALID_FROM])):
        history = by_key.setdefault(change[dimension.key], [])
        same_start = [v for v in history if v[VALID_FROM] == change[VALID_FROM]]
        if same_start:
            _check_same(same_start[0], change, dimension)
            already += 1
            continue
        history.append(_split(history, change))
        applied += 1
    ordered = sorted(
        (v for history in by_key.values() for v in history), key=lambda v: (v[dimension.key], v[VALID_FROM])
    )
    return AppliedChanges(ordered, applied, already)


def _check_same(version: dict, change: dict, dimension: Dimension) -> None:
    differing = [name for name in dimension.attributes if version[name] != change[name]]
    if differing:
        raise LakehouseError(
            f"dim.{dimension.name}: {change[dimension.key]} already has a version from "
            f"{change[VALID_FROM].isoformat()}Z with other {', '.join(differing)}; versions are never "
            "rewritten: send a change with a later valid_from"
        )


def _split(history: list[dict], change: dict) -> dict:
    """The new version, after ending the one that held at its start; it ends where the next begins."""
    start = change[VALID_FROM]
    holding = [v for v in history if v[VALID_FROM] < start and (v[VALID_TO] is None or start < v[VALID_TO])]
    later_starts = [v[VALID_FROM] for v in history if v[VALID_FROM] > start]
    end = holding[0][VALID_TO] if holding else min(later_starts, default=None)
    if holding:
        holding[0][VALID_TO] = start
    return {**change, VALID_TO: end}


def valid_at(moment: str) -> F.Column:
    """The version holds at the column ``moment``: ``valid_from <= moment < valid_to``."""
    return (F.col(moment) >= F.col(VALID_FROM)) & (F.col(VALID_TO).isNull() | (F.col(moment) < F.col(VALID_TO)))


def join_as_of(events: DataFrame, versions: DataFrame, join: DimensionJoin, event_time: str) -> DataFrame:
    """Each event with ``join.attributes`` of the version valid at its event time; events no version
    covers are kept, with ``join.unknown`` (outer semantics). The dimension is small: broadcast.

    Args:
        events: the events (with the dimension's key column).
        versions: the dimension's type-2 rows.
        join: which attributes, and the value for an event without a version.
        event_time: the events' time column.
    """
    key, attributes = join.dimension.key, join.attributes
    dimension_key = f"_{join.dimension.name}_{key}"
    wanted = versions.select(F.col(key).alias(dimension_key), VALID_FROM, VALID_TO, *attributes)
    matched = (F.col(key) == F.col(dimension_key)) & valid_at(event_time)
    joined = events.join(F.broadcast(wanted), matched, "left")
    return joined.select(*events.columns, *[F.coalesce(name, F.lit(join.unknown)).alias(name) for name in attributes])


def naive_utc(moment: datetime | None) -> datetime | None:
    """Times from delta-rs carry a UTC zone; the versions compare as naive UTC, as Spark's do."""
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.replace(tzinfo=None) - moment.utcoffset()
