"""A self-contained HTML page for an audit: the state of a pipeline readable in ten seconds.

Summary first (a verdict and the counts), then speed vs truth per window with every difference
marked by its cause, the delay distribution of late events, and the quarantine reasons. No
scripts, no external files: inline SVG and CSS, so the page can be mailed or archived as it is.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

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
    "unexplained": "#dc2626",
}
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


def _chart(windows: list[dict], metric: str, width: int = 960, height: int = 260) -> str:
    if not windows:
        return "<p>No closed windows in this range yet.</p>"
    pad, top = 40, max(max(w["truth"], w["speed"]) for w in windows) or 1
    step = (width - 2 * pad) / max(len(windows) - 1, 1)

    def x(i: int) -> float:
        return pad + i * step

    def y(value) -> float:
        return height - pad - float(value) / float(top) * (height - 2 * pad)

    def line(key: str) -> str:
        return " ".join(f"{x(i):.1f},{y(w[key]):.1f}" for i, w in enumerate(windows))

    marks = []
    for i, w in enumerate(windows):
        cause = _cause_of(w)
        if cause is None:
            continue
        label = f"{w['window_start']:%H:%M} {cause}: truth {w['truth']}, speed {w['speed']}"
        marks.append(
            f'<circle cx="{x(i):.1f}" cy="{y(w["speed"]):.1f}" r="4" fill="{CAUSE_COLOURS[cause]}">'
            f"<title>{html.escape(label)}</title></circle>"
        )
    first, last = windows[0]["window_start"], windows[-1]["window_start"]
    return f"""<svg viewBox="0 0 {width} {height}" role="img" aria-label="{metric} per window, speed vs truth">
  <line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>
  <text x="{pad}" y="{height - 12}" font-size="11">{first:%Y-%m-%d %H:%M}</text>
  <text x="{width - pad}" y="{height - 12}" font-size="11" text-anchor="end">{last:%H:%M}</text>
  <text x="4" y="{pad - 8}" font-size="11">{html.escape(metric)} (max {top})</text>
  <polyline points="{line("truth")}" fill="none" stroke="#16a34a" stroke-width="2"/>
  <polyline points="{line("speed")}" fill="none" stroke="#334155" stroke-width="1.5" stroke-dasharray="4 3"/>
  {"".join(marks)}
</svg>"""


def _cause_of(window: dict) -> str | None:
    if window["bad"]:
        return "unexplained"
    if window["truth"] == window["speed"]:
        return None
    return next(
        cause for cause in (Cause.LATE, Cause.ARRIVED_AFTER_BATCH, Cause.NOT_YET_READ) if cause in window["causes"]
    )


def _difference_chart(windows: list[dict], metric: str, width: int = 960, height: int = 200) -> str:
    """Truth - speed per window, one bar each, coloured by what explains it and labelled with the amount."""
    if not windows:
        return ""
    pad = 40
    top = max(max(abs(w["truth"] - w["speed"]) for w in windows), 1)
    slot = (width - 2 * pad) / len(windows)
    bars = []
    for i, w in enumerate(windows):
        cause, gap = _cause_of(w), w["truth"] - w["speed"]
        if cause is None:
            continue
        bar_height = max(float(abs(gap)) / float(top) * (height - 2 * pad), 2)
        x, y = pad + i * slot, height - pad - bar_height
        label = f"{w['window_start']:%H:%M} {cause.replace('_', ' ')}: truth - speed = {gap}"
        bars.append(
            f'<rect x="{x + slot * 0.1:.1f}" y="{y:.1f}" width="{slot * 0.8:.1f}" height="{bar_height:.1f}" '
            f'fill="{CAUSE_COLOURS[cause]}"><title>{html.escape(label)}</title></rect>'
            f'<text x="{x + slot / 2:.1f}" y="{y - 4:.1f}" font-size="10" text-anchor="middle">{gap}</text>'
        )
    first, last = windows[0]["window_start"], windows[-1]["window_start"]
    return f"""<svg viewBox="0 0 {width} {height}" role="img" aria-label="truth minus speed per window">
  <line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>
  <text x="{pad}" y="{height - 12}" font-size="11">{first:%Y-%m-%d %H:%M}</text>
  <text x="{width - pad}" y="{height - 12}" font-size="11" text-anchor="end">{last:%H:%M}</text>
  <text x="4" y="14" font-size="11">truth - speed, {html.escape(metric)}</text>
  {"".join(bars) or f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no differences</text>'}
</svg>"""


def _bars(counts: list[tuple[str, int]], colour: str) -> str:
    if not counts:
        return "<p>None.</p>"
    top = max(count for _, count in counts) or 1
    rows = "".join(
        f'<tr><td>{html.escape(label)}</td><td class="num">{count}</td>'
        f'<td><div class="bar" style="width:{240 * count / top:.0f}px;background:{colour}"></div></td></tr>'
        for label, count in counts
    )
    return f"<table>{rows}</table>"


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


def _quality_section(quality: QualityResult | None, report_dir: Path | None) -> str:
    if quality is None:
        return "<p>Expectation suites were not validated in this run (<code>--skip-quality</code>).</p>"
    rows = []
    for suite in quality.suites:
        failed = "; ".join(failure_text(e) for e in suite.failed)
        mark = '<span class="ok">&#10004; pass</span>' if suite.success else '<span class="bad">&#10008; FAIL</span>'
        name = html.escape(suite.suite)
        if suite.page:  # the run's own page: static HTML, readable even where the Data Docs index's CDN is not
            name = f'<a href="{html.escape(_docs_href(suite.page, report_dir))}">{name}</a>'
        rows.append(
            f"<tr><td>{name}</td><td>{mark}</td>"
            f'<td class="num">{sum(e.success for e in suite.expectations)}/{len(suite.expectations)}</td>'
            f"<td>{html.escape(suite.table)} v{suite.table_version}</td><td>{html.escape(failed)}</td></tr>"
        )
    href = html.escape(_docs_href(quality.data_docs, report_dir))
    return (
        f"<table><tr><th>suite</th><th></th><th>expectations met</th><th>validated</th><th>failed</th></tr>"
        f"{''.join(rows)}</table>"
        f'<p><a href="{href}">Open the Great Expectations Data Docs</a> '
        "(every validation, expectation by expectation)</p>"
    )


_STYLE = """
 body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #0f172a; max-width: 1000px; }
 .verdict { font-size: 22px; font-weight: 600; padding: 10px 14px; border-radius: 6px; color: white;
            display: inline-block; margin: 0 8px 8px 0; }
 .good { background: #16a34a; } .alarm { background: #dc2626; }
 .ok { color: #16a34a; } .bad { color: #dc2626; font-weight: 600; }
 th { text-align: left; font-weight: 600; padding-right: 10px; }
 .why { color: #b91c1c; font-weight: 600; margin: 4px 0; }
 .counts td, table td { padding: 2px 10px 2px 0; } .num { text-align: right; }
 .bar { height: 12px; border-radius: 2px; } svg { width: 100%; height: auto; background: #f8fafc; }
 code { font-size: 12px; }
"""


def _verdicts(result: AuditResult, quality: QualityResult | None, report_dir: Path | None) -> str:
    """The two verdicts, the reasons behind a failing one, and the link to the Data Docs."""
    verdict = (
        "All differences explained"
        if result.ok
        else f"{len(result.unexplained)} unexplained difference{'s' if len(result.unexplained) != 1 else ''}"
    )
    quality_verdict = (
        ""
        if quality is None
        else f'<div class="verdict {"good" if quality.ok else "alarm"}">'
        f"{'Data quality: all suites pass' if quality.ok else 'Data quality: suite failed'}</div>"
    )
    why = (
        [f"{len(result.unexplained)} (window, key) rows differ with no cause: see Unexplained below"]
        if not result.ok
        else []
    )
    if quality is not None:
        why += [
            f"{suite.suite} &rsaquo; {html.escape(failure_text(e))}" for suite in quality.suites for e in suite.failed
        ]
    why_list = ('<ul class="why">' + "".join(f"<li>{line}</li>" for line in why) + "</ul>") if why else ""
    docs_link = (
        ""
        if quality is None
        else f'<p><a href="{html.escape(_docs_href(quality.data_docs, report_dir))}">Data Docs</a> '
        "(Great Expectations: every validation, expectation by expectation)</p>"
    )
    return f"""<div class="verdict {"good" if result.ok else "alarm"}">{verdict}</div>{quality_verdict}
{why_list}{docs_link}"""


def _scope(result: AuditResult) -> str:
    if result.mode != AuditMode.INCREMENTAL:
        return ""
    return (
        f"<p>Incremental: {result.changed_windows if result.changed_windows is not None else 'all'} windows changed "
        f"since versions <code>{html.escape(json.dumps(result.changes_since))}</code>, plus windows closed since "
        "the previous audit.</p>"
    )


def _counts(result: AuditResult) -> str:
    rows = [
        ("closed (window, key) rows compared", result.windows_compared),
        ("matched", result.matched),
        ("explained by late events", result.explained[Cause.LATE]),
        ("&nbsp;&nbsp;of which a correction run has already fixed", result.explained[Cause.CORRECTED]),
        (
            "explained by events that reached the log after the batch value was computed",
            result.explained[Cause.ARRIVED_AFTER_BATCH],
        ),
        ("explained by files not yet read", result.explained[Cause.NOT_YET_READ]),
        ("unexplained", len(result.unexplained)),
        ("still open (after the watermark)", result.open_windows),
    ]
    cells = "".join(f'\n <tr><td>{label}</td><td class="num">{count}</td></tr>' for label, count in rows)
    return f'<table class="counts">{cells}\n</table>'


def _unexplained(result: AuditResult, audited: str) -> str:
    rows = "".join(
        f"<tr><td>{r['window_start']:%Y-%m-%d %H:%M}</td><td>{html.escape(str(r['key']))}</td>"
        f"<td>{html.escape(str(r['truth']))}</td><td>{html.escape(str(r['speed']))}</td>"
        f"<td>{html.escape(_accounted_by(r))}</td></tr>"
        for r in result.unexplained
    )
    if not rows:
        return ""
    return (
        f"<h2>Unexplained</h2><table><tr><th>window</th><th>key</th><th>truth</th><th>{audited}</th>"
        f"<th>event ids</th></tr>{rows}</table>"
    )


def render_report(
    result: AuditResult,
    inputs: ReportInputs,
    metric: str | None = None,
    quality: QualityResult | None = None,
    report_dir: Path | None = None,
) -> str:
    """The audit as one self-contained HTML page.

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
    legend = " ".join(f'<span style="color:{c}">&#9679; {k.replace("_", " ")}</span>' for k, c in CAUSE_COLOURS.items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Audit {html.escape(result.pipeline)} {result.range_start} - {result.range_end}</title>
<style>{_STYLE}</style></head><body>
<h1>Audit of {html.escape(result.pipeline)}: {audited}</h1>
<p>Event-time range [{result.range_start}, {result.range_end}), watermark {result.watermark}.
Run <code>{result.run_id}</code>.</p>
{_scope(result)}
{_verdicts(result, quality, report_dir)}
{_counts(result)}
<h2>{audited.capitalize()} vs truth per window ({html.escape(metric)}, all keys)</h2>
<p><span style="color:#16a34a">&#9473; truth from the raw log</span> &nbsp;
<span style="color:#334155">&#9476; {audited}</span> &nbsp; {legend}</p>
{_chart(windows, metric) if metric else "<p>No closed windows.</p>"}
<h2>Differences per window, by cause</h2>
{_difference_chart(windows, metric) if metric else ""}
<h2>Data quality (Great Expectations)</h2>
{_quality_section(quality, report_dir)}
{_unexplained(result, audited)}
<h2>Late events by how far they lagged the stream's newest event time when read</h2>
{_bars(_delay_histogram(inputs.late_delays_seconds), CAUSE_COLOURS[Cause.LATE])}
<h2>Quarantine reasons</h2>
{_bars(sorted(inputs.quarantine_reasons.items(), key=lambda kv: -kv[1]), "#64748b")}
<p><small>Pins: <code>{html.escape(str(result.pins))}</code></small></p>
</body></html>
"""
