"""An Alertmanager (``lakehouse alertmanager start``, ``make alertmanager``) on loopback, or on
LAKEHOUSE_BIND_ADDRESS, to which this home's Prometheus (lakehouse.services.prometheus) sends what the
alert rules of ``monitoring/alerts.yml`` fire and resolve. It groups them, one group per alert and
pipeline, and POSTs each group's notifications, firing then resolved, to the webhook
LAKEHOUSE_ALERT_WEBHOOK_URL names; with none, the alerts wait in its API, where ``amtool`` reads them.

The server is Debian's ``prometheus-alertmanager`` package (scripts/system-deps.sh installs it, with
``amtool``). Its configuration, generated from the settings at each start unless
LAKEHOUSE_ALERTMANAGER_CONFIG names one of the operator's own, its data (silences, what it has
notified) and its log stay in the home's ``alertmanager/`` folder. It names its address there in
Prometheus's file service-discovery format, which Prometheus watches: either may start first.

``python -m lakehouse.services.alertmanager FILE`` writes the generated configuration for the
settings of the environment to FILE (docker/compose.yaml's Alertmanager reads it).
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.services.process import ServerFolder, claim_port, web_command, write_json
from lakehouse.settings import Settings

# Debian's name for the server, then upstream's.
BINARIES = ("prometheus-alertmanager", "alertmanager")
START_SECONDS = 30
STOP_SECONDS = 10
# Where the server names its address for Prometheus, in the folder of the home.
TARGETS_FILE = "targets.json"
# The one receiver of the generated configuration: the webhook, or nothing.
RECEIVER = "lakehouse"
# A group still firing is notified again this often (Alertmanager's default).
REPEAT_INTERVAL = "4h"


def delivery(settings: Settings) -> str:
    """How notifications leave with these settings, in words (the status's, the configuration's head)."""
    if settings.alertmanager_config:
        return f"sent by the receivers of {settings.alertmanager_config} (LAKEHOUSE_ALERTMANAGER_CONFIG)"
    if settings.alert_webhook_url:
        return "POSTed as JSON to the webhook LAKEHOUSE_ALERT_WEBHOOK_URL names, firing and resolved"
    return (
        "sent nowhere: LAKEHOUSE_ALERT_WEBHOOK_URL is not set, so alerts wait in the Alertmanager's API"
        " (amtool alert query) until it is, or until LAKEHOUSE_ALERTMANAGER_CONFIG names receivers of your own"
    )


def config_text(settings: Settings) -> str:
    """alertmanager.yml: every alert to one receiver, the webhook of the settings (send_resolved) or
    none, grouped by alert and pipeline with the settings' timings."""
    import yaml

    receiver: dict = {"name": RECEIVER}
    if settings.alert_webhook_url:
        receiver["webhook_configs"] = [{"url": settings.alert_webhook_url, "send_resolved": True}]
    config = {
        "route": {
            "receiver": RECEIVER,
            "group_by": ["alertname", "pipeline"],
            "group_wait": settings.alert_group_wait,
            "group_interval": settings.alert_group_interval,
            "repeat_interval": REPEAT_INTERVAL,
        },
        "receivers": [receiver],
    }
    head = (
        "Written from the settings by `lakehouse alertmanager start` at each start (docs/operations.md,"
        ' "Metrics and alerts"): edits here are lost. For receivers of your own (email, Slack, PagerDuty),'
        " copy it elsewhere, edit the copy, and name it in LAKEHOUSE_ALERTMANAGER_CONFIG."
        f" Notifications are {delivery(settings)}."
    )
    comment = "".join(f"# {line}\n" for line in textwrap.wrap(head, 98))
    return comment + yaml.safe_dump(config, sort_keys=False)


def targets_file(settings: Settings) -> Path:
    """The file that names this home's Alertmanager for Prometheus (file service discovery)."""
    return settings.alertmanager_dir() / TARGETS_FILE


class ServerFiles(ServerFolder):
    """The server's files in the home: configuration, port, address for Prometheus, pid, data and log."""

    label = "Alertmanager"
    stem = "alertmanager"

    def config_file(self, settings: Settings) -> Path:
        """The configuration it runs: the operator's own, else the one generated in this folder."""
        return Path(settings.alertmanager_config) if settings.alertmanager_config else self.folder / "alertmanager.yml"

    def set_up(self, settings: Settings, port: int) -> Path:
        """The configuration (generated at each start: settings may have changed) and the address for
        Prometheus; returns the configuration file."""
        (self.folder / "data").mkdir(parents=True, exist_ok=True)
        config = self.config_file(settings)
        if not settings.alertmanager_config:
            config.write_text(config_text(settings))
        write_json(targets_file(settings), [{"targets": [f"{settings.bind_address}:{port}"]}])
        return config


def status(settings: Settings) -> dict:
    """Whether this home's Alertmanager is up: its process alive and ready on its port."""
    files = ServerFiles(settings.alertmanager_dir())
    report = files.ready_report(settings.bind_address)
    if report["up"]:
        report["config"] = str(files.config_file(settings))
        report["notifications"] = delivery(settings)
    return report


def start(settings: Settings, wait_seconds: float = START_SECONDS) -> dict:
    """Start the Alertmanager detached and return its status once it is ready."""
    binary = next(filter(None, map(shutil.which, BINARIES)), None)
    if binary is None:
        raise LakehouseError(
            "alertmanager is not installed: run scripts/system-deps.sh (Debian's prometheus-alertmanager package)"
        )
    if settings.alertmanager_config and not Path(settings.alertmanager_config).is_file():
        raise LakehouseError(f"LAKEHOUSE_ALERTMANAGER_CONFIG names no file: {settings.alertmanager_config}")
    already = status(settings)
    if already["up"]:
        return already
    files = ServerFiles(settings.alertmanager_dir())
    files.folder.mkdir(parents=True, exist_ok=True)
    files.process.refuse_if_running("lakehouse alertmanager stop")
    host = settings.bind_address
    port = claim_port(files.folder, settings.alertmanager_port, "LAKEHOUSE_ALERTMANAGER_PORT", "Alertmanager", host)
    config = files.set_up(settings, port)
    command = [
        *web_command(binary, config, host, port),
        f"--storage.path={files.folder / 'data'}",
        # One server, no high-availability peers: no gossip port, which would listen on every address.
        "--cluster.listen-address=",
    ]
    return files.process.start(command, lambda: status(settings), wait_seconds)


def stop(settings: Settings) -> bool:
    """Stop the Alertmanager (TERM, then KILL after 10 s). False if none ran. The address it named
    stays: what Prometheus cannot send while it is down shows in Prometheus's log and its
    ``prometheus_notifications_errors_total``."""
    return ServerFiles(settings.alertmanager_dir()).process.stop(STOP_SECONDS)


def main(argv: list[str]) -> None:
    """Write the generated configuration for the environment's settings to the file ``argv`` names."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m lakehouse.services.alertmanager FILE")
    Path(argv[0]).write_text(config_text(Settings.from_env()))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except LakehouseError as error:
        raise SystemExit(f"lakehouse: error: {error}") from None
