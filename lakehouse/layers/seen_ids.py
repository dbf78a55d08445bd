"""The ids bronze accepted, indexed in the driver: how a micro-batch finds its duplicates without
reading bronze (docs/design.md, "Event fates").

A batch's duplicates are its ids that bronze accepted within the dedupe horizon of its events (an
hour of event time either side of them). Looked up in bronze, that is a scan of every id bronze
accepted in those two hours, every batch: at 6,500 events/s, 23 million ids and about 8 s a batch
after an hour, more than the 5 s trigger. The index holds, for each accepted id, 96 bits of its
SHA-256 and its event time, sorted by digest: a batch looks its ids up with a binary search each.
A match is a duplicate without a second look: two distinct ids share 96 bits of SHA-256 with
odds of about 10^-17 per batch at that rate, and no producer can choose ids that do.

The index is exact for the event times it covers (``complete_from`` on). It is built from bronze
when a stream starts (or a batch runs again); then each committed batch adds the rows it appended
and hands it on, as it hands on the pane state (``lakehouse.layers.micro_batch.CarriedState``).
A batch whose horizon starts before the index covers (a late event's) first extends it back from
bronze, as far as the index keeps (``oldest_kept``); an older horizon is looked up in bronze for the
batch's ids alone (``lakehouse.layers.micro_batch.duplicates_of``).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.eventtime import micros, micros_of

DIGEST_HIGH, DIGEST_LOW, EVENT_MICROS = "_digest_high", "_digest_low", "_event_micros"

# Event time the index keeps beyond the dedupe horizon, behind the newest event it holds: events up
# to this much later than the stream's newest still find their horizon in the index.
KEPT_BEYOND_HORIZON = timedelta(minutes=10)
# The index also keeps the horizons of the last RECENT_BATCHES batches (five minutes at a 5 s
# trigger), back to their oldest event's: a stream whose stragglers come steadily finds theirs in
# it. Dropped after one batch, they were read from bronze again by the next batch with a
# straggler as late (the bench's drains, every batch: 0.45 s of 2.26). Lateness beyond
# LATENESS_KEPT_AT_MOST is not kept: the index is not extended for it either, and such an event's
# horizon is looked up in bronze for the batch's ids (lakehouse.layers.micro_batch).
RECENT_BATCHES = 60
LATENESS_KEPT_AT_MOST = timedelta(hours=1)


def digests_of(frame: DataFrame, pipeline: Pipeline, *kept: str | Column) -> pa.Table:
    """Each row's ``kept`` columns, the 96 bits of its id's SHA-256 the index keys on (64 signed,
    then 32 unsigned) and its event time in microseconds, as Arrow (a Spark job)."""
    digest = F.sha2(F.col(pipeline.event_id).cast("string"), 256)
    return frame.select(
        *kept,
        F.conv(F.substring(digest, 1, 16), 16, -10).cast("long").alias(DIGEST_HIGH),
        F.conv(F.substring(digest, 17, 8), 16, 10).cast("long").alias(DIGEST_LOW),
        F.unix_micros(F.col(pipeline.event_time)).alias(EVENT_MICROS),
    ).toArrow()


def _column(table: pa.Table, name: str, dtype) -> np.ndarray:
    return table.column(name).to_numpy().astype(dtype, copy=False)


@dataclasses.dataclass(frozen=True)
class SortedRun:
    """Digests and event times, sorted by the digest's high 64 bits."""

    high: np.ndarray  # int64, sorted
    low: np.ndarray  # uint32, in the order of high
    times: np.ndarray  # int64 microseconds, in the order of high

    @classmethod
    def of(cls, rows: pa.Table) -> SortedRun:
        """The run of ``rows`` (as ``digests_of`` gives them)."""
        high = _column(rows, DIGEST_HIGH, np.int64)
        order = np.argsort(high)
        return cls(
            high[order], _column(rows, DIGEST_LOW, np.uint32)[order], _column(rows, EVENT_MICROS, np.int64)[order]
        )

    @classmethod
    def empty(cls) -> SortedRun:
        return cls(np.empty(0, np.int64), np.empty(0, np.uint32), np.empty(0, np.int64))

    def __len__(self) -> int:
        return len(self.high)

    def seen(self, high: np.ndarray, low: np.ndarray, since: int, until: int) -> np.ndarray:
        """Which of the digests the run holds with an event time in ``[since, until]``: a boolean each.

        Args:
            high: the digests' high 64 bits.
            low: their low 32 bits.
            since: the earliest event time, in microseconds.
            until: the latest, in microseconds.
        """
        first = np.searchsorted(self.high, high, side="left")
        last = np.searchsorted(self.high, high, side="right")
        found = np.zeros(len(high), dtype=bool)
        # A digest is held once per time bronze accepted its id: almost always no or one entry.
        for row in np.flatnonzero(last > first):
            entries = slice(first[row], last[row])
            times = self.times[entries]
            found[row] = bool(np.any((self.low[entries] == low[row]) & (times >= since) & (times <= until)))
        return found

    def merged(self, other: SortedRun) -> SortedRun:
        """Both runs in one (a copy of both)."""
        at = np.searchsorted(self.high, other.high, side="right")
        return SortedRun(
            *(np.insert(mine, at, theirs) for mine, theirs in zip(self._arrays, other._arrays, strict=True))
        )

    def where(self, keep: np.ndarray) -> SortedRun:
        return SortedRun(*(array[keep] for array in self._arrays))

    @property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.high, self.low, self.times


@dataclasses.dataclass(frozen=True)
class SeenIdIndex:
    """Digests and event times of the ids bronze accepted with an event time at or after
    ``complete_from`` (microseconds), in two sorted runs: the batches' rows go to the small one,
    which is merged into the large one once it holds an eighth as many. Adding to one large run
    copied all of it each batch (0.2-1.7 s at 27 million entries)."""

    complete_from: int
    base: SortedRun
    recent: SortedRun
    looked_up_from: tuple[int, ...] = ()  # where the last batches' horizons started (RECENT_BATCHES)

    @classmethod
    def of(cls, rows: pa.Table, complete_from: int) -> SeenIdIndex:
        """The index of ``rows`` (as ``digests_of`` gives them), complete from ``complete_from``."""
        return cls(complete_from, SortedRun.of(rows), SortedRun.empty())

    def __len__(self) -> int:
        return len(self.base) + len(self.recent)

    def seen(self, rows: pa.Table, since: int, until: int) -> np.ndarray:
        """Which of ``rows`` (``digests_of``) have an id the index holds with an event time in
        ``[since, until]`` (microseconds): a boolean per row."""
        high, low = _column(rows, DIGEST_HIGH, np.int64), _column(rows, DIGEST_LOW, np.uint32)
        return self.base.seen(high, low, since, until) | self.recent.seen(high, low, since, until)

    def with_rows(self, rows: pa.Table) -> SeenIdIndex:
        """The index with ``rows`` (``digests_of``: the ids a batch appended to bronze) added."""
        recent = self.recent.merged(SortedRun.of(rows))
        if len(recent) * 8 < len(self.base):
            return dataclasses.replace(self, recent=recent)
        return dataclasses.replace(self, base=self.base.merged(recent), recent=SortedRun.empty())

    def kept_from(self, since: int) -> SeenIdIndex:
        """The index without the event times before ``since``; it is then complete from there. It
        drops them only once they are a tenth of it: each drop copies the whole index."""
        if since <= self.complete_from:
            return self
        dropped = np.count_nonzero(self.base.times < since) + np.count_nonzero(self.recent.times < since)
        if dropped * 10 < len(self):
            return self
        return dataclasses.replace(
            self,
            complete_from=since,
            base=self.base.where(self.base.times >= since),
            recent=self.recent.where(self.recent.times >= since),
        )


@dataclasses.dataclass(frozen=True)
class IdLookup:
    """How a batch's ids were looked up: in ``index``, for the batch's ``rows`` (``digests_of``),
    with ``duplicate`` marking the rows bronze does not accept (ids it accepted before, later copies
    of an id in the batch); ``since`` is where the batch's horizon started (microseconds; None
    for a batch with no valid event). ``index`` is None when nothing was looked up and no index
    came."""

    index: SeenIdIndex | None
    rows: pa.Table
    duplicate: np.ndarray
    since: int | None

    def index_after(self, newest: datetime | None, horizon: timedelta) -> SeenIdIndex | None:
        """The index once the batch's bronze rows are in, without the event times no later batch
        needs (``kept_for``)."""
        if self.index is None or not self.rows.num_rows:
            return self.index
        accepted = self.rows.filter(pa.array(~self.duplicate, type=pa.bool_()))
        looked_up_from = (*self.index.looked_up_from, self.since)[-RECENT_BATCHES:]
        index = dataclasses.replace(self.index.with_rows(accepted), looked_up_from=looked_up_from)
        return index.kept_from(kept_for(looked_up_from, newest, horizon))


def kept_for(looked_up_from: tuple[int, ...], newest: datetime, horizon: timedelta) -> int:
    """Where the index starts once the stream's newest event time is ``newest`` (microseconds):
    ``KEPT_BEYOND_HORIZON`` before the horizon behind it, or before the oldest horizon of the
    last batches (``looked_up_from``) if that is older, but not before ``oldest_kept``'s."""
    needed = max(min(micros(newest - horizon), *looked_up_from), micros(oldest_kept(newest, horizon)))
    return needed - micros_of(KEPT_BEYOND_HORIZON)


def oldest_kept(newest: datetime, horizon: timedelta) -> datetime:
    """The oldest horizon start the index keeps, ``KEPT_BEYOND_HORIZON`` aside: ``LATENESS_KEPT_AT_MOST``
    before the horizon behind the stream's newest event time."""
    return newest - horizon - LATENESS_KEPT_AT_MOST
