"""The audit report's page, without Spark: every number it shows (in its tables and in the text and
titles of its Vega-drawn charts) against the audit it was rendered from; its escaping; and the
Data Docs' CDN links, every one of which must have a local copy."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from xml.etree import ElementTree

import pytest

from lakehouse.audit import offline_docs
from lakehouse.audit.reconcile import AuditResult, render_audit
from lakehouse.audit.report import ReportInputs, render_report
from lakehouse.vocabulary import AuditUnit

SVG = "{http://www.w3.org/2000/svg}"
W = datetime(2026, 1, 5, 8, 0)
# window minute -> (truth, speed, causes, status); the rest match with truth 10 + minute.
DIFFERING = {
    3: (13, 11, ["late"], "explained"),
    5: (15, 16, [], "unexplained"),
    7: (17, 14, ["late", "not_yet_read"], "explained"),
    9: (19, 18, ["not_yet_read"], "explained"),
}
SHOWN_CAUSE = {3: "late", 5: "unexplained", 7: "late", 9: "not yet read"}  # late wins where both explain
DELAYS = [30.0, 61.0, 119.5, 4000.0]  # < 1 min: 1, 1-2 min: 2, >= 30 min: 1
REASONS = {"bad_json": 7, "missing_field": 3, "bad_<tag>": 1}


def audit_row(minute: int) -> dict:
    truth, speed, causes, status = DIFFERING.get(minute, (10 + minute, 10 + minute, [], "matched"))
    return {
        "window_start": W + timedelta(minutes=minute),
        "key": "B1",
        "truth": {"vehicles": str(truth)},
        "speed": {"vehicles": str(speed)},
        "causes": causes,
        "status": status,
        "unexplained_event_ids": ["ev-<5>"] if status == "unexplained" else [],
        "source": None,
        "speed_minus_on_time": 0,
    }


@pytest.fixture(scope="module")
def audit() -> AuditResult:
    rows = [audit_row(minute) for minute in range(12)]
    return AuditResult(
        run_id="run-1",
        pins={"bronze": "3", "speed": "5"},
        watermark=W + timedelta(minutes=14),
        windows_compared=12,
        open_windows=2,
        matched=8,
        explained={"late": 2, "corrected": 1, "arrived_after_batch": 0, "not_yet_read": 2},
        unexplained=[r for r in rows if r["status"] == "unexplained"],
        pipeline="toll<script>alert(1)</script>",
        range_start=W,
        range_end=W + timedelta(hours=1),
        rows=rows,
    )


@pytest.fixture(scope="module")
def page(audit) -> str:
    return render_report(audit, ReportInputs(DELAYS, REASONS))


def chart(page: str, name: str) -> ElementTree.Element:
    svg = re.search(rf'<figure class="chart" id="{name}-chart">(<svg.*?</svg>)</figure>', page, re.S).group(1)
    return ElementTree.fromstring(svg)


def labels(svg: ElementTree.Element) -> list[str]:
    """The text marks' texts: the amounts written next to bars."""
    return [
        text.text
        for group in svg.iter(f"{SVG}g")
        if {"mark-text", "role-mark"} <= set(group.get("class", "").split())
        for text in group.iter(f"{SVG}text")
    ]


def mark_titles(svg: ElementTree.Element, role: str) -> list[str]:
    """The hover titles of one kind of mark (rect, symbol, text): what the tooltip fields say."""
    return [
        element.find(f"{SVG}title").text
        for element in svg.iter()
        if element.get("role") == "graphics-symbol" and (element.get("aria-roledescription") or "") == role
    ]


def test_summary_counts_are_the_audits(page, audit):
    cells = re.findall(r'<tr><td(?: class="sub")?>([^<]+)</td><td class="num">(\d+)</td></tr>', page)
    assert dict(cells) == {
        "closed (window, key) rows compared": "12",
        "matched": "8",
        "explained by late events": "2",
        "of which a correction run has already fixed": "1",
        "explained by events that reached the log after the batch value was computed": "0",
        "explained by files not yet read": "2",
        "unexplained": "1",
        "still open (after the watermark)": "2",
    }
    assert "1 unexplained difference" in page


def test_a_session_audit_counts_session_groups_in_the_report_and_the_command_line(audit):
    groups = dataclasses.replace(
        audit, unit=AuditUnit.SESSION_GROUPS, explained={**audit.explained, "manual_change": 0}
    )
    page = render_report(groups, ReportInputs(DELAYS, REASONS))
    assert '<td>closed session groups compared</td><td class="num">12</td>' in page
    assert "1 session groups differ with no cause" in page and "(window, key)" not in page
    assert render_audit(groups).splitlines()[0].endswith("12 closed session groups compared, 2 still open (watermark "
                                                         f"{groups.watermark})")  # fmt: skip


def test_every_differing_window_has_a_point_with_its_exact_values_and_cause(page):
    assert sorted(mark_titles(chart(page, "windows"), "point")) == sorted(
        f"window: 08:{minute:02d}; vehicles: {speed}; cause: {SHOWN_CAUSE[minute]}; truth: {truth}; audited: {speed}"
        for minute, (truth, speed, _, _) in DIFFERING.items()
    )


def test_difference_bars_carry_truth_minus_speed_as_label_and_title(page):
    svg = chart(page, "differences")
    assert (
        sorted(int(label) for label in labels(svg))
        == sorted(truth - speed for truth, speed, _, _ in DIFFERING.values())
        == [-1, 1, 2, 3]
    )
    assert sorted(mark_titles(svg, "bar")) == sorted(
        f"window: 08:{minute:02d}; truth - audited, vehicles: {truth - speed}; cause: {SHOWN_CAUSE[minute]}".replace(
            "-1", "\u22121"
        )
        for minute, (truth, speed, _, _) in DIFFERING.items()
    )


def test_delay_and_quarantine_bars_show_their_counts(page):
    delays = {"< 1 min": 1, "1-2 min": 2, "2-5 min": 0, "5-10 min": 0, "10-30 min": 0, ">= 30 min": 1}
    for name, axis, expected in [("delays", "lag behind the frontier", delays), ("quarantine", "reason", REASONS)]:
        svg = chart(page, name)
        assert sorted(mark_titles(svg, "bar")) == sorted(
            f"events: {n}; {axis}: {label}" for label, n in expected.items()
        )
        assert sorted(map(int, labels(svg))) == sorted(expected.values())


def test_axes_and_legends_come_from_vega_lite(page):
    svg = chart(page, "windows")
    axis_labels = [t.text for t in svg.iter(f"{SVG}text")]
    assert {"window start (UTC)", "vehicles", "cause", "truth from the raw log", "speed layer"} <= set(axis_labels)
    assert "08:00" in axis_labels and "08:10" in axis_labels  # the windows' UTC minutes


def test_text_from_the_data_is_escaped_and_the_page_loads_nothing(page):
    assert "<script" not in page and "toll&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "ev-&lt;5&gt;" in page and "bad_&lt;tag&gt;" in page
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_an_audit_with_no_closed_windows_says_so():
    empty = AuditResult(
        "r", {}, None, 0, 0, 0, {"late": 0, "corrected": 0, "arrived_after_batch": 0, "not_yet_read": 0}, []
    )
    page = render_report(empty, ReportInputs([], {}))
    assert "All differences explained" in page and "No closed windows in this range yet." in page
    assert "<svg" not in page


GX_TEMPLATES = Path(__import__("great_expectations").__file__).parent / "render" / "view" / "templates"


def test_every_cdn_file_gx_pages_load_has_a_local_copy():
    """GX's own tags, rewritten, load nothing from outside the site: a GX upgrade that loads a new
    file from a CDN fails here, not offline in front of a reader."""
    tags = [
        tag
        for template in GX_TEMPLATES.glob("*.j2")
        for tag in re.findall(
            r'<(?:script|link)[^>]*(?:src|href)="https://[^"]+"[^>]*>(?:</script>)?\n?', template.read_text()
        )
    ]
    assert len(tags) >= 15
    rewritten = offline_docs.rewrite_page("".join(tags), ".")
    assert not re.search(r'(src|href)="https?:', rewritten) and "crossorigin" not in rewritten
    local = set(re.findall(r'(?:src|href)="\./static/vendor/([^"]+)"', rewritten))
    assert local == set(offline_docs.ASSETS.values())
    for name in local - {offline_docs.VEGA_BUNDLE}:
        assert (offline_docs.ASSET_DIR / name).stat().st_size > 0
    fonts = (offline_docs.ASSET_DIR / "css" / "fontawesome-all.min.css").read_text()
    for font in re.findall(r"url\(\.\./webfonts/(fa-(?:solid|regular)-\d+\.woff2)\)", fonts):  # GX uses fas and far
        assert (offline_docs.ASSET_DIR / "webfonts" / font).exists()


def test_a_page_rewritten_for_offline_reading_links_into_its_site():
    gx_page = (
        '<script src="https://code.jquery.com/jquery-3.7.1.min.js"></script>'
        '<img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=1&dataContextId=x">'
    )
    assert offline_docs.rewrite_page(gx_page, "../..") == (
        '<script src="../../static/vendor/jquery.min.js"></script><img src="../../static/images/logo-long.png">'
    )


def test_localize_copies_the_assets_and_rewrites_every_page_of_a_site(tmp_path):
    page = tmp_path / "validations" / "a" / "run.html"
    page.parent.mkdir(parents=True)
    page.write_text(
        '<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>'
    )
    (tmp_path / "static" / "vendor").mkdir(parents=True)
    (tmp_path / "static" / "vendor" / offline_docs.VEGA_BUNDLE).write_text("/* built once per site */")
    assert offline_docs.localize(tmp_path) == 1 and offline_docs.localize(tmp_path) == 0
    assert page.read_text() == '<link rel="stylesheet" href="../../static/vendor/bootstrap.min.css"/>'
    assert (page.parent / "../../static/vendor/bootstrap.min.css").resolve().read_bytes() == (
        offline_docs.ASSET_DIR / "bootstrap.min.css"
    ).read_bytes()


def test_localize_after_a_build_reads_only_the_pages_written_since_it_began(tmp_path):
    link = '<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>'
    earlier, written = tmp_path / "validations" / "earlier.html", tmp_path / "validations" / "written.html"
    earlier.parent.mkdir(parents=True)
    for page in (earlier, written):
        page.write_text(link)
    (tmp_path / "static" / "vendor").mkdir(parents=True)
    (tmp_path / "static" / "vendor" / offline_docs.VEGA_BUNDLE).write_text("/* built once per site */")
    os.utime(earlier, (1_000_000_000, 1_000_000_000))
    assert offline_docs.localize(tmp_path, written_since=time.time() - 60) == 1
    assert earlier.read_text() == link and "static/vendor/bootstrap.min.css" in written.read_text()
