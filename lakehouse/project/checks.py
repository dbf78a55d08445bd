"""What a declaration's parts must agree on: keys and metrics name fields, a mean divides a sum by a
count, joins name a dimension the project declares, suite rules name columns the events have."""

from __future__ import annotations

from lakehouse.eventtime import parse_duration
from lakehouse.project.declarations import DimensionSpec, PipelineSpec
from lakehouse.project.reader import Reader
from lakehouse.project.yaml_source import YamlSource
from lakehouse.vocabulary import FieldKind, MetricKind

# Columns every gold table has besides keys and metrics, and the view's own.
RESERVED_COLUMNS = (
    "window_start",
    "window_end",
    "window_date",
    "window_hour",
    "source",
    "is_final",
    "updated_at",
    "run_id",
)
# The row-level GX expectation types a raw-events suite may hold (lakehouse.dataflow.pipelines.row_rules).
ROW_RULE_TYPES = (
    "expect_column_values_to_be_between",
    "expect_column_values_to_be_in_set",
    "expect_column_values_to_match_regex",
    "expect_column_values_to_not_be_in_set",
    "expect_column_values_to_not_match_regex",
    "unexpected_rows_expectation",
)
RECEIVED_AT = "received_at"


def check_fields(reader: Reader, spec: PipelineSpec) -> None:
    for setting, kind in (("event_id", FieldKind.STRING), ("event_time", FieldKind.TIMESTAMP)):
        name = getattr(spec, setting)
        field = spec.field(name)
        if field is None:
            reader.report((setting,), f"{name!r} is not a field")
        elif field.kind != kind or not field.required:
            reader.report(("fields", name), f"the {setting} field must be a required {kind}")
    if spec.clocks:
        for setting in ("sent_at", "device"):
            name = getattr(spec.clocks, setting)
            if spec.field(name) is None:
                reader.report(("clocks", setting), f"{name!r} is not a field")


def check_keys(reader: Reader, spec: PipelineSpec) -> None:
    attributes = spec.joins.attributes if spec.joins else ()
    for index, key in enumerate(spec.keys):
        if spec.field(key) is None and key not in attributes:
            reader.report(
                ("keys", index), f"{key!r} is not a field" + (" nor a joined attribute" if attributes else "")
            )
        if key in RESERVED_COLUMNS:
            reader.report(("keys", index), f"{key!r} is a column the tables already have")


def check_metrics(reader: Reader, spec: PipelineSpec, custom: dict[str, int]) -> None:
    """Each metric's field, or custom function (of ``pipelines/metrics.py``), exists and suits its kind."""
    if not spec.metrics:
        reader.report(("metrics",), "declare at least one metric")
    by_name = {m.name: m for m in spec.metrics}
    for metric in spec.metrics:
        where = ("metrics", metric.name)
        if metric.name in (*spec.keys, *RESERVED_COLUMNS):
            reader.report(where, f"{metric.name!r} is already a key or a column of the tables")
        if metric.kind == MetricKind.MEAN:
            for part, kind in zip(("sum", "count"), (MetricKind.SUM, MetricKind.COUNT), strict=True):
                named = by_name.get(metric.mean_of[part == "count"])
                if named is None or named.kind != kind:
                    reader.report((*where, "mean", part), f"must name a {kind} metric of this pipeline")
            continue
        if metric.kind == MetricKind.CUSTOM:
            if metric.field not in custom:
                reader.report((*where, metric.kind), f"no @metric function {metric.field!r} in pipelines/metrics.py")
            continue
        if metric.field is None:
            continue
        field = spec.field(metric.field)
        if field is None:
            reader.report((*where, metric.kind), f"{metric.field!r} is not a field")
        elif metric.kind == MetricKind.SUM and not field.is_numeric:
            reader.report((*where, metric.kind), f"a sum needs a number field; {field.name} is a {field.kind}")
        elif metric.kind in (MetricKind.MIN, MetricKind.MAX) and field.kind == FieldKind.STRING:
            reader.report((*where, metric.kind), f"{metric.kind} needs a number or timestamp field")


def check_window(reader: Reader, spec: PipelineSpec) -> None:
    window = spec.window
    if window.size and window.slide and parse_duration(window.slide) > parse_duration(window.size):
        reader.report(("window", "slide"), "a slide longer than the size would skip events")
    for setting, value in (("size", window.size), ("slide", window.slide), ("gap", window.gap)):
        if value is not None and parse_duration(value).total_seconds() <= 0:
            reader.report(("window", setting), "must be longer than 0s")


def check_joins(reader: Reader, spec: PipelineSpec, dimensions: dict[str, DimensionSpec]) -> None:
    if not spec.joins:
        return
    dimension = dimensions.get(spec.joins.dimension)
    if dimension is None:
        known = ", ".join(sorted(dimensions)) or "none declared in lakehouse.yaml"
        reader.report(("joins", "dimension"), f"unknown dimension {spec.joins.dimension!r}; dimensions: {known}")
        return
    for index, attribute in enumerate(spec.joins.attributes):
        if attribute not in dimension.attributes:
            reader.report(("joins", "attributes", index), f"dim.{dimension.name} has no attribute {attribute!r}")
    if spec.field(dimension.key) is None:
        reader.report(("joins",), f"dim.{dimension.name} is keyed by {dimension.key!r}, which is not a field")


def check_suite(suite: YamlSource, spec: PipelineSpec, problems: list) -> None:
    """The suite's row rules: known types, a reason each, once each, on columns the events have."""
    reader = Reader(suite, problems)
    expectations = suite.data.get("expectations") if isinstance(suite.data, dict) else None
    if not isinstance(expectations, list):
        reader.report(("expectations",), "a suite holds a list of expectations")
        return
    columns, reasons = {f.name for f in spec.fields} | {RECEIVED_AT}, set()
    for index, expectation in enumerate(expectations):
        where = ("expectations", index)
        kind = expectation.get("type") if isinstance(expectation, dict) else None
        if kind not in ROW_RULE_TYPES:
            reader.report((*where, "type"), f"{kind!r} is not a row rule; row rules: {', '.join(ROW_RULE_TYPES)}")
            continue
        reason = (expectation.get("meta") or {}).get("reason")
        if not reason or reason in reasons:
            reader.report((*where, "meta", "reason"), "each rule needs its own reason (the quarantine reason)")
        reasons.add(reason)
        column = (expectation.get("kwargs") or {}).get("column")
        if kind != "unexpected_rows_expectation" and column not in columns:
            reader.report((*where, "kwargs", "column"), f"{column!r} is not a field of {spec.name}")
