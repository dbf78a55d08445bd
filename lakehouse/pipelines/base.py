"""How a pipeline is declared: once, and read by both the speed and the batch layer."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta

from pyspark.sql import Column
from pyspark.sql import types as T

from lakehouse.settings import parse_duration

# JSON value kinds a field may hold, checked against the type the JSON text actually carries.
STRING, INTEGER, MONEY, TIMESTAMP = "string", "integer", "money", "timestamp"


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    kind: str
    spark_type: T.DataType
    required: bool = True


@dataclasses.dataclass(frozen=True)
class Rule:
    """A value rule on typed, present fields. ``violated`` builds the boolean column that flags a bad row."""

    reason: str
    violated: Callable[[], Column]


@dataclasses.dataclass(frozen=True)
class Metric:
    """An additive metric: the speed layer adds per-batch partial values with ``+``."""

    name: str
    aggregate: Callable[[], Column]
    spark_type: T.DataType


@dataclasses.dataclass(frozen=True)
class Window:
    size: str
    slide: str | None = None  # None: tumbling

    @property
    def size_delta(self) -> timedelta:
        return parse_duration(self.size)

    @property
    def slide_delta(self) -> timedelta:
        return parse_duration(self.slide or self.size)


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

    @property
    def event_schema(self) -> T.StructType:
        return T.StructType([T.StructField(f.name, f.spark_type, nullable=not f.required) for f in self.fields])

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def metric_names(self) -> list[str]:
        return [m.name for m in self.metrics]

    @property
    def gold_columns(self) -> list[str]:
        return ["window_start", "window_end", *self.keys, *self.metric_names]
