"""A DynamoDB-compatible server on loopback (or LAKEHOUSE_BIND_ADDRESS), started and stopped with the
S3 server (``lakehouse s3 start``, lakehouse.services.s3) for a machine without DynamoDB: with
LAKEHOUSE_S3_COMMITS=dynamodb, Spark's commits to s3a:// tables claim their version in its table
first (lakehouse.storage.commits, docs/operations.md "Object storage").

The server is moto's (``moto.server``, a Python package of the lock). It
keeps its tables in memory: a restart forgets the commit claims, so stop the writers before it.
Delta keeps a claim only until its commit file is in place (and a day after, against eventually
consistent listings), so a restart between commits loses nothing. It takes any key pair.
"""

from __future__ import annotations

import sys

from lakehouse.services.process import ServerFolder, claim_port, port_answers
from lakehouse.settings import Settings

START_SECONDS = 60
STOP_SECONDS = 10


class ServerFiles(ServerFolder):
    """The server's files in the home: its port, pid and log."""

    label = "DynamoDB server"
    stem = "dynamodb"


def status(settings: Settings) -> dict:
    """Whether this home's server is up: its process alive and its port answering."""
    files = ServerFiles(settings.dynamodb_dir())
    port, host = files.port(), settings.bind_address
    report = files.process.report(lambda: port is not None and port_answers(port, host))
    if report["up"]:
        report["endpoint"] = f"http://{host}:{port}"
    return report


def start(settings: Settings, wait_seconds: float = START_SECONDS) -> dict:
    """Start the server detached and return its status once its port answers."""
    already = status(settings)
    if already["up"]:
        return already
    files = ServerFiles(settings.dynamodb_dir())
    files.folder.mkdir(parents=True, exist_ok=True)
    files.process.refuse_if_running("lakehouse s3 stop")
    host = settings.bind_address
    port = claim_port(files.folder, settings.dynamodb_port, "LAKEHOUSE_DYNAMODB_PORT", "DynamoDB server", host)
    # moto's server module, run by this interpreter: the venv's, whatever the PATH.
    command = [sys.executable, "-m", "moto.server", "--host", host, "--port", str(port)]
    return files.process.start(command, lambda: status(settings), wait_seconds)


def stop(settings: Settings) -> bool:
    """Stop the server (TERM, then KILL after 10 s). False if none ran."""
    return ServerFiles(settings.dynamodb_dir()).process.stop(STOP_SECONDS)
