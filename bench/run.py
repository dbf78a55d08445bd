"""``python -m bench [--smoke] [--only SUITES]``: run, save, summarise.

SUITES: a comma-separated subset of backfill, cold, growth, correction, speed_growth, speed_merge, log_growth,
orchestration, throughput, batch_stages, freshness, recovery, sql_latency, analysts, topology.

Results go to ``bench/results/<UTC time>-<mode>.json`` (and ``latest-<mode>.json``); the summary
table printed at the end is the one kept in the README. A full run (not ``--smoke``) also appends
each figure to ``bench/history.jsonl`` with the commit measured (``bench.history``).
``BENCH_EVENTS`` sets the data size (default 100,000: see the README for why not 10 million),
``BENCH_THROUGHPUT_EVENTS`` the throughput suite's (default 400,000), ``BENCH_RUNS`` the runs per
figure (default 3).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench import (
    analysts,
    backfill,
    batch_stages,
    history,
    log_growth,
    orchestration,
    recovery,
    speed_merge,
    sql_latency,
    stream,
    topology,
)
from bench.data import DataSet, ensure_log, ensure_tables
from bench.service import SharedService

RESULTS = Path(__file__).with_name("results")
SUITES = (
    "backfill",
    "cold",
    "growth",
    "correction",
    "speed_growth",
    "speed_merge",
    "log_growth",
    "orchestration",
    "throughput",
    "batch_stages",
    "freshness",
    "recovery",
    "sql_latency",
    "analysts",
    "topology",
)
# The suites that run at half the speed layer's sustainable rate, which the throughput suite measures.
AT_HALF_RATE = ("freshness", "analysts")


@dataclasses.dataclass(frozen=True)
class Plan:
    events: int
    events_per_file: int
    runs: int
    cold_runs: int
    trigger: str = "5s"
    # Files per trigger (5,000 events each) of the batch-stage breakdown: as far apart as the
    # 100,000-event set allows at 4 batches per drain (4 x 5 files).
    drain_sizes: tuple[int, int] = (1, 4)
    drain_batches: int = 4  # the first of each drain is dropped; 3 batches per size keep the fit out of the noise
    # The sustainable rate is fitted to drains at two batch sizes and extrapolated to the batch a
    # trigger holds (about 200,000 events for the bare stream). At 1 and 4 files the per-event cost
    # was a difference of 0.1-0.4 s between batches, as small as the noise, and the bare stream's
    # rate spread 38,000-93,000 events/s between runs. A 400,000-event day (80 files of 5,000) lets
    # the larger size hold 80,000 events a batch.
    throughput_events: int = 400_000
    throughput_sizes: tuple[int, int] = (1, 16)
    freshness_seconds: float = 90
    freshness_runs: int = 2  # of each job, their probes pooled
    probe_every: float = 2.0
    freshness_grace: float = 60
    correction_events_per_day: int = 10_000
    recovery_rate: float = 200.0  # events/s while the stream was down
    recovery_minutes: float = 10.0  # of log left unread
    orchestration_hours: int = 24  # hourly chunks as Airflow tasks vs one job
    backfill_jobs: tuple[str, ...] = ()  # all of them
    orchestration_sides: tuple[str, ...] = ()  # all of them
    speed_held_days: tuple[int, int] = (1, 30)  # days of windows in __speed while the stream runs
    speed_growth_batches: int = 4
    speed_merge_rows: tuple[int, ...] = (1_000_000, 10_000_000)  # rows in the day of __speed a MERGE goes into
    speed_merge_panes: int = 10_000
    log_commits: tuple[int, ...] = (0, 1000, 2000)  # commits in the table's log at each measurement
    analysts: int = 8  # SQL clients in an analysts' phase, half over JDBC and half through Connect
    analysts_phase_s: float = 60  # each phase, with the analysts or without
    analysts_phases: int = 3  # of each kind
    sql_points: int = 20  # one-window lookups on the serving view, and aggregates over its whole day
    sql_aggregates: int = 5
    sql_cli_queries: int | None = None  # all of them

    @classmethod
    def full(cls, env) -> Plan:
        runs = int(env.get("BENCH_RUNS", "3"))
        return cls(
            events=int(env.get("BENCH_EVENTS", "100000")),
            events_per_file=5000,
            throughput_events=int(env.get("BENCH_THROUGHPUT_EVENTS", "400000")),
            runs=runs,
            cold_runs=runs,
            correction_events_per_day=int(env.get("BENCH_CORRECTION_EVENTS_PER_DAY", "10000")),
            orchestration_hours=int(env.get("BENCH_ORCHESTRATION_HOURS", "24")),
            backfill_jobs=_subset(env, "BENCH_BACKFILL_JOBS"),
            orchestration_sides=_subset(env, "BENCH_ORCHESTRATION_SIDES"),
            speed_merge_rows=tuple(map(int, _subset(env, "BENCH_SPEED_MERGE_ROWS"))) or cls.speed_merge_rows,
        )

    @classmethod
    def smoke(cls) -> Plan:
        return cls(
            events=4000,
            events_per_file=250,
            runs=1,
            cold_runs=1,
            trigger="2s",
            drain_sizes=(1, 2),
            drain_batches=1,
            throughput_events=4000,
            throughput_sizes=(1, 2),
            freshness_seconds=8,
            freshness_runs=1,
            probe_every=2.0,
            # Only an upper bound: the wait ends when every probe is seen. Under CI's load the speed
            # layer's first micro-batch (creating its tables) has taken longer than 20 s.
            freshness_grace=150,
            correction_events_per_day=500,
            recovery_rate=10.0,
            recovery_minutes=1.0,
            orchestration_hours=1,
            speed_held_days=(1, 2),
            speed_growth_batches=1,
            speed_merge_rows=(20_000,),
            speed_merge_panes=300,
            log_commits=(0, 20),
            sql_points=1,
            sql_aggregates=1,
            sql_cli_queries=1,  # a JVM per query: the aggregate only
            analysts=2,
            analysts_phase_s=10,
            analysts_phases=1,
        )


def _subset(env, name: str) -> tuple[str, ...]:
    """The comma-separated names an environment variable picks; none means all."""
    return tuple(item for item in env.get(name, "").split(",") if item)


def machine() -> dict:
    import pyspark

    memory = psutil.virtual_memory().total
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
        "python": platform.python_version(),
        "spark": pyspark.__version__,
        "driver_java_options": os.environ.get("LAKEHOUSE_DRIVER_JAVA_OPTIONS", ""),
        "platform": platform.platform(),
    }


def ratio(numerator, denominator) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def _figure(figure: str, value, baseline, target: str = "", unit: str = "s") -> dict | None:
    """One row of the README table; None when neither side was measured in these results."""
    if value is None and baseline is None:
        return None
    return {"figure": figure, "value": value, "baseline": baseline, "ratio": ratio(value, baseline),
            "target": target, "unit": unit}  # fmt: skip


def _stream_figures(results: dict, add) -> None:
    """The speed layer's sustainable rate and freshness."""
    if "throughput" in results:
        jobs = results["throughput"]["jobs"]
        add(
            "speed layer sustainable rate vs bare stream (the limit line)",
            jobs["lakehouse"]["events_per_s"]["median"],
            jobs["bare"]["events_per_s"]["median"],
            "",
            "events/s",
        )
        for size in results["throughput"]["files_per_trigger"]:
            add(
                f"speed layer drain vs hand-written lambda job, {size} file(s) per trigger",
                jobs["lakehouse"]["drain_s"][str(size)]["median"],
                jobs["hand_written"]["drain_s"][str(size)]["median"],
                "<= 1.1",
            )
        if stream.METERED in jobs:  # results of runs before the metrics endpoint lack it
            add(
                "speed layer sustainable rate, metrics off vs scraped every second",
                jobs["lakehouse"]["events_per_s"]["median"],
                jobs[stream.METERED]["events_per_s"]["median"],
                "<= 1.02",
                "events/s",
            )
            for size in results["throughput"]["files_per_trigger"]:
                add(
                    f"speed layer drain, metrics scraped every second vs off, {size} file(s) per trigger",
                    jobs[stream.METERED]["drain_s"][str(size)]["median"],
                    jobs["lakehouse"]["drain_s"][str(size)]["median"],
                    "<= 1.02",
                )
    if "batch_stages" in results:
        batch_stages.figures(results["batch_stages"], add)
    if "recovery" in results:
        jobs, minutes = results["recovery"]["jobs"], results["recovery"]["backlog_minutes"]
        add(
            f"stream catch-up on {minutes:g} minutes of unread log vs hand-written lambda job",
            jobs["lakehouse"]["seconds"]["median"],
            jobs["hand_written"]["seconds"]["median"],
            "<= 2",
        )
    if "freshness" in results:
        jobs = results["freshness"]["jobs"]
        for p in ("p50_s", "p95_s"):
            target = "<= 1.0" if p == "p95_s" else ""  # the speed layer is never staler than the hand-written job
            add(f"freshness {p[:3]} vs hand-written lambda job", jobs["lakehouse"][p], jobs["hand_written"][p], target)
            add(f"freshness {p[:3]} vs bare stream (the limit line)", jobs["lakehouse"][p], jobs["bare"][p])
        limit = results["freshness"]["trigger_s"] + 1.5 * (jobs["lakehouse"]["median_batch_s"] or 0)
        add("freshness p95 vs trigger + 1.5 x median batch", jobs["lakehouse"]["p95_s"], limit, "<= 1")


def _batch_figures(results: dict, add) -> None:
    """Backfills, their cost growth, the held-days micro-batch, orchestration and corrections."""
    if "backfill" in results:
        jobs = results["backfill"]["jobs"]
        for figure, job, baseline, target in (
            ("backfill from bronze vs bare Spark", "lakehouse_bronze", "bare_bronze", "<= 1.15"),
            ("backfill from log vs bare Spark", "lakehouse_log", "bare_log", "<= 1.15"),
            ("backfill from log vs DuckDB", "lakehouse_log", "duckdb_log", "<= 5"),
            ("backfill from bronze vs DuckDB", "lakehouse_bronze", "duckdb_log", "<= 5"),
        ):
            if job in jobs and baseline in jobs:  # BENCH_BACKFILL_JOBS may have run a subset
                add(figure, jobs[job]["seconds"]["median"], jobs[baseline]["seconds"]["median"], target)
    if "cold" in results:
        median = {name: job["seconds"]["median"] for name, job in results["cold"]["jobs"].items()}
        add("backfill from log, with JVM start, vs bare Spark", median["lakehouse_log"], median["bare_log"])
        add("backfill from log, with JVM start, vs DuckDB", median["lakehouse_log"], median["duckdb_log"])
    if "growth" in results:
        median = {name: figure["seconds"]["median"] for name, figure in results["growth"].items()}
        add("backfill 1 day vs 1 hour (linear: 24)", median["backfill_1d"], median["backfill_1h"], "~24")
        add("audit 1 day vs 1 hour (linear: 24)", median["audit_1d"], median["audit_1h"], "~24")
    _speed_growth_figures(results, add)
    _log_growth_figures(results, add)
    if "speed_merge" in results:
        speed_merge.figures(results["speed_merge"], add)
    if "orchestration" in results:
        jobs, hours = results["orchestration"]["jobs"], results["orchestration"]["hours"]
        one_job = jobs["one_job"]["seconds"]["median"]
        if "airflow_hourly_chunks" in jobs:  # BENCH_ORCHESTRATION_SIDES may have run a subset
            add(f"Airflow backfill of {hours} hourly chunks vs one job (orchestration)",
                jobs["airflow_hourly_chunks"]["seconds"]["median"], one_job)  # fmt: skip
        if "airflow_hourly_chunks_through_service" in jobs:  # by `airflow dags test`, in one process
            add(f"Airflow backfill of {hours} hourly chunks through the Spark service vs one job",
                jobs["airflow_hourly_chunks_through_service"]["seconds"]["median"], one_job)  # fmt: skip
        if orchestration.ON_SCHEDULER in jobs:  # the deployment's scheduler, as the UI triggers it
            add(f"Airflow backfill of {hours} hourly chunks through the Spark service, on the running scheduler, "
                "vs one job", jobs[orchestration.ON_SCHEDULER]["seconds"]["median"], one_job, "<= 1.5")  # fmt: skip
        if "dag_parse_seconds" in results["orchestration"]:
            add("parsing every DAG file, as Airflow's dag-processor does",
                results["orchestration"]["dag_parse_seconds"]["median"], None, "< 1 s")  # fmt: skip
    if "correction" in results:
        median = {name: figure["seconds"]["median"] for name, figure in results["correction"].items()}
        add("correction of 100 windows, 10 days vs 1 day held", median["10d"], median["1d"], "~1")


def _speed_growth_figures(results: dict, add) -> None:
    """The speed layer with few and many days of windows in ``__speed``: time, memory, state."""
    if "speed_growth" not in results:
        return
    (few, held_few), (many, held_many) = results["speed_growth"].items()
    add(
        f"speed micro-batch, __speed holding {many} vs {few} of windows",
        held_many["seconds"]["median"],
        held_few["seconds"]["median"],
        "~1",
    )
    add(
        f"speed layer peak RSS (driver, Python and JVM), __speed holding {many} vs {few}",
        held_many["peak_rss_mib"]["median"],
        held_few["peak_rss_mib"]["median"],
        "<= 1.1",
        "MiB",
    )
    add(f"pane state carried, __speed holding {many} vs {few}",
        held_many["pane_state_rows"], held_few["pane_state_rows"], "<= 1.1", "rows")  # fmt: skip


def _log_growth_figures(results: dict, add) -> None:
    """A commit and a read on a table whose log holds the most commits measured, against a new table."""
    if "log_growth" not in results:
        return
    sizes = results["log_growth"]["sizes"]
    new, grown = sizes[min(sizes, key=int)], sizes[max(sizes, key=int)]
    for operation, kind in (
        ("delta-rs append of one row", "append_seconds"),
        ("Spark query of the table", "read_seconds"),
    ):
        add(f"{operation}, log of {max(sizes, key=int)} commits vs {min(sizes, key=int)}",
            round(grown[kind]["median"] * 1000, 1), round(new[kind]["median"] * 1000, 1), "~1", "ms")  # fmt: skip


def _sql_figures(results: dict, add) -> None:
    """SQL through the warm service against a process (and a JVM) per query."""
    if "sql_latency" in results:
        jobs = results["sql_latency"]["jobs"]
        add("SQL p50, warm service vs a lakehouse sql process per query", jobs["service"]["p50_s"],
            jobs["cli"]["p50_s"], "service <= 0.5 s")  # fmt: skip
        add("SQL p95, warm service vs a lakehouse sql process per query", jobs["service"]["p95_s"],
            jobs["cli"]["p95_s"])  # fmt: skip
        for way in ("connect", "jdbc"):
            cached, uncached = jobs[f"{way}_cached"], jobs[f"{way}_uncached"]
            add(f"serving view p50 through {way}, batch tables cached vs not", cached["p50_s"],
                uncached["p50_s"], "<= 0.3 s")  # fmt: skip
            add(f"serving view p95 through {way}, batch tables cached vs not", cached["p95_s"],
                uncached["p95_s"], "<= 0.6 s")  # fmt: skip


def _topology_figures(results: dict, add) -> None:
    """The log on Kafka against files, and a two-worker cluster against local[2]."""
    if "topology" in results:
        median = {name: job["seconds"]["median"] for name, job in results["topology"]["jobs"].items()}
        add(
            "speed layer drain from Kafka vs from files (with JVM start)",
            median["stream_kafka"],
            median["stream_files"],
        )
        add(f"backfill from log on a {results['topology']['workers']}-worker cluster vs local[2] (with JVM start)",
            median["backfill_cluster"], median["backfill_local"])  # fmt: skip
        add(
            "backfill from the log's files on S3 vs local (with JVM start)",
            median["backfill_s3"],
            median["backfill_local"],
        )


def headline(results: dict) -> list[dict]:
    """The figures of the README table: each a value, its baseline and their ratio (with the target)."""
    rows: list[dict] = []

    def add(*figure, **options) -> None:
        row = _figure(*figure, **options)
        if row:
            rows.append(row)

    _stream_figures(results, add)
    _batch_figures(results, add)
    _sql_figures(results, add)
    if "analysts" in results:
        analysts.figures(results["analysts"], add)
    _topology_figures(results, add)
    return rows


def table(rows: list[dict]) -> str:
    def number(value, unit: str = "") -> str:
        if value is None:
            return ""
        shown = f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"
        return f"{shown} {unit}".strip()

    lines = ["| figure | lakehouse | baseline | ratio | target |", "| --- | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(
            f"| {row['figure']} | {number(row['value'], row['unit'])} | {number(row['baseline'], row['unit'])} "
            f"| {number(row['ratio'])} | {row['target']} |"
        )
    return "\n".join(lines)


def correction_data(spark, plan: Plan) -> dict[str, DataSet]:
    """Tables holding 1 and 10 days at the same density, for the correction's cost growth."""
    data_sets = {}
    for days in (1, 10):
        data = DataSet(plan.correction_events_per_day * days, events_per_file=plan.events_per_file, days=days)
        ensure_log(data)
        ensure_tables(spark, data)
        data_sets[f"{days}d"] = data
    return data_sets


def _measures(spark, plan: Plan, data: DataSet, served: SharedService, results: dict) -> dict:
    """Each suite's measurement, to run in the order asked for (freshness reads throughput's result)."""
    return {
        "backfill": lambda: backfill.warm_backfills(spark, data, plan.runs, plan.backfill_jobs),
        "cold": lambda: backfill.cold_backfills(data, plan.cold_runs),
        "growth": lambda: backfill.growth(spark, data, plan.runs),
        "correction": lambda: backfill.correction(spark, correction_data(spark, plan), plan.runs),
        "speed_growth": lambda: stream.speed_growth(
            spark, data, plan.runs, plan.speed_held_days, plan.speed_growth_batches
        ),
        "speed_merge": lambda: speed_merge.speed_merge(
            spark, speed_merge.MergePlan(plan.speed_merge_rows, plan.runs, plan.speed_merge_panes)
        ),
        "log_growth": lambda: log_growth.log_growth(spark, plan.log_commits, plan.runs),
        "orchestration": lambda: orchestration.orchestration(
            spark, data, plan.runs, plan.orchestration_hours, plan.orchestration_sides
        ),
        "throughput": lambda: stream.throughput(
            spark, throughput_data(plan), plan.runs, plan.trigger, plan.throughput_sizes, plan.drain_batches
        ),
        "batch_stages": lambda: batch_stages.batch_stages(spark, data, plan.runs, plan.drain_sizes, plan.drain_batches),
        "topology": lambda: topology.topology(data, plan.runs),
        "recovery": lambda: recovery.recovery(
            spark, plan.runs, plan.recovery_rate, plan.recovery_minutes, plan.trigger
        ),
        "sql_latency": lambda: sql_latency.sql_latency(
            data, served, plan.runs, plan.sql_points, plan.sql_aggregates, plan.sql_cli_queries
        ),
        "analysts": lambda: analysts.analysts(spark, analysts_plan(plan, results)),
        "freshness": lambda: stream.freshness(
            spark,
            half_rate(results),
            plan.freshness_seconds,
            plan.trigger,
            plan.probe_every,
            plan.freshness_grace,
            plan.freshness_runs,
        ),
    }


def throughput_data(plan: Plan) -> DataSet:
    """The throughput suite's log: only its files are read, so no tables are built for it."""
    data = DataSet(plan.throughput_events, events_per_file=plan.events_per_file)
    ensure_log(data)  # generation is never timed
    return data


def half_rate(results: dict) -> float:
    """Half the speed layer's sustainable rate, from this run's throughput suite (events/s)."""
    return max(results["throughput"]["jobs"]["lakehouse"]["events_per_s"]["median"] / 2, 1.0)


def analysts_plan(plan: Plan, results: dict) -> analysts.AnalystsPlan:
    return analysts.AnalystsPlan(
        rate=half_rate(results),
        analysts=plan.analysts,
        phase_s=plan.analysts_phase_s,
        phases=plan.analysts_phases,
        trigger=plan.trigger,
        probe_every=plan.probe_every,
        warm_up_s=plan.analysts_phase_s,
    )


def run(plan: Plan, suites: tuple[str, ...], mode: str, results_dir: Path = RESULTS) -> dict:
    from lakehouse.storage.spark import build_spark_session

    data = DataSet(plan.events, events_per_file=plan.events_per_file)
    log_info = ensure_log(data)  # generation is never timed
    spark = build_spark_session(data.settings(), "bench")
    results: dict = {}
    began, load_at_start = time.time(), os.getloadavg()
    partial = results_dir / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{mode}-partial.json"

    def stage(name: str, measure) -> None:
        stage_began = time.time()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        results[name] = measure()
        print(f"bench: {name} done in {time.time() - stage_began:.0f}s", file=sys.stderr, flush=True)
        results_dir.mkdir(parents=True, exist_ok=True)  # what is measured survives a later failure
        partial.write_text(json.dumps(results, indent=1, default=str))

    served = SharedService.on(data)
    measures = _measures(spark, plan, data, served, results)
    if set(AT_HALF_RATE) & set(suites) and "throughput" not in suites:
        suites = ("throughput", *suites)
    try:
        ensure_tables(spark, data)
        for name in suites:  # in the order asked for
            stage(name, measures[name])
    finally:
        served.stop()
        spark.stop()
    report = {
        "mode": mode,
        "finished_at": datetime.now(UTC).isoformat(),
        "wall_s": round(time.time() - began),
        "machine": {**machine(), "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg()},
        "plan": dataclasses.asdict(plan),
        "data": {"events": plan.events, **log_info},
        "results": results,
        "summary": headline(results),
    }
    save_report(report, mode, results_dir)
    return report


def record_history(report: dict, path: Path = history.HISTORY) -> None:
    """Append the run's figures to the history, each under its suite, with the commit measured."""
    plan, machine_info, commit = report["plan"], report["machine"], history.current_commit()
    lines = [
        line
        for suite, measured in report["results"].items()
        for line in history.records(
            {suite: headline({suite: measured})},
            date=report["finished_at"][:10],
            commit=commit,
            events=measured.get("events", plan["events"]),  # a suite with a data set of its own says so
            runs=measured.get("runs", plan["runs"]),  # and one with runs of its own
            note=f"python -m bench; {machine_info['cpu']}, {machine_info['cores']} cores",
        )
    ]
    history.append(path, lines)


def save_report(report: dict, mode: str, results_dir: Path) -> None:
    """The run's JSON, under its time and as ``latest-<mode>.json``."""
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"{stamp}-{mode}.json", f"latest-{mode}.json"):
        (results_dir / name).write_text(json.dumps(report, indent=1, default=str))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny data, one run each: proves the scripts work")
    parser.add_argument("--only", default=",".join(SUITES), help=f"comma-separated subset of {','.join(SUITES)}")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--history", type=Path, default=history.HISTORY, help="where a full run appends its figures")
    parser.add_argument("--no-history", action="store_true", help="do not append this run's figures to the history")
    parser.add_argument(
        "--table",
        nargs="+",
        type=Path,
        metavar="RESULTS_JSON",
        help="print the summary table of earlier results (suites of later files win)",
    )
    args = parser.parse_args(argv)
    if args.table:
        merged: dict = {}
        for path in args.table:
            content = json.loads(path.read_text())
            merged.update(content.get("results", content))  # a full report, or a partial one
        print(table(headline(merged)))
        return
    suites = tuple(name.strip() for name in args.only.split(",") if name.strip())
    unknown = set(suites) - set(SUITES)
    if unknown:
        parser.error(f"unknown suites {', '.join(sorted(unknown))}; choose from {', '.join(SUITES)}")
    plan = Plan.smoke() if args.smoke else Plan.full(os.environ)
    report = run(plan, suites, "smoke" if args.smoke else "full", args.results)
    if not (args.smoke or args.no_history):  # a smoke run's figures mean nothing
        record_history(report, args.history)
    machine_info = report["machine"]
    print(
        f"\n{plan.events:,} events, {plan.runs} runs per figure; {machine_info['cpu']}, "
        f"{machine_info['cores']} cores, {machine_info['memory_gib']} GiB\n"
    )
    print(table(report["summary"]))


if __name__ == "__main__":
    main()
