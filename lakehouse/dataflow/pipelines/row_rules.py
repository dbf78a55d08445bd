"""Row rules from the Great Expectations suites in ``expectations/``: the suite file is the one
source of truth for what makes an event invalid.

A suite is stored in GX 1.x's own JSON form. Each expectation of a ``<pipeline>.raw_events`` suite
is a row-level rule; this module turns it into the Spark column that flags a breaking row (a
:class:`Rule`), with ``meta.reason`` as the quarantine reason. It reads the JSON itself, without
importing GX (seconds of import time, and nothing the stream's hot path needs); the audit
validates the same suites through GX (``lakehouse.audit.quality``).

GX column expectations skip nulls, and so do these columns (a comparison with null is null, which
never routes a row): a missing or mistyped field has its own reason before any value rule runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pyspark.sql import Column
from pyspark.sql import functions as F

from lakehouse.errors import LakehouseError
from lakehouse.project.active import active_project

RAW_EVENTS, BRONZE, GOLD = "raw_events", "bronze", "gold"
# The one query shape a row rule may take: its WHERE clause is the Spark SQL condition of a bad row.
_UNEXPECTED_ROWS = re.compile(
    r"^\s*SELECT\s+\*\s+FROM\s+\{batch\}\s+WHERE\s+(?P<condition>.+?)\s*;?\s*$", re.IGNORECASE | re.DOTALL
)


def suite_path(pipeline: str, layer: str, directory: Path | None = None) -> Path:
    """A suite of the pipeline (or of the one it extends), in ``directory`` or the active project's."""
    return (directory or active_project().expectations_dir) / f"{pipeline}.{layer}.json"


def load_suite(path: Path) -> dict:
    try:
        suite = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LakehouseError(f"no expectation suite at {path}") from None
    except json.JSONDecodeError as error:
        raise LakehouseError(f"expectation suite {path} is not valid JSON: {error}") from None
    if not isinstance(suite.get("expectations"), list):
        raise LakehouseError(f"expectation suite {path} has no list of expectations")
    return suite


def _between(column: Column, kwargs: dict) -> Column:
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    too_low = too_high = F.lit(False)
    if low is not None:
        too_low = column <= F.lit(low) if kwargs.get("strict_min") else column < F.lit(low)
    if high is not None:
        too_high = column >= F.lit(high) if kwargs.get("strict_max") else column > F.lit(high)
    return too_low | too_high


def _where_condition(kwargs: dict) -> str:
    match = _UNEXPECTED_ROWS.match(kwargs["unexpected_rows_query"])
    if not match:
        raise LakehouseError(
            "a row rule's unexpected_rows_query must read 'SELECT * FROM {batch} WHERE <condition>', not "
            f"{kwargs['unexpected_rows_query']!r}"
        )
    return match.group("condition")


# GX expectation type -> (the kwargs it needs, the Spark column that is true on a row it rejects).
_VIOLATIONS = {
    "expect_column_values_to_be_in_set": (
        ("column", "value_set"),
        lambda kw: ~F.col(kw["column"]).isin(*kw["value_set"]),
    ),
    "expect_column_values_to_not_be_in_set": (
        ("column", "value_set"),
        lambda kw: F.col(kw["column"]).isin(*kw["value_set"]),
    ),
    "expect_column_values_to_be_between": (("column",), lambda kw: _between(F.col(kw["column"]), kw)),
    "expect_column_values_to_match_regex": (("column", "regex"), lambda kw: ~F.col(kw["column"]).rlike(kw["regex"])),
    "expect_column_values_to_not_match_regex": (("column", "regex"), lambda kw: F.col(kw["column"]).rlike(kw["regex"])),
    "unexpected_rows_expectation": (("unexpected_rows_query",), lambda kw: F.expr(_where_condition(kw))),
}


def rule_from_expectation(expectation: dict, source: str = "suite"):
    """A :class:`~lakehouse.dataflow.pipelines.base.Rule` for one row-level expectation of a suite."""
    from lakehouse.dataflow.pipelines.base import Rule  # here, not above: the pipelines import this module

    kind, kwargs = expectation.get("type"), expectation.get("kwargs") or {}
    reason = (expectation.get("meta") or {}).get("reason")
    if not reason:
        raise LakehouseError(f"{source}: every row rule needs meta.reason (the quarantine reason); {kind} has none")
    if kind not in _VIOLATIONS:
        raise LakehouseError(
            f"{source}: {kind} is not a row-level expectation; row rules may be {', '.join(sorted(_VIOLATIONS))}"
        )
    needed, violated = _VIOLATIONS[kind]
    absent = [name for name in needed if name not in kwargs]
    if absent:
        raise LakehouseError(f"{source}: the {reason} rule ({kind}) lacks {', '.join(absent)}")
    if kind == "unexpected_rows_expectation":
        _where_condition(kwargs)  # a malformed query fails when the suite loads, not inside a micro-batch
    return Rule(reason, lambda: violated(kwargs))


def row_rules(pipeline: str, directory: Path | None = None) -> tuple:
    """The pipeline's row rules, in suite order (a row's reason is the first rule it breaks)."""
    path = suite_path(pipeline, RAW_EVENTS, directory)
    suite = load_suite(path)
    rules = tuple(rule_from_expectation(e, str(path)) for e in suite["expectations"])
    reasons = [rule.reason for rule in rules]
    if len(set(reasons)) != len(reasons):
        raise LakehouseError(f"{path}: two row rules share a reason; each reason must name one rule")
    return rules
