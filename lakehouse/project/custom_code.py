"""A project's own Python, for what a declaration cannot say: custom metrics in
``pipelines/metrics.py``. Checked without importing it (an AST read, no Spark), imported when a
pipeline is built."""

from __future__ import annotations

import ast
from pathlib import Path

from lakehouse.vocabulary import MetricKind

CUSTOM_METRICS_FILE = "metrics.py"
# How a custom metric's partial values may combine: the stored kinds with a merge rule.
MERGEABLE = (MetricKind.COUNT, MetricKind.SUM, MetricKind.MIN, MetricKind.MAX, MetricKind.APPROX_DISTINCT)


def declared_metric_functions(pipelines_dir: Path) -> dict[str, int]:
    """The functions of ``pipelines/metrics.py`` decorated with ``@metric(...)``, by name, with their line."""
    path = pipelines_dir / CUSTOM_METRICS_FILE
    if not path.is_file():
        return {}
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(_is_metric_decorator(d) for d in node.decorator_list):
            found[node.name] = node.lineno
    return found


def _is_metric_decorator(decorator: ast.expr) -> bool:
    called = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(called, ast.Name) and called.id == "metric") or (
        isinstance(called, ast.Attribute) and called.attr == "metric"
    )
