"""Speed layer throughput (benchmark 1) and freshness (benchmark 2) against the bare streaming job.

Throughput. A micro-batch of n events takes about ``d(n) = a + b*n`` seconds: a fixed per-batch cost
(planning, Delta commits) plus a cost per event. At a rate r and a trigger interval T a batch holds
``r*T`` events, and the stream keeps up while ``d(r*T) <= T``, so the sustainable rate is
``(T - a) / (b*T)``. Each job drains a backlog of log files twice, at two batch sizes (files per
trigger), and ``a`` and ``b`` are fitted to the batch durations Spark reports (the first batch of
each drain, which pays one-off start-up costs, is left out).

Freshness. At half the speed layer's sustainable rate, a writer adds a file of events every second
(event time = now) while a probe thread adds a one-event file with its own ``bridge_id`` every few
seconds. Freshness = the first commit that shows the probe's row in the job's SQL table - written to
the log, read from the table's commits after the run (``bench.visibility``, which says why no
poller queries the tables during it); one SQL query at the end confirms the rows are there.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import functions as F

from bench import baselines
from bench.data import PIPELINE, DataSet, link_log_files, scratch_home, settings_for
from bench.measure import PeakMemory, percentile, summary
from bench.visibility import FirstCommits
from lakehouse.dataflow.panes import latest_panes
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.dataflow.transforms import interval
from lakehouse.eventtime import parse_duration
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.micro_batch import live_windows
from lakehouse.layers.speed import SpeedLayer
from lakehouse.location import local_path
from lakehouse.settings import PROJECT_ROOT
from lakehouse.storage.catalog import STREAM_PROGRESS, ensure_pipeline_tables, pipeline_tables, register_tables
from lakehouse.storage.log import LogWriter, log_glob

# The speed layer; the hand-written lambda job doing the same durable work (the goal is set against
# it); the bare aggregate-only stream, which persists nothing else (the limit line).
JOBS = ("lakehouse", "hand_written", "bare")
# The speed layer again, serving its metrics endpoint (lakehouse.ops.metrics) while a scraper reads
# it every METERED_SCRAPE_S: the throughput suite measures it beside the speed layer without one.
METERED = "lakehouse_metered"
THROUGHPUT_JOBS = (JOBS[0], METERED, *JOBS[1:])
# Fifteen times as often as Prometheus's default interval (15 s), so that a drain of a few batches
# sees scrapes beside every batch.
METERED_SCRAPE_S = 1.0


class Metered:
    """A speed layer's query whose metrics endpoint serves, and is scraped every ``every_s``, until it
    has terminated; the query's own methods pass through."""

    def __init__(self, query, settings, layer: SpeedLayer, every_s: float):
        from lakehouse.ops.metrics import start_endpoint

        self.query = query
        self.endpoint = start_endpoint(settings.replace(metrics_port="0"), PIPELINE, lambda: layer.dedupe_index_ids)
        self.scrape_seconds: list[float] = []
        self._stop = threading.Event()
        self._scraper = threading.Thread(target=self._scrape, args=(every_s,), daemon=True)
        self._scraper.start()

    def _scrape(self, every_s: float) -> None:
        import urllib.request

        while not self._stop.wait(every_s):
            started = time.perf_counter()
            with urllib.request.urlopen(f"http://127.0.0.1:{self.endpoint.port}/metrics", timeout=30) as answer:
                answer.read()
            self.scrape_seconds.append(time.perf_counter() - started)

    def awaitTermination(self, timeout=None):  # noqa: N802 (StreamingQuery's name)
        try:
            return self.query.awaitTermination(timeout)
        finally:
            if not self.query.isActive:
                self._stop.set()
                self._scraper.join()
                self.endpoint.close()

    def __getattr__(self, name):
        return getattr(self.query, name)


def start_job(spark, job: str, home, trigger: str, files_per_trigger: int = 0, available_now: bool = False):
    """Start one job's streaming query on the log of ``home``; returns (query, the table SQL reads,
    the local Delta table whose commits make a row visible there)."""
    settings = settings_for(
        home, LAKEHOUSE_MAX_FILES_PER_TRIGGER=str(files_per_trigger), LAKEHOUSE_TRIGGER_INTERVAL=trigger
    )
    if job in (JOBS[0], METERED):
        pipeline = get_pipeline(PIPELINE)
        layer = SpeedLayer(spark, settings, pipeline)
        query = layer.start(available_now=available_now)
        if job == METERED:
            query = Metered(query, settings, layer, METERED_SCRAPE_S)
        # The serving view shows the speed layer's rows as __speed commits them (no backfill here).
        return query, f"gold.{PIPELINE}", local_path(pipeline_tables(pipeline).speed.uri(settings))
    # The baselines: each writes under its own folder and checkpoint, from the same log.
    location = f"{settings.warehouse_uri}/{job}/{PIPELINE}"
    start = baselines.hand_written_speed_layer if job == "hand_written" else baselines.bare_stream
    query = start(
        spark,
        log_glob(settings, PIPELINE),
        location,
        f"{settings.checkpoint_uri}/{job}",
        interval(trigger),
        files_per_trigger,
        available_now,
    )
    if job == "hand_written":
        location = f"{location}/gold"
    return query, f"delta.`{location}`", local_path(location)


def batches_read(query) -> list[tuple[int, float]]:
    """(input rows, seconds) of each micro-batch that read something, from Spark's own progress."""
    batches = []
    for progress in query.recentProgress:
        progress = json.loads(progress.json) if hasattr(progress, "json") else progress
        if progress["numInputRows"]:
            batches.append((progress["numInputRows"], progress["durationMs"]["triggerExecution"] / 1000))
    return batches


def drain(
    spark, data: DataSet, job: str, files_per_trigger: int, batches: int, prepare: Callable[[Path], None] | None = None
) -> list[tuple[int, float]]:
    """Batches of a backlog drained ``files_per_trigger`` files at a time (the first one dropped).

    ``prepare`` gets the empty home first, to put tables in place as an older stream left them.
    """
    home = scratch_home(f"drain-{job}")
    if prepare:
        prepare(home)
    files = data.log_files()[: files_per_trigger * (batches + 1)]
    link_log_files(files, data.home / "log", home / "log")
    return batches_read(run_to_end(spark, job, home, "1s", files_per_trigger))[1:]


def run_to_end(spark, job: str, home: Path, trigger: str, files_per_trigger: int = 0):
    """Start ``job`` on the log of ``home``, let it read everything there, and return its query."""
    query, _, _ = start_job(spark, job, home, trigger, files_per_trigger, available_now=True)
    query.awaitTermination()
    if query.exception():
        raise query.exception()
    return query


def fit_batch_cost(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``seconds = a + b * rows``: (fixed seconds per batch, seconds per event)."""
    n = len(points)
    mean_rows = sum(rows for rows, _ in points) / n
    mean_seconds = sum(seconds for _, seconds in points) / n
    spread = sum((rows - mean_rows) ** 2 for rows, _ in points)
    slope = sum((rows - mean_rows) * (seconds - mean_seconds) for rows, seconds in points) / spread
    return mean_seconds - slope * mean_rows, slope


def sustainable_rate(points: list[tuple[int, float]], trigger_s: float) -> tuple[float, float, float]:
    """(events/s, fixed seconds per batch, seconds per event) from the drained batches.

    When noise swamps the growth with batch size (tiny batches, a busy machine) the fit is
    meaningless; the rate is then the best a drained batch achieved, capped by what fits a trigger.
    """
    fixed, per_event = fit_batch_cost(points)
    if per_event > 0 and fixed >= 0:
        return max(0.0, (trigger_s - fixed) / (per_event * trigger_s)), fixed, per_event
    return max(rows / max(seconds, trigger_s) for rows, seconds in points), fixed, per_event


def highest(kept: dict[str, float], peaks: dict[str, float]) -> dict[str, float]:
    """The peak memory of each part over the runs so far (``kept``) and one more (``peaks``)."""
    return {key: max(value, kept.get(key, 0)) for key, value in peaks.items()}


def throughput(spark, data: DataSet, runs: int, trigger: str, sizes: tuple[int, int], batches: int) -> dict:
    """Sustainable events/s of each job, fitted per run from drains at two batch sizes."""
    trigger_s = parse_duration(trigger).total_seconds()
    jobs = THROUGHPUT_JOBS
    results: dict[str, dict] = {job: {"rate": [], "fixed_s": [], "per_event_us": []} for job in jobs}
    drained: dict[str, dict[int, list[float]]] = {job: {size: [] for size in sizes} for job in jobs}
    memory: dict[str, dict] = {}
    # One drain of each job first, not measured: the JVM's JIT compiles Spark's and Delta's code
    # paths during the first drains it runs, and the job that came first paid for all of them (its
    # first drain of 4 files per trigger 14-17 s, against 8-9 s warm, in one JVM). And the order
    # turns each run: a job run right after the bare stream drained slower (the speed layer, at 4
    # files per trigger, took 1.15-1.19x the hand-written job's time when it ran after the bare
    # stream, and 0.99-1.05x when it ran after the hand-written job).
    for job in jobs:
        drain(spark, data, job, sizes[0], batches)
    for run in range(runs):
        for job in jobs[run % len(jobs) :] + jobs[: run % len(jobs)]:
            points = []
            with PeakMemory(os.getpid()) as peak:
                for size in sizes:
                    batch_points = drain(spark, data, job, size, batches)
                    drained[job][size].append(sum(seconds for _, seconds in batch_points))
                    points += batch_points
            rate, fixed, per_event = sustainable_rate(points, trigger_s)
            results[job]["rate"].append(rate)
            results[job]["fixed_s"].append(fixed)
            results[job]["per_event_us"].append(per_event * 1e6)
            memory[job] = highest(memory.get(job, {}), peak.as_dict())
    return {
        "events": data.events,
        "trigger_s": trigger_s,
        "files_per_trigger": list(sizes),
        "batches_per_drain": batches,
        "events_per_file": data.events_per_file,
        "jobs": {
            job: {
                "events_per_s": summary(values["rate"]),
                "fixed_s_per_batch": summary(values["fixed_s"]),
                "us_per_event": summary(values["per_event_us"]),
                # The same backlog's batches, summed: the side-by-side time of the same drain.
                "drain_s": {str(size): summary(seconds) for size, seconds in drained[job].items()},
                "memory": memory[job],
            }
            for job, values in results.items()
        },
    }


def _hold_speed_rows(spark, data: DataSet, home: Path, days: int) -> int:
    """Fill ``gold.<p>__speed`` with ``days`` days of windows, the last of them the day the drained
    log covers, for every key the data set has; returns the rows written.

    They are written as one file per partition, the layout the stream's own MERGE leaves: it
    rewrites every file holding a window it changes, copying that file's other rows along, so
    the rows of closed windows keep company with the open ones (at one shuffle partition, one file).
    The drained batches then change windows held here, as a stream running for ``days`` days would.
    """
    settings, pipeline = settings_for(home), get_pipeline(PIPELINE)
    speed = ensure_pipeline_tables(settings, pipeline).speed
    keys = (
        spark.read.format("delta")
        .load(pipeline_tables(pipeline).batch.uri(data.settings()))
        .select(*pipeline.keys)
        .distinct()
    )
    size = pipeline.window.size_delta
    first = data.start - timedelta(days=days - 1)
    window_start = F.timestamp_seconds(
        F.lit(first.replace(tzinfo=UTC).timestamp()) + F.col("id") * size.total_seconds()
    )
    window_end = window_start + F.expr(f"INTERVAL {int(size.total_seconds())} SECONDS")
    values = {
        "window_start": window_start,
        "window_end": window_end,
        "last_batch_id": F.lit(0),
        "updated_at": F.current_timestamp(),
    }
    window_count = int(timedelta(days=days) / size)
    windows = spark.range(window_count).crossJoin(keys)
    rows = windows.select(
        *[
            (F.col(f.name) if f.name in pipeline.keys else values.get(f.name, F.col("id") % 97))
            .cast(f.dataType)
            .alias(f.name)
            for f in speed.columns.fields
        ]
    )
    rows.coalesce(1).write.format("delta").mode("append").save(speed.uri(settings))
    return window_count * keys.count()


def speed_growth(spark, data: DataSet, runs: int, held_days: tuple[int, int], batches: int) -> dict:
    """The speed layer while ``__speed`` holds a few vs many days of windows: a stream that runs for
    weeks must not slow down or grow as its table grows (should be flat). Per held days: the
    micro-batch's median seconds, the peak RSS of the driver (Python and JVM) during the drain, and
    the pane state the stream carries at its end."""
    seconds: dict[str, list[float]] = {f"{days}d": [] for days in held_days}
    rss: dict[str, list[float]] = {f"{days}d": [] for days in held_days}
    held, copied, state_rows = {}, {}, {}
    # One drain first, not measured: the JVM's heap and code cache grow to their working size in the
    # first drains it runs, and the first measured drain's peak RSS would carry that growth. Then
    # the order turns each run, so neither size is always the later one.
    drain(spark, data, "lakehouse", 1, batches)
    for run in range(runs):
        for days in held_days if run % 2 == 0 else held_days[::-1]:
            homes: list[Path] = []

            def hold(home: Path, days=days, homes=homes) -> None:
                homes.append(home)
                held[f"{days}d"] = _hold_speed_rows(spark, data, home, days)

            with PeakMemory(os.getpid()) as peak:
                points = drain(spark, data, "lakehouse", 1, batches, prepare=hold)
            seconds[f"{days}d"].append(statistics.median(duration for _, duration in points))
            rss[f"{days}d"].append(peak.python_bytes / 2**20 + peak.jvm_bytes / 2**20)
            speed_uri = pipeline_tables(get_pipeline(PIPELINE)).speed.uri(settings_for(homes[0]))
            last_merge = spark.sql(f"DESCRIBE HISTORY delta.`{speed_uri}` LIMIT 1").first()["operationMetrics"]
            copied[f"{days}d"] = int(last_merge.get("numTargetRowsCopied", 0))
            state_rows[f"{days}d"] = pane_state_rows(spark, settings_for(homes[0]))
    return {
        name: {
            "seconds": summary(values),
            "peak_rss_mib": summary(rss[name]),
            "pane_state_rows": state_rows[name],
            "rows_held": held[name],
            "rows_copied_by_last_merge": copied[name],
            "batches_per_drain": batches,
        }
        for name, values in seconds.items()
    }


def pane_state_rows(spark, settings) -> int:
    """The rows of the pane state a stream carries after its last batch, as a restart would load it
    (``pane_state_before``): the latest pane of each live window and key in the pane log, at the
    last batch's watermark, whatever ``__speed`` holds."""
    pipeline = get_pipeline(PIPELINE)
    progress = spark.read.format("delta").load(STREAM_PROGRESS.uri(settings))
    watermark = progress.orderBy(F.col("batch_id").desc()).first()["watermark"]
    panes = spark.read.format("delta").load(pipeline_tables(pipeline).panes.uri(settings))
    return latest_panes(live_windows(panes, watermark, pipeline), pipeline).count()


def _probe_line(sequence: int) -> str:
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return json.dumps(
        {
            "event_id": str(uuid.uuid4()),
            "bridge_id": f"probe-{sequence:05d}",
            "booth_id": "probe",
            "vehicle_type": "car",
            "axles": 2,
            "toll_amount": 6.0,
            "event_time": now,
            "sent_at": now,
        },
        separators=(",", ":"),
    )


class ProbeWriter:
    """Writes a one-event file (``_probe_line``) to the log every ``every`` seconds, in a thread,
    from ``start`` to ``stop``; ``written`` holds each probe's bridge_id and when it was written."""

    def __init__(self, settings, every: float):
        self.settings, self.every = settings, every
        self.written: dict[str, float] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _write(self) -> None:
        writer, sequence = LogWriter(self.settings, PIPELINE), 0
        while not self._stopped.wait(self.every):
            writer.write(datetime.now(UTC), f"probe{sequence:05d}", [_probe_line(sequence)])
            self.written[f"probe-{sequence:05d}"] = time.time()
            sequence += 1


def _freshness_once(
    spark, job: str, rate: float, seconds: float, trigger: str, probe_every: float, grace: float
) -> dict:
    home = scratch_home(f"fresh-{job}")
    settings = settings_for(home)
    query, table, committed_to = start_job(spark, job, home, trigger)
    if job == "lakehouse":
        register_tables(spark, settings)
    committed = FirstCommits(committed_to, "bridge_id", "probe-")
    load = _start_load(home, rate, seconds)
    probes = ProbeWriter(settings, probe_every)
    probes.start()
    written = probes.written
    deadline = time.time() + seconds
    while time.time() < deadline + grace:
        _raise_if_stopped(query, job)
        if time.time() >= deadline:
            probes.stop()
            load.terminate()
            if set(written) <= set(committed.scan()):
                break
        time.sleep(0.5)
    probes.stop()
    load.terminate()
    load.wait(timeout=30)
    batch_seconds = [seconds for _, seconds in batches_read(query)]
    _stop_between_batches(query)
    seen = committed.scan()
    # The commits say when; SQL confirms the rows are there to see (a served view could hide them).
    in_sql = {
        row[0] for row in spark.sql(f"SELECT DISTINCT bridge_id FROM {table} WHERE bridge_id LIKE 'probe-%'").collect()
    }
    delays = [seen[name] - at for name, at in written.items() if name in seen and name in in_sql]
    return {"probes": len(written), "probes_seen": len(delays), "delays": delays, "batch_seconds": batch_seconds}


def _raise_if_stopped(query, job: str) -> None:
    """A query that died would otherwise be waited on for the whole grace, then read as slow."""
    if not query.isActive:
        raise RuntimeError(f"the {job} streaming query stopped during the freshness run: {query.exception()}")


def _stop_between_batches(query, patience: float = 120) -> None:
    """Stop once the running micro-batch finishes: stopping mid-batch only makes noise in the log."""
    deadline = time.time() + patience
    while query.status["isTriggerActive"] and time.time() < deadline:
        time.sleep(0.2)
    query.stop()


def _start_load(home: Path, rate: float, seconds: float) -> subprocess.Popen:
    """The load: a file of ``rate`` events written every second, event time now, by a producer in a
    process of its own, as producers are. (Run in a thread of the bench's process, it shared the
    interpreter's lock with the jobs' ``foreachBatch`` functions, which a producer never does.) It
    ends when terminated, or after ``seconds``."""
    arguments = json.dumps([str(home), rate, seconds])
    return subprocess.Popen([sys.executable, "-c", LOAD_WRITER, arguments], cwd=PROJECT_ROOT)


LOAD_WRITER = "import json, sys; from bench.stream import write_load; write_load(*json.loads(sys.argv[1]))"


def write_load(home: str, rate: float, seconds: float) -> None:
    """The load's producer (``_start_load``)."""
    config = GeneratorConfig(events=int(rate * seconds), seed=5, start=datetime.now(UTC), rate=rate,
                             wall_rate=rate, events_per_file=max(1, round(rate)), late_fraction=0.0)  # fmt: skip
    generate(settings_for(Path(home)), config, PIPELINE)


def freshness(
    spark, rate: float, seconds: float, trigger: str, probe_every: float, grace: float, runs: int = 1
) -> dict:
    """p50 and p95 of log -> SQL visibility for each job at the same event rate, over the probes of
    ``runs`` runs pooled. The jobs' order turns from run to run, as in the throughput suite: one run
    of each, in a fixed order, gave p95 ratios 0.90-1.64 against the hand-written job over 12 runs
    of much the same code, from about 45 probes each."""
    outcomes: dict[str, dict] = {job: {"delays": [], "batch_seconds": [], "probes": 0, "memory": {}} for job in JOBS}
    for run in range(runs):
        for job in JOBS[run % len(JOBS) :] + JOBS[: run % len(JOBS)]:
            with PeakMemory(os.getpid()) as peak:
                outcome = _freshness_once(spark, job, rate, seconds, trigger, probe_every, grace)
            pooled = outcomes[job]
            pooled["delays"] += outcome["delays"]
            pooled["batch_seconds"] += outcome["batch_seconds"]
            pooled["probes"] += outcome["probes"]
            pooled["memory"] = highest(pooled["memory"], peak.as_dict())
    return {
        "rate_events_per_s": rate,
        "seconds": seconds,
        "runs": runs,
        "trigger_s": parse_duration(trigger).total_seconds(),
        "probe_every_s": probe_every,
        "jobs": {job: _freshness_figures(pooled) for job, pooled in outcomes.items()},
    }


def _freshness_figures(pooled: dict) -> dict:
    delays, batches = pooled["delays"], pooled["batch_seconds"]
    return {
        "p50_s": percentile(delays, 0.5) if delays else None,
        "p95_s": percentile(delays, 0.95) if delays else None,
        "probes": pooled["probes"],
        "probes_seen": len(delays),
        "median_batch_s": summary(batches)["median"] if batches else None,
        "memory": pooled["memory"],
    }
