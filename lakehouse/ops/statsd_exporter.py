"""Airflow's metrics for Prometheus: a StatsD exporter on loopback, which ``scripts/airflow.sh start``
runs beside Airflow's processes (``python -m lakehouse.ops.statsd_exporter``).

Airflow 3 sends its metrics as StatsD datagrams (``[metrics] statsd_on``); Prometheus scrapes.
Prometheus's own statsd_exporter is not a Debian package, and Prometheus 2.42 takes no OpenTelemetry
pushes, so this small one translates, as statsd_exporter does without a mapping file: a name's dots
become underscores (``airflow.dagrun.duration.failed.lakehouse_backfill`` becomes
``airflow_dagrun_duration_failed_lakehouse_backfill``), a counter gains ``_total``, a timer becomes a
summary in seconds, and a gauge keeps its last value (or moves by a signed one). Its address goes to
``<home>/metrics/airflow/airflow.json`` for the Prometheus of ``lakehouse prometheus start``.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import socket
import threading

_NOT_IN_A_NAME = re.compile(r"[^a-zA-Z0-9_:]")


@dataclasses.dataclass(frozen=True)
class Sample:
    """One StatsD line: ``<name>:<value>|<type>[|@<rate>][|#<tags>]``."""

    name: str
    value: float
    kind: str  # c, g, ms, h, d or s
    relative: bool = False  # a gauge's +n / -n
    rate: float = 1.0


def metric_name(statsd_name: str) -> str:
    """A StatsD name as a Prometheus metric name."""
    name = _NOT_IN_A_NAME.sub("_", statsd_name.replace(".", "_"))
    return f"_{name}" if name[:1].isdigit() else name


def parse_line(line: str) -> Sample | None:
    """A StatsD line as a sample (None when it is not one: the exporter skips it)."""
    name, _, rest = line.strip().partition(":")
    fields = rest.split("|")
    if not name or len(fields) < 2 or fields[1] not in ("c", "g", "ms", "h", "d", "s"):
        return None
    rate = next((f[1:] for f in fields[2:] if f.startswith("@")), "1")
    try:
        return Sample(name, float(fields[0]), fields[1], fields[0][:1] in "+-" and fields[1] == "g", float(rate))
    except ValueError:
        return None


class Translator:
    """Keeps the Prometheus metrics the samples made, in a registry of their own."""

    def __init__(self, registry):
        self.registry = registry
        self.metrics: dict[str, object] = {}
        self.lock = threading.Lock()

    def add(self, sample: Sample) -> None:
        from prometheus_client import Counter, Gauge, Summary

        if sample.kind == "s":  # sets count distinct values: nothing Airflow sends
            return
        name = metric_name(sample.name)
        kind = {"c": Counter, "g": Gauge}.get(sample.kind, Summary)
        with self.lock:
            metric = self.metrics.get(name)
            if metric is None:
                try:
                    metric = kind(name, f"StatsD {sample.name}", registry=self.registry)
                except ValueError:  # its series would collide with another metric's (x_count, say)
                    metric = False
                self.metrics[name] = metric
            if not isinstance(metric, kind):  # the same name sent as another type: the first one stays
                return
            if kind is Counter:
                metric.inc(max(sample.value, 0) / (sample.rate or 1))
            elif kind is Gauge:
                metric.inc(sample.value) if sample.relative else metric.set(sample.value)
            else:
                metric.observe(sample.value / 1000 if sample.kind == "ms" else sample.value)

    def receive(self, datagram: bytes) -> None:
        for line in datagram.decode("utf-8", "replace").splitlines():
            sample = parse_line(line)
            if sample is not None:
                self.add(sample)


def serve(udp_port: int, http_port: int, target_file: str | None, http_host: str = "127.0.0.1") -> None:
    """Receive StatsD on ``udp_port`` (on loopback: only Airflow's processes on this host send) and
    serve the metrics on ``http_host``:``http_port`` (0: any free port), until killed.

    Args:
        udp_port: where Airflow sends its datagrams.
        http_port: where Prometheus scrapes.
        target_file: where to write the HTTP address for Prometheus's file service discovery (None: nowhere).
        http_host: the address Prometheus scrapes: the host's own across hosts, where it runs on another.
    """
    from prometheus_client import CollectorRegistry, start_http_server

    from lakehouse.services.process import write_json

    translator = Translator(CollectorRegistry(auto_describe=True))
    server, _ = start_http_server(http_port, addr=http_host, registry=translator.registry)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", udp_port))
    metrics = f"{http_host}:{server.server_port}"
    if target_file:
        write_json(_path(target_file), [{"targets": [metrics], "labels": {}}])
    print(f"StatsD on udp 127.0.0.1:{receiver.getsockname()[1]}, metrics on {metrics}", flush=True)
    while True:
        translator.receive(receiver.recv(65535))


def _path(target_file: str):
    from pathlib import Path

    path = Path(target_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def main(argv: list[str] | None = None) -> None:
    from lakehouse.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m lakehouse.ops.statsd_exporter", description=__doc__)
    parser.add_argument("--udp-port", type=int, default=8125, help="StatsD's port (Airflow's statsd_port)")
    parser.add_argument("--http-port", type=int, default=9102, help="the metrics' port (0: any free one)")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    serve(
        args.udp_port, args.http_port, str(settings.metrics_dir() / "airflow" / "airflow.json"), settings.bind_address
    )


if __name__ == "__main__":
    main()
