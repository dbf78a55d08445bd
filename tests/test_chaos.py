"""The chaos loop, short (``tests/chaos.py``; ``make test-long``, not ``make test``, for CI's time
budget): the stream, a backfill, a correction and maintenance at once on one pipeline, 2 SIGKILLs at
chosen points (the stream in the middle of a batch's writes, maintenance in the middle of a VACUUM),
then every table against a clean run of the same jobs one after the other. With CHAOS_KILLS set
(`make chaos` makes 100) the loop makes every chosen kill (after a batch's bronze write, after its quarantine
write, after its progress row, mid-VACUUM), then random ones, and a failure names the seed that
replays them (CHAOS_SEED; docs/development.md)."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest

from lakehouse.audit.reconcile import Auditor
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.serving.status import pipeline_status
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables, register_tables
from tests.chaos import (
    BETWEEN_WRITES,
    MID_WRITES,
    SPAN,
    START,
    VOLATILE,
    ChaosLoop,
    ChaosPlan,
    clean_run,
    home_settings,
    settle,
    shared_log,
)

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
# Processing-time columns, and the ids of the runs that wrote a row: they differ between any two runs.
DIFFERS_BY_RUN = VOLATILE | {"app_id", "run_id", "emitted_at"}
COMPARED = (TABLES.bronze, TABLES.quarantine, TABLES.speed, TABLES.panes, TABLES.batch, STREAM_PROGRESS)
SERVED = (
    "SELECT window_start, bridge_id, vehicle_type, vehicles, revenue, source FROM gold.toll_traffic ORDER BY 1, 2, 3"
)


def _rows(spark, settings, table) -> list[tuple]:
    frame = spark.read.format("delta").load(table.uri(settings))
    kept = [c for c in frame.columns if c not in DIFFERS_BY_RUN]
    return sorted(tuple(map(str, row)) for row in frame.select(kept).collect())


def differing_rows(got: list[tuple], expected: list[tuple], shown: int = 10) -> str:
    """The rows only one of two runs has (as many times as it has more of them), a few of each: what
    a failure must show, rather than both tables whole ("" when the runs have the same rows)."""
    extra, missing = Counter(got) - Counter(expected), Counter(expected) - Counter(got)
    extra_rows, missing_rows = sorted(extra.elements()), sorted(missing.elements())
    if not extra_rows and not missing_rows:
        return ""
    return (
        f"{len(extra_rows)} only after the loop {extra_rows[:shown]}, "
        f"{len(missing_rows)} only in the clean run {missing_rows[:shown]}"
    )


def _served(spark, settings) -> list[tuple]:
    register_tables(spark, settings, [PIPELINE])
    return [tuple(map(str, row)) for row in spark.sql(SERVED).collect()]


def check_against_clean_run(spark, root: Path, log: dict[str, str]) -> dict:
    """The loop's home (``root/chaos``) against a clean run's (``root/clean``, run here): every
    table row for row, the serving view, the fate identity and the serving-view audit; returns the
    figures checked."""
    chaos, clean = home_settings(root / "chaos", log), home_settings(root / "clean", log)
    settle(spark, chaos)
    clean_run(spark, clean)
    rows = {}
    for table in COMPARED:
        got, expected = _rows(spark, chaos, table), _rows(spark, clean, table)
        difference = differing_rows(got, expected)
        assert not difference, (
            f"{table.qualified_name}: {len(got)} rows after the loop, {len(expected)} clean; {difference}"
        )
        rows[table.qualified_name] = len(got)
    served = differing_rows(_served(spark, chaos), _served(spark, clean))
    assert not served, f"the serving view differs from the clean run's: {served}"
    status, clean_status = pipeline_status(chaos, PIPELINE), pipeline_status(clean, PIPELINE)
    assert status.balanced and (status.read, status.fates) == (clean_status.read, clean_status.fates), status
    audit = Auditor(spark, chaos, PIPELINE).reconcile(START, START + SPAN, target="serving", record=False)
    assert audit.ok, audit
    return {"rows_compared": rows, "records_read": status.read, "fates": status.fates, "unexplained": 0}


@pytest.mark.slow
@pytest.mark.long
def test_jobs_killed_while_running_at_once_end_with_the_clean_runs_tables(spark, tmp_path):
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 32))
    kills = os.environ.get("CHAOS_KILLS")
    scripted = BETWEEN_WRITES if kills else MID_WRITES
    plan = ChaosPlan(seed=seed, kills=int(kills or len(scripted)), scripted=scripted)
    print(f"chaos seed {seed}")
    try:
        log = shared_log(tmp_path)
        report = ChaosLoop(plan, tmp_path / "chaos", log).run()
        assert report["kills"] == plan.kills
        check_against_clean_run(spark, tmp_path, log)
    except AssertionError as failure:
        raise AssertionError(f"chaos seed {seed} (replay with CHAOS_SEED={seed}): {failure}") from failure
    print(report)
