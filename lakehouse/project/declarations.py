"""What a project declares, as plain values: no Spark here, so that the CLI's checks, Airflow's DAG
processor and the service read the same declarations in milliseconds. ``lakehouse.dataflow.pipelines``
turns a :class:`PipelineSpec` into the columns both layers compute."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from decimal import Decimal
from pathlib import Path

from lakehouse.vocabulary import FieldKind, MetricKind, WindowKind

# Decimals a MONEY field holds: cents, up to 9,999,999.99.
MONEY_PRECISION, MONEY_SCALE = 9, 2
# A sum of decimals keeps their scale and widens to 18 digits.
SUM_PRECISION = 18


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: FieldKind
    required: bool = True
    precision: int | None = None  # decimals only
    scale: int | None = None

    @property
    def is_numeric(self) -> bool:
        return self.kind in (FieldKind.INTEGER, FieldKind.MONEY, FieldKind.DECIMAL)


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """Tumbling (size), hopping (size and slide) or session (gap) windows."""

    size: str | None = None
    slide: str | None = None
    gap: str | None = None

    @property
    def kind(self) -> WindowKind:
        if self.gap is not None:
            return WindowKind.SESSION
        return WindowKind.HOPPING if self.slide and self.slide != self.size else WindowKind.TUMBLING


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """A metric over a field (none for count); a mean names the sum and count it divides."""

    name: str
    kind: MetricKind
    field: str | None = None
    mean_of: tuple[str, str] | None = None  # (sum metric, count metric)

    @property
    def is_stored(self) -> bool:
        return self.kind != MetricKind.MEAN


@dataclasses.dataclass(frozen=True)
class ClockSpec:
    bound: str
    sent_at: str = "sent_at"
    device: str = "device_id"


@dataclasses.dataclass(frozen=True)
class JoinSpec:
    dimension: str
    attributes: tuple[str, ...]
    unknown: str = "unknown"


@dataclasses.dataclass(frozen=True)
class DimensionSpec:
    name: str
    key: str
    attributes: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class BandSpec:
    name: str
    below: Decimal | None = None


@dataclasses.dataclass(frozen=True)
class WindowJoinSpec:
    """Two pipelines' windows joined on their one shared key (docs/design.md, "Joins")."""

    name: str
    description: str
    events: str
    readings: str
    key: str
    reading_sum: str
    reading_count: str
    measure: str
    neighbours: tuple[tuple[str, tuple[str, ...]], ...]
    bands: tuple[BandSpec, ...]


@dataclasses.dataclass(frozen=True)
class PipelineSpec:
    """One pipeline as its file declares it (``extends`` already applied)."""

    name: str
    file: Path
    fields: tuple[FieldSpec, ...]
    keys: tuple[str, ...]
    window: WindowSpec
    metrics: tuple[MetricSpec, ...]
    watermark_delay: str
    allowed_lateness: str = "0s"
    event_id: str = "event_id"
    event_time: str = "event_time"
    description: str = ""
    topic: str = ""  # the log topic it reads: its own name, or the pipeline it extends
    suite: str = ""  # its expectation suites' name: its own, or the pipeline it extends
    session_lookback: str = "1d"
    clocks: ClockSpec | None = None
    joins: JoinSpec | None = None
    # What its results depend on besides the declaration: its row-rule suite, and its custom metrics' code.
    source_texts: str = ""

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)

    @property
    def stored_metrics(self) -> tuple[MetricSpec, ...]:
        return tuple(m for m in self.metrics if m.is_stored)

    @property
    def definition_digest(self) -> str:
        """What the pipeline computes, digested: any change to its declaration or its row rules
        changes it, and no other pipeline's change does."""
        declared = dataclasses.asdict(self)
        for wording in ("file", "description", "source_texts"):  # they change no value
            declared.pop(wording)
        text = json.dumps(declared, sort_keys=True, default=str) + "\0" + self.source_texts
        return hashlib.sha256(text.encode()).hexdigest()
