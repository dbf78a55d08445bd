"""A stream's metrics endpoint, for Prometheus: each scrape reads the stream's figures
(lakehouse.ops.stream_figures, the ones ``lakehouse health`` judges) and the health verdict on them.

The endpoint runs in the stream's process, on loopback (or LAKEHOUSE_BIND_ADDRESS), on
``LAKEHOUSE_METRICS_PORT`` (0: any free port; off: none). Its address goes to
``<home>/metrics/<pipeline>.json`` in Prometheus's file service-discovery format, which the
Prometheus of ``lakehouse prometheus start`` watches. The file stays when the stream stops, so
Prometheus sees the target down (``up == 0``) instead of forgetting it. Reading at scrape time rather
than counting in the stream keeps the micro-batch free of metrics work and the figures equal to the
tables after a restart.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.ops.health import HealthBounds, HealthVerdict, judge
from lakehouse.ops.stream_figures import DURATION_BUCKETS, FileCache, StreamFigures, read_stream_figures
from lakehouse.settings import Settings
from lakehouse.vocabulary import RunStatus

# What each gauge of a stream's figures means, by its name (without the ``lakehouse_`` prefix).
GAUGES = {
    "stream_last_batch_timestamp_seconds": "when the last micro-batch started (Unix time)",
    "stream_last_batch_age_seconds": "seconds since the last micro-batch started",
    "stream_event_lag_seconds": "now less the newest event time the stream has read",
    "stream_watermark_lag_seconds": "now less the last micro-batch's watermark",
    "stream_processing_lag_seconds": "receive time of the log's newest file less that of the newest file read",
    "stream_speed_age_seconds": "seconds since the stream last changed gold __speed (its freshness)",
    "stream_dedupe_index_ids": "ids in the stream's index of accepted ids (its driver's memory)",
    "stream_healthy": "1 when lakehouse health finds the stream healthy, else 0",
    "stream_falling_behind": "1 when lakehouse health finds the stream falling behind, else 0",
    "stream_max_staleness_seconds": "LAKEHOUSE_STREAM_MAX_STALENESS: stale past this",
    "stream_lag_tolerance_seconds": "LAKEHOUSE_STREAM_LAG_TOLERANCE: a lag below this is never falling behind",
    "audit_unexplained": "rows the pipeline's last audit could not explain",
    "backfill_last_run_failed": "1 when the pipeline's last backfill run failed, else 0",
}


def _timestamp(moment: datetime | None) -> float | None:
    return None if moment is None else moment.replace(tzinfo=UTC).timestamp()


def gauge_values(
    figures: StreamFigures, verdict: HealthVerdict, bounds: HealthBounds, index_ids: int | None
) -> dict[str, float | None]:
    """Each gauge's value (None: not known yet, left out of the scrape).

    Args:
        figures: the stream's figures.
        verdict: the health verdict on them.
        bounds: what the verdict held them against.
        index_ids: the size of the stream's index of accepted ids (None: no index yet).
    """
    last = figures.last_batch or {}
    return {
        "stream_last_batch_timestamp_seconds": _timestamp(last.get("started_at")),
        "stream_last_batch_age_seconds": figures.last_batch_age,
        "stream_event_lag_seconds": figures.event_lag,
        "stream_watermark_lag_seconds": figures.watermark_lag,
        "stream_processing_lag_seconds": figures.processing_lag,
        "stream_speed_age_seconds": figures.speed_age,
        "stream_dedupe_index_ids": index_ids,
        "stream_healthy": float(verdict.ok),
        "stream_falling_behind": float(verdict.falling_behind),
        "stream_max_staleness_seconds": bounds.max_staleness.total_seconds(),
        "stream_lag_tolerance_seconds": bounds.tolerance.total_seconds(),
        "audit_unexplained": figures.audit_unexplained,
        "backfill_last_run_failed": None
        if figures.last_backfill_status is None
        else float(figures.last_backfill_status == RunStatus.FAILED),
    }


def metric_families(figures: StreamFigures, verdict: HealthVerdict, bounds: HealthBounds, index_ids: int | None):
    """The stream's metrics, labelled with its pipeline, as prometheus_client metric families.

    Args:
        figures: the stream's figures.
        verdict: the health verdict on them.
        bounds: what the verdict held them against.
        index_ids: the size of the stream's index of accepted ids (None: no index yet).
    """
    from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

    pipeline = figures.pipeline
    for name, value in gauge_values(figures, verdict, bounds, index_ids).items():
        if value is not None:
            gauge = GaugeMetricFamily(f"lakehouse_{name}", GAUGES[name], labels=["pipeline"])
            gauge.add_metric([pipeline], value)
            yield gauge
    yield _counter("stream_batches", "micro-batches committed", pipeline, None, {None: figures.batches})
    yield _counter("stream_events", "records read, by fate (one fate each)", pipeline, "fate", figures.events)
    yield _counter(
        "stream_quarantined_by_reason", "records quarantined, by reason", pipeline, "reason", figures.quarantine_reasons
    )
    yield _counter("backfill_runs", "backfill runs, by status", pipeline, "status", figures.backfill_runs)
    yield _counter(
        "stream_batch_stage_seconds",
        "seconds the micro-batches spent in each stage (ops.stream_progress.stage_ms)",
        pipeline,
        "stage",
        figures.stage_seconds,
    )
    durations = HistogramMetricFamily(
        "lakehouse_stream_batch_duration_seconds", "micro-batch durations", labels=["pipeline"]
    )
    buckets = [(str(bound), count) for bound, count in zip(DURATION_BUCKETS, figures.duration_counts, strict=True)]
    durations.add_metric([pipeline], [*buckets, ("+Inf", figures.batches)], figures.duration_sum)
    yield durations


def _counter(name: str, documentation: str, pipeline: str, label: str | None, counts: dict):
    """A counter family ``lakehouse_<name>_total``, one sample per key of ``counts`` (its ``label``).

    Args:
        name: the name, without prefix and suffix.
        documentation: its help line.
        pipeline: the pipeline label's value.
        label: the name of the label the keys of ``counts`` are (None: one sample, no such label).
        counts: the values by that label's value.
    """
    from prometheus_client.core import CounterMetricFamily

    labels = ["pipeline", label] if label else ["pipeline"]
    family = CounterMetricFamily(f"lakehouse_{name}", documentation, labels=labels)
    for key, count in sorted(counts.items(), key=lambda item: str(item[0])):
        family.add_metric([pipeline, str(key)] if label else [pipeline], count)
    return family


class StreamCollector:
    """A prometheus_client collector of one pipeline's stream: its figures read at each scrape."""

    def __init__(self, settings: Settings, pipeline: str, index_ids: Callable[[], int | None]):
        self.settings = settings
        self.pipeline = pipeline
        self.index_ids = index_ids
        self.bounds = HealthBounds.of(settings)
        self.progress = FileCache()

    def collect(self):
        figures = read_stream_figures(
            self.settings, self.pipeline, datetime.now(UTC), self.bounds.lag_batches + 1, self.progress
        )
        yield from metric_families(figures, judge(figures, self.bounds), self.bounds, self.index_ids())


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A running metrics endpoint: its port, and the service-discovery file that names it."""

    port: int
    target_file: Path
    server: object

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def target_file(settings: Settings, pipeline: str) -> Path:
    """Where a pipeline's stream writes its endpoint's address (Prometheus file service discovery)."""
    return settings.metrics_dir() / f"{pipeline}.json"


def start_endpoint(settings: Settings, pipeline: str, index_ids: Callable[[], int | None]) -> Endpoint | None:
    """Serve the pipeline's metrics on the bind address and write its address for Prometheus (None
    when ``LAKEHOUSE_METRICS_PORT`` is off).

    Args:
        settings: the port, and where the tables and the home are.
        pipeline: the pipeline whose stream this is.
        index_ids: the size of the stream's index of accepted ids, asked at each scrape.
    """
    from prometheus_client import CollectorRegistry, start_http_server

    from lakehouse.errors import LakehouseError
    from lakehouse.services.process import write_json

    port = settings.metrics_port_number()
    if port is None:
        return None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StreamCollector(settings, pipeline, index_ids))
    try:
        server, _ = start_http_server(port, addr=settings.bind_address, registry=registry)
    except OSError as error:
        raise LakehouseError(
            f"the metrics endpoint cannot listen on port {port} (LAKEHOUSE_METRICS_PORT): {error}"
        ) from None
    path = target_file(settings, pipeline)
    path.parent.mkdir(parents=True, exist_ok=True)
    address = f"{settings.bind_address}:{server.server_port}"
    write_json(path, [{"targets": [address], "labels": {"pipeline": pipeline}}])
    return Endpoint(server.server_port, path, server)


@contextlib.contextmanager
def stream_endpoint(
    settings: Settings, pipeline: str, index_ids: Callable[[], int | None]
) -> Iterator[Endpoint | None]:
    """``start_endpoint`` for as long as the block runs.

    Args:
        settings: the port, and where the tables and the home are.
        pipeline: the pipeline whose stream this is.
        index_ids: the size of the stream's index of accepted ids, asked at each scrape.
    """
    endpoint = start_endpoint(settings, pipeline, index_ids)
    try:
        yield endpoint
    finally:
        if endpoint is not None:
            endpoint.close()
