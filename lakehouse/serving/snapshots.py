"""The Spark service builds each served table's newest snapshot off the queries' path, while people query.

A query on a serving view reads ``__speed``, ``__batch`` and ``ops.batch_coverage``, and the first
reader of a table's new version builds its state (a Spark job): the stream commits ``__speed`` every
trigger, so on a busy service nearly every query waited for such a build. A thread of the service
builds them instead, and installs each version once built (``SnapshotWarmer.java`` says how, and
why the staleness bound still holds). It runs while someone other than the platform's jobs has ended
a statement in the last READERS_RECENT_SECONDS (a refused login is no statement): the builds cost CPU
the stream could use, and an idle service needs none of them.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

from lakehouse.eventtime import parse_duration
from lakehouse.serving.batch_cache import cached_tables
from lakehouse.settings import Settings
from lakehouse.storage.catalog import Table, all_pipelines, pipeline_tables

# How long after an analyst's last statement the service goes on building snapshots: a BI tool's
# dashboard refreshes every few seconds to a minute.
READERS_RECENT_SECONDS = 60.0


def served_tables() -> list[Table]:
    """The tables the serving views read: each pipeline's speed table, and those the batch cache holds."""
    return [*(pipeline_tables(p).speed for p in all_pipelines().values()), *cached_tables()]


def readers_recent(last_statement_ms: int, now_ms: int) -> bool:
    """Whether a reader's statement ended within READERS_RECENT_SECONDS (0: none yet)."""
    return last_statement_ms > 0 and now_ms - last_statement_ms <= READERS_RECENT_SECONDS * 1000


class SnapshotWarmer:
    """The served tables' snapshots, kept built by a thread of the service."""

    def __init__(self, spark, settings: Settings, registered):
        """``registered``: the set of the catalog's registered names, which the service's loop grows."""
        self.spark, self.settings, self.registered = spark, settings, registered
        self.enabled = parse_duration(settings.sql_staleness) > timedelta(0)

    def warm_once(self) -> dict[str, int]:
        """Each registered served table brought to its newest version, built: its version, by name."""
        warmer = self.spark._jvm.lakehouse.serving.SnapshotWarmer
        names = frozenset(self.registered)  # one C call: atomic beside the loop's update
        tables = [table for table in served_tables() if table.qualified_name in names]
        return {t.qualified_name: warmer.warm(self.spark._jsparkSession, t.uri(self.settings)) for t in tables}

    def run(self, stopping: threading.Event, tick: float) -> None:
        """Until stopped: warm every ``tick`` seconds while readers query. A failed warm-up is said
        and tried again at the next tick; queries meanwhile build what they read, as without it."""
        from py4j.protocol import Py4JError

        query_log = self.spark._jvm.lakehouse.serving.QueryLog
        while self.enabled and not stopping.wait(tick):
            if not readers_recent(query_log.lastReaderStatementMillis(), int(time.time() * 1000)):
                continue
            try:
                self.warm_once()
            except Py4JError as error:
                if stopping.is_set():
                    return
                cause = getattr(error, "java_exception", None)  # the JVM's exception says why
                print(json.dumps({"snapshot_warmer_failed": str(cause or error).splitlines()[0]}), flush=True)

    def start(self, stopping: threading.Event, tick: float) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stopping, tick), name="snapshot-warmer", daemon=True)
        thread.start()
        return thread
