"""What an audit's Data Docs cost as results pile up: GX's whole-site build (every stored result
rendered again, then every page's CDN links rewritten) against the build an audit now runs (its own
results and the index, ``lakehouse.audit.quality.rebuild_docs``), with 1, 200 and 1,000 results
stored. The stored results are copies of one real validation of the bronze suite, each under its
own run time. Writes bench/results/data_docs.json and appends the figures to bench/history.jsonl.

    .venv/bin/python -m bench.data_docs [--stored 1,200,1000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SUITE = Path(__file__).resolve().parent.parent / "expectations" / "toll_traffic.bronze.json"
ASSET = "toll_traffic.bronze"


def store_copies(result_file: Path, count: int) -> None:
    """Copies of a stored validation result beside it, each under a run time of its own, up to ``count``."""
    document = json.loads(result_file.read_text())
    runs = result_file.parent.parent
    for number in range(len(list(runs.iterdir())), count):
        clock = f"{number // 3600:02d}{number // 60 % 60:02d}{number % 60:02d}"
        document["meta"]["run_id"]["run_time"] = f"2025-01-01T{clock[:2]}:{clock[2:4]}:{clock[4:]}+00:00"
        copy = runs / f"20250101T{clock}.000000Z" / result_file.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(json.dumps(document))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stored", default="1,200,1000", help="results stored before each measurement")
    args = parser.parse_args()

    from lakehouse.audit import quality
    from lakehouse.audit.offline_docs import localize
    from lakehouse.settings import Settings
    from lakehouse.storage.spark import build_spark_session

    home = tempfile.mkdtemp(prefix="bench-data-docs-")
    # The copies are dated 2025: kept, as a site that has gathered them within its retention keeps them.
    settings = Settings.from_env({"LAKEHOUSE_HOME": home, "LAKEHOUSE_DATA_DOCS_RETENTION": "3650d"})
    spark = build_spark_session(settings, "bench-data-docs")
    from pyspark.logger import PySparkLogger

    # The frame has two of the suite's columns: the expectations on the others fail by design (the
    # pages still render each one), and PySpark would log each failed query with its JVM stack.
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True
    frame = spark.createDataFrame([("e1", "bridge-01")], "event_id string, bridge_id string")
    context = quality.gx_context(settings)
    result = quality.validate_frame(context, SUITE, ASSET, frame)
    stored = next(quality.validation_store(settings).rglob("*.json"))
    figures = []
    for count in (int(n) for n in args.stored.split(",")):
        store_copies(stored, count)
        started = time.perf_counter()
        context.build_data_docs(site_names=[quality.DOCS_SITE])
        localize(quality.data_docs_dir(settings))
        whole_site = time.perf_counter() - started
        started = time.perf_counter()
        quality.rebuild_docs(context, settings, [(ASSET, ASSET, result.meta["run_id"])])
        audits_own = time.perf_counter() - started
        figures.append(
            {"stored_results": count, "whole_site_s": round(whole_site, 2), "audits_pages_s": round(audits_own, 2)}
        )
        print(json.dumps(figures[-1]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "data_docs.json").write_text(json.dumps({"figures": figures}, indent=1))
    record(figures)


def record(figures: list[dict]) -> None:
    """The figures as lines of bench/history.jsonl, each against the whole-site build as its baseline."""
    import subprocess
    from datetime import UTC, datetime

    from bench import history

    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or None
    rows = [
        {
            "figure": f"an audit's Data Docs build vs the whole site's, {row['stored_results']} results stored",
            "value": row["audits_pages_s"],
            "unit": "s",
            "baseline": row["whole_site_s"],
            "ratio": round(row["audits_pages_s"] / row["whole_site_s"], 3),
            "target": "",
        }
        for row in figures
    ]
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    lines = history.records({"data_docs": rows}, date=date, commit=commit, events=0, runs=1, note="bench/data_docs.py")
    history.append(history.HISTORY, lines)


if __name__ == "__main__":
    main()
