"""Where the file log's files live: a local folder or an S3 prefix, behind one small interface.

Both keep the producer contract the readers rely on (docs/design.md, "Validation"): a file
appears whole or not at all. Locally it is written beside the log and renamed in; on S3 an object
is visible only once its PUT has completed. Listings need no JVM: ``os.scandir`` locally, boto3 on
S3 (ListObjectsV2 with ``/`` as delimiter, so an hour folder is one prefix and never opened).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from datetime import UTC, datetime
from urllib.parse import unquote

from lakehouse.errors import LakehouseError
from lakehouse.location import Location, Scheme, local_path, to_uri
from lakehouse.settings import Settings


@dataclasses.dataclass(frozen=True)
class Entry:
    """A folder's entry: a file with the time it was added, or a sub-folder (``modified_ms`` 0)."""

    name: str
    uri: str
    is_dir: bool
    modified_ms: int


class LocalFiles:
    """A log folder on the local file system."""

    def __init__(self, uri: str):
        self.uri = uri
        self.root = local_path(uri)
        self.incoming = self.root / "_incoming"  # a leading underscore hides it from Spark's listing
        self._last_mtime_ns = 0

    def put(self, relative: str, text: str) -> str:
        """Write the file beside the log, then rename it in; returns its URI."""
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        self.incoming.mkdir(parents=True, exist_ok=True)
        temp = self.incoming / f"{target.name}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        # Spark's file source orders new files by modification time: keep it strictly increasing
        # (in wall time, which its max-file-age check compares against) so files stay in arrival order.
        mtime_ns = max(time.time_ns(), self._last_mtime_ns + 1_000_000)
        os.utime(temp, ns=(mtime_ns, mtime_ns))
        self._last_mtime_ns = mtime_ns
        os.replace(temp, target)
        return to_uri(target)

    def read(self, relative: str) -> str | None:
        path = self.root / relative
        return path.read_text() if path.is_file() else None

    def names(self, relative_folder: str) -> list[str]:
        """The names of the files in a folder of the log ([] when it does not exist)."""
        folder = self.root / relative_folder
        return [entry.name for entry in folder.iterdir() if entry.is_file()] if folder.is_dir() else []

    def folders(self, relative_folder: str) -> list[str]:
        """The names of the sub-folders of a folder of the log ([] when it does not exist)."""
        folder = self.root / relative_folder
        return [entry.name for entry in folder.iterdir() if entry.is_dir()] if folder.is_dir() else []

    def remove(self, relative: str) -> None:
        (self.root / relative).unlink(missing_ok=True)

    def remove_folder(self, uri: str) -> None:
        """Delete a folder of the log (an expired ingest hour) with its files."""
        shutil.rmtree(local_path(uri), ignore_errors=True)


class ObjectFiles:
    """A log prefix in S3-compatible object storage (``s3a://bucket/prefix``), through boto3."""

    def __init__(self, settings: Settings, uri: str):
        from lakehouse.storage import object_store

        self.uri = uri
        location = Location.parse(uri)
        self.bucket, self.prefix = location.bucket, location.key
        self.s3 = object_store.client(settings)
        object_store.ensure_bucket_once(settings, self.bucket)

    def _key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def put(self, relative: str, text: str) -> str:
        self.s3.put_object(Bucket=self.bucket, Key=self._key(relative), Body=text.encode("utf-8"))
        return Location.in_bucket(self.bucket, self._key(relative)).spark

    def read(self, relative: str) -> str | None:
        try:
            answer = self.s3.get_object(Bucket=self.bucket, Key=self._key(relative))
        except self.s3.exceptions.NoSuchKey:
            return None
        return answer["Body"].read().decode("utf-8")

    def names(self, relative_folder: str) -> list[str]:
        entries = object_entries(self.s3, self.bucket, self._key(relative_folder))
        return [entry.name for entry in entries if not entry.is_dir]

    def folders(self, relative_folder: str) -> list[str]:
        entries = object_entries(self.s3, self.bucket, self._key(relative_folder))
        return [entry.name for entry in entries if entry.is_dir]

    def remove(self, relative: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=self._key(relative))

    def remove_folder(self, uri: str) -> None:
        """Delete every object under a folder of the log (an expired ingest hour), a page at a time."""
        folder = Location.parse(uri)
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=folder.bucket, Prefix=folder.key + "/"):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                self.s3.delete_objects(Bucket=folder.bucket, Delete={"Objects": keys, "Quiet": True})


def object_entries(s3, bucket: str, folder_key: str) -> list[Entry]:
    """The files and sub-folders directly under ``folder_key``, listed page by page."""
    prefix = folder_key.rstrip("/") + "/"
    entries = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        for folder in page.get("CommonPrefixes", []):
            name = folder["Prefix"][len(prefix) :].rstrip("/")
            entries.append(Entry(name, Location.in_bucket(bucket, folder["Prefix"]).spark, True, 0))
        for item in page.get("Contents", []):
            modified_ms = int(item["LastModified"].astimezone(UTC).timestamp() * 1000)
            uri = Location.in_bucket(bucket, item["Key"]).spark
            entries.append(Entry(item["Key"][len(prefix) :], uri, False, modified_ms))
    return entries


def log_files(settings: Settings, uri: str) -> LocalFiles | ObjectFiles:
    """The files under ``uri``: a local folder (``file:``) or an S3 prefix (``s3a://``)."""
    scheme = Location.parse(uri).scheme
    if scheme is Scheme.FILE:
        return LocalFiles(uri)
    if scheme is Scheme.S3:
        return ObjectFiles(settings, uri)
    raise LakehouseError(f"the platform writes log files to file: or s3a:// locations, not {uri}")


# A log file's name starts with its receive time (lakehouse.dataflow.clocks.log_file_name).
_RECEIVED_IN_NAME = re.compile(r"(?:^|/)(\d{8}T\d{12})Z-[^/]*$")


def received_in_name(name: str) -> datetime | None:
    """The receive time a log file's name (or path) starts with, naive UTC (None: not a log file's)."""
    match = _RECEIVED_IN_NAME.search(name)
    return datetime.strptime(match.group(1), "%Y%m%dT%H%M%S%f") if match else None


def newest_file_name(files: LocalFiles | ObjectFiles) -> str | None:
    """The name of the log's newest file: the last of its newest ingest hour's, since names sort in
    arrival order. Three listings, whatever the log's size (None: the log holds no file)."""
    folder = ""
    for level in ("ingest_date=", "ingest_hour="):
        children = [name for name in files.folders(folder) if name.startswith(level)]
        if not children:
            return None
        folder = f"{folder}{max(children)}/"
    return max((name for name in files.names(folder) if name.endswith(".jsonl")), default=None)


def local_entries(uri: str) -> list[Entry]:
    folder = local_path(uri)
    if not folder.is_dir():
        return []
    with os.scandir(folder) as entries:
        return [Entry(e.name, to_uri(e.path), e.is_dir(), e.stat().st_mtime_ns // 1_000_000) for e in entries]


LINE_ENDS = (b"\n", b"\r")


def unterminated_files(uris: list[str]) -> dict[str, float]:
    """The local files among ``uris`` whose last byte is not a line end, with the time (epoch
    seconds) each last changed: a producer may still be writing them in place. Objects in S3 appear
    whole (a PUT is atomic) and are not looked at."""
    found = {}
    for uri in uris:
        location = Location.parse(unquote(uri))  # Spark's URIs are percent-encoded
        if not location.is_local:
            continue
        try:
            with open(location.local_path, "rb") as file:
                size = file.seek(0, os.SEEK_END)
                if size:
                    file.seek(size - 1)
                    if file.read(1) not in LINE_ENDS:
                        found[uri] = os.fstat(file.fileno()).st_mtime
        except FileNotFoundError:  # removed since it was listed: the read reports it
            continue
    return found


def wait_for_line_ends(uris: list[str], grace_s: float, poll_s: float = 0.5) -> list[str]:
    """Wait until each file of ``uris`` ends with a line end, or has not changed for ``grace_s``
    seconds; returns the files that were waited for (empty: none had to be)."""
    waited: list[str] = []
    while pending := {
        uri: changed for uri, changed in unterminated_files(uris).items() if time.time() - changed < grace_s
    }:
        waited += [uri for uri in pending if uri not in waited]
        time.sleep(poll_s)
    return waited
