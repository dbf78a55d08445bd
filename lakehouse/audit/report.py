"""A self-contained HTML page for an audit: the state of a pipeline readable in ten seconds.

Summary first (a verdict and the counts), then speed vs truth per window with every difference
marked by its cause, the delay distribution of late events, and the quarantine reasons. Rendered
from the Jinja2 templates in ``templates/`` (autoescaped), its charts drawn by Altair and vl-convert
(``lakehouse.audit.charts``). No scripts, no external files: inline SVG and CSS, so the page can be
mailed or archived as it is.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import jinja2
from markupsafe import Markup
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.audit import charts
from lakehouse.audit.quality import QualityResult, failure_text
from lakehouse.audit.reconcile import AuditResult
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.settings import Settings
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables, table_exists
from lakehouse.vocabulary import AuditMode, AuditTarget, Cause, Fate, Layer

CAUSE_COLOURS = {
    Cause.LATE: "#d97706",
    Cause.NOT_YET_READ: "#2563eb",
    Cause.ARRIVED_AFTER_BATCH: "#7c3aed",
    Cause.MANUAL_CHANGE: "#0891b2",
    "unexplained": "#dc2626",
}
QUARANTINE_COLOUR = "#64748b"
TRUTH_SERIES = "truth from the raw log"
_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("lakehouse.audit", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
DELAY_BUCKETS = (
    (60, "< 1 min"),
    (120, "1-2 min"),
    (300, "2-5 min"),
    (600, "5-10 min"),
    (1800, "10-30 min"),
    (None, ">= 30 min"),
)


@dataclasses.dataclass
class ReportInputs:
    late_delays_seconds: list[float]
    quarantine_reasons: dict[str, int]


def gather_inputs(spark: SparkSession, settings: Settings, pipeline: Pipeline, result: AuditResult) -> ReportInputs:
    """Late events' delays and quarantine reasons, at the audit's pins.

    A late event's delay is how far its event time lagged the stream's event-time frontier (the
    newest event time of the batches before the one that read it): what made it late, whatever
    the pipeline's fields.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline the rows belong to.
        result: the audit whose pins and range are read.
    """
    tables = pipeline_tables(pipeline)

    def at(table, pin: str):
        return spark.read.format("delta").option("versionAsOf", int(result.pins[pin])).load(table.uri(settings))

    in_range = F.col(pipeline.event_time).between(result.range_start, result.range_end)
    late = at(tables.bronze, "bronze").where((F.col("fate") == Fate.LATE) & in_range)
    frontier = at(STREAM_PROGRESS, "progress").select(
        "app_id", (F.col("batch_id") + 1).alias("batch_id"), F.col("max_event_time").alias("frontier")
    )
    delays = [
        row[0]
        for row in late.join(frontier, on=["app_id", "batch_id"], how="left")
        .select((F.unix_micros("frontier") - F.unix_micros(pipeline.event_time)) / 1e6)
        .collect()
        if row[0] is not None
    ]
    reasons: dict[str, int] = {}
    if table_exists(spark, tables.quarantine.uri(settings)):
        quarantine = spark.read.format("delta").load(tables.quarantine.uri(settings))
        reasons = {r["reason"]: r["count"] for r in quarantine.groupBy("reason").count().collect()}
    return ReportInputs(delays, reasons)


def _per_window(result: AuditResult, metric: str) -> list[dict]:
    windows: dict = defaultdict(lambda: {"truth": Decimal(0), "speed": Decimal(0), "causes": set(), "bad": False})
    for row in result.rows:
        window = windows[row["window_start"]]
        window["truth"] += Decimal(row["truth"][metric])
        window["speed"] += Decimal(row["speed"][metric])
        window["causes"].update(row["causes"])
        window["bad"] |= row["status"] == "unexplained"
    return [{"window_start": start, **values} for start, values in sorted(windows.items())]


def _cause_of(window: dict) -> str | None:
    if window["bad"]:
        return "unexplained"
    if window["truth"] == window["speed"]:
        return None
    explaining = (Cause.LATE, Cause.ARRIVED_AFTER_BATCH, Cause.NOT_YET_READ, Cause.MANUAL_CHANGE)
    causes = sorted(window["causes"])
    return next((cause for cause in explaining if cause in causes), causes[0] if causes else "unexplained")


def _delay_histogram(delays: list[float]) -> list[tuple[str, int]]:
    counts = {label: 0 for _, label in DELAY_BUCKETS}
    for delay in delays:
        label = next(label for limit, label in DELAY_BUCKETS if limit is None or delay < limit)
        counts[label] += 1
    return list(counts.items())


def _accounted_by(row: dict) -> str:
    if row["unexplained_event_ids"]:
        return ", ".join(row["unexplained_event_ids"])
    counted = "the events in bronze when it was written" if row.get("source") == Layer.BATCH else "its on-time events"
    return f"no event: the {row.get('source') or 'speed'} value differs from {counted} by {row['speed_minus_on_time']}"


def _docs_href(data_docs: str, report_dir: Path | None) -> str:
    """A link that survives moving home and report together: relative when both are local."""
    if report_dir is not None:
        return Path(os.path.relpath(data_docs, report_dir)).as_posix()
    return Path(data_docs).as_uri()


def _label(cause: str) -> str:
    return cause.replace("_", " ")


def _utc(moment: datetime) -> str:
    """ISO time with its zone: Vega reads a zoneless one as the drawing machine's local time."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def _chart_rows(windows: list[dict], audited: str) -> tuple[list[dict], list[dict], list[dict]]:
    """The per-window chart's lines and points and the differences chart's bars; amounts exact as text."""
    lines, points, bars = [], [], []
    for window in windows:
        when, label = _utc(window["window_start"]), f"{window['window_start']:%H:%M}"
        truth, speed = window["truth"], window["speed"]
        lines += [
            {"window": when, "series": TRUTH_SERIES, "value": float(truth)},
            {"window": when, "series": audited, "value": float(speed)},
        ]
        cause = _cause_of(window)
        if cause is None:
            continue
        common = {"window": when, "label": label, "cause": _label(cause)}
        points.append({**common, "value": float(speed), "truth": str(truth), "audited": str(speed)})
        bars.append({**common, "gap": float(truth - speed), "gap_text": str(truth - speed)})
    return lines, points, bars


def _svg(chart) -> Markup:
    return Markup(charts.to_svg(chart))  # Vega wrote it, escaping its text


def _charts(windows: list[dict], audited: str, metric: str, inputs: ReportInputs) -> dict[str, Markup | None]:
    """Each chart of the page as SVG, or None where it would have nothing to draw."""
    colours = {_label(c): colour for c, colour in CAUSE_COLOURS.items()}
    colours |= {TRUTH_SERIES: charts.TRUTH_COLOUR, audited: charts.AUDITED_COLOUR}
    lines, points, bars = _chart_rows(windows, audited)
    delays = [{"label": label, "count": n} for label, n in _delay_histogram(inputs.late_delays_seconds)]
    reasons = sorted(inputs.quarantine_reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "windows": _svg(charts.windows_chart(lines, points, colours, metric)) if windows else None,
        "differences": _svg(charts.differences_chart(bars, lines, colours, metric)) if bars else None,
        "delays": _svg(charts.counts_chart(delays, CAUSE_COLOURS[Cause.LATE], "lag behind the frontier"))
        if inputs.late_delays_seconds
        else None,
        "quarantine": _svg(
            charts.counts_chart([{"label": r, "count": n} for r, n in reasons], QUARANTINE_COLOUR, "reason")
        )
        if reasons
        else None,
    }


def _verdict(result: AuditResult) -> str:
    if result.ok:
        return "All differences explained"
    return f"{len(result.unexplained)} unexplained difference{'s' if len(result.unexplained) != 1 else ''}"


def _why(result: AuditResult, quality: QualityResult | None) -> list[str]:
    """The reasons behind a failing verdict, one line each."""
    why = [] if result.ok else [f"{len(result.unexplained)} {result.unit} differ with no cause: see Unexplained below"]
    if quality is not None:
        why += [f"{suite.suite} \u203a {failure_text(e)}" for suite in quality.suites for e in suite.failed]
    return why


def _counts(result: AuditResult) -> list[tuple[str, int, bool]]:
    """(label, count, indented) per row of the summary table."""
    return [
        (f"closed {result.unit} compared", result.windows_compared, False),
        ("matched", result.matched, False),
        ("explained by late events", result.explained[Cause.LATE], False),
        ("of which a correction run has already fixed", result.explained[Cause.CORRECTED], True),
        (
            "explained by events that reached the log after the batch value was computed",
            result.explained[Cause.ARRIVED_AFTER_BATCH],
            False,
        ),
        ("explained by files not yet read", result.explained[Cause.NOT_YET_READ], False),
        ("unexplained", len(result.unexplained), False),
        ("still open (after the watermark)", result.open_windows, False),
    ]


def _suites(quality: QualityResult | None, report_dir: Path | None) -> list[dict]:
    """One row per validated suite; its name links to the run's own Data Docs page."""
    if quality is None:
        return []
    return [
        {
            "name": suite.suite,
            "href": _docs_href(suite.page, report_dir) if suite.page else None,
            "success": suite.success,
            "met": sum(e.success for e in suite.expectations),
            "total": len(suite.expectations),
            "table": suite.table,
            "version": suite.table_version,
            "failed": "; ".join(failure_text(e) for e in suite.failed),
        }
        for suite in quality.suites
    ]


def _unexplained(result: AuditResult) -> list[dict]:
    return [
        {
            "window": f"{row['window_start']:%Y-%m-%d %H:%M}",
            "key": str(row["key"]),
            "truth": str(row["truth"]),
            "audited": str(row["speed"]),
            "accounted_by": _accounted_by(row),
        }
        for row in result.unexplained
    ]


def _scope(result: AuditResult) -> dict | None:
    if result.mode != AuditMode.INCREMENTAL:
        return None
    changed = result.changed_windows if result.changed_windows is not None else "all"
    return {"changed": changed, "since": json.dumps(result.changes_since)}


def render_report(
    result: AuditResult,
    inputs: ReportInputs,
    metric: str | None = None,
    quality: QualityResult | None = None,
    report_dir: Path | None = None,
) -> str:
    """The audit as one self-contained HTML page, from ``templates/report.html.j2``.

    Args:
        result: the audit's outcome.
        inputs: what the page shows beyond the audit (late-event delays, quarantine reasons).
        metric: the metric charted per window; the first of the pipeline's when None.
        quality: the data-quality suites' outcome, if they ran.
        report_dir: where the page is written, so the Data Docs link is relative to it.
    """
    audited = "serving view" if result.target == AuditTarget.SERVING else "speed layer"
    metric = metric or (next(iter(result.rows[0]["truth"])) if result.rows else "")
    windows = _per_window(result, metric) if metric else []
    return _TEMPLATES.get_template("report.html.j2").render(
        result=result,
        audited=audited,
        metric=metric,
        scope=_scope(result),
        verdict=_verdict(result),
        why=_why(result, quality),
        quality=quality,
        docs_href=_docs_href(quality.data_docs, report_dir) if quality else None,
        counts=_counts(result),
        charts=_charts(windows, audited, metric, inputs),
        suites=_suites(quality, report_dir),
        unexplained=_unexplained(result),
    )
