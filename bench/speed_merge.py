"""What a micro-batch's MERGE into ``gold.<p>__speed`` costs once the day holds many rows, in each
layout the table could have, side by side in one run.

For each size (rows in one day of five-minute windows, the same keys in each) a speed table of the
toll traffic's columns is built once per layout, its rows from ``spark.range`` (never timed), each
partition in one file as a day's MERGEs leave it. Then, run after run with the layouts' order
turned, each table is put back to that version and merges the same 10,000 panes through the speed
layer's own writer: the two newest windows' keys (updates) and a new window's (inserts). Each
figure is the median of the runs: the MERGE's seconds; from its commit the files and MiB it
rewrote and wrote, and the rows it copied; and a day's aggregate read by Spark, which the layout's
file count weighs on. Writes bench/results/speed_merge.json and appends the figures to
bench/history.jsonl; ``python -m bench --only speed_merge`` runs it as a suite.

    nice .venv/bin/python -m bench.speed_merge [--rows 1000000,10000000] [--runs 3] [--panes 10000]
        [--window-minutes 5] [--layouts by_date,by_window,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from bench.measure import summary

RESULTS = Path(__file__).resolve().parent / "results"
PIPELINE = "toll_traffic"
DAY = datetime(2026, 1, 5)
PANE_WINDOWS = 3
BASELINE = "by_date"


@dataclasses.dataclass(frozen=True)
class MergePlan:
    """What to measure: a table of each layout (``layouts``, all if empty) at each size (rows in
    the day), in windows of ``window``, merging ``panes`` panes ``runs`` times."""

    sizes: tuple[int, ...] = (1_000_000, 10_000_000)
    runs: int = 3
    panes: int = 10_000
    window: timedelta = timedelta(minutes=5)
    layouts: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Day:
    """The day a table holds: about ``rows`` rows in windows of ``window``, the same keys in each
    window held. All its windows but the last hold rows: the panes update the last two of those and
    open the last one."""

    rows: int
    window: timedelta = timedelta(minutes=5)

    @property
    def windows_held(self) -> int:
        return int(timedelta(days=1) / self.window) - 1

    @property
    def keys(self) -> int:
        return max(self.rows // self.windows_held, 1)


@dataclasses.dataclass(frozen=True)
class Layout:
    """A way to lay ``__speed`` out: its partition column (generated from ``window_start`` or that
    column itself), whether deletion vectors are on, and who MERGEs (delta-rs writes none)."""

    partition_by: tuple[str, ...]
    generated: tuple = ()
    deletion_vectors: bool = False

    def table(self, base):
        return dataclasses.replace(base, partition_by=self.partition_by, generated=self.generated)


def layouts() -> dict[str, Layout]:
    """The candidates: the catalog's layouts before (by date) and now (by hour), a partition per
    window, and the day's with deletion vectors (Spark's MERGE; delta-rs neither writes deletion
    vectors nor commits to a liquid-clustered table)."""
    from lakehouse.storage.catalog import BY_WINDOW_DATE, BY_WINDOW_HOUR

    return {
        BASELINE: Layout(**BY_WINDOW_DATE),
        "by_hour": Layout(**BY_WINDOW_HOUR),
        "by_window": Layout(("window_start",)),
        "by_date_deletion_vectors": Layout(**BY_WINDOW_DATE, deletion_vectors=True),
    }


def merge_condition(panes, partition_columns: tuple[str, ...]) -> str:
    """The MERGE's bound on the table's partitions: the speed layer's own (``merge_bound``), or
    the panes' windows for the by-window candidate."""
    import pyarrow.compute as pc

    from lakehouse.layers.speed import merge_bound, timestamp_sql

    if partition_columns == ("window_start",):
        return f"t.window_start IN ({', '.join(map(timestamp_sql, pc.unique(panes['window_start']).to_pylist()))})"
    return merge_bound(panes, partition_columns)


def build(spark, settings, table, layout: Layout, day: Day) -> int:
    """The table created as the catalog creates it, then the day's rows, one file per partition;
    returns its version."""
    from pyspark.sql import functions as F

    from lakehouse.storage.catalog import ensure_table, table_version

    ensure_table(table, settings)
    uri = table.uri(settings)
    if layout.deletion_vectors:
        spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    keys, midnight = day.keys, int(DAY.replace(tzinfo=UTC).timestamp())
    window, seconds = F.floor(F.col("id") / keys), int(day.window.total_seconds())
    day_rows = spark.range(keys * day.windows_held).select(
        F.timestamp_seconds(F.lit(midnight) + window * seconds).alias("window_start"),
        F.timestamp_seconds(F.lit(midnight) + (window + 1) * seconds).alias("window_end"),
        F.format_string("bridge-%07d", F.col("id") % keys).alias("bridge_id"),
        F.lit("car").alias("vehicle_type"),
        (F.col("id") % 97).alias("vehicles"),
        ((F.col("id") % 9973) / 100).cast("decimal(18,2)").alias("revenue"),
        F.lit(0).cast("long").alias("last_batch_id"),
        F.lit(DAY + timedelta(days=1)).alias("updated_at"),
    )
    # Each partition's rows in one task, so in one file; a generated partition column is computed
    # here as Delta computes it on write.
    generated = {name: F.expr(sql) for name, _, sql in layout.generated}
    by_partition = [generated.get(name, F.col(name)) for name in layout.partition_by]
    day_rows.repartition(2, *by_partition).write.format("delta").mode("append").save(uri)
    return table_version(spark, uri)


def panes(day: Day, count: int, batch: int):
    """``count`` panes as the speed layer emits them: pane ``i`` in one of the ``PANE_WINDOWS``
    newest windows (the last two the day holds, then a new one), key ``i // PANE_WINDOWS``."""
    import pyarrow as pa

    first = day.windows_held - (PANE_WINDOWS - 1)
    starts = [DAY + (first + i % PANE_WINDOWS) * day.window for i in range(count)]
    now = datetime.now(UTC).replace(tzinfo=None)
    return pa.table(
        {
            "window_start": pa.array(starts, pa.timestamp("us")),
            "window_end": pa.array([start + day.window for start in starts], pa.timestamp("us")),
            "bridge_id": [f"bridge-{i // PANE_WINDOWS:07d}" for i in range(count)],
            "vehicle_type": ["car"] * count,
            "vehicles": pa.array([1000 + i for i in range(count)], pa.int64()),
            "revenue": pa.array([Decimal(i) / 100 for i in range(count)], pa.decimal128(18, 2)),
            "last_batch_id": pa.array([batch] * count, pa.int64()),
            "updated_at": pa.array([now] * count, pa.timestamp("us")),
            "is_retraction": [False] * count,
        }
    )


MATCH = ["window_start", "window_end", "bridge_id", "vehicle_type"]
VALUES = ["vehicles", "revenue", "last_batch_id", "updated_at"]


def merge(spark, settings, uri: str, layout: Layout, rows, version: int) -> None:
    """The panes MERGEd as the speed layer MERGEs them (delta-rs), or by Spark for deletion vectors."""
    from lakehouse.storage.writers import upsert_once

    if not layout.deletion_vectors:  # bounded by the partitions the table's log records, as the stream does
        bound = functools.partial(merge_condition, rows)
        upsert_once(rows, uri, MATCH, VALUES, "is_retraction", ("bench", version), bound, settings)
        return
    from delta.tables import DeltaTable

    condition = " AND ".join([*(f"t.{c} = s.{c}" for c in MATCH), merge_condition(rows, layout.partition_by)])
    (
        DeltaTable.forPath(spark, uri)
        .alias("t")
        .merge(spark.createDataFrame(rows).alias("s"), condition)
        .whenMatchedDelete("s.is_retraction")
        .whenMatchedUpdate(set={c: f"s.{c}" for c in VALUES})
        .whenNotMatchedInsert(condition="NOT s.is_retraction", values={c: f"s.{c}" for c in MATCH + VALUES})
        .execute()
    )


def commit_figures(uri: str, version: int) -> dict:
    """What the commit at ``version`` did to the table's data files (change-feed files aside): the
    files it rewrote and wrote, with their MiB, the deletion vectors it wrote, and the rows it
    copied. A file given a deletion vector is removed and added again under its own path: marked,
    not rewritten."""
    from lakehouse.location import local_path

    actions = [json.loads(line) for line in (local_path(uri) / "_delta_log" / f"{version:020d}.json").open()]
    removed = {a["remove"]["path"]: a["remove"] for a in actions if "remove" in a}
    added = {a["add"]["path"]: a["add"] for a in actions if "add" in a}
    rewritten = [file for path, file in removed.items() if path not in added]
    written = [file for path, file in added.items() if path not in removed]
    commit = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    if commit["operation"] != "MERGE":  # a MERGE skipped as already done would measure nothing
        raise RuntimeError(f"{uri}: version {version} is a {commit['operation']}, not the MERGE measured")
    metrics = commit.get("operationMetrics", {})
    copied = metrics.get("num_target_rows_copied", metrics.get("numTargetRowsCopied", 0))
    return {
        "files_rewritten": len(rewritten),
        "mib_rewritten": sum(file.get("size", 0) for file in rewritten) / 2**20,
        "files_written": len(written),
        "mib_written": sum(file.get("size", 0) for file in written) / 2**20,
        "deletion_vectors_written": sum(1 for file in added.values() if file.get("deletionVector")),
        "rows_copied": int(copied),
    }


def day_read(spark, uri: str) -> float:
    """Seconds Spark takes for the day's vehicles per window (a query of the serving view's kind)."""
    from pyspark.sql import functions as F

    began = time.perf_counter()
    (
        spark.read.format("delta")
        .load(uri)
        .where(F.col("window_start") >= DAY)
        .where(F.col("window_start") < DAY + timedelta(days=1))
        .groupBy("window_start")
        .agg(F.sum("vehicles"))
        .collect()
    )
    return time.perf_counter() - began


def measure_size(spark, settings, day: Day, plan: MergePlan) -> dict:
    """Each layout's table holding ``day``, each MERGE and read measured ``plan.runs`` times, the
    layouts' order turned from run to run."""
    from lakehouse.dataflow.pipelines import get_pipeline
    from lakehouse.storage.catalog import pipeline_tables

    base = pipeline_tables(get_pipeline(PIPELINE)).speed
    candidates = {name: layout for name, layout in layouts().items() if name in (plan.layouts or [name])}
    tables = {
        name: layout.table(dataclasses.replace(base, name=f"speed_{name}")) for name, layout in candidates.items()
    }
    built = {name: build(spark, settings, tables[name], candidates[name], day) for name in candidates}
    samples: dict[str, list[dict]] = {name: [] for name in candidates}
    order = list(candidates)
    for name in order:  # once unmeasured: the JIT's first compiles of each layout's MERGE and read
        _merge_and_read(spark, settings, tables[name], candidates[name], built[name], panes(day, plan.panes, 0))
    for run in range(plan.runs):
        for name in order[run % len(order) :] + order[: run % len(order)]:
            rows_in = panes(day, plan.panes, batch=run + 1)
            samples[name].append(_merge_and_read(spark, settings, tables[name], candidates[name], built[name], rows_in))
            print(json.dumps({"rows": day.rows, "layout": name, "run": run, **samples[name][-1]}), flush=True)
    return {name: _summarised(samples[name], _files(tables[name].uri(settings), built[name])) for name in candidates}


def _merge_and_read(spark, settings, table, layout: Layout, built: int, rows) -> dict:
    """The table put back to its version ``built``, then ``rows`` merged into it (timed, with what
    its commit did) and the day read.

    Args:
        spark: the session.
        settings: where the table is.
        table: the table.
        layout: its layout.
        built: the version holding the day as built.
        rows: the panes.
    """
    from deltalake import DeltaTable

    from lakehouse.storage.ops_tables import delta_rs_location

    uri = table.uri(settings)
    location = delta_rs_location(uri)[0]
    if DeltaTable(location).version() > built:
        DeltaTable(location).restore(built)
    began = time.perf_counter()
    merge(spark, settings, uri, layout, rows, version=DeltaTable(location).version())
    seconds = time.perf_counter() - began
    figures = commit_figures(uri, DeltaTable(location).version())
    return {"merge_s": seconds, "read_s": day_read(spark, uri), **figures}


def _files(uri: str, version: int) -> int:
    from deltalake import DeltaTable

    from lakehouse.storage.ops_tables import delta_rs_location

    return len(DeltaTable(delta_rs_location(uri)[0], version=version).file_uris())


def _summarised(samples: list[dict], files: int) -> dict:
    timed = {key: summary([s[key] for s in samples]) for key in ("merge_s", "read_s")}
    counted = {key: statistics.median(s[key] for s in samples) for key in samples[0] if key not in timed}
    return {**timed, **counted, "files_in_day": files}


def speed_merge(spark, plan: MergePlan) -> dict:
    """The measurement at each size, its tables in a home of their own (deleted after)."""
    from bench.data import CACHE, settings_for

    CACHE.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="speed-merge-", dir=CACHE))
    results = {"panes": plan.panes, "window_minutes": int(plan.window.total_seconds() // 60), "sizes": {}}
    results["load_average_at_start"] = os.getloadavg()
    try:
        for rows in plan.sizes:  # each size's tables in a home of their own, deleted once measured
            settings = settings_for(home / f"rows-{rows}")
            results["sizes"][str(rows)] = measure_size(spark, settings, Day(rows, plan.window), plan)
            shutil.rmtree(home / f"rows-{rows}", ignore_errors=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    results["load_average_at_end"] = os.getloadavg()
    return results


def figures(results: dict, add) -> None:
    """Each candidate against today's layout: MERGE seconds, MiB rewritten, and a day's read."""
    for rows, measured in results["sizes"].items():
        size = f"{int(rows) / 1e6:g}M rows" + (
            "" if results["window_minutes"] == 5 else f" in {results['window_minutes']}-minute windows"
        )
        before = measured[BASELINE]
        for name, layout in measured.items():
            if name == BASELINE:
                continue
            versus = f"{name} vs {BASELINE}, a day of {size}"
            add(f"speed MERGE of {results['panes']:,} panes, {versus}", layout["merge_s"]["median"],
                before["merge_s"]["median"])  # fmt: skip
            add(f"speed MERGE's data files rewritten, {versus}", round(layout["mib_rewritten"], 2),
                round(before["mib_rewritten"], 2), "", "MiB")  # fmt: skip
            add(f"a day's read of the speed table, {versus}", layout["read_s"]["median"], before["read_s"]["median"])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.speed_merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000,10000000", help="rows in the day, one size after another")
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "3")))
    parser.add_argument("--panes", type=int, default=10_000)
    parser.add_argument("--window-minutes", type=int, default=5, help="the windows' length")
    parser.add_argument("--layouts", default="", help=f"a subset of {','.join(layouts())} (default: all)")
    parser.add_argument("--no-history", action="store_true", help="do not append the figures to the history")
    args = parser.parse_args()
    from bench import history
    from bench.data import CACHE, settings_for
    from bench.run import headline, table
    from lakehouse.storage.spark import build_spark_session

    plan = MergePlan(
        sizes=tuple(int(size) for size in args.rows.split(",")),
        runs=args.runs,
        panes=args.panes,
        window=timedelta(minutes=args.window_minutes),
        layouts=tuple(name for name in args.layouts.split(",") if name),
    )
    commit = history.current_commit()  # the code measured, whatever is committed while it runs
    spark = build_spark_session(settings_for(CACHE / "speed-merge-session"), "bench-speed-merge")
    try:
        results = speed_merge(spark, plan)
    finally:
        spark.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "speed_merge.json").write_text(json.dumps(results, indent=1))
    if not args.no_history:
        history.append(history.HISTORY, history_lines(results, commit, args.runs))
    print(table(headline({"speed_merge": results})))


def history_lines(results: dict, commit: str | None, runs: int) -> list[dict]:
    """The figures as lines of bench/history.jsonl, each size's under its rows (``events``), with
    the machine's load averages (1, 5 and 15 minutes) at the start and end of the run."""
    from bench import history
    from bench.run import headline

    date = datetime.now(UTC).strftime("%Y-%m-%d")
    load = "; ".join(
        f"load average at {moment} " + ", ".join(f"{value:.1f}" for value in results[f"load_average_at_{moment}"])
        for moment in ("start", "end")
    )
    lines = []
    for rows, measured in results["sizes"].items():
        figures = headline({"speed_merge": {**results, "sizes": {rows: measured}}})
        lines += history.records(
            {"speed_merge": figures}, date=date, commit=commit, events=int(rows), runs=runs,
            note=f"python -m bench.speed_merge; {load}",
        )  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
