"""Spark's commits to s3a:// tables, several writers at once (lakehouse.storage.commits,
docs/operations.md "Object storage"): driver processes race their commits to one table on the
project's S3 server, and nothing they committed is lost. By default Spark commits with S3's
conditional writes, as delta-rs does: two Spark drivers and a delta-rs writer race each round's
commit.

CI races a few rounds; `make chaos` races 100 (tests/s3_commit_race.py), and races the same drivers
through Delta's DynamoDB log store (LAKEHOUSE_S3_COMMITS=dynamodb, an opt-in), each commit claimed in
the project's DynamoDB server, and through its single-driver log store, which loses commits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from lakehouse.cli import main
from lakehouse.errors import LakehouseError
from lakehouse.storage import commits, conditional_writes, object_store
from lakehouse.storage.spark import build_spark_session
from tests.conftest import make_settings
from tests.s3_commit_race import DELTA_RS, measured

ROUNDS = int(os.environ.get("LAKEHOUSE_COMMIT_RACE_ROUNDS", "4"))


def test_a_session_told_to_claim_commits_in_dynamodb_without_a_table_refuses_to_start(tmp_path):
    settings = make_settings(tmp_path, LAKEHOUSE_S3_ENDPOINT="http://127.0.0.1:9", LAKEHOUSE_S3_COMMITS="dynamodb")
    with pytest.raises(LakehouseError, match="LAKEHOUSE_S3_COMMIT_TABLE") as refused:
        build_spark_session(settings, "refused")
    assert "\n" not in str(refused.value) and "leave LAKEHOUSE_S3_COMMITS unset" in str(refused.value)


def test_the_commit_setting_chooses_the_log_store(tmp_path):
    endpoint = {"LAKEHOUSE_S3_ENDPOINT": "http://s3:9000"}
    assert commits.spark_confs(make_settings(tmp_path, **endpoint), "us-east-1") == {
        "spark.delta.logStore.s3a.impl": commits.CONDITIONAL_LOG_STORE,
        "spark.databricks.delta.vacuum.logging.enabled": "true",
    }
    single = make_settings(tmp_path, **endpoint, LAKEHOUSE_S3_COMMITS="single-driver")
    assert commits.spark_confs(single, "us-east-1") == {
        "spark.delta.logStore.s3a.impl": commits.SINGLE_DRIVER_LOG_STORE
    }
    assert commits.session_jars(single) == []
    ordered = make_settings(
        tmp_path,
        **endpoint,
        LAKEHOUSE_S3_COMMITS="dynamodb",
        LAKEHOUSE_S3_COMMIT_TABLE="t",
        LAKEHOUSE_S3_COMMIT_ENDPOINT="http://d:8000",
    )
    confs = commits.spark_confs(ordered, "eu-west-1")
    assert confs["spark.delta.logStore.s3a.impl"] == commits.LOG_STORE
    assert confs[f"{commits.PREFIX}.ddb.tableName"] == "t" and confs[f"{commits.PREFIX}.ddb.region"] == "eu-west-1"
    assert confs[f"{commits.PREFIX}.ddb.endpoint"] == "http://d:8000"
    with pytest.raises(LakehouseError, match="LAKEHOUSE_S3_COMMITS must be one of"):
        make_settings(tmp_path, LAKEHOUSE_S3_COMMITS="hope")


# An S3 server of 2023 that accepts If-None-Match on a PUT and ignores it, replacing the object: a
# store on which conditional commits cannot be safe. (It refuses boto3's default checksums with 501
# NotImplemented, which the probe does not send.)
UNCONDITIONAL_S3 = "org.gaul:s3proxy:2.1.0:jar-with-dependencies"


@pytest.fixture
def unconditional_store(tmp_path):
    """That server on a free loopback port, over a folder of its own: the variables that point a job at it."""
    from lakehouse.services.process import free_port, port_answers
    from lakehouse.storage.java import maven_central_jar

    port, folder = free_port(), tmp_path / "old-s3"
    (folder / "data").mkdir(parents=True)
    properties = {
        "s3proxy.endpoint": f"http://127.0.0.1:{port}",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": "old-key",
        "s3proxy.credential": "old-secret",
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": str(folder / "data"),
    }
    (folder / "s3proxy.properties").write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    command = ["java", "-Xmx128m", "-jar", maven_central_jar(UNCONDITIONAL_S3), "--properties", "s3proxy.properties"]
    with (folder / "s3proxy.log").open("w") as log:
        server = subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not port_answers(port):
            assert server.poll() is None and time.monotonic() < deadline, (folder / "s3proxy.log").read_text()
            time.sleep(0.2)
        yield {
            "LAKEHOUSE_S3_ENDPOINT": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "old-key",
            "AWS_SECRET_ACCESS_KEY": "old-secret",
            "LAKEHOUSE_WAREHOUSE_URI": "s3a://tables/warehouse",
            "LAKEHOUSE_CHECKPOINT_URI": "s3a://tables/checkpoints",
        }
    finally:
        server.terminate()
        server.wait(15)


def lakehouse(capsys, *arguments: str) -> tuple[int, str, str]:
    """``lakehouse <arguments>`` in this process, as a user types it: its exit code, what it printed,
    and the error line it printed (if any)."""
    capsys.readouterr()
    code = main(list(arguments))
    printed = capsys.readouterr()
    return code, printed.out, printed.err.strip()


def change_log(folder: Path) -> Path:
    """A change log of dim.bridges: one bridge."""
    change = {"bridge_id": "bridge-01", "name": "Ferry", "region": "south", "zone": "s1"}
    path = folder / "bridges.jsonl"
    path.write_text(json.dumps({**change, "valid_from": "2026-01-05T00:00:00Z"}) + "\n")
    return path


@pytest.mark.services
def test_a_job_refuses_conditional_commits_on_a_store_that_cannot_write_conditionally(
    unconditional_store, monkeypatch, capsys, tmp_path
):
    """The probe's refusal, through the CLI as a user meets it: one line, before Spark starts or
    delta-rs commits (`dim apply` writes through delta-rs alone), and nothing left in the bucket; the
    single-driver opt-in passes the probe by."""
    env = {**os.environ, **unconditional_store, "LAKEHOUSE_HOME": str(tmp_path / "home")}
    for name in (*unconditional_store, "LAKEHOUSE_HOME"):
        monkeypatch.setenv(name, env[name])
    code, _, error = lakehouse(capsys, "dim", "apply", str(change_log(tmp_path)))
    assert code == 2 and "does not honour conditional writes (If-None-Match: " in error and "\n" not in error, error
    assert "it accepts the header and a second PUT of an object replaced the first" in error
    stream = [sys.executable, "-m", "lakehouse.cli", "stream", "--available-now"]
    refused = subprocess.run(stream, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    message = refused.stderr.strip()
    assert "does not honour conditional writes (If-None-Match: " in message and "single-driver" in message, message
    assert "\n" not in message and "Traceback" not in message
    settings = make_settings(tmp_path / "home", **unconditional_store)
    s3 = object_store.client(settings)
    assert s3.list_objects_v2(Bucket="tables").get("KeyCount", 0) == 0  # the probe's object deleted, no table made
    for _ in range(2):  # asked once per process, refused every time
        with pytest.raises(LakehouseError, match="does not honour"):
            conditional_writes.check_store(settings)
    opted_out = make_settings(tmp_path / "home", **unconditional_store, LAKEHOUSE_S3_COMMITS="single-driver")
    conditional_writes.check_store(opted_out)


def _drivers_env(object_store_env: dict[str, str], tmp_path, **commit_settings) -> dict[str, str]:
    return {
        **os.environ,
        **object_store_env,
        **commit_settings,
        "LAKEHOUSE_HOME": str(tmp_path / "home"),
        "LAKEHOUSE_SPARK_MASTER": "local[1]",
    }


@pytest.mark.services
@pytest.mark.slow
def test_two_spark_drivers_and_delta_rs_racing_conditional_commits_to_one_s3_table_lose_none(
    spark, object_store_env, tmp_path
):
    writers = ("a", "b", DELTA_RS)
    result = measured(spark, _drivers_env(object_store_env, tmp_path), tmp_path, ROUNDS, writers)
    assert result["rows_missing"] == [] and result["commits_missing"] == [], result
    assert result["commit_files"] == 1 + len(writers) * ROUNDS, result
    # The AWS SDK's bundle logs through the drivers' Log4j (the platform's SLF4J binding for it),
    # instead of printing that it found none.
    printed = [Path(driver["stderr"]).read_text() for driver in result["drivers"]]
    assert not [line for text in printed for line in text.splitlines() if line.startswith("SLF4J")], printed


@pytest.mark.services
def test_jobs_starting_together_on_a_new_store_all_find_their_bucket(object_store_env, tmp_path):
    # The chaos race's first run on S3 lost a backfill this way: both backfills found the bucket
    # missing, and the second creation answered BucketAlreadyOwnedByYou.
    import threading

    from lakehouse.settings import Settings
    from lakehouse.storage import object_store

    settings = Settings.from_env(object_store_env)
    failures = []
    for round_number in range(3):
        bucket, starting = (
            f"together-{tmp_path.name[-8:]}-{round_number}".lower().replace("_", "-"),
            threading.Barrier(6),
        )

        def start_job(bucket=bucket, starting=starting):
            s3 = object_store.client(settings)
            starting.wait()
            try:
                object_store.ensure_bucket(s3, bucket)
            except Exception as error:  # noqa: BLE001 (the failure is the finding)
                failures.append(repr(error))

        jobs = [threading.Thread(target=start_job) for _ in range(6)]
        for job in jobs:
            job.start()
        for job in jobs:
            job.join()
    assert failures == []


@pytest.mark.services
def test_commands_without_a_jvm_create_a_new_bucket_and_name_what_the_store_refused_in_one_line(
    object_store_env, monkeypatch, capsys, tmp_path
):
    """`status` and `dim apply` read and write through delta-rs alone, which creates no bucket: on a
    bucket nothing created yet, status reads what an empty local warehouse gives and dim apply
    writes the dimension. A store that refuses them (a wrong secret here) gets one line, whether
    boto3's first request in the process meets the refusal or a delta-rs request does."""
    for name, value in {**object_store_env, "LAKEHOUSE_HOME": str(tmp_path / "home")}.items():
        monkeypatch.setenv(name, value)
    empty_locally = lakehouse(capsys, "status")
    read, written, refused = (f"new-{uuid.uuid4().hex[:12]}" for _ in range(3))

    monkeypatch.setenv("LAKEHOUSE_WAREHOUSE_URI", f"s3a://{read}/warehouse")
    assert lakehouse(capsys, "status") == empty_locally
    assert empty_locally[0] == 0 and "0 micro-batches, 0 records read" in empty_locally[1]

    monkeypatch.setenv("LAKEHOUSE_WAREHOUSE_URI", f"s3a://{written}/warehouse")
    code, printed, error = lakehouse(capsys, "dim", "apply", str(change_log(tmp_path)))
    assert (code, error) == (0, "") and "dim.bridges: 1 change(s) applied" in printed
    s3 = object_store.client(make_settings(tmp_path / "home", **object_store_env))
    assert s3.list_objects_v2(Bucket=written, Prefix="warehouse/dim/bridges/_delta_log/")["KeyCount"] >= 1

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    monkeypatch.setenv("LAKEHOUSE_WAREHOUSE_URI", f"s3a://{read}/warehouse")  # known to this process: delta-rs asks
    code, _, error = lakehouse(capsys, "status")
    assert code == 2 and error.startswith("lakehouse: error: S3 request failed: GET ") and "\n" not in error, error
    assert "403 Forbidden (SignatureDoesNotMatch)" in error
    monkeypatch.setenv("LAKEHOUSE_WAREHOUSE_URI", f"s3a://{refused}/warehouse")  # new here: boto3 asks first
    code, _, error = lakehouse(capsys, "status")
    assert code == 2 and error.startswith(f"lakehouse: error: S3 bucket {refused} at ") and "\n" not in error, error
    assert "403" in error


def test_a_store_that_does_not_answer_is_one_line_naming_the_bucket():
    """boto3's own failures (no connection here, a closed port, asked once) end a command with one
    line too: bucket set-up is most processes' first request to the store."""
    import boto3
    from botocore.config import Config

    from lakehouse.services.process import free_port

    endpoint = f"http://127.0.0.1:{free_port()}"
    once = Config(retries={"max_attempts": 1})
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
        config=once,
    )
    with pytest.raises(LakehouseError, match=f"S3 bucket lake at {endpoint}: Could not connect") as refused:
        object_store.ensure_bucket(s3, "lake")
    assert "\n" not in str(refused.value)
