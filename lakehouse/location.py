"""Where data lives, decided in one place: a local folder, an S3 bucket, a Kafka topic, or another
file system Hadoop reads.

The same place has a spelling per client: Spark (Hadoop) reads ``file:/abs/path`` and
``s3a://bucket/key``; delta-rs reads a plain path and ``s3://bucket/key`` with the endpoint's
options; boto3 takes a bucket and a key; Python a :class:`~pathlib.Path`. A :class:`Location` is
parsed from any of them and gives each of them, so no other module looks at a URI's scheme.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from lakehouse.errors import LakehouseError

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
# How Hadoop and delta-rs spell an S3 bucket; the settings keep Hadoop's.
_S3_SPELLINGS = ("s3a", "s3")


class Scheme(enum.Enum):
    """Where a location lives; the value is how its URIs start (Spark's spelling)."""

    FILE = "file:"
    S3 = "s3a://"
    # A Kafka record's locator (``kafka:<topic>/partition=<p>/...``), which stands for a log file.
    KAFKA = "kafka:"
    # Any other ``scheme://`` (hdfs://, gs://...): only Spark reads it, through Hadoop's file systems.
    OTHER = "://"

    def matches(self, text):
        """Whether ``text`` is spelled in this scheme: a string, or a Spark column of them (both
        have ``startswith``), so a query tests a row's scheme the way Python tests a string's."""
        return text.startswith(self.value)


@dataclasses.dataclass(frozen=True)
class Location:
    """A place in one scheme, kept in Spark's spelling (equal locations are equal whatever the
    spelling they were parsed from). Build one with :meth:`parse` or :meth:`in_bucket`."""

    scheme: Scheme
    uri: str

    @classmethod
    def parse(cls, text: str | os.PathLike) -> Location:
        """A location from any spelling: a local path (relative to the working directory, ``~``
        expanded), ``file:/path``, ``file:///path``, ``s3a://`` or ``s3://bucket/key``, a
        ``kafka:`` locator, or another ``scheme://`` URI."""
        text = str(text)
        if Scheme.FILE.matches(text):
            return cls(Scheme.FILE, Scheme.FILE.value + str(_file_path(text)))
        if Scheme.KAFKA.matches(text):
            return cls(Scheme.KAFKA, text)
        scheme = _SCHEME.match(text)
        if scheme and scheme.group(1).lower() in _S3_SPELLINGS:
            bucket, _, key = text[scheme.end() :].partition("/")
            return cls.in_bucket(bucket, key)
        if scheme:
            return cls(Scheme.OTHER, text.rstrip("/"))
        if text.split(":", 1)[0].lower() in _S3_SPELLINGS:
            raise LakehouseError(f"{text} is not an S3 URI: write s3a://bucket/key")
        return cls(Scheme.FILE, Scheme.FILE.value + str(Path(text).expanduser().resolve()))

    @classmethod
    def in_bucket(cls, bucket: str, key: str = "") -> Location:
        """The object or prefix ``key`` of an S3 bucket (boto3's spelling)."""
        if not bucket:
            raise LakehouseError(f"an S3 location names its bucket: s3a://bucket/key, not s3a://{bucket}/{key}")
        key = key.strip("/")
        return cls(Scheme.S3, f"{Scheme.S3.value}{bucket}/{key}" if key else f"{Scheme.S3.value}{bucket}")

    def __str__(self) -> str:
        return self.uri

    def __truediv__(self, relative: str) -> Location:
        """The location ``relative`` (``a/b``) below this one, in the same scheme."""
        relative = str(relative).strip("/")
        if not relative:
            return self
        if self.scheme is Scheme.FILE:
            return Location(Scheme.FILE, Scheme.FILE.value + str(self.local_path / relative))
        return Location(self.scheme, f"{self.uri}/{relative}")

    @property
    def is_local(self) -> bool:
        return self.scheme is Scheme.FILE

    @property
    def spark(self) -> str:
        """The URI Spark (Hadoop) reads: ``file:/abs/path`` (the form Delta records in its logs, so
        a location built here equals one a table reports), ``s3a://bucket/key``, or as given."""
        return self.uri

    @property
    def local_path(self) -> Path:
        """The local file system's path; a LakehouseError for any other place."""
        if not self.is_local:
            raise LakehouseError(f"{self.uri} is not on the local file system")
        return Path(self.uri[len(Scheme.FILE.value) :])

    @property
    def bucket(self) -> str:
        """The S3 bucket (boto3's ``Bucket``)."""
        return self._s3_parts()[0]

    @property
    def key(self) -> str:
        """The key below the bucket, without slashes at either end (boto3's ``Key`` or ``Prefix``)."""
        return self._s3_parts()[1]

    def _s3_parts(self) -> tuple[str, str]:
        if self.scheme is not Scheme.S3:
            raise LakehouseError(f"{self.uri} is not in an S3 bucket")
        bucket, _, key = self.uri[len(Scheme.S3.value) :].partition("/")
        return bucket, key

    @property
    def delta_rs_uri(self) -> str:
        """The location as delta-rs spells it: a plain local path, ``s3://`` for Hadoop's ``s3a://``."""
        if self.is_local:
            return str(self.local_path)
        if self.scheme is Scheme.S3:
            return f"s3://{self.bucket}/{self.key}" if self.key else f"s3://{self.bucket}"
        return self.uri

    def delta_rs(self, s3_options: Callable[[], Mapping[str, str]]) -> tuple[str, dict[str, str]]:
        """delta-rs's URI and storage options: for S3 those ``s3_options`` gives (the endpoint and
        keys, asked for only here: they may not be configured where no S3 location is used)."""
        return self.delta_rs_uri, dict(s3_options()) if self.scheme is Scheme.S3 else {}

    @property
    def display(self) -> str:
        """As a user finds it: a local path, or the URI of any other place."""
        return str(self.local_path) if self.is_local else self.uri


def _file_path(uri: str) -> Path:
    """The path of a ``file:`` URI: Hadoop's ``file:/path``, or ``file:///path`` with an empty (or
    ``localhost``) host."""
    if uri.startswith("file://"):
        host, _, path = uri[len("file://") :].partition("/")
        if host not in ("", "localhost"):
            raise LakehouseError(f"{uri} names another host; a local file URI looks like file:/path")
        return Path("/" + path).resolve()
    return Path(uri[len("file:") :]).resolve()


def to_uri(location: str | os.PathLike) -> str:
    """Spark's URI for any spelling of a location (:meth:`Location.parse`)."""
    return Location.parse(location).spark


def local_path(location: str | os.PathLike) -> Path:
    """The local path of a ``file:`` URI or a plain path; a LakehouseError for any other place."""
    return Location.parse(location).local_path
