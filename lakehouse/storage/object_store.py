"""S3-compatible object storage: the clients' access to it. A server on loopback for a machine
without one is lakehouse.services.s3; its access key and secret are generated at its first start and
kept in the home's ``s3/credentials.json`` (readable by its owner only), where clients find them.

The platform reaches any S3 endpoint four ways, one per client: Spark through Hadoop's ``s3a://``
file system (hadoop-aws), delta-rs for its bookkeeping rows and the tables' logs, pyarrow for the
data files of the tables read without Spark, and boto3 for what runs outside Spark (buckets, the
generator's and the archive's log files, listings of ingest hours).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.location import Location, Scheme
from lakehouse.settings import Settings

# hadoop-aws at the version of pyspark's Hadoop, and the AWS SDK bundle and stream reader its POM names.
# Loaded by every session of settings with an S3 endpoint, as ``local:`` JARs: executors on this
# machine (or on machines of one image) load them from the same path, instead of each fetching the
# SDK's 641 MB from the driver.
S3A_JARS = (
    "org.apache.hadoop:hadoop-aws:3.4.2",
    "software.amazon.awssdk:bundle:2.29.52",
    "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:1.2.1",
)
REGION = "us-east-1"
CREDENTIALS = "credentials.json"


def credentials(settings: Settings) -> tuple[str, str]:
    """The access key and secret: the settings' (AWS's own variables) when set, else this home's server's."""
    if settings.s3_access_key and settings.s3_secret_key:
        return settings.s3_access_key, settings.s3_secret_key
    saved = saved_credentials(settings.s3_dir())
    if saved is None:
        raise LakehouseError(
            "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or start this home's server "
            "(`lakehouse s3 start`)"
        )
    return saved


def endpoint(settings: Settings) -> str:
    if not settings.s3_endpoint:
        raise LakehouseError("s3a:// locations need LAKEHOUSE_S3_ENDPOINT (http://host:port of the S3 API)")
    return settings.s3_endpoint


def client(settings: Settings):
    """A boto3 S3 client for the settings' endpoint, path-style (buckets are not host names here)."""
    return _client(endpoint(settings), *credentials(settings))


def bare_client(settings: Settings):
    """``client``, but sending no checksum the request does not need. boto3 adds a CRC32 of the body
    to every upload by default, which S3 stores older than it (S3Proxy 2.1, for one) refuse with 501
    NotImplemented: a probe of one header (lakehouse.storage.conditional_writes) sends that header alone."""
    return _client(endpoint(settings), *credentials(settings), checksums="when_required")


@functools.lru_cache(maxsize=8)
def _client(endpoint_url: str, key: str, secret: str, checksums: str | None = None):
    # One per store and process: a client costs tens of milliseconds to build, and is thread-safe.
    # ``checksums``: boto3's request_checksum_calculation (None: its default, AWS's variables).
    import boto3
    from botocore.config import Config

    config = Config(
        s3={"addressing_style": "path"},
        retries={"max_attempts": 5, "mode": "standard"},
        request_checksum_calculation=checksums,
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name=REGION,
        config=config,
    )


def ensure_bucket(s3, bucket: str) -> None:
    """Create the bucket when it does not exist yet (a first write to a new store). Jobs started
    together on a new store all find it missing: one creates it, and the others' creation answers
    that they own it already, which is what they wanted. The store's refusal, or no answer at all,
    is a one-line LakehouseError: the first request a process makes to a store is usually this one."""
    from botocore.exceptions import ClientError

    with refused_as_error(f"S3 bucket {bucket} at {s3.meta.endpoint_url}"):
        try:
            s3.head_bucket(Bucket=bucket)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                raise
            with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
                s3.create_bucket(Bucket=bucket)


@contextlib.contextmanager
def refused_as_error(what: str) -> Iterator[None]:
    """A store's refusal of a boto3 request, or its silence (no connection), as a one-line
    LakehouseError about ``what``."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (ClientError, BotoCoreError) as error:
        raise LakehouseError(f"{what}: {error}") from None


# (endpoint, bucket) pairs this process has found or created: each asked for once per process.
_READY_BUCKETS: set[tuple[str, str]] = set()


def ensure_bucket_once(settings: Settings, bucket: str) -> None:
    """``ensure_bucket``, the first time this process uses the bucket: before any client's first
    request to it (Spark's s3a, delta-rs and boto3 alike; none of them creates a bucket)."""
    ready = (endpoint(settings), bucket)
    if ready not in _READY_BUCKETS:
        ensure_bucket(client(settings), bucket)
        _READY_BUCKETS.add(ready)


def ensure_buckets(settings: Settings) -> list[str]:
    """Create the buckets the settings' s3a:// locations name, when missing; returns their names."""
    locations = [Location.parse(uri) for uri in (settings.log_uri, settings.warehouse_uri, settings.checkpoint_uri)]
    buckets = sorted({location.bucket for location in locations if location.scheme is Scheme.S3})
    for bucket in buckets:
        ensure_bucket_once(settings, bucket)
    return buckets


def spark_confs(settings: Settings) -> dict[str, str]:
    """Hadoop's s3a settings for the endpoint. The key and secret travel in the configuration, which
    Spark redacts in its UI and logs (its default ``spark.redaction.regex``)."""
    key, secret = credentials(settings)
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint(settings),
        "spark.hadoop.fs.s3a.endpoint.region": REGION,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint(settings).startswith("https:")).lower(),
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": key,
        "spark.hadoop.fs.s3a.secret.key": secret,
    }


def arrow_filesystem(settings: Settings):
    """pyarrow's S3 client for the endpoint (``pyarrow.fs.S3FileSystem``, path-style): it reads the
    data files of the tables delta-rs lists (lakehouse.storage.ops_tables), and holds no Python
    object on Arrow's threads (docs/operations.md, "Exit codes"). pyarrow shuts its AWS SDK down
    at exit (its own ``atexit`` handler), after the interpreter has waited for Python's threads and
    before it finalizes: a scan still under way then is waited for, not cut off."""
    import pyarrow.fs as pa_fs

    key, secret = credentials(settings)
    scheme, _, address = endpoint(settings).partition("://")
    return pa_fs.S3FileSystem(
        access_key=key,
        secret_key=secret,
        region=REGION,
        scheme=scheme,
        endpoint_override=address,
        force_virtual_addressing=False,
    )


def delta_rs_options(settings: Settings) -> dict[str, str]:
    """delta-rs's options for the endpoint. It commits with S3's conditional writes (a commit file
    is created only if absent), so concurrent appends stay safe (docs/operations.md, "Object storage")."""
    key, secret = credentials(settings)
    return {
        "AWS_ENDPOINT_URL": endpoint(settings),
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_ALLOW_HTTP": str(endpoint(settings).startswith("http:")).lower(),
    }


def saved_credentials(folder: Path) -> tuple[str, str] | None:
    """The key pair this home's S3 server generated at its first start (lakehouse.services.s3)."""
    try:
        saved = json.loads((folder / CREDENTIALS).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return saved["access_key"], saved["secret_key"]


def save_credentials(folder: Path, key: str, secret: str) -> None:
    """Kept readable by its owner only: the server and its clients read it, nobody else."""
    file = folder / CREDENTIALS
    file.touch(mode=0o600)
    file.write_text(json.dumps({"access_key": key, "secret_key": secret}))


def main() -> None:
    """``python -m lakehouse.storage.object_store``: fetch the s3a JARs now (a Docker image's build)."""
    from lakehouse.storage.java import maven_central_jar

    for coordinates in S3A_JARS:
        print(maven_central_jar(coordinates))


if __name__ == "__main__":
    main()
