"""Spark's commits to s3a:// tables, several writers at once (lakehouse.storage.commits,
docs/operations.md "Object storage"): driver processes race their commits to one table on the
project's S3 server, and nothing they committed is lost.

- By default Spark commits with S3's conditional writes, as delta-rs does: two Spark drivers and a
  delta-rs writer race each round's commit.
- Through Delta's DynamoDB log store (LAKEHOUSE_S3_COMMITS=dynamodb), each commit is also claimed in
  the project's DynamoDB server.

CI races a few rounds; `make chaos` races 100 (tests/s3_commit_race.py), and measures the same race
through Delta's single-driver log store, which loses commits.
"""

from __future__ import annotations

import os

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.storage import commits
from lakehouse.storage.spark import build_spark_session
from tests.conftest import make_settings
from tests.s3_commit_race import DELTA_RS, claims, measured

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


@pytest.mark.services
@pytest.mark.slow
def test_two_spark_drivers_racing_through_the_dynamodb_log_store_lose_none(spark, object_store_env, tmp_path):
    env = _drivers_env(object_store_env, tmp_path, LAKEHOUSE_S3_COMMITS="dynamodb")
    result = measured(spark, env, tmp_path, ROUNDS)
    assert result["rows_missing"] == [] and result["commits_missing"] == [], result
    assert result["commit_files"] == 1 + 2 * ROUNDS, result
    # Every commit of the race went through the DynamoDB table (the table's creation, by the
    # conditional test session, did not).
    assert claims(env, f"s3a://commit-race/{tmp_path.name}/t") == 2 * ROUNDS


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
