"""Location: every spelling of a place parses to one value, which spells it for each client."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.location import Location, Scheme


def s3_options() -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}


def no_s3_options() -> dict[str, str]:
    raise AssertionError("a location outside S3 needs no endpoint or keys")


# --- parsing and round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("form", ["{p}", "file:{p}", "file://{p}", "file://localhost{p}", "{p}/"])
def test_every_local_spelling_parses_to_the_same_location(tmp_path, form):
    folder = tmp_path.resolve() / "home"
    location = Location.parse(form.format(p=folder))
    assert location == Location.parse(folder) and location.scheme is Scheme.FILE and location.is_local
    assert (location.spark, location.local_path) == (f"file:{folder}", folder)


def test_a_relative_path_is_resolved_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Location.parse("data/home").local_path == tmp_path.resolve() / "data" / "home"


@pytest.mark.parametrize("form", ["s3a://bucket/lake/log", "s3://bucket/lake/log", "s3a://bucket/lake/log/"])
def test_both_s3_spellings_parse_to_the_same_location(form):
    location = Location.parse(form)
    assert location == Location.in_bucket("bucket", "lake/log") and location.scheme is Scheme.S3
    assert not location.is_local


@pytest.mark.parametrize(
    "location",
    [
        Location.parse("/tmp/lake/log"),
        Location.in_bucket("bucket", "lake/log"),
        Location.in_bucket("bucket"),
        Location.parse("hdfs://namenode:8020/lake"),
        Location.parse("kafka:topic/partition=0/20260101T000000000000Z-o00000000000000000001"),
    ],
)
def test_each_clients_spelling_parses_back_to_the_same_location(location):
    assert Location.parse(location.spark) == location
    assert Location.parse(location.delta_rs_uri) == location
    assert Location.parse(str(location)) == location
    if location.is_local:
        assert Location.parse(location.local_path) == location
    if location.scheme is Scheme.S3:
        assert Location.in_bucket(location.bucket, location.key) == location


def test_another_scheme_is_kept_as_given_without_its_trailing_slash():
    location = Location.parse("hdfs://namenode:8020/lake/")
    assert (location.scheme, location.spark, location.delta_rs_uri) == (
        Scheme.OTHER,
        "hdfs://namenode:8020/lake",
        "hdfs://namenode:8020/lake",
    )


def test_a_kafka_locator_is_a_kafka_location():
    locator = "kafka:topic/partition=0/20260101T000000000000Z-o00000000000000000001"
    assert Location.parse(locator).scheme is Scheme.KAFKA and Location.parse(locator).spark == locator


# --- each client's spelling ------------------------------------------------------------------------


def test_spark_reads_hadoops_spellings():
    assert Location.parse("/lake/log").spark == "file:/lake/log"
    assert Location.parse("s3://bucket/log").spark == "s3a://bucket/log"


def test_delta_rs_reads_a_plain_path_without_options(tmp_path):
    folder = tmp_path.resolve() / "table"
    assert Location.parse(f"file:{folder}").delta_rs(no_s3_options) == (str(folder), {})


def test_delta_rs_reads_s3_with_the_endpoints_options():
    uri, options = Location.parse("s3a://bucket/warehouse/gold/t").delta_rs(s3_options)
    assert (uri, options) == ("s3://bucket/warehouse/gold/t", s3_options())


def test_another_scheme_goes_to_delta_rs_as_given_without_options():
    assert Location.parse("gs://bucket/t").delta_rs(no_s3_options) == ("gs://bucket/t", {})


def test_boto3_takes_a_bucket_and_a_key_without_slashes_at_either_end():
    location = Location.parse("s3a://bucket/lake/log/")
    assert (location.bucket, location.key) == ("bucket", "lake/log")
    assert (Location.in_bucket("bucket").bucket, Location.in_bucket("bucket").key) == ("bucket", "")


def test_a_user_is_shown_a_local_path_or_a_uri(tmp_path):
    folder = tmp_path.resolve()
    assert Location.parse(f"file:{folder}").display == str(folder)
    assert Location.parse("s3a://bucket/log").display == "s3a://bucket/log"


def test_a_scheme_tests_a_string_or_anything_with_startswith():
    assert Scheme.KAFKA.matches("kafka:t/partition=0/o1") and not Scheme.KAFKA.matches("file:/log/a.jsonl")
    assert Scheme.S3.matches("s3a://bucket") and Scheme.FILE.matches("file:/log")


# --- joining --------------------------------------------------------------------------------------


def test_joining_stays_in_the_scheme():
    assert Location.parse("/lake") / "log/toll_traffic" == Location.parse("/lake/log/toll_traffic")
    assert Location.in_bucket("bucket") / "log/" == Location.parse("s3a://bucket/log")
    assert (Location.in_bucket("bucket", "lake") / "log").key == "lake/log"
    assert Location.parse("/lake") / "" == Location.parse("/lake")


# --- what is not a location here -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("s3a://", "an S3 location names its bucket"),
        ("s3:///key", "an S3 location names its bucket"),
        ("s3a:bucket/key", "s3a:bucket/key is not an S3 URI: write s3a://bucket/key"),
        ("file://otherhost/log", "file://otherhost/log names another host; a local file URI looks like file:/path"),
    ],
)
def test_a_malformed_uri_is_refused_with_what_is_wrong(text, message):
    with pytest.raises(LakehouseError, match=message):
        Location.parse(text)


@pytest.mark.parametrize("uri", ["s3a://bucket/log", "hdfs://namenode/log", "kafka:t/partition=0/o1"])
def test_a_remote_location_has_no_local_path(uri):
    with pytest.raises(LakehouseError, match=f"{uri} is not on the local file system"):
        _ = Location.parse(uri).local_path


def test_a_location_outside_s3_has_no_bucket():
    with pytest.raises(LakehouseError, match="is not in an S3 bucket"):
        _ = Location.parse(Path("/lake")).bucket
