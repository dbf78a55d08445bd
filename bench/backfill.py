"""Backfill (benchmark 3) and cost growth (benchmark 4): the batch layer against a bare Spark batch
job and DuckDB over the same day of data, warm (one JVM for every run) and cold (a fresh process
per run, JVM start-up included); then how backfills, audits and corrections grow with the range."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from pyspark.sql import functions as F

from bench import baselines
from bench.data import DAY, PIPELINE, DataSet, scratch_home
from bench.measure import PeakMemory, summary, timed
from lakehouse.audit.reconcile import Auditor
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.layers.batch import BatchLayer
from lakehouse.location import local_path
from lakehouse.settings import PROJECT_ROOT
from lakehouse.storage.catalog import pipeline_tables
from lakehouse.storage.log import log_glob
from lakehouse.vocabulary import Fate

HOUR = timedelta(hours=1)


class BackfillJobs:
    """Each job recomputes the per-window aggregates of ``[start, end)`` and writes them."""

    def __init__(self, spark, data: DataSet):
        self.spark, self.data = spark, data
        self.settings = data.settings()
        self.pipeline = get_pipeline(PIPELINE)
        self.tables = pipeline_tables(self.pipeline)
        self.targets = scratch_home("backfill-targets")
        self.log_glob = log_glob(self.settings, PIPELINE)

    def lakehouse(self, source: str, start, end) -> int:
        result = BatchLayer(self.spark, self.settings, self.pipeline).backfill(start, end, source=source, chunk="1d")
        return result.events_used

    def bare(self, source: str, start, end) -> None:
        target = f"file:{self.targets}/bare_{source}"
        if source == "bronze":
            baselines.bare_batch_from_bronze(self.spark, self.tables.bronze.uri(self.settings), start, end, target)
        else:
            baselines.bare_batch_from_log(self.spark, self.log_glob, start, end, target)

    def duckdb(self, start, end) -> int:
        return baselines.duckdb_from_log(self._local_glob(), start, end, self.targets / "duckdb.parquet")

    def _local_glob(self) -> str:
        return str(local_path(self.log_glob))

    def vehicles(self, job: str) -> int:
        """Vehicles counted by a job's last output: the jobs must agree, or a ratio means nothing."""
        if job.startswith("lakehouse"):
            frame = self.spark.read.format("delta").load(self.tables.batch.uri(self.settings))
        elif job.startswith("bare"):
            frame = self.spark.read.format("delta").load(f"file:{self.targets}/{job}")
        else:
            frame = self.spark.read.parquet(f"file:{self.targets}/duckdb.parquet")
        return frame.agg(F.sum("vehicles")).first()[0] or 0


def warm_backfills(spark, data: DataSet, runs: int, only: tuple[str, ...] = ()) -> dict:
    """Every job (or those in ``only``) ``runs`` times over one day in the running JVM, after a warm-up
    round, interleaved so drift hits all alike."""
    jobs = BackfillJobs(spark, data)
    start, end = data.start, data.start + DAY
    actions = {
        "lakehouse_bronze": lambda: jobs.lakehouse("bronze", start, end),
        "bare_bronze": lambda: jobs.bare("bronze", start, end),
        "lakehouse_log": lambda: jobs.lakehouse("log", start, end),
        "bare_log": lambda: jobs.bare("log", start, end),
        "duckdb_log": lambda: jobs.duckdb(start, end),
    }
    actions = {name: action for name, action in actions.items() if not only or name in only}
    seconds: dict[str, list[float]] = {name: [] for name in actions}
    memory: dict[str, dict] = {}
    vehicles: dict[str, int] = {}
    events = 0
    # One untimed round first: the first run of a job in a JVM compiles its code paths (Janino, the
    # JIT) and takes several times a warm one, which would make the kept min and max meaningless.
    for action in actions.values():
        action()
    for _ in range(runs):
        for name, action in actions.items():
            with PeakMemory(os.getpid()) as peak:
                elapsed, outcome = timed(action)
            seconds[name].append(elapsed)
            memory[name] = _max_memory(memory.get(name), peak.as_dict())
            vehicles.setdefault(name, jobs.vehicles(name))  # untimed; the two lakehouse jobs share a table
            if name == "lakehouse_bronze":
                events = outcome
    return {
        "events": events,
        "jobs": {
            name: {
                "seconds": summary(values),
                "events_per_s": round(events / summary(values)["median"]),
                "memory": memory[name],
                "vehicles": vehicles[name],
            }
            for name, values in seconds.items()
        },
    }


def _max_memory(before: dict | None, now: dict) -> dict:
    return now if before is None else {key: max(before[key], now[key]) for key in now}


def cold_backfills(data: DataSet, runs: int) -> dict:
    """Each job as a fresh process (the CLI for the lakehouse), JVM start-up included."""
    start, end = data.start, data.start + DAY
    env = {**os.environ, "LAKEHOUSE_HOME": str(data.home), "PYTHONPATH": str(PROJECT_ROOT)}
    python = sys.executable
    lakehouse_cli = str(Path(python).with_name("lakehouse"))
    common = ["--start", start.isoformat() + "Z", "--end", end.isoformat() + "Z"]
    commands = {
        "lakehouse_log": [lakehouse_cli, "backfill", *common, "--source", "log", "--chunk", "1d"],
        "bare_log": [python, "-m", "bench.cold", "bare_log", *common],
        "duckdb_log": [python, "-m", "bench.cold", "duckdb_log", *common],
    }
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    memory: dict[str, dict] = {}
    for _ in range(runs):
        for name, command in commands.items():
            began = time.perf_counter()
            process = subprocess.Popen(
                command, env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            with PeakMemory(process.pid) as peak:
                output, _ = process.communicate()
            seconds[name].append(time.perf_counter() - began)
            if process.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{output[-3000:]}")
            memory[name] = _max_memory(memory.get(name), peak.as_dict())
    return {"jobs": {name: {"seconds": summary(values), "memory": memory[name]} for name, values in seconds.items()}}


def growth(spark, data: DataSet, runs: int) -> dict:
    """Backfill and audit of one hour against one day of the same data: both should be linear."""
    jobs = BackfillJobs(spark, data)
    auditor = Auditor(spark, data.settings(), jobs.pipeline)
    start = data.start
    actions = {
        "backfill_1h": lambda: jobs.lakehouse("bronze", start, start + HOUR),
        "backfill_1d": lambda: jobs.lakehouse("bronze", start, start + DAY),
        "audit_1h": lambda: auditor.reconcile(start, start + HOUR),
        "audit_1d": lambda: auditor.reconcile(start, start + DAY),
    }
    seconds: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(runs):
        for name, action in actions.items():
            seconds[name].append(timed(action)[0])
    return {name: {"seconds": summary(values)} for name, values in seconds.items()}


def _late_events(spark, data: DataSet, run: int, windows: int):
    """``windows`` late events in as many consecutive windows of the first day, as bronze rows the
    speed layer would have written (fate ``late``): what a correction run folds in."""

    tables = pipeline_tables(get_pipeline(PIPELINE))
    event_time = F.lit(data.start) + F.make_dt_interval(F.lit(0), F.lit(0), F.col("id"), F.lit(30))
    rows = spark.range(windows).select(
        F.concat(F.lit(f"late-{run}-"), F.col("id").cast("string")).alias("event_id"),
        F.lit("bridge-00").alias("bridge_id"),
        F.lit("bridge-00-booth-0").alias("booth_id"),
        F.lit("car").alias("vehicle_type"),
        F.lit(2).alias("axles"),
        F.lit(6).cast("decimal(9,2)").alias("toll_amount"),
        F.lit(None).cast("string").alias("plate_hash"),
        event_time.alias("event_time"),
        (event_time + F.expr("INTERVAL 10 MINUTES")).alias("sent_at"),
        F.to_date(event_time).alias("event_date"),
        F.lit(Fate.LATE).alias("fate"),
        F.lit("bench-late").alias("app_id"),
        F.lit(run).cast("long").alias("batch_id"),
        F.lit("bench").alias("source_file"),
        F.current_timestamp().alias("ingested_at"),
    )
    return rows.select(tables.bronze.columns.fieldNames()), tables.bronze.uri(data.settings())


def correction(spark, data_sets: dict[str, DataSet], runs: int, windows: int = 100) -> dict:
    """A correction folding late events into ``windows`` windows, on tables holding 1 vs 10 days."""
    from lakehouse.layers.corrections import CorrectionRun

    seconds: dict[str, list[float]] = {name: [] for name in data_sets}
    recomputed: dict[str, int] = {}
    for _name, data in data_sets.items():
        CorrectionRun(spark, data.settings(), get_pipeline(PIPELINE)).run()  # folds in what came before
    for run in range(runs):
        for name, data in data_sets.items():
            late, bronze_uri = _late_events(spark, data, run, windows)
            late.write.format("delta").mode("append").save(bronze_uri)
            elapsed, result = timed(CorrectionRun(spark, data.settings(), get_pipeline(PIPELINE)).run)
            seconds[name].append(elapsed)
            recomputed[name] = result.windows_recomputed
    return {
        name: {
            "seconds": summary(values),
            "windows_recomputed": recomputed[name],
            "events_held": data_sets[name].events,
        }
        for name, values in seconds.items()
    }
