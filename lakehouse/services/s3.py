"""An S3 server on loopback (``lakehouse s3 start``, ``make s3``; on LAKEHOUSE_BIND_ADDRESS, a host's
address in a deployment across hosts) for a machine without one; the
clients' side (Spark's, delta-rs's and boto3's access, buckets, credentials) is
lakehouse.storage.object_store.

The server is S3Proxy, an S3 API over a local folder, as one JAR from Maven Central cached in the
ignored ``.cache/jars/``. It keeps its objects in the home's ``s3/data/`` folder, so a restart finds
them again, and answers S3's conditional writes (``If-None-Match``). Its access key and secret are
generated at its first start and kept in ``s3/credentials.json`` (readable by its owner only).

Beside it runs a DynamoDB-compatible server for Delta's DynamoDB log store, an option of Spark's
commits to s3a:// tables (lakehouse.services.dynamodb): the status reports its endpoint as
``commit_endpoint``, for LAKEHOUSE_S3_COMMIT_ENDPOINT.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from lakehouse.services import dynamodb
from lakehouse.services.process import ServerFolder, claim_port, port_answers
from lakehouse.settings import Settings
from lakehouse.storage.object_store import CREDENTIALS, save_credentials, saved_credentials

S3PROXY = "org.gaul:s3proxy:4.1.0:jar-with-dependencies"
START_SECONDS = 60
STOP_SECONDS = 15
SERVER_HEAP = "-Xms64m -Xmx256m"


class ServerFiles(ServerFolder):
    """The server's files in the home: configuration, port, credentials, pid, objects and log."""

    label = "S3 server"
    stem = "s3proxy"

    @property
    def properties(self) -> Path:
        return self.folder / "s3proxy.properties"

    def credentials(self) -> tuple[str, str] | None:
        return saved_credentials(self.folder)

    def set_up(self, host: str, port: int) -> None:
        """The configuration, at each start (``host``: the address it binds to), and a generated key
        pair, once: later starts keep it."""
        (self.folder / "data").mkdir(parents=True, exist_ok=True)
        if self.credentials() is None:
            save_credentials(self.folder, f"lakehouse-{secrets.token_hex(4)}", secrets.token_urlsafe(24))
        key, secret = self.credentials()
        lines = {
            "s3proxy.endpoint": f"http://{host}:{port}",
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": key,
            "s3proxy.credential": secret,
            "jclouds.provider": "filesystem",
            "jclouds.filesystem.basedir": str(self.folder / "data"),
        }
        self.properties.touch(mode=0o600)
        self.properties.write_text("".join(f"{name}={value}\n" for name, value in lines.items()))


def status(settings: Settings) -> dict:
    """Whether this home's servers are up: S3Proxy's process alive and its port answering, and
    the DynamoDB server's."""
    report = _proxy_status(settings)
    commits = dynamodb.status(settings)
    report["up"] = report["up"] and commits["up"]
    if commits["up"]:
        report["commit_endpoint"] = commits["endpoint"]
    return report


def _proxy_status(settings: Settings) -> dict:
    files = ServerFiles(settings.s3_dir())
    port, host = files.port(), settings.bind_address
    report = files.process.report(lambda: port is not None and port_answers(port, host))
    if report["up"]:
        report["endpoint"] = f"http://{host}:{port}"
        report["credentials"] = str(files.folder / CREDENTIALS)
    return report


def start(settings: Settings, wait_seconds: float = START_SECONDS) -> dict:
    """Start both servers detached (each unless up) and return their status once their ports answer."""
    _start_proxy(settings, wait_seconds)
    dynamodb.start(settings, wait_seconds)
    return status(settings)


def _start_proxy(settings: Settings, wait_seconds: float) -> dict:
    from lakehouse.storage.java import check_java, maven_central_jar

    already = _proxy_status(settings)
    if already["up"]:
        return already
    files = ServerFiles(settings.s3_dir())
    files.process.refuse_if_running("lakehouse s3 stop")
    check_java()
    jar = maven_central_jar(S3PROXY)
    files.folder.mkdir(parents=True, exist_ok=True)
    port = claim_port(files.folder, settings.s3_port, "LAKEHOUSE_S3_PORT", "S3 server", settings.bind_address)
    files.set_up(settings.bind_address, port)
    command = ["java", *SERVER_HEAP.split(), "-jar", jar, "--properties", str(files.properties)]
    return files.process.start(command, lambda: _proxy_status(settings), wait_seconds)


def stop(settings: Settings) -> bool:
    """Stop both servers (TERM, then KILL after 15 s). False if none ran."""
    commits = dynamodb.stop(settings)
    return ServerFiles(settings.s3_dir()).process.stop(STOP_SECONDS) or commits
