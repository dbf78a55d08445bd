"""docker/compose.yaml runs what the tests run: the same settings names, versions and broker
configuration. Nothing here starts a container (no Docker engine in CI): it reads the file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from lakehouse.services.kafka import KAFKA_VERSION, BrokerFiles, new_cluster_id
from lakehouse.settings import PROJECT_ROOT, Settings, environment_variables
from lakehouse.storage import commits
from lakehouse.vocabulary import S3Commits

COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker" / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
# The services that run the platform's code, and what each must be told: where the log, tables and
# checkpoints are, which Spark to submit to, and which brokers hold the log.
PLATFORM_SERVICES = ("spark-worker", "speed-layer", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor")
REQUIRED = (
    "LAKEHOUSE_LOG_URI",
    "LAKEHOUSE_WAREHOUSE_URI",
    "LAKEHOUSE_CHECKPOINT_URI",
    "LAKEHOUSE_SPARK_MASTER",
    "LAKEHOUSE_KAFKA_BOOTSTRAP",
    "LAKEHOUSE_S3_ENDPOINT",
    "LAKEHOUSE_S3_COMMITS",
)


def _lakehouse_environment(service: str) -> dict[str, str]:
    environment = SERVICES[service].get("environment") or {}
    # ${VAR:?...} is compose's substitution from docker/.env: any value will do for the settings.
    return {k: re.sub(r"\$\{[^}]*\}", "x", str(v)) for k, v in environment.items() if k.startswith("LAKEHOUSE_")}


@pytest.mark.parametrize("service", PLATFORM_SERVICES)
def test_each_platform_service_sets_what_it_needs_with_values_the_settings_accept(service):
    environment = _lakehouse_environment(service)
    assert set(REQUIRED) <= set(environment), f"{service} lacks {sorted(set(REQUIRED) - set(environment))}"
    settings = Settings.from_env(environment)
    commits.check(settings)
    assert settings.s3_commits == S3Commits.CONDITIONAL  # its Spark commits to s3a:// are conditional PUTs
    assert settings.kafka_bootstrap == "kafka:9092" and settings.spark_master == "spark://spark-master:7077"


def test_compose_names_only_variables_the_settings_read():
    named = set(re.findall(r"\bLAKEHOUSE_[A-Z0-9_]+", (PROJECT_ROOT / "docker" / "compose.yaml").read_text()))
    assert named - set(environment_variables()) == set()


def test_the_kafka_service_runs_the_tested_broker_version_and_configuration(tmp_path: Path):
    kafka = SERVICES["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    files = BrokerFiles(tmp_path)
    files.write_configuration(9092, 9093)
    tested = dict(line.split("=", 1) for line in files.properties.read_text().splitlines())
    # The image reads KAFKA_<PROPERTY> (dots as underscores) for each broker property.
    for key in ("auto.create.topics.enable", "offsets.topic.replication.factor", "transaction.state.log.min.isr"):
        assert str(kafka["environment"]["KAFKA_" + key.upper().replace(".", "_")]) == tested[key], key


def test_the_s3a_jars_match_the_hadoop_that_pyspark_ships():
    from pyspark.find_spark_home import _find_spark_home

    from lakehouse.storage.object_store import S3A_JARS

    hadoop = next(c for c in S3A_JARS if c.startswith("org.apache.hadoop:hadoop-aws:")).rsplit(":", 1)[1]
    assert list((Path(_find_spark_home()) / "jars").glob(f"hadoop-client-api-{hadoop}.jar")), hadoop


def test_no_kafka_cluster_id_starts_with_a_dash_which_the_storage_tool_would_read_as_an_option():
    ids = [new_cluster_id() for _ in range(2000)]  # one in 64 would, drawn blindly
    assert not [cluster_id for cluster_id in ids if cluster_id.startswith("-")]
    assert {len(cluster_id) for cluster_id in ids} == {22} and len(set(ids)) == len(ids)
