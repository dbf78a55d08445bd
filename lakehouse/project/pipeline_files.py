"""A pipeline file (``pipelines/<name>.yaml``) read into a :class:`PipelineSpec`.

A file may ``extends:`` another pipeline: it reads that pipeline's events (its topic) with its
row rules, and takes every setting it does not spell from it; ``fields`` merge by name (a child can
make a field required), every other setting replaces the parent's.
"""

from __future__ import annotations

from typing import Any

from lakehouse.project.declarations import ClockSpec, FieldSpec, JoinSpec, MetricSpec, PipelineSpec, WindowSpec
from lakehouse.project.reader import TABLE_NAME, Reader
from lakehouse.project.yaml_source import FieldPath
from lakehouse.vocabulary import FieldKind, MetricKind

PIPELINE_SETTINGS = (
    "name",
    "description",
    "extends",
    "suite",
    "fields",
    "keys",
    "window",
    "metrics",
    "watermark_delay",
    "allowed_lateness",
    "event_id",
    "event_time",
    "session_lookback",
    "clocks",
    "joins",
)
FIELD_SETTINGS = ("kind", "required", "precision", "scale")
SOURCE_KINDS = (MetricKind.SUM, MetricKind.MIN, MetricKind.MAX, MetricKind.APPROX_DISTINCT)


def merged_with_parent(child: dict, parent: dict) -> dict:
    """The child's settings over its parent's; ``fields`` merge by name."""
    merged = {**parent, **child}
    if isinstance(parent.get("fields"), dict) and isinstance(child.get("fields"), dict):
        merged["fields"] = {**parent["fields"], **child["fields"]}
    merged.pop("extends", None)
    return merged


def read_field(reader: Reader, name: str, value: Any, where: FieldPath) -> FieldSpec | None:
    """A field: ``<kind>`` or ``{kind, required, precision, scale}``.

    Args:
        reader: records the problems.
        name: the field's name.
        value: what the file declares for it.
        where: its field path in the file.
    """
    declared = {"kind": value} if isinstance(value, str) else reader.mapping(value, where, required=True)
    reader.unknown_keys(declared, where, FIELD_SETTINGS)
    kind = reader.choice(declared.get("kind"), (*where, "kind") if isinstance(value, dict) else where, FieldKind)
    required = declared.get("required", True)
    if not isinstance(required, bool):
        reader.report((*where, "required"), "must be true or false")
    precision, scale = declared.get("precision"), declared.get("scale")
    if kind == FieldKind.DECIMAL:
        precision, scale = precision or 18, 2 if scale is None else scale
        if not (isinstance(precision, int) and isinstance(scale, int) and 0 <= scale <= min(precision, 9) <= 38):
            reader.report(where, "a decimal has a precision of 1-38 digits and a scale of 0-9, at most the precision")
            return None
    elif precision is not None or scale is not None:
        reader.report(where, "only a decimal field has a precision and a scale")
    # An unknown kind is reported; the field still exists, so that its uses are not reported too.
    return FieldSpec(name, kind or FieldKind.STRING, required is not False, precision, scale)


def read_fields(reader: Reader, data: dict) -> tuple[FieldSpec, ...]:
    declared = reader.mapping(data.get("fields"), ("fields",), required=True)
    fields = []
    for name, value in declared.items():
        if reader.name(name, ("fields", name)) and (spec := read_field(reader, name, value, ("fields", name))):
            fields.append(spec)
    return tuple(fields)


def read_window(reader: Reader, data: dict) -> WindowSpec:
    declared = reader.mapping(data.get("window"), ("window",), required=True)
    reader.unknown_keys(declared, ("window",), ("size", "slide", "gap"))
    size, slide, gap = (reader.duration(declared.get(k), ("window", k)) for k in ("size", "slide", "gap"))
    if declared and (size is None) == (gap is None) and "size" not in declared and "gap" not in declared:
        reader.report(("window",), "a window has a size (tumbling; with a slide, hopping) or a gap (session)")
    elif "size" in declared and "gap" in declared:
        reader.report(("window",), "a window has a size or a gap, not both")
    elif "slide" in declared and "size" not in declared:
        reader.report(("window", "slide"), "a slide needs a size")
    return WindowSpec(size, slide, gap)


def read_metric(reader: Reader, name: str, value: Any, where: FieldPath) -> MetricSpec | None:
    """``count``, ``{count|sum|min|max|approx_distinct: <field>}`` or ``{mean: {sum: <metric>, count: <metric>}}``.

    Args:
        reader: records the problems.
        name: the metric's name.
        value: what the file declares for it.
        where: its field path in the file.
    """
    if isinstance(value, str):
        kind = reader.choice(value, where, MetricKind)
        if kind is not None and kind != MetricKind.COUNT:
            reader.report(where, f"{kind} needs its field: write {{{kind}: <field>}}")
            return None
        return None if kind is None else MetricSpec(name, kind)
    declared = reader.mapping(value, where, required=True)
    if len(declared) != 1:
        reader.report(where, "a metric is count, or one kind with its field, e.g. {sum: amount} or {count: coupon}")
        return None
    ((kind_name, argument),) = declared.items()
    kind = reader.choice(kind_name, (*where, kind_name), MetricKind)
    if kind == MetricKind.MEAN:
        parts = reader.mapping(argument, (*where, kind_name), required=True)
        reader.unknown_keys(parts, (*where, kind_name), ("sum", "count"))
        total, count = (reader.name(parts.get(k), (*where, kind_name, k)) for k in ("sum", "count"))
        return MetricSpec(name, kind, mean_of=(total, count)) if total and count else None
    source = reader.name(argument, (*where, kind_name))  # a field; for a custom metric, its function
    return MetricSpec(name, kind, field=source) if kind and source else None


def read_metrics(reader: Reader, data: dict) -> tuple[MetricSpec, ...]:
    declared = reader.mapping(data.get("metrics"), ("metrics",), required=True)
    metrics = []
    for name, value in declared.items():
        if reader.name(name, ("metrics", name)) and (spec := read_metric(reader, name, value, ("metrics", name))):
            metrics.append(spec)
    return tuple(metrics)


def read_clocks(reader: Reader, data: dict) -> ClockSpec | None:
    if data.get("clocks") is None:
        return None
    declared = reader.mapping(data["clocks"], ("clocks",))
    reader.unknown_keys(declared, ("clocks",), ("bound", "sent_at", "device"))
    bound = reader.duration(declared.get("bound"), ("clocks", "bound"))
    if bound is None:
        reader.report(("clocks", "bound"), "is required: how far off a clock may be before its events are quarantined")
        return None
    names = {k: reader.name(declared[k], ("clocks", k)) for k in ("sent_at", "device") if k in declared}
    return ClockSpec(bound, **{k: v for k, v in names.items() if v})


def read_joins(reader: Reader, data: dict) -> JoinSpec | None:
    if data.get("joins") is None:
        return None
    declared = reader.mapping(data["joins"], ("joins",))
    reader.unknown_keys(declared, ("joins",), ("dimension", "attributes", "unknown"))
    dimension = reader.name(declared.get("dimension"), ("joins", "dimension"))
    attributes = reader.names(declared.get("attributes", []), ("joins", "attributes"))
    unknown = reader.text(declared.get("unknown"), ("joins", "unknown"), "unknown")
    return JoinSpec(dimension, attributes, unknown) if dimension and attributes else None


def read_pipeline(reader: Reader, data: dict, topic: str, suite: str) -> PipelineSpec | None:
    """The pipeline ``data`` declares (its parent's settings merged in), or None if unreadable.

    Args:
        reader: reads ``data``'s values and records their problems.
        data: the file's mapping, merged with its parent's.
        topic: the log topic it reads (its parent's, for a child).
        suite: the name of its row-rule suite (its parent's, for a child).
    """
    reader.unknown_keys(data, (), PIPELINE_SETTINGS)
    name = reader.name(data.get("name"), ("name",), TABLE_NAME)
    spec = dict(
        fields=read_fields(reader, data),
        keys=reader.names(data.get("keys", []), ("keys",)),
        window=read_window(reader, data),
        metrics=read_metrics(reader, data),
        watermark_delay=reader.duration(data.get("watermark_delay"), ("watermark_delay",)),
        allowed_lateness=reader.duration(data.get("allowed_lateness"), ("allowed_lateness",), "0s"),
        event_id=reader.name(data.get("event_id", "event_id"), ("event_id",)),
        event_time=reader.name(data.get("event_time", "event_time"), ("event_time",)),
        description=reader.text(data.get("description"), ("description",), ""),
        session_lookback=reader.duration(data.get("session_lookback"), ("session_lookback",), "1d"),
        clocks=read_clocks(reader, data),
        joins=read_joins(reader, data),
    )
    if "watermark_delay" not in data:
        reader.report(("watermark_delay",), "is required: how far behind the newest event time the watermark runs")
    if name is None:
        return None
    # Whatever was unreadable has its problem recorded; the rest is still checked against itself.
    spec = {k: v for k, v in spec.items() if v is not None}
    spec.setdefault("watermark_delay", "0s")
    return PipelineSpec(name=name, file=reader.source.path, topic=topic or name, suite=suite or name, **spec)
