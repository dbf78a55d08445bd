"""Spark's commits to s3a:// tables, several drivers at once (lakehouse.storage.commits,
docs/operations.md "Object storage"): two driver processes race their commits to one table on the
project's S3 server, through Delta's DynamoDB log store on the project's DynamoDB server, and
nothing they committed is lost. A session that would commit without it refuses to start.

CI races a few rounds; `make chaos` races 100 (tests/s3_commit_race.py), and measures the same
race through Delta's single-driver log store, which loses commits."""

from __future__ import annotations

import os

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.storage import commits
from lakehouse.storage.spark import build_spark_session
from tests.conftest import make_settings
from tests.s3_commit_race import claims, measured

ROUNDS = int(os.environ.get("LAKEHOUSE_COMMIT_RACE_ROUNDS", "4"))


def test_a_session_with_an_s3_endpoint_and_no_commit_table_refuses_to_start(tmp_path):
    settings = make_settings(tmp_path, LAKEHOUSE_S3_ENDPOINT="http://127.0.0.1:9")
    with pytest.raises(LakehouseError, match="LAKEHOUSE_S3_COMMIT_TABLE") as refused:
        build_spark_session(settings, "refused")
    assert "\n" not in str(refused.value) and "LAKEHOUSE_S3_COMMITS=single-driver" in str(refused.value)


def test_the_single_driver_opt_in_and_the_commit_table_choose_the_log_store(tmp_path):
    single = make_settings(tmp_path, LAKEHOUSE_S3_ENDPOINT="http://s3:9000", LAKEHOUSE_S3_COMMITS="single-driver")
    assert commits.spark_confs(single, "us-east-1") == {
        "spark.delta.logStore.s3a.impl": commits.SINGLE_DRIVER_LOG_STORE
    }
    assert commits.session_jars(single) == []
    ordered = make_settings(
        tmp_path,
        LAKEHOUSE_S3_ENDPOINT="http://s3:9000",
        LAKEHOUSE_S3_COMMIT_TABLE="t",
        LAKEHOUSE_S3_COMMIT_ENDPOINT="http://d:8000",
    )
    confs = commits.spark_confs(ordered, "eu-west-1")
    assert confs["spark.delta.logStore.s3a.impl"] == commits.LOG_STORE
    assert confs[f"{commits.PREFIX}.ddb.tableName"] == "t" and confs[f"{commits.PREFIX}.ddb.region"] == "eu-west-1"
    assert confs[f"{commits.PREFIX}.ddb.endpoint"] == "http://d:8000"
    with pytest.raises(LakehouseError, match="LAKEHOUSE_S3_COMMITS must be one of"):
        make_settings(tmp_path, LAKEHOUSE_S3_COMMITS="hope")


@pytest.mark.services
@pytest.mark.slow
def test_two_drivers_racing_their_commits_to_one_s3_table_lose_none(spark, object_store_env, tmp_path):
    env = {
        **os.environ,
        **object_store_env,
        "LAKEHOUSE_HOME": str(tmp_path / "home"),
        "LAKEHOUSE_SPARK_MASTER": "local[1]",
    }
    result = measured(spark, env, tmp_path, ROUNDS)
    assert result["rows_missing"] == [] and result["commits_missing"] == [], result
    assert result["commit_files"] == 1 + 2 * ROUNDS, result
    # Every commit of the race, and the table's creation, went through the DynamoDB table.
    assert claims(env, f"s3a://commit-race/{tmp_path.name}/t") == 1 + 2 * ROUNDS
