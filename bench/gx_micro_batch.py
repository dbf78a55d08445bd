"""Is Great Expectations cheap enough to run on every micro-batch? Times, on one micro-batch of
parsed events (default 500, the generator's file size), the suite-derived Spark routing the stream
runs against a GX validation of the same suite. Writes bench/results/gx_micro_batch.json.

    .venv/bin/python bench/gx_micro_batch.py [--events 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def timed(action, repeat: int) -> list[float]:
    """Wall seconds of each of ``repeat`` runs of ``action``."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from lakehouse.dataflow import transforms as tx
    from lakehouse.dataflow.pipelines import get_pipeline
    from lakehouse.dataflow.pipelines.row_rules import RAW_EVENTS, suite_path
    from lakehouse.generator import GeneratorConfig, generate_records
    from lakehouse.settings import Settings
    from lakehouse.storage.frames import literal_frame
    from lakehouse.storage.spark import build_spark_session

    pipeline = get_pipeline("toll_traffic")
    home = Path(tempfile.mkdtemp(prefix="bench-gx-"))
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home), "LAKEHOUSE_SHUFFLE_PARTITIONS": "2"})
    spark = build_spark_session(settings, "bench-gx")
    records = generate_records(GeneratorConfig(events=args.events, seed=3))[0]
    lines = [line for _, _, line in records][: args.events]
    raw = literal_frame(spark, "value string, source_file string", [(line, "bench.jsonl") for line in lines])
    parsed = tx.parse_events(raw, pipeline).persist()
    parsed.count()

    spark_rules = timed(lambda: parsed.groupBy("reason").count().collect(), args.repeat)
    started = time.perf_counter()
    from lakehouse.audit.quality import gx_context, validate_frame

    context = gx_context(settings)
    gx_setup = time.perf_counter() - started
    valid = tx.valid_events(parsed, pipeline)
    gx_validation = timed(
        lambda: validate_frame(context, suite_path(pipeline.name, RAW_EVENTS), "bench.raw_events", valid), args.repeat
    )
    result = {
        "events": args.events,
        "repeat": args.repeat,
        "spark_rules_seconds_median": statistics.median(spark_rules),
        "gx_import_and_context_seconds": gx_setup,
        "gx_validation_seconds_median": statistics.median(gx_validation),
        "note": "per micro-batch: the routing the stream runs vs a GX validation of the same suite",
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "gx_micro_batch.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
