"""Helpers for tests that start real services on loopback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from lakehouse.services.process import free_port

__all__ = ["beeline_command", "free_port", "object_store_services"]

COMMIT_TABLE = "lakehouse_commits"


@contextlib.contextmanager
def object_store_services(folder: Path) -> Iterator[dict[str, str]]:
    """An S3 server and the DynamoDB server of Delta's DynamoDB log store, started as `lakehouse s3
    start` does (about a second each) in a home under ``folder``: the variables that point a job at
    them (Spark commits with conditional writes unless LAKEHOUSE_S3_COMMITS=dynamodb)."""
    from lakehouse.services import s3 as s3_server
    from lakehouse.settings import Settings
    from lakehouse.storage import object_store

    server = Settings.from_env(
        {"LAKEHOUSE_HOME": str(folder / "s3-home"), "LAKEHOUSE_S3_PORT": "0", "LAKEHOUSE_DYNAMODB_PORT": "0"}
    )
    try:
        started = s3_server.start(server)
        endpoint, commit_endpoint = started["endpoint"], started["commit_endpoint"]
        key, secret = object_store.credentials(server)
        yield {
            "LAKEHOUSE_S3_ENDPOINT": endpoint,
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "LAKEHOUSE_S3_COMMIT_TABLE": COMMIT_TABLE,
            "LAKEHOUSE_S3_COMMIT_ENDPOINT": commit_endpoint,
        }
    finally:
        s3_server.stop(server)


def beeline_command(url: str, statement: str = "", *options: str) -> list[str]:
    """A fresh JDBC client's command: beeline and the Hive JDBC driver from pyspark's JARs, its rows
    as CSV."""
    from pyspark.find_spark_home import _find_spark_home

    jars = Path(_find_spark_home()) / "jars" / "*"
    command = ["java", "-cp", str(jars), "org.apache.hive.beeline.BeeLine", "-u", url, "--silent=true"]
    return [*command, "--outputformat=csv2", *options, *(["-e", statement] if statement else [])]
