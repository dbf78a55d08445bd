"""Whether an S3 store honours conditional writes, the PUT with ``If-None-Match: *`` that Delta's
commits rely on, by default, to land only where no commit of the version is (docs/operations.md,
"Object storage"; lakehouse.storage.commits). A store that accepted the header and ignored it would
let a second commit of a version replace the first, silently: the store is probed once per process
and bucket before the first commit there, Spark's or delta-rs's, and a store that fails is refused.
"""

from __future__ import annotations

import uuid

from lakehouse.errors import LakehouseError
from lakehouse.location import Location, Scheme
from lakehouse.settings import Settings
from lakehouse.storage import object_store
from lakehouse.vocabulary import S3Commits

PROBE_PREFIX = "_lakehouse/conditional-write-probe"
# (endpoint, bucket) -> how the store fails conditional writes (None: it honours them): asked once per process.
_PROBED: dict[tuple[str, str], str | None] = {}


# How a store answers a request carrying a header it does not implement.
NOT_IMPLEMENTED = ("NotImplemented", "501")


def _conditional_write_failure(s3, bucket: str) -> str | None:
    """How the store fails to refuse a second PUT of one key with ``If-None-Match: *`` (two PUTs
    and a DELETE of a probe object of its own), None when it refuses it. ``s3`` sends no header
    besides the one probed (object_store.bare_client): S3Proxy 2.1 refuses boto3's default
    checksums with 501, and would seem to refuse the condition, which it accepts and ignores."""
    from botocore.exceptions import ClientError

    def code(error: ClientError) -> str:
        return error.response.get("Error", {}).get("Code", "")

    key = f"{PROBE_PREFIX}/{uuid.uuid4().hex}"
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
    except ClientError as error:
        if code(error) in NOT_IMPLEMENTED:
            return "it refuses the header"
        raise
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
        return "it accepts the header and a second PUT of an object replaced the first"
    except ClientError as error:
        if code(error) not in ("PreconditionFailed", "412"):
            raise
        return None
    finally:
        s3.delete_object(Bucket=bucket, Key=key)


def check_store(settings: Settings) -> None:
    """Refuse a Spark session's conditional commits to a store that ignores the condition: its second
    PUT of a commit would replace the first, for Spark's and delta-rs's commits alike. Run once the
    buckets exist."""
    warehouse = Location.parse(settings.warehouse_uri)
    if settings.s3_commits == S3Commits.CONDITIONAL and warehouse.scheme is Scheme.S3:
        _refuse_unconditional_store(settings, warehouse.bucket)


def check_delta_rs_store(settings: Settings, bucket: str) -> None:
    """Refuse delta-rs's first write to a bucket whose store ignores conditional writes. delta-rs
    commits with them whatever Spark's log store is, so only the single-driver opt-in (one writer
    alone writes each table) goes without. Run once the bucket exists."""
    if settings.s3_commits != S3Commits.SINGLE_DRIVER:
        _refuse_unconditional_store(settings, bucket)


def _refuse_unconditional_store(settings: Settings, bucket: str) -> None:
    """The probe of the store's bucket, once per process; a one-line refusal when it failed."""
    endpoint = object_store.endpoint(settings)
    probed = (endpoint, bucket)
    if probed not in _PROBED:
        with object_store.refused_as_error(f"the conditional-write probe of S3 bucket {bucket} at {endpoint}"):
            _PROBED[probed] = _conditional_write_failure(object_store.bare_client(settings), bucket)
    if _PROBED[probed]:
        raise LakehouseError(
            f"the S3 store at {endpoint} does not honour conditional writes (If-None-Match: {_PROBED[probed]}), so "
            "two commits of one version would replace each other: use a store that honours them (AWS S3, MinIO, "
            "S3Proxy 4), or LAKEHOUSE_S3_COMMITS=single-driver if one writer alone writes each table"
        )
