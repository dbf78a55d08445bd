"""A project's declarations (lakehouse.project) as the pipelines both layers compute: each field's
Spark type, each metric's aggregate, the row rules from the pipeline's suite."""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.dataflow.custom_metrics import CustomMetric, custom_metrics
from lakehouse.dataflow.pipelines.base import (
    Band,
    ClockCorrection,
    DerivedMetric,
    Dimension,
    DimensionJoin,
    Field,
    Metric,
    Pipeline,
    Window,
    WindowJoin,
)
from lakehouse.dataflow.pipelines.row_rules import row_rules
from lakehouse.project.declarations import (
    MONEY_PRECISION,
    MONEY_SCALE,
    SUM_PRECISION,
    DimensionSpec,
    FieldSpec,
    MetricSpec,
    PipelineSpec,
    WindowJoinSpec,
)
from lakehouse.project.project import PIPELINES_DIR, Project
from lakehouse.vocabulary import FieldKind, MetricKind

_SCALAR_TYPES = {
    FieldKind.STRING: T.StringType(),
    FieldKind.INTEGER: T.IntegerType(),
    FieldKind.TIMESTAMP: T.TimestampType(),
}


def spark_type(field: FieldSpec) -> T.DataType:
    if field.kind == FieldKind.MONEY:
        return T.DecimalType(MONEY_PRECISION, MONEY_SCALE)
    if field.kind == FieldKind.DECIMAL:
        return T.DecimalType(field.precision, field.scale)
    return _SCALAR_TYPES[field.kind]


def _sum_type(field: Field) -> T.DataType:
    """A sum keeps a decimal's scale on 18 digits; integers sum into longs."""
    if isinstance(field.spark_type, T.DecimalType):
        return T.DecimalType(SUM_PRECISION, field.spark_type.scale)
    return T.LongType()


def metric(spec: MetricSpec, fields: dict[str, Field], custom: dict[str, CustomMetric]) -> Metric:
    if spec.kind == MetricKind.CUSTOM:
        own = custom[spec.field]
        return Metric(spec.name, own.aggregate, own.spark_type, own.merge)
    if spec.kind == MetricKind.COUNT:
        # Events, or as SQL's COUNT(field) the events whose field holds a value.
        counted = spec.field
        return Metric(spec.name, lambda: F.count(F.lit(1) if counted is None else counted), T.LongType(), spec.kind)
    source = fields[spec.field]
    column = source.name
    if spec.kind == MetricKind.SUM:
        total = _sum_type(source)
        return Metric(spec.name, lambda: F.sum(column).cast(total), total, spec.kind)
    if spec.kind == MetricKind.APPROX_DISTINCT:
        # A HyperLogLog sketch (DataSketches): sketches of two parts of a window union into the
        # sketch of the whole, so the speed layer merges batches and sessions as it adds sums.
        return Metric(spec.name, lambda: F.hll_sketch_agg(F.col(column).cast("string")), T.BinaryType(), spec.kind)
    extreme = F.min if spec.kind == MetricKind.MIN else F.max
    return Metric(spec.name, lambda: extreme(column), source.spark_type, spec.kind)


def dimension(spec: DimensionSpec) -> Dimension:
    return Dimension(spec.name, spec.key, spec.attributes)


def pipeline(spec: PipelineSpec, project: Project) -> Pipeline:
    fields = tuple(Field(f.name, f.kind, spark_type(f), f.required) for f in spec.fields)
    by_name = {f.name: f for f in fields}
    custom = (
        custom_metrics(project.root / PIPELINES_DIR) if any(m.kind == MetricKind.CUSTOM for m in spec.metrics) else {}
    )
    joins = spec.joins
    return Pipeline(
        name=spec.name,
        description=spec.description,
        fields=fields,
        keys=spec.keys,
        window=Window(size=spec.window.size, slide=spec.window.slide, gap=spec.window.gap),
        metrics=tuple(metric(m, by_name, custom) for m in spec.stored_metrics),
        derived=tuple(DerivedMetric(m.name, *m.mean_of) for m in spec.metrics if not m.is_stored),
        rules=row_rules(spec.suite, project.expectations_dir),
        watermark_delay=spec.watermark_delay,
        allowed_lateness=spec.allowed_lateness,
        event_id=spec.event_id,
        event_time=spec.event_time,
        source=spec.topic if spec.topic != spec.name else None,
        session_lookback=spec.session_lookback,
        clocks=ClockCorrection(spec.clocks.bound, spec.clocks.sent_at, spec.clocks.device) if spec.clocks else None,
        joins=DimensionJoin(dimension(project.dimensions[joins.dimension]), joins.attributes, joins.unknown)
        if joins
        else None,
        definition=spec.definition_digest,
    )


def window_join(spec: WindowJoinSpec, pipelines: dict[str, Pipeline]) -> WindowJoin:
    return WindowJoin(
        name=spec.name,
        description=spec.description,
        events=pipelines[spec.events],
        readings=pipelines[spec.readings],
        key=spec.key,
        reading_sum=spec.reading_sum,
        reading_count=spec.reading_count,
        measure=spec.measure,
        neighbours=spec.neighbours,
        bands=tuple(Band(b.name, b.below) for b in spec.bands),
    )
