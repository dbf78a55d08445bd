"""The services' files, ports and routing, without starting them: plain Python, no JVM."""

from __future__ import annotations

import contextlib
import os
import socket
import xml.etree.ElementTree as ET

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.services import cluster, kafka
from lakehouse.services.process import claim_port, saved_port
from lakehouse.services.spark_service import ServiceState, _service_environment, connect_url, status
from lakehouse.serving.server import endpoint_confs, hive_site
from lakehouse.settings import Settings
from lakehouse.vocabulary import ClusterRole


def _settings(tmp_path, **env) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home"), **env})


def test_hive_site_carries_the_metastore_connection_with_its_characters_escaped(tmp_path):
    settings = _settings(
        tmp_path,
        LAKEHOUSE_METASTORE_URL="jdbc:postgresql://127.0.0.1:5432/metastore",
        LAKEHOUSE_METASTORE_USER="metastore",
        LAKEHOUSE_METASTORE_PASSWORD="a<b&c>'d\"",
    )
    root = ET.fromstring(hive_site(settings))
    properties = {p.findtext("name"): p.findtext("value") for p in root.iter("property")}

    assert properties["javax.jdo.option.ConnectionURL"] == "jdbc:postgresql://127.0.0.1:5432/metastore"
    assert properties["javax.jdo.option.ConnectionPassword"] == "a<b&c>'d\""
    assert properties["datanucleus.schema.autoCreateTables"] == "true"
    assert properties["datanucleus.schema.autoCreateConstraints"] == "false"


def test_sql_runs_embedded_when_no_service_is_up_or_the_route_says_so(tmp_path):
    assert connect_url(_settings(tmp_path)) is None
    assert connect_url(_settings(tmp_path, LAKEHOUSE_SQL_ROUTE="embedded")) is None
    assert connect_url(_settings(tmp_path, LAKEHOUSE_SQL_ROUTE="sc://db:15002")) == "sc://db:15002"


def test_a_state_file_left_by_a_dead_service_does_not_count_as_up(tmp_path):
    settings = _settings(tmp_path)
    files = ServiceState.of(settings)
    files.folder.mkdir(parents=True)
    (files.folder / "server.pid").write_text("999999999")
    files.write_ready(999999999, ["gold.toll_traffic"])

    assert status(settings) == {"up": False, "pid": None, "log": str(files.log)}
    assert connect_url(settings) is None


def test_a_service_keeps_the_port_it_was_set_up_on_and_refuses_another_or_a_taken_one(tmp_path):
    first = claim_port(tmp_path, None, "LAKEHOUSE_S3_PORT", "S3 server")
    assert saved_port(tmp_path) == first and claim_port(tmp_path, None, "LAKEHOUSE_S3_PORT", "S3 server") == first
    assert claim_port(tmp_path, first, "LAKEHOUSE_S3_PORT", "S3 server") == first
    with pytest.raises(
        LakehouseError, match=f"this home's S3 server was set up on port {first}: set LAKEHOUSE_S3_PORT={first}"
    ):
        claim_port(tmp_path, first + 1, "LAKEHOUSE_S3_PORT", "S3 server")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        with pytest.raises(LakehouseError, match=f"port {taken} is taken"):
            claim_port(tmp_path / "other", taken, "LAKEHOUSE_DYNAMODB_PORT", "DynamoDB server")
    assert saved_port(tmp_path / "other") is None


# Another loopback address: a service bound to it does not answer on 127.0.0.1, as one bound to a
# host's address in a deployment across hosts does not (tests/test_hosts.py runs that).
ELSEWHERE = "127.0.0.2"


def test_the_spark_service_binds_both_endpoints_and_its_ui_to_the_bind_address(tmp_path):
    bound = _settings(tmp_path, LAKEHOUSE_BIND_ADDRESS="10.77.0.8")
    assert endpoint_confs(bound)["spark.connect.grpc.binding.address"] == "10.77.0.8"
    assert endpoint_confs(bound)["spark.hadoop.hive.server2.thrift.bind.host"] == "10.77.0.8"
    assert _service_environment(bound)["SPARK_LOCAL_IP"] == "10.77.0.8"  # its UI, with Spark's metrics
    assert set(endpoint_confs(_settings(tmp_path)).values()) >= {"127.0.0.1"}  # one machine: loopback


def test_a_spark_service_up_on_the_bind_address_is_up_there_and_named_there(tmp_path):
    settings = _settings(tmp_path, LAKEHOUSE_BIND_ADDRESS=ELSEWHERE)
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(2):  # its two endpoints
            listener = stack.enter_context(socket.socket())
            listener.bind((ELSEWHERE, 0))
            listener.listen()
            ports.append(listener.getsockname()[1])
        files = ServiceState(settings.service_dir(), *ports, ELSEWHERE)
        files.folder.mkdir(parents=True)
        (files.folder / "server.pid").write_text(str(os.getpid()))
        files.write_ready(os.getpid(), [])
        report = status(settings)
    assert report["up"] and report["connect"] == f"sc://{ELSEWHERE}:{ports[0]}"
    assert report["jdbc"] == f"jdbc:hive2://{ELSEWHERE}:{ports[1]}/default"


def test_the_cluster_daemons_bind_to_the_bind_address(tmp_path):
    master = cluster.master_arguments("10.77.0.5", 7077, 8080)
    worker = cluster.worker_arguments("10.77.0.6", "spark://10.77.0.5:7077", 8081, tmp_path)
    assert master[master.index("--host") + 1] == "10.77.0.5" and master[master.index("--port") + 1] == "7077"
    assert worker[worker.index("--host") + 1] == "10.77.0.6" and worker[-1] == "spark://10.77.0.5:7077"
    assert cluster.daemon_environment(tmp_path, "10.77.0.6")["SPARK_LOCAL_IP"] == "10.77.0.6"


def test_a_worker_alone_registers_with_the_master_the_settings_name_or_starts_nothing(tmp_path, monkeypatch, capsys):
    from lakehouse.cli import main

    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAKEHOUSE_SPARK_MASTER", "local[2]")
    assert main(["cluster", "start", "--role", "worker"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("lakehouse: error: a worker registers with a master: set LAKEHOUSE_SPARK_MASTER=spark://")
    assert error.count("\n") == 1 and not (tmp_path / "home").exists()
    assert main(["cluster", "status", "--role", "master"]) == 2
    assert "--role is for start" in capsys.readouterr().err


def test_a_clusters_role_is_read_from_the_daemons_its_home_started():
    assert cluster.role_of({}) is None
    assert cluster.role_of({"master": 1, "worker-1": 2, "worker-2": 3}) is ClusterRole.ALL
    assert cluster.role_of({"master": 1}) is ClusterRole.MASTER
    assert cluster.role_of({"worker": 2}) is ClusterRole.WORKER


def test_a_driver_binds_to_its_hosts_address_and_to_loopback_on_one_machine(tmp_path):
    from lakehouse.storage.spark import driver_address

    on_host = _settings(
        tmp_path, LAKEHOUSE_BIND_ADDRESS="10.77.0.10", LAKEHOUSE_SPARK_MASTER="spark://spark-master:7077"
    )
    assert driver_address(on_host) == "10.77.0.10"
    assert driver_address(_settings(tmp_path)) == "127.0.0.1"  # local[2]
    assert driver_address(_settings(tmp_path, LAKEHOUSE_SPARK_MASTER="spark://127.0.0.1:7077")) == "127.0.0.1"
    assert driver_address(_settings(tmp_path, LAKEHOUSE_SPARK_MASTER="spark://spark-master:7077")) is None


def test_a_kafka_broker_set_up_on_one_address_is_found_there_and_refuses_to_start_on_another(tmp_path):
    settings = _settings(tmp_path)
    files = kafka.BrokerFiles(settings.kafka_dir())
    files.folder.mkdir(parents=True)
    files.write_configuration(ELSEWHERE, 9092, 9093)
    properties = dict(line.split("=", 1) for line in files.properties.read_text().splitlines())
    assert properties["listeners"] == f"PLAINTEXT://{ELSEWHERE}:9092,CONTROLLER://{ELSEWHERE}:9093"
    assert properties["controller.quorum.bootstrap.servers"] == f"{ELSEWHERE}:9093"
    with pytest.raises(LakehouseError, match=f"set up on {ELSEWHERE}: set LAKEHOUSE_BIND_ADDRESS={ELSEWHERE}$"):
        kafka.start(settings)
