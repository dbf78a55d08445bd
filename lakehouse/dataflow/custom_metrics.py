"""Custom metrics: a project's ``pipelines/metrics.py`` defines each as a function returning a Spark
aggregate column, decorated with how its partial values merge and the type it stores::

    from pyspark.sql import functions as F
    from lakehouse.dataflow.custom_metrics import metric

    @metric(merge="sum", type="bigint")
    def heavy_vehicles():
        return F.count(F.when(F.col("axles") >= 3, 1))

and a pipeline declares ``heavy: {custom: heavy_vehicles}``. The merge must hold for the aggregate:
the speed layer combines its per-batch values with that rule (docs/design.md, "Metrics and how they
merge"), and the audit proves it against the batch layer's direct aggregate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import Column
from pyspark.sql import types as T

from lakehouse.errors import LakehouseError
from lakehouse.project.custom_code import CUSTOM_METRICS_FILE, MERGEABLE
from lakehouse.vocabulary import MetricKind


@dataclasses.dataclass(frozen=True)
class CustomMetric:
    aggregate: Callable[[], Column]
    merge: MetricKind
    spark_type: T.DataType


def metric(merge: str, type: str):  # noqa: A002 (the word a user writes)
    """Marks a function of ``pipelines/metrics.py`` as a custom metric."""
    if merge not in [kind.value for kind in MERGEABLE]:
        raise LakehouseError(f"a custom metric merges as one of {', '.join(MERGEABLE)}, not {merge!r}")

    stored = stored_type(type)

    def mark(function: Callable[[], Column]) -> Callable[[], Column]:
        function.lakehouse_metric = CustomMetric(function, MetricKind(merge), stored)
        return function

    return mark


_SIMPLE_TYPES = {
    "bigint": T.LongType(),
    "int": T.IntegerType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "string": T.StringType(),
    "timestamp": T.TimestampType(),
    "date": T.DateType(),
    "binary": T.BinaryType(),
}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def stored_type(text: str) -> T.DataType:
    """A SQL type name as a Spark type, read in Python: a DAG task imports metrics without a JVM."""
    name = text.strip().lower()
    if name in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[name]
    if match := _DECIMAL.match(name):
        return T.DecimalType(int(match[1]), int(match[2]))
    raise LakehouseError(f"a custom metric stores one of {', '.join(_SIMPLE_TYPES)} or decimal(p,s), not {text!r}")


def custom_metrics(pipelines_dir: Path) -> dict[str, CustomMetric]:
    """The project's custom metrics by function name (none without a ``metrics.py``)."""
    path = pipelines_dir / CUSTOM_METRICS_FILE
    if not path.is_file():
        return {}
    # A module name per file, so that two projects' metrics never share one.
    name = "lakehouse_project_metrics_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise LakehouseError(f"{path}: importing it failed: {type(error).__name__}: {error}") from error
    return {n: f.lakehouse_metric for n, f in vars(module).items() if hasattr(f, "lakehouse_metric")}
