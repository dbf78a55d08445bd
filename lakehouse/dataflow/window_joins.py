"""The windowed join of two pipelines (docs/design.md, "Joins: a windowed join"), as one SQL query.

Both sides are already windowed aggregates keyed by the same key: the counted side (vehicles per
half hour and zone) and the measured side (readings and their sum per half hour and zone). Joining
each event to its window's mean reading and then counting equals counting per window and then
joining the counts to the mean, because the mean is one value per window and key. So the join runs
over the two sides' tables, and it changes whenever either side does: a late reading a correction
folds into its window moves that window's mean, and with it the band of the vehicles counted there.

Semantics: every window of the counted side is kept (outer on that side): one with no reading
within its own key or any neighbour's takes the band ``unknown`` and a null mean. A window with
readings but nothing counted has nothing to report, and no row (inner on the measured side).

The query is the one definition: the catalog registers it as ``gold.<name>`` over the two serving
views, and as ``gold.<name>__speed`` over the two speed tables (what the stream alone computed).
"""

from __future__ import annotations

from lakehouse.dataflow.pipelines.base import WindowJoin


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def neighbours_sql(join: WindowJoin) -> str:
    """The candidates for each key value, as rows (key, candidate, rank): itself first (rank 0),
    then its neighbours, nearest first."""
    rows = [
        f"({_quoted(value)}, {_quoted(candidate)}, {rank})"
        for value, near in join.neighbours
        for rank, candidate in enumerate(near, start=1)
    ]
    return f"SELECT * FROM VALUES {', '.join(rows)} AS near({join.key}, candidate, rank)"


def band_sql(join: WindowJoin, measure: str) -> str:
    """The band a mean falls in; ``unknown`` when there is none."""
    cases = [
        f"WHEN {measure} < {band.below} THEN {_quoted(band.name)}" for band in join.bands if band.below is not None
    ]
    last = join.bands[-1]
    otherwise = _quoted(last.name) if last.below is None else "NULL"
    return f"CASE WHEN {measure} IS NULL THEN {_quoted(join.unknown)} {' '.join(cases)} ELSE {otherwise} END"


def window_join_sql(join: WindowJoin, events: str, readings: str) -> str:
    """Each window of ``events`` with the mean of ``readings`` over the same window, from its own
    key or else the nearest neighbour with a reading, and the band of that mean.

    Args:
        join: the declaration.
        events: the counted side's relation (a serving view, or the speed table).
        readings: the measured side's relation, of the same kind.
    """
    key, metrics = join.key, ", ".join(f"e.{m}" for m in join.events.metric_names)
    mean = f"CAST(ROUND(r.{join.reading_sum} / r.{join.reading_count}, 1) AS DECIMAL(5, 1))"
    return f"""
        WITH candidates AS (
            SELECT e.window_start, e.window_end, e.{key}, {metrics}, e.{key} AS candidate, 0 AS rank
            FROM {events} AS e
            UNION ALL
            SELECT e.window_start, e.window_end, e.{key}, {metrics}, near.candidate, near.rank
            FROM {events} AS e JOIN ({neighbours_sql(join)}) AS near ON e.{key} = near.{key}
        ),
        matched AS (
            SELECT e.*, CASE WHEN r.{join.reading_count} > 0 THEN {mean} END AS {join.measure},
                   CASE WHEN r.{join.reading_count} > 0 THEN e.candidate END AS {join.measure}_from,
                   ROW_NUMBER() OVER (
                       PARTITION BY e.window_start, e.{key}
                       ORDER BY CASE WHEN r.{join.reading_count} > 0 THEN 0 ELSE 1 END, e.rank
                   ) AS choice
            FROM candidates AS e
            LEFT JOIN {readings} AS r ON r.window_start = e.window_start AND r.{key} = e.candidate
        )
        SELECT window_start, window_end, {key}, {band_sql(join, join.measure)} AS {join.measure}_band,
               {", ".join(join.events.metric_names)}, {join.measure}, {join.measure}_from
        FROM matched WHERE choice = 1
    """


def window_join_columns(join: WindowJoin) -> list[str]:
    """The joined view's columns, in order."""
    measure = join.measure
    return [
        "window_start",
        "window_end",
        join.key,
        f"{measure}_band",
        *join.events.metric_names,
        measure,
        f"{measure}_from",
    ]
