"""One baseline backfill as its own process, so its time includes the JVM start-up (as the CLI's does).

``python -m bench.cold bare_log|duckdb_log --start ISO --end ISO`` against ``LAKEHOUSE_HOME``.
"""

from __future__ import annotations

import argparse

from bench import baselines
from bench.data import PIPELINE, scratch_home
from lakehouse.eventtime import parse_instant
from lakehouse.location import local_path
from lakehouse.settings import Settings
from lakehouse.storage.log import log_glob


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("job", choices=["bare_log", "duckdb_log"])
    parser.add_argument("--start", required=True)
    parser.add_argument("--end", required=True)
    args = parser.parse_args()
    settings = Settings.from_env()
    start, end = parse_instant(args.start, "start"), parse_instant(args.end, "end")
    target = scratch_home(f"cold-{args.job}")
    if args.job == "duckdb_log":
        baselines.duckdb_from_log(str(local_path(log_glob(settings, PIPELINE))), start, end, target / "duckdb.parquet")
        return
    from lakehouse.storage.spark import build_spark_session

    spark = build_spark_session(settings, "bare-backfill")
    baselines.bare_batch_from_log(spark, log_glob(settings, PIPELINE), start, end, f"file:{target}/bare_log")
    spark.stop()


if __name__ == "__main__":
    main()
