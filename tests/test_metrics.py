"""Operating the stream: its metrics endpoint reads the figures `lakehouse health` judges, the alert
rules hold under promtool, the dashboard's queries parse, the Alertmanager's configuration holds under
amtool, and a real Prometheus scrapes a running stream and sees the stall alert fire and resolve, both
of which its Alertmanager delivers to a webhook."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.ops.health import check_stream_health
from lakehouse.ops.metrics import start_endpoint, target_file
from lakehouse.ops.stream_figures import FileCache, read_stream_figures
from lakehouse.storage.catalog import BACKFILL_RUNS, STREAM_PROGRESS, pipeline_tables
from lakehouse.storage.ops_tables import append_rows
from tests.conftest import make_settings

PROJECT = Path(__file__).resolve().parents[1]
MONITORING = PROJECT / "monitoring"
PIPELINE = "toll_traffic"


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """The endpoint's samples, by name and sorted labels."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _progress(batch_id: int, started: datetime, source_file: str, **counts: int) -> dict:
    return {
        "pipeline": PIPELINE,
        "app_id": "speed:toll_traffic:q1",
        "batch_id": batch_id,
        "started_at": started,
        "duration_ms": 1500 + 1000 * batch_id,
        "input_rows": sum(counts.values()),
        "watermark": started - timedelta(minutes=20) if batch_id else None,
        "max_event_time": started - timedelta(minutes=5),
        "panes_emitted": 4,
        "source_files": [source_file],
        "stage_ms": {"parse": 400 + 100 * batch_id, "merge": 300},
        **{"quarantined": 0, "duplicates": 0, "on_time": 0, "late": 0, **counts},
    }


def _a_home_with_two_batches_read_of_three_files(tmp_path: Path, **env: str):
    """A home whose log holds three files, the stream having read the first two, quarantined three
    lines for two reasons, and whose one backfill failed."""
    settings = make_settings(tmp_path / "home", **env)
    generate(settings, GeneratorConfig(events=300, events_per_file=100, seed=5, malformed_fraction=0))
    files = sorted(str(p) for p in Path(settings.pipeline_log_uri(PIPELINE).removeprefix("file:")).rglob("*.jsonl"))
    now = datetime.now(UTC)
    rows = [
        _progress(0, now - timedelta(seconds=40), f"file:{files[0]}", on_time=95, quarantined=2, duplicates=3),
        _progress(1, now - timedelta(seconds=20), f"file:{files[1]}", on_time=90, late=9, quarantined=1),
    ]
    append_rows(STREAM_PROGRESS.uri(settings), STREAM_PROGRESS.arrow_schema, rows, settings)
    quarantine = pipeline_tables(get_pipeline(PIPELINE)).quarantine
    reasons = ["bad_json", "bad_json", "missing_field:plate"]
    append_rows(
        quarantine.uri(settings),
        quarantine.arrow_schema,
        [{"raw": "{", "reason": reason, "app_id": "speed:toll_traffic:q1", "batch_id": 0} for reason in reasons],
        settings,
    )
    run = {"run_id": "r1", "pipeline": PIPELINE, "status": "failed", "started_at": now - timedelta(hours=1)}
    append_rows(BACKFILL_RUNS.uri(settings), BACKFILL_RUNS.arrow_schema, [run], settings)
    return settings, files


def test_the_endpoint_exports_the_figures_health_judges(tmp_path):
    settings, files = _a_home_with_two_batches_read_of_three_files(tmp_path)
    endpoint = start_endpoint(settings, PIPELINE, index_ids=lambda: 1234)
    try:
        samples = scrape(endpoint.port)
        figures = read_stream_figures(settings, PIPELINE, datetime.now(UTC))
        verdict = check_stream_health(settings, PIPELINE, datetime.now(UTC))
    finally:
        endpoint.close()
    assert json.loads(target_file(settings, PIPELINE).read_text()) == [
        {"targets": [f"127.0.0.1:{endpoint.port}"], "labels": {"pipeline": PIPELINE}}
    ]
    mine = (("pipeline", PIPELINE),)

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted({"pipeline": PIPELINE, **labels}.items())))]

    assert verdict.ok and value("lakehouse_stream_healthy") == 1 and value("lakehouse_stream_falling_behind") == 0
    assert value("lakehouse_stream_batches_total") == figures.batches == 2
    fates = {"on_time": 185, "late": 9, "duplicate": 3, "quarantined": 3}
    assert {fate: value("lakehouse_stream_events_total", fate=fate) for fate in fates} == fates == figures.events
    reasons = {"bad_json": 2, "missing_field:plate": 1}
    assert {r: value("lakehouse_stream_quarantined_by_reason_total", reason=r) for r in reasons} == reasons
    assert value("lakehouse_stream_batch_duration_seconds_count") == 2
    assert value("lakehouse_stream_batch_duration_seconds_sum") == pytest.approx(4.0)
    assert value("lakehouse_stream_batch_duration_seconds_bucket", le="2.0") == 1
    assert value("lakehouse_stream_dedupe_index_ids") == 1234
    stages = {"parse": 0.9, "merge": 0.6}
    assert {s: value("lakehouse_stream_batch_stage_seconds_total", stage=s) for s in stages} == stages
    assert figures.stage_seconds == stages
    assert value("lakehouse_backfill_last_run_failed") == 1
    assert value("lakehouse_backfill_runs_total", status="failed") == 1
    # The log's third file came after the second, the newest read: the processing lag between them.
    assert value("lakehouse_stream_processing_lag_seconds") == pytest.approx(figures.processing_lag)
    assert figures.processing_lag > 0
    for name, figure in (
        ("lakehouse_stream_last_batch_age_seconds", figures.last_batch_age),
        ("lakehouse_stream_event_lag_seconds", figures.event_lag),
        ("lakehouse_stream_watermark_lag_seconds", figures.watermark_lag),
        ("lakehouse_stream_speed_age_seconds", figures.speed_age),
    ):
        assert value(name) == pytest.approx(figure, abs=2), name
    assert value("lakehouse_stream_event_lag_seconds") == pytest.approx(20 + 300, abs=2)
    assert ("lakehouse_audit_unexplained", mine) not in samples  # no audit has run


def test_stage_seconds_are_read_from_a_progress_table_that_gained_the_column_between_two_scrapes(tmp_path):
    settings = make_settings(tmp_path / "home")
    uri, now = STREAM_PROGRESS.uri(settings), datetime.now(UTC)
    before_stages = STREAM_PROGRESS.arrow_schema.remove(STREAM_PROGRESS.arrow_schema.get_field_index("stage_ms"))
    first = _progress(0, now - timedelta(seconds=20), "file:/a", on_time=5)
    append_rows(uri, before_stages, [{k: v for k, v in first.items() if k != "stage_ms"}], settings)
    cache = FileCache()
    assert read_stream_figures(settings, PIPELINE, now, cache=cache).stage_seconds == {}
    append_rows(uri, STREAM_PROGRESS.arrow_schema, [_progress(1, now - timedelta(seconds=10), "file:/b")], settings)
    figures = read_stream_figures(settings, PIPELINE, now, cache=cache)
    assert figures.batches == 2 and figures.stage_seconds == {"merge": 0.3, "parse": 0.5}


def test_a_stale_stream_is_unhealthy_in_both_health_and_the_endpoint(tmp_path):
    settings, _ = _a_home_with_two_batches_read_of_three_files(tmp_path, LAKEHOUSE_STREAM_MAX_STALENESS="10s")
    endpoint = start_endpoint(settings, PIPELINE, index_ids=lambda: None)
    try:
        samples = scrape(endpoint.port)
    finally:
        endpoint.close()
    verdict = check_stream_health(settings, PIPELINE, datetime.now(UTC))
    assert not verdict.ok and "is stale" in verdict.message
    mine = (("pipeline", PIPELINE),)
    assert samples[("lakehouse_stream_healthy", mine)] == 0
    assert samples[("lakehouse_stream_max_staleness_seconds", mine)] == 10
    assert samples[("lakehouse_stream_last_batch_age_seconds", mine)] > 10
    assert ("lakehouse_stream_dedupe_index_ids", mine) not in samples


def test_the_endpoint_listens_on_the_bind_address_and_names_it_for_prometheus(tmp_path):
    from lakehouse.services.process import port_answers

    settings = make_settings(tmp_path, LAKEHOUSE_BIND_ADDRESS="127.0.0.2")  # another loopback address
    endpoint = start_endpoint(settings, PIPELINE, index_ids=lambda: None)
    try:
        assert port_answers(endpoint.port, "127.0.0.2") and not port_answers(endpoint.port)
    finally:
        endpoint.close()
    targets = json.loads(target_file(settings, PIPELINE).read_text())[0]["targets"]
    assert targets == [f"127.0.0.2:{endpoint.port}"]


def test_metrics_port_off_serves_nothing_and_a_bad_port_is_a_one_line_error(tmp_path):
    from lakehouse.errors import LakehouseError

    assert start_endpoint(make_settings(tmp_path, LAKEHOUSE_METRICS_PORT="off"), PIPELINE, lambda: None) is None
    with pytest.raises(LakehouseError, match="LAKEHOUSE_METRICS_PORT must be a port number, 0"):
        make_settings(tmp_path, LAKEHOUSE_METRICS_PORT="ninety")


# promtool comes with Debian's prometheus package, which scripts/system-deps.sh installs: these run
# in the tier after it (make test-rest), not beside it.
@pytest.mark.services
def test_the_alert_rules_pass_their_promtool_tests():
    finished = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yml"], cwd=MONITORING, capture_output=True, text=True, timeout=60
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "SUCCESS" in finished.stdout


@pytest.mark.services
def test_every_query_of_the_dashboard_parses_as_promql(tmp_path):
    """promtool parses each expression as a recording rule: a query that is not PromQL fails."""
    import yaml

    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(queries) >= 15
    rules = [{"record": f"dashboard:query_{i}", "expr": query} for i, query in enumerate(queries)]
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    finished = subprocess.run(
        ["promtool", "check", "rules", "queries.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    # And a query that is not PromQL is caught the same way.
    (tmp_path / "bad.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "d", "rules": [{"record": "a:b", "expr": "rate(x[5m]"}]}]})
    )
    assert subprocess.run(["promtool", "check", "rules", "bad.yml"], cwd=tmp_path, capture_output=True).returncode == 1


WEBHOOK = "https://chat.example/hooks/T0/secret"


def test_the_alertmanager_sends_every_alert_to_the_webhook_firing_and_resolved_and_prometheus_finds_it(tmp_path):
    import yaml

    from lakehouse.services import alertmanager, prometheus

    settings = make_settings(
        tmp_path,
        LAKEHOUSE_ALERT_WEBHOOK_URL=WEBHOOK,
        LAKEHOUSE_ALERT_GROUP_WAIT="1s",
        LAKEHOUSE_ALERT_GROUP_INTERVAL="2s",
    )
    config = yaml.safe_load(alertmanager.config_text(settings))
    route = config["route"]
    assert (route["group_wait"], route["group_interval"], route["group_by"]) == ("1s", "2s", ["alertname", "pipeline"])
    receiver = next(r for r in config["receivers"] if r["name"] == route["receiver"])
    assert receiver["webhook_configs"] == [{"url": WEBHOOK, "send_resolved": True}]
    assert WEBHOOK not in repr(settings)  # a chat's webhook URL is a secret
    # Prometheus sends to whatever address the Alertmanager names in the home.
    sent_to = yaml.safe_load(prometheus.config_text(settings, tmp_path / "alerts.yml"))["alerting"]["alertmanagers"]
    assert sent_to == [{"file_sd_configs": [{"files": [str(tmp_path / "alertmanager" / "targets.json")]}]}]
    # Without a webhook the Alertmanager still runs and holds the alerts, and its configuration says so.
    defaults = alertmanager.config_text(make_settings(tmp_path))
    assert yaml.safe_load(defaults)["receivers"] == [{"name": route["receiver"]}]
    assert "# sent nowhere: LAKEHOUSE_ALERT_WEBHOOK_URL is not set" in defaults
    assert yaml.safe_load(defaults)["route"] | {"receiver": None} == {
        "receiver": None,
        "group_by": ["alertname", "pipeline"],
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "4h",
    }


# amtool comes with Debian's prometheus-alertmanager package (scripts/system-deps.sh), as promtool with
# prometheus: the same tier.
@pytest.mark.services
@pytest.mark.parametrize("webhook", [WEBHOOK, ""], ids=["webhook", "none"])
def test_amtool_accepts_the_generated_configuration_and_routes_the_stall_alert_to_its_receiver(tmp_path, webhook):
    from lakehouse.services import alertmanager

    config = tmp_path / "alertmanager.yml"
    config.write_text(alertmanager.config_text(make_settings(tmp_path, LAKEHOUSE_ALERT_WEBHOOK_URL=webhook)))
    checked = subprocess.run(["amtool", "check-config", str(config)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    labels = ["alertname=LakehouseStreamStalled", f"pipeline={PIPELINE}", "severity=page"]
    routed = subprocess.run(
        ["amtool", "config", "routes", "test", f"--config.file={config}", "--verify.receivers=lakehouse", *labels],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert routed.returncode == 0, routed.stdout + routed.stderr


@pytest.mark.services
def test_the_alertmanager_runs_a_configuration_of_ones_own_on_the_bind_address(tmp_path):
    """An operator's receivers (email here) instead of the generated webhook; a missing file is refused."""
    import yaml

    from lakehouse.errors import LakehouseError
    from lakehouse.services import alertmanager
    from lakehouse.services.process import port_answers

    own = tmp_path / "team.yml"
    own.write_text(
        "global: {smtp_smarthost: 'mail.example:25', smtp_from: 'alerts@example.org'}\n"
        "route: {receiver: on-call}\n"
        "receivers: [{name: on-call, email_configs: [{to: 'on-call@example.org', send_resolved: true}]}]\n"
    )
    missing = make_settings(tmp_path / "other", LAKEHOUSE_ALERTMANAGER_CONFIG=str(tmp_path / "nowhere.yml"))
    with pytest.raises(LakehouseError, match="^LAKEHOUSE_ALERTMANAGER_CONFIG names no file: .*nowhere.yml$"):
        alertmanager.start(missing)
    assert not (tmp_path / "other").exists()  # nothing written
    settings = make_settings(
        tmp_path / "home",
        LAKEHOUSE_ALERTMANAGER_CONFIG=str(own),
        LAKEHOUSE_ALERTMANAGER_PORT="0",
        LAKEHOUSE_BIND_ADDRESS="127.0.0.2",
    )
    try:
        report = alertmanager.start(settings)
        url = report["url"]
        port = int(url.rsplit(":", 1)[1])
        assert url.startswith("http://127.0.0.2:") and not port_answers(port)  # not on 127.0.0.1
        with urllib.request.urlopen(f"{url}/api/v2/status", timeout=10) as answer:
            running = yaml.safe_load(json.loads(answer.read())["config"]["original"])
        assert [(r["name"], r["email_configs"][0]["to"]) for r in running["receivers"]] == [
            ("on-call", "on-call@example.org")
        ]
        assert report["config"] == str(own) and not (tmp_path / "home" / "alertmanager" / "alertmanager.yml").exists()
        targets = json.loads(alertmanager.targets_file(settings).read_text())
        assert targets == [{"targets": [f"127.0.0.2:{port}"]}]
    finally:
        assert alertmanager.stop(settings)
    assert not alertmanager.status(settings)["up"]


# Every figure of a running stream, as Prometheus names it.
FIGURES = (
    "lakehouse_stream_event_lag_seconds",
    "lakehouse_stream_watermark_lag_seconds",
    "lakehouse_stream_processing_lag_seconds",
    "lakehouse_stream_speed_age_seconds",
    "lakehouse_stream_events_total",
    "lakehouse_stream_batch_duration_seconds_bucket",
    "lakehouse_stream_dedupe_index_ids",
    "lakehouse_stream_quarantined_by_reason_total",
    "lakehouse_audit_unexplained",
)


def prometheus_api(url: str, path: str, **params: str) -> dict:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}/api/v1/{path}{query}", timeout=10) as answer:
        return json.loads(answer.read())["data"]


def until(condition, seconds: float, what: str, process: subprocess.Popen | None = None):
    """``condition()``'s first truthy value, polled every half second; fails after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            pytest.fail(f"the stream ended while waiting for {what}: {process.stderr.read()[-2000:]}")
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def stall_alert(url: str) -> str | None:
    """The state of the stall alert in Prometheus (pending, firing), None when it is not raised."""
    alerts = prometheus_api(url, "alerts")["alerts"]
    return next((a["state"] for a in alerts if a["labels"]["alertname"] == "LakehouseStreamStalled"), None)


def start_stream(env: dict[str, str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "lakehouse.cli", "stream"]
    pipes = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    return subprocess.Popen(command, env=env, start_new_session=True, **pipes, text=True)


def stop_stream(stream: subprocess.Popen) -> None:
    """SIGKILL the stream's process session; a stream already stopped (a test failing between its
    stop and its restart) is no error, so that the servers are stopped after it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(stream.pid, signal.SIGKILL)
    stream.wait()


@contextlib.contextmanager
def webhook_receiver(address: str = "127.0.0.1"):
    """A webhook receiver on ``address``, as a team's chat or pager offers one: its URL, and the
    JSON body of every POST it received."""
    bodies: list[dict] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):  # not on the test's output
            pass

    server = ThreadingHTTPServer((address, 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{address}:{server.server_port}/alerts", bodies
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def webhook():
    with webhook_receiver() as received:
        yield received


def stall_notification(bodies: list[dict], status: str, **labels: str) -> dict | None:
    """The stall alert with ``labels`` (the pipeline's by default) as a notification with ``status``
    (firing, resolved) carried it, if one came."""
    labels = labels or {"pipeline": PIPELINE}
    return next(
        (
            alert
            for body in list(bodies)
            if body["status"] == status
            for alert in body["alerts"]
            if alert["status"] == status
            and alert["labels"]["alertname"] == "LakehouseStreamStalled"
            and labels.items() <= alert["labels"].items()
        ),
        None,
    )


def watched_stream_settings(metrics_port: int, webhook_url: str) -> dict[str, str]:
    """A stream, its Prometheus and its Alertmanager at a pace a test sees within seconds."""
    return {
        "LAKEHOUSE_METRICS_PORT": str(metrics_port),  # the same after a restart: the same target comes back
        "LAKEHOUSE_TRIGGER_INTERVAL": "1s",
        "LAKEHOUSE_MAX_FILES_PER_TRIGGER": "1",
        "LAKEHOUSE_PROMETHEUS_PORT": "0",
        "LAKEHOUSE_PROMETHEUS_SCRAPE_INTERVAL": "1s",
        "LAKEHOUSE_ALERT_FOR": "2s",
        "LAKEHOUSE_ALERTMANAGER_PORT": "0",
        "LAKEHOUSE_ALERT_WEBHOOK_URL": webhook_url,
        "LAKEHOUSE_ALERT_GROUP_WAIT": "1s",
        "LAKEHOUSE_ALERT_GROUP_INTERVAL": "1s",
        # Prometheus, Alertmanager and the stream's endpoint on another loopback address, as on a host's
        # address in a deployment across hosts: they find each other there.
        "LAKEHOUSE_BIND_ADDRESS": "127.0.0.2",
    }


def scraped(url: str) -> set[str]:
    """The names of the pipeline's series in Prometheus."""
    names = prometheus_api(url, "query", query=f'{{__name__=~"lakehouse_.+", pipeline="{PIPELINE}"}}')
    return {series["metric"]["__name__"] for series in names["result"]}


@pytest.mark.slow
def test_prometheus_scrapes_every_figure_of_a_running_stream_and_its_stall_alert_fires_and_resolves_at_a_webhook(
    spark, tmp_path, cli_env, webhook
):
    from lakehouse.audit.reconcile import Auditor
    from lakehouse.services import alertmanager, prometheus
    from tests.services import free_port

    webhook_url, notifications = webhook
    watched = watched_stream_settings(free_port(), webhook_url)
    env = {**cli_env, **watched}
    settings = make_settings(Path(cli_env["LAKEHOUSE_HOME"]), **watched)
    generate(settings, GeneratorConfig(events=900, events_per_file=300, seed=3))
    url = prometheus.start(settings)["url"]
    assert url.startswith("http://127.0.0.2:")
    assert alertmanager.start(settings)["url"].startswith("http://127.0.0.2:")
    stream = start_stream(env)
    try:
        progress = Path(STREAM_PROGRESS.uri(settings).removeprefix("file:")) / "_delta_log"
        until(lambda: len(list(progress.glob("*.json"))) >= 4, 240, "three micro-batches", stream)  # created + 3
        start = datetime(2026, 1, 5, 8, 0)
        Auditor(spark, settings, get_pipeline(PIPELINE)).reconcile(start, start + timedelta(hours=1))
        until(lambda: set(FIGURES) <= scraped(url), 30, "every figure in Prometheus", stream)
        fates = prometheus_api(url, "query", query="lakehouse_stream_events_total")["result"]
        lines = sum(
            len(f.read_text().splitlines()) for f in Path(settings.log_uri.removeprefix("file:")).rglob("*.jsonl")
        )
        assert sum(float(series["value"][1]) for series in fates) == lines  # every record read, one fate each
        assert stall_alert(url) is None and not stall_notification(notifications, "firing")
        stop_stream(stream)
        until(lambda: stall_alert(url) == "firing", 30, "the stall alert to fire")
        fired = until(lambda: stall_notification(notifications, "firing"), 30, "the firing stall alert at the webhook")
        assert fired["generatorURL"].startswith(f"{url}/graph?")  # a link to the rule in this Prometheus
        stream = start_stream(env)
        until(lambda: stall_alert(url) is None, 60, "the stall alert to resolve", stream)
        resolved = until(lambda: stall_notification(notifications, "resolved"), 30, "the stall alert resolved")
        assert (resolved["fingerprint"], resolved["startsAt"]) == (fired["fingerprint"], fired["startsAt"])  # that one
    finally:
        stop_stream(stream)
        alertmanager.stop(settings)
        prometheus.stop(settings)


def test_statsd_lines_become_prometheus_samples_as_statsd_exporter_names_them():
    from lakehouse.ops.statsd_exporter import Sample, metric_name, parse_line

    assert parse_line("airflow.ti_failures:1|c") == Sample("airflow.ti_failures", 1.0, "c")
    assert parse_line("airflow.pool.open_slots.default_pool:-2|g") == Sample(
        "airflow.pool.open_slots.default_pool", -2.0, "g", relative=True
    )
    assert parse_line("airflow.dag_processing.last_duration.x:12.5|ms|@0.5") == Sample(
        "airflow.dag_processing.last_duration.x", 12.5, "ms", rate=0.5
    )
    assert parse_line("no value") is None and parse_line("a:b|c") is None and parse_line("a:1|zz") is None
    assert metric_name("airflow.dagrun.duration.failed.lakehouse_backfill") == (
        "airflow_dagrun_duration_failed_lakehouse_backfill"
    )
    assert metric_name("airflow.ti.finish.my-dag.9task") == "airflow_ti_finish_my_dag_9task"


@pytest.mark.services
def test_the_statsd_exporter_serves_what_airflows_statsd_client_sends(tmp_path):
    """Airflow's own client (the statsd package, which Airflow's StatsD logger wraps) against the exporter
    scripts/airflow.sh runs."""
    import socket

    import statsd

    from tests.services import free_port

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        udp_port = probe.getsockname()[1]
    http_port = free_port()
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home")}
    command = [sys.executable, "-m", "lakehouse.ops.statsd_exporter", "--udp-port", str(udp_port)]
    exporter = subprocess.Popen([*command, "--http-port", str(http_port)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert "StatsD on udp" in exporter.stdout.readline()
        client = statsd.StatsClient("127.0.0.1", udp_port, prefix="airflow")
        client.incr("ti_failures", 3)
        client.gauge("executor.open_slots", 30)
        client.gauge("executor.open_slots", -2, delta=True)
        client.timing("dagrun.duration.success.lakehouse_backfill", 1500)
        names = {"airflow_ti_failures_total", "airflow_executor_open_slots"}

        def scraped() -> dict:
            samples = scrape(http_port)
            return samples if names <= {name for name, _ in samples} else None

        samples = until(scraped, 10, "the samples")
        assert samples[("airflow_ti_failures_total", ())] == 3
        assert samples[("airflow_executor_open_slots", ())] == 28
        timer = until(
            lambda: scrape(http_port).get(("airflow_dagrun_duration_success_lakehouse_backfill_sum", ())),
            10,
            "the timer",
        )
        assert timer == 1.5
        target = json.loads((tmp_path / "home" / "metrics" / "airflow" / "airflow.json").read_text())
        assert target == [{"targets": [f"127.0.0.1:{http_port}"], "labels": {}}]
    finally:
        exporter.kill()
        exporter.wait()
