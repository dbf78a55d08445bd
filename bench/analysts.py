"""Analysts while the platform works (benchmark 3): the serving view's latency to SQL clients while
the speed layer streams and a backfill runs, and what the clients cost the stream's freshness.

The speed layer streams in the bench's session at half its sustainable rate (the throughput suite's
figure): a producer process adds a file of events every second, and a probe every few seconds, as
the freshness suite does. A backfill of the pipeline's last hour from bronze runs over and over in a
process of its own (a session of its own, as an Airflow task's job has). The Spark service serves
the same home. The run alternates phases of equal length: in one, the analysts query the serving
view without pause, each a process of its own (half over JDBC, one connection each, as a BI tool
keeps one; half through Spark Connect, a session each); in the other, none do. So the analysts'
latencies are measured under the load, and the stream's freshness with them against without them,
in the same minutes. A probe counts in the phase it was written in.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.data import PIPELINE, scratch_home, settings_for
from bench.measure import percentiles
from bench.service import SharedService
from bench.sql_latency import AGGREGATES, jdbc_client_command, lookup
from bench.stream import ProbeWriter, _start_load, start_job
from bench.visibility import FirstCommits
from lakehouse.storage.catalog import register_tables

WAYS = ("jdbc", "connect")
# The backfill's chunk, and how far back from now its range starts.
BACKFILL_CHUNK = "10m"
BACKFILL_SPAN = timedelta(hours=1)
# The longest the backfill loop runs for, whatever happens to the bench.
LOAD_LIMIT_S = 3600
# How long an analysts' phase may run on after its end, while the queries in flight finish.
PHASE_OVERRUN_S = 120


@dataclasses.dataclass(frozen=True)
class AnalystsPlan:
    rate: float  # events/s the producer writes
    analysts: int  # clients in an analysts' phase, half of each way
    phase_s: float  # each phase's length
    phases: int  # phases of each kind, alternating (quiet first)
    trigger: str  # the stream's trigger interval
    probe_every: float  # seconds between probes
    warm_up_s: float  # the load alone before the first phase


def analysts(spark, plan: AnalystsPlan) -> dict:
    """The analysts' p50/p95 through each way, and the stream's freshness in each kind of phase."""
    home = scratch_home("analysts")
    settings = settings_for(home, LAKEHOUSE_TRIGGER_INTERVAL=plan.trigger)
    query, _, committed_to = start_job(spark, "lakehouse", home, plan.trigger)
    # The producer generates its events before it writes the first: as many as the run's planned
    # length and each analysts' phase's overrun (their queries in flight at its end) need, and no
    # more (at the full plan's rate an hour's events took longer to generate than the first batch
    # may). It is ended when the run ends.
    load = _start_load(home, plan.rate, plan.warm_up_s + plan.phases * (2 * plan.phase_s + PHASE_OVERRUN_S))
    served = SharedService.on_home(home, LAKEHOUSE_TRIGGER_INTERVAL=plan.trigger)
    probes = ProbeWriter(settings, plan.probe_every)
    backfill = None
    try:
        _wait_for_first_batch(query, committed_to)
        register_tables(spark, settings)
        served.connect_url()
        backfill = _start_backfills(home, LOAD_LIMIT_S)
        probes.start()
        time.sleep(plan.warm_up_s)
        phases = _alternate(served, plan, committed_to)
        probes.stop()
        committed = FirstCommits(committed_to, "bridge_id", "probe-")
        _wait_for_probes(query, committed, probes.written, grace=120)
    finally:
        probes.stop()
        for process in (load, backfill):
            if process is not None:
                process.terminate()
                process.wait(timeout=60)
        query.stop()
        served.stop()
    return _report(plan, phases, probes.written, committed.scan(), backfill_runs(home))


def _wait_for_first_batch(query, committed_to: Path, patience: float = 300) -> None:
    """The serving view needs tables before the service registers them and the analysts query."""
    deadline = time.time() + patience
    while not (committed_to / "_delta_log" / f"{1:020d}.json").exists():
        if not query.isActive or time.time() > deadline:
            raise RuntimeError(f"the stream wrote no batch in {patience:.0f}s: {query.exception()}")
        time.sleep(0.5)


def _wait_for_probes(query, committed: FirstCommits, written: dict[str, float], grace: float) -> None:
    deadline = time.time() + grace
    while not set(written) <= set(committed.scan()) and time.time() < deadline:
        if not query.isActive:
            raise RuntimeError(f"the stream stopped during the analysts' run: {query.exception()}")
        time.sleep(0.5)


def _alternate(served: SharedService, plan: AnalystsPlan, speed_table: Path) -> list[dict]:
    """Quiet and analysts' phases in turn; each phase's span and, for the analysts', their latencies."""
    phases = []
    for _ in range(plan.phases):
        began = time.time()
        time.sleep(plan.phase_s)
        phases.append({"kind": "quiet", "span": (began, time.time())})
        began, latencies = _run_analysts(served, plan, recent_queries(recent_windows(speed_table)))
        phases.append({"kind": "analysts", "span": (began, time.time()), "latencies": latencies})
    return phases


def _run_analysts(
    served: SharedService, plan: AnalystsPlan, statements: list[str]
) -> tuple[float, dict[str, list[float]]]:
    """``plan.analysts`` clients at once, each its own process, timing queries for ``plan.phase_s``
    after a first one each (a connection's or session's set-up): when the last of them began
    timing, and their seconds a query."""
    env = {**os.environ, **served.login()}  # the password in the environment, not in `ps`
    clients = []
    for number in range(plan.analysts):
        way = WAYS[number % len(WAYS)]
        if way == "jdbc":
            command = jdbc_client_command(served.jdbc_url(), statements, plan.phase_s)
        else:
            arguments = [served.connect_url(), json.dumps(statements), str(plan.phase_s)]
            command = [sys.executable, "-m", "bench.analysts", *arguments]
        clients.append((way, subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)))
    latencies: dict[str, list[float]] = {way: [] for way in WAYS}
    timing_began = 0.0
    for way, process in clients:
        out, _ = process.communicate(timeout=plan.phase_s + 600)
        if process.returncode != 0:
            raise RuntimeError(f"an analyst's {way} client failed with exit code {process.returncode}")
        began, *seconds = (float(line) for line in out.split())
        timing_began = max(timing_began, began)
        latencies[way] += seconds
    return timing_began, latencies


def recent_windows(speed_table: Path, count: int = 6) -> list[datetime]:
    """The latest windows the speed table holds, newest first, in UTC: the ones the stream is
    changing. (Windows picked by the clock missed: an analysts' phase may begin before the load has
    run for as many minutes as it looks back.)"""
    from lakehouse.storage.ops_tables import arrow_at

    starts = arrow_at(str(speed_table), ["window_start"]).column("window_start").to_pylist()
    return sorted({start.replace(tzinfo=None) for start in starts}, reverse=True)[:count]


def recent_queries(windows: list[datetime]) -> list[str]:
    """Point lookups of ``windows``, then the aggregates."""
    return [lookup(window) for window in windows] + list(AGGREGATES)


def _start_backfills(home: Path, seconds: float) -> subprocess.Popen:
    """The backfill loop (``backfill_loop``) in a process of its own, for ``seconds`` at most."""
    return subprocess.Popen([sys.executable, "-m", "bench.analysts", "backfill", str(home), str(seconds)])


def backfill_loop(home: Path, seconds: float) -> None:
    """Backfill the pipeline's last hour from bronze, in 10-minute chunks, again and again."""
    from lakehouse.dataflow.pipelines import get_pipeline
    from lakehouse.layers.batch import BatchLayer
    from lakehouse.storage.spark import build_spark_session

    settings = settings_for(home)
    spark = build_spark_session(settings, "bench-analysts-backfill")
    layer = BatchLayer(spark, settings, get_pipeline(PIPELINE))
    deadline = time.time() + seconds
    while time.time() < deadline:
        now = datetime.now(UTC).replace(tzinfo=None)
        end = now.replace(minute=now.minute - now.minute % 10, second=0, microsecond=0)
        layer.backfill(end - BACKFILL_SPAN, end, source="bronze", chunk=BACKFILL_CHUNK)
    spark.stop()


def backfill_runs(home: Path) -> int:
    """The backfill runs that succeeded meanwhile, from ``ops.backfill_runs``."""
    from lakehouse.storage.catalog import BACKFILL_RUNS
    from lakehouse.storage.ops_tables import arrow_at
    from lakehouse.vocabulary import RunStatus

    settings = settings_for(home)
    runs = arrow_at(BACKFILL_RUNS.uri(settings), settings=settings)
    return 0 if runs is None else sum(status == RunStatus.SUCCEEDED for status in runs.column("status").to_pylist())


def _report(plan: AnalystsPlan, phases: list[dict], written: dict[str, float], seen: dict[str, float],
            backfills: int) -> dict:  # fmt: skip
    kinds = {name: _phase_kind(phases, at) for name, at in written.items()}
    delays = {kind: [seen[name] - written[name] for name in kinds if kinds[name] == kind and name in seen]
              for kind in ("quiet", "analysts")}  # fmt: skip
    latencies = {way: [s for p in phases if p["kind"] == "analysts" for s in p["latencies"][way]] for way in WAYS}
    latencies["all"] = [s for way in WAYS for s in latencies[way]]
    return {
        "plan": dataclasses.asdict(plan),
        "backfill_runs": backfills,
        "probes": {kind: {"written": list(kinds.values()).count(kind), "seen": len(delays[kind])} for kind in delays},
        "analysts": {way: percentiles(values) for way, values in latencies.items()},
        "freshness": {kind: percentiles(values) for kind, values in delays.items()},
    }


def _phase_kind(phases: list[dict], at: float) -> str | None:
    """The kind of the phase a probe written at ``at`` fell in (None: the warm-up, or after)."""
    return next((phase["kind"] for phase in phases if phase["span"][0] <= at < phase["span"][1]), None)


def figures(results: dict, add) -> None:
    """The analysts' latencies against the issue's bounds, and the stream's freshness with them."""
    clients = results["plan"]["analysts"]
    for p, bound in (("p50_s", "<= 0.4 s"), ("p95_s", "<= 1.0 s")):
        add(f"serving view {p[:3]}, {clients} analysts while the stream and a backfill run",
            results["analysts"]["all"][p], None, bound)  # fmt: skip
    add(
        "stream freshness p95 with the analysts vs without",
        results["freshness"]["analysts"]["p95_s"],
        results["freshness"]["quiet"]["p95_s"],
        "<= 1.2",
    )


def connect_client(url: str, statements: list[str], seconds: float) -> list[float]:
    """An analyst through Spark Connect: the statements in turn, without pause, for ``seconds``
    after its first one; when the timed queries began, then each one's seconds (logged in from
    LAKEHOUSE_SQL_USER, _PASSWORD), as the JDBC client prints them."""
    from lakehouse.storage.spark import connect_builder

    session = connect_builder(url, os.environ["LAKEHOUSE_SQL_USER"], os.environ["LAKEHOUSE_SQL_PASSWORD"]).create()
    session.sql(statements[0]).collect()  # the session's set-up, as the JDBC client's connection
    timed, deadline = [time.time()], time.time() + seconds
    for statement in itertools.cycle(statements):
        if time.time() >= deadline:
            return timed
        began = time.perf_counter()
        session.sql(statement).collect()
        timed.append(time.perf_counter() - began)


if __name__ == "__main__":
    if sys.argv[1] == "backfill":
        backfill_loop(Path(sys.argv[2]), float(sys.argv[3]))
    else:
        url, statements, seconds = sys.argv[1:4]
        print("\n".join(str(s) for s in connect_client(url, json.loads(statements), float(seconds))))
