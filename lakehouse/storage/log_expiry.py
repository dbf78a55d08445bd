"""What the file log's retention removed, and whether a read of the log still finds its input.

Retention removes whole ingest hours by when their files arrived, not by the event times they hold:
events of January ingested in December stay until December's hours expire. So whether a backfill
from the log can be served depends on what the log removed, not on how old its range is. Maintenance
records how far it has removed (``_expired.json``, hidden from readers) before it removes anything;
a log that never expired an hour holds every file it was given.

No JVM: the backfill DAG's validation reads it, and the DAG processor imports ``lakehouse.ops``.
"""

from __future__ import annotations

import json
from datetime import datetime

from lakehouse.errors import LakehouseError
from lakehouse.eventtime import earliest_arrival_for, format_instant
from lakehouse.settings import Settings
from lakehouse.storage.log_files import LocalFiles, ObjectFiles, log_files

STATE = "_expired.json"


def expired_before(files: LocalFiles | ObjectFiles) -> datetime | None:
    """Every ingest hour that ended at or before this instant may have been removed (None: none was)."""
    text = files.read(STATE)
    return datetime.fromisoformat(json.loads(text)["before"]) if text else None


def record_expiry(files: LocalFiles | ObjectFiles, before: datetime) -> None:
    """Record, before they are removed, that the hours ending at or before ``before`` go; the record
    only moves forward. A crash between the record and the removal leaves a refusal too many, never a
    backfill that silently misses files."""
    recorded = expired_before(files)
    if recorded is None or before > recorded:
        files.put(STATE, json.dumps({"before": before.isoformat()}))


def check_log_holds(settings: Settings, topic: str, first_event: datetime) -> None:
    """Refuse, before any Spark work, a read of the file log for events from ``first_event`` on when
    retention has removed hours in which such events may have arrived (from a day before it on)."""
    arrived_from = earliest_arrival_for(first_event)
    before = expired_before(log_files(settings, settings.pipeline_log_uri(topic)))
    if before is not None and arrived_from < before:
        raise LakehouseError(
            f"the log of {topic} no longer holds the files it received before {format_instant(before)}: its "
            f"retention ({settings.log_retention}) removed them, and events from {format_instant(first_event)} "
            f"may have arrived from {format_instant(arrived_from)} on; backfill from bronze (source bronze), "
            "which keeps every accepted event"
        )
