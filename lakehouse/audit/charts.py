"""The audit report's charts: Altair (Vega-Lite) specifications drawn to static SVG by vl-convert.

vl-convert runs Vega in-process, with no browser and no network, so the page stays self-contained.
Axes, legends and the per-mark descriptions come from Vega-Lite: each mark's tooltip fields
become its ``aria-label``, which :func:`to_svg` also gives the mark as a ``<title>``, the element
browsers show on hover in a static SVG.
"""

from __future__ import annotations

import math
from datetime import datetime
from xml.etree import ElementTree

import altair as alt

SVG_NS = "http://www.w3.org/2000/svg"
ElementTree.register_namespace("", SVG_NS)
ElementTree.register_namespace("xlink", "http://www.w3.org/1999/xlink")
WIDTH = 860
TRUTH_COLOUR, AUDITED_COLOUR = "#16a34a", "#334155"
MAX_TICKS = 12


def to_svg(chart: alt.TopLevelMixin) -> str:
    """The chart as an SVG document, each described mark with a hover title."""
    import vl_convert

    root = ElementTree.fromstring(vl_convert.vegalite_to_svg(chart.to_dict()))
    for mark in root.iter():
        label = mark.get("aria-label")
        if mark.get("role") == "graphics-symbol" and label:
            title = ElementTree.Element(f"{{{SVG_NS}}}title")
            title.text = label
            mark.insert(0, title)
    return ElementTree.tostring(root, encoding="unicode")


OTHER_COLOUR = "#94a3b8"


def _scale(names: list[str], colours: dict[str, str]) -> alt.Scale:
    return alt.Scale(domain=names, range=[colours.get(name, OTHER_COLOUR) for name in names])


def windows_chart(lines: list[dict], points: list[dict], colours: dict[str, str], metric: str) -> alt.LayerChart:
    """Truth and the audited value per window, and a point, coloured by cause, on each window that differs.

    Args:
        lines: one row per (window, series): ``window`` (ISO, UTC), ``series``, ``value``.
        points: one row per differing window: ``window``, ``label`` (HH:MM), ``value`` (the audited
            one), ``cause``, ``truth`` and ``audited`` (exact, as text).
        colours: the colour of each series and each cause, by name.
        metric: what the values count, for the y axis.
    """
    series = sorted({row["series"] for row in lines}, key=lambda name: name != "truth from the raw log")
    x = _window_x(lines)
    y = alt.Y("value:Q", title=metric)
    line = (
        alt.Chart(alt.Data(values=lines))
        .mark_line(aria=False)  # one path per series: the points carry the descriptions
        .encode(
            x=x,
            y=y,
            color=alt.Color("series:N", scale=_scale(series, colours), title=None),
            strokeDash=alt.StrokeDash("series:N", scale=alt.Scale(domain=series, range=[[1, 0], [4, 3]]), legend=None),
        )
    )
    if not points:
        return alt.layer(line).properties(width=WIDTH, height=220)
    causes = sorted({row["cause"] for row in points})
    dots = (
        alt.Chart(alt.Data(values=points))
        .mark_point(filled=True, size=60, opacity=1)
        .encode(
            x=x,
            y=y,
            fill=alt.Fill("cause:N", scale=_scale(causes, colours), title="cause"),
            tooltip=[alt.Tooltip("label:N", title="window"), "cause:N", "truth:N", "audited:N"],
        )
    )
    return alt.layer(line, dots).properties(width=WIDTH, height=220).resolve_scale(color="independent")


def _window_x(rows: list[dict]) -> alt.X:
    """Time over the first to the last window of ``rows``, padded so edge marks stay whole.

    Windows are UTC: a utc scale labels them so, whatever the zone of the machine that draws the
    chart. Ticks fall on whole minutes (the smallest window), at most ``MAX_TICKS`` of them, so no
    two carry the same label.
    """
    first, last = (datetime.fromisoformat(t) for t in (min(r["window"] for r in rows), max(r["window"] for r in rows)))
    step = max(1, math.ceil((last - first).total_seconds() / 60 / MAX_TICKS))
    ticks = range(int(first.timestamp() * 1000), int(last.timestamp() * 1000) + 1, step * 60_000)
    axis = alt.Axis(format="%H:%M", values=list(ticks), title="window start (UTC)")
    domain = [first.isoformat(), last.isoformat()]
    return alt.X("window:T", scale=alt.Scale(type="utc", domain=domain, padding=12), axis=axis)


def differences_chart(bars: list[dict], windows: list[dict], colours: dict[str, str], metric: str) -> alt.LayerChart:
    """Truth minus the audited value per differing window: a bar coloured by cause, labelled with the amount.

    Args:
        bars: one row per differing window: ``window`` (ISO, UTC), ``label`` (HH:MM), ``cause``,
            ``gap`` (a number, for the bar) and ``gap_text`` (the exact amount).
        windows: rows with every compared ``window``, so the time axis matches the per-window chart's.
        colours: the colour of each cause.
        metric: what the amounts count, for the y axis.
    """
    causes = sorted({row["cause"] for row in bars})
    base = alt.Chart(alt.Data(values=bars)).encode(
        x=_window_x(windows), y=alt.Y("gap:Q", title=f"truth - audited, {metric}")
    )
    bar = base.mark_bar(size=10).encode(
        color=alt.Color("cause:N", scale=_scale(causes, colours), title="cause"),
        tooltip=[alt.Tooltip("label:N", title="window"), "cause:N"],
    )
    # Above a bar that rises, below one that falls.
    above = base.transform_filter("datum.gap >= 0").mark_text(dy=-7, fontSize=10, aria=False).encode(text="gap_text:N")
    below = base.transform_filter("datum.gap < 0").mark_text(dy=8, fontSize=10, aria=False).encode(text="gap_text:N")
    return alt.layer(bar, above, below).properties(width=WIDTH, height=160)


def counts_chart(counts: list[dict], colour: str, title: str) -> alt.LayerChart:
    """One horizontal bar per label, in the given order, labelled with its count.

    Args:
        counts: ``label`` and ``count`` per row, top to bottom.
        colour: the bars' colour.
        title: what the labels are, for the y axis.
    """
    base = alt.Chart(alt.Data(values=counts)).encode(
        y=alt.Y("label:N", sort=[row["label"] for row in counts], title=title),
        x=alt.X(
            "count:Q", title="events", axis=alt.Axis(tickCount=min(max(row["count"] for row in counts), 5), format="d")
        ),
    )
    bar = base.mark_bar(color=colour)  # described by its axes' fields: "<title>: <count>; <axis>: <label>"
    labels = base.mark_text(align="left", dx=4, fontSize=11, aria=False).encode(text="count:Q")
    return alt.layer(bar, labels).properties(width=420, height=alt.Step(18))
