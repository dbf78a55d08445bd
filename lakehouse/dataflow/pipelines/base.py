"""How a pipeline is declared: once, and read by both the speed and the batch layer."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal

from pyspark.sql import Column
from pyspark.sql import types as T

from lakehouse.eventtime import parse_duration
from lakehouse.project.checks import RECEIVED_AT  # when the log received an event (docs/design.md, "Device clocks")
from lakehouse.vocabulary import FieldKind, MetricKind, WindowKind

__all__ = ["RECEIVED_AT"]


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    kind: FieldKind
    spark_type: T.DataType
    required: bool = True


@dataclasses.dataclass(frozen=True)
class Rule:
    """A value rule on typed, present fields. ``violated`` builds the boolean column that flags a bad row."""

    reason: str
    violated: Callable[[], Column]


@dataclasses.dataclass(frozen=True)
class Metric:
    """A stored metric: ``aggregate`` computes it over events, and its ``kind`` says how two partial
    values of one window combine (lakehouse.dataflow.metric_merges)."""

    name: str
    aggregate: Callable[[], Column]
    spark_type: T.DataType
    kind: MetricKind = MetricKind.SUM

    @property
    def is_additive(self) -> bool:
        """Partial values add, and a withdrawn one subtracts (the discarding and retracting views)."""
        return self.kind in (MetricKind.COUNT, MetricKind.SUM)


@dataclasses.dataclass(frozen=True)
class DerivedMetric:
    """A mean served as ``total / count`` of two stored metrics, computed where it is read."""

    name: str
    total: str
    count: str


@dataclasses.dataclass(frozen=True)
class Window:
    """Half-open event-time windows: tumbling (size), hopping (size, slide) or session (gap).

    A session window of one key is ``[first event, last event + gap)``: events less than ``gap``
    apart share a session, so a new event can merge two sessions into one.
    """

    size: str | None = None
    slide: str | None = None
    gap: str | None = None

    def __post_init__(self):
        if (self.size is None) == (self.gap is None):
            raise ValueError("a window has either a size (tumbling or hopping) or a gap (session)")

    @property
    def kind(self) -> WindowKind:
        if self.gap is not None:
            return WindowKind.SESSION
        return WindowKind.HOPPING if self.slide and self.slide != self.size else WindowKind.TUMBLING

    @property
    def is_session(self) -> bool:
        return self.kind == WindowKind.SESSION

    @property
    def size_delta(self) -> timedelta:
        return parse_duration(self.size or self.gap)

    @property
    def slide_delta(self) -> timedelta:
        """The step between window starts: ranges and chunks align to it (any second for sessions)."""
        if self.is_session:
            return timedelta(seconds=1)
        return parse_duration(self.slide or self.size)

    @property
    def gap_delta(self) -> timedelta:
        return parse_duration(self.gap) if self.gap else timedelta(0)

    def describe(self) -> str:
        if self.kind == WindowKind.SESSION:
            return f"session windows (gap {self.gap})"
        if self.kind == WindowKind.HOPPING:
            return f"{self.size} windows sliding by {self.slide}"
        return f"{self.size} tumbling windows"


@dataclasses.dataclass(frozen=True)
class ClockCorrection:
    """Correct device clocks by the log's receive time: ``sent_at`` is the device's send time by its
    own clock, ``device`` the field naming the clock's owner (offsets are reported per device), and
    an offset beyond ``bound`` is quarantined."""

    bound: str
    sent_at: str = "sent_at"
    device: str = "device_id"

    @property
    def bound_delta(self) -> timedelta:
        return parse_duration(self.bound)


@dataclasses.dataclass(frozen=True)
class Dimension:
    """A slowly changing dimension kept as type-2 versions (docs/design.md, "Joins"): the table
    ``dim.<name>`` holds one row per version of an entity, valid over ``[valid_from, valid_to)``
    (``valid_to`` null: still valid). Its attributes are strings."""

    name: str
    key: str
    attributes: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class DimensionJoin:
    """Each event takes ``attributes`` from the version of ``dimension`` valid at its event time,
    matched on the dimension's key; an event no version covers keeps it, with ``unknown``."""

    dimension: Dimension
    attributes: tuple[str, ...]
    unknown: str = "unknown"

    def __post_init__(self):
        if not set(self.attributes) <= set(self.dimension.attributes):
            raise ValueError(f"dim.{self.dimension.name} has no attribute among {self.attributes}")


@dataclasses.dataclass(frozen=True)
class Pipeline:
    name: str
    fields: tuple[Field, ...]
    keys: tuple[str, ...]
    window: Window
    metrics: tuple[Metric, ...]
    rules: tuple[Rule, ...]
    watermark_delay: str
    allowed_lateness: str = "0s"
    event_id: str = "event_id"
    event_time: str = "event_time"
    description: str = ""
    # The log topic the pipeline reads; variants of a pipeline read their parent's events.
    source: str | None = None
    # Sessions are recomputed from events up to this far before a range (longer ones are cut).
    session_lookback: str = "1d"
    # Device clocks moved onto the log's clock, when set (docs/design.md, "Device clocks").
    clocks: ClockCorrection | None = None
    # Attributes taken from a versioned dimension as of each event's time, when set.
    joins: DimensionJoin | None = None
    # Means of two stored metrics, served beside them.
    derived: tuple[DerivedMetric, ...] = ()
    # What the pipeline computes, digested (lakehouse.project.declarations.PipelineSpec.definition_digest).
    definition: str = ""

    def __post_init__(self):
        names = {f.name for f in self.fields}
        if self.clocks and not {self.clocks.sent_at, self.clocks.device} <= names:
            raise ValueError(f"{self.name}: clock correction names fields it does not have: {self.clocks}")
        if self.joins and self.joins.dimension.key not in names:
            raise ValueError(f"{self.name}: joins dim.{self.joins.dimension.name} on a field it does not have")

    def key_type(self, key: str) -> T.DataType:
        """A grouping key's type: an event field's, or string for a dimension attribute."""
        if self.joins and key in self.joins.attributes:
            return T.StringType()
        return self.event_schema[key].dataType

    @property
    def corrects_clocks(self) -> bool:
        return self.clocks is not None

    @property
    def topic(self) -> str:
        return self.source or self.name

    def variant(self, name: str, **changes) -> Pipeline:
        """The same events aggregated another way (another window, keys or metrics)."""
        return dataclasses.replace(self, name=name, source=self.topic, **changes)

    @property
    def event_schema(self) -> T.StructType:
        return T.StructType([T.StructField(f.name, f.spark_type, nullable=not f.required) for f in self.fields])

    @property
    def event_columns(self) -> list[tuple[str, T.DataType]]:
        """An accepted event's columns: its fields, and the receive time when clocks are corrected."""
        received = [(RECEIVED_AT, T.TimestampType())] if self.corrects_clocks else []
        return [(f.name, f.spark_type) for f in self.fields] + received

    @property
    def field_names(self) -> list[str]:
        return [name for name, _ in self.event_columns]

    @property
    def metric_names(self) -> list[str]:
        return [m.name for m in self.metrics]

    @property
    def gold_columns(self) -> list[str]:
        return ["window_start", "window_end", *self.keys, *self.metric_names]


@dataclasses.dataclass(frozen=True)
class Band:
    """A named range of a measure: from the previous band's bound up to ``below`` (exclusive;
    None: no upper bound)."""

    name: str
    below: Decimal | None = None


@dataclasses.dataclass(frozen=True)
class WindowJoin:
    """The windows of two pipelines joined on a shared key (docs/design.md, "Joins: a windowed
    join"): each window of ``events`` takes the mean of ``readings`` over the same window and key,
    or, when that key had no reading in it, the first neighbour's that had one, in the order given.

    Args (fields):
        name: the joined view, ``gold.<name>``.
        events: the counted side, e.g. vehicles per 30-minute window and zone.
        readings: the measured side, aggregated per the same window and key.
        key: the key both sides share, the only key of each.
        reading_sum, reading_count: the readings' metrics whose ratio is the mean.
        measure: the mean's name in the view; ``bands`` name ranges of it.
        neighbours: per key value, the values whose readings stand in for its own, nearest first.
    """

    name: str
    description: str
    events: Pipeline
    readings: Pipeline
    key: str
    reading_sum: str
    reading_count: str
    measure: str
    neighbours: tuple[tuple[str, tuple[str, ...]], ...]
    bands: tuple[Band, ...]
    unknown: str = "unknown"

    def __post_init__(self):
        if self.events.window != self.readings.window:
            raise ValueError(f"{self.name}: both sides of a windowed join have the same windows")
        if (self.key,) != self.events.keys or (self.key,) != self.readings.keys:
            raise ValueError(f"{self.name}: both sides are keyed by {self.key} alone")
        if not {self.reading_sum, self.reading_count} <= set(self.readings.metric_names):
            raise ValueError(f"{self.name}: {self.readings.name} lacks {self.reading_sum} or {self.reading_count}")
        if [band.below for band in self.bands[:-1]] != sorted(b.below for b in self.bands[:-1] if b.below is not None):
            raise ValueError(f"{self.name}: bands are in rising order, and only the last is unbounded")

    @property
    def key_values(self) -> list[str]:
        """Every key value the declaration names: the ones readings are generated for."""
        return sorted({value for value, near in self.neighbours for value in (value, *near)})
