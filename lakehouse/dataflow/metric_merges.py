"""How two partial values of one metric combine, per kind (docs/design.md, "Metrics and how they
merge"). The speed layer folds each micro-batch's partial value into a window's previous one, and
merges the sessions an event joins; the batch layer aggregates events directly. Both must give the
same value, so each kind's combination is associative and commutative:

- count and sum add;
- min and max take the least and the greatest;
- approx_distinct unions HyperLogLog sketches (the union of two sketches is the sketch of both parts).

A retraction withdraws a whole pane's value and publishes the merged one (lakehouse.dataflow.panes);
nothing is ever subtracted, so min, max and sketches retract as counts do.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from lakehouse.dataflow.pipelines.base import Metric, Pipeline
from lakehouse.vocabulary import MetricKind


def combined(metric: Metric, previous: Column, partial: Column) -> Column:
    """A window's value after folding ``partial`` into ``previous`` (null: no previous value)."""
    if metric.kind in (MetricKind.COUNT, MetricKind.SUM):
        value = F.coalesce(previous, F.lit(0)) + partial
    elif metric.kind == MetricKind.MIN:
        value = F.least(previous, partial)
    elif metric.kind == MetricKind.MAX:
        value = F.greatest(previous, partial)
    else:
        value = (
            F.when(previous.isNull(), partial)
            .when(partial.isNull(), previous)
            .otherwise(F.hll_union(previous, partial))
        )
    return value.cast(metric.spark_type)


def combined_over(metric: Metric, column: Column) -> Column:
    """The aggregate that combines many partial values of one window (sessions a merge joins)."""
    if metric.kind in (MetricKind.COUNT, MetricKind.SUM):
        return F.sum(column).cast(metric.spark_type)
    if metric.kind == MetricKind.MIN:
        return F.min(column)
    if metric.kind == MetricKind.MAX:
        return F.max(column)
    return F.hll_union_agg(column)


def compared(metric: Metric, column: Column) -> Column:
    """The value audits compare and SQL serves: a sketch's estimate, any other metric as stored.

    A sketch is estimated through a union with itself: sketches built in different orders (one
    batch aggregate against a chain of micro-batch unions) hold the same registers, and the union's
    estimator reads only those, so equal inputs give equal estimates."""
    if metric.kind == MetricKind.APPROX_DISTINCT:
        return F.hll_sketch_estimate(F.hll_union(column, column))
    return column


def served_sql(metric: Metric, alias: str = "") -> str:
    """``compared`` in SQL, for the serving views."""
    column = f"{alias}{metric.name}"
    if metric.kind == MetricKind.APPROX_DISTINCT:
        return f"hll_sketch_estimate(hll_union({column}, {column})) AS {metric.name}"
    return f"{column} AS {metric.name}" if alias else column


def derived_sql(pipeline: Pipeline) -> list[str]:
    """The means a pipeline serves beside its stored metrics."""
    return [f"try_divide({d.total}, {d.count}) AS {d.name}" for d in pipeline.derived]
