"""A Prometheus on loopback (``lakehouse prometheus start``, ``make prometheus``; or on
LAKEHOUSE_BIND_ADDRESS, a host's address in a deployment across hosts) that scrapes the
streams' metrics endpoints (lakehouse.ops.metrics), evaluates the alert rules of
``monitoring/alerts.yml`` and sends what fires to the home's Alertmanager
(lakehouse.services.alertmanager), once that names its address.

The server is Debian's ``prometheus`` package (scripts/system-deps.sh installs it). Its
configuration, time-series data and log stay in the home's ``prometheus/`` folder, so a restart keeps
its history. It finds the streams through the files they write under ``<home>/metrics/`` (file
service discovery, watched as they change), and the Spark service's and Airflow's metrics through
the same folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.services import alertmanager
from lakehouse.services.process import PORT_FILE, ServerFolder, free_port, refuse_taken, web_command, write_json
from lakehouse.settings import PROJECT_ROOT, Settings

# Where Spark's PrometheusServlet answers on the service's UI (lakehouse.serving.server).
SPARK_METRICS_PATH = "/metrics/prometheus/"
RULES = PROJECT_ROOT / "monitoring" / "alerts.yml"
START_SECONDS = 30
STOP_SECONDS = 10
# The jobs Prometheus scrapes, by the files under <home>/metrics/ that name their targets.
STREAM_JOB = "lakehouse_stream"
AIRFLOW_JOB = "airflow"
SCRAPE_JOBS = {STREAM_JOB: "*.json", "spark_service": "spark/*.json", AIRFLOW_JOB: "airflow/*.json"}
# The jobs whose endpoints on other hosts the settings name, by the setting that names them.
OTHER_HOSTS_TARGETS = {STREAM_JOB: "prometheus_stream_targets", AIRFLOW_JOB: "prometheus_airflow_targets"}


def rules_text(rules: str, alert_for: str) -> str:
    """The alert rules with every alerting rule's ``for:`` set to ``alert_for`` (empty: as written).

    Args:
        rules: the rule file's YAML.
        alert_for: a duration such as ``2s``, or empty.
    """
    import yaml

    if not alert_for:
        return rules
    loaded = yaml.safe_load(rules)
    for group in loaded["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = alert_for
    return yaml.safe_dump(loaded, sort_keys=False)


def config_text(settings: Settings, rules_file: Path) -> str:
    """prometheus.yml: the scrape and evaluation interval, the rules, the home's Alertmanager (where
    ``lakehouse alertmanager start`` names it), and a job per kind of endpoint."""
    import yaml

    interval = settings.prometheus_scrape_interval
    metrics = settings.metrics_dir()
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(rules_file)],
        "alerting": {"alertmanagers": [{"file_sd_configs": [{"files": [str(alertmanager.targets_file(settings))]}]}]},
        "scrape_configs": [
            {
                "job_name": job,
                # The endpoints label their samples with their pipeline themselves.
                "honor_labels": True,
                "metrics_path": SPARK_METRICS_PATH if job == "spark_service" else "/metrics",
                "file_sd_configs": [{"files": [str(metrics / pattern)], "refresh_interval": "30s"}],
                **_static_targets(settings, job),
            }
            for job, pattern in SCRAPE_JOBS.items()
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def _static_targets(settings: Settings, job: str) -> dict:
    """The job's endpoints on other hosts, named in the settings rather than by files in the home."""
    named = getattr(settings, OTHER_HOSTS_TARGETS[job]) if job in OTHER_HOSTS_TARGETS else ""
    targets = [target.strip() for target in named.split(",") if target.strip()]
    return {"static_configs": [{"targets": targets}]} if targets else {}


class ServerFiles(ServerFolder):
    """The server's files in the home: configuration, rules, port, pid, data and log."""

    label = "Prometheus"
    stem = "prometheus"

    def set_up(self, settings: Settings, port: int) -> Path:
        """The configuration and rules, written at each start (settings may have changed); returns the
        configuration file."""
        (self.folder / "data").mkdir(parents=True, exist_ok=True)
        watched = [settings.metrics_dir() / "spark", settings.metrics_dir() / "airflow", settings.alertmanager_dir()]
        for folder in watched:  # Prometheus watches folders that exist
            folder.mkdir(parents=True, exist_ok=True)
        rules = self.folder / "alerts.yml"
        rules.write_text(rules_text(RULES.read_text(), settings.alert_for))
        config = self.folder / "prometheus.yml"
        config.write_text(config_text(settings, rules))
        write_json(self.folder / PORT_FILE, {"port": port})
        return config


def status(settings: Settings) -> dict:
    """Whether this home's Prometheus is up: its process alive and ready on its port."""
    return ServerFiles(settings.prometheus_dir()).ready_report(settings.bind_address)


def start(settings: Settings, wait_seconds: float = START_SECONDS) -> dict:
    """Start Prometheus detached and return its status once it is ready."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise LakehouseError("prometheus is not installed: run scripts/system-deps.sh (Debian's prometheus package)")
    already = status(settings)
    if already["up"]:
        return already
    files = ServerFiles(settings.prometheus_dir())
    files.process.refuse_if_running("lakehouse prometheus stop")
    host = settings.bind_address
    port = settings.prometheus_port or files.port() or free_port(host)
    refuse_taken(port, "set LAKEHOUSE_PROMETHEUS_PORT to another port", host)
    config = files.set_up(settings, port)
    command = [
        *web_command(binary, config, host, port),
        f"--storage.tsdb.path={files.folder / 'data'}",
        "--storage.tsdb.retention.time=15d",
    ]
    return files.process.start(command, lambda: status(settings), wait_seconds)


def stop(settings: Settings) -> bool:
    """Stop Prometheus (TERM, then KILL after 10 s). False if none ran."""
    return ServerFiles(settings.prometheus_dir()).process.stop(STOP_SECONDS)
