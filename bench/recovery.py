"""Recovery: how long the speed layer takes to catch up on the backlog a crash left, against the
hand-written lambda job on the same backlog.

A stream stops (or crashes) after reading the first file of a stretch of log written at ``rate`` events/s,
a file per trigger interval, as a live producer writes it; ``minutes`` of log then arrive while it
is down. Each job is restarted on its own checkpoint and drains the backlog with the platform's
default caps (``LAKEHOUSE_MAX_BYTES_PER_TRIGGER``); the time from the restart to the drained end is
its recovery time. Both jobs get the same files, caps and session.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from bench.data import CACHE, PIPELINE, link_log_files, scratch_home, settings_for
from bench.measure import summary
from bench.stream import batches_read, run_to_end
from lakehouse.eventtime import parse_duration
from lakehouse.generator import DEFAULT_START, GeneratorConfig, generate

JOBS = ("lakehouse", "hand_written")


def backlog_log(rate: float, minutes: float, trigger: str) -> Path:
    """A home whose log holds ``minutes`` of traffic at ``rate`` events/s, a file per trigger
    interval; generated once and cached (the marker is written last)."""
    root = CACHE / f"recovery-{PIPELINE}-{rate:g}eps-{minutes:g}m-{trigger}"
    marker = root / "log.json"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        per_file = max(1, round(rate * parse_duration(trigger).total_seconds()))
        config = GeneratorConfig(
            events=int(rate * minutes * 60), seed=13, start=DEFAULT_START, rate=rate, events_per_file=per_file
        )
        marker.parent.mkdir(parents=True, exist_ok=True)
        generated = generate(settings_for(root / "home"), config, PIPELINE)
        marker.write_text(json.dumps(generated.as_dict(), default=str))
    return root / "home"


def recover_once(spark, job: str, log_home: Path, trigger: str) -> dict:
    """One job: read the first file, then restart on the backlog and time the catch-up."""
    log = log_home / "log"
    files = sorted(log.glob(f"{PIPELINE}/ingest_date=*/ingest_hour=*/*.jsonl"), key=lambda path: path.name)
    home = scratch_home(f"recover-{job}")
    link_log_files(files[:1], log, home / "log")
    run_to_end(spark, job, home, trigger)  # running, with its tables, until the crash
    link_log_files(files[1:], log, home / "log")  # what arrived while it was down
    began = time.perf_counter()
    query = run_to_end(spark, job, home, trigger)
    seconds = time.perf_counter() - began
    batches = batches_read(query)
    return {"seconds": seconds, "batches": len(batches), "largest_batch_rows": max(rows for rows, _ in batches)}


def recovery(spark, runs: int, rate: float, minutes: float, trigger: str) -> dict:
    """Each job's recovery time from the same backlog, ``runs`` times, side by side."""
    log_home = backlog_log(rate, minutes, trigger)
    measured: dict[str, list[dict]] = {job: [] for job in JOBS}
    for _ in range(runs):
        for job in JOBS:
            measured[job].append(recover_once(spark, job, log_home, trigger))
    return {
        "rate_events_per_s": rate,
        "backlog_minutes": minutes,
        "backlog_events": int(rate * minutes * 60),
        "jobs": {
            job: {
                "seconds": summary([run["seconds"] for run in runs_of]),
                "batches": runs_of[-1]["batches"],
                "largest_batch_rows": runs_of[-1]["largest_batch_rows"],
            }
            for job, runs_of in measured.items()
        },
    }
