"""The whole lambda loop on embedded defaults, explained as it goes.

Generate a log with every defect turned on, drain it through the speed layer one file per
micro-batch (so the watermark advances and stragglers turn out late), fold the late events into the
windows the stream served (a correction: each served value retracted, the recomputed one inserted),
recompute the range with the batch layer, audit the speed table against the raw log, then show what
happened and query the result with SQL. The correction runs before the batch layer: after it, the
batch layer's values already hold the late events and a correction would have nothing to change.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import timedelta

from lakehouse.errors import LakehouseError
from lakehouse.location import local_path
from lakehouse.settings import Settings

DEMO_MARKER = ".lakehouse-demo"
# Five files of 2,000 events: five micro-batches of the speed layer, with every fate among them.
DEMO_EVENTS = 10_000
DEMO_QUERIES = (
    (
        "Busiest windows in the serving view (batch where recomputed, speed elsewhere)",
        "SELECT window_start, bridge_id, vehicle_type, vehicles, revenue, source, is_final "
        "FROM gold.toll_traffic ORDER BY vehicles DESC, revenue DESC, window_start, bridge_id LIMIT 5",
    ),
    (
        "Where the speed layer and the batch layer disagree: late events the stream left out",
        "SELECT s.window_start, s.bridge_id, s.vehicle_type, s.vehicles AS speed_vehicles, "
        "b.vehicles AS batch_vehicles, b.revenue - s.revenue AS revenue_missing_from_speed "
        "FROM gold.toll_traffic__speed s JOIN gold.toll_traffic__batch b "
        "USING (window_start, window_end, bridge_id, vehicle_type) "
        "WHERE s.vehicles <> b.vehicles ORDER BY s.window_start, s.bridge_id, s.vehicle_type LIMIT 5",
    ),
    (
        "The correction log: each late window's served value retracted and the recomputed one inserted",
        "SELECT window_start, key, change, values, late_events FROM audit.corrections "
        "ORDER BY window_start, key['bridge_id'], key['vehicle_type'], change DESC LIMIT 6",
    ),
    (
        "Time travel: the speed table after its first micro-batch, versus now",
        "SELECT 'version 1' AS as_of, count(*) AS windows, sum(vehicles) AS vehicles "
        "FROM gold.toll_traffic__speed VERSION AS OF 1 "
        "UNION ALL SELECT 'latest', count(*), sum(vehicles) FROM gold.toll_traffic__speed",
    ),
)


def _fresh_home(settings: Settings) -> None:
    """The demo starts from an empty home; it only ever clears a home that an earlier demo made."""
    home = local_path(settings.home)
    # The Spark service's own folder is not data: a service may be serving this home meanwhile.
    data = [entry for entry in home.iterdir() if entry != settings.service_dir()] if home.exists() else []
    if data:
        if not (home / DEMO_MARKER).exists():
            raise LakehouseError(
                f"{home} holds data that no demo wrote; point LAKEHOUSE_HOME at an empty folder for the demo"
            )
        for entry in data:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    home.mkdir(parents=True, exist_ok=True)
    (home / DEMO_MARKER).write_text("created by `lakehouse demo`; the next demo clears this folder\n")


def _step(text: str) -> float:
    print(f"\n== {text}", flush=True)
    return time.time()


def _write_report(spark, settings: Settings, pipeline, audit) -> str:
    from lakehouse.audit.report import gather_inputs, render_report
    from lakehouse.location import local_path

    path = local_path(settings.home) / "audit-report.html"
    path.write_text(render_report(audit, gather_inputs(spark, settings, pipeline, audit), report_dir=path.parent))
    return str(path)


def _what_happened(spark, settings: Settings, pipeline, generated) -> None:
    """The generator's mix, the fates and tables, and the demo's SQL queries with their answers."""
    from lakehouse.serving.sql import run_sql
    from lakehouse.serving.status import pipeline_status, render_status

    _step("What happened")
    print(
        f"events generated: {generated.records} records in {generated.files} files "
        f"({generated.kinds['valid']} valid events, {generated.kinds['delayed']} of them delayed, "
        f"{generated.kinds['duplicate_copies']} extra copies, "
        f"{sum(v for k, v in generated.kinds.items() if k.startswith('malformed'))} malformed)"
    )
    print(render_status(pipeline_status(settings, pipeline)))

    for title, query in DEMO_QUERIES:
        _step(f"SQL: {title}")
        print(f'lakehouse sql "{query}"\n')
        print(run_sql(spark, settings, query), end="")


def run_demo(settings: Settings, events: int = DEMO_EVENTS) -> None:
    from lakehouse.audit.reconcile import Auditor, render_audit
    from lakehouse.dataflow.pipelines import get_pipeline
    from lakehouse.generator import GeneratorConfig, generate
    from lakehouse.layers.batch import BatchLayer
    from lakehouse.layers.corrections import CorrectionRun
    from lakehouse.layers.speed import run_speed_layer
    from lakehouse.storage.spark import QUICK_START_JAVA_OPTIONS, build_spark_session
    from lakehouse.vocabulary import AuditTarget

    pipeline = get_pipeline("toll_traffic")
    _fresh_home(settings)
    # A mix of everything the platform handles: late events, duplicates and malformed records.
    config = GeneratorConfig(events=events, seed=7, rate=20.0, late_fraction=0.03, late_delay="4m",
                             duplicate_fraction=0.02, malformed_fraction=0.02, events_per_file=2000)  # fmt: skip
    began = _step(f"Generating {events} toll events into the retained log {settings.pipeline_log_uri(pipeline.name)}")
    generated = generate(settings, config, pipeline.name)
    print(json.dumps(generated.as_dict(), indent=1))

    _step("Starting Spark with Delta (local, JARs from the project's cache)")
    # A minute or two of work: a quick-starting JVM, unless the user chose its options.
    spark = build_spark_session(
        settings.replace(driver_java_options=settings.driver_java_options or QUICK_START_JAVA_OPTIONS), "demo"
    )
    speed_settings = settings.replace(max_files_per_trigger=1)
    _step(f"Speed layer: draining the log one file per micro-batch (watermark delay {pipeline.watermark_delay})")
    run_speed_layer(spark, speed_settings, pipeline, available_now=True)

    _step("Late-data correction: the late events folded into the windows the stream served, as retractions")
    correction = CorrectionRun(spark, settings, pipeline).run()
    print(correction.summary())

    start = config.start.replace(tzinfo=None)
    end = start + timedelta(minutes=10)
    _step(f"Batch layer: recomputing [{start:%H:%M}, {end:%H:%M}) from bronze, late events included")
    result = BatchLayer(spark, settings, pipeline).backfill(start, end, source="bronze", chunk="5m")
    print(f"run {result.run_id}: {result.chunks} chunks, {result.events_used} events, {result.rows_written} rows")

    _step("Audit: the speed table against the truth recomputed from the raw log, every difference explained")
    audit = Auditor(spark, settings, pipeline).reconcile(start, start + timedelta(hours=1))
    print(render_audit(audit))
    _step("Audit of the serving view gold.toll_traffic: after the correction, nothing should differ")
    served = Auditor(spark, settings, pipeline).reconcile(start, start + timedelta(hours=1), target=AuditTarget.SERVING)
    print(render_audit(served))
    report = _write_report(spark, settings, pipeline, audit)
    print(f"the speed layer's audit as a page: {report}")

    _what_happened(spark, settings, pipeline, generated)
    print(f'\nDone in {time.time() - began:.0f}s. Query it yourself: .venv/bin/lakehouse sql "SHOW TABLES IN gold"')
    spark.stop()
